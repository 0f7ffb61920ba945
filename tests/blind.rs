//! Blind fields (`blind = true`) end to end: the real binary, a real data dir. The index of a
//! blind phone or idcard holds keyed hashes, so no file under `<data_dir>/index` contains a
//! written phone, idcard or phone tail, while exact and suffix lookups answer what they answer
//! on a plain server given the same writes.

mod util;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use util::{Server, TEST_API_KEY, get, keys, post, put};

const BLIND_KEY: &str = "blind-test-key-0123456789abcdef0123456789";

/// Phones and idcards chosen to share no four characters, so a plain index's compressed files
/// still hold each of them verbatim: the grep below has something to find on the plain server.
const PEOPLE: &[(&str, &str, &str)] = &[
    ("u1", "张三", "13512345678"),
    ("u2", "李四", "15887654321"),
    ("u3", "王五", "18620246913"),
];

fn idcard(first17: &str) -> String {
    let check = hbidx_schema::normalize::idcard_check_digit(first17).expect("17 digits");
    format!("{first17}{check}")
}

/// An idcard per person, without four characters in common with each other or the phones.
fn idcards() -> Vec<String> {
    ["31010419770925", "44030520031108", "51070219661230"]
        .iter()
        .zip(["015", "037", "049"])
        .map(|(head, seq)| idcard(&format!("{head}{seq}")))
        .collect()
}

/// The example config with `info:city` covered and, for a blind server, `blind = true` on the
/// phone and idcard fields.
fn config(dir: &Path, blind: bool) -> PathBuf {
    let commented = "# covered = [\"info:city\"]\n";
    assert!(hbidx_schema::EXAMPLE_CONFIG.contains(commented));
    let mut text = hbidx_schema::EXAMPLE_CONFIG.replace(commented, "covered = [\"info:city\"]\n");
    if blind {
        for column in ["info:phone", "info:idcard"] {
            let line = format!("column = \"{column}\"\n");
            assert!(text.contains(&line), "the example config indexes {column}");
            text = text.replace(&line, &format!("{line}blind = true\n"));
        }
    }
    let path = dir.join("hbidx.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn start(dir: &Path, blind: bool) -> Server {
    start_with_key(dir, blind, BLIND_KEY)
}

fn start_with_key(dir: &Path, blind: bool, key: &str) -> Server {
    let config = config(dir, blind);
    let data = dir.join("data");
    let config = config.to_str().unwrap();
    let mut env = vec![("HBIDX_API_KEY", TEST_API_KEY)];
    if blind {
        env.push(("HBIDX_BLIND_KEY", key));
    }
    Server::start_with_env(&["--config", config, "serve"], &data, &[], &env)
}

fn write_people(server: &Server) {
    let rows = server.url("/v1/tables/user/rows");
    for ((key, name, phone), id) in PEOPLE.iter().zip(idcards()) {
        let body = json!({"cells": {
            "info:name": name, "info:phone": phone, "info:idcard": id, "info:city": "北京"
        }});
        let (status, answer) = put(&format!("{rows}/{key}?wait=indexed"), &body);
        assert_eq!(status, 200, "{answer}");
    }
    // A partial update: the index rebuilds u1's document from its kept state, where a blind
    // field has only its tags, and the phone and idcard must still find it.
    let body = json!({"cells": {"info:city": "上海"}});
    let (status, answer) = put(&format!("{rows}/u1?wait=indexed"), &body);
    assert_eq!(status, 200, "{answer}");
}

/// The lookups a blind field still answers, as (query, body) pairs.
fn lookups(server: &Server) -> Vec<(String, Value)> {
    let rows = server.url("/v1/tables/user/rows");
    let mut queries: Vec<String> = Vec::new();
    for ((_, name, phone), id) in PEOPLE.iter().zip(idcards()) {
        queries.push(format!("phone={phone}"));
        // Another spelling of the same number: normalised before it is hashed.
        queries.push(format!("phone=%2B86%20{}%20{}", &phone[..3], &phone[3..]));
        queries.push(format!("idcard={id}"));
        queries.push(format!("idcard={}", id.to_lowercase()));
        for digits in [4, 6, 11] {
            queries.push(format!("phone_suffix={}", &phone[phone.len() - digits..]));
        }
        // Indexed and covered columns only: a plain server answers from the index; a blind
        // one from the store (a blind condition can't be re-checked against hashes, and a
        // blind column's value isn't in the index), with the same values.
        queries.push(format!("phone={phone}&columns=info:city,info:phone"));
        queries.push(format!("name={name}&columns=info:phone,info:idcard"));
        queries.push(format!("name={name}&columns=info:city"));
    }
    // Tails nobody has.
    queries.extend(["phone_suffix=0000", "phone_suffix=99999"].map(String::from));
    queries.push("phone=13000000000".into());
    queries
        .into_iter()
        .map(|query| {
            let (status, body) = get(&format!("{rows}?{query}"));
            (
                query,
                json!({"status": status, "keys": keys(&body), "rows": body["rows"]}),
            )
        })
        .collect()
}

/// Files under `dir` (recursively) whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        } else {
            let bytes = std::fs::read(&path).unwrap();
            if bytes
                .windows(needle.len())
                .any(|window| window == needle.as_bytes())
            {
                hits.push(path);
            }
        }
    }
    hits
}

