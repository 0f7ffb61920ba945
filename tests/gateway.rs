//! The HBase Thrift1 gateway (`--thrift-listen`) of the real `hbidx serve` binary, over real
//! sockets: happybase (the common third-party Python client) and hbase-thrift's Rust client,
//! and the rows they write found again by hbidx's lookups over HTTP.

mod util;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use hbase_thrift::hbase::{
    BatchMutation, ColumnDescriptor, HbaseSyncClient, IOError, IllegalArgument, Mutation,
    THbaseSyncClient, TRowResult, TScan,
};
use hbidx_demo::people::idcard_born as idcard;
use serde_json::{Value, json};
use thrift::protocol::{TBinaryInputProtocol, TBinaryOutputProtocol};
use thrift::transport::{
    ReadHalf, TBufferedReadTransport, TBufferedWriteTransport, TIoChannel, TTcpChannel, WriteHalf,
};
use util::{Server, eventually, get, keys};

type Client = HbaseSyncClient<
    TBinaryInputProtocol<TBufferedReadTransport<ReadHalf<TTcpChannel>>>,
    TBinaryOutputProtocol<TBufferedWriteTransport<WriteHalf<TTcpChannel>>>,
>;

/// A client as HBase's own Thrift server expects it: buffered transport, binary protocol.
fn connect(addr: SocketAddr) -> Client {
    let mut channel = TTcpChannel::new();
    channel.open(addr).expect("connects to the gateway");
    let (read, write) = channel.split().expect("splits the channel");
    HbaseSyncClient::new(
        TBinaryInputProtocol::new(TBufferedReadTransport::new(read), true),
        TBinaryOutputProtocol::new(TBufferedWriteTransport::new(write), true),
    )
}

/// The message of an `IOError` answer; panics on anything else.
fn io_message(error: thrift::Error) -> String {
    match &error {
        thrift::Error::User(user) => match user.downcast_ref::<IOError>() {
            Some(io) => io.message.clone().unwrap_or_default(),
            None => panic!("expected an IOError, got {error:?}"),
        },
        _ => panic!("expected an IOError, got {error:?}"),
    }
}

fn illegal_argument_message(error: thrift::Error) -> String {
    match &error {
        thrift::Error::User(user) => match user.downcast_ref::<IllegalArgument>() {
            Some(ia) => ia.message.clone().unwrap_or_default(),
            None => panic!("expected an IllegalArgument, got {error:?}"),
        },
        _ => panic!("expected an IllegalArgument, got {error:?}"),
    }
}

/// The rowkey hbidx's codec computes for a natural key of the `user` table, in hex.
fn user_rowkey_hex(server: &Server, key: &str) -> String {
    let (status, body) = get(&server.url(&format!("/v1/tables/user/rowkey?key={key}")));
    assert_eq!(status, 200, "{body}");
    body["rowkeys_hex"][0]
        .as_str()
        .expect("a rowkey")
        .to_string()
}

fn put(column: &str, value: &str) -> Mutation {
    Mutation::new(
        false,
        column.as_bytes().to_vec(),
        value.as_bytes().to_vec(),
        true,
    )
}

/// A `TScan` with only what is given set. `TScan::default()` is no base: it sets
/// `timestamp: Some(0)`, which (as in HBase) matches no cell at all.
fn scan(start: &str, stop: &str, caching: Option<i32>, timestamp: Option<i64>) -> TScan {
    TScan {
        start_row: Some(start.as_bytes().to_vec()),
        stop_row: Some(stop.as_bytes().to_vec()),
        timestamp,
        columns: None,
        caching,
        filter_string: None,
        batch_size: None,
        sort_columns: None,
        reversed: None,
        cache_blocks: None,
    }
}

fn cells(result: &TRowResult) -> BTreeMap<String, (String, i64)> {
    result
        .columns
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(column, cell)| {
            (
                String::from_utf8(column).unwrap(),
                (
                    String::from_utf8(cell.value.unwrap_or_default()).unwrap(),
                    cell.timestamp.unwrap_or(-1),
                ),
            )
        })
        .collect()
}

