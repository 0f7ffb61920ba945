//! Drift on the embedded store, end to end with the real binary: rows changed behind the index's
//! back (written to the store without change-feed events, as a bulk load or a lost event would),
//! found and repaired by `hbidx verify` offline on the data dir; `hbidx reindex --from-store`
//! offline and inside a server that keeps answering lookups during the rebuild.

mod util;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hbidx_schema::model::{CellOp, Mutation};
use serde_json::json;
use util::{Server, cli, eventually, get, keys, put, report_count};

const ROWS: usize = 300;

fn phone(i: usize) -> String {
    format!("137{:08}", 20_000_000 + i)
}

#[test]
fn verify_finds_and_repairs_drift_and_store_reindex_rebuilds_while_serving() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap();

    // Rows written the normal way, then the server stops cleanly.
    let server = Server::start(&["serve"], &data, &[]);
    let mut rowkeys = Vec::new();
    for i in 0..ROWS {
        let (status, body) = put(
            &server.url(&format!("/v1/tables/user/rows/d{i:04}?wait=indexed")),
            &json!({"cells": {"info:phone": phone(i), "info:name": format!("客户{i}")}}),
        );
        assert_eq!(status, 200, "{body}");
        if i < 2 {
            rowkeys.push(
                hbidx_schema::codec::parse_printable(body["rowkey"].as_str().unwrap()).unwrap(),
            );
        }
    }
    server.stop();

    // Behind the index's back: d0000 deleted, d0001's phone changed; no feed events.
    {
        let store =
            hbidx_store::EmbeddedStore::open(&data.join("store"), &["user".to_string()]).unwrap();
        let ts = 4_000_000_000_000;
        store
            .apply_replicated(vec![
                Mutation {
                    table: "user".into(),
                    rowkey: rowkeys[0].clone(),
                    ops: vec![CellOp::DeleteRow { ts }],
                },
                Mutation {
                    table: "user".into(),
                    rowkey: rowkeys[1].clone(),
                    ops: vec![CellOp::Put {
                        column: "info:phone".into(),
                        ts,
                        value: phone(9001).into_bytes(),
                    }],
                },
            ])
            .unwrap();
        store.sync_to_disk().unwrap();
    }

    // Offline verify: exit 1 with the drift named.
    let (code, out) = cli(&["verify", "user", "--data-dir", data_arg]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(report_count(&out, "ghosts in the index"), 1, "{out}");
    assert_eq!(report_count(&out, "value mismatches"), 1, "{out}");
    assert_eq!(report_count(&out, "missing from the index"), 0, "{out}");
    assert!(out.contains("d0000") && out.contains("d0001"), "{out}");

    // Repair, then nothing is left.
    let (code, out) = cli(&["verify", "user", "--repair", "--data-dir", data_arg]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("repaired: 2"), "{out}");
    let (code, out) = cli(&["verify", "user", "--data-dir", data_arg]);
    assert_eq!(code, 0, "{out}");

    // Offline reindex by table scan.
    let (code, out) = cli(&["reindex", "user", "--from-store", "--data-dir", data_arg]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("{} rows", ROWS - 1)), "{out}");

    // The server sees the repaired, rebuilt index.
    let server = Server::start(&["serve"], &data, &[]);
    let lookup = |p: String| get(&server.url(&format!("/v1/tables/user/rows?phone={p}")));
    assert_eq!(keys(&lookup(phone(9001)).1), vec!["d0001"]);
    assert_eq!(lookup(phone(1)).1["count"], 0);
    assert_eq!(lookup(phone(0)).1["count"], 0);
    assert_eq!(keys(&lookup(phone(7)).1), vec!["d0007"]);

    // A store reindex inside the server while a prober keeps looking up.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, bad) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let prober = {
        let (stop, ok, bad) = (stop.clone(), ok.clone(), bad.clone());
        let url = server.url(&format!("/v1/tables/user/rows?phone={}", phone(42)));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (status, body) = get(&url);
                if status == 200 && keys(&body) == vec!["d0042"] {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    bad.fetch_add(1, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    // Lookups answered before the rebuild starts and after it has swapped the index.
    let answered_after = |at_least: u64| {
        eventually("lookups answered", Duration::from_secs(30), || {
            (ok.load(Ordering::Relaxed) + bad.load(Ordering::Relaxed) >= at_least).then_some(())
        })
    };
    answered_after(5);
    let (code, out) = cli(&["reindex", "user", "--from-store", "--server", &server.base]);
    let during = ok.load(Ordering::Relaxed) + bad.load(Ordering::Relaxed);
    answered_after(during + 5);
    stop.store(true, Ordering::Relaxed);
    prober.join().unwrap();
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        bad.load(Ordering::Relaxed),
        0,
        "every lookup during the rebuild answered"
    );
    assert!(ok.load(Ordering::Relaxed) > 10);
    // Still indexing after the swap.
    let (status, _) = put(
        &server.url("/v1/tables/user/rows/d9999?wait=indexed"),
        &json!({"cells": {"info:phone": phone(9999)}}),
    );
    assert_eq!(status, 200);
    assert_eq!(keys(&lookup(phone(9999)).1), vec!["d9999"]);
}