/// Every plaintext a blind index must not hold: each phone, each idcard, and each phone's last
/// six digits (a suffix lookup's value), with whether the grep must find it in a plain index
/// (what shows the grep would catch it). The tail reversed, as a plain index's terms spell it,
/// is grepped too, though a plain index's term dictionary may not hold it in one piece. Tails
/// shorter than six digits are looked up above but not grepped: four digits turn up by chance
/// in hex segment ids.
fn personal_strings() -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for ((_, _, phone), id) in PEOPLE.iter().zip(idcards()) {
        out.push((phone.to_string(), true));
        out.push((id, true));
        let tail = &phone[phone.len() - 6..];
        out.push((tail.to_string(), true));
        out.push((tail.chars().rev().collect(), false));
    }
    out
}

#[test]
fn blind_fields_keep_personal_data_out_of_the_index_files() {
    let plain_dir = tempfile::tempdir().unwrap();
    let blind_dir = tempfile::tempdir().unwrap();
    let plain = start(plain_dir.path(), false);
    let blind = start(blind_dir.path(), true);
    write_people(&plain);
    write_people(&blind);

    // The same answers from both servers, rows and cell values included.
    let expected = lookups(&plain);
    let got = lookups(&blind);
    for ((query, want), (_, have)) in expected.iter().zip(&got) {
        assert_eq!(want["status"], 200, "{query}: {want}");
        assert_eq!(want, have, "{query}");
    }
    let found = |query: &str| {
        expected
            .iter()
            .find(|(q, _)| q == query)
            .map(|(_, body)| body["keys"].clone())
            .unwrap()
    };
    assert_eq!(found("phone_suffix=5678"), json!(["u1"]));
    assert_eq!(found("phone_suffix=654321"), json!(["u2"]));
    assert_eq!(found(&format!("idcard={}", idcards()[2])), json!(["u3"]));

    // Prefix and partial lookups can't work on hashes: 400, naming the field.
    let rows = blind.url("/v1/tables/user/rows");
    for query in ["phone=135&match=prefix", "idcard=310104&match=partial"] {
        let (status, body) = get(&format!("{rows}?{query}"));
        assert_eq!(status, 400, "{query}: {body}");
        let field = query.split('=').next().unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("blind field \"{field}\"")),
            "{query}: {body}"
        );
        assert_eq!(body["error"]["field"], field, "{query}: {body}");
    }

    // Batch lookups: the same per-value answers (an invalid value is a per-value error on
    // both), and match=prefix refused on the blind field.
    let batch = |server: &Server, body: &Value| {
        post(&server.url("/v1/tables/user/rows:batch-lookup"), body)
    };
    let phones: Vec<&str> = PEOPLE.iter().map(|(_, _, phone)| *phone).collect();
    for body in [
        json!({"field": "phone", "values": [phones[0], "12", phones[2], "13000000000"]}),
        json!({"field": "idcard", "values": idcards(), "columns": ["info:city", "info:idcard"]}),
    ] {
        let (want_status, want) = batch(&plain, &body);
        let (have_status, have) = batch(&blind, &body);
        assert_eq!(
            (want_status, &want["results"]),
            (have_status, &have["results"]),
            "{body}"
        );
        assert_eq!(want_status, 200, "{want}");
    }
    let (status, body) = batch(
        &blind,
        &json!({"field": "phone", "values": [phones[0]], "match": "prefix"}),
    );
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("blind field \"phone\""), "{body}");

    // The key is never logged.
    let log = blind.log_text();
    assert!(log.contains("blind key loaded"), "{log}");
    assert!(!log.contains(BLIND_KEY), "{log}");

    // Graceful stops: everything the indexes hold is on disk.
    plain.stop();
    blind.stop();
    let plain_index = plain_dir.path().join("data/index");
    let blind_index = blind_dir.path().join("data/index");
    for (needle, in_plain) in personal_strings() {
        assert!(
            !in_plain || !files_containing(&plain_index, &needle).is_empty(),
            "the grep must find {needle} in a plain index, or it proves nothing"
        );
        let hits = files_containing(&blind_index, &needle);
        assert!(hits.is_empty(), "{needle} is in the blind index: {hits:?}");
    }

    // Verify compares the index's tags with the store's values hashed: no false drift.
    let config = config(blind_dir.path(), true);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hbidx"))
        .args([
            "--config",
            config.to_str().unwrap(),
            "verify",
            "user",
            "--data-dir",
        ])
        .arg(blind_dir.path().join("data"))
        .env("HBIDX_API_KEY", TEST_API_KEY)
        .env("HBIDX_BLIND_KEY", BLIND_KEY)
        .output()
        .unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(0), "{out}");
    assert_eq!(util::report_count(&out, "value mismatches"), 0, "{out}");
    assert_eq!(
        util::report_count(&out, "missing from the index"),
        0,
        "{out}"
    );

    // Key rotation: another key, and the index (whose schema names the old key's fingerprint)
    // is rebuilt from the store at start; the same lookups give the same answers.
    let rotated = start_with_key(blind_dir.path(), true, &BLIND_KEY.replace("blind", "other"));
    let got = lookups(&rotated);
    for ((query, want), (_, have)) in expected.iter().zip(&got) {
        assert_eq!(want, have, "after rotation: {query}");
    }
    rotated.stop();
}

#[test]
fn a_blind_field_without_a_key_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), true);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_hbidx"))
        .args([
            "--config",
            config.to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("HBIDX_API_KEY", TEST_API_KEY)
        .env_remove("HBIDX_BLIND_KEY")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(
        errors,
        vec![
            "error: blind fields (user.phone, user.idcard) need a key: set HBIDX_BLIND_KEY or [security] blind_key_file"
        ],
        "{stderr}"
    );
    assert!(
        !dir.path().join("data/index").exists(),
        "nothing was indexed"
    );
}
