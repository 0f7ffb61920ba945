use std::collections::BTreeMap;
use std::time::Duration;

use hbidx_schema::model::CellOp;

use super::*;

fn open(dir: &Path) -> EmbeddedStore {
    EmbeddedStore::open(dir, &["t".to_owned(), "ns:other".to_owned()]).expect("opens")
}

fn put(table: &str, rowkey: &str, column: &str, ts: i64, value: &str) -> Mutation {
    Mutation {
        table: table.to_owned(),
        rowkey: rowkey.as_bytes().to_vec(),
        ops: vec![CellOp::Put {
            column: column.to_owned(),
            ts,
            value: value.as_bytes().to_vec(),
        }],
    }
}

/// Both threads on one CPU: there a reader woken by a write's publish runs before the writer
/// has finished publishing, which is how the indexer came to spin (see `FeedClock::current`).
fn pin_to_first_cpu() {
    let allowed = rustix::thread::sched_getaffinity(None).expect("reads the CPU set");
    let first = (0..rustix::thread::CpuSet::MAX_CPU)
        .find(|&cpu| allowed.is_set(cpu))
        .expect("some CPU is allowed");
    let mut cpus = rustix::thread::CpuSet::new();
    cpus.set(first);
    rustix::thread::sched_setaffinity(None, &cpus).expect("pins the thread");
}

#[test]
fn a_feed_reader_told_the_feed_advanced_finds_the_new_events() {
    const WRITES: i64 = 2000;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(open(dir.path()));
    let reader_store = store.clone();
    let reader = std::thread::spawn(move || {
        pin_to_first_cpu();
        let (mut after, mut empty_reads) = (0, 0);
        while after < WRITES {
            let committed = reader_store.wait_for_offset_after("t", after, Duration::from_secs(10));
            assert!(committed > after, "no write for 10 s at offset {after}");
            let events = reader_store.read_feed("t", after, 100).expect("reads");
            match events.last() {
                Some(last) => after = last.offset,
                None => empty_reads += 1,
            }
        }
        empty_reads
    });
    pin_to_first_cpu();
    for n in 0..WRITES {
        let key = format!("r{n}");
        store
            .mutate_sync(vec![put("t", &key, "f:q", 1, "v")])
            .expect("writes");
    }
    assert_eq!(
        reader.join().expect("reader"),
        0,
        "every wait that said the feed advanced was followed by a read that found events"
    );
}

#[test]
fn table_names_escape_injectively() {
    assert_eq!(escape_table_name("ns:users"), "ns_3Ausers");
    assert_eq!(escape_table_name("a_b.c-d"), "a_5Fb.c-d");
    assert_ne!(escape_table_name("a:b"), escape_table_name("a_3Ab"));
    assert_eq!(escape_table_name("用"), "_E7_94_A8");
}

#[test]
fn prefix_successor_skips_trailing_max_bytes() {
    assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
    assert_eq!(prefix_successor(&[1, 0xFF, 0xFF]), Some(vec![2]));
    assert_eq!(prefix_successor(&[0xFF]), None);
    assert_eq!(prefix_successor(b""), None);
}

#[test]
fn invalid_table_names_are_rejected_at_open() {
    let dir = tempfile::tempdir().expect("tempdir");
    let empty = EmbeddedStore::open(dir.path(), &[String::new()]);
    assert!(matches!(empty, Err(StoreError::InvalidRequest { .. })));
    let long = EmbeddedStore::open(dir.path(), &[":".repeat(100)]);
    assert!(matches!(long, Err(StoreError::InvalidRequest { .. })));
}

#[test]
fn a_call_with_one_bad_mutation_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let mut bad = put("t", "r2", "i:a", 1, "v");
    bad.ops.push(CellOp::DeleteCell {
        column: "nocolon".to_owned(),
        ts: 1,
    });
    let result = store.mutate_sync(vec![put("t", "r1", "i:a", 1, "v"), bad]);
    assert!(matches!(result, Err(StoreError::InvalidMutation { .. })));
    let unknown = store.mutate_sync(vec![
        put("t", "r1", "i:a", 1, "v"),
        put("x", "r", "i:a", 1, "v"),
    ]);
    assert!(matches!(unknown, Err(StoreError::UnknownTable(name)) if name == "x"));
    assert_eq!(store.last_offset("t"), 0);
    assert_eq!(store.count_rows("t").expect("count"), 0);
}

