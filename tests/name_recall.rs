//! Names as people type them (issue 37), over the real REST API of `hbidx serve`: the recall
//! set of tests/recall_set/ (every way of typing each of a few thousand people must find that
//! person, and every answer must be a person the typed form really names), and the issue's own
//! table of lookups.

mod recall_set;
mod util;

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use recall_set::{Person, Typed};
use serde_json::json;
use util::{Server, client, send};

const PEOPLE: usize = 2400;

/// Every row a lookup answers, following `next_cursor`: (key, rowkey) in answer order.
fn lookup_all(
    client: &reqwest::blocking::Client,
    server: &Server,
    mode: &str,
    text: &str,
) -> Result<Vec<(String, String)>, String> {
    let url = server.url("/v1/tables/user/rows");
    let mut cursor: Option<String> = None;
    let mut rows = Vec::new();
    loop {
        let mut query = vec![
            ("name", text.to_string()),
            ("match", mode.to_string()),
            ("limit", "1000".to_string()),
            ("columns", "info:name".to_string()),
        ];
        if let Some(cursor) = cursor.take() {
            query.push(("cursor", cursor));
        }
        let (status, body) = send(client.get(&url).query(&query));
        if status != 200 {
            return Err(format!("{status} {body}"));
        }
        for row in body["rows"].as_array().into_iter().flatten() {
            rows.push((
                row["key"].as_str().unwrap_or_default().to_string(),
                row["rowkey"].as_str().unwrap_or_default().to_string(),
            ));
        }
        match body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => return Ok(rows),
        }
    }
}

/// Writes `people` through the API and waits until the index has them all.
fn load(client: &reqwest::blocking::Client, server: &Server, people: &[Person]) {
    let rows = server.url("/v1/tables/user/rows");
    for (i, person) in people.iter().enumerate() {
        let wait = if i + 1 == people.len() {
            "?wait=indexed"
        } else {
            ""
        };
        let (status, body) = send(
            client
                .put(format!("{rows}/{}{wait}", person.key))
                .json(&json!({"cells": {"info:name": person.stored}})),
        );
        assert_eq!(status, 200, "{}: {body}", person.key);
    }
}

#[test]
fn the_recall_set_reads_each_character_one_way() {
    // The oracle's own readings agree with the pinyin data, so a precision failure below is the
    // index's, not a reading the set forgot.
    let wrong = recall_set::check_readings();
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn every_way_of_typing_a_name_finds_it_and_nothing_it_does_not_name() {
    let people = recall_set::people(PEOPLE);
    assert!(people.len() >= 2000);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&["serve"], dir.path(), &[]);
    let client = client();
    load(&client, &server, &people);
    let by_key: HashMap<&str, &Person> = people.iter().map(|p| (p.key.as_str(), p)).collect();

    // Each distinct typed form is looked up once; people typed the same way share its answer.
    let mut wanted: BTreeMap<Typed, Vec<&str>> = BTreeMap::new();
    for person in &people {
        for typed in person.typed() {
            wanted.entry(typed).or_default().push(&person.key);
        }
    }
    let started = Instant::now();
    let mut missed: Vec<String> = Vec::new();
    let mut wrong: Vec<String> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    let mut checks = 0usize;
    for (typed, keys) in &wanted {
        let answer = match lookup_all(&client, &server, typed.mode.as_str(), &typed.text) {
            Ok(answer) => answer,
            Err(err) => {
                refused.push(format!("{typed:?}: {err}"));
                continue;
            }
        };
        let rowkeys: Vec<&String> = answer.iter().map(|(_, rowkey)| rowkey).collect();
        assert!(
            rowkeys.windows(2).all(|pair| pair[0] < pair[1]),
            "{typed:?}: not in rowkey order"
        );
        let found: Vec<&str> = answer.iter().map(|(key, _)| key.as_str()).collect();
        for key in keys {
            checks += 1;
            if !found.contains(key) {
                missed.push(format!(
                    "{typed:?} did not find {key} {:?}",
                    by_key[key].stored
                ));
            }
        }
        for key in &found {
            match by_key.get(key) {
                Some(person) if person.answers(typed) => {}
                Some(person) => wrong.push(format!("{typed:?} answered {key} {:?}", person.stored)),
                None => wrong.push(format!("{typed:?} answered unknown key {key}")),
            }
        }
    }
    let forms = wanted.len();
    eprintln!(
        "recall set: {} people, {forms} distinct typed forms, {checks} (person, form) pairs, {} s",
        people.len(),
        started.elapsed().as_secs()
    );
    let head = |list: &[String]| list.iter().take(30).cloned().collect::<Vec<_>>();
    assert!(
        refused.is_empty(),
        "{} refused: {:#?}",
        refused.len(),
        head(&refused)
    );
    assert!(
        missed.is_empty(),
        "recall: {} of {checks} missed: {:#?}",
        missed.len(),
        head(&missed)
    );
    assert!(
        wrong.is_empty(),
        "precision: {} wrong answers: {:#?}",
        wrong.len(),
        head(&wrong)
    );
    // Every kind of typing was tried (the set is not silently thinner than it claims).
    let kinds: std::collections::BTreeSet<&str> = wanted.keys().map(|typed| typed.how).collect();
    for how in [
        "characters",
        "traditional",
        "space after surname",
        "full pinyin",
        "tone marks",
        "tone numbers",
        "ü",
        "u:",
        "plain u after l or n",
        "initials",
        "pinyin prefix: surname",
        "pinyin prefix: surname and two letters",
        "pinyin prefix: surname, plain u",
        "extra spaces",
    ] {
        assert!(kinds.contains(how), "no typed form of kind {how:?}");
    }
    server.stop();
}

