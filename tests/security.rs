//! API keys, scopes, rate limits, the audit log and personal data in logs, over real HTTP
//! against the real binary.

mod util;

use std::process::Command;
use std::time::Duration;

use hbidx_demo::people::idcard_born as idcard;
use serde_json::{Value, json};
use util::{Server, TEST_API_KEY, client_with_key, eventually, send};

/// `hbidx keys new --id ID --scope …` as a user runs it: (key, config entry).
fn new_key(id: &str, scopes: &str) -> (String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_hbidx"))
        .args(["keys", "new", "--id", id, "--scope", scopes])
        .output()
        .expect("hbidx runs");
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).unwrap();
    let mut lines = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty());
    let key = lines.next().expect("a key line").to_string();
    let entry: Vec<&str> = lines.collect();
    (key, entry.join("\n") + "\n")
}

fn config_with(dir: &std::path::Path, security: &str) -> std::path::PathBuf {
    let text = format!(
        "{}\n{security}",
        include_str!("../deploy/config/hbidx.toml")
    );
    let path = dir.join("hbidx.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn call(
    key: Option<&str>,
    method: reqwest::Method,
    url: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut request = client_with_key(key).request(method, url);
    if let Some(body) = body {
        request = request.json(body);
    }
    send(request)
}

#[test]
fn keys_scopes_rate_limits_and_open_health_checks() {
    let (reader, reader_entry) = new_key("reader", "lookup");
    let (writer, writer_entry) = new_key("writer", "write");
    let (ops, ops_entry) = new_key("ops", "admin");
    let dir = tempfile::tempdir().unwrap();
    let reader_entry = reader_entry.replace(
        "scopes",
        "rate_limit = { per_second = 1, burst = 3 }\nscopes",
    );
    let config = config_with(
        dir.path(),
        &format!("{reader_entry}\n{writer_entry}\n{ops_entry}"),
    );
    let server = Server::start_with_env(
        &["serve"],
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
        &[],
    );
    let rows = server.url("/v1/tables/user/rows");
    let person = json!({"cells": {"info:name": "张三", "info:phone": "13800138000"}});
    let batch = json!({"field": "phone", "values": ["13800138000"]});
    let reindex = json!({"from": "kafka"});
    use reqwest::Method as M;

    // Health checks are open: probes can't send keys.
    assert_eq!(call(None, M::GET, &server.url("/healthz"), None).0, 200);
    assert_eq!(call(None, M::GET, &server.url("/readyz"), None).0, 200);

    // Every other route refuses a caller without a key, with the one error shape.
    let routes: Vec<(M, String, Option<&Value>)> = vec![
        (M::GET, server.url("/v1/tables"), None),
        (M::GET, format!("{rows}?phone=13800138000"), None),
        (M::POST, format!("{rows}:batch-lookup"), Some(&batch)),
        (M::GET, format!("{rows}/u1"), None),
        (M::PUT, format!("{rows}/u1"), Some(&person)),
        (M::DELETE, format!("{rows}/u1"), None),
        (M::GET, server.url("/v1/tables/user/rowkey?key=u1"), None),
        (
            M::POST,
            server.url("/v1/tables/user/reindex"),
            Some(&reindex),
        ),
        (M::GET, server.url("/v1/jobs/1"), None),
        (M::GET, server.url("/v1/indexer/status"), None),
        (M::GET, server.url("/no/such/route"), None),
    ];
    for (method, url, body) in &routes {
        let (status, answer) = call(None, method.clone(), url, *body);
        assert_eq!(status, 401, "{method} {url}: {answer}");
        assert_eq!(answer["error"]["code"], "unauthorized", "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Authorization: Bearer <key>"),
            "{answer}"
        );
        // A key that isn't configured is refused the same way.
        let (status, answer) = call(
            Some("hbidx_not_a_key_of_this_server_00000"),
            method.clone(),
            url,
            *body,
        );
        assert_eq!(
            (status, answer["error"]["message"].as_str()),
            (401, Some("unknown API key")),
            "{method} {url}"
        );
    }
    let response = client_with_key(None)
        .get(format!("{rows}?phone=13800138000"))
        .send()
        .unwrap();
    assert_eq!(
        response.headers()["www-authenticate"],
        "Bearer realm=\"hbidx\""
    );
    let response = reqwest::blocking::Client::new()
        .get(format!("{rows}?phone=13800138000"))
        .basic_auth("reader", Some(&reader))
        .send()
        .unwrap();
    assert_eq!(response.status(), 401);

    // Scopes: each key does its own job only; admin does not imply lookup.
    let (status, body) = call(
        Some(&writer),
        M::PUT,
        &format!("{rows}/u1?wait=indexed"),
        Some(&person),
    );
    assert_eq!(status, 200, "{body}");
    for (key, method, url, body, scope) in [
        (
            &reader,
            M::PUT,
            format!("{rows}/u2"),
            Some(&person),
            "write",
        ),
        (&reader, M::DELETE, format!("{rows}/u1"), None, "write"),
        (
            &reader,
            M::GET,
            server.url("/v1/indexer/status"),
            None,
            "admin",
        ),
        (
            &writer,
            M::GET,
            format!("{rows}?phone=13800138000"),
            None,
            "lookup",
        ),
        (&writer, M::GET, format!("{rows}/u1"), None, "lookup"),
        (
            &ops,
            M::GET,
            format!("{rows}?phone=13800138000"),
            None,
            "lookup",
        ),
        (
            &ops,
            M::POST,
            format!("{rows}:batch-lookup"),
            Some(&batch),
            "lookup",
        ),
        (&ops, M::PUT, format!("{rows}/u3"), Some(&person), "write"),
    ] {
        let (status, answer) = call(Some(key), method.clone(), &url, body);
        assert_eq!(status, 403, "{method} {url}: {answer}");
        assert_eq!(answer["error"]["code"], "forbidden");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("\"{scope}\" scope")) && message.contains(method.as_str()),
            "{message}"
        );
    }
    // HEAD on a row is answered by the GET handler: whether the row exists and its size are
    // the reader's to know, not a write-only key's.
    let head = |key: &str| {
        let response = client_with_key(Some(key))
            .head(format!("{rows}/u1"))
            .send()
            .unwrap();
        response.status().as_u16()
    };
    // (Not tried with the reader here: that would take a token of the bucket drained below.)
    assert_eq!(head(&writer), 403, "HEAD with a write-only key");
    let (status, body) = call(Some(&ops), M::GET, &server.url("/v1/indexer/status"), None);
    assert_eq!(
        (status, body["tables"]["user"]["rows"].as_u64()),
        (200, Some(1))
    );
    // Rate limit: the reader's bucket holds 3 and refills at 1/s. It is still full: refusals
    // by scope don't take tokens, and the reader has made no other request. Drain it.
    let lookup = format!("{rows}?phone=13800138000");
    let mut answers = Vec::new();
    let limited = loop {
        let response = client_with_key(Some(&reader)).get(&lookup).send().unwrap();
        if response.status() == 429 {
            break response;
        }
        assert_eq!(response.status(), 200);
        answers.push(response.status());
        // A slow machine refills a token now and then while draining; it still runs dry.
        assert!(
            answers.len() <= 10,
            "no 429 after {} lookups",
            answers.len()
        );
    };
    assert!(
        answers.len() >= 3,
        "the burst of 3 was not allowed: {answers:?}"
    );
    assert_eq!(limited.headers()["retry-after"], "1");
    let body: Value = limited.json().unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"reader\" is over its rate limit (1/s, burst 3)"),
        "{body}"
    );
    // Other keys have their own buckets; the limited one works again after Retry-After.
    assert_eq!(
        call(Some(&ops), M::GET, &server.url("/v1/indexer/status"), None).0,
        200
    );
    // Refused until a token is back (refusals take none), then served.
    let body = eventually(
        "the reader's bucket refills",
        Duration::from_secs(10),
        || {
            let (status, body) = call(Some(&reader), M::GET, &lookup, None);
            (status == 200).then_some(body)
        },
    );
    assert_eq!(body["count"].as_u64(), Some(1), "{body}");
    // Any key may list the tables (the reader once its bucket has a token again).
    for key in [&writer, &ops] {
        assert_eq!(
            call(Some(key), M::GET, &server.url("/v1/tables"), None).0,
            200
        );
    }
    eventually(
        "the reader lists the tables",
        Duration::from_secs(10),
        || {
            let (status, _) = call(Some(&reader), M::GET, &server.url("/v1/tables"), None);
            assert!(status == 200 || status == 429, "{status}");
            (status == 200).then_some(())
        },
    );
    // Refusals are audited with the key id and the route pattern.
    let log = server.log_text();
    assert!(
        log.lines().any(|l| l.contains("audit")
            && l.contains("refused")
            && l.contains("key=\"reader\"")
            && l.contains("route=\"/v1/indexer/status\"")
            && l.contains("status=403")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("refused") && l.contains("key=\"-\"") && l.contains("status=401")),
        "{log}"
    );
    // The plaintext keys are never logged.
    for key in [&reader, &writer, &ops] {
        assert!(!log.contains(key.as_str()), "a key is in the log");
    }
}

