//! The indexer core against a real on-disk tantivy index and a real fjall change feed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hbidx_indexer::{
    CHANGE_FEED, ChangeFeedSource, Checkpoint, CommitPolicy, Condition, MatchMode, WriterOptions,
    open_table_index,
};
use hbidx_schema::config::TableConfig;
use hbidx_schema::model::{CellOp, Mutation};
use hbidx_store::EmbeddedStore;

fn table() -> Arc<TableConfig> {
    let config =
        hbidx_schema::parse_config(include_str!("../../deploy/config/hbidx.toml")).unwrap();
    Arc::new(config.table("user").unwrap().clone())
}

fn put(table: &TableConfig, key: &str, ts: i64, cells: &[(&str, &str)]) -> Mutation {
    Mutation {
        table: table.name.clone(),
        rowkey: table.rowkey.encode(key).unwrap(),
        ops: cells
            .iter()
            .map(|(column, value)| CellOp::Put {
                column: (*column).to_string(),
                ts,
                value: value.as_bytes().to_vec(),
            })
            .collect(),
    }
}

fn phone(table: &TableConfig, value: &str) -> Condition {
    Condition::build(
        "phone",
        table.field("phone").unwrap(),
        MatchMode::Exact,
        false,
        value,
    )
    .unwrap()
}

fn name(table: &TableConfig, value: &str) -> Condition {
    Condition::build(
        "name",
        table.field("name").unwrap(),
        MatchMode::Exact,
        false,
        value,
    )
    .unwrap()
}

#[test]
fn checkpoint_survives_reopen_and_uncommitted_work_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let table = table();
    {
        let (mut writer, searcher) =
            open_table_index(dir.path(), table.clone(), &WriterOptions::default()).unwrap();
        writer
            .apply(
                &put(&table, "u1", 1, &[("info:phone", "13800138000")]),
                CHANGE_FEED,
                0,
                1,
            )
            .unwrap();
        let committed = writer.commit().unwrap();
        assert_eq!(committed.position(CHANGE_FEED, 0), Some(1));
        assert_eq!(
            searcher
                .lookup(&[phone(&table, "13800138000")], 10, None, usize::MAX)
                .unwrap()
                .rowkeys
                .len(),
            1
        );
        // Applied but never committed: lost with the process, and so is its position.
        writer
            .apply(
                &put(&table, "u2", 1, &[("info:phone", "13900000000")]),
                CHANGE_FEED,
                0,
                2,
            )
            .unwrap();
    }
    let (writer, searcher) =
        open_table_index(dir.path(), table.clone(), &WriterOptions::default()).unwrap();
    assert_eq!(writer.checkpoint().position(CHANGE_FEED, 0), Some(1));
    assert_eq!(
        searcher
            .lookup(&[phone(&table, "13800138000")], 10, None, usize::MAX)
            .unwrap()
            .rowkeys
            .len(),
        1
    );
    assert!(
        searcher
            .lookup(&[phone(&table, "13900000000")], 10, None, usize::MAX)
            .unwrap()
            .rowkeys
            .is_empty()
    );
}

