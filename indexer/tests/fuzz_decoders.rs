//! Fuzz targets for the event decoders, run by proptest on every test run (libFuzzer's
//! cargo-fuzz needs a nightly toolchain and its crates; proptest runs on stable, in CI, with
//! shrinking). Whatever bytes a topic carries, decoding answers a mutation or a `DecodeError`
//! (a dead letter), never a panic; what hbidx encodes decodes back to the same thing.
//!
//! Allocation: the Avro reader's allocations are capped (`AVRO_MAX_ALLOCATION` in formats.rs);
//! JSON allocations are bounded by the payload, which the consumer's fetch size bounds.

use std::sync::Arc;

use hbidx_indexer::{
    Decoded, ProxyDecoded, decode_json, decode_proxy, encode_json, encode_proxy, proxy_rowkey,
};
use hbidx_schema::config::TableConfig;
use hbidx_schema::model::{CellOp, Mutation};
use proptest::prelude::*;

fn table() -> Arc<TableConfig> {
    let config = hbidx_schema::parse_config(hbidx_schema::EXAMPLE_CONFIG).unwrap();
    Arc::new(config.table("user").unwrap().clone())
}

/// A column of the example table's `info` family.
fn column() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("info:phone".to_owned()),
        Just("info:name".to_owned()),
        Just("info:idcard".to_owned()),
        "[a-z]{1,8}".prop_map(|q| format!("info:{q}")),
    ]
}

/// One cell operation as the Kafka Proxy can carry it (it has no row delete).
fn proxy_op() -> impl Strategy<Value = CellOp> {
    let ts = 0..i64::MAX;
    prop_oneof![
        (
            column(),
            ts.clone(),
            proptest::collection::vec(any::<u8>(), 0..64)
        )
            .prop_map(|(column, ts, value)| CellOp::Put { column, ts, value }),
        (column(), ts.clone()).prop_map(|(column, ts)| CellOp::DeleteCell { column, ts }),
        ts.prop_map(|ts| CellOp::DeleteFamily {
            family: "info".into(),
            ts
        }),
    ]
}

/// Replaces bytes of `payload` at the given positions: a valid message with a few bytes hit.
fn corrupt(mut payload: Vec<u8>, hits: &[(usize, u8)]) -> Vec<u8> {
    if !payload.is_empty() {
        let len = payload.len();
        for (at, byte) in hits {
            payload[at % len] = *byte;
        }
    }
    payload
}

