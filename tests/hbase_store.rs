//! hbidx's HBase Thrift1 row store (`[store] kind = "hbase"`), end to end over real sockets.
//!
//! "HBase" here is a second hbidx process serving the HBase Thrift1 API over its embedded store
//! (`--thrift-listen`), answering like HBase 1.x (`thrift_hbase_version = 1`: "Invalid method
//! name" for the calls HBase 2.0 added, so a store call 1.x doesn't serve fails these tests);
//! the hbidx under test talks to it exactly as to an HBase Thrift server: reindex by table scan,
//! lookups (index → computed rowkey → `getRowsWithColumns`), batch lookups, write-through
//! (`mutateRowsTs` / `deleteAllRowTs`) with read-your-writes on this instance, read repair,
//! drift checking and repair, a circuit breaker and `/readyz` while "HBase" is down, and
//! healing when it returns.

mod util;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use util::{
    Server, cli, eventually, free_port, get, get_text, keys, post, put, report_count,
    start_hbase_standin,
};

fn phone(i: usize) -> String {
    format!("139{:08}", 10_000_000 + i)
}

/// The example config with the rows in HBase at `thrift` (and `namespace` for the table).
fn hbase_config(dir: &Path, thrift: &str, namespace: &str) -> String {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config/hbidx.toml"),
    )
    .unwrap()
    .replace(
        "namespace = \"default\"",
        &format!("namespace = \"{namespace}\""),
    );
    let text = format!(
        "{example}\n[store]\nkind = \"hbase\"\nthrift = \"{thrift}\"\ntimeout_ms = 1500\nretries = 1\nbreaker_failures = 3\nbreaker_open_ms = 500\nscan_caching = 7\n"
    );
    let path = dir.join(format!("hbase-{namespace}.toml"));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// Starts the "HBase" stand-in with the example tables on `thrift`, its data in `data_dir`.
fn start_standin(dir: &Path, data_dir: &Path, thrift: &str) -> Server {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config/hbidx.toml"),
    )
    .unwrap();
    start_hbase_standin(dir, &example, data_dir, thrift)
}

fn lookup(server: &Server, query: &str) -> (u16, Value) {
    get(&server.url(&format!("/v1/tables/user/rows?{query}")))
}