#[test]
fn partial_updates_late_events_and_replay_converge() {
    let dir = tempfile::tempdir().unwrap();
    let table = table();
    let (mut writer, searcher) =
        open_table_index(dir.path(), table.clone(), &WriterOptions::default()).unwrap();
    let events = [
        put(
            &table,
            "u1",
            10,
            &[("info:phone", "13800138000"), ("info:name", "张三")],
        ),
        put(&table, "u1", 20, &[("info:name", "李四")]),
        // Late and older: must not win.
        put(&table, "u1", 15, &[("info:name", "王五")]),
    ];
    for (i, event) in events.iter().enumerate() {
        writer.apply(event, CHANGE_FEED, 0, i as i64 + 1).unwrap();
        // Commit in the middle so later events read state back from the committed index.
        writer.commit().unwrap();
    }
    let found = |c: Condition| {
        searcher
            .lookup(&[c], 10, None, usize::MAX)
            .unwrap()
            .rowkeys
            .len()
    };
    assert_eq!(
        found(phone(&table, "13800138000")),
        1,
        "partial update kept the phone"
    );
    assert_eq!(found(name(&table, "李四")), 1);
    assert_eq!(found(name(&table, "张三")), 0);
    assert_eq!(found(name(&table, "王五")), 0);
    // Replaying everything (as after a crash before a checkpoint) changes nothing.
    for (i, event) in events.iter().enumerate() {
        writer.apply(event, CHANGE_FEED, 0, i as i64 + 1).unwrap();
    }
    writer.commit().unwrap();
    assert_eq!(found(name(&table, "李四")), 1);
    assert_eq!(searcher.all_rows().unwrap().len(), 1);
    // A row delete removes every field.
    let delete = Mutation {
        table: table.name.clone(),
        rowkey: table.rowkey.encode("u1").unwrap(),
        ops: vec![CellOp::DeleteRow { ts: 30 }],
    };
    writer.apply(&delete, CHANGE_FEED, 0, 4).unwrap();
    writer.commit().unwrap();
    assert_eq!(found(phone(&table, "13800138000")), 0);
    assert!(searcher.all_rows().unwrap().is_empty());
}

#[test]
fn malformed_value_is_skipped_and_the_row_still_indexed_on_valid_fields() {
    let dir = tempfile::tempdir().unwrap();
    let table = table();
    let (mut writer, searcher) =
        open_table_index(dir.path(), table.clone(), &WriterOptions::default()).unwrap();
    let outcome = writer
        .apply(
            &put(
                &table,
                "u1",
                1,
                &[("info:phone", "12"), ("info:name", "张三")],
            ),
            CHANGE_FEED,
            0,
            1,
        )
        .unwrap();
    assert_eq!(outcome.invalid_values, 1);
    writer.commit().unwrap();
    assert_eq!(
        searcher
            .lookup(&[name(&table, "张三")], 10, None, usize::MAX)
            .unwrap()
            .rowkeys
            .len(),
        1
    );
    assert_eq!(writer.invalid_values(), 1);
}

/// A fjall store under `dir/store` and the table's live indexer on its change feed, with the
/// index under `dir/index`.
fn feed_indexer(
    dir: &std::path::Path,
    table: &Arc<TableConfig>,
    policy: CommitPolicy,
) -> (
    Arc<EmbeddedStore>,
    hbidx_indexer::TableSearcher,
    hbidx_indexer::IndexerHandle,
) {
    let store = Arc::new(
        EmbeddedStore::open(&dir.join("store"), std::slice::from_ref(&table.name)).unwrap(),
    );
    let (writer, searcher) =
        open_table_index(&dir.join("index"), table.clone(), &WriterOptions::default()).unwrap();
    let handle = hbidx_indexer::spawn(
        writer,
        Box::new(ChangeFeedSource::new(store.clone(), table.name.clone())),
        policy,
    )
    .unwrap();
    (store, searcher, handle)
}

#[test]
fn change_feed_pipeline_indexes_within_the_commit_interval_and_trims_the_feed() {
    let dir = tempfile::tempdir().unwrap();
    let table = table();
    let (store, searcher, handle) = feed_indexer(dir.path(), &table, CommitPolicy::default());
    let batch: Vec<Mutation> = (0..5000)
        .map(|i| {
            put(
                &table,
                &format!("u{i}"),
                1,
                &[("info:phone", &format!("137{i:08}"))],
            )
        })
        .collect();
    store.mutate_sync(batch).unwrap();
    let mut indexed = handle.indexed.clone();
    let started = std::time::Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(30),
            indexed.wait_for(|cp: &Checkpoint| cp.position(CHANGE_FEED, 0) == Some(5000)),
        )
        .await
        .expect("indexed in time")
        .unwrap();
    });
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(
        searcher
            .lookup(&[phone(&table, "13700004999")], 10, None, usize::MAX)
            .unwrap()
            .rowkeys
            .len(),
        1
    );
    handle.shutdown();
    // The feed was trimmed up to the committed checkpoint.
    assert!(store.read_feed(&table.name, 0, 10).unwrap().is_empty());
}

