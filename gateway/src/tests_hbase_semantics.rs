//! Versions, empty qualifiers, counters, appends, check-and-put and reversed scans, over a real
//! socket (framed transport, compact protocol) against HBase's answers.

use std::time::Duration;

use hbase_thrift::hbase::{
    ColumnDescriptor, HbaseSyncClient, IllegalArgument, TAppend, THbaseSyncClient, TIncrement,
    TScan,
};
use thrift::protocol::{TCompactInputProtocol, TCompactOutputProtocol};
use thrift::transport::{TFramedReadTransport, TFramedWriteTransport, TIoChannel, TTcpChannel};

use crate::DEFAULT_SCANNER_LEASE;
use crate::tests::{FramedCompactClient, full_scan, io_message, no_attributes, put, start};

const T: &[u8] = b"sem";

fn t() -> Vec<u8> {
    T.to_vec()
}

/// Creates `sem` with family `v` keeping 3 versions and `one` keeping 1.
fn create(client: &mut FramedCompactClient) {
    let family = |name: &str, versions: i32| ColumnDescriptor {
        name: Some(name.as_bytes().to_vec()),
        max_versions: Some(versions),
        ..ColumnDescriptor::default()
    };
    client
        .create_table(t(), vec![family("v:", 3), family("one:", 1)])
        .expect("creates");
}

fn values(cells: &[hbase_thrift::hbase::TCell]) -> Vec<(String, i64)> {
    cells
        .iter()
        .map(|cell| {
            (
                String::from_utf8(cell.value.clone().unwrap_or_default()).expect("utf-8"),
                cell.timestamp.unwrap_or(-1),
            )
        })
        .collect()
}

fn put_at(client: &mut FramedCompactClient, row: &str, column: &str, value: &str, ts: i64) {
    client
        .mutate_row_ts(
            t(),
            row.as_bytes().to_vec(),
            vec![put(column, value)],
            ts,
            no_attributes(),
        )
        .expect("puts");
}

#[test]
fn versions_answer_reads_at_a_timestamp_and_get_ver_as_hbase_does() {
    let mut fixture = start(None, DEFAULT_SCANNER_LEASE, 10);
    let client = &mut fixture.client;
    create(client);
    let descriptors = client.get_column_descriptors(t()).expect("descriptors");
    assert_eq!(descriptors[&b"v:".to_vec()].max_versions, Some(3));
    assert_eq!(descriptors[&b"one:".to_vec()].max_versions, Some(1));
    for (ts, value) in [(20, "b"), (10, "a"), (40, "d"), (30, "c")] {
        put_at(client, "r", "v:a", value, ts);
        put_at(client, "r", "one:a", value, ts);
    }
    let get_ver = |client: &mut FramedCompactClient, column: &str, versions: i32| {
        let cells = client
            .get_ver(
                t(),
                b"r".to_vec(),
                column.as_bytes().to_vec(),
                versions,
                no_attributes(),
            )
            .expect("getVer");
        values(&cells)
    };
    assert_eq!(
        get_ver(client, "v:a", 10),
        [("d".into(), 40), ("c".into(), 30), ("b".into(), 20)],
        "VERSIONS => 3: the oldest went"
    );
    assert_eq!(get_ver(client, "v:a", 2).len(), 2);
    assert_eq!(get_ver(client, "one:a", 10), [("d".into(), 40)]);
    let cells = client
        .get_ver_ts(t(), b"r".to_vec(), b"v:a".to_vec(), 40, 5, no_attributes())
        .expect("getVerTs");
    assert_eq!(values(&cells), [("c".into(), 30), ("b".into(), 20)]);
    // A read at T: the newest version older than T, per column.
    let row = client
        .get_row_ts(t(), b"r".to_vec(), 35, no_attributes())
        .expect("getRowTs");
    let columns = row[0].columns.clone().expect("columns");
    assert_eq!(columns[&b"v:a".to_vec()].value.as_deref(), Some(&b"c"[..]));
    assert!(
        !columns.contains_key(b"one:a".as_slice()),
        "one version: none older"
    );
    let id = client
        .scanner_open_ts(t(), Vec::new(), vec![b"v".to_vec()], 25, no_attributes())
        .expect("scannerOpenTs");
    let rows = client.scanner_get_list(id, 10).expect("scans");
    assert_eq!(
        rows[0].columns.as_ref().expect("columns")[&b"v:a".to_vec()].timestamp,
        Some(20)
    );
    client.scanner_close(id).expect("closes");
    // deleteAllTs masks the versions at or below it.
    client
        .delete_all_ts(t(), b"r".to_vec(), b"v:a".to_vec(), 30, no_attributes())
        .expect("deletes");
    assert_eq!(get_ver(client, "v:a", 10), [("d".into(), 40)]);
    put_at(client, "r", "v:a", "late", 25);
    assert_eq!(get_ver(client, "v:a", 10), [("d".into(), 40)], "masked");
    let error = client
        .get_ver(t(), b"r".to_vec(), b"v:a".to_vec(), 0, no_attributes())
        .unwrap_err();
    assert!(io_message(error).contains("numVersions 0"));
    // maxVersions must be positive, as in HBase.
    let bad = ColumnDescriptor {
        name: Some(b"x:".to_vec()),
        max_versions: Some(0),
        ..ColumnDescriptor::default()
    };
    let error = client.create_table(b"bad".to_vec(), vec![bad]).unwrap_err();
    let message = match &error {
        thrift::Error::User(user) => user
            .downcast_ref::<IllegalArgument>()
            .and_then(|ia| ia.message.clone())
            .unwrap_or_default(),
        _ => String::new(),
    };
    assert!(message.contains("maxVersions 0"), "{error:?}");
}

