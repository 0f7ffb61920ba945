//! Readiness (`GET /readyz`): whether the row store can serve every table, as the store's own
//! [`health`](hbidx_store::RowStore::health) check says (HBase: reachable, each table present
//! and enabled).
//!
//! The check runs on a background task, at start and then every [`CHECK_INTERVAL`], and
//! `/readyz` answers from its last result: a probe never waits on HBase, and however many
//! probes (and pods) there are, each instance sends HBase one check per interval. Until the
//! first result exists (a state built without the task, as in tests), `/readyz` runs the check
//! itself.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use crate::{ApiError, AppState, SharedState};

/// How often the store's health is checked.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// The last health check's result: `Err` holds the reason, naming the store and the table.
#[derive(Debug, Default)]
pub struct Readiness {
    last: Mutex<Option<Result<(), String>>>,
}

impl Readiness {
    fn get(&self) -> Option<Result<(), String>> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Stores a result; returns the previous one.
    fn set(&self, result: Result<(), String>) -> Option<Result<(), String>> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(result)
    }
}

/// One health check of the state's store, recorded.
async fn check(state: &AppState) -> Result<(), String> {
    let result = state
        .store
        .health()
        .await
        .map_err(|err| format!("row store \"{}\": {err}", state.store_name));
    let previous = state.readiness.set(result.clone());
    // Transitions only: a down store is logged once, not every interval.
    match (&previous, &result) {
        (Some(Ok(())) | None, Err(reason)) => {
            tracing::warn!(reason = %reason, "not ready");
        }
        (Some(Err(_)), Ok(())) => tracing::info!("ready again: the row store answers"),
        _ => {}
    }
    result
}

/// Starts the background check; it stops by itself once the state is dropped.
pub fn spawn_checker(state: &SharedState) -> tokio::task::JoinHandle<()> {
    let weak: Weak<AppState> = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(CHECK_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let Some(state) = weak.upgrade() else {
                return;
            };
            // A check is bounded by the store's own short deadline.
            let _result = check(&state).await;
        }
    })
}

/// `/readyz`'s answer.
pub(crate) async fn ready(state: &AppState) -> Result<(), ApiError> {
    let result = match state.readiness.get() {
        Some(result) => result,
        None => check(state).await,
    };
    result.map_err(|reason| ApiError::NotReady { reason })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use hbidx_schema::model::Mutation;
    use hbidx_store::{Row, RowStore, ScanBatch, ScanRequest, StoreError, WriteReceipt};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    /// A store whose health is switched by the test, counting checks.
    #[derive(Default)]
    struct Switched {
        down: AtomicBool,
        checks: AtomicU64,
    }

    #[async_trait::async_trait]
    impl RowStore for Switched {
        async fn get_rows(
            &self,
            _table: &str,
            rowkeys: &[Vec<u8>],
            _columns: Option<&[String]>,
        ) -> hbidx_store::Result<Vec<Option<Row>>> {
            Ok(vec![None; rowkeys.len()])
        }

        async fn scan(
            &self,
            _table: &str,
            _request: &ScanRequest,
        ) -> hbidx_store::Result<ScanBatch> {
            Ok(ScanBatch::default())
        }

        async fn mutate(&self, _mutations: Vec<Mutation>) -> hbidx_store::Result<WriteReceipt> {
            Ok(WriteReceipt::default())
        }

        async fn health(&self) -> hbidx_store::Result<()> {
            self.checks.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) {
                return Err(StoreError::TableMissing {
                    table: "user".into(),
                    store_table: "prod:user".into(),
                });
            }
            Ok(())
        }

        fn tables(&self) -> Vec<String> {
            vec!["user".into()]
        }
    }

    async fn readyz(state: &SharedState) -> (StatusCode, String) {
        let response = crate::app(state.clone())
            .oneshot(Request::get("/readyz").body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn readyz_answers_from_the_last_check_and_names_the_store_and_table() {
        let store = Arc::new(Switched::default());
        let mut state = AppState::new(store.clone(), Vec::new());
        state.store_name = "hbase";
        let state = Arc::new(state);

        // No check yet: the probe runs one.
        assert_eq!(readyz(&state).await.0, StatusCode::OK);
        assert_eq!(store.checks.load(Ordering::SeqCst), 1);

        // Probes answer from the last result; only the checker asks the store again.
        store.down.store(true, Ordering::SeqCst);
        assert_eq!(readyz(&state).await.0, StatusCode::OK);
        assert_eq!(store.checks.load(Ordering::SeqCst), 1);
        assert!(check(&state).await.is_err());
        let (status, body) = readyz(&state).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["code"], "not_ready");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("row store \"hbase\"") && message.contains("`prod:user`"),
            "{message}"
        );

        store.down.store(false, Ordering::SeqCst);
        assert!(check(&state).await.is_ok());
        assert_eq!(readyz(&state).await.0, StatusCode::OK);
        assert_eq!(store.checks.load(Ordering::SeqCst), 3);
    }
}