fn row_keys(results: &[TRowResult]) -> Vec<String> {
    results
        .iter()
        .map(|result| String::from_utf8(result.row.clone().unwrap_or_default()).unwrap())
        .collect()
}

fn no_attributes() -> BTreeMap<Vec<u8>, Vec<u8>> {
    BTreeMap::new()
}

/// Waits until a phone lookup over HTTP returns exactly `expected` natural keys.
fn wait_for_phone(server: &Server, phone: &str, expected: &[&str]) -> Value {
    let url = server.url(&format!("/v1/tables/user/rows?phone={phone}"));
    eventually(
        &format!("lookup by phone to find {expected:?}"),
        Duration::from_secs(20),
        || {
            let (status, body) = get(&url);
            (status == 200 && keys(&body) == expected).then_some(body)
        },
    )
}

/// A happybase script's report: every line of `required` printed, the summary line (`summary`
/// then the count) agreeing with the `ok` lines, and at least `at_least` checks run.
fn expect_checks(stdout: &str, context: &str, summary: &str, required: &[&str], at_least: usize) {
    for line in required {
        assert!(
            stdout.lines().any(|l| l == *line),
            "{context}no `{line}` in:\n{stdout}"
        );
    }
    let passed: usize = stdout
        .lines()
        .find_map(|line| line.strip_prefix(summary))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{context}no summary line in:\n{stdout}"));
    assert_eq!(
        passed,
        stdout.lines().filter(|l| l.starts_with("ok ")).count(),
        "{context}{stdout}"
    );
    assert!(
        passed >= at_least,
        "{context}only {passed} checks ran:\n{stdout}"
    );
}

/// Panics unless python3 has happybase 1.2.0.
fn require_happybase() {
    let check = Command::new("python3")
        .args(["-c", "import happybase; print(happybase.__version__)"])
        .output()
        .expect("python3 runs");
    assert!(
        check.status.success(),
        "happybase is not installed; run `bash scripts/test.sh --setup` \
         (python3 -m pip install happybase==1.2.0): {}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&check.stdout).trim(), "1.2.0");
}

#[test]
#[ignore = "needs happybase 1.2.0 (PyPI): scripts/test.sh installs it and runs it"]
fn happybase_works_against_the_gateway_and_lookups_find_its_rows() {
    require_happybase();

    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with_thrift(&["serve"], dir.path(), &[]);
    let thrift = server.thrift_addr();

    let people = [
        ("u_hb_1", "张三丰", "13911112222", idcard("19800101", 11)),
        ("u_hb_2", "李四", "13933334444", idcard("19900202", 22)),
        ("u_hb_3", "Wang Wu", "13955556666", idcard("20000303", 33)),
    ];
    let user_rows: Vec<Value> = people
        .iter()
        .map(|(uid, name, phone, id)| {
            json!({
                "rowkey_hex": user_rowkey_hex(&server, uid),
                "cells": {"info:name": name, "info:phone": phone, "info:idcard": id, "info:city": "上海"},
            })
        })
        .collect();
    let spec = json!({"table": "hb_compat", "user_table": "user", "user_rows": user_rows});

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/happybase/compat.py");
    let output = Command::new("python3")
        .arg(script)
        .arg(thrift.ip().to_string())
        .arg(thrift.port().to_string())
        .arg(spec.to_string())
        .output()
        .expect("python3 runs the compat script");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "happybase compat script failed ({}):\n{stdout}\n{stderr}\nserver log:\n{}",
        output.status,
        server.log_text()
    );
    expect_checks(
        &stdout,
        "",
        "happybase compat: ",
        &[
            "ok create_table lists the table",
            "ok rows drops missing rows",
            "ok scan row_prefix",
            "ok scan row_start/row_stop",
            "ok delete a row",
            "ok batch puts",
            "ok a counter that isn't 8 bytes",
            "ok delete_table",
        ],
        40,
    );

    // The rows happybase wrote into `user` went through the change feed into the index: every
    // field kind finds them, with the natural key decoded from the codec's rowkey.
    for (uid, name, phone, id) in &people {
        let body = wait_for_phone(&server, phone, &[*uid]);
        assert_eq!(body["rows"][0]["cells"]["info:name"], *name, "{body}");
        let (_, body) = get(&server.url(&format!("/v1/tables/user/rows?idcard={id}")));
        assert_eq!(keys(&body), vec![uid.to_string()], "{body}");
    }
    let (_, body) = get(&server.url("/v1/tables/user/rows?name=zhangsanfeng&match=pinyin"));
    assert_eq!(keys(&body), vec!["u_hb_1"], "{body}");
    server.stop();
}

