//! The embedded store on a real on-disk fjall database: HBase cell semantics, scans,
//! persistence, the change feed, crash safety, and a property test against a brute-force model.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use hbidx_schema::model::{CellOp, Mutation};
use hbidx_store::{EmbeddedStore, Row, RowStore, ScanRequest, StoreError};
use proptest::prelude::*;

const TABLE: &str = "ns:users";

fn tables() -> Vec<String> {
    vec![TABLE.to_owned(), "other_table".to_owned()]
}

fn open(dir: &Path) -> EmbeddedStore {
    EmbeddedStore::open(dir, &tables()).expect("store opens")
}

fn mutation(rowkey: &str, ops: Vec<CellOp>) -> Mutation {
    Mutation {
        table: TABLE.to_owned(),
        rowkey: rowkey.as_bytes().to_vec(),
        ops,
    }
}

fn put(column: &str, ts: i64, value: &str) -> CellOp {
    CellOp::Put {
        column: column.to_owned(),
        ts,
        value: value.as_bytes().to_vec(),
    }
}

fn delete_cell(column: &str, ts: i64) -> CellOp {
    CellOp::DeleteCell {
        column: column.to_owned(),
        ts,
    }
}

fn delete_family(family: &str, ts: i64) -> CellOp {
    CellOp::DeleteFamily {
        family: family.to_owned(),
        ts,
    }
}

fn key(rowkey: &str) -> Vec<u8> {
    rowkey.as_bytes().to_vec()
}

/// A row's visible cells as `column → (ts, value)`, or `None`.
fn cells_of(store: &EmbeddedStore, rowkey: &str) -> Option<BTreeMap<String, (i64, String)>> {
    let mut rows = store
        .get_rows_sync(TABLE, &[key(rowkey)], None)
        .expect("get_rows");
    rows.pop().expect("one result per rowkey").map(|row| {
        row.cells
            .into_iter()
            .map(|(column, cell)| {
                let value = String::from_utf8(cell.value).expect("utf-8 value");
                (column, (cell.ts, value))
            })
            .collect()
    })
}

fn value_of(store: &EmbeddedStore, rowkey: &str, column: &str) -> Option<String> {
    cells_of(store, rowkey)?
        .remove(column)
        .map(|(_, value)| value)
}

fn rowkeys(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .map(|row| String::from_utf8(row.rowkey.clone()).expect("utf-8 rowkey"))
        .collect()
}

#[tokio::test]
async fn put_then_get_returns_the_latest_version_through_the_trait() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn RowStore> = Arc::new(open(dir.path()));
    store
        .mutate(vec![mutation("r1", vec![put("info:phone", 10, "111")])])
        .await
        .expect("first put");
    store
        .mutate(vec![mutation("r1", vec![put("info:phone", 20, "222")])])
        .await
        .expect("second put");

    let rows = store
        .get_rows(TABLE, &[key("r1"), key("missing"), key("r1")], None)
        .await
        .expect("get_rows");
    assert_eq!(rows.len(), 3, "positional");
    let row = rows[0].as_ref().expect("r1 exists");
    assert_eq!(row.rowkey, b"r1");
    assert_eq!(row.cells["info:phone"].value, b"222");
    assert_eq!(row.cells["info:phone"].ts, 20);
    assert!(rows[1].is_none());
    assert_eq!(rows[2], rows[0]);
    assert_eq!(store.tables(), tables());
    assert!(matches!(
        store.get_rows("nope", &[key("r1")], None).await,
        Err(StoreError::UnknownTable(name)) if name == "nope"
    ));
}

