//! The REST API's parsers of caller input, through the real router over a real embedded store
//! and index: the first byte picks the request (a lookup's query string, a batch lookup's
//! body, a write's body, an internal hits body), the rest is the caller's part. Whatever
//! arrives, the answer is not a server error.
#![no_main]

use std::sync::LazyLock;

use axum::body::Body;
use axum::http::{Request, header};
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

const KEY: &str = "hbidx_aGJpZHggZnV6eiB0YXJnZXQga2V5Li4uLi4uLi4uLi4";
/// The internal routes take only a key with the `cluster` scope.
const PEER_KEY: &str = "hbidx_aGJpZHggZnV6eiBwZWVycycga2V5Li4uLi4uLi4uLi4";

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
    security
        .add_cluster_key("fuzz-peers", PEER_KEY, "fuzz peers' key")
        .expect("the fuzz peers' key");
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
    let key = if selector % 4 == 3 { PEER_KEY } else { KEY };
    let request = match selector % 4 {
        0 => Request::get(format!("/v1/tables/user/rows?{text}")).body(Body::empty()),
        1 => Request::post("/v1/tables/user/rows:batch-lookup")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(rest.to_vec())),
        2 => Request::put("/v1/tables/user/rows/u00000001")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(rest.to_vec())),
        _ => Request::post("/v1/internal/tables/user/hits")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(rest.to_vec())),
    };
    // Bytes that can't be a URI never reach the service.
    let Ok(mut request) = request else {
        return;
    };
    request.headers_mut().insert(
        header::AUTHORIZATION,
        format!("Bearer {key}").parse().expect("a header value"),
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
