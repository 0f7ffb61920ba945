//! End-to-end over real HTTP: the `hbidx serve` binary on an ephemeral port, a real data dir
//! (fjall store + tantivy indexes on disk), writes through the API, lookups through the index.

mod util;

use std::time::Duration;

use hbidx_demo::people::idcard_born as idcard;
use serde_json::{Value, json};
use util::{Server, delete, eventually, get, keys, post, put, send};

fn person(name: &str, phone: &str, id: &str) -> Value {
    json!({"cells": {"info:name": name, "info:phone": phone, "info:idcard": id, "info:city": "北京"}})
}

fn serve(dir: &std::path::Path) -> Server {
    Server::start(&["serve"], dir, &[])
}

#[test]
fn write_then_find_by_every_field_kind_update_delete_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let rows = server.url("/v1/tables/user/rows");
    let id1 = idcard("19900307", 123);
    let id2 = idcard("19851111", 456);

    let (status, body) = put(
        &format!("{rows}/u1?wait=indexed"),
        &person("张三", "138-0013-8000", &id1),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["indexed"], true);
    let (status, _) = put(
        &format!("{rows}/u2?wait=indexed"),
        &person("张三丰", "+86 139 0000 1111", &id2),
    );
    assert_eq!(status, 200);
    let (status, _) = put(
        &format!("{rows}/u3?wait=indexed"),
        &person("曾小贤", "13700008000", &idcard("20000229", 7)),
    );
    assert_eq!(status, 200);

    // Exact phone, in any common spelling.
    let (status, body) = get(&format!("{rows}?phone=13800138000"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(keys(&body), vec!["u1"]);
    assert_eq!(body["rows"][0]["cells"]["info:name"], "张三");
    assert_eq!(
        keys(&get(&format!("{rows}?phone=%2B8613800138000")).1),
        vec!["u1"]
    );
    // Tail of the phone number: u1 and u3 both end in 8000.
    assert_eq!(
        keys(&get(&format!("{rows}?phone_suffix=8000")).1),
        vec!["u1", "u3"]
    );
    // idcard, lowercase x accepted on lookup too.
    assert_eq!(keys(&get(&format!("{rows}?idcard={id2}")).1), vec!["u2"]);
    // Names: exact, prefix, partial, pinyin full and initials, polyphonic surname.
    assert_eq!(keys(&get(&format!("{rows}?name=张三")).1), vec!["u1"]);
    assert_eq!(
        keys(&get(&format!("{rows}?name=张三&match=prefix")).1),
        vec!["u1", "u2"]
    );
    assert_eq!(
        keys(&get(&format!("{rows}?name=三丰&match=partial")).1),
        vec!["u2"]
    );
    assert_eq!(
        keys(&get(&format!("{rows}?name=zhangsan&match=pinyin")).1),
        vec!["u1"]
    );
    assert_eq!(
        keys(&get(&format!("{rows}?name=zs&match=pinyin")).1),
        vec!["u1"]
    );
    assert_eq!(
        keys(&get(&format!("{rows}?name=zengxiaoxian&match=pinyin")).1),
        vec!["u3"]
    );
    assert!(keys(&get(&format!("{rows}?name=cengxiaoxian&match=pinyin")).1).is_empty());
    // AND of two fields.
    assert_eq!(
        keys(&get(&format!("{rows}?name=张&match=prefix&phone_suffix=8000")).1),
        vec!["u1"]
    );
    // Projection and index_only.
    let (_, body) = get(&format!("{rows}?phone=13800138000&columns=info:name"));
    assert_eq!(body["rows"][0]["cells"], json!({"info:name": "张三"}));
    let (_, body) = get(&format!("{rows}?phone=13800138000&index_only=true"));
    assert_eq!(body["rows"][0]["cells"], json!({}));
    assert_eq!(body["rows"][0]["key"], "u1");
    // The rowkey endpoint agrees with the stored rowkey: substr(md5("u1"),0,6) + "u1".
    let (_, rk) = get(&server.url("/v1/tables/user/rowkey?key=u1"));
    assert_eq!(rk["rowkeys"][0], body["rows"][0]["rowkey"]);
    assert!(rk["rowkeys"][0].as_str().unwrap().ends_with("u1"));
    assert_eq!(rk["rowkeys"][0].as_str().unwrap().len(), 8);

    // Paging with a cursor, in rowkey order, covers every match exactly once.
    let (_, page1) = get(&format!("{rows}?phone_suffix=8000&limit=1"));
    assert_eq!(page1["count"], 1);
    let cursor = page1["next_cursor"]
        .as_str()
        .expect("a second page")
        .to_string();
    let (_, page2) = get(&format!("{rows}?phone_suffix=8000&limit=1&cursor={cursor}"));
    assert_eq!(page2["count"], 1);
    assert!(page2["next_cursor"].is_null());
    let mut both = keys(&page1);
    both.extend(keys(&page2));
    both.sort();
    assert_eq!(both, vec!["u1", "u3"]);

    // Batch lookup: one call, positional results, a bad value reported in place.
    let (status, body) = post(
        &server.url("/v1/tables/user/rows:batch-lookup"),
        &json!({"field": "phone", "values": ["13800138000", "12", "13900001111"]}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["rows"][0]["key"], "u1");
    assert!(
        body["results"][1]["error"]
            .as_str()
            .unwrap()
            .contains("values[1]")
    );
    assert_eq!(body["results"][2]["rows"][0]["key"], "u2");

    // A partial update (name only) keeps phone and idcard searchable; the old name is gone.
    let (status, _) = put(
        &format!("{rows}/u1?wait=indexed"),
        &json!({"cells": {"info:name": "张四"}}),
    );
    assert_eq!(status, 200);
    assert!(keys(&get(&format!("{rows}?name=张三")).1).is_empty());
    assert_eq!(keys(&get(&format!("{rows}?name=张四")).1), vec!["u1"]);
    assert_eq!(
        keys(&get(&format!("{rows}?phone=13800138000")).1),
        vec!["u1"]
    );
    assert_eq!(keys(&get(&format!("{rows}?idcard={id1}")).1), vec!["u1"]);
    // Changing the phone: the old number no longer finds the row.
    put(
        &format!("{rows}/u1?wait=indexed"),
        &json!({"cells": {"info:phone": "13512345678"}}),
    );
    assert!(keys(&get(&format!("{rows}?phone=13800138000")).1).is_empty());
    assert_eq!(
        keys(&get(&format!("{rows}?phone=13512345678")).1),
        vec!["u1"]
    );
    // An older write arriving late never overwrites the newer value.
    put(
        &format!("{rows}/u1?wait=indexed"),
        &json!({"cells": {"info:phone": "13600000000"}, "ts": 1}),
    );
    assert_eq!(
        keys(&get(&format!("{rows}?phone=13512345678")).1),
        vec!["u1"]
    );
    assert!(keys(&get(&format!("{rows}?phone=13600000000")).1).is_empty());

    // Delete: gone from lookups and from the store.
    let (status, _) = delete(&format!("{rows}/u2?wait=indexed"));
    assert_eq!(status, 200);
    assert!(keys(&get(&format!("{rows}?idcard={id2}")).1).is_empty());
    assert_eq!(get(&format!("{rows}/u2")).0, 404);

    // A delete at a timestamp (HBase's deleteAllRowTs) masks only the cells up to it: the
    // phone written after it stays, the name written before it goes.
    for (cells, ts) in [
        (json!({"info:name": "王五"}), 1_000),
        (json!({"info:phone": "13700000001"}), 3_000),
    ] {
        let (status, body) = put(
            &format!("{rows}/u4?wait=indexed"),
            &json!({"cells": cells, "ts": ts}),
        );
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = delete(&format!("{rows}/u4?ts=2000&wait=indexed"));
    assert_eq!(status, 200, "{body}");
    let (_, found) = get(&format!("{rows}?phone=13700000001"));
    assert_eq!(keys(&found), vec!["u4"]);
    assert_eq!(
        found["rows"][0]["cells"]["info:name"],
        Value::Null,
        "{found}"
    );
    let (status, body) = delete(&format!("{rows}/u4?ts=soon"));
    assert_eq!(
        (status, &body["error"]["field"]),
        (400, &json!("ts")),
        "{body}"
    );

    // Restart on the same data dir: everything is still there.
    server.stop();
    let server = serve(dir.path());
    let rows = server.url("/v1/tables/user/rows");
    assert_eq!(
        keys(&get(&format!("{rows}?phone=13512345678")).1),
        vec!["u1"]
    );
    assert_eq!(
        keys(&get(&format!("{rows}?name=zengxiaoxian&match=pinyin")).1),
        vec!["u3"]
    );
    assert!(keys(&get(&format!("{rows}?idcard={id2}")).1).is_empty());
    assert_eq!(
        get(&format!("{rows}/u1")).1["rows"][0]["cells"]["info:name"],
        "张四"
    );
}

#[test]
fn kill_9_during_bulk_write_then_index_agrees_with_store() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let rows = server.url("/v1/tables/user/rows");
    let acknowledged = std::sync::Arc::new(std::sync::Mutex::new(Vec::<usize>::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let phone = |i: usize| format!("139{:08}", i);
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let rows = rows.clone();
            let acknowledged = acknowledged.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let client = util::client();
                let mut i = w;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    let body =
                        json!({"cells": {"info:name": format!("用户{i}"), "info:phone": phone(i)}});
                    match client.put(format!("{rows}/k{i}")).json(&body).send() {
                        Ok(response) if response.status().is_success() => {
                            acknowledged.lock().unwrap().push(i)
                        }
                        _ => break,
                    }
                    i += 4;
                }
                i
            })
        })
        .collect();
    // Let the writes and several index commits happen, then pull the plug.
    eventually("some acknowledged writes", Duration::from_secs(60), || {
        (acknowledged.lock().unwrap().len() > 1500).then_some(())
    });
    server.kill9();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let attempted: usize = writers
        .into_iter()
        .map(|w| w.join().unwrap())
        .max()
        .unwrap()
        + 4;
    let acknowledged = acknowledged.lock().unwrap().clone();

    let server = serve(dir.path());
    let rows = server.url("/v1/tables/user/rows");
    // Wait for the indexer to catch up with the feed that survived: nothing writes any more,
    // so the feed's high watermark is final, and the index has committed up to it.
    eventually("index caught up", Duration::from_secs(60), || {
        let (_, status) = get(&server.url("/v1/indexer/status"));
        let partition = &status["tables"]["user"]["partitions"][0];
        let high = partition["high_watermark"].as_i64()?;
        (partition["lag"] == 0 && partition["checkpoint"].as_i64()? == high - 1 && high > 1)
            .then_some(())
    });
    let mut in_store = 0;
    for i in 0..attempted {
        let stored = get(&format!("{rows}/k{i}")).0 == 200;
        let (_, found) = get(&format!("{rows}?phone={}&index_only=true", phone(i)));
        let indexed = found["count"] == 1;
        assert_eq!(
            stored, indexed,
            "k{i}: store has it = {stored}, index has it = {indexed}"
        );
        in_store += usize::from(stored);
    }
    // Every acknowledged write survived the kill.
    for i in &acknowledged {
        assert_eq!(
            get(&format!("{rows}/k{i}")).0,
            200,
            "acknowledged write k{i} lost"
        );
    }
    assert!(in_store >= acknowledged.len());
}