#[test]
fn receipt_names_each_touched_table_with_its_last_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let receipt = store
        .mutate_sync(vec![
            put("t", "a", "i:x", 1, "1"),
            put("ns:other", "a", "i:x", 1, "1"),
            put("t", "b", "i:x", 1, "1"),
        ])
        .expect("mutate");
    assert_eq!(
        receipt.last_offset_by_table,
        [("ns:other".to_owned(), 1), ("t".to_owned(), 2)]
    );
    assert!(
        store
            .mutate_sync(Vec::new())
            .expect("empty")
            .last_offset_by_table
            .is_empty()
    );
}

#[test]
fn several_mutations_of_one_row_in_a_call_build_on_each_other() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    store
        .mutate_sync(vec![
            put("t", "r", "i:a", 5, "first"),
            put("t", "r", "i:b", 5, "b"),
            Mutation {
                table: "t".to_owned(),
                rowkey: b"r".to_vec(),
                ops: vec![CellOp::DeleteCell {
                    column: "i:b".to_owned(),
                    ts: 6,
                }],
            },
            put("t", "r", "i:a", 4, "older, ignored"),
        ])
        .expect("mutate");
    let rows = store
        .get_rows_sync("t", &[b"r".to_vec()], None)
        .expect("get");
    let row = rows[0].as_ref().expect("row exists");
    assert_eq!(row.cells.len(), 1);
    assert_eq!(row.cells["i:a"].value, b"first");
    assert_eq!(store.read_feed("t", 0, 100).expect("feed").len(), 4);
}

#[test]
fn rows_interleaved_in_a_call_keep_their_own_call_order() {
    // Rows are merged in key order (see mutate_inner); each row's mutations must still apply
    // in call order. At equal timestamps the later put wins, so the order is observable.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let keys = ["r9", "r1", "r5", "r0", "r7"];
    let mut mutations = Vec::new();
    for round in 0..50 {
        for key in keys {
            mutations.push(put("t", key, "i:a", 5, &format!("{key}-{round}")));
        }
    }
    mutations.push(put("t", "r5", "i:b", 7, "only b"));
    store.mutate_sync(mutations).expect("mutate");
    let rowkeys: Vec<Vec<u8>> = keys.iter().map(|key| key.as_bytes().to_vec()).collect();
    let rows = store.get_rows_sync("t", &rowkeys, None).expect("get");
    for (key, row) in keys.iter().zip(&rows) {
        let row = row.as_ref().expect("row exists");
        assert_eq!(
            row.cells["i:a"].value,
            format!("{key}-49").into_bytes(),
            "{key}"
        );
    }
    assert_eq!(rows[2].as_ref().expect("r5").cells["i:b"].value, b"only b");
    assert_eq!(store.read_feed("t", 0, 1000).expect("feed").len(), 251);
}

#[test]
fn created_tables_survive_reopen_have_no_feed_and_can_be_deleted() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = open(dir.path());
        let families = ["cf".to_owned(), "x".to_owned()];
        let info = store.create_table("made", &families).expect("create");
        assert_eq!(info.origin, TableOrigin::Created);
        assert!(matches!(
            store.create_table("made", &families),
            Err(StoreError::TableExists(name)) if name == "made"
        ));
        assert!(matches!(
            store.create_table("t", &families),
            Err(StoreError::TableExists(_))
        ));
        let receipt = store
            .mutate_sync(vec![
                put("made", "r", "cf:a", 1, "v"),
                put("t", "r", "i:a", 1, "v"),
            ])
            .expect("mutate");
        // Rows only: no feed event, no offset for the created table.
        assert_eq!(receipt.last_offset_by_table, [("t".to_owned(), 1)]);
        assert!(store.read_feed("made", 0, 10).expect("feed").is_empty());
        assert_eq!(store.trim_feed("made", 10).expect("trim"), 0);
        store.set_table_enabled("made", false).expect("disable");
        assert!(matches!(
            store.set_table_enabled("t", false),
            Err(StoreError::ConfiguredTable(_))
        ));
        assert!(matches!(
            store.delete_table("t"),
            Err(StoreError::ConfiguredTable(_))
        ));
    }
    let store = open(dir.path());
    assert_eq!(store.tables(), ["t", "ns:other", "made"]);
    let made = store.table_info("made").expect("info");
    assert_eq!(
        made,
        TableInfo {
            name: "made".to_owned(),
            families: Some(vec!["cf".to_owned(), "x".to_owned()]),
            versions: BTreeMap::new(),
            origin: TableOrigin::Created,
            enabled: false,
        }
    );
    let rows = store
        .get_rows_sync("made", &[b"r".to_vec()], None)
        .expect("get");
    assert_eq!(rows[0].as_ref().expect("row").cells["cf:a"].value, b"v");

    store.delete_table("made").expect("delete");
    assert!(matches!(
        store.get_rows_sync("made", &[b"r".to_vec()], None),
        Err(StoreError::UnknownTable(_))
    ));
    assert!(matches!(
        store.mutate_sync(vec![put("made", "r", "cf:a", 2, "v")]),
        Err(StoreError::UnknownTable(_))
    ));
    // Created again under the same name: empty.
    store
        .create_table("made", &["cf".to_owned()])
        .expect("create again");
    assert_eq!(store.count_rows("made").expect("count"), 0);
    drop(store);
    let store = open(dir.path());
    assert_eq!(
        store.table_info("made").expect("info").families,
        Some(vec!["cf".to_owned()])
    );
}