/// What a client without a key sends must not create state: each made-up HTTP method used to
/// add a histogram (~20 lines of `/metrics`) per method string.
#[test]
fn made_up_methods_without_a_key_add_no_metric_series() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&["demo", "--rows", "200"], dir.path(), &[]);
    let rows = server.url("/v1/tables/user/rows?phone=13800138000");
    let scrape = || {
        let (status, text) = util::get_text(&server.url("/metrics"));
        assert_eq!(status, 200);
        text
    };
    let attempt = |method: &str| {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        call(None, method, &rows, None).0
    };
    assert_eq!(attempt("X0"), 401);
    // The first scrape is counted after it answers: the second shows its series too.
    scrape();
    let before = scrape();
    for n in 1..=50 {
        assert_eq!(attempt(&format!("X{n}")), 401);
    }
    let after = scrape();
    assert!(
        !after.contains("method=\"X"),
        "a client-chosen method became a label:\n{after}"
    );
    assert!(after.contains("method=\"other\""), "{after}");
    assert_eq!(
        after
            .lines()
            .filter(|l| l.starts_with("hbidx_http_"))
            .count(),
        before
            .lines()
            .filter(|l| l.starts_with("hbidx_http_"))
            .count(),
        "50 made-up methods added metric series"
    );
}

/// A 400 names the field and the kind of problem; it never quotes the value back (serde's
/// messages do: ``invalid type: integer `13912345678` ``).
#[test]
fn bad_bodies_are_refused_without_echoing_their_values() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&["demo", "--rows", "200"], dir.path(), &[]);
    let rows = server.url("/v1/tables/user/rows");
    use reqwest::Method as M;
    for (method, url, body, path) in [
        (
            M::PUT,
            format!("{rows}/x1"),
            json!({"cells": {"info:phone": 13912345678u64}}),
            "info:phone",
        ),
        (
            M::PUT,
            format!("{rows}/x1"),
            json!({"cells": "110101199003077777"}),
            "cells",
        ),
        (
            M::POST,
            format!("{rows}:batch-lookup"),
            json!({"field": "phone", "values": [13912345678u64]}),
            "values",
        ),
    ] {
        let (status, answer) = call(Some(TEST_API_KEY), method.clone(), &url, Some(&body));
        assert_eq!(status, 400, "{method} {url}: {answer}");
        assert_eq!(answer["error"]["field"], "body", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(path), "{message}");
        assert!(
            !message.contains("13912345678") && !message.contains("110101199003077777"),
            "the answer quotes the value: {message}"
        );
    }
    // serde's structs also read an array of their fields in order (`[null]` as
    // `{"sample": null}`); the API documents objects only, and starts no job on anything else.
    let table = server.url("/v1/tables/user");
    for (url, body) in [
        (format!("{table}/verify"), json!([null])),
        (format!("{table}/reindex"), json!(["store"])),
        (
            format!("{rows}:batch-lookup"),
            json!(["phone", ["13912345678"]]),
        ),
        (format!("{rows}/x1"), json!([{"info:name": "张三"}])),
    ] {
        let method = if url.ends_with("x1") { M::PUT } else { M::POST };
        let (status, answer) = call(Some(TEST_API_KEY), method, &url, Some(&body));
        assert_eq!(status, 400, "{url} {body}: {answer}");
        assert_eq!(answer["error"]["field"], "body", "{answer}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("must be a JSON object"),
            "{answer}"
        );
    }
}

