//! Issue 6: the ops side of the real binary under load. `/metrics` moves when writes and
//! lookups are applied; the Grafana dashboard only queries metrics the binary exports; and
//! `/dashboard`, opened in Debian's headless Chromium, loads, draws data in every chart and
//! logs nothing to the console. The run leaves a screenshot in `target/dashboard.png`
//! (`docs/dashboard.png`, shown in the README and docs/operations/dashboard.md, is a copy of one).

mod util;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hbidx_query::{Sample, parse_exposition};
use serde_json::{Value, json};
use util::{Server, browser, eventually, get, get_text, put};

const NAMES: &[&str] = &["张三", "李四", "王小明", "欧阳娜娜", "曾志伟", "单田芳"];

fn phone(i: usize) -> String {
    format!("139{:08}", i * 7919 % 100_000_000)
}

fn scrape(server: &Server) -> Vec<Sample> {
    let (status, text) = get_text(&server.url("/metrics"));
    assert_eq!(status, 200, "{text}");
    parse_exposition(&text)
}

/// Sum of a metric's samples whose labels include all of `labels`.
fn total(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .map(|s| s.value)
        .sum()
}

fn write_row(server: &Server, i: usize, wait: bool) {
    let url = server.url(&format!(
        "/v1/tables/user/rows/u{i}{}",
        if wait { "?wait=indexed" } else { "" }
    ));
    let (status, body) = put(
        &url,
        &json!({"cells": {"info:name": NAMES[i % NAMES.len()], "info:phone": phone(i)}}),
    );
    assert_eq!(status, 200, "{body}");
}

fn look_up(server: &Server, i: usize) {
    let (status, body) = get(&server.url(&format!("/v1/tables/user/rows?phone={}", phone(i))));
    assert_eq!(status, 200, "{body}");
}

#[test]
#[ignore = "needs Chromium: scripts/test.sh installs it and runs it"]
fn metrics_move_grafana_matches_and_the_dashboard_renders_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let server = Arc::new(Server::start(&["serve"], &dir.path().join("data"), &[]));

    // ---- /metrics moves under load ------------------------------------------------------
    let before = scrape(&server);
    let rows = 300;
    for i in 0..rows {
        write_row(&server, i, i + 1 == rows);
    }
    for i in 0..rows {
        look_up(&server, i);
    }
    let (_, body) = get(&server.url("/v1/tables/user/rows?name=zhangsan&match=pinyin"));
    assert!(body["count"].as_u64() > Some(0), "{body}");
    let after = eventually(
        "the index gauges cover the writes",
        Duration::from_secs(30),
        || {
            let after = scrape(&server);
            (total(&after, "hbidx_index_rows", &[("table", "user")]) >= rows as f64)
                .then_some(after)
        },
    );
    let route = ("route", "/v1/tables/{table}/rows");
    for (name, labels, at_least) in [
        (
            "hbidx_http_requests_total",
            vec![route, ("status", "2xx")],
            rows + 1,
        ),
        (
            "hbidx_http_request_duration_seconds_count",
            vec![route],
            rows + 1,
        ),
        (
            "hbidx_lookups_total",
            vec![("kind", "phone"), ("match", "exact")],
            rows,
        ),
        (
            "hbidx_lookups_total",
            vec![("kind", "name"), ("match", "pinyin")],
            1,
        ),
        ("hbidx_lookup_hits_count", vec![("table", "user")], rows),
        ("hbidx_writes_total", vec![("op", "put")], rows),
        ("hbidx_indexer_events_total", vec![("table", "user")], rows),
        ("hbidx_indexer_commits_total", vec![("table", "user")], 1),
        ("hbidx_indexer_commit_duration_seconds_count", vec![], 1),
        (
            "hbidx_store_call_duration_seconds_count",
            vec![("op", "mutate")],
            rows,
        ),
        (
            "hbidx_store_call_duration_seconds_count",
            vec![("op", "get_rows")],
            rows,
        ),
    ] {
        let moved = total(&after, name, &labels) - total(&before, name, &labels);
        assert!(
            moved >= at_least as f64,
            "{name}{labels:?} moved by {moved}, expected at least {at_least}"
        );
    }
    assert!(total(&after, "hbidx_index_bytes", &[("table", "user")]) > 0.0);
    // Labels are bounded: no phone number, natural key or raw path made it into a series.
    for sample in &after {
        for (_, value) in &sample.labels {
            let natural_key = value.len() > 1
                && value.starts_with('u')
                && value[1..].chars().all(|c| c.is_ascii_digit());
            assert!(
                !value.contains("139") && !value.contains("/rows/u") && !natural_key,
                "unbounded label value {value:?} on {}",
                sample.name
            );
        }
    }

    // ---- Grafana queries only exported metrics ---------------------------------------------
    check_grafana(&after);

    // ---- the dashboard, with traffic flowing ---------------------------------------------
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        let server = server.clone();
        std::thread::spawn(move || {
            let mut i = rows;
            while !stop.load(Ordering::Relaxed) {
                write_row(&server, i, false);
                for back in 0..4 {
                    look_up(&server, i.saturating_sub(back * 37));
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(15));
            }
        })
    };
    // The sampler needs a few points, and the region report is rebuilt every 10 s.
    eventually(
        "the ops summary has points and a region report",
        Duration::from_secs(60),
        || {
            let (_, summary) = get(&server.url("/v1/ops/summary"));
            let points = summary["t"].as_array()?.len();
            let p99 = summary["series"]["lookup_p99_ms"]
                .as_array()?
                .last()?
                .as_f64()?;
            let regions = summary["tables"][0]["hotspot"]["total"].as_u64()?;
            (points >= 3 && p99 > 0.0 && regions >= rows as u64).then_some(())
        },
    );

    let url = server.browser_url("/dashboard");
    let run = browser::run(
        &url,
        &["--dump-dom".to_string()],
        8_000,
        Duration::from_secs(120),
    );
    let dom = &run.stdout;
    let body_attr = |name: &str| browser::attribute(dom, "<body", name);
    assert_eq!(
        body_attr("data-status").as_deref(),
        Some("ok"),
        "page did not load its data; console: {:?}\n{dom}",
        run.console()
    );
    assert!(
        body_attr("data-refreshes")
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n >= 1),
        "{dom}"
    );
    assert_eq!(body_attr("data-errors").as_deref(), Some("0"), "{dom}");
    for panel in [
        "qps",
        "latency",
        "indexing",
        "commit",
        "lag",
        "size",
        "deadletters",
        "store",
        "storeerrors",
    ] {
        let points = browser::attribute(dom, &format!("id=\"panel-{panel}\""), "data-points")
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0);
        assert!(points >= 2, "chart {panel} drew {points} points:\n{dom}");
    }
    let regions = browser::attribute(dom, "data-table=\"user\"", "data-regions");
    assert_eq!(regions.as_deref(), Some("10"), "{dom}");
    assert!(
        run.console().is_empty(),
        "console messages: {:?}",
        run.console()
    );

    // The screenshot, kept in target/ for people to look at.
    let shot_dir = tempfile::tempdir().unwrap();
    let shot = shot_dir.path().join("dashboard.png");
    let run = browser::run(
        &url,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1400,1350".to_string(),
        ],
        8_000,
        Duration::from_secs(120),
    );
    let png = std::fs::read(&shot)
        .unwrap_or_else(|err| panic!("no screenshot ({err}); chromium log:\n{}", run.stderr));
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "{} bytes",
        png.len()
    );
    assert!(run.console().is_empty(), "{:?}", run.console());
    let kept = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/dashboard.png");
    browser::keep(&shot, &kept);

    // Without a key the page still loads (it is public) and says how to give one; the data
    // stays behind the key.
    let run = browser::run(
        &server.url("/dashboard"),
        &["--dump-dom".to_string()],
        3_000,
        Duration::from_secs(120),
    );
    assert_eq!(
        browser::attribute(&run.stdout, "<body", "data-status").as_deref(),
        Some("error"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("#key=YOUR_KEY"), "{}", run.stdout);

    stop.store(true, Ordering::Relaxed);
    load.join().expect("load thread");
}