/// Once the table is idle, the indexer merges its segments into one (dropping deleted
/// documents); lookups answer the same before and after, and the checkpoint doesn't move.
#[test]
fn idle_table_is_compacted_into_one_segment() {
    let dir = tempfile::tempdir().unwrap();
    let table = table();
    // Idle for longer than any gap between the rounds below, even on a loaded machine: a
    // compaction between two rounds would hold the next one off for `compact_min_interval`.
    let policy = CommitPolicy {
        compact_when_idle: Some(Duration::from_secs(2)),
        ..CommitPolicy::default()
    };
    let (store, searcher, handle) = feed_indexer(dir.path(), &table, policy);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Four separate commits (the writer commits 50 ms after each batch), one of them
    // rewriting earlier rows, so there are several segments and deleted documents.
    let mut offset = 0;
    for round in 0..4 {
        let batch: Vec<Mutation> = (0..500)
            .map(|i| {
                let i = if round == 3 { i } else { round * 500 + i };
                put(
                    &table,
                    &format!("u{i}"),
                    round + 1,
                    &[("info:phone", &format!("137{i:08}"))],
                )
            })
            .collect();
        store.mutate_sync(batch).unwrap();
        offset += 500;
        let mut indexed = handle.indexed.clone();
        rt.block_on(
            indexed.wait_for(|cp: &Checkpoint| cp.position(CHANGE_FEED, 0) == Some(offset)),
        )
        .unwrap();
    }
    let checkpoint = handle.indexed.borrow().clone();
    let lookup = |value: &str| {
        searcher
            .lookup(&[phone(&table, value)], 10, None, usize::MAX)
            .unwrap()
    };
    let before: Vec<_> = ["13700000007", "13700000999", "13700001499", "13799999999"]
        .iter()
        .map(|value| lookup(value))
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while searcher.stats().segments > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "still {} segments",
            searcher.stats().segments
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = searcher.stats();
    assert_eq!(
        (stats.docs, stats.rows),
        (1500, 1500),
        "rewritten rows once each"
    );
    let after: Vec<_> = ["13700000007", "13700000999", "13700001499", "13799999999"]
        .iter()
        .map(|value| lookup(value))
        .collect();
    assert_eq!(before, after);
    assert_eq!(after[0].rowkeys.len(), 1);
    assert_eq!(after[3].rowkeys.len(), 0);
    assert_eq!(*handle.indexed.borrow(), checkpoint);
    // The status counts follow the compaction without a commit of their own: the indexer
    // notices the reader's new generation at its next report tick (once a second).
    let counted = |handle: &hbidx_indexer::IndexerHandle| {
        (
            handle.stats.segments.load(Ordering::Relaxed),
            handle.stats.docs.load(Ordering::Relaxed),
        )
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while counted(&handle) != (1, 1500) {
        assert!(
            std::time::Instant::now() < deadline,
            "status still counts (segments, docs) = {:?}",
            counted(&handle)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    handle.shutdown();
    // The merged index opens again with its checkpoint.
    let (writer, searcher) = open_table_index(
        &dir.path().join("index"),
        table.clone(),
        &WriterOptions::default(),
    )
    .unwrap();
    assert_eq!(*writer.checkpoint(), checkpoint);
    assert_eq!(searcher.stats().segments, 1);
}

/// Pages come from several segments, with replaced and deleted documents among them: every
/// live match exactly once, in rowkey order, whatever the page size.
#[test]
fn paging_in_rowkey_order_returns_every_match_once() {
    let dir = tempfile::tempdir().unwrap();
    let table = table();
    let (mut writer, searcher) =
        open_table_index(dir.path(), table.clone(), &WriterOptions::default()).unwrap();
    let mut offset = 0;
    let mut apply = |writer: &mut hbidx_indexer::TableIndexWriter, mutation: Mutation| {
        offset += 1;
        writer.apply(&mutation, CHANGE_FEED, 0, offset).unwrap();
    };
    // Three commits, three segments.
    for i in 0..57 {
        apply(
            &mut writer,
            put(&table, &format!("u{i}"), 1, &[("info:name", "张伟")]),
        );
        if i % 20 == 19 {
            writer.commit().unwrap();
        }
    }
    writer.commit().unwrap();
    // Rewrites move u0..u9 into a fourth segment (their old documents are deleted); u50..u56
    // are deleted; u3 and u4 get another name and stop matching.
    for i in 0..10 {
        let name = if i == 3 || i == 4 { "李娜" } else { "张伟" };
        apply(
            &mut writer,
            put(&table, &format!("u{i}"), 2, &[("info:name", name)]),
        );
    }
    for i in 50..57 {
        apply(
            &mut writer,
            Mutation {
                table: table.name.clone(),
                rowkey: table.rowkey.encode(&format!("u{i}")).unwrap(),
                ops: vec![CellOp::DeleteRow { ts: 2 }],
            },
        );
    }
    writer.commit().unwrap();
    let mut expected: Vec<Vec<u8>> = (0..50)
        .filter(|i| *i != 3 && *i != 4)
        .map(|i| table.rowkey.encode(&format!("u{i}")).unwrap())
        .collect();
    expected.sort();
    for page_size in [1, 7, 10, 48, 100] {
        let mut all = Vec::new();
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let page = searcher
                .lookup(
                    &[name(&table, "张伟")],
                    page_size,
                    cursor.as_deref(),
                    usize::MAX,
                )
                .unwrap();
            assert!(page.rowkeys.len() <= page_size);
            all.extend(page.rowkeys.clone());
            if !page.has_more {
                break;
            }
            cursor = page.rowkeys.last().cloned();
        }
        assert_eq!(all, expected, "page size {page_size}");
    }
    let others = searcher
        .lookup(&[name(&table, "李娜")], 10, None, usize::MAX)
        .unwrap();
    assert_eq!(others.rowkeys.len(), 2);
    assert!(!others.has_more);
}

/// The region report (dashboard) reads live rowkeys from postings and the `_rk` column: deleted
/// rows and replaced documents must not count, and every live row exactly once across segments;
/// above the cap, an evenly spaced sample of them.
#[test]
fn live_rowkeys_are_each_live_row_once() {
    let dir = tempfile::tempdir().unwrap();
    let table = table();
    let (mut writer, searcher) =
        open_table_index(dir.path(), table.clone(), &WriterOptions::default()).unwrap();
    for i in 0..50 {
        let key = format!("u{i}");
        writer
            .apply(
                &put(&table, &key, 1, &[("info:phone", "13800138000")]),
                CHANGE_FEED,
                0,
                i,
            )
            .unwrap();
    }
    writer.commit().unwrap();
    // A second segment: ten rows updated (their old documents deleted), five rows deleted.
    for i in 0..10 {
        let key = format!("u{i}");
        writer
            .apply(
                &put(&table, &key, 2, &[("info:name", "张三")]),
                CHANGE_FEED,
                0,
                100 + i,
            )
            .unwrap();
    }
    for i in 40..45 {
        let delete = Mutation {
            table: table.name.clone(),
            rowkey: table.rowkey.encode(&format!("u{i}")).unwrap(),
            ops: vec![CellOp::DeleteRow { ts: 3 }],
        };
        writer.apply(&delete, CHANGE_FEED, 0, 200 + i).unwrap();
    }
    writer.commit().unwrap();
    let all = searcher.live_rowkeys_sample(1000).unwrap();
    let mut live = all.rowkeys;
    live.sort();
    let mut expected: Vec<Vec<u8>> = (0..50)
        .filter(|i| !(40..45).contains(i))
        .map(|i| table.rowkey.encode(&format!("u{i}")).unwrap())
        .collect();
    expected.sort();
    assert_eq!(live, expected);
    assert_eq!(all.live, 45);
    assert_eq!(writer.stats().rows, 45);

    // Capped at 10 (60 documents marked live in two segments, 15 of them deleted): about 10
    // live rows from both segments, distinct, and the live count still exact (every deleted
    // document here had a visible value).
    let sample = searcher.live_rowkeys_sample(10).unwrap();
    assert_eq!(sample.live, 45);
    assert!(
        (8..=12).contains(&sample.rowkeys.len()),
        "{:?}",
        sample.rowkeys
    );
    let mut distinct = sample.rowkeys.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), sample.rowkeys.len());
    assert!(distinct.iter().all(|rowkey| expected.contains(rowkey)));
    let updated = |rowkey: &Vec<u8>| {
        (0..10).any(|i| *rowkey == table.rowkey.encode(&format!("u{i}")).unwrap())
    };
    assert!(
        distinct.iter().any(updated) && !distinct.iter().all(updated),
        "both segments sampled: {distinct:?}"
    );
}