#[test]
fn the_empty_qualifier_is_a_column_and_a_bare_family_the_family() {
    let mut fixture = start(None, DEFAULT_SCANNER_LEASE, 10);
    let client = &mut fixture.client;
    create(client);
    put_at(client, "r", "v:", "empty", 5);
    put_at(client, "r", "v:q", "q", 5);
    let cells = client
        .get(t(), b"r".to_vec(), b"v:".to_vec(), no_attributes())
        .expect("get");
    assert_eq!(values(&cells), [("empty".into(), 5)]);
    let row = client
        .get_row_with_columns(t(), b"r".to_vec(), vec![b"v".to_vec()], no_attributes())
        .expect("family");
    assert_eq!(row[0].columns.as_ref().expect("columns").len(), 2);
    client
        .delete_all(t(), b"r".to_vec(), b"v:".to_vec(), no_attributes())
        .expect("deletes the empty qualifier only");
    let row = client
        .get_row(t(), b"r".to_vec(), no_attributes())
        .expect("row");
    let columns: Vec<Vec<u8>> = row[0]
        .columns
        .clone()
        .expect("columns")
        .into_keys()
        .collect();
    assert_eq!(columns, [b"v:q".to_vec()]);
}

fn counter(client: &mut FramedCompactClient, amount: i64) -> i64 {
    client
        .atomic_increment(t(), b"c".to_vec(), b"v:n".to_vec(), amount)
        .expect("increments")
}

#[test]
fn counters_appends_and_check_and_put_go_through_the_feed() {
    let mut fixture = start(None, DEFAULT_SCANNER_LEASE, 10);
    let client = &mut fixture.client;
    create(client);
    assert_eq!(counter(client, 0), 0, "a missing counter counts as 0");
    assert_eq!(counter(client, 10), 10);
    assert_eq!(counter(client, -3), 7);
    let increment = |amount| TIncrement::new(t(), b"c".to_vec(), b"v:n".to_vec(), amount);
    client.increment(increment(5)).expect("increment");
    client
        .increment_rows(vec![increment(1), increment(1)])
        .expect("incrementRows");
    assert_eq!(counter(client, 0), 14);
    let stored = client
        .get(t(), b"c".to_vec(), b"v:n".to_vec(), no_attributes())
        .expect("get");
    assert_eq!(stored[0].value.as_deref(), Some(&14i64.to_be_bytes()[..]));
    // A value that isn't 8 bytes is not a counter.
    put_at(client, "c", "v:s", "abc", 1);
    let error = client
        .atomic_increment(t(), b"c".to_vec(), b"v:s".to_vec(), 1)
        .unwrap_err();
    assert!(io_message(error).contains("isn't 64 bits wide"));
    let error = client
        .increment(TIncrement::new(t(), b"c".to_vec(), b"zz:n".to_vec(), 1))
        .unwrap_err();
    assert!(io_message(error).contains("`zz`"));

    let appended = client
        .append(TAppend::new(
            t(),
            b"c".to_vec(),
            vec![b"v:s".to_vec(), b"v:new".to_vec()],
            vec![b"def".to_vec(), b"x".to_vec()],
        ))
        .expect("appends");
    let appended: Vec<Vec<u8>> = appended.into_iter().filter_map(|cell| cell.value).collect();
    assert_eq!(appended, [b"abcdef".to_vec(), b"x".to_vec()]);
    let error = client
        .append(TAppend::new(
            t(),
            b"c".to_vec(),
            vec![b"v:s".to_vec()],
            vec![],
        ))
        .unwrap_err();
    assert!(io_message(error).contains("pair up"));

    let check = |client: &mut FramedCompactClient, expected: &[u8], value: &str| {
        client
            .check_and_put(
                t(),
                b"c".to_vec(),
                b"v:s".to_vec(),
                expected.to_vec(),
                put("v:checked", value),
                no_attributes(),
            )
            .expect("checkAndPut")
    };
    assert!(!check(client, b"abc", "no"));
    assert!(check(client, b"abcdef", "yes"));
    let missing = client
        .check_and_put(
            t(),
            b"c".to_vec(),
            b"v:missing".to_vec(),
            Vec::new(),
            put("v:was_missing", "1"),
            no_attributes(),
        )
        .expect("checkAndPut");
    assert!(missing, "an empty expected value matches a missing cell");
    let row = client
        .get_row(t(), b"c".to_vec(), no_attributes())
        .expect("row");
    let columns = row[0].columns.clone().expect("columns");
    assert_eq!(
        columns[&b"v:checked".to_vec()].value.as_deref(),
        Some(&b"yes"[..])
    );
    assert!(columns.contains_key(b"v:was_missing".as_slice()));

    // On the configured table every one of them is a change-feed event (the index sees it).
    let before = fixture.store.last_offset("people");
    let people = b"app:people".to_vec();
    client
        .atomic_increment(people.clone(), b"k".to_vec(), b"info:n".to_vec(), 2)
        .expect("increments");
    client
        .append(TAppend::new(
            people.clone(),
            b"k".to_vec(),
            vec![b"info:phone".to_vec()],
            vec![b"138".to_vec()],
        ))
        .expect("appends");
    client
        .check_and_put(
            people,
            b"k".to_vec(),
            b"info:phone".to_vec(),
            b"138".to_vec(),
            put("info:phone", "13800138000"),
            no_attributes(),
        )
        .expect("checks");
    assert_eq!(fixture.store.last_offset("people"), before + 3);
}