/// Rows of the reindex-under-writes tests: enough that the scan runs for seconds while the
/// writers go on.
const BIG: u64 = 200_000;

/// The default shape (`hbidx demo`, rows in the embedded store, indexed from its change feed):
/// a reindex from the store while two clients keep updating and deleting rows. The live indexer
/// goes on trimming the feed meanwhile; the job holds the feed so that the new index replays
/// the events after its start checkpoint. Afterwards every acknowledged write is found by its
/// newest phone and by no older one, and `verify --full` finds no drift.
#[test]
fn a_store_reindex_under_writes_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&["demo", "--rows", &BIG.to_string()], dir.path(), &[]);
    util::writes::reindex_under_writes(
        &server.base,
        None,
        BIG,
        hbidx_demo::people::uid_of,
        200,
        Duration::from_secs(60),
    );
}

/// Copies a directory tree (the store, while no server holds it).
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// An index whose checkpoint is ahead of its store's change feed (a store restored from an
/// older copy, or one a filesystem lost writes of): resuming would skip the feed offsets the
/// index believes it has applied, and keep rows the store no longer has. At start it is
/// rebuilt from the store instead, with an error in the log and a count in the metrics; the
/// rows the store lost are gone from the index too, and new writes are indexed.
#[test]
fn an_index_ahead_of_its_store_is_rebuilt_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let write = |server: &Server, i: usize| {
        let (status, body) = put(
            &server.url(&format!("/v1/tables/user/rows/a{i:04}?wait=indexed")),
            &json!({"cells": {"info:phone": phone(i)}}),
        );
        assert_eq!(status, 200, "{body}");
    };
    let server = Server::start(&["serve"], &data, &[]);
    for i in 0..20 {
        write(&server, i);
    }
    server.stop();
    copy_dir(&data.join("store"), &dir.path().join("older-store"));
    let server = Server::start(&["serve"], &data, &[]);
    for i in 20..40 {
        write(&server, i);
    }
    server.stop();
    std::fs::remove_dir_all(data.join("store")).unwrap();
    copy_dir(&dir.path().join("older-store"), &data.join("store"));

    let server = Server::start(&["serve"], &data, &[]);
    let log = server.log_text();
    assert!(
        log.contains("the index can't resume from its checkpoint"),
        "{log}"
    );
    let (_, metrics) = util::get_text(&server.url("/metrics"));
    let rebuilt = metrics
        .lines()
        .find(|line| line.starts_with("hbidx_index_rebuilt_total{"))
        .unwrap_or_default();
    assert!(
        rebuilt.contains("reason=\"feed_mismatch\"") && rebuilt.ends_with(" 1"),
        "{metrics}"
    );
    let index_only = |i: usize| {
        keys(
            &get(&server.url(&format!(
                "/v1/tables/user/rows?phone={}&index_only=true",
                phone(i)
            )))
            .1,
        )
    };
    assert_eq!(index_only(3), vec!["a0003"]);
    assert!(
        index_only(33).is_empty(),
        "a row the store lost is still indexed"
    );
    // The offsets the lost writes had are taken again by new writes, which are indexed.
    for i in 40..60 {
        write(&server, i);
        assert_eq!(index_only(i), vec![format!("a{i:04}")]);
    }
    util::assert_no_drift(&server.base, None);
}
