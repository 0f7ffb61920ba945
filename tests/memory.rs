//! `[memory]` over the real binary: the budget's split reaches the parts that hold memory, each
//! part stays within its share under writes and lookups, `/metrics` and the dashboard's summary
//! show use against budget, and a budget too small for its parts is refused naming the key.

mod util;

use std::path::Path;
use std::time::Duration;

use hbidx_query::{Sample, parse_exposition};
use serde_json::json;
use util::{Server, cli, eventually, get, get_text, put};

const MIB: f64 = 1048576.0;

fn config(dir: &Path, memory: &str) -> String {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config/hbidx.toml"),
    )
    .unwrap();
    let path = dir.join("memory.toml");
    std::fs::write(&path, format!("{example}\n[memory]\n{memory}\n")).unwrap();
    path.to_string_lossy().into_owned()
}

fn scrape(server: &Server) -> Vec<Sample> {
    let (status, text) = get_text(&server.url("/metrics"));
    assert_eq!(status, 200, "{text}");
    parse_exposition(&text)
}

fn part(samples: &[Sample], name: &str, part: &str) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.name == name && s.label("part") == Some(part))
        .map(|s| s.value)
}

fn phone(i: usize) -> String {
    format!("137{:08}", 20_000_000 + i)
}

#[test]
fn the_budget_is_split_enforced_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(
        dir.path(),
        "budget_mb = 200\nrow_cache_mb = 2\nstore_memtables_mb = 4",
    );
    let server = Server::start(&["--config", &path, "serve"], &dir.path().join("data"), &[]);

    // Rows of ~4 KB: 1,500 of them are ~6 MB of rows and as much again of change feed, over
    // the 4 MiB memtable budget, and their reads are three times the 2 MiB row cache.
    let padding = "x".repeat(4000);
    for i in 0..1500 {
        let (status, body) = put(
            &server.url(&format!("/v1/tables/user/rows/m{i:05}")),
            &json!({"cells": {"info:phone": phone(i), "info:name": "预算", "info:email": padding}}),
        );
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = put(
        &server.url("/v1/tables/user/rows/m99999?wait=indexed"),
        &json!({"cells": {"info:phone": phone(99_999)}}),
    );
    assert_eq!(status, 200, "{body}");
    for i in 0..1500 {
        let (status, body) = get(&server.url(&format!("/v1/tables/user/rows?phone={}", phone(i))));
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["count"], 1, "{body}");
    }

    let samples = scrape(&server);
    let budget = |name: &str| part(&samples, "hbidx_memory_budget_bytes", name).unwrap();
    // Given parts are exact; the rest share what is left in their proportions.
    assert_eq!(budget("row_cache"), 2.0 * MIB);
    assert_eq!(budget("store_memtables"), 4.0 * MIB);
    let total: f64 = [
        "index_writers",
        "store_cache",
        "store_memtables",
        "row_cache",
        "rowkey_cache",
        "source_buffers",
        "index_merges",
    ]
    .iter()
    .map(|name| budget(name))
    .sum();
    assert!((total - 200.0 * MIB).abs() < 16.0, "{total}");
    // One table: its writer holds half the writers' part, the other half is a reindex's.
    assert_eq!(
        part(&samples, "hbidx_memory_used_bytes", "index_writers").unwrap(),
        (budget("index_writers") / 2.0).floor()
    );
    // The row cache filled up to its share, not past it.
    let rows = part(&samples, "hbidx_memory_used_bytes", "row_cache").unwrap();
    assert!(rows > 0.5 * MIB && rows <= 2.0 * MIB, "row cache {rows}");
    // Memtables were sealed and flushed to stay within theirs.
    eventually("memtables within budget", Duration::from_secs(20), || {
        let used = part(
            &scrape(&server),
            "hbidx_memory_used_bytes",
            "store_memtables",
        )?;
        (used <= 4.0 * MIB).then_some(())
    });
    let block_cache = part(&samples, "hbidx_memory_used_bytes", "store_cache").unwrap();
    assert!(block_cache <= budget("store_cache"), "{block_cache}");
    assert!(part(&samples, "hbidx_memory_used_bytes", "source_buffers").is_none());
    // Merges report the documents they are writing, within their part.
    let merging = part(&samples, "hbidx_memory_used_bytes", "index_merges")
        .expect("hbidx_memory_used_bytes{part=\"index_merges\"}");
    assert!(merging <= budget("index_merges"), "{merging}");
    // Every merge of a table's segments is capped by its share of the merges' part, at the
    // ~24 bytes of heap a merge holds per document; the example config has one table.
    let merge_max_docs = samples
        .iter()
        .find(|s| s.name == "hbidx_index_merge_max_docs" && s.label("table") == Some("user"))
        .map(|s| s.value)
        .expect("hbidx_index_merge_max_docs{table=\"user\"}");
    assert_eq!(merge_max_docs, (budget("index_merges") / 24.0).floor());

    // The dashboard's data has the same parts.
    let (status, summary) = get(&server.url("/v1/ops/summary"));
    assert_eq!(status, 200, "{summary}");
    let memory = summary["memory"].as_array().unwrap();
    assert_eq!(memory.len(), 7, "{summary}");
    let row_cache = memory.iter().find(|p| p["part"] == "row_cache").unwrap();
    assert_eq!(row_cache["budget_bytes"], 2 << 20);
    server.stop();

    // Too small a budget for its parts is refused before anything opens.
    let bad = config(dir.path(), "budget_mb = 100\nstore_cache_mb = 90");
    let (code, output) = cli(&["schema", "check", &bad]);
    assert_ne!(code, 0, "{output}");
    assert!(output.contains("memory.budget_mb"), "{output}");
}
