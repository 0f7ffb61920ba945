//! The routes other instances of the tier call (`/v1/internal/...`, the `cluster` scope):
//! this shard's index hits, forwarded writes and repairs, and its status. They answer from this
//! instance alone and never fan out again.

use std::sync::atomic::Ordering;

use axum::extract::{Path, State};
use axum::{Extension, Json};
use hbidx_indexer::{diff_row, kept_columns};
use hbidx_schema::model::Mutation;
use hbidx_store::now_ms;

use super::peers::{Applied, BatchShardHits, RepairRequest, ShardHits};
use crate::auth::Caller;
use crate::extract::{ApiJson, QueryPairs};
use crate::lookup::{
    BatchLookupRequest, BatchPlan, RowsQuery, answered_by_index, batch_plan, kept_rows,
    local_batch_hits as local_batch_rowkeys, parse_rows_query,
};
use crate::lookup::{audit_lookup, audit_param_kinds};
use crate::{ApiError, SharedState, TableRuntime};

/// This instance's hits for a parsed lookup, with the kept rows when the answer comes from the
/// index.
pub(crate) async fn local_hits(
    runtime: &TableRuntime,
    query: &RowsQuery,
) -> Result<ShardHits, ApiError> {
    let page = runtime
        .searcher
        .lookup(&query.conditions, query.limit, query.cursor.as_deref())?;
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
    runtime: &TableRuntime,
    request: &BatchLookupRequest,
    plan: &BatchPlan<'_>,
) -> Result<BatchShardHits, ApiError> {
    let with_kept = plan.answered_from_index(runtime, request) && !request.index_only;
    let mut values = Vec::with_capacity(request.values.len());
    for rowkeys in local_batch_rowkeys(runtime, plan)? {
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

/// This shard's index hits for a lookup: the caller's parameters, in the body as `[name,
/// value]` pairs (never in the URL, which proxies and meshes log), answered from this
/// instance's index alone.
#[utoipa::path(
    post,
    path = "/v1/internal/tables/{table}/hits",
    tag = "cluster",
    params(("table" = String, Path, description = "Table name")),
    request_body(content = Vec<Vec<String>>, description = "The lookup's parameters as [name, value] pairs, in the caller's order"),
    security(("api_key" = ["cluster"])),
    responses(
        (status = 200, description = "This shard's hits", body = ShardHits),
        (status = 400, description = "A parameter is wrong; `field` names it", body = crate::ErrorResponse),
        (status = 404, description = "No such table", body = crate::ErrorResponse),
    )
)]
pub(crate) async fn hits(
    State(state): State<SharedState>,
    caller: Option<Extension<Caller>>,
    Path(table_name): Path<String>,
    pairs: Result<ApiJson<Vec<(String, String)>>, ApiError>,
) -> Result<Json<ShardHits>, ApiError> {
    let ApiJson(pairs) = pairs?;
    let result = async {
        let runtime = state.table(&table_name)?;
        let query = parse_rows_query(runtime, &pairs, &state.limits)?;
        local_hits(runtime, &query).await
    }
    .await;
    // Audited like a lookup: the hits can carry whole kept rows.
    let runtime = state.tables.get(&table_name);
    let (kinds, values) = runtime.map_or_else(
        || (Vec::new(), 0),
        |runtime| audit_param_kinds(&runtime.config, &pairs),
    );
    audit_lookup(
        caller.as_deref(),
        "internal_hits",
        runtime,
        &kinds,
        values,
        &result,
        |hits| hits.rowkeys.len(),
    );
    result.map(Json)
}

/// This shard's index hits for a batch lookup, per value.
#[utoipa::path(
    post,
    path = "/v1/internal/tables/{table}/batch-hits",
    tag = "cluster",
    params(("table" = String, Path, description = "Table name")),
    request_body = BatchLookupRequest,
    security(("api_key" = ["cluster"])),
    responses(
        (status = 200, description = "This shard's hits per value", body = BatchShardHits),
        (status = 400, description = "The body is wrong; `field` names what", body = crate::ErrorResponse),
        (status = 404, description = "No such table", body = crate::ErrorResponse),
    )
)]
pub(crate) async fn batch_hits(
    State(state): State<SharedState>,
    Path(table_name): Path<String>,
    request: Result<ApiJson<BatchLookupRequest>, ApiError>,
) -> Result<Json<BatchShardHits>, ApiError> {
    let ApiJson(request) = request?;
    let runtime = state.table(&table_name)?;
    let plan = batch_plan(runtime, &request, &state.limits)?;
    Ok(Json(local_batch_hits(runtime, &request, &plan).await?))
}

/// Mutations another instance wrote to the store, for this shard's index: submitted to the
/// table's repair queue like a write through this instance; `?wait=indexed` answers once the
/// index commit covering them is searchable.
#[utoipa::path(
    post,
    path = "/v1/internal/tables/{table}/apply",
    tag = "cluster",
    params(
        ("table" = String, Path, description = "Table name"),
        ("wait" = Option<String>, Query, description = "`indexed`: answer once searchable"),
    ),
    request_body(content = Vec<Object>, description = "The mutations, as written to the store"),
    security(("api_key" = ["cluster"])),
    responses(
        (status = 200, description = "Taken (and indexed, with wait=indexed)", body = Applied),
        (status = 400, description = "A mutation is of another table or outside this shard", body = crate::ErrorResponse),
        (status = 404, description = "No such table", body = crate::ErrorResponse),
        (status = 504, description = "Not indexed within the wait limit", body = crate::ErrorResponse),
    )
)]
pub(crate) async fn apply(
    State(state): State<SharedState>,
    caller: Option<Extension<Caller>>,
    Path(table_name): Path<String>,
    QueryPairs(pairs): QueryPairs,
    mutations: Result<ApiJson<Vec<Mutation>>, ApiError>,
) -> Result<Json<Applied>, ApiError> {
    let mut rows = 0;
    let result = apply_mutations(&state, &table_name, &pairs, mutations, &mut rows).await;
    let key = caller.as_deref().map_or("-", |caller| &*caller.key_id);
    let table = state
        .tables
        .get(&table_name)
        .map_or("-", |runtime| runtime.config.name.as_str());
    let status = result
        .as_ref()
        .map_or_else(|err| err.status().as_u16(), |_| 200);
    tracing::info!(target: "audit", key, operation = "internal_apply", table, rows, status, "write");
    result.map(Json)
}

