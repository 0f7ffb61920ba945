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
use util::{Server, cli, eventually, get, keys, post, put, report_count};

/// A free TCP port on loopback (for a gateway that must come back on the same address).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

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
        "{example}\n[store]\nkind = \"hbase\"\nthrift = \"{thrift}\"\ntimeout_ms = 1500\nretries = 1\nbreaker_failures = 3\nbreaker_open_ms = 500\n"
    );
    let path = dir.join(format!("hbase-{namespace}.toml"));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// The config of the "HBase" stand-in: the example tables, answering like HBase 1.x.
fn standin_config(dir: &Path) -> String {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config/hbidx.toml"),
    )
    .unwrap();
    let path = dir.join("standin.toml");
    std::fs::write(
        &path,
        format!("{example}\n[server]\nthrift_hbase_version = 1\n"),
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

/// Starts the "HBase" stand-in on `thrift` with its data in `data_dir`.
fn start_standin(dir: &Path, data_dir: &Path, thrift: &str) -> Server {
    let config = standin_config(dir);
    Server::start(
        &["--config", &config, "serve"],
        data_dir,
        &["--thrift-listen", thrift],
    )
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