#[test]
fn demo_loads_serves_examples_and_reuses_its_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&["demo", "--rows", "3000"], dir.path(), &[]);
    // The first printed example works: look up the first generated person by phone.
    let example = eventually(
        "the demo prints curl examples",
        Duration::from_secs(10),
        || {
            server
                .log_text()
                .lines()
                .find(|l| l.contains("rows?phone="))
                .map(str::to_string)
        },
    );
    let url = example.split('\'').nth(1).expect("quoted url").to_string();
    let (status, body) = get(&url);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["count"], 1, "{body}");
    let (_, status) = get(&server.url("/v1/indexer/status"));
    assert_eq!(status["tables"]["user"]["checkpoint"]["changefeed/0"], 3000);
    // Shared names find several people; pinyin finds 张三.
    let (_, body) = get(&server.url("/v1/tables/user/rows?name=zhangsan&match=pinyin&limit=50"));
    assert!(body["count"].as_u64().unwrap() >= 1, "{body}");
    server.stop();
    // Second run: no reload, no wipe.
    let server = Server::start(&["demo", "--rows", "3000"], dir.path(), &[]);
    assert!(
        server.log_text().contains("reusing"),
        "{}",
        server.log_text()
    );
    let (status, body) = get(url
        .replace(url.split("/v1").next().unwrap(), &server.base)
        .as_str());
    assert_eq!((status, body["count"].as_u64()), (200, Some(1)));
}

