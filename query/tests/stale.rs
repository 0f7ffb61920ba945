//! Every returned row is re-checked against the lookup: an index entry whose row no longer
//! matches (or no longer exists) is dropped from the answer and counted.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use hbidx_indexer::{CHANGE_FEED, WriterOptions, open_table_index};
use hbidx_query::auth::{Auth, SecurityConfig};
use hbidx_query::{AppState, TableRuntime, app};
use hbidx_schema::model::{CellOp, Mutation};
use hbidx_store::{EmbeddedStore, RowStore};
use http_body_util::BodyExt;
use tower::ServiceExt;

#[tokio::test]
async fn stale_index_hits_are_dropped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        hbidx_schema::parse_config(include_str!("../../deploy/config/hbidx.toml")).unwrap();
    let table = Arc::new(config.table("user").unwrap().clone());
    let store = Arc::new(
        EmbeddedStore::open(&dir.path().join("store"), std::slice::from_ref(&table.name)).unwrap(),
    );
    let (mut writer, searcher) = open_table_index(
        &dir.path().join("index"),
        table.clone(),
        &WriterOptions::default(),
    )
    .unwrap();
    let put = |key: &str, phone: &str| Mutation {
        table: table.name.clone(),
        rowkey: table.rowkey.encode(key).unwrap(),
        ops: vec![CellOp::Put {
            column: "info:phone".into(),
            ts: 1,
            value: phone.as_bytes().to_vec(),
        }],
    };
    // The index believes u1 and u2 have this phone; behind its back the store has u1 with a
    // different phone and no u2 at all.
    writer
        .apply(&put("u1", "13800138000"), CHANGE_FEED, 0, 1)
        .unwrap();
    writer
        .apply(&put("u2", "13800138000"), CHANGE_FEED, 0, 2)
        .unwrap();
    writer
        .apply(&put("u3", "13800138000"), CHANGE_FEED, 0, 3)
        .unwrap();
    let checkpoint = writer.commit().unwrap();
    store
        .mutate(vec![put("u1", "13999999999"), put("u3", "13800138000")])
        .await
        .unwrap();

    let (_tx, indexed) = tokio::sync::watch::channel(checkpoint);
    let key = hbidx_query::auth::generate_key();
    let mut security = SecurityConfig::default();
    security
        .add_plaintext_key("test", &key, "test key")
        .unwrap();
    let row_store: Arc<dyn RowStore> = store.clone();
    let state = Arc::new(
        AppState::new(
            row_store,
            vec![TableRuntime {
                config: table.clone(),
                searcher,
                indexed,
                stats: Default::default(),
                publisher: None,
            }],
        )
        .with_auth(Auth::new(&security)),
    );
    let response = app(state.clone())
        .oneshot(
            Request::get("/v1/tables/user/rows?phone=13800138000")
                .header("authorization", format!("Bearer {key}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body: serde_json::Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["count"], 1, "{body}");
    assert_eq!(body["rows"][0]["key"], "u3");
    assert_eq!(body["dropped_stale"], 2);
    assert_eq!(
        state
            .counters
            .stale_dropped
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
}
