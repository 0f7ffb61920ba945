//! Read repair: an index hit whose fetched row no longer matches (or no longer exists) is
//! dropped from the answer, and the row is re-read from the store in the background and handed
//! to the table's live indexer as a repair (indexer/src/drift.rs has the merge rules).
//!
//! The lookup only collects the rowkeys; the repair runs on its own task so the answer isn't
//! delayed. Repair tasks are bounded per process: under a drift storm the extra ones are skipped
//! and counted (the next lookup or `hbidx verify` finds the drift again).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hbidx_indexer::{diff_row, kept_columns};
use tokio::sync::Semaphore;

use crate::{SharedState, TableRuntime};

/// Repair tasks that may run at once.
pub const MAX_REPAIR_TASKS: usize = 4;

/// Schedules a background repair of `rowkeys` in `table`: here, or on a sharded tier in the
/// shard that indexes each row (a foreign row in this index would be a ghost).
pub(crate) fn schedule(state: &SharedState, runtime: &TableRuntime, rowkeys: Vec<Vec<u8>>) {
    let Some(peers) = &state.peers else {
        return schedule_local(state, runtime, rowkeys);
    };
    let (own, others) = crate::cluster::by_shard(peers, &runtime.config.name, rowkeys);
    schedule_local(state, runtime, own);
    for (shard, rowkeys) in others {
        let peers = peers.clone();
        let table = runtime.config.name.clone();
        state.spawn_background(async move {
            if let Err(err) = peers.repair(shard, &table, &rowkeys).await {
                tracing::warn!(table = %table, shard, rows = rowkeys.len(), error = %err, "read repair not handed to its shard");
            }
        });
    }
}

/// Schedules a background repair of `rowkeys` in this instance's index of `table`.
pub(crate) fn schedule_local(state: &SharedState, runtime: &TableRuntime, rowkeys: Vec<Vec<u8>>) {
    if rowkeys.is_empty() {
        return;
    }
    let Ok(permit) = state.repair_permits.clone().try_acquire_owned() else {
        state
            .counters
            .repairs_skipped
            .fetch_add(rowkeys.len() as u64, Ordering::Relaxed);
        return;
    };
    let task_state = state.clone();
    let table = runtime.config.name.clone();
    state.spawn_background(async move {
        let _permit = permit;
        if let Err(err) = repair(&task_state, &table, &rowkeys).await {
            // Rowkeys stay out of the log (some designs embed phone numbers); the count is enough.
            tracing::warn!(table = %table, rows = rowkeys.len(), error = %err, "read repair failed");
        }
    });
}

/// A string error is enough: a failed background repair is only logged.
async fn repair(state: &SharedState, table: &str, rowkeys: &[Vec<u8>]) -> Result<(), String> {
    let runtime = state
        .tables
        .get(table)
        .ok_or_else(|| format!("unknown table {table}"))?;
    let columns = kept_columns(&runtime.config);
    let rows = state
        .store
        .get_rows(table, rowkeys, Some(&columns))
        .await
        .map_err(|err| err.to_string())?;
    // The index's states: a term probe per segment each, for up to a page of rows, on the
    // blocking pool rather than the HTTP runtime this task was spawned on.
    let searcher = runtime.searcher.clone();
    let probed = rowkeys.to_vec();
    let states = tokio::task::spawn_blocking(move || {
        probed
            .iter()
            .map(|rowkey| searcher.committed_state(rowkey))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(|err| err.to_string())?
    .map_err(|err| err.to_string())?;
    for ((rowkey, row), indexed) in rowkeys.iter().zip(rows).zip(states) {
        let Some(drift) = diff_row(&runtime.config, rowkey, indexed.as_ref(), row.as_ref()) else {
            continue;
        };
        if runtime.stats.repairs.push(drift.repair) {
            state.counters.read_repairs.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("hbidx_read_repairs_total", "table" => table.to_string())
                .increment(1);
        }
    }
    Ok(())
}

pub(crate) fn permits() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(MAX_REPAIR_TASKS))
}