/// Issue 38: happybase's filtered scans (`table.scan(filter=...)`, TScan.filterString) in every
/// transport and protocol the gateway serves, one server each, started side by side.
#[test]
#[ignore = "needs happybase 1.2.0 (PyPI): scripts/test.sh installs it and runs it"]
fn happybase_filtered_scans_in_both_transports_and_protocols() {
    let check = Command::new("python3")
        .args(["-c", "import happybase; print(happybase.__version__)"])
        .output()
        .expect("python3 runs");
    assert!(
        check.status.success() && String::from_utf8_lossy(&check.stdout).trim() == "1.2.0",
        "happybase 1.2.0 is not installed; run `bash scripts/test.sh --setup`: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let wires = [
        ("buffered", "binary"),
        ("framed", "compact"),
        ("buffered", "compact"),
        ("framed", "binary"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let servers: Vec<Server> = std::thread::scope(|scope| {
        let starts: Vec<_> = wires
            .iter()
            .map(|(transport, protocol)| {
                let dir = dir.path();
                scope.spawn(move || {
                    let config = dir.join(format!("{transport}-{protocol}.toml"));
                    std::fs::write(
                        &config,
                        format!(
                            "[server]\nthrift_transport = \"{transport}\"\n\
                             thrift_protocol = \"{protocol}\"\n"
                        ),
                    )
                    .unwrap();
                    let data = dir.join(format!("{transport}-{protocol}"));
                    std::fs::create_dir_all(&data).unwrap();
                    let config = config.to_string_lossy().into_owned();
                    Server::start_with_thrift(&["--config", &config, "serve"], &data, &[])
                })
            })
            .collect();
        starts
            .into_iter()
            .map(|start| start.join().expect("the server starts"))
            .collect()
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/happybase/filters.py");
    for ((transport, protocol), server) in wires.iter().zip(&servers) {
        let thrift = server.thrift_addr();
        let output = Command::new("python3")
            .arg(script)
            .arg(thrift.ip().to_string())
            .arg(thrift.port().to_string())
            .args([transport, protocol])
            .output()
            .expect("python3 runs the filters script");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "happybase filters script failed over {transport}/{protocol} ({}):\n{stdout}\n\
             {stderr}\nserver log:\n{}",
            output.status,
            server.log_text()
        );
        expect_checks(
            &stdout,
            &format!("{transport}/{protocol}: "),
            "happybase filters: ",
            &[
                "ok SingleColumnValueFilter",
                "ok scan_batching cuts filtered rows",
                "ok KeyOnlyFilter",
                "ok FirstKeyOnlyFilter",
                "ok AND binds tighter than OR",
                "ok PageFilter, pages of 1",
                "ok bad filter names the byte",
            ],
            25,
        );
    }
    for server in servers {
        server.stop();
    }
}

/// Issue 38: happybase's own API tests on HBase semantics (versions, the empty qualifier,
/// counters, reversed scans), the Thrift calls it has no method for (append, checkAndPut,
/// increment), and a seeded random differential run against a model of HBase
/// (tests/happybase/hbase_semantics.py), in every transport and protocol the gateway serves.
/// `HBIDX_HAPPYBASE_SEED` reruns the random part with a given seed.
#[test]
#[ignore = "needs happybase 1.2.0 (PyPI): scripts/test.sh installs it and runs it"]
fn happybase_sees_hbase_semantics_in_every_transport_and_protocol() {
    require_happybase();
    let seed: u64 = std::env::var("HBIDX_HAPPYBASE_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(38, |now| now.as_secs())
        });
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/happybase/hbase_semantics.py"
    );
    let combinations = [
        ("buffered", "binary"),
        ("buffered", "compact"),
        ("framed", "binary"),
        ("framed", "compact"),
    ];
    for (index, (transport, protocol)) in combinations.into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("hbidx.toml");
        std::fs::write(
            &config,
            format!(
                "{}\n[server]\nthrift_transport = \"{transport}\"\nthrift_protocol = \"{protocol}\"\n",
                include_str!("../deploy/config/hbidx.toml")
            ),
        )
        .unwrap();
        let server = Server::start_with_thrift(
            &["serve"],
            &dir.path().join("data"),
            &["--config", config.to_str().unwrap()],
        );
        let thrift = server.thrift_addr();
        let seed = (seed + index as u64).to_string();
        let output = Command::new("python3")
            .arg(script)
            .args([&thrift.ip().to_string(), &thrift.port().to_string()])
            .args([transport, protocol, &seed])
            .output()
            .expect("python3 runs the script");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "{transport}/{protocol} (seed {seed}) failed ({}):\n{stdout}\n{stderr}\nserver log:\n{}",
            output.status,
            server.log_text()
        );
        expect_checks(
            &stdout,
            &format!("{transport}/{protocol} (seed {seed}): "),
            &format!("hbase semantics {transport}/{protocol}: "),
            &[
                "ok api counter_dec -7",
                "ok api empty qualifier put",
                "ok api row at a timestamp: the older version",
                "ok api cells, every version",
                "ok api reversed scan stops before stop",
                "ok append answers the new values",
                "ok checkAndPut on the value",
            ],
            200,
        );
        server.stop();
    }
}