/// [`apply`]'s work; `rows` is set to the number of mutations taken, for the audit line.
///
/// A peer's mutations are not indexed as sent: each must be of this table and shard, with cell
/// timestamps bounded like a PUT's, and then the rows are read back from the store and what the
/// index gets is the store's state (the repair [`diff_row`] computes). A holder of the cluster
/// key can make this shard re-read rows, never index a value the store doesn't have.
async fn apply_mutations(
    state: &SharedState,
    table_name: &str,
    pairs: &[(String, String)],
    mutations: Result<ApiJson<Vec<Mutation>>, ApiError>,
    rows: &mut usize,
) -> Result<Applied, ApiError> {
    let ApiJson(mutations) = mutations?;
    let runtime = state.table(table_name)?;
    let wait = crate::index_wait::wants_indexed(pairs)?;
    let range = state.own_range(table_name);
    let now = now_ms();
    for (index, mutation) in mutations.iter().enumerate() {
        if mutation.table != runtime.config.name {
            return Err(ApiError::bad_request(
                format!("[{index}].table"),
                format!("is not \"{}\"", runtime.config.name),
            ));
        }
        if !super::in_range(range.as_ref(), &mutation.rowkey) {
            return Err(ApiError::bad_request(
                format!("[{index}].rowkey"),
                "is outside this shard's range: do the instances share one [cluster] layout?",
            ));
        }
        for (op, cell) in mutation.ops.iter().enumerate() {
            crate::write::check_cell_ts(&format!("[{index}].ops[{op}].ts"), cell.ts(), now)?;
        }
    }
    *rows = mutations.len();
    let mut rowkeys: Vec<Vec<u8>> = mutations.into_iter().map(|m| m.rowkey).collect();
    rowkeys.sort();
    rowkeys.dedup();
    let columns = kept_columns(&runtime.config);
    let stored = state
        .store
        .get_rows(&runtime.config.name, &rowkeys, Some(&columns))
        .await?;
    let mut ticket = None;
    for (rowkey, row) in rowkeys.iter().zip(stored) {
        let indexed = runtime.searcher.committed_state(rowkey)?;
        let Some(drift) = diff_row(&runtime.config, rowkey, indexed.as_ref(), row.as_ref()) else {
            // The index has the store's state already (the topic's copy came first).
            continue;
        };
        ticket = runtime.stats.repairs.submit(drift.repair);
        if ticket.is_none() {
            return Err(ApiError::IndexWaitTimeout {
                detail:
                    "in HBase, but this shard's indexer has too many queued changes to take it now"
                        .into(),
            });
        }
    }
    if let (true, Some(ticket)) = (wait, ticket) {
        let limit = state.limits.index_wait;
        if !crate::index_wait::ticket_indexed(runtime, ticket, limit).await {
            return Err(ApiError::IndexWaitTimeout {
                detail: format!(
                    "in HBase, but was not searchable in this shard within {} ms",
                    limit.as_millis()
                ),
            });
        }
    }
    Ok(Applied { indexed: wait })
}

/// Rowkeys another instance found stale in this shard: re-read from the store and repaired
/// here in the background.
#[utoipa::path(
    post,
    path = "/v1/internal/tables/{table}/repair",
    tag = "cluster",
    params(("table" = String, Path, description = "Table name")),
    request_body = RepairRequest,
    security(("api_key" = ["cluster"])),
    responses(
        (status = 200, description = "Repair scheduled", body = Object),
        (status = 400, description = "The body is wrong", body = crate::ErrorResponse),
        (status = 404, description = "No such table", body = crate::ErrorResponse),
    )
)]
pub(crate) async fn repair(
    State(state): State<SharedState>,
    Path(table_name): Path<String>,
    request: Result<ApiJson<RepairRequest>, ApiError>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let ApiJson(request) = request?;
    let runtime = state.table(&table_name)?;
    let range = state.own_range(&table_name);
    let rowkeys: Vec<Vec<u8>> = request
        .rowkeys
        .into_iter()
        .filter(|rowkey| super::in_range(range.as_ref(), rowkey))
        .collect();
    let scheduled = rowkeys.len();
    crate::read_repair::schedule_local(&state, runtime, rowkeys);
    Ok(Json(serde_json::json!({ "scheduled": scheduled })))
}

/// This instance's shard and, per table, its index counts and lag (what `GET /v1/cluster`
/// shows for it).
#[utoipa::path(
    get,
    path = "/v1/internal/status",
    tag = "cluster",
    security(("api_key" = ["cluster"])),
    responses((status = 200, description = "This replica's shard status", body = Object))
)]
pub(crate) async fn shard_status(State(state): State<SharedState>) -> Json<serde_json::Value> {
    Json(local_status(&state))
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
