//! The routes other instances of a sharded tier call (`/v1/internal/...`, the `cluster` scope):
//! this shard's index hits, forwarded writes and repairs, and its status. They answer from this
//! instance alone (cluster/local.rs) and never fan out again: serving them is apart from the
//! fan-out client (query/src/cluster/), which only calls them.

use axum::extract::{Path, State};
use axum::{Extension, Json};
use hbidx_indexer::{diff_row, kept_columns};
use hbidx_schema::model::Mutation;
use hbidx_store::now_ms;

use crate::auth::Caller;
use crate::cluster::{
    Applied, BatchShardHits, RepairRequest, ShardHits, in_range, local_batch_hits, local_hits,
    local_status,
};
use crate::extract::{ApiJson, QueryPairs};
use crate::lookup::{
    BatchLookupRequest, audit_lookup, audit_param_kinds, batch_plan, parse_rows_query,
};
use crate::{ApiError, SharedState};

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
        let query = parse_rows_query(runtime, &pairs, &state.limits, &state.cursors)?;
        local_hits(&state, runtime, &query).await
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
    Ok(Json(
        local_batch_hits(&state, runtime, &request, &plan).await?,
    ))
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
        if !in_range(range.as_ref(), &mutation.rowkey) {
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
        .filter(|rowkey| in_range(range.as_ref(), rowkey))
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
