//! The HBase store's own checks; its check against an HBase 1.x Thrift server is in the
//! gateway crate (gateway/tests/hbase_store_v1.rs), which serves one.

use std::time::{Duration, Instant};

use super::row_store::table_missing;
use super::*;
use crate::api::RowStore;

#[test]
fn table_not_found_becomes_table_missing() {
    let err = table_missing(
        "user",
        "ns:user",
        StoreError::Rejected("org.apache.hadoop.hbase.TableNotFoundException: ns:user".into()),
    );
    let text = err.to_string();
    assert!(
        text.contains("`user`") && text.contains("ddl user"),
        "{text}"
    );
}

#[tokio::test]
async fn unreachable_server_fails_fast_then_the_breaker_opens() {
    // A port nobody listens on: connection refused at once.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut config = HbaseConfig::new(format!("127.0.0.1:{port}"));
    config.breaker_failures = 2;
    config.retries = 1;
    config.timeout = Duration::from_millis(1500);
    let store = HbaseStore::new(config, &[("user".into(), "user".into())]);
    let started = Instant::now();
    let err = store
        .get_rows("user", &[b"k".to_vec()], None)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert!(started.elapsed() < Duration::from_millis(1500));
    assert_eq!(store.breaker_state(), BreakerState::Open);
    let started = Instant::now();
    let err = store
        .get_rows("user", &[b"k".to_vec()], None)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("circuit breaker open"), "{err}");
    assert!(started.elapsed() < Duration::from_millis(50));
    // The health check says so too, naming the table.
    let err = store.health().await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
    assert!(err.to_string().contains("checking table `user`"), "{err}");
}
