//! The fan-out side of a sharded index tier (`[cluster]`, docs/operations/cluster.md).
//!
//! Every instance indexes one shard (a rowkey range of every table) and answers every lookup:
//! it asks one ready replica of each shard that can hold results for its index hits (its own
//! shard in process, the others over `/v1/internal/...`), merges them in rowkey order and reads
//! from HBase only the rows it returns. Shards are ranges, so the merge is a concatenation in
//! shard order and a cursor (the last rowkey of a page) rules out every shard below it.
//!
//! Writes through any instance go to HBase and then to the owning shard's replicas, so
//! `?wait=indexed` holds across the tier; stale hits go to the owning shard for read repair.

mod local;
mod peers;
mod status;

pub(crate) use local::{local_batch_hits, local_hits, local_status};
pub(crate) use peers::{Applied, BatchShardHits, RepairRequest, ShardHits};
pub use peers::{Peers, spawn_prober};
pub(crate) use status::{__path_cluster_status, cluster_status};

use futures_util::future::join_all;
use hbidx_indexer::LookupPage;
use hbidx_schema::config::KeyRange;
use hbidx_store::Row;

use crate::lookup::{BatchLookupRequest, RowsQuery};
use crate::{ApiError, SharedState, TableRuntime};

/// A lookup's hits gathered from every shard.
pub(crate) struct FannedHits {
    pub page: LookupPage,
    /// The rows as the shards' indexes keep them, aligned with `page.rowkeys`, when the lookup
    /// is answered from the index.
    pub kept: Option<Vec<Option<Row>>>,
    /// Shards left out under `partial=true` because no replica answered.
    pub missing: Vec<usize>,
}

/// The hits of a `GET .../rows` across the tier: the shards that can hold rows after the
/// cursor, asked at once, concatenated in shard order and cut at the limit.
pub(crate) async fn lookup_hits(
    state: &SharedState,
    peers: &Peers,
    runtime: &TableRuntime,
    pairs: &[(String, String)],
    query: &RowsQuery,
) -> Result<FannedHits, ApiError> {
    let table = &runtime.config.name;
    let shards: Vec<usize> = (0..peers.shard_count())
        .filter(|&shard| {
            query
                .cursor
                .as_deref()
                .is_none_or(|cursor| peers.range(table, shard).has_keys_after(cursor))
        })
        .collect();
    let calls = shards.iter().map(|&shard| async move {
        let answer = if peers.is_own(shard) {
            local_hits(state, runtime, query).await
        } else {
            peers.hits(shard, table, pairs).await
        };
        (shard, answer)
    });
    let answers = join_all(calls).await;
    let mut rowkeys = Vec::new();
    let mut kept: Option<Vec<Option<Row>>> = None;
    let mut has_more = false;
    let mut missing = Vec::new();
    for (shard, answer) in answers {
        let hits = match answer {
            Ok(hits) => hits,
            Err(err) if query.partial && err.is_shard_unavailable() => {
                missing.push(shard);
                continue;
            }
            Err(err) => return Err(err),
        };
        has_more |= hits.has_more;
        if let Some(rows) = hits.kept {
            kept.get_or_insert_with(Vec::new).extend(rows);
        }
        rowkeys.extend(hits.rowkeys);
    }
    if rowkeys.len() > query.limit {
        rowkeys.truncate(query.limit);
        if let Some(kept) = &mut kept {
            kept.truncate(query.limit);
        }
        has_more = true;
    }
    Ok(FannedHits {
        // Each shard bounded its own walk; the tier's cost is not one walk.
        page: LookupPage {
            rowkeys,
            has_more,
            walked: 0,
        },
        kept,
        missing,
    })
}

/// One value's rowkeys gathered from every shard, with the rows the shards' indexes keep when
/// the answer comes from the index.
pub(crate) type ValueHits = (Vec<Vec<u8>>, Option<Vec<Option<Row>>>);