/// Reads go through the row cache; every write, including one that removes the row, is seen by
/// the next read, from any thread (the cache is invalidated once the write is committed).
#[test]
fn reads_after_writes_see_the_write_through_the_row_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(open(dir.path()));
    store
        .mutate_sync(vec![mutation("r", vec![put("info:name", 1, "v1")])])
        .expect("write");
    assert_eq!(value_of(&store, "r", "info:name").as_deref(), Some("v1"));
    assert_eq!(value_of(&store, "r", "info:name").as_deref(), Some("v1"));
    let stats = store.row_cache_stats(TABLE).expect("stats");
    assert_eq!((stats.misses, stats.hits, stats.entries), (1, 1, 1));

    // Written from another thread, read here.
    let writer = store.clone();
    std::thread::spawn(move || {
        writer
            .mutate_sync(vec![mutation("r", vec![put("info:name", 2, "v2")])])
            .expect("write");
    })
    .join()
    .expect("writer thread");
    assert_eq!(value_of(&store, "r", "info:name").as_deref(), Some("v2"));

    store
        .mutate_sync(vec![mutation("r", vec![CellOp::DeleteRow { ts: 3 }])])
        .expect("delete");
    assert_eq!(cells_of(&store, "r"), None);
    // An older put under the tombstone stays masked, cached or not.
    store
        .mutate_sync(vec![mutation("r", vec![put("info:name", 2, "late")])])
        .expect("late write");
    assert_eq!(cells_of(&store, "r"), None);
    assert!(store.row_cache_stats(TABLE).expect("stats").budget > 0);
}

#[test]
fn an_older_put_never_overwrites_a_newer_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    store
        .mutate_sync(vec![mutation("r", vec![put("info:name", 20, "new")])])
        .expect("put");
    store
        .mutate_sync(vec![mutation("r", vec![put("info:name", 19, "old")])])
        .expect("older put is accepted, and ignored");
    assert_eq!(value_of(&store, "r", "info:name").as_deref(), Some("new"));
    store
        .mutate_sync(vec![mutation(
            "r",
            vec![put("info:name", 20, "same ts, later")],
        )])
        .expect("put");
    assert_eq!(
        value_of(&store, "r", "info:name").as_deref(),
        Some("same ts, later"),
        "a later put with the same timestamp overwrites"
    );
}

#[test]
fn delete_cell_masks_versions_up_to_its_timestamp_including_late_older_puts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    store
        .mutate_sync(vec![mutation(
            "r",
            vec![put("info:phone", 5, "p"), put("info:name", 5, "n")],
        )])
        .expect("put");
    store
        .mutate_sync(vec![mutation("r", vec![delete_cell("info:phone", 7)])])
        .expect("delete");
    assert_eq!(value_of(&store, "r", "info:phone"), None);
    assert_eq!(value_of(&store, "r", "info:name").as_deref(), Some("n"));

    store
        .mutate_sync(vec![mutation("r", vec![put("info:phone", 7, "tie")])])
        .expect("late put at the delete's timestamp");
    assert_eq!(
        value_of(&store, "r", "info:phone"),
        None,
        "delete wins ties"
    );
    store
        .mutate_sync(vec![mutation("r", vec![put("info:phone", 8, "newer")])])
        .expect("newer put");
    assert_eq!(
        value_of(&store, "r", "info:phone").as_deref(),
        Some("newer")
    );
}

#[test]
fn delete_family_and_delete_row_mask_cells_and_keep_masking_late_puts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    store
        .mutate_sync(vec![mutation(
            "r",
            vec![
                put("info:phone", 5, "p"),
                put("info:name", 12, "n"),
                put("meta:src", 5, "s"),
            ],
        )])
        .expect("put");
    store
        .mutate_sync(vec![mutation("r", vec![delete_family("info", 10)])])
        .expect("delete family");
    let cells = cells_of(&store, "r").expect("row still has cells");
    assert_eq!(cells.keys().collect::<Vec<_>>(), ["info:name", "meta:src"]);
    store
        .mutate_sync(vec![mutation("r", vec![put("info:phone", 9, "late")])])
        .expect("late put");
    assert_eq!(value_of(&store, "r", "info:phone"), None);

    store
        .mutate_sync(vec![mutation("r", vec![CellOp::DeleteRow { ts: 20 }])])
        .expect("delete row");
    assert_eq!(
        cells_of(&store, "r"),
        None,
        "a row without visible cells is missing"
    );
    store
        .mutate_sync(vec![mutation("r", vec![put("meta:src", 15, "late")])])
        .expect("late put");
    assert_eq!(cells_of(&store, "r"), None);

    // The tombstone outlives a restart.
    drop(store);
    let store = open(dir.path());
    store
        .mutate_sync(vec![mutation(
            "r",
            vec![put("info:phone", 20, "still masked")],
        )])
        .expect("put");
    assert_eq!(cells_of(&store, "r"), None);
    store
        .mutate_sync(vec![mutation("r", vec![put("info:phone", 21, "visible")])])
        .expect("put");
    assert_eq!(
        value_of(&store, "r", "info:phone").as_deref(),
        Some("visible")
    );
    assert_eq!(store.count_rows(TABLE).expect("count"), 1);
}