#[test]
fn serve_without_any_key_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_hbidx"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env_remove("HBIDX_API_KEY")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("no API keys") && stderr.contains("hbidx keys new"),
        "{stderr}"
    );
    // Only the form `hbidx keys new` prints is a key: a short secret, the deploy examples'
    // old placeholder, a patterned string, each refused in one line naming where it came from
    // and how to make a key, without quoting it.
    for weak in [
        "secret",
        "REPLACE-with-the-output-of-hbidx-keys-new",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "hbidx_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_hbidx"))
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("HBIDX_API_KEY", weak)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{weak}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("--api-key / HBIDX_API_KEY: an API key must")
                && stderr.contains("hbidx keys new"),
            "{weak}: {stderr}"
        );
        assert!(!stderr.contains(weak), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}

/// An instance of a sharded tier needs the peers' key in HBIDX_CLUSTER_KEY, and never takes
/// the client key (HBIDX_API_KEY) for it.
#[test]
fn a_tier_instance_needs_its_own_peers_key() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = "[store]\nkind = \"hbase\"\nthrift = \"127.0.0.1:1\"\n\n\
        [[sources]]\nkind = \"kafka\"\nbrokers = \"127.0.0.1:1\"\ntopic = \"t\"\ntable = \"user\"\n\
        format = \"json\"\n\n\
        [cluster]\nshards = [[\"http://127.0.0.1:1\"], [\"http://127.0.0.1:2\"]]\n";
    let config = config_with(dir.path(), cluster);
    let serve = |env: &[(&str, &str)]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hbidx"));
        command
            .arg("--config")
            .arg(&config)
            .args([
                "--shard",
                "0",
                "--replica",
                "0",
                "serve",
                "--listen",
                "127.0.0.1:0",
            ])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .env_remove("HBIDX_API_KEY")
            .env_remove("HBIDX_CLUSTER_KEY");
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().unwrap()
    };
    let output = serve(&[("HBIDX_API_KEY", TEST_API_KEY)]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("HBIDX_CLUSTER_KEY, which is not set")
            && stderr.contains("--scope cluster"),
        "{stderr}"
    );
    // The same key as the client's: refused, it would give the peers every scope.
    let output = serve(&[
        ("HBIDX_API_KEY", TEST_API_KEY),
        ("HBIDX_CLUSTER_KEY", TEST_API_KEY),
    ]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cluster scope only"), "{stderr}");
    // A weak one: refused like any key.
    let output = serve(&[(
        "HBIDX_CLUSTER_KEY",
        "REPLACE-with-the-output-of-hbidx-keys-new",
    )]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("HBIDX_CLUSTER_KEY: an API key must"),
        "{stderr}"
    );
}