/// A match far larger than the page (pruned to the page while it is collected, to bound
/// memory) still gives the smallest rowkeys, from the start and after a cursor.
#[test]
fn broad_match_gives_the_smallest_rowkeys_of_the_page() {
    let dir = tempfile::tempdir().unwrap();
    let table = table();
    let (mut writer, searcher) =
        open_table_index(dir.path(), table.clone(), &WriterOptions::default()).unwrap();
    for i in 0..9000 {
        writer
            .apply(
                &put(&table, &format!("u{i}"), 1, &[("info:name", "张伟")]),
                CHANGE_FEED,
                0,
                i + 1,
            )
            .unwrap();
    }
    writer.commit().unwrap();
    let mut expected: Vec<Vec<u8>> = (0..9000)
        .map(|i| table.rowkey.encode(&format!("u{i}")).unwrap())
        .collect();
    expected.sort();
    let page = searcher
        .lookup(&[name(&table, "张伟")], 3, None, usize::MAX)
        .unwrap();
    assert_eq!(page.rowkeys, expected[..3]);
    assert!(page.has_more);
    let page = searcher
        .lookup(
            &[name(&table, "张伟")],
            5,
            Some(&expected[6000]),
            usize::MAX,
        )
        .unwrap();
    assert_eq!(page.rowkeys, expected[6001..6006]);
    let page = searcher
        .lookup(
            &[name(&table, "张伟")],
            100,
            Some(&expected[8950]),
            usize::MAX,
        )
        .unwrap();
    assert_eq!(page.rowkeys, expected[8951..]);
    assert!(!page.has_more);
}

