use hbidx_schema::model::{CellOp, Mutation};
use tantivy::Term;

use super::*;

#[test]
fn rowkeys_are_hashed_for_logs() {
    // A reversal design: the rowkey is the phone number reversed.
    let rowkey = b"00083100831";
    let shown = rowkey_ref(rowkey);
    assert!(!shown.contains("00083100831") && !shown.contains("13800138000"));
    assert_eq!(
        shown,
        rowkey_ref(rowkey),
        "stable, so log lines of one row match"
    );
    assert_ne!(shown, rowkey_ref(b"00083100832"));
}

/// Writer options with one indexing thread: each commit writes exactly one segment.
fn one_thread() -> WriterOptions {
    WriterOptions {
        threads: 1,
        ..WriterOptions::default()
    }
}

/// The example config's `user` table and an empty index of it in a fresh directory.
fn user_index() -> (
    tempfile::TempDir,
    Arc<TableConfig>,
    TableIndexWriter,
    TableSearcher,
) {
    let config =
        hbidx_schema::parse_config(include_str!("../../../deploy/config/hbidx.toml")).unwrap();
    let table = Arc::new(config.table("user").unwrap().clone());
    let dir = tempfile::tempdir().unwrap();
    let (writer, searcher) = open_table_index(dir.path(), table.clone(), &one_thread()).unwrap();
    (dir, table, writer, searcher)
}

fn mutation(table: &TableConfig, key: &str, ts: i64, op: Option<&str>) -> Mutation {
    let ops = match op {
        Some(name) => vec![CellOp::Put {
            column: "info:name".into(),
            ts,
            value: name.as_bytes().to_vec(),
        }],
        None => vec![CellOp::DeleteRow { ts }],
    };
    Mutation {
        table: table.name.clone(),
        rowkey: table.rowkey.encode(key).unwrap(),
        ops,
    }
}

