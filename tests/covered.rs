//! Covered columns (`covered = [...]`, Phoenix's INCLUDE columns) over real sockets, with the
//! rows in "HBase" (a second hbidx serving the Thrift1 API over its embedded store): a lookup
//! asking only for indexed and covered columns is answered from the index, keeps answering with
//! HBase down, follows updates by their timestamps, and `consistency=store` still reads HBase.

mod util;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use util::{Server, eventually, free_port, get, keys, post, put};

fn phone(i: usize) -> String {
    format!("139{:08}", 10_000_000 + i)
}

/// The example config with `info:city` covered; with the rows in HBase at `thrift` if given.
fn config(dir: &Path, thrift: Option<&str>) -> String {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config/hbidx.toml"),
    )
    .unwrap();
    assert!(example.contains("namespace = \"default\"\n"));
    let mut text = example.replacen(
        "namespace = \"default\"\n",
        "namespace = \"default\"\ncovered = [\"info:city\"]\n",
        1,
    );
    if let Some(thrift) = thrift {
        text.push_str(&format!(
            "\n[store]\nkind = \"hbase\"\nthrift = \"{thrift}\"\ntimeout_ms = 1000\nretries = 0\nbreaker_failures = 2\nbreaker_open_ms = 500\n"
        ));
    }
    let path = dir.join("covered.toml");
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn lookup(server: &Server, query: &str) -> (u16, Value) {
    get(&server.url(&format!("/v1/tables/user/rows?{query}")))
}

#[test]
fn covered_lookups_answer_from_the_index_even_with_hbase_down() {
    let dir = tempfile::tempdir().unwrap();
    let thrift = format!("127.0.0.1:{}", free_port());
    let hbase = Server::start(
        &["serve"],
        &dir.path().join("hbase"),
        &["--thrift-listen", &thrift],
    );
    for i in 0..20 {
        let (status, body) = put(
            &hbase.url(&format!("/v1/tables/user/rows/u{i:04}?wait=indexed")),
            &json!({"cells": {"info:phone": phone(i), "info:name": format!("用户{i}"), "info:city": format!("城{i}"), "info:email": format!("u{i}@example.com")}, "ts": 1000}),
        );
        assert_eq!(status, 200, "{body}");
    }
    let config = config(dir.path(), Some(&thrift));
    let sidecar = Server::start(
        &["--config", &config, "serve"],
        &dir.path().join("sidecar"),
        &[],
    );
    let (status, body) = post(
        &sidecar.url("/v1/tables/user/reindex"),
        &json!({"from": "store"}),
    );
    assert_eq!(status, 202, "{body}");
    let job = body["id"].as_u64().unwrap();
    eventually("the reindex from HBase", Duration::from_secs(30), || {
        let (_, body) = get(&sidecar.url(&format!("/v1/jobs/{job}")));
        (body["state"] == "succeeded").then_some(())
    });

    // Indexed and covered columns only: from the index.
    let covered = format!("phone={}&columns=info:name,info:city", phone(7));
    let (status, body) = lookup(&sidecar, &covered);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["source"], "index", "{body}");
    assert_eq!(keys(&body), ["u0007"]);
    assert_eq!(
        body["rows"][0]["cells"],
        json!({"info:name": "用户7", "info:city": "城7"})
    );
    // A column that isn't covered, a whole family, or consistency=store: from HBase.
    for query in [
        format!("phone={}&columns=info:city,info:email", phone(7)),
        format!("phone={}&columns=info", phone(7)),
        format!("phone={}", phone(7)),
        format!("{covered}&consistency=store"),
    ] {
        let (status, body) = lookup(&sidecar, &query);
        assert_eq!(status, 200, "{query}: {body}");
        assert_eq!(body["source"], "store", "{query}: {body}");
        assert_eq!(keys(&body), ["u0007"], "{query}");
    }
    let (status, body) = lookup(&sidecar, &format!("{covered}&consistency=sometimes"));
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "consistency");
    // Batch lookups too.
    let phones: Vec<String> = (0..20).map(phone).collect();
    let (status, body) = post(
        &sidecar.url("/v1/tables/user/rows:batch-lookup"),
        &json!({"field": "phone", "values": phones, "columns": ["info:city"]}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["count"].clone(), body["source"].clone()),
        (json!(20), json!("index"))
    );
    assert_eq!(
        body["results"][3]["rows"][0]["cells"],
        json!({"info:city": "城3"})
    );

    // What the covered column costs, in the indexer status.
    let (_, status) = get(&sidecar.url("/v1/indexer/status"));
    let sizes = &status["tables"]["user"]["covered"];
    assert_eq!(sizes[0]["column"], "info:city", "{status}");
    assert_eq!(sizes[0]["rows"], 20, "{status}");
    assert!(sizes[0]["bytes"].as_u64().unwrap() > 20 * "info:city".len() as u64);

    // "HBase" goes away: covered lookups still answer, the others can't.
    hbase.kill9();
    let (status, body) = lookup(&sidecar, &covered);
    assert_eq!(
        (status, body["source"].clone()),
        (200, json!("index")),
        "{body}"
    );
    assert_eq!(body["rows"][0]["cells"]["info:city"], "城7");
    let (status, body) = lookup(&sidecar, &format!("{covered}&consistency=store"));
    assert_eq!(status, 503, "{body}");
    sidecar.stop();
}

#[test]
fn covered_values_follow_the_newest_timestamp() {
    // The embedded store: the index follows the change feed, so writes are indexed directly.
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), None);
    let server = Server::start(
        &["--config", &config, "serve"],
        &dir.path().join("data"),
        &[],
    );
    let write = |ts: i64, cells: Value| {
        let (status, body) = put(
            &server.url("/v1/tables/user/rows/u1?wait=indexed"),
            &json!({"cells": cells, "ts": ts}),
        );
        assert_eq!(status, 200, "{body}");
    };
    let city = || {
        let (status, body) = lookup(&server, "phone=13800138000&columns=info:city");
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["source"], "index", "{body}");
        body["rows"][0]["cells"]["info:city"].clone()
    };
    write(
        10,
        json!({"info:phone": "13800138000", "info:city": "北京"}),
    );
    assert_eq!(city(), "北京");
    // A partial update of the covered column alone, then an older one that must lose.
    write(20, json!({"info:city": "上海"}));
    assert_eq!(city(), "上海");
    write(15, json!({"info:city": "广州"}));
    assert_eq!(city(), "上海");
    // A delete of the column: the row still matches, without the cell.
    let (status, body) = util::delete(&server.url("/v1/tables/user/rows/u1?wait=indexed"));
    assert_eq!(status, 200, "{body}");
    let (_, body) = lookup(&server, "phone=13800138000&columns=info:city");
    assert_eq!(
        body["count"], 0,
        "a deleted row is gone from covered answers: {body}"
    );
    // Newer than the delete (which took the server's clock): a minute ahead.
    let later = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        + 60_000;
    write(
        later,
        json!({"info:phone": "13800138000", "info:city": "深圳"}),
    );
    assert_eq!(city(), "深圳");
    server.stop();
}