#[tokio::test]
async fn projection_selects_a_column_or_a_whole_family() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn RowStore> = Arc::new(open(dir.path()));
    store
        .mutate(vec![
            mutation(
                "r1",
                vec![
                    put("info:phone", 1, "p"),
                    put("info:name", 1, "n"),
                    put("meta:src", 1, "s"),
                ],
            ),
            mutation("r2", vec![put("meta:src", 1, "s")]),
        ])
        .await
        .expect("put");

    let columns_of = |rows: &[Option<Row>]| -> Vec<Option<Vec<String>>> {
        rows.iter()
            .map(|row| row.as_ref().map(|row| row.cells.keys().cloned().collect()))
            .collect()
    };
    let phone = ["info:phone".to_owned()];
    let rows = store
        .get_rows(TABLE, &[key("r1"), key("r2")], Some(&phone))
        .await
        .expect("get");
    assert_eq!(
        columns_of(&rows),
        [Some(vec!["info:phone".to_owned()]), None],
        "r2 has no cell in the projection, so it is missing"
    );
    let info = ["info".to_owned()];
    let rows = store
        .get_rows(TABLE, &[key("r1")], Some(&info))
        .await
        .expect("get");
    assert_eq!(
        columns_of(&rows),
        [Some(vec!["info:name".to_owned(), "info:phone".to_owned()])]
    );
    let mixed = ["meta".to_owned(), "info:name".to_owned()];
    let rows = store
        .get_rows(TABLE, &[key("r1")], Some(&mixed))
        .await
        .expect("get");
    assert_eq!(
        columns_of(&rows),
        [Some(vec!["info:name".to_owned(), "meta:src".to_owned()])]
    );
}

/// Loads rows `a00`..`a09`, `b00`..`b09`, `c00`..`c09` with `info:v` = the rowkey; `b05` is
/// deleted and `b07` only has a `meta` cell.
fn load_scan_fixture(store: &EmbeddedStore) {
    let mut mutations = Vec::new();
    for letter in ["a", "b", "c"] {
        for n in 0..10 {
            let rowkey = format!("{letter}{n:02}");
            let ops = if rowkey == "b07" {
                vec![put("meta:x", 1, "m")]
            } else {
                vec![put("info:v", 1, &rowkey)]
            };
            mutations.push(mutation(&rowkey, ops));
        }
    }
    mutations.push(mutation("b05", vec![CellOp::DeleteRow { ts: 2 }]));
    store.mutate_sync(mutations).expect("load");
}

#[test]
fn scan_covers_ranges_and_prefixes_in_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    load_scan_fixture(&store);

    // Start inclusive, stop exclusive, deleted rows skipped.
    let range = ScanRequest {
        start: key("a08"),
        stop: Some(key("b02")),
        batch: 100,
        ..ScanRequest::default()
    };
    let batch = store.scan_sync(TABLE, &range).expect("scan");
    assert_eq!(rowkeys(&batch.rows), ["a08", "a09", "b00", "b01"]);
    assert_eq!(batch.next_start, None);

    // A prefix scan paged 3 rows at a time, following next_start.
    let mut request = ScanRequest {
        prefix: Some(key("b")),
        batch: 3,
        ..ScanRequest::default()
    };
    let mut pages = Vec::new();
    loop {
        let batch = store.scan_sync(TABLE, &request).expect("scan");
        pages.push(rowkeys(&batch.rows));
        match batch.next_start {
            Some(next) => request.start = next,
            None => break,
        }
    }
    assert_eq!(
        pages,
        [
            vec!["b00", "b01", "b02"],
            vec!["b03", "b04", "b06"],
            vec!["b07", "b08", "b09"],
        ],
        "b05 is deleted; no empty trailing page"
    );

    // Projection skips rows without a matching cell; prefix and start/stop intersect.
    let projected = ScanRequest {
        start: key("b06"),
        stop: Some(key("c01")),
        prefix: Some(key("b")),
        columns: Some(vec!["info".to_owned()]),
        batch: 2,
    };
    let batch = store.scan_sync(TABLE, &projected).expect("scan");
    assert_eq!(rowkeys(&batch.rows), ["b06", "b08"]);
    assert_eq!(batch.next_start, Some(key("b09")));

    let empty = ScanRequest {
        start: key("b5"),
        stop: Some(key("b1")),
        batch: 10,
        ..ScanRequest::default()
    };
    assert!(
        store
            .scan_sync(TABLE, &empty)
            .expect("scan")
            .rows
            .is_empty()
    );
    let everything = ScanRequest {
        batch: 1000,
        ..ScanRequest::default()
    };
    assert_eq!(
        store
            .scan_sync(TABLE, &everything)
            .expect("scan")
            .rows
            .len(),
        29
    );
    let zero = ScanRequest::default();
    assert!(matches!(
        store.scan_sync(TABLE, &zero),
        Err(StoreError::InvalidRequest { .. })
    ));
}

