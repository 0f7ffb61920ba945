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

/// A Thrift server whose reply claims a list of 2^31 - 1 rows: the client refuses the claim
/// before allocating for it (the generated code would ask for ~100 GB and abort the process)
/// and the call fails with an error.
#[tokio::test]
async fn a_reply_claiming_a_huge_list_is_an_error_not_an_abort() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            // The request's strict binary header: version and type, name, sequence id.
            let mut word = [0u8; 4];
            if stream.read_exact(&mut word).is_err() || stream.read_exact(&mut word).is_err() {
                continue;
            }
            let mut name = vec![0u8; u32::from_be_bytes(word) as usize];
            let mut seq = [0u8; 4];
            if stream.read_exact(&mut name).is_err() || stream.read_exact(&mut seq).is_err() {
                continue;
            }
            let mut reply = vec![0x80, 0x01, 0x00, 0x02];
            reply.extend_from_slice(&(name.len() as i32).to_be_bytes());
            reply.extend_from_slice(&name);
            reply.extend_from_slice(&seq);
            // Field 0 (success), a list of structs claiming i32::MAX elements.
            reply.extend_from_slice(&[15, 0, 0, 12]);
            reply.extend_from_slice(&i32::MAX.to_be_bytes());
            let _ = stream.write_all(&reply);
            let _ = stream.flush();
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let mut config = HbaseConfig::new(addr.to_string());
    config.retries = 0;
    config.breaker_failures = 100;
    config.timeout = Duration::from_secs(2);
    let store = HbaseStore::new(config, &[("user".into(), "user".into())]);
    for columns in [None, Some(vec!["info:phone".to_string()])] {
        let err = store
            .get_rows("user", &[b"k".to_vec()], columns.as_deref())
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(!text.is_empty(), "{err:?}");
    }
}