#[test]
fn thrift_store_serves_lookups_writes_repairs_and_survives_an_outage() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let thrift = format!("127.0.0.1:{port}");
    // "HBase": the embedded store behind the Thrift1 gateway.
    let hbase_dir = dir.path().join("hbase");
    let hbase = start_standin(dir.path(), &hbase_dir, &thrift);
    for i in 0..50 {
        let (status, body) = put(
            &hbase.url(&format!("/v1/tables/user/rows/u{i:04}?wait=indexed")),
            &json!({"cells": {"info:phone": phone(i), "info:name": format!("用户{i}"), "info:city": "北京"}}),
        );
        assert_eq!(status, 200, "{body}");
    }

    // hbidx with its rows in "HBase".
    let config = hbase_config(dir.path(), &thrift, "default");
    let sidecar_dir = dir.path().join("sidecar");
    let sidecar = Server::start(&["--config", &config, "serve"], &sidecar_dir, &[]);
    let (_, body) = lookup(&sidecar, &format!("phone={}", phone(7)));
    assert_eq!(body["count"], 0, "nothing indexed yet: {body}");

    // Reindex by scanning the table over Thrift, through the CLI and the job API.
    let (code, out) = cli(&[
        "--config",
        &config,
        "reindex",
        "user",
        "--from-store",
        "--server",
        &sidecar.base,
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("50 rows"), "{out}");
    // `scan_caching = 7`: 50 rows in pages of 7, each read while the one before is indexed.
    let log = sidecar.log_text();
    let scanned = log
        .lines()
        .find(|line| line.contains("scanned the store"))
        .unwrap_or_else(|| panic!("no `scanned the store` line in:\n{log}"));
    assert!(
        scanned.contains("rows=50") && scanned.contains("pages=8"),
        "{scanned}"
    );

    // Lookup: index → rowkey → getRowsWithColumns, with projection.
    let (status, body) = lookup(
        &sidecar,
        &format!("phone={}&columns=info:name,info:phone", phone(7)),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(keys(&body), vec!["u0007"]);
    assert_eq!(body["rows"][0]["cells"]["info:name"], "用户7");
    assert!(body["rows"][0]["cells"].get("info:city").is_none());

    // A batch lookup of every phone: one multi-get.
    let phones: Vec<String> = (0..50).map(phone).collect();
    let (status, body) = post(
        &sidecar.url("/v1/tables/user/rows:batch-lookup"),
        &json!({"field": "phone", "values": phones}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["count"], 50, "{body}");

    // Write-through goes to HBase (mutateRowsTs) and, once HBase has it, into this instance's
    // index with the same timestamp: with wait=indexed it is findable at once (issue 23).
    let (status, body) = put(
        &sidecar.url("/v1/tables/user/rows/u9000?wait=indexed"),
        &json!({"cells": {"info:phone": phone(9000), "info:name": "新用户"}, "ts": 1_700_000_000_000i64}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["indexed"], true, "{body}");
    let (status, body) = lookup(&sidecar, &format!("phone={}", phone(9000)));
    assert_eq!(status, 200, "{body}");
    assert_eq!(keys(&body), vec!["u9000"], "findable at once: {body}");
    assert_eq!(body["rows"][0]["cells"]["info:name"], "新用户");
    let found = eventually("the write reached HBase", Duration::from_secs(10), || {
        let (_, body) = lookup(&hbase, &format!("phone={}", phone(9000)));
        (body["count"] == 1).then_some(body)
    });
    assert_eq!(keys(&found), vec!["u9000"]);
    // A later write with an older timestamp loses in HBase and in the index alike.
    let (status, body) = put(
        &sidecar.url("/v1/tables/user/rows/u9000?wait=indexed"),
        &json!({"cells": {"info:phone": phone(9009)}, "ts": 1_600_000_000_000i64}),
    );
    assert_eq!(status, 200, "{body}");
    let (_, body) = lookup(&sidecar, &format!("phone={}", phone(9009)));
    assert_eq!(body["count"], 0, "{body}");
    // A delete is applied here at once too.
    let (status, body) = put(
        &sidecar.url("/v1/tables/user/rows/u9100?wait=indexed"),
        &json!({"cells": {"info:phone": phone(9100)}}),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = util::delete(&sidecar.url("/v1/tables/user/rows/u9100?wait=indexed"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["indexed"], true, "{body}");
    let (_, body) = lookup(&sidecar, &format!("phone={}", phone(9100)));
    assert_eq!(body["count"], 0, "{body}");
    assert_eq!(
        body["dropped_stale"], 0,
        "gone from the index, not just filtered: {body}"
    );

    // A write HBase acknowledged that never reached this index (what a crash between the
    // acknowledgement and the index commit leaves behind): written to "HBase" directly.
    let (status, body) = put(
        &hbase.url("/v1/tables/user/rows/u9001"),
        &json!({"cells": {"info:phone": phone(9001)}}),
    );
    assert_eq!(status, 200, "{body}");

    // Drift behind the sidecar's back: u0001 deleted and u0002's phone changed in "HBase".
    let (status, _) = util::delete(&hbase.url("/v1/tables/user/rows/u0001"));
    assert_eq!(status, 200);
    let (status, _) = put(
        &hbase.url("/v1/tables/user/rows/u0002"),
        &json!({"cells": {"info:phone": phone(2002)}}),
    );
    assert_eq!(status, 200);

    // Read repair: the stale hit is dropped from the answer and repaired in the background.
    let (_, body) = lookup(&sidecar, &format!("phone={}", phone(2)));
    assert_eq!(body["count"], 0, "{body}");
    assert_eq!(body["dropped_stale"], 1, "{body}");
    let repaired = eventually(
        "read repair re-indexed u0002",
        Duration::from_secs(10),
        || {
            let (_, body) = lookup(&sidecar, &format!("phone={}", phone(2002)));
            (body["count"] == 1).then_some(body)
        },
    );
    assert_eq!(keys(&repaired), vec!["u0002"]);
    let (_, status) = get(&sidecar.url("/v1/indexer/status"));
    assert!(
        status.to_string().contains("\"read_repairs\":1"),
        "read repairs counted: {status}"
    );

    // verify finds the rest: u0001 is a ghost, u9001 is missing (written to HBase directly);
    // the writes made through the sidecar agree with HBase.
    let verify = |extra: &[&str]| {
        let mut args = vec![
            "--config",
            &config,
            "verify",
            "user",
            "--server",
            &sidecar.base,
        ];
        args.extend_from_slice(extra);
        cli(&args)
    };
    let (code, out) = verify(&[]);
    assert_eq!(code, 1, "drift makes verify exit 1: {out}");
    assert_eq!(report_count(&out, "ghosts in the index"), 1, "{out}");
    assert_eq!(report_count(&out, "missing from the index"), 1, "{out}");
    assert_eq!(report_count(&out, "value mismatches"), 0, "{out}");
    assert!(out.contains("u0001") && out.contains("u9001"), "{out}");
    let (code, out) = verify(&["--repair"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("repaired: 2"), "{out}");
    let (code, out) = verify(&["--sample", "20"]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = verify(&[]);
    assert_eq!(code, 0, "no drift after repair: {out}");
    let (_, body) = lookup(&sidecar, &format!("phone={}", phone(1)));
    assert_eq!(body["count"], 0);
    assert_eq!(body["dropped_stale"], 0, "the ghost is gone from the index");
    let (_, body) = lookup(&sidecar, &format!("phone={}", phone(9001)));
    assert_eq!(keys(&body), vec!["u9001"]);

    // "HBase" goes down: lookups answer 503 within the timeout, then at once (breaker open).
    let hbase_log = hbase_dir.clone();
    hbase.kill9();
    let query = format!("phone={}", phone(7));
    let started = Instant::now();
    let (status, body) = lookup(&sidecar, &query);
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "store_unavailable");
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    for _ in 0..3 {
        lookup(&sidecar, &query);
    }
    let started = Instant::now();
    let (status, body) = lookup(&sidecar, &query);
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("circuit breaker open"),
        "{body}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );

    // It comes back on the same address: lookups heal without a restart.
    let hbase = start_standin(dir.path(), &hbase_log, &thrift);
    let body = eventually("lookups heal", Duration::from_secs(15), || {
        let (status, body) = lookup(&sidecar, &query);
        (status == 200 && body["count"] == 1).then_some(body)
    });
    assert_eq!(keys(&body), vec!["u0007"]);
    drop(hbase);
}

/// `/readyz` follows HBase (issue 23): 503 naming the store and the table while the Thrift
/// server is gone, 200 once it is back, without a restart; `/healthz` stays up throughout. And
/// a write whose index apply a crash cut off is brought in by the next `verify --repair`.
#[test]
fn readiness_follows_hbase_and_verify_closes_a_crashed_write() {
    let dir = tempfile::tempdir().unwrap();
    let thrift = format!("127.0.0.1:{}", free_port());
    let hbase_dir = dir.path().join("hbase");
    let hbase = start_standin(dir.path(), &hbase_dir, &thrift);
    let config = hbase_config(dir.path(), &thrift, "default");
    let sidecar_dir = dir.path().join("sidecar");
    let sidecar = Server::start(&["--config", &config, "serve"], &sidecar_dir, &[]);
    let readyz = |server: &Server| get(&server.url("/readyz"));
    let (status, body) = readyz(&sidecar);
    assert_eq!(status, 200, "{body}");

    hbase.kill9();
    let body = eventually("/readyz turns 503", Duration::from_secs(15), || {
        let (status, body) = readyz(&sidecar);
        (status == 503).then_some(body)
    });
    assert_eq!(body["error"]["code"], "not_ready", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("row store \"hbase\"") && message.contains("`user`"),
        "{message}"
    );
    assert_eq!(get(&sidecar.url("/healthz")).0, 200);

    let hbase = start_standin(dir.path(), &hbase_dir, &thrift);
    eventually("/readyz turns 200 again", Duration::from_secs(15), || {
        (readyz(&sidecar).0 == 200).then_some(())
    });

    // A write acknowledged by HBase, then the sidecar is killed before (or after: it can't be
    // told apart from outside) its index commit.
    let (status, body) = put(
        &sidecar.url("/v1/tables/user/rows/u0042"),
        &json!({"cells": {"info:phone": phone(42)}}),
    );
    assert_eq!(status, 200, "{body}");
    sidecar.kill9();
    let sidecar = Server::start(&["--config", &config, "serve"], &sidecar_dir, &[]);
    let (code, out) = cli(&[
        "--config",
        &config,
        "verify",
        "user",
        "--repair",
        "--server",
        &sidecar.base,
    ]);
    assert_eq!(code, 0, "{out}");
    let (status, body) = lookup(&sidecar, &format!("phone={}", phone(42)));
    assert_eq!(status, 200, "{body}");
    assert_eq!(keys(&body), vec!["u0042"], "{body}");
    drop(hbase);
}

#[test]
fn a_table_missing_in_hbase_is_named_with_the_ddl_to_run() {
    let dir = tempfile::tempdir().unwrap();
    let hbase = start_standin(dir.path(), &dir.path().join("hbase"), "127.0.0.1:0");
    let thrift = hbase.thrift.clone().expect("gateway address");
    // The same table, but in a namespace "HBase" doesn't have.
    let config = hbase_config(dir.path(), &thrift, "prod");
    let sidecar = Server::start(
        &["--config", &config, "serve"],
        &dir.path().join("sidecar"),
        &[],
    );
    let (status, body) = put(
        &sidecar.url("/v1/tables/user/rows/u1"),
        &json!({"cells": {"info:phone": phone(1)}}),
    );
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "store_table_missing");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`prod:user`") && message.contains("ddl user"),
        "{message}"
    );
    // Not ready either, and the reason says which table and how to create it (issue 23).
    let (status, body) = get(&sidecar.url("/readyz"));
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "not_ready");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`prod:user`") && message.contains("ddl user"),
        "{message}"
    );
    assert_eq!(get(&sidecar.url("/healthz")).0, 200);
}

/// With a Kafka source (issue 23): a write through one instance is findable there at once; the
/// other instance gets it through the topic (HBase replication's copy, produced here by hand),
/// and on the first instance that copy, with the same timestamp, merges as a no-op. A write
/// HBase has but this index never got (a crash between the two) is closed by its replicated
/// event.
#[test]
#[ignore = "needs a Kafka broker at HBIDX_TEST_KAFKA: scripts/test.sh starts one and runs it"]
fn with_a_kafka_source_the_replicated_copy_is_a_no_op_and_closes_a_crashed_write() {
    use util::kafka::{Producer, create_topic, json_source, unique_topic};

    let dir = tempfile::tempdir().unwrap();
    let thrift = format!("127.0.0.1:{}", free_port());
    let hbase = start_standin(dir.path(), &dir.path().join("hbase"), &thrift);
    let topic = unique_topic("hbase-ryw");
    create_topic(&topic, 1);
    let config = hbase_config(dir.path(), &thrift, "default");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&json_source(&topic, "user", "json"));
    std::fs::write(&config, text).unwrap();
    let here = Server::start(
        &["--config", &config, "serve"],
        &dir.path().join("here"),
        &[],
    );
    let other = Server::start(
        &["--config", &config, "serve"],
        &dir.path().join("other"),
        &[],
    );
    let ts = 1_700_000_000_000i64;
    let cells = json!({"info:phone": phone(1), "info:name": "甲"});
    let (status, body) = put(
        &here.url("/v1/tables/user/rows/u0001?wait=indexed"),
        &json!({"cells": cells, "ts": ts}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        keys(&lookup(&here, &format!("phone={}", phone(1))).1),
        vec!["u0001"]
    );
    assert_eq!(lookup(&other, &format!("phone={}", phone(1))).1["count"], 0);

    // What replication brings: the same cells at the same timestamp, and a row written to HBase
    // behind this instance's back.
    let (status, body) = put(
        &hbase.url("/v1/tables/user/rows/u0002"),
        &json!({"cells": {"info:phone": phone(2)}, "ts": ts}),
    );
    assert_eq!(status, 200, "{body}");
    let producer = Producer::exact(&topic);
    for (key, cells) in [("u0001", cells), ("u0002", json!({"info:phone": phone(2)}))] {
        let event = json!({"table": "user", "key": key, "op": "put", "ts": ts, "cells": cells});
        producer.send(key.as_bytes(), &serde_json::to_vec(&event).unwrap());
    }
    producer.flush();
    for server in [&here, &other] {
        let found = eventually(
            "both rows through the topic",
            Duration::from_secs(30),
            || {
                let (_, body) = post(
                    &server.url("/v1/tables/user/rows:batch-lookup"),
                    &json!({"field": "phone", "values": [phone(1), phone(2)]}),
                );
                (body["count"] == 2).then_some(body)
            },
        );
        assert_eq!(found["dropped_stale"], 0, "{found}");
    }
    // The replicated copy changed nothing here: still one document for u0001 (an update would
    // have added a second and deleted the first).
    let status = eventually("the topic committed", Duration::from_secs(30), || {
        let (_, status) = get(&here.url("/v1/indexer/status"));
        let table = &status["tables"]["user"];
        (table["checkpoint"]
            .as_object()
            .is_some_and(|cp| !cp.is_empty()))
        .then(|| table.clone())
    });
    assert_eq!(status["rows"], 2, "{status}");
    assert_eq!(status["docs"], 2, "{status}");
    drop(hbase);
}

/// A store reindex builds its index from a scan, which can't show a delete: the deleted row is
/// just absent. The topic's events after the job's start are replayed onto the new index, so a
/// late put older than the row's delete (masked in HBase) must stay masked there too.
#[test]
#[ignore = "needs a Kafka broker at HBIDX_TEST_KAFKA: scripts/test.sh starts one and runs it"]
fn a_store_reindex_keeps_the_deletes_that_mask_late_puts() {
    use util::kafka::{Producer, create_topic, json_source, unique_topic};

    let dir = tempfile::tempdir().unwrap();
    let thrift = format!("127.0.0.1:{}", free_port());
    let hbase = start_standin(dir.path(), &dir.path().join("hbase"), &thrift);
    let topic = unique_topic("reindex-deletes");
    create_topic(&topic, 1);
    let config = hbase_config(dir.path(), &thrift, "default");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&json_source(&topic, "user", "json"));
    std::fs::write(&config, text).unwrap();
    let producer = Producer::exact(&topic);
    let ts = 1_700_000_000_000i64;
    // Each write into "HBase" first, then its event, as replication would bring it.
    let replicate = |key: &str, event: Value| {
        producer.send(key.as_bytes(), &serde_json::to_vec(&event).unwrap());
        producer.flush();
    };
    let put_both = |key: &str, phone: &str, ts: i64| {
        let cells = json!({"info:phone": phone});
        let (status, body) = put(
            &hbase.url(&format!("/v1/tables/user/rows/{key}")),
            &json!({"cells": cells, "ts": ts}),
        );
        assert_eq!(status, 200, "{body}");
        replicate(
            key,
            json!({"table": "user", "key": key, "op": "put", "ts": ts, "cells": cells}),
        );
    };
    put_both("u0001", &phone(1), ts);
    put_both("u0002", &phone(2), ts + 100);
    let (status, body) =
        util::delete(&hbase.url(&format!("/v1/tables/user/rows/u0002?ts={}", ts + 200)));
    assert_eq!(status, 200, "{body}");
    replicate(
        "u0002",
        json!({"table": "user", "key": "u0002", "op": "delete_row", "ts": ts + 200}),
    );

    let sidecar = Server::start(
        &["--config", &config, "serve"],
        &dir.path().join("here"),
        &[],
    );
    let index_only =
        |value: &str| keys(&lookup(&sidecar, &format!("phone={value}&index_only=true")).1);
    eventually("the topic indexed", Duration::from_secs(60), || {
        (index_only(&phone(1)) == vec!["u0001"]).then_some(())
    });
    assert!(index_only(&phone(2)).is_empty());

    let (status, job) = post(
        &sidecar.url("/v1/tables/user/reindex"),
        &json!({"from": "store"}),
    );
    assert_eq!(status, 202, "{job}");
    let id = job["id"].as_u64().unwrap();
    // Once the job runs, its start checkpoint is taken: the late put comes after it and is
    // replayed onto the new index, whenever the swap happens.
    eventually("the reindex running", Duration::from_secs(30), || {
        let (_, job) = get(&sidecar.url(&format!("/v1/jobs/{id}")));
        (job["phase"] != "starting" || job["state"] != "running").then_some(())
    });
    put_both("u0002", &phone(3), ts + 150);
    let job = eventually("the reindex done", Duration::from_secs(60), || {
        let (_, job) = get(&sidecar.url(&format!("/v1/jobs/{id}")));
        (job["state"] != "running").then_some(job)
    });
    assert_eq!(job["state"], "succeeded", "{job}");
    assert_eq!(get(&hbase.url("/v1/tables/user/rows/u0002")).0, 404);
    // The late put is the topic's fourth event (offset 3): the new live indexer's committed
    // checkpoint covers it once it has replayed it.
    eventually("the late put replayed", Duration::from_secs(60), || {
        let (_, status) = get(&sidecar.url("/v1/indexer/status"));
        let checkpoint = status["tables"]["user"]["checkpoint"].as_object()?.clone();
        checkpoint.values().any(|offset| offset == 3).then_some(())
    });
    assert!(
        index_only(&phone(3)).is_empty(),
        "the late put came back as a ghost"
    );
    assert!(index_only(&phone(2)).is_empty());
    assert_eq!(index_only(&phone(1)), vec!["u0001"]);
    let (code, report) = cli(&[
        "--config",
        &config,
        "verify",
        "user",
        "--server",
        &sidecar.url(""),
    ]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report_count(&report, "ghosts in the index"), 0, "{report}");
}

/// The example table and a copy of it named `member`: `user` is fed by HBase Kafka Proxy Avro
/// events, `member` by hbidx JSON events.
fn two_tables() -> String {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config/hbidx.toml"),
    )
    .unwrap();
    format!(
        "{example}\n{}",
        example.replace("name = \"user\"", "name = \"member\"")
    )
}

