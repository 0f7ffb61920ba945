//! Fuzz target for the gateway's request path: bytes a client sends, through the size limits,
//! the nullable-arguments layer and the generated processor, to the handlers over a real
//! embedded store. Whatever arrives, the processor answers or refuses; nothing panics. proptest
//! generates the requests (the same path as fuzz/fuzz_targets/thrift_request.rs, where libFuzzer drives it).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use thrift::protocol::{
    TBinaryOutputProtocol, TCompactOutputProtocol, TMessageIdentifier, TMessageType,
    TOutputProtocol,
};
use thrift::transport::TBufferChannel;

use crate::fuzzing::RequestFuzzer;

/// Every method of HBase's Thrift1 IDL (1.2's and those 2.0 added), and one that isn't.
fn methods() -> Vec<&'static str> {
    let mut methods = hbidx_store::HBASE_1_2_METHODS.to_vec();
    methods.extend_from_slice(hbidx_store::HBASE_2_ONLY);
    methods.push("noSuchMethod");
    methods
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

fn fuzz(compact: bool, requests: impl Strategy<Value = Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let gateway = RequestFuzzer::new(dir.path());
    let mut runner = TestRunner::new(Config {
        cases: 1024,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&requests, |bytes| {
            gateway.process(&bytes, compact);
            Ok(())
        })
        .unwrap();
}

#[test]
fn binary_requests_never_panic() {
    fuzz(
        false,
        prop_oneof![
            request(false),
            proptest::collection::vec(any::<u8>(), 0..64)
        ],
    );
}

#[test]
fn compact_requests_never_panic() {
    fuzz(
        true,
        prop_oneof![request(true), proptest::collection::vec(any::<u8>(), 0..64)],
    );
}

/// Filter strings: arbitrary bytes, filter-like text, and valid filters combined with AND, OR,
/// SKIP and WHILE, which then run over rows (the fuzz/fuzz_targets/filter_string.rs path).
#[test]
fn filter_strings_never_panic() {
    const FILTERS: &[&str] = &[
        "KeyOnlyFilter()",
        "FirstKeyOnlyFilter()",
        "PrefixFilter('a')",
        "ColumnPrefixFilter('')",
        "MultipleColumnPrefixFilter('a', 'ab', 'q')",
        "ColumnCountGetFilter(1)",
        "ColumnPaginationFilter(1, 1)",
        "ColumnRangeFilter('a', false, 'q', true)",
        "InclusiveStopFilter('r')",
        "PageFilter(1)",
        "TimestampsFilter(1, 5)",
        "RowFilter(>, 'binaryprefix:a')",
        "FamilyFilter(=, 'regexstring:^c')",
        "QualifierFilter(!=, 'substring:A')",
        "ValueFilter(<=, 'binary:it''s')",
        "DependentColumnFilter('cf', 'a', true)",
        "SingleColumnValueFilter('cf', 'q', =, 'binary:val1', true, false)",
        "SingleColumnValueExcludeFilter('cf', 'b', !=, 'binary:x')",
    ];
    let combined = (
        proptest::collection::vec(
            (
                proptest::sample::select(vec!["", "SKIP ", "WHILE ", "SKIP WHILE "]),
                proptest::sample::select(FILTERS.to_vec()),
            ),
            1..5,
        ),
        proptest::collection::vec(proptest::sample::select(vec![" AND ", " OR "]), 4),
        any::<bool>(),
    )
        .prop_map(|(operands, operators, parenthesise)| {
            let mut text = String::new();
            for (index, (prefix, filter)) in operands.iter().enumerate() {
                if index > 0 {
                    text.push_str(operators[index - 1]);
                }
                if parenthesise && index == 1 {
                    text.push('(');
                }
                text.push_str(prefix);
                text.push_str(filter);
            }
            if parenthesise && operands.len() > 1 {
                text.push(')');
            }
            text.into_bytes()
        });
    let strings = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..64),
        "[A-Za-z()', =<>!:0-9-]{0,80}".prop_map(String::into_bytes),
        combined,
    ];
    let mut runner = TestRunner::new(Config {
        cases: 2048,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strings, |bytes| {
            crate::fuzzing::filter_string(&bytes);
            Ok(())
        })
        .unwrap();
}