#[test]
fn create_table_checks_names_and_families_and_never_adopts_old_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    for families in [
        vec![],
        vec!["a:b".to_owned()],
        vec!["a".to_owned(), "a".to_owned()],
    ] {
        assert!(matches!(
            store.create_table("x", &families),
            Err(StoreError::InvalidRequest { .. })
        ));
    }
    assert!(matches!(
        store.create_table("", &["cf".to_owned()]),
        Err(StoreError::InvalidRequest { .. })
    ));
    store
        .mutate_sync(vec![put("t", "r", "i:a", 1, "v")])
        .expect("mutate");
    drop(store);
    // `t` is no longer configured; its rows stay on disk and are not taken over.
    let store = EmbeddedStore::open(dir.path(), &[]).expect("opens");
    let error = store.create_table("t", &["i".to_owned()]).unwrap_err();
    assert!(error.to_string().contains("earlier config"), "{error}");
}

#[test]
fn unknown_tables_have_an_empty_closed_feed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    assert_eq!(store.last_offset("nope"), 0);
    assert!(store.subscribe("nope").has_changed().is_err());
    assert_eq!(
        store.wait_for_offset_after("nope", 0, Duration::from_secs(5)),
        0
    );
    assert!(matches!(
        store.read_feed("nope", 0, 1),
        Err(StoreError::UnknownTable(_))
    ));
}

fn op_mutation(table: &str, rowkey: &str, ops: Vec<CellOp>) -> Mutation {
    Mutation {
        table: table.to_owned(),
        rowkey: rowkey.as_bytes().to_vec(),
        ops,
    }
}

/// `(ts, value)` of every version of `column`, newest first.
fn versions_of(
    store: &EmbeddedStore,
    table: &str,
    rowkey: &str,
    column: &str,
) -> Vec<(i64, String)> {
    store
        .get_versions_sync(table, rowkey.as_bytes(), None)
        .expect("reads versions")
        .and_then(|mut columns| columns.remove(column))
        .unwrap_or_default()
        .into_iter()
        .map(|cell| (cell.ts, String::from_utf8(cell.value).expect("utf-8")))
        .collect()
}