/// Every exact lookup resolves its rowkey through the bounded rowkey cache: with room for
/// everything, and with a budget so small that chunks are evicted all the time, each phone
/// finds exactly its row, across chunk boundaries and segments.
#[test]
fn exact_lookups_resolve_rowkeys_through_the_bounded_cache() {
    let table = table();
    let rows = 1500;
    let phone_of = |i: usize| format!("139{i:08}");
    for budget in [64 << 20, 4096] {
        let dir = tempfile::tempdir().unwrap();
        let options = WriterOptions {
            rowkey_cache_bytes: budget,
            ..WriterOptions::default()
        };
        let (mut writer, searcher) = open_table_index(dir.path(), table.clone(), &options).unwrap();
        for i in 0..rows {
            let phone = phone_of(i);
            writer
                .apply(
                    &put(&table, &format!("u{i}"), 1, &[("info:phone", &phone)]),
                    CHANGE_FEED,
                    0,
                    i as i64 + 1,
                )
                .unwrap();
            // Three segments, so ordinals restart per segment.
            if i == 500 || i == 1000 {
                writer.commit().unwrap();
            }
        }
        writer.commit().unwrap();
        // Twice: the second pass answers from cached chunks (or re-decodes evicted ones).
        for _ in 0..2 {
            for i in (0..rows).rev() {
                let page = searcher
                    .lookup(&[phone(&table, &phone_of(i))], 10, None, usize::MAX)
                    .unwrap();
                assert_eq!(
                    page.rowkeys,
                    vec![table.rowkey.encode(&format!("u{i}")).unwrap()],
                    "phone of u{i} with a {budget}-byte cache"
                );
            }
        }
        let stats = searcher.rowkey_cache_stats();
        let (weight, entries) = (stats.bytes, stats.entries);
        // Every lookup resolved its one rowkey through the cache: 2 passes of `rows` lookups.
        assert_eq!(stats.hits + stats.misses, 2 * rows as u64);
        if budget != 4096 {
            // Room for everything: the second pass only hits, and the first missed once per
            // chunk (1500 rows in 3 segments: ceil(501/64) + ceil(500/64) + ceil(499/64)).
            assert!(stats.hits >= rows as u64, "{stats:?}");
            assert_eq!(stats.misses, entries as u64, "{stats:?}");
        }
        assert!(
            weight <= budget,
            "cache holds {weight} bytes over its {budget}-byte budget"
        );
        if budget == 4096 {
            // A chunk weighs its 64 rowkeys of at least 8 bytes, their u32 ends and ~100 bytes
            // of overhead: over 860 bytes, so 4 at most in 4 KiB.
            assert!(
                entries <= 4,
                "a 4 KiB cache can't hold {entries} chunks of 64 rowkeys"
            );
        } else {
            // 1500 rows in 3 segments: every 64-ordinal chunk of each segment is cached.
            assert!(entries >= 24, "only {entries} chunks cached");
        }
    }
}

