//! The router in process. `/metrics`, `/v1/ops/summary` and `/dashboard` (issue 6): requests
//! and lookups are counted under bounded labels, looked-up values never reach the metrics, and
//! the router still works when no recorder is installed. And what runs in front of the handlers:
//! refusals and unknown paths are counted, and body routes keep the configured body limit.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use hbidx_query::{app, prometheus_builder};

mod util;

use util::{KEY, PHONE, call, send, state};

// current_thread (the default): the local recorder is per thread.
#[tokio::test]
async fn requests_and_lookups_are_counted_without_values() {
    let recorder = prometheus_builder().unwrap().build_recorder();
    let handle = recorder.handle();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let dir = tempfile::tempdir().unwrap();
    let state = Arc::new(state(dir.path()).await.with_metrics(handle));
    let router = app(state.clone());

    let (status, body) = call(&router, &format!("/v1/tables/user/rows?phone={PHONE}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("\"count\":1"), "{body}");
    let (status, _) = call(&router, "/v1/tables/user/rows?phone_suffix=8000").await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = call(&router, "/v1/tables/user/rows?phone=12345").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let (status, text) = call(&router, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let route = "route=\"/v1/tables/{table}/rows\"";
    for expected in [
        format!("hbidx_http_requests_total{{{route},method=\"GET\",status=\"2xx\"}} 2"),
        format!("hbidx_http_requests_total{{{route},method=\"GET\",status=\"4xx\"}} 1"),
        "hbidx_lookups_total{table=\"user\",kind=\"phone\",match=\"exact\"} 1".to_string(),
        "hbidx_lookups_total{table=\"user\",kind=\"phone\",match=\"suffix\"} 1".to_string(),
        "hbidx_lookup_hits_bucket{table=\"user\",le=\"1\"} 2".to_string(),
        "hbidx_store_call_duration_seconds_count{store=\"embedded\",op=\"get_rows\"} 2".to_string(),
        // Both lookups found the same row: its rowkey chunk was decoded once, then cached.
        "hbidx_rowkey_cache_misses_total{table=\"user\"} 1".to_string(),
        "hbidx_rowkey_cache_hits_total{table=\"user\"} 1".to_string(),
        "hbidx_rowkey_cache_entries{table=\"user\"} 1".to_string(),
    ] {
        assert!(text.contains(&expected), "missing {expected} in\n{text}");
    }
    // Neither the value looked up nor the natural key becomes a label.
    assert!(
        !text.contains(PHONE) && !text.contains("8000\"") && !text.contains("u1"),
        "{text}"
    );

    // The sampler's parse of the same text finds the lookup route.
    hbidx_query::sample(&state);
    let (status, summary) = call(&router, "/v1/ops/summary").await;
    assert_eq!(status, StatusCode::OK);
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(summary["metrics_enabled"], true);
    assert_eq!(summary["tables"][0]["name"], "user");
}

#[tokio::test]
async fn without_a_recorder_metrics_are_off_and_the_rest_works() {
    let dir = tempfile::tempdir().unwrap();
    let router = app(Arc::new(state(dir.path()).await));
    let (status, body) = call(&router, &format!("/v1/tables/user/rows?phone={PHONE}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = call(&router, "/metrics").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, summary) = call(&router, "/v1/ops/summary").await;
    assert_eq!(status, StatusCode::OK);
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(summary["metrics_enabled"], false);
    assert_eq!(summary["t"], serde_json::json!([]));
}

#[tokio::test]
async fn the_dashboard_is_one_self_contained_page() {
    let dir = tempfile::tempdir().unwrap();
    let router = app(Arc::new(state(dir.path()).await));
    let (status, page) = call(&router, "/dashboard").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("<canvas") && page.contains("/v1/ops/summary"));
    // Style and script are inlined, and nothing is loaded from elsewhere.
    assert!(!page.contains("/*STYLE*/") && !page.contains("/*SCRIPT*/"));
    for external in [
        "src=\"http",
        "href=\"http",
        "src=\"//",
        "href=\"//",
        "@import",
    ] {
        assert!(!page.contains(external), "{external}");
    }
}

#[tokio::test]
async fn refusals_and_unknown_paths_are_counted_by_route_pattern() {
    let recorder = prometheus_builder().unwrap().build_recorder();
    let handle = recorder.handle();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let dir = tempfile::tempdir().unwrap();
    let router = app(Arc::new(state(dir.path()).await.with_metrics(handle)));
    let keyless = |uri: &str| Request::get(uri).body(Body::empty()).unwrap();

    let lookup = format!("/v1/tables/user/rows?phone={PHONE}");
    assert_eq!(
        send(&router, keyless(&lookup)).await.0,
        StatusCode::UNAUTHORIZED
    );
    // An unknown path still needs a key, so a keyless caller learns nothing about routes.
    assert_eq!(
        send(&router, keyless("/v1/nothing/here")).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(&router, "/v1/nothing/here").await.0,
        StatusCode::NOT_FOUND
    );

    let (_, text) = call(&router, "/metrics").await;
    for expected in [
        "hbidx_http_requests_total{route=\"/v1/tables/{table}/rows\",method=\"GET\",status=\"4xx\"} 1",
        "hbidx_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"4xx\"} 2",
    ] {
        assert!(text.contains(expected), "missing {expected} in\n{text}");
    }
    // The raw path of an unmatched request is not a label either.
    assert!(!text.contains("nothing/here"), "{text}");
}

/// Every route that reads a body refuses one over `max_body_bytes` (1 MiB by default) with a
/// 413, below axum's own 2 MB default: the limit is set per body route, so a route left out
/// would let this through to its JSON parser.
#[tokio::test]
async fn body_routes_refuse_a_body_over_the_configured_limit() {
    let dir = tempfile::tempdir().unwrap();
    let state = state(dir.path()).await;
    assert_eq!(state.limits.max_body_bytes, 1 << 20);
    let router = app(Arc::new(state));
    let body = format!("{{\"pad\": \"{}\"}}", "x".repeat(1_500_000));
    for (method, uri) in [
        ("POST", "/v1/tables/user/rows:batch-lookup"),
        ("PUT", "/v1/tables/user/rows/u2"),
        ("POST", "/v1/tables/user/reindex"),
        ("POST", "/v1/tables/user/verify"),
    ] {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {KEY}"))
            .header("content-type", "application/json")
            .body(Body::from(body.clone()))
            .unwrap();
        let (status, text) = send(&router, request).await;
        assert_eq!(
            status,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{method} {uri}: {text}"
        );
        assert!(text.contains("payload_too_large"), "{method} {uri}: {text}");
    }
}

/// Routes added with `app_with` (the bench's HTTP floor) pass the same front: a key is
/// required, and the request is counted under the route's template.
#[tokio::test]
async fn extra_routes_pass_the_same_front() {
    let recorder = prometheus_builder().unwrap().build_recorder();
    let handle = recorder.handle();
    let _guard = metrics::set_default_local_recorder(&recorder);
    let dir = tempfile::tempdir().unwrap();
    let state = Arc::new(state(dir.path()).await.with_metrics(handle));
    let extra = axum::Router::new().route(
        "/bench/floor/{table}/rows",
        axum::routing::get(|| async { "fixed" }),
    );
    let router = hbidx_query::app_with(state, extra);
    let (status, body) = call(&router, "/bench/floor/user/rows?phone=1").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "fixed"));
    let without_key = Request::get("/bench/floor/user/rows")
        .body(Body::empty())
        .unwrap();
    let (status, _) = send(&router, without_key).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (_, text) = call(&router, "/metrics").await;
    assert!(
        text.contains("route=\"/bench/floor/{table}/rows\",method=\"GET\",status=\"2xx\"} 1"),
        "{text}"
    );
}