/// Rowkeys of `table` by owning shard: this instance's own, then the others per shard.
pub(crate) type ByShard<T> = (Vec<T>, Vec<(usize, Vec<T>)>);

/// Per value of a batch lookup: rowkeys and kept rows gathered from every shard, cut at the
/// per-value limit.
pub(crate) struct FannedBatch {
    pub values: Vec<Option<ValueHits>>,
    pub missing: Vec<usize>,
}

/// The hits of a batch lookup across the tier: one call per shard with every value.
pub(crate) async fn batch_hits_of(
    state: &SharedState,
    peers: &Peers,
    runtime: &TableRuntime,
    request: &BatchLookupRequest,
    plan: &crate::lookup::BatchPlan<'_>,
) -> Result<FannedBatch, ApiError> {
    let per_value = plan.per_value;
    let partial = request.partial;
    let table = &runtime.config.name;
    let calls = (0..peers.shard_count()).map(|shard| async move {
        let answer = if peers.is_own(shard) {
            local_batch_hits(state, runtime, request, plan).await
        } else {
            peers.batch_hits(shard, table, request).await
        };
        (shard, answer)
    });
    let answers = join_all(calls).await;
    let mut values: Vec<Option<ValueHits>> = vec![None; request.values.len()];
    let mut missing = Vec::new();
    for (shard, answer) in answers {
        let batch = match answer {
            Ok(batch) => batch,
            Err(err) if partial && err.is_shard_unavailable() => {
                missing.push(shard);
                continue;
            }
            Err(err) => return Err(err),
        };
        if batch.values.len() != values.len() {
            return Err(ApiError::Internal(format!(
                "shard {shard} answered {} values for {}",
                batch.values.len(),
                values.len()
            )));
        }
        for (slot, hits) in values.iter_mut().zip(batch.values) {
            let Some(hits) = hits else { continue };
            let (rowkeys, kept) = slot.get_or_insert_with(|| (Vec::new(), None));
            let room = per_value.saturating_sub(rowkeys.len());
            let taken = hits.rowkeys.len().min(room);
            rowkeys.extend(hits.rowkeys.into_iter().take(taken));
            if let Some(rows) = hits.kept {
                kept.get_or_insert_with(Vec::new)
                    .extend(rows.into_iter().take(taken));
            }
        }
    }
    Ok(FannedBatch { values, missing })
}

/// Splits rowkeys of `table` by owning shard: this instance's own, and the others per shard.
pub(crate) fn by_shard(peers: &Peers, table: &str, rowkeys: Vec<Vec<u8>>) -> ByShard<Vec<u8>> {
    let mut own = Vec::new();
    let mut others: std::collections::BTreeMap<usize, Vec<Vec<u8>>> = Default::default();
    for rowkey in rowkeys {
        let shard = peers.shard_of(table, &rowkey);
        if peers.is_own(shard) {
            own.push(rowkey);
        } else {
            others.entry(shard).or_default().push(rowkey);
        }
    }
    (own, others.into_iter().collect())
}

/// Splits written mutations of `table` by owning shard: this instance's own, and the others
/// per shard.
pub(crate) fn split_mutations(
    peers: &Peers,
    table: &str,
    mutations: Vec<hbidx_schema::model::Mutation>,
) -> ByShard<hbidx_schema::model::Mutation> {
    let mut own = Vec::new();
    let mut others: std::collections::BTreeMap<usize, Vec<_>> = Default::default();
    for mutation in mutations {
        let shard = peers.shard_of(table, &mutation.rowkey);
        if peers.is_own(shard) {
            own.push(mutation);
        } else {
            others.entry(shard).or_default().push(mutation);
        }
    }
    (own, others.into_iter().collect())
}

/// Whether `range` (this instance's own, if any) holds `rowkey`.
pub(crate) fn in_range(range: Option<&KeyRange>, rowkey: &[u8]) -> bool {
    range.is_none_or(|range| range.contains(rowkey))
}