/// Sharding, the indexer side (issue 25): an instance started as shard 0 of two indexes only
/// its shard's rows. From Kafka, other shards' events are skipped (Proxy Avro on a peek of the
/// rowkey, JSON after its decode) and counted per partition and in
/// `hbidx_indexer_foreign_skipped_total`, while a garbled message is still a dead letter and
/// the checkpoint covers every offset; `verify` and `reindex --from-store` scan only the
/// shard's range of an "HBase" that holds the rows of both shards.
#[test]
#[ignore = "needs a Kafka broker at HBIDX_TEST_KAFKA: scripts/test.sh starts one and runs it"]
fn a_shard_indexes_only_its_rows_from_kafka_and_from_the_store() {
    use util::kafka::{Producer, create_topic, json_source, unique_topic};

    let dir = tempfile::tempdir().unwrap();
    let thrift = format!("127.0.0.1:{}", free_port());
    let hbase = start_hbase_standin(
        dir.path(),
        &two_tables(),
        &dir.path().join("hbase"),
        &thrift,
    );

    let proxy_topic = unique_topic("shard-proxy");
    let json_topic = unique_topic("shard-json");
    create_topic(&proxy_topic, 2);
    create_topic(&json_topic, 1);
    // Shard 1's replica is never started: shard 0 needs nobody to index its own rows.
    let text = format!(
        "{}\n[store]\nkind = \"hbase\"\nthrift = \"{thrift}\"\ntimeout_ms = 1500\n{}{}\n[cluster]\nshards = [[\"http://127.0.0.1:1\"], [\"http://127.0.0.1:2\"]]\n",
        two_tables(),
        json_source(&proxy_topic, "user", "hbase-kafka-proxy"),
        json_source(&json_topic, "member", "json"),
    );
    let config = dir.path().join("shard.toml");
    std::fs::write(&config, &text).unwrap();
    let config = config.to_str().unwrap();
    let parsed = hbidx_schema::parse_config(&text).unwrap();
    let cluster = parsed.cluster.clone().expect("[cluster]");
    let rowkey = |table: &str, key: &str| parsed.table(table).unwrap().rowkey.encode(key).unwrap();
    let own = |table: &str, key: &str| cluster.shard_of(table, &rowkey(table, key)) == 0;
    const ROWS: usize = 40;
    let keys: Vec<String> = (0..ROWS).map(|i| format!("u{i:04}")).collect();
    let own_rows = keys.iter().filter(|k| own("user", k)).count();
    let own_members = keys.iter().filter(|k| own("member", k)).count();
    assert!(
        0 < own_rows && own_rows < ROWS,
        "rows on both shards: {own_rows}"
    );

    // "HBase" holds the `user` rows of both shards.
    for (i, key) in keys.iter().enumerate() {
        let (status, body) = put(
            &hbase.url(&format!("/v1/tables/user/rows/{key}")),
            &json!({"cells": {"info:phone": phone(i), "info:name": format!("用户{i}")}, "ts": 1_700_000_000_000i64}),
        );
        assert_eq!(status, 200, "{body}");
    }

    let sidecar = Server::start(
        &["--config", config, "serve"],
        &dir.path().join("shard0"),
        &["--shard", "0"],
    );
    // What HBase replication would publish: one Proxy message per cell, keyed by rowkey; the
    // `member` table's writes as hbidx JSON events. Each topic ends with a garbled message.
    let proxy = Producer::fast(&proxy_topic);
    let json = Producer::fast(&json_topic);
    for (i, key) in keys.iter().enumerate() {
        let user_key = rowkey("user", key);
        for (column, value) in [("info:phone", phone(i)), ("info:name", format!("用户{i}"))] {
            let cell = hbidx_schema::model::CellOp::Put {
                column: column.into(),
                ts: 1_700_000_000_000,
                value: value.into_bytes(),
            };
            proxy.send(
                &user_key,
                &hbidx_indexer::encode_proxy("user", &user_key, &cell).unwrap(),
            );
        }
        let event = json!({"table": "member", "key": key, "op": "put", "ts": 1, "cells": {"info:phone": phone(i)}});
        json.send(key.as_bytes(), event.to_string().as_bytes());
    }
    let last = hbidx_indexer::encode_proxy(
        "user",
        &rowkey("user", &keys[0]),
        &hbidx_schema::model::CellOp::DeleteCell {
            column: "info:name".into(),
            ts: 1,
        },
    )
    .unwrap();
    proxy.send(b"garbled", &last[..last.len() - 2]);
    json.send(b"garbled", b"{\"table\": \"member\", \"key\":");
    proxy.flush();
    json.flush();

    // Every offset covered (tansu's high watermarks can't be trusted for lag): two Proxy cells
    // per row, one JSON event per row, and each topic's garbled message. The per-partition
    // counters come from the polling thread about once a second, so they are waited for too;
    // on a timeout the assertions below show the last status.
    let foreign_cells = 2 * (ROWS - own_rows) as u64;
    let foreign_members = (ROWS - own_members) as u64;
    let messages = [
        ("user", 2 * ROWS as i64 + 1, foreign_cells),
        ("member", ROWS as i64 + 1, foreign_members),
    ];
    let partition_sum = |status: &Value, table: &str, field: &str| -> u64 {
        status["tables"][table]["partitions"]
            .as_array()
            .map(|ps| ps.iter().map(|p| p[field].as_u64().unwrap_or(0)).sum())
            .unwrap_or(0)
    };
    let started = Instant::now();
    let status = loop {
        let (_, status) = get(&sidecar.url("/v1/indexer/status"));
        let settled = messages.iter().all(|(table, count, foreign)| {
            let next: i64 = status["tables"][table]["partitions"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .map(|p| p["checkpoint"].as_i64().map_or(0, |c| c + 1))
                        .sum()
                })
                .unwrap_or(0);
            next == *count
                && partition_sum(&status, table, "dead_letters") == 1
                && partition_sum(&status, table, "foreign_skipped") == *foreign
        });
        if settled || started.elapsed() > Duration::from_secs(60) {
            break status;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let user = &status["tables"]["user"];
    let member = &status["tables"]["member"];
    assert_eq!(user["dead_letters"], 1, "{status}");
    assert_eq!(member["dead_letters"], 1, "{status}");
    assert_eq!(user["rows"], own_rows, "{status}");
    assert_eq!(member["rows"], own_members, "{status}");
    // Skipped by the sources themselves, nothing left to the writer's own check.
    assert_eq!(
        partition_sum(&status, "user", "foreign_skipped"),
        foreign_cells,
        "{status}"
    );
    assert_eq!(user["foreign_skipped"], foreign_cells, "{status}");
    assert_eq!(
        partition_sum(&status, "member", "foreign_skipped"),
        foreign_members,
        "{status}"
    );
    assert_eq!(member["foreign_skipped"], foreign_members, "{status}");
    let (_, text) = get_text(&sidecar.url("/metrics"));
    let metrics = hbidx_query::parse_exposition(&text);
    let skipped = |table: &str| {
        metrics
            .iter()
            .filter(|s| {
                s.name == "hbidx_indexer_foreign_skipped_total" && s.label("table") == Some(table)
            })
            .map(|s| s.value)
            .sum::<f64>()
    };
    assert_eq!(skipped("user"), foreign_cells as f64, "{text}");
    assert_eq!(skipped("member"), foreign_members as f64, "{text}");

    // verify compares the shard's range of "HBase" with the index: no drift, though "HBase"
    // holds the other shard's rows too (which a whole-table scan would call missing).
    let (code, out) = cli(&[
        "--config",
        config,
        "--shard",
        "0",
        "verify",
        "user",
        "--server",
        &sidecar.base,
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("shard 0 of 2: rowkeys from the table's start up to"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "index rows checked: {own_rows}   store rows checked: {own_rows}"
        )),
        "{out}"
    );
    // A store reindex scans the shard's range: its count check passes on exactly its rows.
    let (code, out) = cli(&[
        "--config",
        config,
        "--shard",
        "0",
        "reindex",
        "user",
        "--from-store",
        "--server",
        &sidecar.base,
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!(": {own_rows} rows")), "{out}");
    assert!(out.contains("shard 0 of 2"), "{out}");
    let (_, status) = get(&sidecar.url("/v1/indexer/status"));
    assert_eq!(status["tables"]["user"]["rows"], own_rows, "{status}");
    assert_eq!(status["tables"]["user"]["docs"], own_rows, "{status}");
    drop(hbase);
}

/// Rows of the reindex-under-writes tests: enough that the scan runs for seconds while the
/// writers go on.
const BIG: u64 = 200_000;

/// Rows in HBase, indexed from a topic or from nothing: a reindex from the store while two
/// clients keep updating and deleting rows through this instance. Each write goes to HBase,
/// then to the live index through the repair queue, which no source replays; the job records
/// what the queue takes meanwhile and applies it to the new index before the swap. Afterwards
/// every acknowledged write is found by its newest phone and by no older one, and `verify
/// --full` finds no drift: no `verify --repair` by hand.
fn a_store_reindex_under_writes_in_hbase_keeps_every_acknowledged_write(topic: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let hbase_dir = dir.path().join("hbase");
    let rows = BIG.to_string();
    let hbase_arg = hbase_dir.to_string_lossy();
    let (code, out) = cli(&[
        "demo",
        "--rows",
        &rows,
        "--no-serve",
        "--data-dir",
        &hbase_arg,
    ]);
    assert_eq!(code, 0, "{out}");
    let thrift = format!("127.0.0.1:{}", free_port());
    let hbase = start_standin(dir.path(), &hbase_dir, &thrift);
    let config = hbase_config(dir.path(), &thrift, "default");
    // Pages of 7 rows make the tests above cross page boundaries; 200k rows want real ones.
    let mut text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("scan_caching = 7", "scan_caching = 1000");
    if let Some(topic) = topic {
        util::kafka::create_topic(topic, 1);
        text.push_str(&util::kafka::json_source(topic, "user", "json"));
    }
    std::fs::write(&config, text).unwrap();
    let sidecar = Server::start(
        &["--config", &config, "serve"],
        &dir.path().join("here"),
        &[],
    );

    util::writes::reindex_under_writes(
        &sidecar.base,
        Some(&config),
        BIG,
        hbidx_demo::people::uid_of,
        200,
        Duration::from_secs(60),
    );
    drop(hbase);
}

#[test]
fn a_store_reindex_under_writes_without_a_topic_keeps_every_acknowledged_write() {
    a_store_reindex_under_writes_in_hbase_keeps_every_acknowledged_write(None);
}

#[test]
#[ignore = "needs a Kafka broker at HBIDX_TEST_KAFKA: scripts/test.sh starts one and runs it"]
fn a_store_reindex_under_writes_with_a_topic_keeps_every_acknowledged_write() {
    let topic = util::kafka::unique_topic("hbase-reindex-writes");
    a_store_reindex_under_writes_in_hbase_keeps_every_acknowledged_write(Some(&topic));
}