#[test]
fn demo_generates_and_prints_a_key_when_given_none() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with_env(&["demo", "--rows", "200"], dir.path(), &[], &[]);
    let key = eventually("the demo prints its key", Duration::from_secs(10), || {
        server.log_text().lines().find_map(|line| {
            line.trim()
                .strip_prefix("export HBIDX_API_KEY=")
                .map(str::to_string)
        })
    });
    assert!(key.starts_with("hbidx_") && key.len() >= 40, "{key}");
    let url = server.url("/v1/tables/user/rows?name=zhangsan&match=pinyin");
    assert_eq!(call(None, reqwest::Method::GET, &url, None).0, 401);
    assert_eq!(call(Some(&key), reqwest::Method::GET, &url, None).0, 200);
    // The test key was not given, so it doesn't work here.
    assert_eq!(
        call(Some(TEST_API_KEY), reqwest::Method::GET, &url, None).0,
        401
    );
}

/// Every digit run of `value` of 7 or more digits: a log that shows any of them shows too much
/// of the number (a mask keeps 3 + 4).
fn needles(value: &str) -> Vec<String> {
    let digits: String = value.chars().filter(char::is_ascii_digit).collect();
    let mut needles = vec![value.to_string(), digits.clone()];
    for start in 0..digits.len().saturating_sub(6) {
        needles.push(digits[start..start + 7].to_string());
    }
    needles
}