/// An index written with the earlier layout (`_rk` as stored hex text, field norms on) is
/// refused as a schema mismatch, which the server answers by rebuilding it from the store, and
/// its checkpoint is still readable, so the rebuild resumes the source where it was.
#[test]
fn an_index_with_the_old_layout_is_a_schema_mismatch_with_a_readable_checkpoint() {
    use tantivy::schema::{FAST, STORED, STRING, Schema};
    let dir = tempfile::tempdir().unwrap();
    let table = table();
    let mut builder = Schema::builder();
    let rowkey = builder.add_text_field("_rk", STRING | STORED | FAST);
    builder.add_text_field("_key", STORED);
    builder.add_bytes_field("_state", STORED);
    builder.add_text_field("_live", STRING);
    for field in [
        "phone",
        "phone__tail",
        "idcard",
        "name",
        "name__gram",
        "name__py",
    ] {
        builder.add_text_field(field, STRING);
    }
    let index = tantivy::Index::create_in_dir(dir.path(), builder.build()).unwrap();
    let mut writer: tantivy::IndexWriter = index.writer(15_000_000).unwrap();
    writer
        .add_document(tantivy::doc!(rowkey => "616263"))
        .unwrap();
    let mut checkpoint = Checkpoint::default();
    checkpoint.advance(CHANGE_FEED, 0, 41);
    let mut prepared = writer.prepare_commit().unwrap();
    prepared.set_payload(&checkpoint.to_payload());
    prepared.commit().unwrap();
    drop(writer);

    match open_table_index(dir.path(), table, &WriterOptions::default()) {
        Err(hbidx_indexer::IndexerError::SchemaMismatch { path }) => {
            assert_eq!(path, dir.path().display().to_string())
        }
        Err(other) => panic!("expected a schema mismatch, got {other}"),
        Ok(_) => panic!("an index with the old layout opened"),
    }
    let read = hbidx_indexer::committed_checkpoint(dir.path()).unwrap();
    assert_eq!(read.position(CHANGE_FEED, 0), Some(41));
}

/// `[cluster]` with two shards of the example table split at `boundary`, this instance shard 0.
fn shard_zero(boundary: &[u8]) -> Arc<hbidx_schema::config::ClusterConfig> {
    Arc::new(hbidx_schema::config::ClusterConfig {
        shards: vec![
            vec!["http://127.0.0.1:1".into()],
            vec!["http://127.0.0.1:2".into()],
        ],
        shard: Some(0),
        replica: Some(0),
        timeout: Duration::from_secs(1),
        boundaries: [("user".to_string(), vec![boundary.to_vec()])].into(),
    })
}

