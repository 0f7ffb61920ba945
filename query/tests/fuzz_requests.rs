//! Fuzz targets for what callers send the REST API, through `app(state)` in process: lookup
//! query strings (fields, match, cursor, columns, limit), batch lookup bodies and write bodies.
//! Whatever arrives, the answer is a status the API documents, never a panic and never a 500
//! (a 500 means the service failed, not the request). proptest generates the inputs, as
//! libFuzzer can't run here (see indexer/tests/fuzz_decoders.rs).

mod util;

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// A value in a query string: printable text, percent-escapes (some invalid), and the values
/// that mean something to a lookup.
fn query_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~]{0,24}".prop_map(|s| s.replace(['&', '#'], "")),
        "(%[0-9A-Fa-f]{2}|%[g-z]{2}|%|[a-z0-9]){0,12}",
        Just(util::PHONE.to_owned()),
        Just("8000".to_owned()),
        Just("110101199003071234".to_owned()),
        Just("张三".to_owned()),
        Just("zhang".to_owned()),
        (0u64..2000).prop_map(|n| n.to_string()),
        Just("-1".to_owned()),
        Just("99999999999999999999".to_owned()),
    ]
}

fn query_key() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("phone"),
        Just("idcard"),
        Just("name"),
        Just("phone_suffix"),
        Just("match"),
        Just("cursor"),
        Just("columns"),
        Just("limit"),
        Just("consistency"),
        Just("wait"),
        Just("other"),
    ]
}

/// Runs `cases` requests built by `strategy` through one router; fails on a 500 or a panic.
fn fuzz<S>(strategy: S, cases: u32, build: impl Fn(S::Value) -> Request<Body>)
where
    S: Strategy,
{
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let router = hbidx_query::app(Arc::new(runtime.block_on(util::state(dir.path()))));
    let mut runner = TestRunner::new(Config {
        cases,
        // No source file to record failures next to: a failure prints its shrunk input, which
        // becomes a regression case in query/tests/validation.rs.
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&strategy, |input| {
            let request = build(input);
            let uri = request.uri().to_string();
            let (status, body) = runtime.block_on(util::send(&router, request));
            if status.is_server_error() {
                return Err(TestCaseError::fail(format!("{uri}: {status} {body}")));
            }
            Ok(())
        })
        .unwrap();
}

fn authorized(method: &str, uri: &str, body: Body) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {}", util::KEY))
        .header("content-type", "application/json")
        .body(body)
        .unwrap()
}

#[test]
fn lookup_query_strings_never_fail_the_service() {
    fuzz(
        proptest::collection::vec((query_key(), query_value()), 0..5),
        512,
        |pairs| {
            let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let uri = format!("/v1/tables/user/rows?{}", query.join("&"));
            // Some generated escapes make no valid URI at all; those never reach the router.
            let uri = if uri.parse::<axum::http::Uri>().is_ok() {
                uri
            } else {
                "/v1/tables/user/rows?phone=x".to_owned()
            };
            authorized("GET", &uri, Body::empty())
        },
    );
}

/// JSON of any shape, and JSON with the bodies' own keys and plausible values.
fn json_body() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(|f| serde_json::json!(f)),
        "[ -~]{0,16}".prop_map(serde_json::Value::from),
        Just(serde_json::Value::from(util::PHONE)),
        Just(serde_json::Value::from("info:phone")),
    ];
    let value = leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(
                prop_oneof![
                    Just("field".to_owned()),
                    Just("values".to_owned()),
                    Just("match".to_owned()),
                    Just("columns".to_owned()),
                    Just("limit".to_owned()),
                    Just("cells".to_owned()),
                    Just("ts".to_owned()),
                    Just("info:phone".to_owned()),
                    Just("info:name".to_owned()),
                    "[a-z:]{1,8}",
                ],
                inner,
                0..5,
            )
            .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    });
    prop_oneof![
        value.prop_map(|v| v.to_string()),
        "[ -~]{0,64}",
        Just(String::new()),
    ]
}

#[test]
fn batch_lookup_bodies_never_fail_the_service() {
    fuzz(json_body(), 512, |body| {
        authorized(
            "POST",
            "/v1/tables/user/rows:batch-lookup",
            Body::from(body),
        )
    });
}

#[test]
fn write_bodies_never_fail_the_service() {
    fuzz(
        (
            json_body(),
            prop_oneof![Just("PUT"), Just("DELETE")],
            "[a-z0-9]{1,8}",
        ),
        512,
        |(body, method, key)| {
            authorized(
                method,
                &format!("/v1/tables/user/rows/{key}"),
                Body::from(body),
            )
        },
    );
}