#[test]
fn no_phone_or_idcard_reaches_the_logs_at_debug_level() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &["serve"],
        dir.path(),
        &["--log", "debug", "--log-format", "json"],
    );
    let rows = server.url("/v1/tables/user/rows");
    let phone_a = "15866602417";
    let phone_b = "17755501938";
    let id_a = idcard("19870412", 583);
    let id_b = idcard("19921130", 46);
    // Malformed values: 12 digits, and a valid idcard with a wrong check digit.
    let bad_phone = "158666024179";
    let bad_id = {
        let mut id = id_b.clone();
        let last = id.pop().unwrap();
        id.push(if last == '0' { '1' } else { '0' });
        id
    };
    let c = util::client();
    let put =
        |key: &str, phone: &str, id: &str| {
            send(c.put(format!("{rows}/{key}?wait=indexed")).json(
                &json!({"cells": {"info:name": "李四", "info:phone": phone, "info:idcard": id}}),
            ))
        };
    assert_eq!(put("p1", "+86 158-6660-2417", &id_a).0, 200);
    assert_eq!(put("p2", phone_b, &id_b.to_lowercase()).0, 200);
    let (status, body) = put("p3", bad_phone, &id_a);
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (400, Some("cells.info:phone"))
    );
    let (status, body) = put("p4", phone_a, &bad_id);
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (400, Some("cells.info:idcard"))
    );

    let get = |query: &str| send(c.get(format!("{rows}?{query}")));
    assert_eq!(get(&format!("phone={phone_a}")).1["count"], 1);
    assert_eq!(get("phone=%2B86%20158%206660%202417").1["count"], 1);
    assert_eq!(get(&format!("idcard={id_a}")).1["count"], 1);
    assert_eq!(
        get(&format!("idcard={}", id_b.to_lowercase())).1["count"],
        1
    );
    assert_eq!(get("phone_suffix=02417").1["count"], 1);
    assert_eq!(get(&format!("phone={bad_phone}")).0, 400);
    assert_eq!(get(&format!("idcard={bad_id}")).0, 400);
    assert_eq!(get(&format!("{phone_b}=1")).0, 400);
    let (status, body) = send(c.post(format!("{rows}:batch-lookup")).json(&json!({
        "field": "phone",
        "values": [phone_a, bad_phone, phone_b, "+86 177 5550 1938"],
    })));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["count"], 3, "{body}");
    assert!(body["results"][1]["error"].is_string(), "{body}");
    let (status, _) = send(c.post(format!("{rows}:batch-lookup")).json(&json!({
        "field": "idcard", "values": [id_a, bad_id], "match": "nonsense",
    })));
    assert_eq!(status, 400);
    assert_eq!(send(c.get(format!("{rows}/p1"))).0, 200);
    assert_eq!(send(c.delete(format!("{rows}/p2?wait=indexed"))).0, 200);

    server_stop_and_check(
        server,
        &[phone_a, phone_b, bad_phone, &id_a, &id_b, &bad_id],
    );
}

fn server_stop_and_check(server: Server, values: &[&str]) {
    // A graceful stop flushes the last lines (and logs the shutdown path too).
    let log = server.log.clone();
    server.stop();
    let log = log.lock().unwrap().join("\n");
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    // The capture really is at debug level, and it holds the audit trail.
    assert!(
        lines.iter().any(|l| l["level"] == "DEBUG"),
        "no debug lines captured:\n{log}"
    );
    let audit: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "audit" && l["fields"]["message"] == "lookup")
        .collect();
    // 8 lookups, 2 batch lookups, 1 read by key.
    assert_eq!(audit.len(), 11, "{log}");
    let ok_phone = audit
        .iter()
        .find(|l| l["fields"]["operation"] == "batch_lookup" && l["fields"]["status"] == 200)
        .expect("an audited batch lookup");
    assert_eq!(ok_phone["fields"]["key"], "cli");
    assert_eq!(ok_phone["fields"]["table"], "user");
    assert_eq!(ok_phone["fields"]["fields"], "phone");
    assert_eq!(ok_phone["fields"]["values"], 4);
    assert_eq!(ok_phone["fields"]["results"], 3);
    assert!(
        audit
            .iter()
            .any(|l| l["fields"]["fields"] == "phone_suffix" && l["fields"]["results"] == 1),
        "{log}"
    );
    assert!(
        audit
            .iter()
            .any(|l| l["fields"]["fields"] == "idcard" && l["fields"]["status"] == 400),
        "{log}"
    );
    assert!(!log.contains(TEST_API_KEY), "the API key is in the log");
    for value in values {
        for needle in needles(value) {
            if let Some(line) = log.lines().find(|line| line.contains(&needle)) {
                panic!("{needle} (from a seeded phone/idcard) is in the log: {line}");
            }
        }
    }
}

