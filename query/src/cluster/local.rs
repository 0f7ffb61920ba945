//! This shard's own answers, from this instance alone: its hits for a lookup or a batch, and
//! its status. The fan-out uses them for its own shard in process; the internal routes
//! (query/src/internal.rs) serve them to the other instances.

use std::sync::atomic::Ordering;

use super::peers::{BatchShardHits, ShardHits};
use crate::lookup::{
    BatchLookupRequest, BatchPlan, RowsQuery, answered_by_index, kept_rows,
    local_batch_hits as local_batch_rowkeys,
};
use crate::{ApiError, SharedState, TableRuntime};

/// This instance's hits for a parsed lookup, with the kept rows when the answer comes from the
/// index.
pub(crate) async fn local_hits(
    state: &SharedState,
    runtime: &TableRuntime,
    query: &RowsQuery,
) -> Result<ShardHits, ApiError> {
    let page = crate::lookup::index_page(state, runtime, query).await?;
    let from_index = !query.index_only
        && answered_by_index(
            &runtime.config,
            query.has_blind_condition(),
            query.columns.as_deref(),
            query.consistency,
        );
    let kept = if from_index && !page.rowkeys.is_empty() {
        Some(kept_rows(runtime, page.rowkeys.clone()).await?)
    } else {
        None
    };
    Ok(ShardHits {
        rowkeys: page.rowkeys,
        has_more: page.has_more,
        kept,
    })
}

/// This instance's hits for every value of a checked batch.
pub(crate) async fn local_batch_hits(
    state: &SharedState,
    runtime: &TableRuntime,
    request: &BatchLookupRequest,
    plan: &BatchPlan<'_>,
) -> Result<BatchShardHits, ApiError> {
    let with_kept = plan.answered_from_index(runtime, request) && !request.index_only;
    let mut values = Vec::with_capacity(request.values.len());
    for rowkeys in local_batch_rowkeys(state, runtime, plan).await? {
        let Some(rowkeys) = rowkeys else {
            values.push(None);
            continue;
        };
        let kept = if with_kept && !rowkeys.is_empty() {
            Some(kept_rows(runtime, rowkeys.clone()).await?)
        } else {
            None
        };
        values.push(Some(ShardHits {
            rowkeys,
            has_more: false,
            kept,
        }));
    }
    Ok(BatchShardHits { values })
}

pub(crate) fn local_status(state: &SharedState) -> serde_json::Value {
    let tables: serde_json::Map<String, serde_json::Value> = state
        .tables
        .iter()
        .map(|(name, table)| {
            let stats = &table.stats;
            let partitions = stats
                .partitions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let lag: Option<i64> = partitions
                .iter()
                .filter_map(|p| p.lag)
                .fold(None, |sum, lag| Some(sum.unwrap_or(0) + lag));
            (
                name.clone(),
                serde_json::json!({
                    "rows": stats.rows.load(Ordering::Relaxed),
                    "docs": stats.docs.load(Ordering::Relaxed),
                    "events": stats.events.load(Ordering::Relaxed),
                    "lag": lag,
                    "last_commit_ms": stats.last_commit_ms.load(Ordering::Relaxed),
                }),
            )
        })
        .collect();
    let (shard, replica) = state.peers.as_ref().map_or((None, None), |peers| {
        let (shard, replica) = peers.own();
        (Some(shard), Some(replica))
    });
    serde_json::json!({ "shard": shard, "replica": replica, "tables": tables })
}
