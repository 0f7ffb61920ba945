//! HBase Kafka Proxy Avro datums for the example `user` table: the full decoder and the
//! rowkey peek a shard uses to skip foreign rows take any bytes without panicking, and agree:
//! whatever the peek passes as this table's, the decoder takes too.
#![no_main]

use std::sync::LazyLock;

use hbidx_indexer::{ProxyDecoded, decode_proxy, proxy_rowkey};
use hbidx_schema::config::{TableConfig, parse_config};
use libfuzzer_sys::fuzz_target;

static TABLE: LazyLock<TableConfig> = LazyLock::new(|| {
    parse_config(hbidx_schema::EXAMPLE_CONFIG)
        .expect("the example config parses")
        .tables
        .remove(0)
});

fuzz_target!(|data: &[u8]| {
    let peeked = proxy_rowkey(&TABLE, data);
    match decode_proxy(&TABLE, data) {
        Ok(ProxyDecoded::Cell(cell)) => assert_eq!(peeked, Some(cell.rowkey.as_slice())),
        Ok(ProxyDecoded::OtherTable(_)) => assert_eq!(peeked, None),
        // A well-formed datum with wrong values (an empty family, a negative timestamp) is
        // peeked and then refused by the decoder, which dead-letters it: that's fine.
        Err(_) => {}
    }
});
