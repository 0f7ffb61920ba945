//! Fuzz target for the gateway's request path: bytes a client sends, through the size limits,
//! the nullable-arguments layer and the generated processor, to the handlers over a real
//! embedded store. Whatever arrives, the processor answers or refuses; nothing panics. proptest
//! generates the requests (libFuzzer can't run here; see indexer/tests/fuzz_decoders.rs).

use std::sync::Arc;

use hbase_thrift::hbase::HbaseSyncProcessor;
use hbidx_schema::config::parse_config;
use hbidx_store::EmbeddedStore;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use thrift::protocol::{
    TBinaryInputProtocolFactory, TBinaryOutputProtocol, TCompactInputProtocolFactory,
    TCompactOutputProtocol, TInputProtocolFactory, TMessageIdentifier, TMessageType,
    TOutputProtocol,
};
use thrift::server::TProcessor;
use thrift::transport::{TBufferChannel, TReadTransport};

use crate::args::NullableArgsFactory;
use crate::limits::{LimitedFactory, Limits, Wire};
use crate::{ConfiguredTable, Gateway, GatewayOptions};

/// Every method of HBase's Thrift1 IDL (1.2's and those 2.0 added), and one that isn't.
fn methods() -> Vec<&'static str> {
    let mut methods = hbidx_store::HBASE_1_2_METHODS.to_vec();
    methods.extend_from_slice(hbidx_store::HBASE_2_ONLY);
    methods.push("noSuchMethod");
    methods
}

fn processor(dir: &std::path::Path) -> HbaseSyncProcessor<Gateway> {
    let config = parse_config(
        "[[tables]]\nname = \"people\"\n[[tables.families]]\nname = \"info\"\n\
         [tables.rowkey]\nparts = [ { kind = \"key\" } ]\n",
    )
    .unwrap();
    let table = config.tables[0].clone();
    let spec = hbidx_store::TableSpec {
        name: table.name.clone(),
        families: Some(vec!["info".to_owned()]),
    };
    let store = Arc::new(EmbeddedStore::open_tables(dir, &[spec], Default::default()).unwrap());
    let configured = ConfiguredTable {
        config: Arc::new(table),
        split_keys: Vec::new(),
        kafka_topic: None,
    };
    let address = "127.0.0.1:9090".parse().unwrap();
    let options = GatewayOptions::new(address);
    HbaseSyncProcessor::new(Gateway::new(store, vec![configured], &options, address))
}

/// A request: a valid header for a method, then argument bytes (random, or a few fields).
fn request(compact: bool) -> impl Strategy<Value = Vec<u8>> {
    let fields = proptest::collection::vec(
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..16),
            // A string field (binary: type 11; compact: type 8) with a short value.
            (1i16..8, "[a-z:]{0,8}").prop_map(move |(id, text)| {
                let mut bytes = Vec::new();
                if compact {
                    bytes.push(((id as u8) << 4) | 8);
                    bytes.push(text.len() as u8);
                } else {
                    bytes.push(11);
                    bytes.extend_from_slice(&id.to_be_bytes());
                    bytes.extend_from_slice(&(text.len() as i32).to_be_bytes());
                }
                bytes.extend_from_slice(text.as_bytes());
                bytes
            }),
        ],
        0..6,
    );
    (proptest::sample::select(methods()), fields, any::<bool>()).prop_map(
        move |(method, fields, stop)| {
            let mut channel = TBufferChannel::with_capacity(0, 256);
            {
                let header = TMessageIdentifier::new(method, TMessageType::Call, 1);
                if compact {
                    let mut output = TCompactOutputProtocol::new(&mut channel);
                    output.write_message_begin(&header).unwrap();
                    output.flush().unwrap();
                } else {
                    let mut output = TBinaryOutputProtocol::new(&mut channel, true);
                    output.write_message_begin(&header).unwrap();
                    output.flush().unwrap();
                }
            }
            let mut bytes = channel.write_bytes();
            bytes.extend(fields.concat());
            if stop {
                bytes.push(0);
            }
            bytes
        },
    )
}

fn fuzz(wire: Wire, requests: impl Strategy<Value = Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let processor = processor(dir.path());
    let limits = Limits {
        max_container_len: 1000,
        max_string_len: 1 << 16,
    };
    let mut runner = TestRunner::new(Config {
        cases: 1024,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&requests, |bytes| {
            let mut input_channel = TBufferChannel::with_capacity(bytes.len(), 0);
            input_channel.set_readable_bytes(&bytes);
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
            // An error is an answer (the connection would be closed); a panic fails the case.
            let _ = processor.process(&mut *input, &mut output);
            Ok(())
        })
        .unwrap();
}

#[test]
fn binary_requests_never_panic() {
    fuzz(
        Wire::Binary,
        prop_oneof![
            request(false),
            proptest::collection::vec(any::<u8>(), 0..64)
        ],
    );
}

#[test]
fn compact_requests_never_panic() {
    fuzz(
        Wire::Compact,
        prop_oneof![request(true), proptest::collection::vec(any::<u8>(), 0..64)],
    );
}