/// A shard's writer indexes only its own rows, on every path: an event for another shard's
/// row moves the checkpoint and nothing else, and repairs and this instance's own writes
/// queued for the indexer (the repair queue) are skipped and counted, their tickets still
/// committed so nobody waits on them.
#[test]
fn a_shard_indexes_only_its_own_rows_on_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let table = table();
    let boundary = b"8".to_vec();
    let options = WriterOptions {
        cluster: Some(shard_zero(&boundary)),
        ..WriterOptions::default()
    };
    let (mut writer, searcher) = open_table_index(dir.path(), table.clone(), &options).unwrap();
    assert_eq!(
        writer.own_range().map(|r| r.stop.clone()),
        Some(Some(boundary.clone()))
    );
    let rows: Vec<Mutation> = (0..40)
        .map(|i| {
            put(
                &table,
                &format!("u{i}"),
                1,
                &[("info:phone", &format!("137{i:08}"))],
            )
        })
        .collect();
    let own = |m: &Mutation| m.rowkey.as_slice() < boundary.as_slice();
    let own_rows = rows.iter().filter(|m| own(m)).count() as u64;
    assert!(own_rows > 0 && own_rows < 40);
    for (offset, row) in rows.iter().enumerate() {
        let outcome = writer.apply(row, "kafka:t", 0, offset as i64).unwrap();
        assert_eq!(outcome.foreign, !own(row));
    }
    writer.commit().unwrap();
    assert_eq!(writer.checkpoint().position("kafka:t", 0), Some(39));
    assert_eq!(writer.stats().rows, own_rows);
    for row in &rows {
        let digits = match &row.ops[0] {
            CellOp::Put { value, .. } => String::from_utf8(value.clone()).unwrap(),
            _ => unreachable!(),
        };
        let found = searcher
            .lookup(&[phone(&table, &digits)], 10, None, usize::MAX)
            .unwrap()
            .rowkeys;
        assert_eq!(found.len(), usize::from(own(row)));
    }

    // The repair queue, through the indexer thread.
    let handle = hbidx_indexer::spawn(
        writer,
        Box::new(hbidx_indexer::IdleSource::default()),
        CommitPolicy::default(),
    )
    .unwrap();
    let foreign = rows.iter().find(|m| !own(m)).unwrap();
    let mine = rows.iter().find(|m| own(m)).unwrap();
    let stats = handle.stats.clone();
    let mut last = 0;
    for (row, phone) in [(foreign, "13999999991"), (mine, "13999999992")] {
        let repair = put(&table, "x", 2, &[("info:phone", phone)]);
        last = stats
            .repairs
            .submit(Mutation {
                rowkey: row.rowkey.clone(),
                ..repair
            })
            .unwrap();
    }
    let mut committed = stats.repairs.committed_tickets();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), committed.wait_for(|t| *t >= last))
            .await
            .expect("the repairs are committed")
            .unwrap();
    });
    assert_eq!(stats.foreign_skipped.load(Ordering::Relaxed), 1);
    let lookup = |digits: &str| {
        searcher
            .lookup(&[phone(&table, digits)], 10, None, usize::MAX)
            .unwrap()
            .rowkeys
    };
    assert!(lookup("13999999991").is_empty(), "another shard's row");
    assert_eq!(lookup("13999999992"), vec![mine.rowkey.clone()]);
    handle.shutdown();
}

fn condition(
    table: &TableConfig,
    field: &str,
    mode: MatchMode,
    suffix: bool,
    value: &str,
) -> Condition {
    Condition::build(field, table.field(field).unwrap(), mode, suffix, value).unwrap()
}