#[test]
fn data_and_feed_sequence_survive_close_and_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = open(dir.path());
        store
            .mutate_sync(vec![
                mutation("r1", vec![put("info:phone", 1, "p1")]),
                mutation("r2", vec![put("info:phone", 1, "p2")]),
            ])
            .expect("write");
        assert_eq!(store.last_offset(TABLE), 2);
    }
    let store = open(dir.path());
    assert_eq!(value_of(&store, "r1", "info:phone").as_deref(), Some("p1"));
    assert_eq!(value_of(&store, "r2", "info:phone").as_deref(), Some("p2"));
    assert_eq!(store.last_offset(TABLE), 2);
    let events = store.read_feed(TABLE, 0, 10).expect("feed");
    assert_eq!(events.iter().map(|e| e.offset).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(events[1].mutation.rowkey, b"r2");

    let receipt = store
        .mutate_sync(vec![mutation("r3", vec![put("info:phone", 1, "p3")])])
        .expect("write");
    assert_eq!(receipt.last_offset_by_table, [(TABLE.to_owned(), 3)]);
    assert_eq!(store.count_rows(TABLE).expect("count"), 3);
    assert_eq!(store.row_count_estimate(TABLE).expect("estimate"), 3);
}

#[test]
fn feed_records_every_mutation_in_order_as_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let first = vec![
        mutation("r1", vec![put("info:phone", 10, "p")]),
        mutation(
            "r1",
            vec![put("info:phone", 5, "older: a no-op, still recorded")],
        ),
        Mutation {
            table: "other_table".to_owned(),
            rowkey: key("x"),
            ops: vec![put("f:q", 1, "v")],
        },
    ];
    store.mutate_sync(first.clone()).expect("write");
    let second = vec![mutation("r2", vec![CellOp::DeleteRow { ts: 3 }])];
    store.mutate_sync(second.clone()).expect("write");

    let events = store.read_feed(TABLE, 0, 100).expect("feed");
    assert_eq!(
        events.iter().map(|e| e.offset).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(events.iter().all(|event| event.partition == 0));
    let recorded: Vec<Mutation> = events.into_iter().map(|event| event.mutation).collect();
    assert_eq!(
        recorded,
        [first[0].clone(), first[1].clone(), second[0].clone()]
    );

    let other = store.read_feed("other_table", 0, 100).expect("feed");
    assert_eq!(other.len(), 1, "each table has its own sequence");
    assert_eq!(other[0].offset, 1);

    assert_eq!(store.read_feed(TABLE, 1, 1).expect("feed")[0].offset, 2);
    assert!(store.read_feed(TABLE, 3, 100).expect("feed").is_empty());
    assert!(store.read_feed(TABLE, 0, 0).expect("feed").is_empty());
    assert_eq!(store.read_feed(TABLE, -5, 100).expect("feed").len(), 3);
}

#[test]
fn every_row_write_has_its_event_in_bulk_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    for batch in 0..10 {
        let mutations = (0..1000)
            .map(|n| {
                let rowkey = format!("row{:06}", batch * 1000 + n);
                mutation(&rowkey, vec![put("info:phone", 1, &rowkey)])
            })
            .collect();
        let receipt = store.mutate_sync(mutations).expect("batch");
        assert_eq!(
            receipt.last_offset_by_table,
            [(TABLE.to_owned(), (batch + 1) * 1000)]
        );
    }
    let events = store.read_feed(TABLE, 0, usize::MAX).expect("feed");
    assert_eq!(events.len(), 10_000);
    assert!(
        events
            .windows(2)
            .all(|pair| pair[1].offset == pair[0].offset + 1)
    );
    assert_eq!(store.count_rows(TABLE).expect("count"), 10_000);
}