/// Paging through `rows_after` with a small limit returns every live row of every segment
/// once, in rowkey order, and skips deleted rows and tombstone-only documents.
#[test]
fn rows_after_pages_through_live_rows_in_rowkey_order() {
    let (_dir, table, mut writer, searcher) = user_index();
    let mut offset = 0;
    let mut expected = std::collections::BTreeSet::new();
    for segment in 0..3 {
        for i in 0..20 {
            offset += 1;
            let key = format!("u{}", segment * 100 + i * 7 % 20);
            let event = mutation(&table, &key, offset, Some("张三"));
            writer.apply(&event, "t", 0, offset).unwrap();
            expected.insert(table.rowkey.encode(&key).unwrap());
        }
        writer.commit().unwrap();
    }
    // A row deleted (a tombstone-only document) and a row updated into a later segment.
    for (key, op) in [("u5", None), ("u107", Some("李四"))] {
        offset += 1;
        let event = mutation(&table, key, offset, op);
        writer.apply(&event, "t", 0, offset).unwrap();
    }
    writer.commit().unwrap();
    expected.remove(&table.rowkey.encode("u5").unwrap());
    let mut seen = Vec::new();
    let mut cursor: Option<Vec<u8>> = None;
    loop {
        let (rows, next) = searcher.rows_after(cursor.as_deref(), 7).unwrap();
        seen.extend(rows.into_iter().map(|(key, _)| key));
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let expected: Vec<Vec<u8>> = expected.into_iter().collect();
    assert_eq!(seen, expected);
}

/// The rows that remember a delete (row, family, cell) are found through their mark, live or
/// not, in every segment, once each; an index written without marks finds the same ones by
/// reading every row's state.
#[test]
fn each_delete_finds_the_rows_that_remember_a_delete() {
    let (_dir, table, mut writer, searcher) = user_index();
    let ops = |key: &str| -> Vec<CellOp> {
        let put = |column: &str, value: &str| CellOp::Put {
            column: column.into(),
            ts: 5,
            value: value.as_bytes().to_vec(),
        };
        match key {
            "u1" => vec![CellOp::DeleteRow { ts: 9 }],
            "u2" => vec![
                put("info:name", "张三"),
                CellOp::DeleteFamily {
                    family: "info".into(),
                    ts: 2,
                },
            ],
            "u3" => vec![
                put("info:name", "李四"),
                CellOp::DeleteCell {
                    column: "info:phone".into(),
                    ts: 7,
                },
            ],
            _ => vec![put("info:name", "王五")],
        }
    };
    let mut offset = 0;
    for segment in 0..3 {
        for i in 0..6 {
            offset += 1;
            let key = format!("u{}", segment * 10 + i);
            let event = Mutation {
                table: table.name.clone(),
                rowkey: table.rowkey.encode(&key).unwrap(),
                ops: ops(&key),
            };
            writer.apply(&event, "t", 0, offset).unwrap();
        }
        writer.commit().unwrap();
    }
    // u3 again in a later segment: its earlier document is deleted, its tombstone kept.
    offset += 1;
    let event = Mutation {
        table: table.name.clone(),
        rowkey: table.rowkey.encode("u3").unwrap(),
        ops: ops("u0"),
    };
    writer.apply(&event, "t", 0, offset).unwrap();
    writer.commit().unwrap();

    let found = |searcher: &TableSearcher| {
        let mut found = Vec::new();
        let count = searcher
            .each_delete(|rowkey, state| {
                assert!(scan::remembers_delete(&state));
                found.push(rowkey);
                Ok(())
            })
            .unwrap();
        assert_eq!(count as usize, found.len());
        found.sort();
        found
    };
    let mut expected: Vec<Vec<u8>> = ["u1", "u2", "u3"]
        .iter()
        .map(|key| table.rowkey.encode(key).unwrap())
        .collect();
    expected.sort();
    let marks = Term::from_field_text(searcher.fields.live, DELETE_MARK);
    let reader = searcher.reader().searcher();
    assert_eq!(
        reader.doc_freq(&marks).unwrap(),
        4,
        "u1, u2 and u3's two documents"
    );
    assert_eq!(found(&searcher), expected);

    // The same index as an hbidx without marks leaves it: the walk reads every row instead.
    writer.forget_delete_marks();
    writer.commit().unwrap();
    let payload = reader.index().load_metas().unwrap().payload;
    assert!(!PayloadFlags::of(payload.as_deref()).delete_marks);
    assert_eq!(found(&searcher), expected);
}

/// A lookup's state reads (covered columns) use built filters but never build one: they run
/// on the async runtime. The indexer's probes build them.
#[test]
fn only_the_indexer_side_builds_rowkey_filters() {
    let (_dir, table, mut writer, searcher) = user_index();
    let event = mutation(&table, "u1", 1, Some("张三"));
    writer.apply(&event, "t", 0, 1).unwrap();
    writer.commit().unwrap();
    let rowkey = table.rowkey.encode("u1").unwrap();
    let found = searcher.kept_rows(std::slice::from_ref(&rowkey)).unwrap();
    assert!(found[0].is_some());
    assert_eq!(searcher.rowkey_filter_stats().filters, 0);
    assert!(searcher.committed_state(&rowkey).unwrap().is_some());
    assert_eq!(searcher.rowkey_filter_stats().filters, 1);
}

/// Rows spread over several segments are found through their segments' rowkey filters,
/// whether a filter was built inline or on its own thread, and rows no segment has are
/// answered from the filters alone.
#[test]
fn rowkey_filters_find_every_row_and_skip_segments_without_it() {
    for inline in [true, false] {
        let (_dir, table, mut writer, searcher) = user_index();
        if !inline {
            searcher.rowkey_filters.set_inline_max_docs(0);
        }
        let mut offset = 0;
        // Four segments of 50 rows each.
        for segment in 0..4 {
            for i in 0..50 {
                offset += 1;
                let key = format!("u{segment}-{i}");
                let event = mutation(&table, &key, offset, Some("张三"));
                writer.apply(&event, "t", 0, offset).unwrap();
            }
            writer.commit().unwrap();
        }
        let rowkey = |key: &str| table.rowkey.encode(key).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            // Every row is found in its segment (a filter never hides a row, built or not).
            for segment in 0..4 {
                for i in [0, 17, 49] {
                    let state = searcher
                        .committed_state(&rowkey(&format!("u{segment}-{i}")))
                        .unwrap();
                    assert!(state.is_some(), "u{segment}-{i}");
                }
            }
            assert!(
                searcher
                    .committed_state(&rowkey("nobody"))
                    .unwrap()
                    .is_none()
            );
            if searcher.rowkey_filter_stats().filters == 4 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "filters built: {:?}",
                searcher.rowkey_filter_stats()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(searcher.rowkey_filter_stats().bytes > 0);
        // An update of a row of the first segment replaces its document (the probe found
        // it behind the filters): still 200 documents and rows.
        offset += 1;
        let event = mutation(&table, "u0-3", offset, Some("李四"));
        writer.apply(&event, "t", 0, offset).unwrap();
        writer.commit().unwrap();
        let stats = searcher.stats();
        assert_eq!((stats.rows, stats.docs), (200, 200), "inline: {inline}");
        // Merged into one segment, the four filters give way to the merged segment's.
        assert_eq!(
            writer.compact(u64::MAX, CompactionScope::Whole).unwrap(),
            Compaction::Started
        );
        while searcher.stats().segments > 1 {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            searcher
                .committed_state(&rowkey("u3-49"))
                .unwrap()
                .is_some()
        );
        while searcher.rowkey_filter_stats().filters != 1 {
            assert!(std::time::Instant::now() < deadline);
            assert!(searcher.committed_state(&rowkey("u2-2")).unwrap().is_some());
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

/// Whether the idle compaction has work is read from the index's segment list, as the
/// compaction decides it: a merge of tantivy's own doesn't reload the searcher, whose older
/// list would say "pending" until the next commit while the compaction finds nothing to do.
#[test]
fn compaction_pending_sees_merges_the_searcher_has_not_reloaded() {
    let (_dir, table, mut writer, searcher) = user_index();
    let mut offset = 0;
    for key in ["u1", "u2", "u3"] {
        offset += 1;
        let event = mutation(&table, key, offset, Some("张三"));
        writer.apply(&event, "t", 0, offset).unwrap();
        writer.commit().unwrap();
    }
    assert!(searcher.compaction_pending());
    let ids: Vec<_> = searcher
        .reader()
        .searcher()
        .segment_readers()
        .iter()
        .map(|segment| segment.segment_id())
        .collect();
    assert_eq!(ids.len(), 3);
    writer.merge_unseen(&ids);
    assert_eq!(searcher.reader().searcher().segment_readers().len(), 3);
    assert!(!searcher.compaction_pending());
    let max_docs = writer.merge_max_docs();
    assert_eq!(
        writer.compact(max_docs, CompactionScope::Recent).unwrap(),
        Compaction::NothingToMerge
    );
}

#[test]
fn the_writer_counts_live_rows_as_it_goes_and_measures_only_changed_segments() {
    let (dir, table, mut writer, searcher) = user_index();
    let options = one_thread();
    let mut offset = 0;
    let mut apply = |writer: &mut TableIndexWriter, key: &str, op: Option<&str>| {
        offset += 1;
        let event = mutation(&table, key, offset, op);
        writer.apply(&event, "t", 0, offset).unwrap();
    };
    for key in ["u1", "u2", "u3"] {
        apply(&mut writer, key, Some("张三"));
    }
    // An update of a row added in the same batch is still one row.
    apply(&mut writer, "u3", Some("张三丰"));
    writer.commit().unwrap();
    assert_eq!(writer.stats().rows, 3);
    assert_eq!(searcher.stats().rows, 3, "the walk agrees");
    // Mark the remembered size of the first segment: if the next call measured it again,
    // the mark would be gone.
    {
        let mut cache = searcher.segment_bytes.lock().unwrap();
        assert_eq!(cache.len(), 1);
        *cache.values_mut().next().unwrap() += 1_000_000;
    }
    let marked = writer.stats().bytes;
    assert!(
        marked > 1_000_000,
        "an unchanged segment is not measured again"
    );

    // The running count is what the writer reports: mark it too. A walk would lose the mark.
    writer.rows += 1000;
    apply(&mut writer, "u4", Some("李四"));
    apply(&mut writer, "u5", Some("李四"));
    writer.commit().unwrap();
    let stats = writer.stats();
    assert_eq!((stats.rows, stats.segments), (1005, 2));
    assert!(stats.bytes > marked, "only the new segment was added");
    writer.rows -= 1000;

    // Deleting u1 marks its document in the first segment deleted (its deletes bitset is
    // added, the rest is still remembered) and leaves a tombstone-only document, which is
    // not a row.
    apply(&mut writer, "u1", None);
    // A rolled-back change is not counted.
    writer.commit().unwrap();
    apply(&mut writer, "u2", None);
    writer.rollback().unwrap();
    let stats = writer.stats();
    assert_eq!((stats.rows, stats.docs), (4, 5));
    assert!(
        stats.bytes > marked,
        "the first segment's size is still the marked one"
    );
    assert_eq!(searcher.stats().rows, 4, "the walk agrees");
    // A row deleted and put again is live again.
    apply(&mut writer, "u1", Some("王五"));
    writer.commit().unwrap();
    assert_eq!(writer.stats().rows, 5);
    assert_eq!(searcher.stats().rows, 5);
    // Compacted into one segment, the merged-away ones are forgotten, and the size is the
    // real one again.
    assert_eq!(
        writer.compact(u64::MAX, CompactionScope::Whole).unwrap(),
        Compaction::Started
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while writer.stats().segments > 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let stats = writer.stats();
    assert_eq!((stats.segments, stats.rows), (1, 5));
    assert!(stats.bytes < 1_000_000);
    assert_eq!(searcher.segment_bytes.lock().unwrap().len(), 1);
    // Clearing empties the count with the index; a reopened writer counts from the index.
    writer.clear().unwrap();
    assert_eq!(writer.stats().rows, 0);
    apply(&mut writer, "u6", Some("赵六"));
    writer.commit().unwrap();
    drop(writer);
    let (writer, _) = open_table_index(dir.path(), table.clone(), &options).unwrap();
    assert_eq!(writer.stats().rows, 1);
}

/// The idle compaction of a big segment and a few small ones merges the small ones and leaves
/// the big one as it is (the same segment, not rewritten), with every row still found.
#[test]
fn a_recent_compaction_leaves_the_big_segment_alone() {
    let (_dir, table, mut writer, searcher) = user_index();
    let mut offset = 0;
    let mut put = |writer: &mut TableIndexWriter, key: String| {
        offset += 1;
        let event = mutation(&table, &key, offset, Some("张三"));
        writer.apply(&event, "t", 0, offset).unwrap();
    };
    for i in 0..400 {
        put(&mut writer, format!("big-{i}"));
    }
    writer.commit().unwrap();
    let segment_ids = |_: &TableIndexWriter| -> Vec<tantivy::index::SegmentId> {
        searcher
            .reader()
            .searcher()
            .segment_readers()
            .iter()
            .map(|segment| segment.segment_id())
            .collect()
    };
    let big = segment_ids(&writer);
    assert_eq!(big.len(), 1);
    for small in 0..3 {
        for i in 0..5 {
            put(&mut writer, format!("small-{small}-{i}"));
        }
        writer.commit().unwrap();
    }
    assert_eq!(segment_ids(&writer).len(), 4);
    assert_eq!(
        writer.compact(u64::MAX, CompactionScope::Recent).unwrap(),
        Compaction::Started
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while segment_ids(&writer).len() > 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the small segments merge"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let after = segment_ids(&writer);
    assert_eq!(after.len(), 2);
    assert!(after.contains(&big[0]), "the big segment is untouched");
    assert_eq!(writer.stats().rows, 415);
    let rowkey = table.rowkey.encode("small-2-4").unwrap();
    assert!(searcher.committed_state(&rowkey).unwrap().is_some());
    // Nothing recent left to merge: one small segment beside the big one.
    assert_eq!(
        writer.compact(u64::MAX, CompactionScope::Recent).unwrap(),
        Compaction::NothingToMerge
    );
    // The merge's waiter thread counts it done after reloading the reader.
    while writer.compacting() {
        assert!(
            std::time::Instant::now() < deadline,
            "the compaction is counted done"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A scan into an empty index keeps no row states until its commit, and stays exact when a row
/// comes out of order or the index already holds rows.
#[test]
fn a_scan_into_an_empty_index_keeps_no_states_and_stays_exact() {
    let (_dir, table, mut writer, searcher) = user_index();
    // The table's rowkeys start with a hash: scan order is the encoded keys' order.
    let mut keys = ["u1", "u2", "u3", "u4"].map(|key| (table.rowkey.encode(key).unwrap(), key));
    keys.sort();
    let [first, second, third, fourth] = keys.map(|(_, key)| key);
    for key in [first, second, third] {
        writer
            .apply_scanned(&mutation(&table, key, 1, Some("张三")))
            .unwrap();
    }
    assert_eq!(
        writer.uncommitted_states(),
        0,
        "ascending rows keep no state"
    );
    // The second row again is out of order. What came before is committed, and the row is
    // merged with its committed state: one document, the newer name.
    writer
        .apply_scanned(&mutation(&table, second, 2, Some("赵六")))
        .unwrap();
    assert_eq!(writer.uncommitted_states(), 1, "the full path from then on");
    writer
        .apply_scanned(&mutation(&table, fourth, 1, Some("钱七")))
        .unwrap();
    assert_eq!(writer.uncommitted_states(), 2);
    writer.commit().unwrap();
    let stats = writer.stats();
    assert_eq!((stats.rows, stats.docs), (4, 4), "no row indexed twice");
    assert_eq!(searcher.stats().rows, 4, "the walk agrees");
    let state = searcher
        .committed_state(&table.rowkey.encode(second).unwrap())
        .unwrap()
        .unwrap();
    assert_eq!(state.value("info:name"), Some("赵六".as_bytes()));

    // A writer over an index that holds rows never skips the lookups, even in order.
    let (dir, table, mut writer, _searcher) = user_index();
    writer
        .apply_repair(&mutation(&table, "u9", 1, Some("张三")))
        .unwrap();
    writer.commit().unwrap();
    drop(writer);
    let (mut writer, _) = open_table_index(dir.path(), table.clone(), &one_thread()).unwrap();
    writer
        .apply_scanned(&mutation(&table, "u9", 2, Some("李四")))
        .unwrap();
    assert_eq!(writer.uncommitted_states(), 1);
    writer.commit().unwrap();
    assert_eq!((writer.stats().rows, writer.stats().docs), (1, 1));
}

/// The live row count rides in each commit's payload, so a reopened writer reads it instead of
/// walking every segment's `_live` postings; an index committed without it is walked once.
#[test]
fn a_reopened_writer_reads_its_row_count_from_the_commit_payload() {
    let (dir, table, mut writer, searcher) = user_index();
    for (offset, (key, op)) in [("u1", Some("张三")), ("u2", Some("李四")), ("u3", None)]
        .into_iter()
        .enumerate()
    {
        let offset = offset as i64 + 1;
        let event = mutation(&table, key, offset, op);
        writer.apply(&event, "t", 0, offset).unwrap();
    }
    writer.commit().unwrap();
    let payload = searcher
        .reader()
        .searcher()
        .index()
        .load_metas()
        .unwrap()
        .payload;
    assert_eq!(PayloadFlags::of(payload.as_deref()).rows, Some(2));
    // A count the walk would not find tells which of the two the reopened writer used.
    writer.rows += 1000;
    let event = mutation(&table, "u4", 4, Some("王五"));
    writer.apply(&event, "t", 0, 4).unwrap();
    writer.commit().unwrap();
    drop((writer, searcher));
    let (writer, searcher) = open_table_index(dir.path(), table.clone(), &one_thread()).unwrap();
    assert_eq!(writer.stats().rows, 1003, "read from the payload");
    assert_eq!(searcher.stats().rows, 3);

    // An index whose last commit carries no count (an hbidx before it) is counted by the walk.
    let index = searcher.reader().searcher().index().clone();
    drop((writer, searcher));
    let mut raw: tantivy::IndexWriter<tantivy::TantivyDocument> =
        index.writer_with_num_threads(1, 15_000_000).unwrap();
    let checkpoint =
        Checkpoint::from_payload(index.load_metas().unwrap().payload.as_deref()).unwrap();
    let mut prepared = raw.prepare_commit().unwrap();
    prepared.set_payload(&checkpoint.to_payload());
    prepared.commit().unwrap();
    drop(raw);
    let (writer, _searcher) = open_table_index(dir.path(), table, &one_thread()).unwrap();
    assert_eq!(writer.stats().rows, 3, "walked");
    assert_eq!(writer.checkpoint().position("t", 0), Some(4));
}

/// Every merge of a table (a size level's after a commit, the idle compaction's) draws on one
/// budget with the table's other writers (a reindex's shadow): while they merge the cap's worth,
/// only small merges start, and the held-back ones start at a commit once there is room.
#[test]
fn a_tables_merges_wait_for_room_in_the_budget_its_writers_share() {
    let config =
        hbidx_schema::parse_config(include_str!("../../../deploy/config/hbidx.toml")).unwrap();
    let table = Arc::new(config.table("user").unwrap().clone());
    let dir = tempfile::tempdir().unwrap();
    // A cap of 6,400 documents: a merge of up to 100 counts as small.
    let options = WriterOptions {
        merge_max_docs: 6_400,
        ..one_thread()
    };
    let (mut writer, _searcher) = open_table_index(dir.path(), table.clone(), &options).unwrap();
    // Another writer of the table (a shadow opened with a clone of the options) merging 6,300.
    let other = options.clone().merge_budgets.for_table(&table.name, 6_400);
    let held = other.try_reserve(6_300).unwrap();
    let segments = |_: &TableIndexWriter| {
        Index::open_in_dir(dir.path())
            .unwrap()
            .searchable_segment_metas()
            .unwrap()
            .len()
    };
    let mut offset = 0;
    let mut commit_segment = |writer: &mut TableIndexWriter| {
        for _ in 0..20 {
            offset += 1;
            let event = mutation(&table, &format!("u{offset}"), offset, Some("张三"));
            writer.apply(&event, "t", 0, offset).unwrap();
        }
        writer.commit().unwrap();
    };
    // Eight segments of one size level: tantivy's log policy merges them (160 documents).
    for _ in 0..8 {
        commit_segment(&mut writer);
    }
    assert_eq!(segments(&writer), 8, "a merge started beside the other's");
    assert_eq!(
        writer.compact(6_400, CompactionScope::Whole).unwrap(),
        Compaction::Busy
    );
    drop(held);
    commit_segment(&mut writer);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while segments(&writer) > 1 || other.merging_docs() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no merge once the budget had room: {} segments",
            segments(&writer)
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(writer.stats().rows, 180);
}
