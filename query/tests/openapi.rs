//! `GET /openapi.json`: public, OpenAPI 3.1, and in step with the router. Every documented
//! operation is routed, every documented query parameter is one its handler reads, and every
//! protected operation documents the refusals the front middleware gives.
//! (tests/contract.rs runs schemathesis against a real server for the rest.)

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use hbidx_query::app;
use serde_json::Value;

mod util;

use util::{KEY, PHONE, send, state};

async fn document(router: &axum::Router) -> Value {
    // No Authorization header: the document is public.
    let (status, body) = send(
        router,
        Request::get("/openapi.json").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// The documented operations: `(method, path template, operation)`.
fn operations(document: &Value) -> Vec<(Method, String, Value)> {
    let mut operations = Vec::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            operations.push((method, path.clone(), operation.clone()));
        }
    }
    operations
}

/// A request for an operation, with the path filled in for the test table's row u1.
fn request(method: &Method, path: &str, query: &str, body: Option<&str>) -> Request<Body> {
    let uri = path
        .replace("{table}", "user")
        .replace("{key}", "u1")
        .replace("{id}", "1");
    let uri = if query.is_empty() {
        uri
    } else {
        format!("{uri}?{query}")
    };
    let builder = Request::builder()
        .method(method.clone())
        .uri(uri)
        .header("authorization", format!("Bearer {KEY}"));
    match body {
        Some(body) => builder
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap(),
        None => builder.body(Body::empty()).unwrap(),
    }
}

#[tokio::test]
async fn the_document_is_public_openapi_3_1_with_the_bearer_scheme() {
    let dir = tempfile::tempdir().unwrap();
    let router = app(Arc::new(state(dir.path()).await));
    let document = document(&router).await;
    assert_eq!(document["openapi"], "3.1.0");
    assert_eq!(
        document["components"]["securitySchemes"]["api_key"],
        serde_json::json!({"type": "http", "scheme": "bearer", "description": "An hbidx API key. Keys carry scopes: lookup, write, admin."})
    );
    let error = &document["components"]["schemas"]["ErrorResponse"];
    assert_eq!(error["required"], serde_json::json!(["error"]), "{error}");
    // Scopes as the route table in auth.rs has them.
    let scopes = |path: &str, method: &str| {
        document["paths"][path][method]["security"][0]["api_key"].clone()
    };
    assert_eq!(
        scopes("/v1/tables/{table}/rows", "get"),
        serde_json::json!(["lookup"])
    );
    assert_eq!(
        scopes("/v1/tables/{table}/rows/{key}", "put"),
        serde_json::json!(["write"])
    );
    assert_eq!(
        scopes("/v1/tables/{table}/reindex", "post"),
        serde_json::json!(["admin"])
    );
    assert_eq!(scopes("/v1/tables", "get"), serde_json::json!([]));
    assert!(
        document["paths"]["/healthz"]["get"]
            .get("security")
            .is_none()
    );
}

#[tokio::test]
async fn every_documented_operation_is_routed_and_documents_its_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let router = app(Arc::new(state(dir.path()).await));
    let document = document(&router).await;
    let operations = operations(&document);
    assert!(operations.len() >= 17, "{} operations", operations.len());
    for (method, path, operation) in &operations {
        let body = operation.get("requestBody").map(|_| "{}");
        let (status, text) = send(&router, request(method, path, "", body)).await;
        // A route that isn't registered falls through to axum's empty 404 or 405.
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
        if status == StatusCode::NOT_FOUND {
            assert!(text.contains("\"not_found\""), "{method} {path}: {text}");
        }
        let responses = operation["responses"].as_object().unwrap();
        assert!(
            responses.contains_key(status.as_str()),
            "{method} {path} answered {status}, which it doesn't document: {text}"
        );
        if let Some(security) = operation.get("security") {
            for refusal in ["401", "429"] {
                assert!(responses.contains_key(refusal), "{method} {path} {refusal}");
            }
            let scoped = security[0]["api_key"]
                .as_array()
                .is_some_and(|s| !s.is_empty());
            assert_eq!(responses.contains_key("403"), scoped, "{method} {path}");
            // And the refusal is what the middleware answers without a key.
            let anonymous = Request::builder()
                .method(method.clone())
                .uri(
                    path.replace("{table}", "user")
                        .replace("{key}", "u1")
                        .replace("{id}", "1"),
                )
                .body(Body::empty())
                .unwrap();
            let (status, _) = send(&router, anonymous).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
        }
    }
}

#[tokio::test]
async fn every_documented_query_parameter_is_read_by_its_handler() {
    let dir = tempfile::tempdir().unwrap();
    let router = app(Arc::new(state(dir.path()).await));
    let document = document(&router).await;
    let example = |name: &str| match name {
        "phone" => PHONE.to_string(),
        "phone_suffix" => "8000".into(),
        "idcard" => "11010519491231002X".into(),
        "name" => "张三".into(),
        "match" => "exact".into(),
        "limit" => "5".into(),
        "columns" => "info".into(),
        "index_only" => "true".into(),
        "key" => "u1".into(),
        "wait" => "stored".into(),
        "consistency" => "store".into(),
        "partial" => "true".into(),
        "ts" => "1700000000000".into(),
        other => panic!("no example value for the query parameter {other}"),
    };
    let mut checked = 0;
    for (method, path, operation) in operations(&document) {
        let Some(parameters) = operation["parameters"].as_array() else {
            continue;
        };
        for parameter in parameters.iter().filter(|p| p["in"] == "query") {
            let name = parameter["name"].as_str().unwrap();
            if name == "cursor" {
                continue; // Only a cursor the service returned is valid; paging tests cover it.
            }
            // The lookup needs one field; the other routes take what they document.
            let mut query = format!("{name}={}", urlencode(&example(name)));
            if (path.ends_with("/rows") || path.ends_with("/hits"))
                && !["phone", "phone_suffix", "idcard", "name"].contains(&name)
            {
                query = format!("phone={PHONE}&{query}");
            }
            // A forwarded write's body is the mutations themselves.
            let body = operation.get("requestBody").map(|_| {
                if path.ends_with("/apply") {
                    "[]"
                } else {
                    r#"{"cells": {"info:city": "Hangzhou"}}"#
                }
            });
            let (status, text) = send(&router, request(&method, &path, &query, body)).await;
            // The row may be gone by now (a documented DELETE ran); what matters is that the
            // parameter itself was taken.
            let refused: Value = serde_json::from_str(&text).unwrap_or_default();
            assert!(
                status.is_success() || refused["error"]["field"] != name,
                "{method} {path}?{query} answered {status}: {text}"
            );
            assert!(
                status.is_success() || status == StatusCode::NOT_FOUND,
                "{method} {path}?{query} answered {status}: {text}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 12, "{checked} parameters checked");
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