#[test]
fn a_family_keeps_its_versions_across_reopen_and_deletes_mask_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = open(dir.path());
        let families = ["v".to_owned(), "one".to_owned()];
        let keep = BTreeMap::from([("v".to_owned(), 3), ("one".to_owned(), 1)]);
        let info = store
            .create_table_with_versions("made", &families, &keep)
            .expect("create");
        assert_eq!(info.versions, BTreeMap::from([("v".to_owned(), 3)]));
        for (ts, value) in [(20, "b"), (10, "a"), (40, "d"), (30, "c")] {
            store
                .mutate_sync(vec![
                    put("made", "r", "v:a", ts, value),
                    put("made", "r", "one:a", ts, value),
                ])
                .expect("writes");
        }
        assert_eq!(
            versions_of(&store, "made", "r", "v:a"),
            [(40, "d".into()), (30, "c".into()), (20, "b".into())]
        );
        assert_eq!(
            versions_of(&store, "made", "r", "one:a"),
            [(40, "d".into())]
        );
        // The latest-state read is untouched by the versions below it.
        let rows = store
            .get_rows_sync("made", &[b"r".to_vec()], None)
            .expect("get");
        assert_eq!(rows[0].as_ref().expect("row").cells["v:a"].ts, 40);
    }
    let store = open(dir.path());
    assert_eq!(
        store.table_info("made").expect("info").versions,
        BTreeMap::from([("v".to_owned(), 3)])
    );
    assert_eq!(versions_of(&store, "made", "r", "v:a").len(), 3);
    // A cell delete below the newest masks the versions at or below it, and late puts.
    store
        .mutate_sync(vec![op_mutation(
            "made",
            "r",
            vec![CellOp::DeleteCell {
                column: "v:a".to_owned(),
                ts: 30,
            }],
        )])
        .expect("deletes");
    store
        .mutate_sync(vec![put("made", "r", "v:a", 25, "late")])
        .expect("writes");
    assert_eq!(versions_of(&store, "made", "r", "v:a"), [(40, "d".into())]);
    store
        .mutate_sync(vec![op_mutation(
            "made",
            "r",
            vec![CellOp::DeleteRow { ts: 40 }],
        )])
        .expect("deletes");
    assert!(versions_of(&store, "made", "r", "v:a").is_empty());
    assert!(
        store
            .get_versions_sync("made", b"r", None)
            .expect("reads")
            .is_none()
    );
}

#[test]
fn tables_keeping_one_version_have_no_versions_keyspace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = |versions: BTreeMap<String, u32>| TableSpec {
        name: "t".to_owned(),
        families: Some(vec!["i".to_owned()]),
        versions,
    };
    {
        let store =
            EmbeddedStore::open_tables(dir.path(), &[spec(BTreeMap::new())], Default::default())
                .expect("opens");
        store
            .mutate_sync(vec![
                put("t", "r", "i:a", 2, "new"),
                put("t", "r", "i:a", 1, "old"),
            ])
            .expect("writes");
        assert!(!store.db.keyspace_exists("vers.t"));
        assert_eq!(versions_of(&store, "t", "r", "i:a"), [(2, "new".into())]);
    }
    {
        let keep = BTreeMap::from([("i".to_owned(), 2)]);
        let store = EmbeddedStore::open_tables(dir.path(), &[spec(keep)], Default::default())
            .expect("opens");
        assert!(store.db.keyspace_exists("vers.t"));
        store
            .mutate_sync(vec![put("t", "r", "i:a", 3, "newer")])
            .expect("writes");
        assert_eq!(
            versions_of(&store, "t", "r", "i:a"),
            [(3, "newer".into()), (2, "new".into())]
        );
    }
    // Back to one version: the kept versions go, so they can't come back unmasked later.
    let store =
        EmbeddedStore::open_tables(dir.path(), &[spec(BTreeMap::new())], Default::default())
            .expect("opens");
    assert!(!store.db.keyspace_exists("vers.t"));
}

