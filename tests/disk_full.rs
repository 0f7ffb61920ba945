//! A full data volume, over the real interface: the `hbidx` binary with its data dir (or only
//! its index) on a small tmpfs this test mounts, filled to the last byte with a filler file.
//! Writes must answer 507 `insufficient_storage` saying what was (not) written, the indexer
//! must pause without dropping anything and resume by itself once the filler is gone, and
//! every acknowledged write must be found afterwards, also after a kill -9 and a restart.
//!
//! Mounting needs root (CAP_SYS_ADMIN): without it the tests fail saying so, never skip.

mod util;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use util::tmpfs::Tmpfs;
use util::{Server, eventually, get, keys, put};

fn person(i: usize) -> Value {
    json!({"cells": {"info:name": format!("用户{i}"), "info:phone": phone(i)}})
}

fn phone(i: usize) -> String {
    format!("139{i:08}")
}

/// Whether a phone lookup finds row `k{i}`.
fn found(server: &Server, i: usize) -> bool {
    let (_, body) = get(&server.url(&format!("/v1/tables/user/rows?phone={}", phone(i))));
    keys(&body) == vec![format!("k{i}")]
}

fn write(server: &Server, i: usize, wait: bool) -> (u16, Value) {
    let query = if wait { "?wait=indexed" } else { "" };
    put(
        &server.url(&format!("/v1/tables/user/rows/k{i}{query}")),
        &person(i),
    )
}

fn assert_no_panic(server: &Server) {
    let log = server.log_text();
    assert!(!log.contains("panicked"), "a panic in the log:\n{log}");
}

fn user_status(server: &Server) -> Value {
    get(&server.url("/v1/indexer/status")).1["tables"]["user"].clone()
}

/// The index volume fills while the row store (elsewhere) still takes writes: writes are
/// stored and acknowledged, `wait=indexed` answers 507 saying the write is stored, the indexer
/// pauses (one log line, errors counted) and catches up by itself once space is freed.
#[test]
#[ignore = "needs root to mount a tmpfs: scripts/test.sh runs it"]
fn a_full_index_volume_pauses_indexing_and_resumes_when_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let volume = Tmpfs::mount(&dir.path().join("index/user"), 16);
    let server = Server::start(&["serve"], dir.path(), &[]);
    let mut acknowledged = Vec::new();
    for i in 0..20 {
        let (status, body) = write(&server, i, i % 5 == 0);
        assert_eq!(status, 200, "{body}");
        acknowledged.push(i);
    }

    volume.fill();
    let mut full_answers = 0;
    for i in 20..40 {
        let (status, body) = write(&server, i, i % 5 == 0);
        match status {
            200 => acknowledged.push(i),
            507 => {
                assert_eq!(body["error"]["code"], "insufficient_storage", "{body}");
                let message = body["error"]["message"].as_str().unwrap();
                assert!(
                    message.contains("the write was stored")
                        && message.contains("index volume is full"),
                    "{message}"
                );
                // Stored before the index refused it: it must be found once space returns.
                acknowledged.push(i);
                full_answers += 1;
            }
            _ => panic!("k{i}: {status} {body}"),
        }
    }
    assert!(full_answers > 0, "no wait=indexed write answered 507");
    let status = user_status(&server);
    assert_eq!(status["storage_full"], true, "{status}");
    let checkpoint = status["checkpoint"].clone();
    assert!(status["errors"].as_u64().unwrap() > 0, "{status}");
    // Lookups of what was indexed before go on.
    assert!(found(&server, 0));
    let (_, metrics) = util::get_text(&server.url("/metrics"));
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("hbidx_indexer_errors_total{") && !l.ends_with(" 0")),
        "hbidx_indexer_errors_total did not count the failed commits"
    );

    volume.free();
    let started = Instant::now();
    eventually("indexing resumed", Duration::from_secs(20), || {
        (user_status(&server)["storage_full"] == false).then_some(())
    });
    let resumed_after = started.elapsed();
    assert_ne!(user_status(&server)["checkpoint"], checkpoint);
    for &i in &acknowledged {
        assert!(
            found(&server, i),
            "acknowledged k{i} not found after space returned"
        );
    }
    let (status, body) = write(&server, 100, true);
    assert_eq!(status, 200, "{body}");
    assert!(found(&server, 100));

    // While full the loop retried every few seconds; the log said so once, not per retry.
    let log = server.log_text();
    let paused_lines = log.matches("the index volume is full").count();
    assert_eq!(
        paused_lines, 1,
        "resumed after {resumed_after:?}; log:\n{log}"
    );
    assert!(log.contains("indexing resumed"), "{log}");
    assert_no_panic(&server);

    server.kill9();
    let server = Server::start(&["serve"], dir.path(), &[]);
    acknowledged.push(100);
    eventually("the index after a restart", Duration::from_secs(20), || {
        acknowledged
            .iter()
            .all(|&i| found(&server, i))
            .then_some(())
    });
    assert_no_panic(&server);
    drop(server);
    drop(volume);
}

