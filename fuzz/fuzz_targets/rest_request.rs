//! The REST API's parsers of caller input, through the real router over a real embedded store
//! and index: the first byte picks the request (a lookup's query string, a batch lookup's
//! body, a write's body, an internal hits query), the rest is the caller's part. Whatever
//! arrives, the answer is not a server error.
#![no_main]

use std::sync::LazyLock;

use axum::body::Body;
use axum::http::{Request, header};
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

const KEY: &str = "hbidx_fuzz_key_0123456789abcdefghijklmnopqrst";

struct Service {
    runtime: tokio::runtime::Runtime,
    app: axum::Router,
    _serve: hbidx_serve::Instance,
    _dir: tempfile::TempDir,
}

static SERVICE: LazyLock<Service> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("a temp dir");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let config = hbidx_schema::config::parse_config(hbidx_schema::EXAMPLE_CONFIG)
        .expect("the example config parses");
    let mut security = hbidx_query::auth::SecurityConfig::default();
    security
        .add_plaintext_key("fuzz", KEY, "fuzz key")
        .expect("the fuzz key");
    let auth = hbidx_query::auth::Auth::new(&security);
    let serve = runtime
        .block_on(async { hbidx_serve::open(&config, dir.path(), &Default::default(), auth) })
        .expect("the service opens");
    let app = hbidx_query::app(serve.state.clone());
    Service {
        runtime,
        app,
        _serve: serve,
        _dir: dir,
    }
});

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let service = &*SERVICE;
    let text = String::from_utf8_lossy(rest);
    let request = match selector % 4 {
        0 => Request::get(format!("/v1/tables/user/rows?{text}")).body(Body::empty()),
        1 => Request::post("/v1/tables/user/rows:batch-lookup")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(rest.to_vec())),
        2 => Request::put("/v1/tables/user/rows/u00000001")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(rest.to_vec())),
        _ => Request::get(format!("/v1/internal/tables/user/hits?{text}")).body(Body::empty()),
    };
    // Bytes that can't be a URI never reach the service.
    let Ok(mut request) = request else {
        return;
    };
    request.headers_mut().insert(
        header::AUTHORIZATION,
        format!("Bearer {KEY}").parse().expect("a header value"),
    );
    let response = service
        .runtime
        .block_on(service.app.clone().oneshot(request))
        .expect("the router is infallible");
    assert!(
        !response.status().is_server_error(),
        "{} answered to selector {selector}",
        response.status()
    );
});
