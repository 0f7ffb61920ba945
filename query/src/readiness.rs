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