#[test]
fn trim_deletes_old_events_and_offsets_never_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = open(dir.path());
        for n in 0..5 {
            store
                .mutate_sync(vec![mutation(&format!("r{n}"), vec![put("i:a", 1, "v")])])
                .expect("write");
        }
        assert_eq!(store.trim_feed(TABLE, 3).expect("trim"), 3);
        assert_eq!(store.trim_feed(TABLE, 3).expect("trim again"), 0);
        let offsets: Vec<i64> = store
            .read_feed(TABLE, 0, 100)
            .expect("feed")
            .iter()
            .map(|e| e.offset)
            .collect();
        assert_eq!(offsets, [4, 5]);
        assert_eq!(
            store.trim_feed(TABLE, 1_000).expect("trim everything"),
            2,
            "clamped to the last committed offset"
        );
        assert!(store.read_feed(TABLE, 0, 100).expect("feed").is_empty());
        assert_eq!(store.last_offset(TABLE), 5);
    }
    let store = open(dir.path());
    assert_eq!(store.last_offset(TABLE), 5, "recovered from the trim floor");
    let receipt = store
        .mutate_sync(vec![mutation("r9", vec![put("i:a", 1, "v")])])
        .expect("write");
    assert_eq!(receipt.last_offset_by_table, [(TABLE.to_owned(), 6)]);
    assert_eq!(store.read_feed(TABLE, 0, 100).expect("feed")[0].offset, 6);
    assert_eq!(store.count_rows(TABLE).expect("rows are untouched"), 6);
}

#[test]
fn subscribers_and_blocked_threads_see_each_commit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(open(dir.path()));
    let mut receiver = store.subscribe(TABLE);
    assert_eq!(*receiver.borrow_and_update(), 0);
    assert!(!receiver.has_changed().expect("open channel"));

    let waiter = {
        let store = Arc::clone(&store);
        std::thread::spawn(move || store.wait_for_offset_after(TABLE, 0, Duration::from_secs(30)))
    };
    // The write comes only once the waiter is blocked, so the test proves the commit wakes it.
    while store.feed_waiters(TABLE) == 0 {
        std::thread::yield_now();
    }
    let written = std::time::Instant::now();
    store
        .mutate_sync(vec![mutation("r", vec![put("i:a", 1, "v")])])
        .expect("write");
    assert_eq!(waiter.join().expect("waiter thread"), 1);
    // Woken by the commit, not by its 30 s timeout (which would return 1 as well).
    assert!(written.elapsed() < Duration::from_secs(20));
    assert_eq!(store.feed_waiters(TABLE), 0);
    assert!(receiver.has_changed().expect("open channel"));
    assert_eq!(*receiver.borrow_and_update(), 1);

    let started = std::time::Instant::now();
    assert_eq!(
        store.wait_for_offset_after(TABLE, 1, Duration::from_millis(100)),
        1,
        "times out with the current offset"
    );
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(store.wait_for_offset_after(TABLE, 0, Duration::ZERO), 1);
}

#[test]
fn concurrent_writers_produce_a_feed_whose_replay_equals_the_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(open(dir.path()));
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for n in 0..200i64 {
                    // All writers fight over the same 10 rows and one column, with timestamps
                    // that collide across writers.
                    let rowkey = format!("r{}", n % 10);
                    let op = if n % 7 == 3 {
                        delete_cell("i:a", n / 2)
                    } else {
                        put("i:a", n / 2, &format!("w{writer}n{n}"))
                    };
                    store
                        .mutate_sync(vec![mutation(&rowkey, vec![op])])
                        .expect("write");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().expect("writer thread");
    }
    let events = store.read_feed(TABLE, 0, usize::MAX).expect("feed");
    assert_eq!(events.len(), 800);

    let replayed_dir = tempfile::tempdir().expect("tempdir");
    let replayed = open(replayed_dir.path());
    for event in events {
        replayed.mutate_sync(vec![event.mutation]).expect("replay");
    }
    let all: Vec<Vec<u8>> = (0..10).map(|n| key(&format!("r{n}"))).collect();
    assert_eq!(
        store.get_rows_sync(TABLE, &all, None).expect("get"),
        replayed.get_rows_sync(TABLE, &all, None).expect("get"),
        "feed order is commit order"
    );
}