/// The whole data dir fills: the row store refuses writes with 507 (nothing written) and, since
/// its journal can't take writes after a failed one, keeps refusing them until a restart, which
/// /readyz and the message say; lookups go on; nothing acknowledged is lost.
#[test]
#[ignore = "needs root to mount a tmpfs: scripts/test.sh runs it"]
fn a_full_data_volume_refuses_writes_with_507_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let volume = Tmpfs::mount(dir.path(), 64);
    let data_dir = dir.path().join("data");
    let server = Server::start(&["serve"], &data_dir, &[]);
    let mut acknowledged = Vec::new();
    for i in 0..20 {
        let (status, body) = write(&server, i, i % 5 == 0);
        assert_eq!(status, 200, "{body}");
        acknowledged.push(i);
    }

    volume.fill();
    let mut refused = 0;
    for i in 20..40 {
        let (status, body) = write(&server, i, i % 2 == 0);
        match status {
            200 => acknowledged.push(i),
            507 => {
                assert_eq!(body["error"]["code"], "insufficient_storage", "{body}");
                let message = body["error"]["message"].as_str().unwrap();
                // Either the store refused it (nothing written) or only the index did.
                if message.contains("nothing was written") {
                    assert!(message.contains("restarted"), "{message}");
                    refused += 1;
                } else {
                    assert!(message.contains("the write was stored"), "{message}");
                    acknowledged.push(i);
                }
            }
            _ => panic!("k{i}: {status} {body}"),
        }
    }
    assert!(refused > 0, "no write was refused for the full volume");
    // Readiness comes from the store's health check, every 2 s.
    let body = eventually("/readyz to fail", Duration::from_secs(10), || {
        let (status, body) = get(&server.url("/readyz"));
        (status == 503).then_some(body)
    });
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("data volume is full"),
        "{body}"
    );
    // Reads go on.
    assert!(found(&server, 0));
    assert_eq!(get(&server.url("/v1/tables/user/rows/k1")).0, 200);

    // Space returns: the index catches up on what the store acknowledged, but the store keeps
    // refusing writes until a restart.
    volume.free();
    eventually("the index caught up", Duration::from_secs(20), || {
        acknowledged
            .iter()
            .all(|&i| found(&server, i))
            .then_some(())
    });
    let (status, body) = write(&server, 200, false);
    assert_eq!(status, 507, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("restarted"),
        "{body}"
    );
    assert_no_panic(&server);

    server.kill9();
    let server = Server::start(&["serve"], &data_dir, &[]);
    assert_eq!(get(&server.url("/readyz")).0, 200);
    for &i in &acknowledged {
        assert_eq!(
            get(&server.url(&format!("/v1/tables/user/rows/k{i}"))).0,
            200,
            "acknowledged k{i} lost"
        );
    }
    let (status, body) = write(&server, 300, true);
    assert_eq!(status, 200, "{body}");
    acknowledged.push(300);
    eventually("the index after a restart", Duration::from_secs(20), || {
        acknowledged
            .iter()
            .all(|&i| found(&server, i))
            .then_some(())
    });
    assert_no_panic(&server);
    drop(server);
    drop(volume);
}
