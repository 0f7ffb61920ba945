//! Index work off the HTTP runtimes. Each HTTP thread is a single-threaded runtime that also
//! answers `/healthz` and `/readyz`: a lookup that walks thousands of matches (a one-character
//! name prefix, a phone tail, a common name, a batch of 1000 values) takes milliseconds of CPU,
//! and run inline it would hold every request queued behind it on that thread, probes included.
//! Such work runs on tokio's blocking pool instead, at most one task per CPU at once (more would
//! only add context switches); the requests waiting for a slot wait asynchronously, so their HTTP
//! thread keeps answering. A lookup of one phone or idcard is a term probe of microseconds and
//! stays inline: handing it to another thread would cost more than it does.

use std::sync::Arc;

use hbidx_indexer::{Condition, ConditionOp};
use hbidx_schema::config::FieldKind;
use tokio::sync::Semaphore;

use crate::{ApiError, SharedState};

/// The slots of [`run`]: one per CPU this process may use.
pub(crate) fn permits() -> Arc<Semaphore> {
    let cpus = std::thread::available_parallelism().map_or(2, usize::from);
    Arc::new(Semaphore::new(cpus.max(1)))
}

/// Whether a lookup with these conditions is microseconds of index work: every condition an
/// exact phone or idcard, values that name one row or a few.
pub(crate) fn is_point_lookup(conditions: &[Condition]) -> bool {
    !conditions.is_empty()
        && conditions.iter().all(|condition| {
            matches!(condition.op, ConditionOp::Exact(_))
                && matches!(condition.kind, FieldKind::Phone | FieldKind::Idcard)
        })
}

/// Runs `work` on the blocking pool once a slot is free. The slot goes with the work, not with
/// the request: a client that hangs up can't free it while its walk still runs.
pub(crate) async fn run<T, F>(state: &SharedState, work: F) -> Result<T, ApiError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
{
    let slot = state
        .index_permits
        .clone()
        .acquire_owned()
        .await
        .map_err(|_| ApiError::Internal("the index work slots are closed".into()))?;
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        work()
    })
    .await
    .map_err(|err| ApiError::Internal(format!("index work: {err}")))?
}