/// Requests without a valid key are limited per client address: past `refused_rate_limit`
/// they get 429 with Retry-After and no audit line each, while a valid key from the same
/// address and a keyless client from another address are not held back.
#[test]
fn refused_requests_are_limited_per_client_address() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_with(
        dir.path(),
        "[security]\nrefused_rate_limit = { per_second = 1, burst = 5 }\n",
    );
    let server = Server::start(
        &["--config", config.to_str().unwrap(), "serve"],
        &dir.path().join("data"),
        &[],
    );
    let url = server.url("/v1/tables");
    let statuses: Vec<u16> = (0..20)
        .map(|_| {
            call(
                Some("hbidx_not_a_key_of_this_server_00000"),
                reqwest::Method::GET,
                &url,
                None,
            )
            .0
        })
        .collect();
    let refused = statuses.iter().filter(|&&s| s == 401).count();
    let limited = statuses.iter().filter(|&&s| s == 429).count();
    // A burst of 5, and a token a second while the 20 requests go out.
    assert!(
        (5..=7).contains(&refused) && refused + limited == 20,
        "{statuses:?}"
    );
    let response = client_with_key(None).get(&url).send().unwrap();
    assert_eq!(response.status(), 429);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("without a valid API key from this address"),
        "{body}"
    );
    // A valid key is never held back by its address's refusals.
    assert_eq!(
        call(Some(TEST_API_KEY), reqwest::Method::GET, &url, None).0,
        200
    );
    // Another address has its own bucket.
    let other = reqwest::blocking::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    assert_eq!(other.get(&url).send().unwrap().status(), 401);
    // The limited ones were counted, not audited line by line.
    let (_, metrics) = util::get_text(&server.url("/metrics"));
    let counted: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("hbidx_auth_refusals_limited_total "))
        .expect("the counter")
        .parse()
        .unwrap();
    assert!(counted >= (limited + 1) as f64, "{counted}");
    let audited = server
        .log_text()
        .lines()
        .filter(|l| l.contains("refused") && l.contains("audit"))
        .count();
    assert!(audited <= refused + 2, "{audited} refusals audited");
}

/// A slowloris from one address (connections that send part of a head and wait) takes at most
/// `max_connections_per_client` connections, each for at most the header timeout (5 s by
/// default): the probes from another address are answered at once throughout.
#[test]
fn a_slowloris_from_one_address_leaves_the_probes_alone() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_with(
        dir.path(),
        "[server]\nmax_connections = 64\nmax_connections_per_client = 16\n",
    );
    let server = Server::start(
        &["--config", config.to_str().unwrap(), "serve"],
        &dir.path().join("data"),
        &[],
    );
    let addr: std::net::SocketAddr = server.base.trim_start_matches("http://").parse().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    const FLOOD: usize = 100;
    let started = std::time::Instant::now();
    let mut flood: Vec<std::net::TcpStream> = runtime.block_on(async {
        let mut streams = Vec::new();
        for _ in 0..FLOOD {
            // From another loopback address: std's sockets can't pick their source.
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
            let stream = socket.connect(addr).await.unwrap().into_std().unwrap();
            stream.set_nonblocking(false).unwrap();
            streams.push(stream);
        }
        streams
    });
    for stream in &mut flood {
        // Part of a head, never finished.
        use std::io::Write;
        let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n");
    }
    // The probes, from 127.0.0.1, while the flood holds its connections.
    let probe = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    for path in ["/healthz", "/readyz", "/healthz"] {
        let response = probe
            .get(server.url(path))
            .send()
            .expect("a probe is answered");
        assert_eq!(response.status(), 200, "{path}");
    }
    // All but 16 of the flood's connections were closed as they were accepted.
    let closed = |streams: &mut Vec<std::net::TcpStream>, within: Duration| {
        use std::io::Read;
        let deadline = std::time::Instant::now() + within;
        let mut closed = 0;
        for stream in streams.iter_mut() {
            let mut buf = [0u8; 1024];
            // Whatever the server says before closing (a 408) is read past.
            loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                stream
                    .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                    .unwrap();
                match stream.read(&mut buf) {
                    Ok(0) => {
                        closed += 1;
                        break;
                    }
                    Ok(_) => continue,
                    Err(err)
                        if matches!(
                            err.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) =>
                    {
                        break;
                    }
                    Err(_) => {
                        closed += 1;
                        break;
                    }
                }
            }
        }
        closed
    };
    assert_eq!(closed(&mut flood, Duration::from_millis(100)), FLOOD - 16);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    let (_, metrics) = util::get_text(&server.url("/metrics"));
    assert!(
        metrics.contains(&format!(
            "hbidx_connections_refused_total{{reason=\"per_client\"}} {}",
            FLOOD - 16
        )),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("refused"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The 16 it kept are closed within the default header timeout.
    assert_eq!(closed(&mut flood, Duration::from_secs(6)), FLOOD);
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "{:?}",
        started.elapsed()
    );
}