/// `[server] workers` sets the threads the REST API is served on (a sidecar beside a
/// RegionServer must not take every core); without it there is one per CPU.
#[test]
fn server_workers_setting_sets_the_http_threads() {
    // The threads that answer HTTP, counted by name in /proc (each has a runtime of its own,
    // serve/src/http.rs), and the count the "serving" log line reports.
    fn http_threads(server: &Server) -> usize {
        let tasks = format!("/proc/{}/task", server.child.id());
        let running = std::fs::read_dir(&tasks)
            .unwrap()
            .filter_map(|task| std::fs::read_to_string(task.unwrap().path().join("comm")).ok())
            .filter(|name| name.starts_with("hbidx-http-"))
            .count();
        // Log lines reach stderr from the log writer thread, possibly after the "listening
        // on" line the server prints itself.
        let line = eventually("the serving line", Duration::from_secs(10), || {
            server
                .log_text()
                .lines()
                .find(|line| line.contains("serving"))
                .map(str::to_string)
        });
        let value = line
            .split("http_threads=")
            .nth(1)
            .expect("http_threads field");
        let logged: usize = value
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(logged, running, "the log and /proc disagree");
        running
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hbidx.toml");
    let example = include_str!("../deploy/config/hbidx.toml");
    std::fs::write(&config, format!("{example}\n[server]\nworkers = 1\n")).unwrap();
    let config = config.to_str().unwrap();
    let server = Server::start(&["--config", config, "serve"], &dir.path().join("one"), &[]);
    let (status, _) = get(&server.url("/v1/tables/user/rows?phone=13800138000"));
    assert_eq!(status, 200);
    assert_eq!(http_threads(&server), 1);
    server.stop();

    let server = serve(&dir.path().join("default"));
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(http_threads(&server), cpus);
    server.stop();

    serve_refuses(dir.path(), "workers = 0", "server.workers");
}

/// `hbidx serve` with the example config plus `[server] <server>` exits non-zero, and its
/// message names `key`.
fn serve_refuses(dir: &std::path::Path, server: &str, key: &str) {
    let example = include_str!("../deploy/config/hbidx.toml");
    let config = dir.join("bad.toml");
    std::fs::write(&config, format!("{example}\n[server]\n{server}\n")).unwrap();
    let (code, text) = util::cli(&[
        "--config",
        config.to_str().unwrap(),
        "serve",
        "--data-dir",
        dir.join("bad").to_str().unwrap(),
    ]);
    assert_ne!(code, 0);
    assert!(text.contains(key), "{text}");
}

/// `[server] http_cpus` pins the REST API's threads: in /proc each HTTP thread may run only on
/// its CPU, and lookups are answered.
#[test]
fn server_http_cpus_pin_the_http_threads() {
    fn allowed(status: &str) -> String {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
            .expect("Cpus_allowed_list in /proc status")
            .trim()
            .to_string()
    }
    // The first CPU this test may use (a container's cpuset need not include CPU 0).
    let first: usize = allowed(&std::fs::read_to_string("/proc/self/status").unwrap())
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hbidx.toml");
    let example = include_str!("../deploy/config/hbidx.toml");
    std::fs::write(
        &config,
        format!("{example}\n[server]\nhttp_cpus = [{first}]\n"),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let server = Server::start(
        &["--config", config, "serve"],
        &dir.path().join("data"),
        &[],
    );
    let (status, _) = get(&server.url("/v1/tables/user/rows?phone=13800138000"));
    assert_eq!(status, 200);
    let tasks = format!("/proc/{}/task", server.child.id());
    let pinned: Vec<String> = std::fs::read_dir(&tasks)
        .unwrap()
        .map(|task| task.unwrap().path())
        .filter(|task| {
            std::fs::read_to_string(task.join("comm"))
                .is_ok_and(|name| name.starts_with("hbidx-http-"))
        })
        .map(|task| allowed(&std::fs::read_to_string(task.join("status")).unwrap()))
        .collect();
    // One thread per listed CPU, on that CPU only.
    assert_eq!(pinned, vec![first.to_string()]);
    // The "serving" line goes through the log thread, the "listening on" line the tests wait
    // for straight to stderr: the first can arrive after the second.
    let logged = format!("http_cpus=[{first}]");
    eventually(
        "the serving line with http_cpus",
        Duration::from_secs(10),
        || server.log_text().contains(&logged).then_some(()),
    );
    server.stop();

    serve_refuses(
        dir.path(),
        &format!("http_cpus = [{first}, {first}]"),
        "server.http_cpus",
    );
}

#[test]
fn transparent_huge_pages_are_off_in_the_server_process() {
    // src/main.rs turns them off first thing: mimalloc's purged arena pieces were re-faulted as
    // fresh 2 MiB pages, and zeroing them was 16% of the Kafka indexing profile.
    let dir = tempfile::tempdir().unwrap();
    let server = serve(&dir.path().join("data"));
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    let line = status
        .lines()
        .find(|line| line.starts_with("THP_enabled:"))
        .unwrap_or_else(|| panic!("no THP_enabled in /proc/PID/status:\n{status}"));
    assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
    server.stop();
}

fn sorted(mut keys: Vec<String>) -> Vec<String> {
    keys.sort();
    keys
}

/// An index built for another schema (here: the config gains a `city` field; an older hbidx's
/// document layout is the same case) can't be opened. With the rows in the embedded store the
/// server rebuilds it from them at start, resumes the change feed from the old checkpoint, and
/// says so in its log; a restart after that opens the rebuilt index as is.
#[test]
fn an_index_built_for_another_schema_is_rebuilt_from_the_store_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let rows = server.url("/v1/tables/user/rows");
    for (key, phone, seq) in [("u1", "13800138000", 1), ("u2", "13900001111", 2)] {
        let body = person("张三", phone, &idcard("19900307", seq));
        let (status, body) = put(&format!("{rows}/{key}?wait=indexed"), &body);
        assert_eq!(status, 200, "{body}");
    }
    // A row deleted before the rebuild stays deleted.
    let (status, _) = delete(&format!("{rows}/u2?wait=indexed"));
    assert_eq!(status, 200);
    server.stop();

    let config = dir.path().join("with-city.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[[tables.fields]]\nname = \"city\"\nkind = \"keyword\"\ncolumn = \"info:city\"\n",
            include_str!("../deploy/config/hbidx.toml")
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let server = Server::start(&["--config", config, "serve"], dir.path(), &[]);
    assert!(
        server
            .log_text()
            .contains("rebuilt the index from the store"),
        "{}",
        server.log_text()
    );
    let rows = server.url("/v1/tables/user/rows");
    // Only a rebuild from the rows can know u1's city: the old index had no such field.
    assert_eq!(keys(&get(&format!("{rows}?city=北京")).1), vec!["u1"]);
    assert_eq!(
        keys(&get(&format!("{rows}?phone=13800138000")).1),
        vec!["u1"]
    );
    assert!(keys(&get(&format!("{rows}?phone=13900001111")).1).is_empty());
    let (_, status) = get(&server.url("/v1/indexer/status"));
    assert_eq!(status["tables"]["user"]["rows"], 1, "{status}");
    // The live indexer runs on the rebuilt index.
    let (status, body) = put(
        &format!("{rows}/u3?wait=indexed"),
        &person("李四", "13700008000", &idcard("19851111", 3)),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        sorted(keys(&get(&format!("{rows}?city=北京")).1)),
        ["u1", "u3"]
    );
    server.stop();

    let server = Server::start(&["--config", config, "serve"], dir.path(), &[]);
    assert!(
        !server.log_text().contains("rebuilding"),
        "{}",
        server.log_text()
    );
    let rows = server.url("/v1/tables/user/rows");
    assert_eq!(
        sorted(keys(&get(&format!("{rows}?city=北京")).1)),
        ["u1", "u3"]
    );
}

/// Lookups that walk many matches run off the HTTP threads: while 8 connections send surname
/// lookups in pinyin (`zhang`, a prefix range over thousands of distinct spellings: the most
/// costly walk within the bound), `/healthz` and an exact phone lookup are answered far sooner
/// than those lookups. Compared as ratios of medians measured
/// side by side, so a slow or busy machine can't fail it; run inline on the HTTP threads, the
/// probes wait behind the lookups and the ratio is about 1.
#[test]
fn broad_lookups_run_off_the_http_threads() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&["demo", "--rows", "100000"], dir.path(), &[]);
    let broad = server
        .url("/v1/tables/user/rows?name=zhang&match=pinyin_prefix&limit=1000&index_only=true");
    let (status, body) = get(&broad);
    assert_eq!(
        (status, body["count"].as_u64()),
        (200, Some(1000)),
        "{body}"
    );
    let (_, one) = get(&server.url("/v1/tables/user/rows?name=%E5%BC%A0&match=prefix&limit=1"));
    let phone = one["rows"][0]["cells"]["info:phone"]
        .as_str()
        .unwrap()
        .to_string();
    let stop = AtomicBool::new(false);
    let median = |mut times: Vec<Duration>| {
        times.sort();
        times[times.len() / 2]
    };
    let (broad_median, health_median, phone_median) = std::thread::scope(|scope| {
        let flooders: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    let client = util::client();
                    let mut times = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let started = Instant::now();
                        let response = client.get(&broad).send().expect("lookup");
                        assert_eq!(response.status(), 200);
                        response.bytes().unwrap();
                        times.push(started.elapsed());
                    }
                    times
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let client = util::client();
        let (mut health, mut phones) = (Vec::new(), Vec::new());
        for _ in 0..100 {
            let started = Instant::now();
            assert_eq!(
                client.get(server.url("/healthz")).send().unwrap().status(),
                200
            );
            health.push(started.elapsed());
            let started = Instant::now();
            let (status, body) = send(client.get(server.url(&format!(
                "/v1/tables/user/rows?phone={phone}&index_only=true"
            ))));
            assert_eq!((status, body["count"].as_u64()), (200, Some(1)), "{body}");
            phones.push(started.elapsed());
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
        let broad: Vec<Duration> = flooders
            .into_iter()
            .flat_map(|f| f.join().unwrap())
            .collect();
        assert!(broad.len() >= 20, "{} broad lookups", broad.len());
        (median(broad), median(health), median(phones))
    });
    eprintln!(
        "medians: /healthz {health_median:?}, phone {phone_median:?}, broad {broad_median:?}"
    );
    assert!(
        health_median * 5 < broad_median && phone_median * 5 < broad_median,
        "/healthz median {health_median:?} and phone lookup median {phone_median:?} vs broad \
         lookup median {broad_median:?}"
    );
    // One batch is bounded in rows as a whole: 1000 prefixes at 1000 rows each is refused,
    // naming the parameter to lower.
    let values: Vec<String> = (0..1000).map(|_| "张".to_string()).collect();
    let (status, body) = post(
        &server.url("/v1/tables/user/rows:batch-lookup"),
        &json!({"field": "name", "match": "prefix", "values": values, "limit_per_value": 1000}),
    );
    assert_eq!(
        (status, &body["error"]["field"]),
        (400, &json!("limit_per_value")),
        "{body}"
    );
    let (status, body) = post(
        &server.url("/v1/tables/user/rows:batch-lookup"),
        &json!({"field": "name", "match": "prefix", "values": ["张", "李"], "limit_per_value": 1000, "index_only": true}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["count"], 2000, "{body}");
}

/// A lookup walks at most `[server] max_lookup_matches` matches, whatever the size of the
/// table: two demos in one run, 4,000 and 40,000 people, under a bound of 1,000. A surname
/// prefix (~7% of people) is answered at the small size, pages included, and refused at the
/// large one with a 400 naming the field; beside a phone tail it is answered at both; a batch's
/// values share `max_batch_matches`.
#[test]
fn lookups_are_bounded_at_two_table_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bounded.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[server]\nmax_lookup_matches = 1000\nmax_batch_matches = 1000\n",
            include_str!("../deploy/config/hbidx.toml")
        ),
    )
    .unwrap();
    let config = config.to_string_lossy().to_string();
    let zhang = "name=%E5%BC%A0&match=prefix";
    for rows in [4_000, 40_000] {
        let data = dir.path().join(format!("d{rows}"));
        let server = Server::start(
            &["--config", &config, "demo", "--rows", &rows.to_string()],
            &data,
            &[],
        );
        let lookup = |query: &str| get(&server.url(&format!("/v1/tables/user/rows?{query}")));
        let (status, body) = lookup(&format!("{zhang}&limit=1000&index_only=true"));
        if rows == 4_000 {
            assert_eq!(status, 200, "{body}");
            let all: Vec<Value> = body["rows"].as_array().unwrap().clone();
            assert!((100..1000).contains(&all.len()), "{}", all.len());
            // Paged 37 at a time through sealed cursors: the same rows in the same order.
            let mut paged = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                let after = cursor
                    .as_ref()
                    .map_or(String::new(), |c| format!("&cursor={c}"));
                let (status, page) = lookup(&format!("{zhang}&limit=37&index_only=true{after}"));
                assert_eq!(status, 200, "{page}");
                paged.extend(page["rows"].as_array().unwrap().iter().cloned());
                match page["next_cursor"].as_str() {
                    Some(next) => cursor = Some(next.to_string()),
                    None => break,
                }
            }
            assert_eq!(paged, all);
            // Six surnames' rows together are more than one batch walks: the batch is refused
            // at the value that overdraws its bound; one surname alone is answered.
            let batch = server.url("/v1/tables/user/rows:batch-lookup");
            let surnames = ["王", "李", "张", "刘", "陈", "杨"];
            let (status, refused) = post(
                &batch,
                &json!({"field": "name", "match": "prefix", "values": surnames, "limit_per_value": 1}),
            );
            assert_eq!(status, 400, "{refused}");
            let field = refused["error"]["field"].as_str().unwrap();
            assert!(
                field.starts_with("values[") && field != "values[0]",
                "{refused}"
            );
            assert!(
                refused["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("max_batch_matches"),
                "{refused}"
            );
            let (status, alone) = post(
                &batch,
                &json!({"field": "name", "match": "prefix", "values": ["王"], "limit_per_value": 1}),
            );
            assert_eq!(status, 200, "{alone}");
        } else {
            assert_eq!(status, 400, "{body}");
            assert_eq!(body["error"]["field"], "name", "{body}");
            let message = body["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("more than 1000 rows") && message.contains("max_lookup_matches"),
                "{message}"
            );
        }
        // Beside a phone tail the surname is checked on the tail's few rows, so the lookup
        // is answered at both sizes: every row of 张三's tail that starts with 张, and only
        // those.
        let (status, one) = lookup("name=%E5%BC%A0%E4%B8%89&limit=1&columns=info:phone");
        assert_eq!(status, 200, "{one}");
        let phone = one["rows"][0]["cells"]["info:phone"].as_str().unwrap();
        let digits: String = phone.chars().filter(char::is_ascii_digit).collect();
        let tail = &digits[digits.len() - 4..];
        let (status, found) = lookup(&format!(
            "{zhang}&phone_suffix={tail}&limit=100&columns=info:name,info:phone"
        ));
        assert_eq!(status, 200, "{found}");
        let found = found["rows"].as_array().unwrap();
        assert!(found.iter().any(|row| row["key"] == one["rows"][0]["key"]));
        for row in found {
            let name = row["cells"]["info:name"].as_str().unwrap();
            let phone: String = row["cells"]["info:phone"]
                .as_str()
                .unwrap()
                .chars()
                .filter(char::is_ascii_digit)
                .collect();
            assert!(name.starts_with('张') && phone.ends_with(tail), "{row}");
        }
        let (status, tail_only) =
            lookup(&format!("phone_suffix={tail}&limit=1000&columns=info:name"));
        assert_eq!(status, 200, "{tail_only}");
        let expected = tail_only["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|row| {
                row["cells"]["info:name"]
                    .as_str()
                    .unwrap()
                    .starts_with('张')
            })
            .count();
        assert_eq!(found.len(), expected);
    }
}
