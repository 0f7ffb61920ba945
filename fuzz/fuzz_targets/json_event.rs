//! hbidx JSON events (a Kafka message's payload) for the example `user` table: any bytes
//! decode or are refused with an error, never a panic; what decodes re-encodes to JSON that
//! decodes to the same mutation (the round trip; a JSON object's cells have no order, so the
//! operations are compared as a set).
#![no_main]

use std::sync::LazyLock;

use hbidx_indexer::{Decoded, encode_json};
use hbidx_schema::config::{TableConfig, parse_config};
use libfuzzer_sys::fuzz_target;

static TABLE: LazyLock<TableConfig> = LazyLock::new(|| {
    parse_config(hbidx_schema::EXAMPLE_CONFIG)
        .expect("the example config parses")
        .tables
        .remove(0)
});

fn sorted<T: std::fmt::Debug>(ops: &[T]) -> Vec<String> {
    let mut ops: Vec<String> = ops.iter().map(|op| format!("{op:?}")).collect();
    ops.sort();
    ops
}

fuzz_target!(|data: &[u8]| {
    let ts = Some(1_700_000_000_000);
    if let Ok(Decoded::Mutation(mutation)) = hbidx_indexer::decode_json(&TABLE, data, ts) {
        let again = hbidx_indexer::decode_json(&TABLE, &encode_json(&TABLE, &mutation), ts);
        match again {
            Ok(Decoded::Mutation(decoded)) => {
                assert_eq!(
                    (&decoded.table, &decoded.rowkey),
                    (&mutation.table, &mutation.rowkey)
                );
                assert_eq!(sorted(&decoded.ops), sorted(&mutation.ops));
            }
            other => panic!("a decoded event re-encoded does not decode: {other:?}"),
        }
    }
});