/// `POST /v1/tables/{table}/rows:lookup`: the GET form's parameters in a JSON body, so a
/// looked-up phone never appears in a URL; the same answer.
#[test]
fn the_post_form_of_a_lookup_answers_like_the_get() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_with(dir.path(), "");
    let server = Server::start(
        &["--config", config.to_str().unwrap(), "serve"],
        &dir.path().join("data"),
        &[],
    );
    let rows = server.url("/v1/tables/user/rows");
    let person = json!({"cells": {"info:name": "张三", "info:phone": "13800138000"}});
    let (status, body) = call(
        Some(TEST_API_KEY),
        reqwest::Method::PUT,
        &format!("{rows}/u1?wait=indexed"),
        Some(&person),
    );
    assert_eq!(status, 200, "{body}");
    let comparable = |mut body: Value| {
        body.as_object_mut().unwrap().remove("took_ms");
        body
    };
    for (query, object) in [
        ("phone=13800138000", json!({"phone": "13800138000"})),
        (
            "phone=13800138000&limit=5",
            json!({"phone": "13800138000", "limit": 5}),
        ),
        (
            "name=张&match=prefix",
            json!({"name": "张", "match": "prefix"}),
        ),
    ] {
        let (get_status, got) = call(
            Some(TEST_API_KEY),
            reqwest::Method::GET,
            &format!("{rows}?{query}"),
            None,
        );
        let (post_status, posted) = call(
            Some(TEST_API_KEY),
            reqwest::Method::POST,
            &server.url("/v1/tables/user/rows:lookup"),
            Some(&object),
        );
        assert_eq!((get_status, post_status), (200, 200), "{got} {posted}");
        assert_eq!(got["count"], 1, "{got}");
        assert_eq!(comparable(got), comparable(posted), "{query}");
    }
    // A value that isn't a scalar is named, not quoted.
    let (status, body) = call(
        Some(TEST_API_KEY),
        reqwest::Method::POST,
        &server.url("/v1/tables/user/rows:lookup"),
        Some(&json!({"phone": ["13800138000"]})),
    );
    assert_eq!(
        (status, &body["error"]["field"]),
        (400, &json!("phone")),
        "{body}"
    );
    assert!(!body.to_string().contains("13800138000"), "{body}");
    // The lookup scope, like the GET.
    let (status, _) = call(
        None,
        reqwest::Method::POST,
        &server.url("/v1/tables/user/rows:lookup"),
        Some(&json!({"phone": "13800138000"})),
    );
    assert_eq!(status, 401);
}

/// `cursor` with its middle character replaced by another base64url one (a whole 6 bits of
/// the sealed bytes changed).
fn edited(cursor: &str) -> String {
    let mut chars: Vec<char> = cursor.chars().collect();
    let middle = chars.len() / 2;
    chars[middle] = if chars[middle] == 'A' { 'B' } else { 'A' };
    chars.into_iter().collect()
}