/// A lookup walks at most `max_matches` matches: one that matches more is refused naming its
/// narrowest condition, whatever the page size, while a narrow condition beside a broad one
/// (a surname prefix with a phone tail) is answered exactly, its broad part checked on the
/// rows' states, in rowkey order across segments and after a cursor.
#[test]
fn lookups_walk_at_most_their_bound() {
    let dir = tempfile::tempdir().unwrap();
    let table = table();
    let (mut writer, searcher) =
        open_table_index(dir.path(), table.clone(), &WriterOptions::default()).unwrap();
    let surnames = ["张", "李", "王"];
    let row = |i: u64| {
        let name = format!(
            "{}{}",
            surnames[(i % 3) as usize],
            ["伟", "芳", "娜", "强"][(i % 4) as usize]
        );
        let phone = format!("138{:08}", i * 7919 % 100_000_000);
        (name, phone)
    };
    for i in 0..3000u64 {
        let (name, phone) = row(i);
        writer
            .apply(
                &put(
                    &table,
                    &format!("u{i}"),
                    1,
                    &[("info:name", &name), ("info:phone", &phone)],
                ),
                CHANGE_FEED,
                0,
                i as i64 + 1,
            )
            .unwrap();
        // Several segments, so the walk merges pages across them.
        if i % 1000 == 999 {
            writer.commit().unwrap();
        }
    }
    writer.commit().unwrap();
    let matching = |keep: &dyn Fn(&str, &str) -> bool| {
        let mut keys: Vec<Vec<u8>> = (0..3000u64)
            .filter(|&i| {
                let (name, phone) = row(i);
                keep(&name, &phone)
            })
            .map(|i| table.rowkey.encode(&format!("u{i}")).unwrap())
            .collect();
        keys.sort();
        keys
    };
    let zhang = condition(&table, "name", MatchMode::Prefix, false, "张");
    // 1000 rows start with 张: refused under a bound of 999, answered at 1000.
    let refused = searcher
        .lookup(std::slice::from_ref(&zhang), 5, None, 999)
        .unwrap_err();
    assert!(
        matches!(&refused, hbidx_indexer::IndexerError::TooBroad { field, max: 999 } if field == "name"),
        "{refused}"
    );
    let page = searcher
        .lookup(std::slice::from_ref(&zhang), 5, None, 1000)
        .unwrap();
    let all_zhang = matching(&|name, _| name.starts_with('张'));
    assert_eq!(page.rowkeys, all_zhang[..5]);
    assert!(page.has_more);
    assert_eq!(page.walked, 1000);
    // After a cursor, in rowkey order.
    let after = searcher
        .lookup(std::slice::from_ref(&zhang), 7, Some(&all_zhang[500]), 1000)
        .unwrap();
    assert_eq!(after.rowkeys, all_zhang[501..508]);

    // 张 + a phone tail: the tail's few matches drive, 张 is checked on their states, so a
    // bound far below 张's 1000 rows answers it.
    let tail_of = row(42).1[7..].to_string();
    let tail = condition(&table, "phone", MatchMode::Exact, true, &tail_of);
    let both = searcher
        .lookup(&[zhang.clone(), tail.clone()], 100, None, 50)
        .unwrap();
    let expected = matching(&|name, phone| name.starts_with('张') && phone.ends_with(&tail_of));
    assert!(!expected.is_empty());
    assert_eq!(both.rowkeys, expected);
    assert!(both.walked <= 50, "{}", both.walked);
    // A two-character prefix is a range over the names; past the bound its candidates are
    // checked on their states.
    let zhangwei = condition(&table, "name", MatchMode::Prefix, false, "张伟");
    let (name_24, phone_24) = row(24);
    assert_eq!(name_24, "张伟");
    let tail_24 = phone_24[7..].to_string();
    let tail_of_24 = condition(&table, "phone", MatchMode::Exact, true, &tail_24);
    let ranged = searcher
        .lookup(&[zhangwei, tail_of_24], 100, None, 50)
        .unwrap();
    let expected = matching(&|name, phone| name.starts_with("张伟") && phone.ends_with(&tail_24));
    assert!(!expected.is_empty());
    assert_eq!(ranged.rowkeys, expected);
    // An exact name within the bound filters by its postings instead.
    let exact = name(&table, "张伟");
    let with_exact = searcher.lookup(&[exact, tail], 100, None, 300).unwrap();
    let expected = matching(&|name, phone| name == "张伟" && phone.ends_with(&tail_of));
    assert_eq!(with_exact.rowkeys, expected);
}