#[test]
fn concurrent_read_modify_writes_of_one_row_lose_no_update() {
    const THREADS: u64 = 4;
    const INCREMENTS: u64 = 250;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(open(dir.path()));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || {
                for _ in 0..INCREMENTS {
                    store
                        .mutate_row_with("t", b"counter", |state| {
                            let current = state.value("i:n").map_or(0, |bytes| {
                                u64::from_be_bytes(bytes.try_into().expect("8 bytes"))
                            });
                            let put = CellOp::Put {
                                column: "i:n".to_owned(),
                                ts: i64::try_from(current).expect("small") + 1,
                                value: (current + 1).to_be_bytes().to_vec(),
                            };
                            Ok::<_, StoreError>((vec![put], ()))
                        })
                        .expect("increments");
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("joins");
    }
    let rows = store
        .get_rows_sync("t", &[b"counter".to_vec()], None)
        .expect("get");
    let value = &rows[0].as_ref().expect("row").cells["i:n"].value;
    assert_eq!(
        u64::from_be_bytes(value.as_slice().try_into().expect("8 bytes")),
        THREADS * INCREMENTS
    );
    // Every increment went through the change feed.
    let feed = store.read_feed("t", 0, 10_000).expect("feed");
    assert_eq!(feed.len() as u64, THREADS * INCREMENTS);
    // Nothing decided, nothing written; the decision's error comes back as it is.
    let answer = store
        .mutate_row_with("t", b"counter", |_| Ok::<_, StoreError>((Vec::new(), 7)))
        .expect("reads");
    assert_eq!(answer, 7);
    let error = store
        .mutate_row_with("t", b"counter", |_| {
            Err::<(Vec<CellOp>, ()), _>(StoreError::InvalidRequest {
                reason: "no".to_owned(),
            })
        })
        .unwrap_err();
    assert!(matches!(error, StoreError::InvalidRequest { .. }));
    assert_eq!(store.last_offset("t") as u64, THREADS * INCREMENTS);
}

#[test]
fn reversed_scans_run_from_start_down_to_stop_in_batches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let mutations: Vec<Mutation> = (0..10)
        .map(|i| put("t", &format!("r{i}"), "i:a", 1, "v"))
        .collect();
    store.mutate_sync(mutations).expect("writes");
    let keys = |start: &str, stop: Option<&str>, batch: usize| {
        let mut request = ScanRequest {
            start: start.as_bytes().to_vec(),
            stop: stop.map(|stop| stop.as_bytes().to_vec()),
            prefix: None,
            columns: None,
            batch,
        };
        let mut keys = Vec::new();
        loop {
            let found = store.scan_reversed_sync("t", &request).expect("scans");
            assert!(found.rows.len() <= batch);
            keys.extend(
                found
                    .rows
                    .into_iter()
                    .map(|row| String::from_utf8(row.rowkey).expect("utf-8")),
            );
            match found.next_start {
                Some(next) => request.start = next,
                None => break keys,
            }
        }
    };
    let all: Vec<String> = (0..10).rev().map(|i| format!("r{i}")).collect();
    assert_eq!(keys("", None, 3), all);
    assert_eq!(
        keys("r7", Some("r4"), 2),
        ["r7", "r6", "r5"],
        "start inclusive, stop exclusive"
    );
    assert_eq!(
        keys("r75", Some("r4"), 10),
        ["r7", "r6", "r5"],
        "start need not exist"
    );
    assert!(keys("r4", Some("r7"), 10).is_empty(), "stop above start");
    let with_prefix = ScanRequest {
        prefix: Some(b"r".to_vec()),
        batch: 1,
        ..ScanRequest::default()
    };
    assert!(matches!(
        store.scan_reversed_sync("t", &with_prefix),
        Err(StoreError::InvalidRequest { .. })
    ));
}

#[test]
fn a_table_record_from_before_versions_still_opens() {
    #[derive(serde::Serialize)]
    struct RecordV1 {
        families: Vec<String>,
        enabled: bool,
    }
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let store = open(dir.path());
        let record = RecordV1 {
            families: vec!["cf".to_owned()],
            enabled: false,
        };
        let bytes = postcard::to_extend(&record, vec![TABLE_RECORD_V1]).expect("encodes");
        store
            .meta
            .insert([TABLE_KEY_PREFIX, b"old"].concat(), bytes)
            .expect("writes");
    }
    let store = open(dir.path());
    let info = store.table_info("old").expect("opens the old record");
    assert_eq!(info.families, Some(vec!["cf".to_owned()]));
    assert!(info.versions.is_empty());
    assert!(!info.enabled);
}

#[test]
fn a_feed_hold_stops_trims_until_raised_or_dropped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    for i in 0..10 {
        store
            .mutate_sync(vec![put("t", &format!("r{i}"), "cf:a", 1, "v")])
            .expect("write");
    }
    assert_eq!(store.trim_feed("t", 3).expect("trim"), 3);
    let hold = store.hold_feed("t").expect("hold");
    assert_eq!(hold.floor(), 3);
    // The live indexer goes on committing and trimming: nothing above the hold goes.
    assert_eq!(store.trim_feed("t", 8).expect("trim"), 0);
    assert_eq!(store.read_feed("t", 3, 100).expect("feed").len(), 7);
    hold.raise(5);
    assert_eq!(store.trim_feed("t", 8).expect("trim"), 2);
    assert_eq!(store.feed_floor("t").expect("floor"), 5);
    // A second hold keeps the lower of the two.
    let second = store.hold_feed("t").expect("hold");
    drop(hold);
    assert_eq!(store.trim_feed("t", 8).expect("trim"), 0);
    drop(second);
    assert_eq!(store.trim_feed("t", 8).expect("trim"), 3);
    assert_eq!(store.read_feed("t", 0, 100).expect("feed")[0].offset, 9);
}
