//! Jobs run on the process's background runtime, not on the HTTP thread's: a verify started
//! through the router on a current-thread runtime (as each HTTP thread is) reads the store from
//! the background runtime's threads only.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use hbidx_query::app;
use hbidx_schema::model::Mutation;
use hbidx_store::{Row, RowStore, ScanBatch, ScanRequest, WriteReceipt};

mod util;

use util::{KEY, call, send, state};

/// The embedded store, noting the thread of every call.
struct ThreadNoting {
    inner: Arc<dyn RowStore>,
    threads: Arc<Mutex<Vec<String>>>,
}

impl ThreadNoting {
    fn note(&self) {
        let name = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        self.threads.lock().unwrap().push(name);
    }
}

#[async_trait]
impl RowStore for ThreadNoting {
    async fn get_rows(
        &self,
        table: &str,
        rowkeys: &[Vec<u8>],
        columns: Option<&[String]>,
    ) -> hbidx_store::Result<Vec<Option<Row>>> {
        self.note();
        self.inner.get_rows(table, rowkeys, columns).await
    }

    async fn scan(&self, table: &str, request: &ScanRequest) -> hbidx_store::Result<ScanBatch> {
        self.note();
        self.inner.scan(table, request).await
    }

    async fn mutate(&self, mutations: Vec<Mutation>) -> hbidx_store::Result<WriteReceipt> {
        self.note();
        self.inner.mutate(mutations).await
    }

    fn tables(&self) -> Vec<String> {
        self.inner.tables()
    }
}

#[test]
fn a_verify_job_runs_on_the_background_runtime() {
    let background = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("background-test")
        .enable_all()
        .build()
        .unwrap();
    let http = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let threads = http.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let mut state = state(dir.path()).await;
        let threads = Arc::new(Mutex::new(Vec::new()));
        state.store = Arc::new(ThreadNoting {
            inner: state.store.clone(),
            threads: threads.clone(),
        });
        let router = app(Arc::new(state.with_background(background.handle().clone())));
        let start = Request::post("/v1/tables/user/verify")
            .header("authorization", format!("Bearer {KEY}"))
            .header("content-type", "application/json")
            .body(Body::from(r#"{"full": true}"#))
            .unwrap();
        let (status, body) = send(&router, start).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        let job: serde_json::Value = serde_json::from_str(&body).unwrap();
        let url = format!("/v1/jobs/{}", job["id"]);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (_, body) = call(&router, &url).await;
            let job: serde_json::Value = serde_json::from_str(&body).unwrap();
            if job["state"] != "running" {
                assert_eq!(job["state"], "succeeded", "{job}");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{job}");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        threads
    });
    let threads = threads.lock().unwrap();
    assert!(!threads.is_empty(), "the verify read the store");
    assert!(
        threads.iter().all(|name| name == "background-test"),
        "store calls from {threads:?}"
    );
}
