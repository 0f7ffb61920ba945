//! `?wait=indexed`: read-your-writes. A write answers only once this instance's index has it.
//!
//! What a write waits on depends on where it went. Through the change feed or the table's Kafka
//! topic it landed at offsets, and the wait ends when the table's published index checkpoint
//! covers them. To HBase it has no offset here: the same mutation was handed to this instance's
//! indexer through the table's repair queue, which answered with a ticket, and the wait ends
//! when the index commit covering that ticket is searchable (the cluster's internal apply route
//! waits on tickets the same way). Either wait gives up after `Limits::index_wait` (504), or
//! early when the index volume fills up (507): the commit it waits for would never come.

use std::sync::atomic::Ordering;

use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::{ApiError, SharedState, TableRuntime};

/// `?wait=` of a write.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct WriteParams {
    /// `stored` (the default) answers once the store (or the table's Kafka topic) has the
    /// write; `indexed` once this instance's index has it too (read-your-writes).
    #[param(inline)]
    wait: Option<WaitFor>,
}

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum WaitFor {
    Stored,
    Indexed,
}

pub(crate) fn wants_indexed(pairs: &[(String, String)]) -> Result<bool, ApiError> {
    let mut wait = false;
    for (name, value) in pairs {
        match (name.as_str(), value.as_str()) {
            ("wait", "indexed") => wait = true,
            ("wait", "stored") => wait = false,
            ("wait", _) => return Err(ApiError::bad_request("wait", "must be indexed or stored")),
            (other, _) => return Err(ApiError::bad_request(other, "unknown parameter")),
        }
    }
    Ok(wait)
}

/// Where a write landed: `(source name, partition, offset)`.
pub(crate) type Landed = (String, i32, i64);

/// What a write left for `?wait=indexed` to wait on.
#[derive(Debug, Default)]
pub(crate) struct Written {
    /// Positions in the change feed or the table's topic.
    pub(crate) landed: Vec<Landed>,
    /// With the rows in HBase: the repair-queue ticket of the write's local apply; `None` when
    /// the queue was full and the write was left to replication and verify.
    pub(crate) ticket: Option<u64>,
    /// The write went to HBase.
    pub(crate) hbase: bool,
    /// On a sharded tier: some of the write was for this instance's own index (else it all
    /// went to other shards, and `ticket` is not waited for).
    pub(crate) local: bool,
    /// On a sharded tier: why a shard owning part of the write took none of it (no replica
    /// answered); `?wait=indexed` reports it.
    pub(crate) forward_error: Option<String>,
}

/// Whether the index commit covering repair-queue `ticket` (a write applied through the queue)
/// happens within `limit`.
pub(crate) async fn ticket_indexed(
    runtime: &TableRuntime,
    ticket: u64,
    limit: std::time::Duration,
) -> bool {
    let mut committed = runtime.stats.repairs.committed_tickets();
    matches!(
        tokio::time::timeout(limit, committed.wait_for(|at| *at >= ticket)).await,
        Ok(Ok(_))
    )
}

/// Returns once the table's indexer has failed for lack of space on its volume after this
/// call started: an attempt that included the write, or came after it, failed, so waiting on
/// only ends in a timeout. A flag left from before (a full volume with nothing to commit since)
/// is not enough.
async fn index_volume_full(runtime: &TableRuntime) {
    let stats = &runtime.stats;
    let seen = stats.storage_full_failures.load(Ordering::Relaxed);
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if stats.storage_full.load(Ordering::Relaxed)
            && stats.storage_full_failures.load(Ordering::Relaxed) > seen
        {
            return;
        }
    }
}

pub(crate) async fn wait_indexed(
    state: &SharedState,
    runtime: &TableRuntime,
    written: &Written,
) -> Result<(), ApiError> {
    let at = if written.hbase {
        "in HBase".to_owned()
    } else {
        format!(
            "(offset {})",
            written.landed.last().map_or(0, |(_, _, offset)| *offset)
        )
    };
    tokio::select! {
        waited = wait_indexed_or_timeout(state, runtime, written) => waited,
        () = index_volume_full(runtime) => Err(ApiError::IndexFull { detail: at }),
    }
}

async fn wait_indexed_or_timeout(
    state: &SharedState,
    runtime: &TableRuntime,
    written: &Written,
) -> Result<(), ApiError> {
    let limit = state.limits.index_wait;
    let timed_out = |at: String| ApiError::IndexWaitTimeout {
        detail: format!(
            "({at}) but was not searchable within {} ms",
            limit.as_millis()
        ),
    };
    if let Some(error) = &written.forward_error {
        return Err(ApiError::IndexWaitTimeout {
            detail: format!("in HBase, but the shard that indexes it did not take it: {error}"),
        });
    }
    if written.hbase && !written.local {
        // Forwarded with wait=indexed: every shard that took it has it searchable.
        return Ok(());
    }
    if written.hbase {
        let Some(ticket) = written.ticket else {
            return Err(ApiError::IndexWaitTimeout {
                detail: "in HBase, but this instance's indexer has too many queued changes to take it now; HBase replication or the next verify brings it into the index".to_owned(),
            });
        };
        return match ticket_indexed(runtime, ticket, limit).await {
            true => Ok(()),
            false => Err(timed_out("in HBase".to_owned())),
        };
    }
    let landed = &written.landed;
    let mut indexed = runtime.indexed.clone();
    let waited = tokio::time::timeout(
        limit,
        indexed.wait_for(|checkpoint| {
            landed.iter().all(|(source, partition, offset)| {
                checkpoint
                    .position(source, *partition)
                    .is_some_and(|at| at >= *offset)
            })
        }),
    )
    .await;
    match waited {
        Ok(Ok(_)) => Ok(()),
        _ => Err(timed_out(format!(
            "offset {}",
            landed.last().map_or(0, |(_, _, offset)| *offset)
        ))),
    }
}