#[test]
fn paging_cursors_are_sealed_and_open_wherever_the_key_is_shared() {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = config_with(dir.path(), "");
    let args = ["--config", config.to_str().unwrap(), "serve"];
    let (cursor_key, _) = new_key("cursor", "lookup");
    let with_key = [
        ("HBIDX_API_KEY", TEST_API_KEY),
        ("HBIDX_CURSOR_KEY", cursor_key.as_str()),
    ];
    let server = Server::start_with_env(&args, &data, &[], &with_key);
    // Rowkeys that are personal data, as `md5(uid)[..6] + uid` designs make them.
    let rowkeys = [
        "a1b2c3-13800138001",
        "a1b2c3-13800138002",
        "a1b2c3-13800138003",
    ];
    for rowkey in rowkeys {
        let (status, body) = call(
            Some(TEST_API_KEY),
            reqwest::Method::PUT,
            &server.url(&format!("/v1/tables/user/rows/{rowkey}?wait=indexed")),
            Some(&json!({"cells": {"info:name": "张三", "info:phone": "13800138000"}})),
        );
        assert_eq!(status, 200, "{body}");
    }
    let page = |server: &Server, cursor: Option<&str>| {
        let mut url = server.url("/v1/tables/user/rows?phone=13800138000&limit=1&index_only=true");
        if let Some(cursor) = cursor {
            url.push_str(&format!("&cursor={cursor}"));
        }
        call(Some(TEST_API_KEY), reqwest::Method::GET, &url, None)
    };
    let (status, first) = page(&server, None);
    assert_eq!((status, first["count"].as_u64()), (200, Some(1)), "{first}");
    // The table's rowkey is `md5(key)[..6] + key`: both are personal data here.
    let first_rowkey = first["rows"][0]["rowkey"].as_str().unwrap().to_string();
    let first_key = first["rows"][0]["key"].as_str().unwrap().to_string();
    assert!(rowkeys.contains(&first_key.as_str()), "{first}");
    let cursor = first["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_string();
    // The cursor reveals no part of the rowkey it stands for.
    let raw = URL_SAFE_NO_PAD.decode(&cursor).expect("base64url");
    assert!(
        !raw.windows(6)
            .any(|w| rowkeys[0].as_bytes().windows(6).any(|r| r == w)),
        "{cursor}"
    );
    // The same page asked twice gives two different cursors (a fresh nonce each).
    let (_, again) = page(&server, None);
    assert_ne!(again["next_cursor"], first["next_cursor"]);
    // A cursor made up from a rowkey, or edited, is refused and not quoted back.
    for forged in [URL_SAFE_NO_PAD.encode(&first_rowkey), edited(&cursor)] {
        let (status, body) = page(&server, Some(&forged));
        assert_eq!(
            (status, &body["error"]["field"]),
            (400, &json!("cursor")),
            "{body}"
        );
        assert!(!body.to_string().contains(&forged), "{body}");
    }
    // Another process with the same HBIDX_CURSOR_KEY (here: the same server restarted) opens it.
    server.stop();
    let server = Server::start_with_env(&args, &data, &[], &with_key);
    let (status, second) = page(&server, Some(&cursor));
    assert_eq!(status, 200, "{second}");
    let second_rowkey = second["rows"][0]["rowkey"].as_str().unwrap();
    assert!(
        second_rowkey > first_rowkey.as_str(),
        "{first} then {second}"
    );
    server.stop();
    // Without a shared key a process seals with its own: the cursor of another is refused
    // with a 400 that says how to share one.
    let server = Server::start_with_env(&args, &data, &[], &[("HBIDX_API_KEY", TEST_API_KEY)]);
    let (status, body) = page(&server, Some(&cursor));
    assert_eq!(
        (status, &body["error"]["field"]),
        (400, &json!("cursor")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("HBIDX_CURSOR_KEY"),
        "{body}"
    );
    server.stop();
    // A weak cursor key is refused at start, in one line, without quoting it.
    let output = Command::new(env!("CARGO_BIN_EXE_hbidx"))
        .args(args)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env("HBIDX_API_KEY", TEST_API_KEY)
        .env("HBIDX_CURSOR_KEY", "not-a-random-key")
        .output()
        .expect("hbidx runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("HBIDX_CURSOR_KEY") && !stderr.contains("not-a-random-key"),
        "{stderr}"
    );
}

#[test]
fn a_stalled_log_reader_holds_up_no_lookup_and_loses_no_audit_line() {
    // Every lookup writes an audit line. Once the process's stderr stops draining (a log
    // collector that stalls), the pipe fills after some 400 lines; the lookups must go on, and
    // every line must come out once the reader is back.
    const LOOKUPS: usize = 3000;
    let dir = tempfile::tempdir().unwrap();
    let (server, release) =
        Server::start_with_stalled_log(&["serve"], &dir.path().join("data"), &[]);
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {TEST_API_KEY}").parse().unwrap(),
    );
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(10))
        .default_headers(headers)
        .build()
        .unwrap();
    let url = server.url("/v1/tables/user/rows?phone=13800138000");
    for i in 0..LOOKUPS {
        let response = client
            .get(&url)
            .send()
            .unwrap_or_else(|err| panic!("lookup {i} with stderr unread: {err}"));
        assert_eq!(response.status(), 200, "lookup {i}");
    }
    // Health checks too, while the lines are still queued.
    assert_eq!(
        client.get(server.url("/healthz")).send().unwrap().status(),
        200
    );
    release.send(()).unwrap();
    let audited = || {
        server
            .log_text()
            .lines()
            .filter(|l| l.contains("audit") && l.contains("operation=\"lookup\""))
            .count()
    };
    eventually("every lookup's audit line", Duration::from_secs(30), || {
        (audited() >= LOOKUPS).then_some(())
    });
    assert_eq!(audited(), LOOKUPS);
    // Masked on the writer thread as before.
    assert!(!server.log_text().contains("13800138000"));
}

/// The data dir holds the rows and the index in plaintext: nothing in it is readable, writable
/// or searchable by anyone but hbidx's user, whatever the umask it was started with.
#[test]
fn the_data_dir_is_private_to_hbidx_user() {
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&["serve"], &data, &[]);
    let (status, body) = util::put(
        &server.url("/v1/tables/user/rows/u1?wait=indexed"),
        &json!({"cells": {"info:phone": "13800138000"}}),
    );
    assert_eq!(status, 200, "{body}");
    server.stop();
    let mut checked = 0;
    let mut pending = vec![data];
    while let Some(path) = pending.pop() {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{} is {:o}", path.display(), mode & 0o777);
        checked += 1;
        if path.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        }
    }
    assert!(checked > 10, "only {checked} paths under the data dir");
}