#[test]
fn rust_thrift_client_reads_writes_scans_and_gets_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with_thrift(&["serve"], dir.path(), &[]);
    let mut client = connect(server.thrift_addr());

    // Tables: the configured one under its HBase name, with its configured regions.
    let names = client.get_table_names().unwrap();
    assert_eq!(names, vec![b"user".to_vec()]);
    let regions = client.get_table_regions(b"user".to_vec()).unwrap();
    assert_eq!(regions.len(), 10, "the example config pre-splits into 10");
    assert_eq!(regions[0].start_key.as_deref(), Some(&b""[..]));
    assert_eq!(regions[0].end_key.as_deref(), Some(&b"199999"[..]));
    assert_eq!(regions[9].end_key.as_deref(), Some(&b""[..]));
    for pair in regions.windows(2) {
        assert_eq!(pair[0].end_key, pair[1].start_key);
    }
    let descriptors = client.get_column_descriptors(b"user".to_vec()).unwrap();
    assert_eq!(
        descriptors.keys().cloned().collect::<Vec<_>>(),
        vec![b"info:".to_vec()]
    );
    assert_eq!(
        descriptors[&b"info:".to_vec()].compression.as_deref(),
        Some("SNAPPY")
    );

    let family = |name: &str| ColumnDescriptor {
        name: Some(name.as_bytes().to_vec()),
        // `ColumnDescriptor::default()` says 0, which HBase refuses; 3 is the IDL's default,
        // what happybase sends.
        max_versions: Some(3),
        ..ColumnDescriptor::default()
    };
    client
        .create_table(b"rs_t".to_vec(), vec![family("cf:"), family("x:")])
        .unwrap();
    let t = || b"rs_t".to_vec();

    // *Ts writes and reads: the explicit timestamp is kept, reads see cells older than theirs.
    client
        .mutate_row_ts(
            t(),
            b"r1".to_vec(),
            vec![put("cf:a", "A"), put("x:b", "B")],
            5000,
            no_attributes(),
        )
        .unwrap();
    let row = client
        .get_row(t(), b"r1".to_vec(), no_attributes())
        .unwrap();
    assert_eq!(
        cells(&row[0]),
        BTreeMap::from([
            ("cf:a".to_string(), ("A".to_string(), 5000)),
            ("x:b".to_string(), ("B".to_string(), 5000)),
        ])
    );
    assert!(
        client
            .get_row_ts(t(), b"r1".to_vec(), 5000, no_attributes())
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        client
            .get_row_ts(t(), b"r1".to_vec(), 5001, no_attributes())
            .unwrap()
            .len(),
        1
    );
    let projected = client
        .get_row_with_columns_ts(
            t(),
            b"r1".to_vec(),
            vec![b"x".to_vec()],
            6000,
            no_attributes(),
        )
        .unwrap();
    assert_eq!(cells(&projected[0]).keys().collect::<Vec<_>>(), vec!["x:b"]);
    let cell = client
        .get(t(), b"r1".to_vec(), b"cf:a".to_vec(), no_attributes())
        .unwrap();
    assert_eq!(cell[0].value.as_deref(), Some(&b"A"[..]));
    // An older write loses; deleteAllTs masks what is at or below its timestamp.
    client
        .mutate_row_ts(
            t(),
            b"r1".to_vec(),
            vec![put("cf:a", "older")],
            4000,
            no_attributes(),
        )
        .unwrap();
    client
        .delete_all_ts(t(), b"r1".to_vec(), b"x:b".to_vec(), 5000, no_attributes())
        .unwrap();
    let row = client
        .get_row(t(), b"r1".to_vec(), no_attributes())
        .unwrap();
    assert_eq!(
        cells(&row[0]),
        BTreeMap::from([("cf:a".to_string(), ("A".to_string(), 5000))])
    );
    // Without a timestamp the server's clock (ms) stamps the write.
    client
        .mutate_row(
            t(),
            b"r2".to_vec(),
            vec![put("cf:a", "now")],
            no_attributes(),
        )
        .unwrap();
    let ts = cells(
        &client
            .get_row(t(), b"r2".to_vec(), no_attributes())
            .unwrap()[0],
    )["cf:a"]
        .1;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    assert!(
        (now - 60_000..=now + 1000).contains(&ts),
        "ts {ts}, now {now}"
    );

    // getRows drops missing rows and answers by row, not by position.
    let batches: Vec<BatchMutation> = (0..25)
        .map(|i| {
            BatchMutation::new(
                format!("s{i:02}").into_bytes(),
                vec![put("cf:n", &i.to_string())],
            )
        })
        .collect();
    client
        .mutate_rows_ts(t(), batches, 7000, no_attributes())
        .unwrap();
    let rows = client
        .get_rows(
            t(),
            vec![b"s05".to_vec(), b"missing".to_vec(), b"s01".to_vec()],
            no_attributes(),
        )
        .unwrap();
    assert_eq!(row_keys(&rows), vec!["s05", "s01"]);
    let rows = client
        .get_rows_with_columns_ts(
            t(),
            vec![b"s02".to_vec(), b"r1".to_vec()],
            vec![b"cf:n".to_vec()],
            7001,
            no_attributes(),
        )
        .unwrap();
    assert_eq!(row_keys(&rows), vec!["s02"], "r1 has no cf:n");
    assert!(
        client
            .get_rows_ts(t(), vec![b"s02".to_vec()], 7000, no_attributes())
            .unwrap()
            .is_empty()
    );

    // Scanner paging: pages of 10 over 25 rows, then an empty page; always close.
    let id = client
        .scanner_open_with_scan(t(), scan("s", "t", Some(4), None), no_attributes())
        .unwrap();
    let mut pages = Vec::new();
    loop {
        let page = client.scanner_get_list(id, 10).unwrap();
        if page.is_empty() {
            break;
        }
        pages.push(row_keys(&page));
    }
    client.scanner_close(id).unwrap();
    assert_eq!(
        pages.iter().map(Vec::len).collect::<Vec<_>>(),
        vec![10, 10, 5]
    );
    let all: Vec<String> = pages.concat();
    assert_eq!(all, (0..25).map(|i| format!("s{i:02}")).collect::<Vec<_>>());
    let error = client.scanner_get_list(id, 10).unwrap_err();
    assert!(illegal_argument_message(error).contains("does not exist"));
    // Prefix and start/stop scanners, one row at a time.
    let id = client
        .scanner_open_with_prefix(t(), b"s1".to_vec(), vec![], no_attributes())
        .unwrap();
    let mut prefixed = Vec::new();
    while let Some(result) = client.scanner_get(id).unwrap().pop() {
        prefixed.push(String::from_utf8(result.row.unwrap()).unwrap());
    }
    client.scanner_close(id).unwrap();
    assert_eq!(
        prefixed,
        (10..20).map(|i| format!("s{i}")).collect::<Vec<_>>()
    );
    let id = client
        .scanner_open_with_stop(
            t(),
            b"s20".to_vec(),
            b"s22".to_vec(),
            vec![],
            no_attributes(),
        )
        .unwrap();
    assert_eq!(
        row_keys(&client.scanner_get_list(id, 100).unwrap()),
        vec!["s20", "s21"]
    );
    client.scanner_close(id).unwrap();
    // TScan.timestamp: only cells older than it.
    let id = client
        .scanner_open_with_scan(t(), scan("", "", None, Some(6000)), no_attributes())
        .unwrap();
    assert_eq!(
        row_keys(&client.scanner_get_list(id, 100).unwrap()),
        vec!["r1"]
    );
    client.scanner_close(id).unwrap();

    // Invalid calls: IOError / IllegalArgument naming the problem; the connection stays usable
    // after each.
    let error = client
        .atomic_increment(t(), b"r1".to_vec(), b"cf:a".to_vec(), 1)
        .unwrap_err();
    assert!(io_message(error).contains("isn't 64 bits wide"));
    let error = client
        .check_and_put(
            t(),
            b"r1".to_vec(),
            b"cf".to_vec(),
            b"A".to_vec(),
            put("cf:a", "B"),
            no_attributes(),
        )
        .unwrap_err();
    assert!(illegal_argument_message(error).contains("no qualifier"));
    let filtered = TScan {
        filter_string: Some(b"PrefixFilter(s)".to_vec()),
        ..scan("", "", None, None)
    };
    let error = client
        .scanner_open_with_scan(t(), filtered, no_attributes())
        .unwrap_err();
    assert_eq!(
        io_message(error),
        "IllegalArgumentException: filter string, byte 13: PrefixFilter expected a quoted \
         string ('…'), found `s`"
    );
    let error = client
        .get_row(b"nope".to_vec(), b"r".to_vec(), no_attributes())
        .unwrap_err();
    assert_eq!(
        io_message(error),
        "TableNotFoundException: table `nope` does not exist"
    );
    let error = client
        .mutate_row(t(), b"r".to_vec(), vec![put("cf", "v")], no_attributes())
        .unwrap_err();
    assert!(illegal_argument_message(error).contains("qualifier"));
    let error = client
        .mutate_row(t(), b"r".to_vec(), vec![put("zz:q", "v")], no_attributes())
        .unwrap_err();
    assert!(io_message(error).contains("column family `zz` does not exist"));
    let error = client
        .get_row_with_columns(t(), b"r1".to_vec(), vec![b"zz:q".to_vec()], no_attributes())
        .unwrap_err();
    assert!(io_message(error).contains("`zz`"));
    let error = client
        .mutate_row(t(), Vec::new(), vec![put("cf:a", "v")], no_attributes())
        .unwrap_err();
    assert!(illegal_argument_message(error).contains("empty rowkey"));
    let error = client
        .create_table(b"bad name".to_vec(), vec![family("cf:")])
        .unwrap_err();
    assert!(illegal_argument_message(error).contains("not a valid HBase table name"));
    let error = client.delete_table(b"user".to_vec()).unwrap_err();
    assert!(io_message(error).contains("hbidx config"));
    assert_eq!(client.get_table_names().unwrap().len(), 2, "still usable");

    // Gateway writes to the configured table are indexed like any other write.
    let uid = "u_rs_1";
    let rowkey = hex::decode(user_rowkey_hex(&server, uid)).unwrap();
    let id = idcard("19750505", 55);
    client
        .mutate_row(
            b"user".to_vec(),
            rowkey.clone(),
            vec![
                put("info:name", "赵六"),
                put("info:phone", "13877778888"),
                put("info:idcard", &id),
            ],
            no_attributes(),
        )
        .unwrap();
    wait_for_phone(&server, "13877778888", &[uid]);
    // ... and so are deletes: the row leaves the index.
    client
        .delete_all_row(b"user".to_vec(), rowkey, no_attributes())
        .unwrap();
    wait_for_phone(&server, "13877778888", &[]);

    // Disable, refuse, enable; then a restart keeps the created table and its rows.
    client.disable_table(t()).unwrap();
    assert!(!client.is_table_enabled(t()).unwrap());
    let error = client
        .get_row(t(), b"r1".to_vec(), no_attributes())
        .unwrap_err();
    assert!(io_message(error).contains("disabled"));
    client.enable_table(t()).unwrap();
    drop(client);
    server.stop();

    let server = Server::start_with_thrift(&["serve"], dir.path(), &[]);
    let mut client = connect(server.thrift_addr());
    assert_eq!(
        client.get_table_names().unwrap(),
        vec![b"rs_t".to_vec(), b"user".to_vec()]
    );
    assert!(client.is_table_enabled(t()).unwrap());
    let rows = client
        .get_rows(t(), vec![b"s24".to_vec()], no_attributes())
        .unwrap();
    assert_eq!(cells(&rows[0])["cf:n"], ("24".to_string(), 7000));
    client.disable_table(t()).unwrap();
    client.delete_table(t()).unwrap();
    assert_eq!(client.get_table_names().unwrap(), vec![b"user".to_vec()]);
    let error = client
        .get_row(t(), b"s24".to_vec(), no_attributes())
        .unwrap_err();
    assert!(io_message(error).contains("does not exist"));
    server.stop();
}

