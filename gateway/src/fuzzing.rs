//! The gateway's request path as one call, for fuzzers (gateway/src/fuzz_tests.rs with
//! proptest, fuzz/ with libFuzzer): bytes a client sends, through the size limits, the
//! nullable-arguments layer and the generated processor, to the handlers over a real embedded
//! store. Not part of the gateway's API.

use std::sync::Arc;

use hbase_thrift::hbase::HbaseSyncProcessor;
use hbidx_schema::config::parse_config;
use hbidx_store::EmbeddedStore;
use thrift::protocol::{
    TBinaryInputProtocolFactory, TBinaryOutputProtocol, TCompactInputProtocolFactory,
    TInputProtocolFactory,
};
use thrift::server::TProcessor;
use thrift::transport::{TBufferChannel, TReadTransport};

use crate::args::NullableArgsFactory;
use crate::{ConfiguredTable, Gateway, GatewayOptions};
use hbidx_store::thrift_limits::{LimitedFactory, Limits, Wire};

/// A gateway over an embedded store in a directory of the caller's, taking one request at a
/// time.
pub struct RequestFuzzer {
    processor: HbaseSyncProcessor<Gateway>,
    limits: Limits,
}

impl RequestFuzzer {
    /// A gateway serving one table `people` (family `info`) from a store in `dir`, with small
    /// limits (1000 elements, 64 KiB strings), so a claim over them is refused, not allocated.
    pub fn new(dir: &std::path::Path) -> Self {
        let config = parse_config(
            "[[tables]]\nname = \"people\"\n[[tables.families]]\nname = \"info\"\n\
             [tables.rowkey]\nparts = [ { kind = \"key\" } ]\n",
        )
        .expect("the fuzzing table parses");
        let table = config.tables[0].clone();
        let spec = hbidx_store::TableSpec {
            name: table.name.clone(),
            families: Some(vec!["info".to_owned()]),
            versions: Default::default(),
        };
        let store = Arc::new(
            EmbeddedStore::open_tables(dir, &[spec], Default::default())
                .expect("the fuzzing store opens"),
        );
        let configured = ConfiguredTable {
            config: Arc::new(table),
            split_keys: Vec::new(),
            kafka_topic: None,
        };
        let address = "127.0.0.1:9090".parse().expect("an address");
        let options = GatewayOptions::new(address);
        Self {
            processor: HbaseSyncProcessor::new(Gateway::new(
                store,
                vec![configured],
                &options,
                address,
            )),
            limits: Limits {
                max_container_len: 1000,
                max_string_len: 1 << 16,
            },
        }
    }

    /// Processes `bytes` as one request in the binary (or compact) protocol. An error is an
    /// answer (the connection would be closed); only a panic is a finding.
    pub fn process(&self, bytes: &[u8], compact: bool) {
        let wire = if compact { Wire::Compact } else { Wire::Binary };
        let limits = self.limits;
        let mut input_channel = TBufferChannel::with_capacity(bytes.len(), 0);
        input_channel.set_readable_bytes(bytes);
        let transport: Box<dyn TReadTransport + Send> = Box::new(input_channel);
        let mut input = match wire {
            Wire::Binary => NullableArgsFactory(LimitedFactory {
                inner: TBinaryInputProtocolFactory::new(),
                wire,
                limits,
            })
            .create(transport),
            Wire::Compact => NullableArgsFactory(LimitedFactory {
                inner: TCompactInputProtocolFactory::new(),
                wire,
                limits,
            })
            .create(transport),
        };
        let mut output_channel = TBufferChannel::with_capacity(0, 1 << 20);
        let mut output = TBinaryOutputProtocol::new(&mut output_channel, true);
        let _ = self.processor.process(&mut *input, &mut output);
    }
}

/// Parses `bytes` as a `TScan.filterString` and, when it parses, runs the filter over a few
/// rows (two families, an empty qualifier, binary values) as a scanner would. An error is an
/// answer; only a panic is a finding.
pub fn filter_string(bytes: &[u8]) {
    let Ok(mut filter) = crate::filter::ScanFilter::parse(bytes) else {
        return;
    };
    let cell = |value: &[u8], ts: i64| hbidx_store::Cell {
        value: value.to_vec(),
        ts,
    };
    for (key, cells) in [
        (
            &b"a"[..],
            vec![("cf:a", cell(b"1", 5)), ("cf:b", cell(b"it's", 6))],
        ),
        (
            b"r\xff",
            vec![("cf:", cell(b"\xff\x00", 1)), ("meta:m", cell(b"x", 9))],
        ),
        (
            b"z",
            vec![("cf1:q", cell(b"", 3)), ("cf:q", cell(b"val1", 4))],
        ),
    ] {
        if filter.is_done() {
            break;
        }
        let row = hbidx_store::Row {
            rowkey: key.to_vec(),
            cells: cells
                .into_iter()
                .map(|(column, cell)| (column.to_owned(), cell))
                .collect(),
        };
        let _ = filter.apply(row, Some(8));
    }
}