/// The rows of issue 37's table, as the issue wrote them.
#[test]
fn the_issue_37_table_over_rest() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&["serve"], dir.path(), &[]);
    let client = client();
    let rows = server.url("/v1/tables/user/rows");
    for (key, name) in [
        ("k01", "张三"),
        ("k02", "吕中"),
        ("k03", "路中"),
        ("k04", "詹天佑"),
        ("k05", "湛若水"),
        ("k06", "张三丰"),
        ("k07", "赵四"),
        ("k08", "張無忌"),
        ("k09", "John Smith"),
    ] {
        let (status, body) = send(
            client
                .put(format!("{rows}/{key}?wait=indexed"))
                .json(&json!({"cells": {"info:name": name}})),
        );
        assert_eq!(status, 200, "{body}");
    }
    let find = |name: &str, mode: &str| -> Vec<String> {
        let (status, body) =
            send(
                client
                    .get(&rows)
                    .query(&[("name", name), ("match", mode), ("limit", "100")]),
            );
        assert_eq!(status, 200, "{name} {mode}: {body}");
        let rowkeys: Vec<&str> = body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["rowkey"].as_str().unwrap())
            .collect();
        assert!(rowkeys.windows(2).all(|p| p[0] < p[1]), "rowkey order");
        let mut keys = util::keys(&body);
        keys.sort();
        keys
    };
    let zhang = ["k01", "k06", "k08"];
    for (name, mode, expected) in [
        ("zhangsan", "pinyin", &["k01"][..]),
        ("Zhang San", "pinyin", &["k01"]),
        ("ZHANGSAN", "pinyin", &["k01"]),
        ("lvzhong", "pinyin", &["k02"]),
        ("lüzhong", "pinyin", &["k02"]),
        ("lu:zhong", "pinyin", &["k02"]),
        ("luzhong", "pinyin", &["k02", "k03"]),
        ("zhang", "pinyin_prefix", &zhang),
        (
            "zhan",
            "pinyin_prefix",
            &["k01", "k04", "k05", "k06", "k08"],
        ),
        ("zhangs", "pinyin_prefix", &["k01", "k06"]),
        ("zhangsa", "pinyin_prefix", &["k01", "k06"]),
        ("lu", "pinyin_prefix", &["k02", "k03"]),
        ("lv", "pinyin_prefix", &["k02"]),
        ("zs", "pinyin_prefix", &[]),
        ("zhang", "pinyin", &[]),
        // 赵四 is zhao si: zs too.
        ("zs", "pinyin", &["k01", "k07"]),
        ("zwj", "pinyin", &["k08"]),
        ("張三", "exact", &["k01"]),
        ("张 三", "exact", &["k01"]),
        ("张无忌", "exact", &["k08"]),
        ("張", "prefix", &zhang),
        ("john  SMITH", "exact", &["k09"]),
    ] {
        assert_eq!(find(name, mode), expected, "name={name}&match={mode}");
    }
    // A row stored in traditional characters comes back as written.
    let (_, body) = send(
        client
            .get(&rows)
            .query(&[("name", "zhangwuji"), ("match", "pinyin")]),
    );
    assert_eq!(body["rows"][0]["cells"]["info:name"], "張無忌", "{body}");
    // Not pinyin: a 400 naming the field, as before.
    let (status, body) = send(
        client
            .get(&rows)
            .query(&[("name", "张三"), ("match", "pinyin")]),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("name"), "{body}");
    server.stop();
}
