//! Bad requests get a 4xx whose body names the field at fault, and write nothing: driven through
//! `app(state)` in process (no socket, no binary), as every request shape is a router concern.

mod util;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};

/// A request with the all-scopes key; the answer as (status, JSON body).
async fn request(
    router: &axum::Router,
    method: &str,
    uri: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let builder = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", format!("Bearer {}", util::KEY));
    let request = match body {
        Some(body) => builder
            .header("content-type", "application/json")
            .body(Body::from(body.to_string())),
        None => builder.body(Body::empty()),
    }
    .unwrap();
    let (status, text) = util::send(router, request).await;
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status.as_u16(), body)
}

#[tokio::test]
async fn bad_lookups_get_400s_that_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let router = hbidx_query::app(std::sync::Arc::new(util::state(dir.path()).await));
    let rows = "/v1/tables/user/rows";
    for (query, status, field) in [
        ("?phone=12345", 400, "phone"),
        ("?idcard=110101199003071235", 400, "idcard"),
        ("?idcard=110101199002301234", 400, "idcard"),
        ("?email=a@b", 400, "email"),
        ("?phone=13800138000&cursor=%25%25%25", 400, "cursor"),
        ("?phone=13800138000&limit=0", 400, "limit"),
        ("?phone=13800138000&columns=nope:x", 400, "columns"),
        ("?name=x&match=fuzzy", 400, "match"),
        ("?name=%E5%BC%A0%E4%B8%89&match=pinyin", 400, "name"),
        ("?phone_suffix=12", 400, "phone_suffix"),
        ("", 400, "query"),
    ] {
        let uri = format!("{rows}{query}");
        let (got, body) = request(&router, "GET", &uri, None).await;
        assert_eq!(got, status, "{uri}: {body}");
        assert_eq!(body["error"]["field"], field, "{uri}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{body}"
        );
        // Personal data never echoes back in full.
        assert!(!body.to_string().contains("12345\""), "{body}");
    }
    let (status, body) = request(
        &router,
        "GET",
        "/v1/tables/nope/rows?phone=13800138000",
        None,
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(body["error"]["message"].as_str().is_some(), "{body}");
    let (status, body) = request(
        &router,
        "POST",
        "/v1/tables/user/rows:batch-lookup",
        Some(json!({"field": "phone", "values": vec!["13800138000"; 1001]})),
    )
    .await;
    assert_eq!(
        (status, body["error"]["field"].as_str()),
        (400, Some("values")),
        "{body}"
    );
}

#[tokio::test]
async fn bad_writes_get_400s_that_name_the_field_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let router = hbidx_query::app(std::sync::Arc::new(util::state(dir.path()).await));
    let row = "/v1/tables/user/rows/u9";
    for (body, field) in [
        (
            json!({"cells": {"info:phone": "not a phone"}}),
            "cells.info:phone",
        ),
        (json!({"cells": {"other:x": "1"}}), "cells.other:x"),
        // A cell far in the future would outlive every delete without a timestamp.
        (
            json!({"cells": {"info:name": "x"}, "ts": 32503680000000i64}),
            "ts",
        ),
        (json!({"cellz": {}}), "body"),
    ] {
        let (status, answer) = request(&router, "PUT", row, Some(body.clone())).await;
        assert_eq!(
            (status, answer["error"]["field"].as_str()),
            (400, Some(field)),
            "{body} => {answer}"
        );
    }
    // Nothing was written by the rejected requests.
    assert_eq!(request(&router, "GET", row, None).await.0, 404);
    // Oversized bodies are refused, not buffered.
    let huge = "x".repeat(2 << 20);
    let (status, _) = request(
        &router,
        "PUT",
        row,
        Some(json!({"cells": {"info:city": huge}})),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE.as_u16());
}