const CRASH_DIR_ENV: &str = "HBIDX_STORE_CRASH_DIR";

/// The child half of [`committed_writes_survive_kill_9`], run by that same test in a second
/// process of this binary (so no separate, ignored test is needed): writes batches of 50 new
/// rows forever, printing the number of rows committed after each commit.
fn crash_writer_child(dir: &Path) -> ! {
    let store = open(dir);
    let mut written = 0usize;
    loop {
        let mutations = (written..written + 50)
            .map(|n| mutation(&format!("row{n:09}"), vec![put("info:v", 1, "x")]))
            .collect();
        store.mutate_sync(mutations).expect("write");
        written += 50;
        println!("committed {written}");
        // Killed long before; ends the child should its parent have gone.
        assert!(written < 10_000_000, "the parent never killed the writer");
    }
}

#[test]
fn committed_writes_survive_kill_9() {
    if let Some(dir) = std::env::var_os(CRASH_DIR_ENV) {
        crash_writer_child(Path::new(&dir));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["committed_writes_survive_kill_9", "--exact", "--nocapture"])
        .args(["--test-threads", "1"])
        .env(CRASH_DIR_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the writer");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut acknowledged = 0usize;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read child output");
        if let Some(count) = line.strip_prefix("committed ") {
            acknowledged = count.parse().expect("a count");
            if acknowledged >= 20_000 {
                break;
            }
        }
    }
    child.kill().expect("SIGKILL the writer mid-stream");
    child.wait().expect("reap the writer");
    assert!(acknowledged >= 20_000, "the writer made progress");

    let store = open(dir.path());
    let events = store.read_feed(TABLE, 0, usize::MAX).expect("feed");
    let rows = store.count_rows(TABLE).expect("count");
    assert!(
        events.len() >= acknowledged,
        "acknowledged writes are durable: {} events < {acknowledged}",
        events.len()
    );
    assert_eq!(
        rows as usize,
        events.len(),
        "each row write has its event, and only it"
    );
    assert_eq!(events.len() % 50, 0, "batches are all-or-nothing");
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(i, e)| e.offset == i as i64 + 1)
    );
    let last = store.last_offset(TABLE);
    assert_eq!(last as usize, events.len());
}

/// A row's visible cells as `column → (ts, value)`.
type VisibleCells = BTreeMap<String, (i64, Vec<u8>)>;

/// A brute-force model of HBase semantics: keep every operation, decide visibility at read time.
#[derive(Default)]
struct Model {
    /// Per rowkey, every operation in arrival order.
    history: BTreeMap<Vec<u8>, Vec<CellOp>>,
}

impl Model {
    fn apply(&mut self, mutation: &Mutation) {
        self.history
            .entry(mutation.rowkey.clone())
            .or_default()
            .extend(mutation.ops.iter().cloned());
    }

    /// Visible cells: for each column, the newest put above every delete that applies to it (a
    /// delete at ts masks everything `<= ts`, whenever it arrived); among equal timestamps the
    /// later put wins.
    fn row(&self, rowkey: &[u8]) -> Option<VisibleCells> {
        let ops = self.history.get(rowkey)?;
        let family = |column: &str| column.split_once(':').map(|(f, _)| f.to_owned());
        let mut cells = BTreeMap::new();
        for op in ops {
            let CellOp::Put { column, ts, value } = op else {
                continue;
            };
            let masked = ops.iter().any(|other| match other {
                CellOp::DeleteCell { column: c, ts: d } => c == column && ts <= d,
                CellOp::DeleteFamily { family: f, ts: d } => {
                    family(column).as_deref() == Some(f.as_str()) && ts <= d
                }
                CellOp::DeleteRow { ts: d } => ts <= d,
                CellOp::Put { .. } => false,
            });
            if masked {
                continue;
            }
            let newer = cells
                .get(column)
                .is_none_or(|(current, _): &(i64, Vec<u8>)| ts >= current);
            if newer {
                cells.insert(column.clone(), (*ts, value.clone()));
            }
        }
        (!cells.is_empty()).then_some(cells)
    }
}

