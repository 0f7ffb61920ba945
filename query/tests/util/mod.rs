//! The router in process, over one table with one indexed row: shared by the query crate's
//! integration tests.

#![allow(dead_code)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use hbidx_indexer::{CHANGE_FEED, WriterOptions, open_table_index};
use hbidx_query::AppState;
use hbidx_query::TableRuntime;
use hbidx_query::auth::Auth;
use hbidx_schema::model::{CellOp, Mutation};
use hbidx_store::{EmbeddedStore, MeteredStore, RowStore};
use http_body_util::BodyExt;
use tower::ServiceExt;

pub const PHONE: &str = "13800138000";
/// The API key of every state built here: every scope, the internal routes' `cluster` one
/// included (a configured key may have them all; only the command line's are narrower).
pub const KEY: &str = "hbidx_aGJpZHggcXVlcnkgY3JhdGUgdGVzdCBrZXkuLi4uLi4";

/// One table with one indexed row (u1, PHONE) in the store and the committed index.
pub async fn state(dir: &std::path::Path) -> AppState {
    let config =
        hbidx_schema::parse_config(include_str!("../../../deploy/config/hbidx.toml")).unwrap();
    let table = Arc::new(config.table("user").unwrap().clone());
    let store = Arc::new(EmbeddedStore::open(&dir.join("store"), &["user".into()]).unwrap());
    let (mut writer, searcher) =
        open_table_index(&dir.join("index"), table.clone(), &WriterOptions::default()).unwrap();
    let put = Mutation {
        table: "user".into(),
        rowkey: table.rowkey.encode("u1").unwrap(),
        ops: vec![CellOp::Put {
            column: "info:phone".into(),
            ts: 1,
            value: PHONE.as_bytes().to_vec(),
        }],
    };
    writer.apply(&put, CHANGE_FEED, 0, 1).unwrap();
    let checkpoint = writer.commit().unwrap();
    store.mutate(vec![put]).await.unwrap();
    let (_tx, indexed) = tokio::sync::watch::channel(checkpoint);
    let row_store: Arc<dyn RowStore> = Arc::new(MeteredStore::new(store, "embedded"));
    let entry = format!(
        "[[security.keys]]\nid = \"test\"\nsha256 = \"{}\"\nscopes = [\"lookup\", \"write\", \"admin\", \"cluster\"]\n",
        hex::encode(hbidx_query::auth::hash_key(KEY))
    );
    let security = hbidx_schema::parse_config(&entry).unwrap().security;
    AppState::new(
        row_store,
        vec![TableRuntime {
            config: table,
            searcher,
            indexed,
            stats: Default::default(),
            publisher: None,
        }],
    )
    .with_auth(Auth::new(&security))
}

/// A GET with the all-scopes key.
pub async fn call(router: &axum::Router, uri: &str) -> (StatusCode, String) {
    send(
        router,
        Request::get(uri)
            .header("authorization", format!("Bearer {KEY}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

pub async fn send(router: &axum::Router, request: Request<Body>) -> (StatusCode, String) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}