/// Issue 38: a configured family with `versions = 2` keeps two versions of each cell for the
/// gateway's reads, and the index holds the newest whatever order the versions are written in.
#[test]
fn configured_families_keep_their_versions_and_the_index_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hbidx.toml");
    let base = include_str!("../deploy/config/hbidx.toml");
    assert!(
        base.contains("\nversions = 1 "),
        "the example config keeps one version"
    );
    std::fs::write(
        &config,
        base.replacen("\nversions = 1 ", "\nversions = 2 ", 1),
    )
    .unwrap();
    let server = Server::start_with_thrift(
        &["serve"],
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    let mut client = connect(server.thrift_addr());
    let descriptors = client.get_column_descriptors(b"user".to_vec()).unwrap();
    assert_eq!(descriptors[&b"info:".to_vec()].max_versions, Some(2));

    let rowkey = hex::decode(user_rowkey_hex(&server, "u_ver_1")).unwrap();
    // Newest first, then an older one that lands below it, then one older than both kept.
    for (phone, ts) in [
        ("13911110003", 3000),
        ("13911110002", 2000),
        ("13911110001", 1000),
    ] {
        client
            .mutate_row_ts(
                b"user".to_vec(),
                rowkey.clone(),
                vec![put("info:phone", phone)],
                ts,
                no_attributes(),
            )
            .unwrap();
    }
    let versions = client
        .get_ver(
            b"user".to_vec(),
            rowkey.clone(),
            b"info:phone".to_vec(),
            5,
            no_attributes(),
        )
        .unwrap();
    let versions: Vec<(Vec<u8>, i64)> = versions
        .into_iter()
        .map(|cell| (cell.value.unwrap(), cell.timestamp.unwrap()))
        .collect();
    assert_eq!(
        versions,
        [
            (b"13911110003".to_vec(), 3000),
            (b"13911110002".to_vec(), 2000)
        ]
    );
    let at = client
        .get_row_ts(b"user".to_vec(), rowkey.clone(), 3000, no_attributes())
        .unwrap();
    assert_eq!(cells(&at[0])["info:phone"].0, "13911110002");
    // The index has the newest version only. A later write to another row, once found, says
    // the index has taken in every event before it (the feed is in commit order).
    let marker = hex::decode(user_rowkey_hex(&server, "u_ver_2")).unwrap();
    client
        .mutate_row(
            b"user".to_vec(),
            marker,
            vec![put("info:phone", "13911110009")],
            no_attributes(),
        )
        .unwrap();
    wait_for_phone(&server, "13911110009", &["u_ver_2"]);
    let (_, body) = get(&server.url("/v1/tables/user/rows?phone=13911110003"));
    assert_eq!(keys(&body), vec!["u_ver_1"], "{body}");
    let (_, body) = get(&server.url("/v1/tables/user/rows?phone=13911110002"));
    assert_eq!(keys(&body), Vec::<String>::new(), "{body}");
    server.stop();
}