/// The rowkey a sharded instance peeks at ([`proxy_rowkey`]) is the rowkey the full decode
/// finds, and the peek passes only what the decode takes for this table: a message skipped as
/// another shard's after the peek would otherwise have been an `other_table` or a dead letter.
fn peek_agrees_with_decode(payload: &[u8]) -> Result<(), TestCaseError> {
    let table = table();
    let peeked = proxy_rowkey(&table, payload);
    match decode_proxy(&table, payload) {
        Ok(ProxyDecoded::Cell(cell)) => prop_assert_eq!(peeked, Some(cell.rowkey.as_slice())),
        Ok(ProxyDecoded::OtherTable(_)) => prop_assert_eq!(peeked, None),
        // Malformed: the peek fails too, unless the datum is well-formed and only its values
        // are wrong (an empty family, a negative timestamp …), which is the decode's to report.
        Err(_) => {
            if peeked.is_some() {
                let schema =
                    apache_avro::Schema::parse_str(hbidx_indexer::HBASE_KAFKA_EVENT_SCHEMA)
                        .unwrap();
                let reader = apache_avro::reader::datum::GenericDatumReader::builder(&schema)
                    .build()
                    .unwrap();
                let mut rest = payload;
                prop_assert!(reader.read_value(&mut rest).is_ok() && rest.is_empty());
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn json_events_of_any_bytes_never_panic(
        payload in proptest::collection::vec(any::<u8>(), 0..256),
        message_ts in proptest::option::of(any::<i64>()),
    ) {
        let _ = decode_json(&table(), &payload, message_ts);
    }

    #[test]
    fn json_events_of_any_text_never_panic(payload in "\\{[ -~]{0,200}\\}") {
        let _ = decode_json(&table(), payload.as_bytes(), Some(1));
    }

    /// JSON-shaped events with the format's own keys and values of every JSON type.
    #[test]
    fn json_shaped_events_never_panic(
        fields in proptest::collection::vec(
            (
                prop_oneof![
                    Just("table"), Just("key"), Just("rowkey"), Just("rowkey_b64"), Just("op"),
                    Just("ts"), Just("cells"), Just("columns"), Just("families"), Just("other"),
                ],
                prop_oneof![
                    Just("null".to_owned()),
                    Just("\"user\"".to_owned()),
                    Just("\"put\"".to_owned()),
                    Just("\"delete_row\"".to_owned()),
                    Just("\"delete_cells\"".to_owned()),
                    any::<i64>().prop_map(|n| n.to_string()),
                    any::<f64>().prop_map(|n| format!("{n:?}")),
                    "[ -~]{0,12}".prop_map(|s| serde_json::to_string(&s).unwrap()),
                    Just("{\"info:phone\":\"13800138000\",\"info:x\":7}".to_owned()),
                    Just("[\"info:phone\",\"nope\",\"info:\"]".to_owned()),
                    Just("[]".to_owned()),
                    Just("{}".to_owned()),
                ],
            ),
            0..8,
        ),
    ) {
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        let payload = format!("{{{}}}", body.join(","));
        let _ = decode_json(&table(), payload.as_bytes(), Some(1));
    }

    /// A put event hbidx publishes decodes back to the same mutation.
    #[test]
    fn json_puts_round_trip(
        key in "[a-z0-9]{1,12}",
        ts in 0..i64::MAX / 2,
        cells in proptest::collection::btree_map(column(), "[ -~一-龥]{0,16}", 1..5),
    ) {
        let table = table();
        let mutation = Mutation {
            table: "user".into(),
            rowkey: table.rowkey.encode(&key).unwrap(),
            ops: cells
                .into_iter()
                .map(|(column, value)| CellOp::Put { column, ts, value: value.into_bytes() })
                .collect(),
        };
        let decoded = decode_json(&table, &encode_json(&table, &mutation), None).unwrap();
        prop_assert_eq!(decoded, Decoded::Mutation(mutation));
    }

    /// Valid events with a few bytes hit still decode or fail cleanly.
    #[test]
    fn corrupted_json_events_never_panic(
        key in "[a-z0-9]{1,12}",
        hits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        let table = table();
        let mutation = Mutation {
            table: "user".into(),
            rowkey: table.rowkey.encode(&key).unwrap(),
            ops: vec![CellOp::Put { column: "info:phone".into(), ts: 1, value: b"13800138000".to_vec() }],
        };
        let payload = corrupt(encode_json(&table, &mutation), &hits);
        let _ = decode_json(&table, &payload, None);
    }

    #[test]
    fn proxy_datums_of_any_bytes_never_panic(
        payload in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let _ = decode_proxy(&table(), &payload);
        peek_agrees_with_decode(&payload)?;
    }

    /// A cell encoded as the Kafka Proxy does decodes back to the same cell.
    #[test]
    fn proxy_cells_round_trip(
        rowkey in proptest::collection::vec(any::<u8>(), 1..32),
        op in proxy_op(),
    ) {
        let payload = encode_proxy("user", &rowkey, &op).unwrap();
        match decode_proxy(&table(), &payload).unwrap() {
            ProxyDecoded::Cell(cell) => {
                prop_assert_eq!(cell.rowkey, rowkey);
                prop_assert_eq!(cell.op, op);
            }
            other => prop_assert!(false, "decoded as {:?}", other),
        }
    }

    #[test]
    fn corrupted_proxy_datums_never_panic(
        rowkey in proptest::collection::vec(any::<u8>(), 1..32),
        op in proxy_op(),
        hits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        let payload = corrupt(encode_proxy("user", &rowkey, &op).unwrap(), &hits);
        let _ = decode_proxy(&table(), &payload);
        peek_agrees_with_decode(&payload)?;
    }

    /// Every well-formed event peeks to its rowkey, whatever its table is called.
    #[test]
    fn proxy_peeks_agree_on_valid_events(
        rowkey in proptest::collection::vec(any::<u8>(), 0..32),
        op in proxy_op(),
        name in prop_oneof![Just("user"), Just("default:user"), Just("orders"), Just("ns:user")],
    ) {
        let payload = encode_proxy(name, &rowkey, &op).unwrap();
        peek_agrees_with_decode(&payload)?;
    }
}
