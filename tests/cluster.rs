//! A sharded index tier (`[cluster]`), end to end over real sockets: the "HBase" stand-in (a
//! second hbidx serving HBase's Thrift1 API), a Kafka topic on the real broker, one unsharded
//! instance, and a tier of three shards with a second replica of shard 1, all on loopback.
//!
//! The same rows (in HBase) and the same events (in the topic) reach both; every kind of lookup
//! through any instance of the tier must answer exactly what the unsharded instance answers.
//! Then replicas die: one replica of a shard changes nothing; both give 503 naming the shard,
//! and `partial=true` the other shards' rows with `missing_shards`.

mod util;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use hbidx_demo::people::{PeopleGen, Person};
use pinyin::ToPinyin;
use serde_json::{Value, json};
use util::kafka::{Producer, create_topic, json_source, unique_topic};
use util::{
    Server, TEST_CLUSTER_KEY, client, client_with_key, eventually, free_port, get, post, put, send,
    start_hbase_standin,
};

/// Rows in HBase and events in the topic.
const ROWS: usize = 1500;

fn example() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/config/hbidx.toml"))
        .unwrap()
}

/// The example table with its rows in HBase at `thrift`, fed by `topic`, plus `extra`.
fn config(dir: &Path, name: &str, thrift: &str, topic: &str, extra: &str) -> String {
    // Covered `info:city`: lookups asking only for kept columns are answered from the index,
    // which on a tier means from the shards' kept rows.
    let text = format!(
        "{}\n[store]\nkind = \"hbase\"\nthrift = \"{thrift}\"\ntimeout_ms = 3000\n\n{}\n{extra}",
        example().replace("# covered = [\"info:city\"]", "covered = [\"info:city\"]"),
        json_source(topic, "user", "json"),
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

/// The pinyin spelling of a Chinese name; empty for a Latin one.
fn full_pinyin(name: &str) -> String {
    if !name.chars().all(|c| c.to_pinyin().is_some()) {
        return String::new();
    }
    name.chars()
        .filter_map(|c| c.to_pinyin().map(|p| p.plain().to_string()))
        .collect()
}

fn initials(name: &str) -> String {
    if !name.chars().all(|c| c.to_pinyin().is_some()) {
        return String::new();
    }
    name.chars()
        .filter_map(|c| c.to_pinyin().map(|p| p.first_letter().to_string()))
        .collect()
}

/// A response without its timing, for comparison; a cursor only as "there is one" (each is
/// sealed with a fresh nonce, and the one instance's key is not the tier's).
fn comparable(mut body: Value) -> Value {
    if let Some(object) = body.as_object_mut() {
        object.remove("took_ms");
        if let Some(cursor) = object.get_mut("next_cursor").filter(|c| c.is_string()) {
            *cursor = Value::from("(sealed)");
        }
    }
    body
}

struct Tier {
    single: Server,
    /// (shard, replica, server), shard 1 twice.
    nodes: Vec<(usize, usize, Server)>,
}

impl Tier {
    fn node(&self, shard: usize, replica: usize) -> &Server {
        &self
            .nodes
            .iter()
            .find(|(s, r, _)| *s == shard && *r == replica)
            .expect("a node of the tier")
            .2
    }
}

/// Every lookup of `queries` through `through` (round robin) answers what the unsharded
/// instance answers; returns how many answers had rows.
fn same_answers(tier: &Tier, through: &[&Server], queries: &[String]) -> usize {
    let mut with_rows = 0;
    for (i, query) in queries.iter().enumerate() {
        let node = through[i % through.len()];
        let (status, expected) = get(&tier.single.url(&format!("/v1/tables/user/rows?{query}")));
        assert_eq!(status, 200, "{query}: {expected}");
        let (status, got) = get(&node.url(&format!("/v1/tables/user/rows?{query}")));
        assert_eq!(status, 200, "{query} through {}: {got}", node.base);
        let (expected, got) = (comparable(expected), comparable(got));
        assert_eq!(got, expected, "{query} through {}", node.base);
        if expected["count"].as_u64().unwrap_or(0) > 0 {
            with_rows += 1;
        }
    }
    with_rows
}

/// Follows `next_cursor` from `query` on both sides, page by page, each side with its own
/// cursors (sealed, so never equal); the tier's pages go through the instances of `through` in
/// turn, so each opens a cursor another sealed. Returns the pages read.
fn same_pages(
    tier: &Tier,
    through: &[&Server],
    start: usize,
    query: &str,
    max_pages: usize,
) -> usize {
    let paged = |cursor: &Option<String>| match cursor {
        Some(cursor) => format!("{query}&cursor={cursor}"),
        None => query.to_string(),
    };
    let without_cursor = |mut body: Value| {
        let cursor = body.as_object_mut().unwrap().remove("next_cursor");
        (
            comparable(body),
            cursor.and_then(|c| c.as_str().map(str::to_string)),
        )
    };
    let (mut single_cursor, mut tier_cursor) = (None, None);
    for page in 0..max_pages {
        let node = through[(start + page) % through.len()];
        let (_, expected) = get(&tier
            .single
            .url(&format!("/v1/tables/user/rows?{}", paged(&single_cursor))));
        let (status, got) =
            get(&node.url(&format!("/v1/tables/user/rows?{}", paged(&tier_cursor))));
        assert_eq!(
            status, 200,
            "{query} page {page} through {}: {got}",
            node.base
        );
        let ((expected, next_single), (got, next_tier)) =
            (without_cursor(expected), without_cursor(got));
        assert_eq!(got, expected, "{query} (page {page})");
        assert_eq!(
            next_single.is_some(),
            next_tier.is_some(),
            "{query} (page {page})"
        );
        if next_single.is_none() {
            return page + 1;
        }
        (single_cursor, tier_cursor) = (next_single, next_tier);
    }
    max_pages
}

fn same_batches(tier: &Tier, through: &[&Server], bodies: &[Value]) {
    for (i, body) in bodies.iter().enumerate() {
        let node = through[i % through.len()];
        let url = "/v1/tables/user/rows:batch-lookup";
        let (status, expected) = post(&tier.single.url(url), body);
        assert_eq!(status, 200, "{body}: {expected}");
        let (status, got) = post(&node.url(url), body);
        assert_eq!(status, 200, "{body} through {}: {got}", node.base);
        assert_eq!(comparable(got), comparable(expected), "{body}");
    }
}

fn lookups(people: &[Person]) -> Vec<String> {
    let mut queries = Vec::new();
    let mut surnames: Vec<String> = people
        .iter()
        .filter_map(|p| p.name.chars().next().map(String::from))
        .collect();
    surnames.sort();
    surnames.dedup();
    for (i, person) in people.iter().enumerate().step_by(3) {
        let tail = &person.phone[person.phone.len() - 4..];
        let surname: String = person.name.chars().take(1).collect();
        let given: String = person.name.chars().skip(1).take(1).collect();
        queries.push(format!("phone={}", person.phone));
        queries.push(format!("idcard={}", person.idcard));
        queries.push(format!("phone_suffix={tail}&limit=7"));
        queries.push(format!("name={}", person.name));
        let pinyin = full_pinyin(&person.name);
        // (ü readings, as in 吕 lü, can't be asked for: pinyin lookups take a-z only.)
        if !pinyin.is_empty() && pinyin.is_ascii() {
            queries.push(format!("name={pinyin}&match=pinyin"));
        }
        if i % 2 == 0 {
            let initials = initials(&person.name);
            if !initials.is_empty() {
                queries.push(format!("name={initials}&match=pinyin&limit=5"));
            }
            queries.push(format!("name={given}&match=partial&limit=9"));
            queries.push(format!("name={surname}&match=prefix&phone_suffix={tail}"));
            queries.push(format!(
                "phone={}&columns=info:phone,info:city",
                person.phone
            ));
            queries.push(format!(
                "name={surname}&match=prefix&columns=info:city&limit=11"
            ));
            queries.push(format!(
                "name={surname}&match=prefix&index_only=true&limit=13"
            ));
            queries.push(format!(
                "phone_suffix={tail}&consistency=store&columns=info:city"
            ));
        }
    }
    for surname in &surnames {
        queries.push(format!("name={surname}&match=prefix&limit=1000"));
    }
    queries
}

fn batches(people: &[Person]) -> Vec<Value> {
    let mut bodies = Vec::new();
    for chunk in people.chunks(60).take(10) {
        let phones: Vec<&str> = chunk.iter().map(|p| p.phone.as_str()).collect();
        bodies.push(json!({"field": "phone", "values": phones}));
        let surnames: Vec<String> = chunk
            .iter()
            .take(12)
            .map(|p| p.name.chars().take(1).collect())
            .collect();
        bodies.push(
            json!({"field": "name", "match": "prefix", "values": surnames, "limit_per_value": 7}),
        );
        let idcards: Vec<&str> = chunk.iter().map(|p| p.idcard.as_str()).collect();
        bodies.push(json!({"field": "idcard", "values": idcards, "columns": ["info:city"]}));
        let mixed: Vec<&str> = chunk
            .iter()
            .take(5)
            .map(|p| p.phone.as_str())
            .chain(["not a phone"])
            .collect();
        bodies.push(json!({"field": "phone", "values": mixed, "index_only": true}));
    }
    bodies
}

#[test]
#[ignore = "needs a Kafka broker at HBIDX_TEST_KAFKA: scripts/test.sh starts one and runs it"]
fn a_sharded_tier_answers_like_one_instance_and_names_a_missing_shard() {
    let dir = tempfile::tempdir().unwrap();
    let thrift = format!("127.0.0.1:{}", free_port());
    let hbase = start_hbase_standin(dir.path(), &example(), &dir.path().join("hbase"), &thrift);

    // The rows, in "HBase" and as events in the topic.
    let people: Vec<Person> = PeopleGen::new(25).take(ROWS).collect();
    let topic = unique_topic("cluster");
    create_topic(&topic, 2);
    let producer = Producer::fast(&topic);
    let ts = 1_700_000_000_000i64;
    for person in &people {
        let cells = json!({
            "info:phone": person.phone, "info:idcard": person.idcard,
            "info:name": person.name, "info:city": person.city,
        });
        let (status, body) = put(
            &hbase.url(&format!("/v1/tables/user/rows/{}", person.uid)),
            &json!({"cells": cells, "ts": ts}),
        );
        assert_eq!(status, 200, "{body}");
        let event =
            json!({"table": "user", "key": person.uid, "op": "put", "ts": ts, "cells": cells});
        producer.send(person.uid.as_bytes(), &serde_json::to_vec(&event).unwrap());
    }
    producer.flush();

    // One unsharded instance, and the tier: shards 0, 1 (two replicas) and 2.
    let single_config = config(dir.path(), "single", &thrift, &topic, "");
    let single = Server::start(
        &["--config", &single_config, "serve"],
        &dir.path().join("single"),
        &[],
    );
    let layout = [(0, 0), (1, 0), (1, 1), (2, 0)];
    let addrs: Vec<String> = layout
        .iter()
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let shard_urls = |shard: usize| -> Vec<String> {
        layout
            .iter()
            .zip(&addrs)
            .filter(|((s, _), _)| *s == shard)
            .map(|(_, addr)| format!("\"http://{addr}\""))
            .collect()
    };
    let cluster_section = format!(
        "[cluster]\ntimeout_ms = 2000\nshards = [[{}], [{}], [{}]]\n",
        shard_urls(0).join(", "),
        shard_urls(1).join(", "),
        shard_urls(2).join(", ")
    );
    let tier_config = config(dir.path(), "tier", &thrift, &topic, &cluster_section);
    let layout_config =
        hbidx_schema::config::parse_config(&std::fs::read_to_string(&tier_config).unwrap())
            .unwrap()
            .cluster
            .unwrap();
    let nodes: Vec<(usize, usize, Server)> = layout
        .iter()
        .zip(&addrs)
        .map(|(&(shard, replica), addr)| {
            let server = Server::start_on(
                addr,
                &[
                    "--config",
                    &tier_config,
                    "--shard",
                    &shard.to_string(),
                    "--replica",
                    &replica.to_string(),
                    "serve",
                ],
                &dir.path().join(format!("shard{shard}-{replica}")),
                &[],
            );
            (shard, replica, server)
        })
        .collect();
    let tier = Tier { single, nodes };

    // Each shard indexes its own rows only; together, every row once.
    let own_rows = |server: &Server| -> u64 {
        let (_, status) = get(&server.url("/v1/indexer/status"));
        status["tables"]["user"]["rows"].as_u64().unwrap_or(0)
    };
    let mut expected_per_shard = [0u64; 3];
    for person in &people {
        let rowkey = hbidx_schema::config::parse_config(&example())
            .unwrap()
            .tables[0]
            .rowkey
            .encode(&person.uid)
            .unwrap();
        expected_per_shard[layout_config.shard_of("user", &rowkey)] += 1;
    }
    assert!(
        expected_per_shard.iter().all(|&n| n > 100),
        "{expected_per_shard:?}"
    );
    eventually(
        "every instance indexed the topic",
        Duration::from_secs(120),
        || {
            (own_rows(&tier.single) == ROWS as u64
                && tier
                    .nodes
                    .iter()
                    .all(|(shard, _, server)| own_rows(server) == expected_per_shard[*shard])
                // And every instance sees every replica ready: peers that weren't listening
                // yet when an instance started are probed again within a second.
                && tier.nodes.iter().all(|(_, _, server)| {
                    let (_, summary) = get(&server.url("/v1/ops/summary"));
                    summary["cluster"]["shards"] == json!([[1, 1], [2, 2], [1, 1]])
                }))
            .then_some(())
        },
    );

    // The internal routes take the peers' key (HBIDX_CLUSTER_KEY, the cluster scope alone)
    // and no other: the client key that has every other scope gets 403.
    let node = tier.node(0, 0);
    let status = node.url("/v1/internal/status");
    let (code, body) = send(client().get(&status));
    assert_eq!(code, 403, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"cluster\""),
        "{body}"
    );
    let (code, body) = send(client_with_key(Some(TEST_CLUSTER_KEY)).get(&status));
    assert_eq!((code, &body["shard"]), (200, &json!(0)), "{body}");
    // And the peers' key is a key for nothing else.
    let (code, _) = send(
        client_with_key(Some(TEST_CLUSTER_KEY))
            .get(node.url("/v1/tables/user/rows?phone=13800138000")),
    );
    assert_eq!(code, 403);

    // A holder of the peers' key can't plant an index entry: a forwarded mutation is checked
    // like a PUT (timestamps) and then indexed as the store has the row, not as sent. A row of
    // shard 0 that HBase doesn't have, with a phone nobody has:
    let example_config = hbidx_schema::config::parse_config(&example()).unwrap();
    let planted = (0..)
        .map(|i| format!("planted{i}"))
        .map(|uid| example_config.tables[0].rowkey.encode(&uid).unwrap())
        .find(|rowkey| layout_config.shard_of("user", rowkey) == 0)
        .unwrap();
    let apply = node.url("/v1/internal/tables/user/apply?wait=indexed");
    let mutation = |ts: i64| {
        json!([{
            "table": "user",
            "rowkey": planted,
            "ops": [{"Put": {"column": "info:phone", "ts": ts, "value": b"13399990000".to_vec()}}]
        }])
    };
    let peer = client_with_key(Some(TEST_CLUSTER_KEY));
    let far_future = 4_102_444_800_000i64; // 2100-01-01
    let (code, body) = send(peer.post(&apply).json(&mutation(far_future)));
    assert_eq!(
        (code, &body["error"]["field"]),
        (400, &json!("[0].ops[0].ts")),
        "{body}"
    );
    let (code, body) = send(peer.post(&apply).json(&mutation(1_700_000_000_000)));
    assert_eq!(code, 200, "{body}");
    for (_, _, server) in &tier.nodes {
        // Answered from the index (covered column): the store would hide a planted hit.
        let (_, found) =
            get(&server.url("/v1/tables/user/rows?phone=13399990000&columns=info:city"));
        assert_eq!(found["count"], 0, "a planted row was indexed: {found}");
    }
    // Both internal calls are audited, by the peers' key id.
    eventually(
        "the internal calls' audit lines",
        Duration::from_secs(10),
        || {
            let log = node.log_text();
            (log.contains("internal_apply") && log.contains("cluster-peers")).then_some(())
        },
    );

    // Every kind of lookup, through every instance of the tier.
    let all: Vec<&Server> = tier.nodes.iter().map(|(_, _, server)| server).collect();
    let queries = lookups(&people);
    let with_rows = same_answers(&tier, &all, &queries);
    assert!(queries.len() >= 2000, "{} lookups", queries.len());
    assert!(
        with_rows * 2 > queries.len(),
        "{with_rows} of {} found rows",
        queries.len()
    );
    let mut pages = 0;
    for (i, surname) in ["王", "李", "张", "刘", "陈"].iter().enumerate() {
        for query in [
            format!("name={surname}&match=prefix&limit=3"),
            format!("name={surname}&match=prefix&limit=17&columns=info:city"),
        ] {
            pages += same_pages(&tier, &all, i, &query, 40);
        }
    }
    assert!(pages > 50, "{pages} pages");
    let bodies = batches(&people);
    same_batches(&tier, &all, &bodies);

    // /v1/cluster shows the layout and every replica's rows.
    let (status, cluster) = get(&tier.node(0, 0).url("/v1/cluster"));
    assert_eq!(status, 200, "{cluster}");
    assert_eq!(
        cluster["shards"].as_array().map(Vec::len),
        Some(3),
        "{cluster}"
    );
    for (shard, expected) in expected_per_shard.iter().enumerate() {
        for replica in cluster["shards"][shard]["replicas"].as_array().unwrap() {
            assert_eq!(replica["tables"]["user"]["rows"], *expected, "{cluster}");
            assert_eq!(replica["ready"], true, "{cluster}");
        }
    }

    // The dashboard's summary names this instance's shard and the replicas ready per shard.
    let (_, summary) = get(&tier.node(1, 1).url("/v1/ops/summary"));
    assert_eq!(
        summary["cluster"],
        json!({"shard": 1, "replica": 1, "shards": [[1, 1], [2, 2], [1, 1]]}),
        "{summary}"
    );

    // The tier's metrics, which the Grafana dashboard charts (tests/dashboard.rs runs no tier).
    let (status, metrics) = util::get_text(&tier.node(0, 0).url("/metrics"));
    assert_eq!(status, 200);
    for name in [
        "hbidx_shard_calls_total{",
        "hbidx_shard_call_seconds_bucket{",
        "hbidx_cluster_replicas_ready{",
        "hbidx_indexer_foreign_skipped_total{",
    ] {
        assert!(metrics.contains(name), "{name} not exported:\n{metrics}");
    }

    // Read-your-writes across the tier: written through shard 0, for rows of every shard,
    // found at once through the others. The unsharded instance gets the same writes, so the
    // answers below stay comparable.
    let mut written: BTreeMap<usize, String> = BTreeMap::new();
    for n in 0.. {
        let uid = format!("w{n:07}");
        let rowkey = hbidx_schema::config::parse_config(&example())
            .unwrap()
            .tables[0]
            .rowkey
            .encode(&uid)
            .unwrap();
        written
            .entry(layout_config.shard_of("user", &rowkey))
            .or_insert(uid);
        if written.len() == 3 {
            break;
        }
    }
    for (shard, uid) in &written {
        let phone = format!("1370000000{shard}");
        let write = json!({"cells": {"info:phone": phone, "info:name": "新写"}, "ts": ts + 1});
        for server in [tier.node(0, 0), &tier.single] {
            let (status, body) = put(
                &server.url(&format!("/v1/tables/user/rows/{uid}?wait=indexed")),
                &write,
            );
            assert_eq!(status, 200, "{body}");
        }
        for server in [tier.node(1, 1), tier.node(2, 0), tier.node(1, 0)] {
            let (_, found) = get(&server.url(&format!("/v1/tables/user/rows?phone={phone}")));
            assert_eq!(
                found["count"], 1,
                "shard {shard} row through {}: {found}",
                server.base
            );
        }
    }

    // One replica of shard 1 gone: no answer changes.
    let Tier { single, mut nodes } = tier;
    let at = nodes
        .iter()
        .position(|(s, r, _)| (*s, *r) == (1, 0))
        .unwrap();
    nodes.remove(at).2.kill9();
    let tier = Tier { single, nodes };
    let others: Vec<&Server> = [tier.node(0, 0), tier.node(2, 0), tier.node(1, 1)].to_vec();
    let sample: Vec<String> = queries.iter().step_by(5).cloned().collect();
    same_answers(&tier, &others, &sample);
    same_batches(&tier, &others, &bodies[..8]);

    // Both gone: 503 naming shard 1; partial=true gives the other shards' rows.
    let Tier { single, mut nodes } = tier;
    let at = nodes
        .iter()
        .position(|(s, r, _)| (*s, *r) == (1, 1))
        .unwrap();
    nodes.remove(at).2.kill9();
    let tier = Tier { single, nodes };
    let node = tier.node(0, 0);
    let query = "name=王&match=prefix&limit=1000&columns=info:name";
    let (status, body) = get(&node.url(&format!("/v1/tables/user/rows?{query}")));
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "shard_unavailable", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("shard 1 is unavailable"), "{message}");
    // The shard and what failed, never a peer's address or reply.
    assert!(
        !message.contains("127.0.0.1") && !message.contains("http://"),
        "{message}"
    );
    let (status, partial) = get(&node.url(&format!("/v1/tables/user/rows?{query}&partial=true")));
    assert_eq!(status, 200, "{partial}");
    assert_eq!(partial["missing_shards"], json!([1]), "{partial}");
    let (_, whole) = get(&tier.single.url(&format!("/v1/tables/user/rows?{query}")));
    let outside_shard_1: Vec<&Value> = whole["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| {
            let rowkey = row["rowkey"].as_str().unwrap();
            layout_config.shard_of("user", rowkey.as_bytes()) != 1
        })
        .collect();
    assert!(
        !outside_shard_1.is_empty()
            && outside_shard_1.len() < whole["rows"].as_array().unwrap().len()
    );
    assert_eq!(
        partial["rows"]
            .as_array()
            .unwrap()
            .iter()
            .collect::<Vec<_>>(),
        outside_shard_1,
        "{partial}"
    );
    // A batch the same way.
    let batch = json!({"field": "name", "match": "prefix", "values": ["王", "李"], "limit_per_value": 1000});
    let (status, body) = post(&node.url("/v1/tables/user/rows:batch-lookup"), &batch);
    assert_eq!(status, 503, "{body}");
    let mut partial_batch = batch.clone();
    partial_batch["partial"] = json!(true);
    let (status, body) = post(
        &node.url("/v1/tables/user/rows:batch-lookup"),
        &partial_batch,
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["missing_shards"], json!([1]), "{body}");
    // Lookups that need only other shards still answer in full: a cursor past shard 1,
    // sealed as the tier seals them (a key derived from the peers' key), is the start of
    // shard 2, and every hit after it is in shard 2.
    let start_of_2 = layout_config.range("user", 2).start;
    let cursor = hbidx_query::CursorSeal::from_secret(
        TEST_CLUSTER_KEY,
        hbidx_query::CursorKeySource::Cluster,
    )
    .seal("user", &start_of_2);
    let query = "name=李&match=prefix&limit=1000";
    let (status, body) = get(&node.url(&format!("/v1/tables/user/rows?{query}&cursor={cursor}")));
    assert_eq!(status, 200, "{body}");
    let (_, whole) = get(&tier.single.url(&format!("/v1/tables/user/rows?{query}")));
    let after: Vec<&Value> = whole["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|row| row["rowkey"].as_str().unwrap().as_bytes() > start_of_2.as_slice())
        .collect();
    assert!(!after.is_empty(), "{whole}");
    assert_eq!(
        body["rows"].as_array().unwrap().iter().collect::<Vec<_>>(),
        after
    );
    drop(hbase);
}