#[test]
fn concurrent_increments_from_many_connections_lose_nothing() {
    const CLIENTS: i64 = 4;
    const INCREMENTS: i64 = 100;
    let mut fixture = start(None, DEFAULT_SCANNER_LEASE, 10);
    create(&mut fixture.client);
    let addr = fixture.addr;
    let threads: Vec<_> = (0..CLIENTS)
        .map(|_| {
            std::thread::spawn(move || {
                let mut channel = TTcpChannel::new();
                channel.open(addr).expect("connects");
                let (read, write) = channel.split().expect("split");
                let mut client = HbaseSyncClient::new(
                    TCompactInputProtocol::new(TFramedReadTransport::new(read)),
                    TCompactOutputProtocol::new(TFramedWriteTransport::new(write)),
                );
                for _ in 0..INCREMENTS {
                    counter(&mut client, 1);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("joins");
    }
    assert_eq!(counter(&mut fixture.client, 0), CLIENTS * INCREMENTS);
}

#[test]
fn reversed_scans_keep_hbase_order_and_bounds() {
    let mut fixture = start(None, Duration::from_secs(60), 10);
    let client = &mut fixture.client;
    create(client);
    for i in 0..8 {
        put_at(client, &format!("r{i}"), "v:a", "x", 1);
    }
    let keys = |client: &mut FramedCompactClient, scan: TScan| {
        let id = client
            .scanner_open_with_scan(t(), scan, no_attributes())
            .expect("opens");
        let mut keys = Vec::new();
        loop {
            let page = client.scanner_get_list(id, 3).expect("pages");
            if page.is_empty() {
                break;
            }
            keys.extend(
                page.into_iter()
                    .map(|result| String::from_utf8(result.row.unwrap_or_default()).unwrap()),
            );
        }
        client.scanner_close(id).expect("closes");
        keys
    };
    let reversed = |start: &str, stop: Option<&str>| TScan {
        start_row: Some(start.as_bytes().to_vec()),
        stop_row: stop.map(|stop| stop.as_bytes().to_vec()),
        reversed: Some(true),
        ..full_scan(None, false)
    };
    let all: Vec<String> = (0..8).rev().map(|i| format!("r{i}")).collect();
    assert_eq!(keys(client, reversed("", None)), all);
    assert_eq!(
        keys(client, reversed("r6", Some("r2"))),
        ["r6", "r5", "r4", "r3"]
    );
    assert!(keys(client, reversed("r2", Some("r6"))).is_empty());
}

/// A framed reply goes out in two writes (its length, then its body); with Nagle on, the body
/// waits for the client's delayed ACK, 40 ms per call on Linux. 50 calls took over 2 s so. (The
/// client sets no-delay too, as happybase's does: thrift's framed writer splits requests alike.)
#[test]
fn framed_replies_are_not_held_back_by_nagle() {
    let fixture = start(None, DEFAULT_SCANNER_LEASE, 10);
    let stream = std::net::TcpStream::connect(fixture.addr).expect("connects");
    stream.set_nodelay(true).expect("no delay");
    let (read, write) = TTcpChannel::with_stream(stream).split().expect("split");
    let mut client = HbaseSyncClient::new(
        TCompactInputProtocol::new(TFramedReadTransport::new(read)),
        TCompactOutputProtocol::new(TFramedWriteTransport::new(write)),
    );
    let started = std::time::Instant::now();
    for _ in 0..50 {
        client.get_table_names().expect("names");
    }
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1200), "50 calls took {took:?}");
}