fn op_strategy() -> impl Strategy<Value = CellOp> {
    let column = prop::sample::select(vec!["f:a", "f:b", "g:a"]);
    // Few timestamps, so ties and reorderings are common.
    let ts = 0i64..6;
    prop_oneof![
        6 => (column.clone(), ts.clone(), 0u8..4).prop_map(|(column, ts, value)| CellOp::Put {
            column: column.to_owned(),
            ts,
            value: vec![value],
        }),
        2 => (column, ts.clone()).prop_map(|(column, ts)| CellOp::DeleteCell {
            column: column.to_owned(),
            ts,
        }),
        1 => (prop::sample::select(vec!["f", "g"]), ts.clone()).prop_map(|(family, ts)| {
            CellOp::DeleteFamily {
                family: family.to_owned(),
                ts,
            }
        }),
        1 => ts.prop_map(|ts| CellOp::DeleteRow { ts }),
    ]
}

fn mutation_strategy() -> impl Strategy<Value = Mutation> {
    (
        prop::sample::select(vec!["r1", "r2", "r3"]),
        prop::collection::vec(op_strategy(), 1..4),
    )
        .prop_map(|(rowkey, ops)| mutation(rowkey, ops))
}

fn store_rows(store: &EmbeddedStore) -> Vec<Option<VisibleCells>> {
    let keys = [key("r1"), key("r2"), key("r3")];
    store
        .get_rows_sync(TABLE, &keys, None)
        .expect("get")
        .into_iter()
        .map(|row| {
            row.map(|row| {
                row.cells
                    .into_iter()
                    .map(|(column, cell)| (column, (cell.ts, cell.value)))
                    .collect()
            })
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_the_hbase_model(
        calls in prop::collection::vec(prop::collection::vec(mutation_strategy(), 1..4), 1..12),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut model = Model::default();
        let expected_events: usize = calls.iter().map(Vec::len).sum();
        {
            let store = open(dir.path());
            for call in calls {
                for mutation in &call {
                    model.apply(mutation);
                }
                store.mutate_sync(call).expect("mutate");
            }
            let expected: Vec<_> = ["r1", "r2", "r3"].iter().map(|k| model.row(k.as_bytes())).collect();
            prop_assert_eq!(store_rows(&store), expected.clone());

            let scan = store
                .scan_sync(TABLE, &ScanRequest { batch: 10, ..ScanRequest::default() })
                .expect("scan");
            let scanned: Vec<Vec<u8>> = scan.rows.into_iter().map(|row| row.rowkey).collect();
            let visible: Vec<Vec<u8>> = ["r1", "r2", "r3"]
                .iter()
                .zip(&expected)
                .filter(|(_, row)| row.is_some())
                .map(|(k, _)| key(k))
                .collect();
            prop_assert_eq!(scanned, visible);
        }
        let reopened = open(dir.path());
        let expected: Vec<_> = ["r1", "r2", "r3"].iter().map(|k| model.row(k.as_bytes())).collect();
        prop_assert_eq!(store_rows(&reopened), expected);
        prop_assert_eq!(reopened.read_feed(TABLE, 0, usize::MAX).expect("feed").len(), expected_events);
    }
}

/// A graceful stop writes every memtable out (`flush_memtables`), so the next open has nothing
/// of them to re-insert from the journal: what it reopens is the same rows, read from table
/// files.
#[test]
fn flushing_memtables_leaves_them_empty_and_the_rows_readable_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        for i in 0..500 {
            store
                .mutate_sync(vec![mutation(
                    &format!("r{i:04}"),
                    vec![put("info:name", 1, &format!("v{i}"))],
                )])
                .unwrap();
        }
        let before = store.memory().memtable_bytes;
        assert!(before > 10_000, "{before}");
        store.flush_memtables(Duration::from_secs(30)).unwrap();
        // fjall's bookkeeping of the fresh empty memtables stays: tens of bytes.
        let after = store.memory().memtable_bytes;
        assert!(after < 1024, "{after}");
    }
    let store = open(dir.path());
    let reopened = store.memory().memtable_bytes;
    assert!(reopened < 1024, "{reopened}");
    assert_eq!(
        value_of(&store, "r0499", "info:name").as_deref(),
        Some("v499")
    );
}