/// A connection that stays silent is closed after `thrift_idle_timeout_ms`, giving its worker
/// back: with one worker, an idle client no longer locks every other client out.
#[test]
fn an_idle_connection_gives_its_worker_back() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hbidx.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[server]\nthrift_workers = 1\nthrift_idle_timeout_ms = 700\n",
            include_str!("../deploy/config/hbidx.toml")
        ),
    )
    .unwrap();
    let server = Server::start_with_thrift(
        &["serve"],
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    // Takes the only worker and sends nothing.
    let idle = std::net::TcpStream::connect(server.thrift_addr()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let started = std::time::Instant::now();
    let stream = std::net::TcpStream::connect(server.thrift_addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (read, write) = TTcpChannel::with_stream(stream).split().unwrap();
    let mut client = HbaseSyncClient::new(
        TBinaryInputProtocol::new(TBufferedReadTransport::new(read), true),
        TBinaryOutputProtocol::new(TBufferedWriteTransport::new(write), true),
    );
    let names = client
        .get_table_names()
        .expect("answered once the idle connection is closed");
    assert_eq!(names, vec![b"user".to_vec()]);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    drop(idle);
}

/// The gateway has no authentication: an address other than loopback is refused unless
/// `thrift_allow_remote = true`, from the flag as from the config.
#[test]
fn a_remote_gateway_needs_an_explicit_opt_in() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_hbidx"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--thrift-listen",
            "0.0.0.0:0",
            "--data-dir",
        ])
        .arg(dir.path().join("data"))
        .env("HBIDX_API_KEY", util::TEST_API_KEY)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("0.0.0.0:0 is not a loopback address")
            && stderr.contains("thrift_allow_remote = true"),
        "{stderr}"
    );
    let config = dir.path().join("hbidx.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[server]\nthrift_allow_remote = true\n",
            include_str!("../deploy/config/hbidx.toml")
        ),
    )
    .unwrap();
    let server = Server::start(
        &["--config", config.to_str().unwrap(), "serve"],
        &dir.path().join("data"),
        &["--thrift-listen", "0.0.0.0:0"],
    );
    assert!(server.thrift.is_some(), "{}", server.log_text());
}
