//! The HBase Kafka Proxy's wire format, checked against datums another Avro implementation
//! wrote: tests/fixtures/proxy/ holds messages fastavro encoded from the `HBaseKafkaEvent`
//! schema as hbase-connectors ships it, shaped as the Proxy sends them (one per cell, a row's
//! cells split across messages, column / family / row deletes, a Kafka key that is not the
//! rowkey, a value that is not UTF-8, another table's cell), and `manifest.json` with what each
//! one holds. hbidx's own encoder can't stand in for this check: a decoder and an encoder that
//! drift together still agree with each other.
//!
//! Regenerate with `python3 tests/fixtures/proxy/make_fixtures.py` (its header says how).

mod util;

use std::path::{Path, PathBuf};
use std::time::Duration;

use hbidx_indexer::{ProxyCell, ProxyDecoded};
use hbidx_schema::config::TableConfig;
use hbidx_schema::model::CellOp;
use serde_json::Value;
use util::kafka::{Producer, create_topic, json_source, unique_topic, write_config};
use util::{Server, eventually, get, keys};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/proxy")
}

fn manifest() -> Value {
    let text = std::fs::read_to_string(fixtures_dir().join("manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The fixtures' messages: (manifest entry, datum bytes), in the order the Proxy sent them.
fn messages() -> Vec<(Value, Vec<u8>)> {
    let manifest = manifest();
    let entries = manifest["messages"].as_array().unwrap();
    assert!(!entries.is_empty(), "no fixtures in the manifest");
    entries
        .iter()
        .map(|entry| {
            let file = entry["file"].as_str().unwrap();
            let datum = std::fs::read(fixtures_dir().join(file)).unwrap();
            (entry.clone(), datum)
        })
        .collect()
}

fn unhex(entry: &Value, field: &str) -> Vec<u8> {
    hex::decode(entry[field].as_str().unwrap()).unwrap()
}

/// The example config's `user` table, whose rowkey design the fixtures' rowkeys follow.
fn user_table() -> TableConfig {
    let config = hbidx_schema::parse_config(include_str!("../deploy/config/hbidx.toml")).unwrap();
    config.table("user").unwrap().clone()
}

/// What a reader of the topic must make of the record the fixture's encoder was given: the
/// Proxy's semantics, written out from the manifest's raw fields.
fn expected(entry: &Value) -> ProxyDecoded {
    let record = &entry["record"];
    let table = String::from_utf8(unhex(record, "table_hex")).unwrap();
    if table != "user" {
        return ProxyDecoded::OtherTable(table);
    }
    let family = String::from_utf8(unhex(record, "family_hex")).unwrap();
    let qualifier = String::from_utf8(unhex(record, "qualifier_hex")).unwrap();
    let ts = record["timestamp"].as_i64().unwrap();
    let op = match entry["meaning"].as_str().unwrap() {
        "put" => CellOp::Put {
            column: format!("{family}:{qualifier}"),
            ts,
            value: unhex(record, "value_hex"),
        },
        "delete_cell" => CellOp::DeleteCell {
            column: format!("{family}:{qualifier}"),
            ts,
        },
        "delete_family" => CellOp::DeleteFamily { family, ts },
        other => panic!("unknown meaning {other}"),
    };
    ProxyDecoded::Cell(ProxyCell {
        rowkey: unhex(record, "key_hex"),
        op,
    })
}

#[test]
fn the_fixtures_schema_is_the_one_hbidx_decodes_with() {
    let ours: Value = serde_json::from_str(hbidx_indexer::HBASE_KAFKA_EVENT_SCHEMA).unwrap();
    assert_eq!(manifest()["schema"], ours);
    assert!(
        manifest()["encoder"]
            .as_str()
            .unwrap()
            .starts_with("fastavro "),
        "the fixtures must come from an encoder other than hbidx's"
    );
}

#[test]
fn every_fastavro_datum_decodes_field_for_field() {
    let table = user_table();
    let mut meanings = std::collections::BTreeSet::new();
    for (entry, datum) in messages() {
        let file = entry["file"].as_str().unwrap();
        let decoded = hbidx_indexer::decode_proxy(&table, &datum)
            .unwrap_or_else(|err| panic!("{file}: {err}"));
        let want = expected(&entry);
        assert_eq!(decoded, want, "{file}");
        // The record's own fields, checked against the decoded cell rather than through
        // `expected`, so that a field `expected` doesn't read can't slip by.
        let record = &entry["record"];
        if let ProxyDecoded::Cell(cell) = &decoded {
            assert_eq!(cell.rowkey, unhex(record, "key_hex"), "{file}");
            assert_eq!(
                cell.op.ts(),
                record["timestamp"].as_i64().unwrap(),
                "{file}"
            );
            let delete = record["delete"].as_bool().unwrap();
            assert_eq!(
                !matches!(cell.op, CellOp::Put { .. }),
                delete,
                "{file}: delete flag"
            );
            if delete {
                assert!(
                    unhex(record, "value_hex").is_empty(),
                    "{file}: deletes carry no value"
                );
            }
            // The natural key behind the rowkey: the datum's key is the rowkey, not the uid.
            let key = table.rowkey.decode(&cell.rowkey).unwrap();
            assert_ne!(key.as_bytes(), cell.rowkey.as_slice(), "{file}");
        }
        // The Proxy's Kafka key is the array behind the cell, never the bare rowkey: nothing
        // may be read from it.
        assert_ne!(
            unhex(&entry, "kafka_key_hex"),
            unhex(record, "key_hex"),
            "{file}"
        );
        meanings.insert(format!(
            "{}{}",
            entry["meaning"].as_str().unwrap(),
            if matches!(decoded, ProxyDecoded::OtherTable(_)) {
                " (other table)"
            } else {
                ""
            }
        ));
    }
    let covered: Vec<&str> = meanings.iter().map(String::as_str).collect();
    assert_eq!(
        covered,
        ["delete_cell", "delete_family", "put", "put (other table)"]
    );
}

#[test]
fn a_non_utf8_value_keeps_its_bytes() {
    let table = user_table();
    let (entry, datum) = messages()
        .into_iter()
        .find(|(entry, _)| entry["file"].as_str().unwrap().contains("u5-put-name"))
        .unwrap();
    let value = unhex(&entry["record"], "value_hex");
    assert!(
        std::str::from_utf8(&value).is_err(),
        "the fixture must not be UTF-8"
    );
    let ProxyDecoded::Cell(cell) = hbidx_indexer::decode_proxy(&table, &datum).unwrap() else {
        panic!("not a cell of user");
    };
    // 王五 in GBK.
    assert_eq!(
        cell.op,
        CellOp::Put {
            column: "info:name".into(),
            ts: entry["record"]["timestamp"].as_i64().unwrap(),
            value: vec![0xcd, 0xf5, 0xce, 0xe5],
        }
    );
}

#[test]
fn the_shard_rowkey_peek_reads_the_fixtures_like_the_decoder() {
    let table = user_table();
    for (entry, datum) in messages() {
        let file = entry["file"].as_str().unwrap();
        let peeked = hbidx_indexer::proxy_rowkey(&table, &datum);
        match expected(&entry) {
            ProxyDecoded::Cell(cell) => assert_eq!(peeked, Some(cell.rowkey.as_slice()), "{file}"),
            ProxyDecoded::OtherTable(_) => assert_eq!(peeked, None, "{file}"),
        }
    }
}

#[test]
fn hbidx_encodes_the_same_bytes_as_fastavro() {
    // Avro's binary encoding of this schema has one form, so two correct encoders agree byte
    // for byte; the benchmark and the tests that feed Proxy events use hbidx's.
    let table = user_table();
    for (entry, datum) in messages() {
        let file = entry["file"].as_str().unwrap();
        if let ProxyDecoded::Cell(cell) = expected(&entry) {
            let ours = hbidx_indexer::encode_proxy(&table.name, &cell.rowkey, &cell.op).unwrap();
            assert_eq!(ours, datum, "{file}");
        }
    }
}

#[test]
fn a_truncated_or_padded_fixture_is_refused() {
    // What a dead letter is made of: a datum cut short or with bytes after it is an error,
    // never a cell with a field read from the wrong place.
    let table = user_table();
    for (entry, datum) in messages() {
        let file = entry["file"].as_str().unwrap();
        for cut in 0..datum.len() {
            assert!(
                hbidx_indexer::decode_proxy(&table, &datum[..cut]).is_err(),
                "{file} cut at {cut}"
            );
        }
        let mut padded = datum.clone();
        padded.push(0);
        assert!(
            hbidx_indexer::decode_proxy(&table, &padded).is_err(),
            "{file} padded"
        );
    }
}

fn lookup(server: &Server, query: &str) -> Value {
    let (status, body) = get(&server.url(&format!("/v1/tables/user/rows?{query}")));
    assert_eq!(status, 200, "{query}: {body}");
    body
}

#[test]
#[ignore = "needs a Kafka broker at HBIDX_TEST_KAFKA: scripts/test.sh starts one and runs it"]
fn fastavro_fixtures_through_a_broker_are_found_over_rest() {
    // Every message goes with the Kafka key the Proxy gives it (the array behind the cell), so
    // the cells of one row spread over the topic's partitions as they do in production.
    let topic = unique_topic("proxy-fixtures");
    let partitions = 3;
    create_topic(&topic, partitions);
    let producer = Producer::exact(&topic);
    let messages = messages();
    for (entry, datum) in &messages {
        producer.send(&unhex(entry, "kafka_key_hex"), datum);
    }
    producer.flush();

    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &[],
        &json_source(&topic, "user", "hbase-kafka-proxy"),
    );
    let server = Server::start(
        &["serve"],
        &dir.path().join("data"),
        &["--config", config.to_str().unwrap()],
    );
    let status = eventually("every fixture indexed", Duration::from_secs(120), || {
        let (_, status) = get(&server.url("/v1/indexer/status"));
        let parts = status["tables"]["user"]["partitions"].as_array()?.clone();
        let produced: i64 = parts
            .iter()
            .filter_map(|p| p["high_watermark"].as_i64())
            .sum();
        let caught_up = parts.len() == partitions as usize
            && produced == messages.len() as i64
            && parts.iter().all(|p| p["lag"].as_i64() == Some(0));
        caught_up.then_some(status)
    });
    let parts = status["tables"]["user"]["partitions"].as_array().unwrap();
    let sum = |field: &str| -> u64 { parts.iter().filter_map(|p| p[field].as_u64()).sum() };
    assert_eq!(sum("dead_letters"), 0, "{status}");
    assert_eq!(sum("other_table"), 1, "{status}");
    assert!(
        parts
            .iter()
            .filter(|p| p["high_watermark"].as_i64() > Some(0))
            .count()
            > 1,
        "the Kafka keys should spread the cells over partitions: {status}"
    );
    // u1 and u5 are live; u2 lost its phone; u3 (family delete) and u4 (row delete) are gone.
    assert_eq!(status["tables"]["user"]["rows"], 3, "{status}");

    // A row whose three cells came as three messages, found by each indexed field.
    for query in [
        "phone=13800000001",
        "idcard=110105199003070017",
        "name=李雷",
    ] {
        let body = lookup(&server, query);
        assert_eq!(keys(&body), ["u1"], "{query}: {body}");
        let cells = &body["rows"][0]["cells"];
        assert_eq!(cells["info:name"], "李雷", "{body}");
        assert_eq!(cells["info:phone"], "13800000001", "{body}");
        assert_eq!(cells["info:idcard"], "110105199003070017", "{body}");
    }

    // A column delete: the phone is gone from the index and the row, the rest stays.
    let body = lookup(&server, "phone=13800000002&index_only=true");
    assert_eq!(body["count"], 0, "{body}");
    let body = lookup(&server, "name=韩梅梅");
    assert_eq!(keys(&body), ["u2"], "{body}");
    let cells = body["rows"][0]["cells"].as_object().unwrap();
    assert!(!cells.contains_key("info:phone"), "{body}");
    assert_eq!(cells["info:idcard"], "110105199003070025", "{body}");

    // A family delete and a row delete (one family delete per family): nothing left of either.
    for (uid, phone, name) in [("u3", "13800000003", "张伟"), ("u4", "13800000004", "王芳")] {
        for query in [format!("phone={phone}"), format!("name={name}")] {
            let body = lookup(&server, &format!("{query}&index_only=true"));
            assert_eq!(body["count"], 0, "{uid} {query}: {body}");
        }
        let (code, body) = get(&server.url(&format!("/v1/tables/user/rows/{uid}")));
        assert_eq!(code, 404, "{uid}: {body}");
    }

    // A value that is not UTF-8 is stored as it came and shown with replacement characters.
    let body = lookup(&server, "phone=13800000005");
    assert_eq!(keys(&body), ["u5"], "{body}");
    assert_eq!(
        body["rows"][0]["cells"]["info:name"],
        String::from_utf8_lossy(&[0xcd, 0xf5, 0xce, 0xe5]).as_ref(),
        "{body}"
    );
}