/// Every metric name a Grafana query uses is one the running binary exported, except those
/// that need a backend this test doesn't run (each is still in the binary's catalogue).
fn check_grafana(scraped: &[Sample]) {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/hbidx-dashboard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|err| panic!("{} is not JSON: {err}", path.display()));
    let mut queries = Vec::new();
    collect_queries(&dashboard, &mut queries);
    assert!(queries.len() >= 15, "{queries:?}");
    let exported: BTreeSet<&str> = scraped.iter().map(|s| s.name.as_str()).collect();
    let catalogue: BTreeSet<&str> = hbidx_query::CATALOGUE.iter().map(|m| m.name).collect();
    // Exported only with a Kafka source (dead letters; tests/kafka.rs checks it), the HBase
    // store (Thrift calls, breaker) or a sharded tier (tests/cluster.rs checks those).
    let backend_only = [
        "hbidx_cluster_replicas_ready",
        "hbidx_shard_calls_total",
        "hbidx_shard_call_seconds_bucket",
        "hbidx_indexer_foreign_skipped_total",
        "hbidx_dead_letters_total",
        "hbidx_store_breaker_state",
        "hbidx_thrift_call_seconds_bucket",
        "hbidx_thrift_errors_total",
    ];
    let mut used = BTreeSet::new();
    for query in &queries {
        for name in metric_names(query) {
            if backend_only.contains(&name.as_str()) {
                let base = name.trim_end_matches("_bucket");
                assert!(catalogue.contains(base), "{name} is not in the catalogue");
            } else {
                assert!(
                    exported.contains(name.as_str()),
                    "Grafana query uses {name}, which the binary does not export: {query}"
                );
            }
            used.insert(name);
        }
    }
    // And the dashboard covers what the issue asks for.
    for needed in [
        "hbidx_http_requests_total",
        "hbidx_http_request_duration_seconds_bucket",
        "hbidx_lookups_total",
        "hbidx_index_bytes",
        "hbidx_indexer_events_total",
        "hbidx_indexer_commit_duration_seconds_bucket",
        "hbidx_source_lag_events",
        "hbidx_dead_letters_total",
        "hbidx_store_call_duration_seconds_bucket",
        "hbidx_store_errors_total",
        "hbidx_store_breaker_state",
        "hbidx_rowkey_cache_hits_total",
        "hbidx_rowkey_cache_misses_total",
        "hbidx_rowkey_cache_bytes",
    ] {
        assert!(used.contains(needed), "no Grafana panel uses {needed}");
    }
}

/// Every PromQL string in the dashboard: panel target `expr`s and template variable queries.
fn collect_queries(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr" | "definition", Value::String(query)) => out.push(query.clone()),
                    _ => collect_queries(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_queries(item, out)),
        _ => {}
    }
}

/// Identifiers starting with `hbidx_` in a query.
fn metric_names(query: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = query;
    while let Some(at) = rest.find("hbidx_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}
