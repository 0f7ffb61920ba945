//! `GET /v1/tables/{table}/rows`, its body form `POST /v1/tables/{table}/rows:lookup`, and
//! `POST /v1/tables/{table}/rows:batch-lookup`.
//!
//! The handlers and the two lookup flows live here; the response shapes, query parsing, row
//! re-checks and audit/metrics each have a module of their own.

use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Extension;
use axum::extract::{Path, State};

use crate::auth::Caller;
use crate::extract::{ApiJson, JsonBody, QueryPairs};
use crate::{ApiError, SharedState};

mod audit;
mod batch;
mod cursor;
mod params;
mod response;
mod rows;

pub(crate) use audit::{audit_lookup, param_kinds as audit_param_kinds};
pub(crate) use batch::{BatchPlan, local_hits as local_batch_hits, plan as batch_plan};
pub(crate) use params::{RowsQuery, parse_columns, parse_rows_query};
pub use response::{BatchLookupRequest, BatchResponse, LookupParams, RowOut, RowsResponse, Source};
pub(crate) use rows::row_out;

use audit::{count_condition, param_kinds, record_dropped, record_hits};
use batch::batch_lookup_rows;
pub use cursor::{CursorKeySource, CursorSeal};
use params::resolve_field;
pub(crate) use rows::{answered_by_index, kept_rows};
use rows::{fetch_columns, index_only_row, row_matches};

/// Milliseconds since `started`, to the µs: a response's `took_ms`.
pub(crate) fn took_ms(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 1e6).round() / 1e3
}

/// Looks rows up by indexed field values: resolves them to rowkeys in the index, multi-gets the
/// rows from the store and re-checks each against the lookup. Several fields are ANDed. When
/// `columns` names only indexed and covered columns, the rows come from the index alone
/// (`"source": "index"`), unless `consistency=store`.
#[utoipa::path(
    get,
    path = "/v1/tables/{table}/rows",
    tag = "lookups",
    params(("table" = String, Path, description = "Table name"), LookupParams),
    security(("api_key" = ["lookup"])),
    responses(
        (status = 200, description = "A page of matching rows", body = RowsResponse),
        (status = 400, description = "A parameter is wrong; `field` names it", body = crate::ErrorResponse),
        (status = 404, description = "No such table", body = crate::ErrorResponse),
        (status = 503, description = "The row store can't be reached", body = crate::ErrorResponse),
    )
)]
pub async fn get_rows(
    State(state): State<SharedState>,
    caller: Option<Extension<Caller>>,
    Path(table_name): Path<String>,
    QueryPairs(pairs): QueryPairs,
) -> Result<JsonBody<RowsResponse>, ApiError> {
    answer_lookup(&state, caller, &table_name, &pairs).await
}

/// The lookup of `GET /v1/tables/{table}/rows` with its parameters in a JSON body, so the
/// looked-up values (phones, idcards) stay out of the URL, which ingresses, proxies and meshes
/// log and forward. The same parameters, the same answer.
#[utoipa::path(
    post,
    path = "/v1/tables/{table}/rows:lookup",
    tag = "lookups",
    params(("table" = String, Path, description = "Table name")),
    request_body(
        content = Object,
        description = "The GET form's parameters as one JSON object, each value a string, number or boolean",
        example = json!({"phone": "13800138000", "limit": 20})
    ),
    security(("api_key" = ["lookup"])),
    responses(
        (status = 200, description = "A page of matching rows", body = RowsResponse),
        (status = 400, description = "A parameter is wrong; `field` names it", body = crate::ErrorResponse),
        (status = 404, description = "No such table", body = crate::ErrorResponse),
        (status = 503, description = "The row store can't be reached", body = crate::ErrorResponse),
    )
)]
pub async fn post_rows(
    State(state): State<SharedState>,
    caller: Option<Extension<Caller>>,
    Path(table_name): Path<String>,
    body: Result<ApiJson<serde_json::Map<String, serde_json::Value>>, ApiError>,
) -> Result<JsonBody<RowsResponse>, ApiError> {
    let ApiJson(object) = body?;
    let pairs = object
        .into_iter()
        .map(|(name, value)| match value {
            serde_json::Value::String(text) => Ok((name, text)),
            serde_json::Value::Number(number) => Ok((name, number.to_string())),
            serde_json::Value::Bool(flag) => Ok((name, flag.to_string())),
            _ => Err(ApiError::bad_request(
                name,
                "must be a string, number or boolean, as in the query string of the GET form",
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    answer_lookup(&state, caller, &table_name, &pairs).await
}

/// This index's page for a parsed lookup: a point lookup inline (a term probe of microseconds),
/// anything that may walk many matches off the HTTP runtime (`index_work`).
pub(crate) async fn index_page(
    state: &SharedState,
    runtime: &crate::TableRuntime,
    query: &RowsQuery,
) -> Result<hbidx_indexer::LookupPage, ApiError> {
    if crate::index_work::is_point_lookup(&query.conditions) {
        return Ok(runtime.searcher.lookup(
            &query.conditions,
            query.limit,
            query.cursor.as_deref(),
            state.limits.max_lookup_matches,
        )?);
    }
    let searcher = runtime.searcher.clone();
    let (conditions, limit, cursor) = (query.conditions.clone(), query.limit, query.cursor.clone());
    let max_matches = state.limits.max_lookup_matches;
    crate::index_work::run(state, move || {
        Ok(searcher.lookup(&conditions, limit, cursor.as_deref(), max_matches)?)
    })
    .await
}

/// One lookup, answered and audited: both forms of the single lookup.
async fn answer_lookup(
    state: &SharedState,
    caller: Option<Extension<Caller>>,
    table_name: &str,
    pairs: &[(String, String)],
) -> Result<JsonBody<RowsResponse>, ApiError> {
    let result = lookup_rows(state, table_name, pairs).await;
    // Resolving the field kinds allocates; a single lookup is a few microseconds, so this is
    // skipped when the audit target is filtered out.
    if !tracing::enabled!(target: "audit", tracing::Level::INFO) {
        return result.map(JsonBody);
    }
    let runtime = state.tables.get(table_name);
    let (kinds, values) = runtime.map_or_else(
        || (Vec::new(), 0),
        |runtime| param_kinds(&runtime.config, pairs),
    );
    audit_lookup(
        caller.as_deref(),
        "lookup",
        runtime,
        &kinds,
        values,
        &result,
        |answer| answer.count,
    );
    result.map(JsonBody)
}

async fn lookup_rows(
    state: &SharedState,
    table_name: &str,
    pairs: &[(String, String)],
) -> Result<RowsResponse, ApiError> {
    let started = Instant::now();
    let runtime = state.table(table_name)?;
    let query = parse_rows_query(runtime, pairs, &state.limits, &state.cursors)?;
    state.counters.lookups.fetch_add(1, Ordering::Relaxed);
    for condition in &query.conditions {
        count_condition(state, table_name, condition);
    }
    // On a sharded tier the hits (and the kept rows of an answer from the index) come from
    // every shard instead.
    let (page, shard_kept, missing_shards) = match &state.peers {
        None => (index_page(state, runtime, &query).await?, None, None),
        Some(peers) => {
            let fanned = crate::cluster::lookup_hits(state, peers, runtime, pairs, &query).await?;
            (
                fanned.page,
                fanned.kept,
                query.partial.then_some(fanned.missing),
            )
        }
    };
    let next_cursor = match (page.has_more, page.rowkeys.last()) {
        (true, Some(last)) => Some(state.cursors.seal(table_name, last)),
        _ => None,
    };
    let table = &runtime.config;
    if query.index_only {
        let rows: Vec<RowOut> = page
            .rowkeys
            .iter()
            .map(|rowkey| index_only_row(table, rowkey))
            .collect();
        record_hits(state, &table.name, rows.len());
        return Ok(RowsResponse {
            count: rows.len(),
            rows,
            next_cursor,
            dropped_stale: 0,
            source: Source::Index,
            missing_shards,
            took_ms: took_ms(started),
        });
    }
    if answered_by_index(
        table,
        query.has_blind_condition(),
        query.columns.as_deref(),
        query.consistency,
    ) {
        let kept = match shard_kept {
            Some(kept) => kept,
            None => kept_rows(runtime, page.rowkeys).await?,
        };
        let mut rows = Vec::with_capacity(kept.len());
        let mut dropped = 0;
        for row in kept {
            match row {
                Some(row) if row_matches(table, &row, &query.conditions) => {
                    rows.push(row_out(table, row, query.columns.as_deref()));
                }
                // Changed by a commit between the lookup and the read of its state: the index
                // already holds the new values, so there is nothing to repair.
                _ => dropped += 1,
            }
        }
        state
            .counters
            .rows_returned
            .fetch_add(rows.len() as u64, Ordering::Relaxed);
        record_hits(state, &table.name, rows.len());
        record_dropped(&table.name, dropped);
        return Ok(RowsResponse {
            count: rows.len(),
            rows,
            next_cursor,
            dropped_stale: dropped,
            source: Source::Index,
            missing_shards,
            took_ms: took_ms(started),
        });
    }
    let fetch = fetch_columns(table, &query.conditions, query.columns.as_deref());
    let fetched = state
        .store
        .get_rows(&table.name, &page.rowkeys, fetch.as_deref())
        .await?;
    let mut rows = Vec::with_capacity(fetched.len());
    let mut stale = Vec::new();
    for (row, rowkey) in fetched.into_iter().zip(&page.rowkeys) {
        match row {
            Some(row) if row_matches(table, &row, &query.conditions) => {
                rows.push(row_out(table, row, query.columns.as_deref()));
            }
            _ => stale.push(rowkey.clone()),
        }
    }
    let dropped = stale.len();
    if dropped > 0 {
        state
            .counters
            .stale_dropped
            .fetch_add(dropped as u64, Ordering::Relaxed);
        crate::read_repair::schedule(state, runtime, stale);
    }
    state
        .counters
        .rows_returned
        .fetch_add(rows.len() as u64, Ordering::Relaxed);
    record_hits(state, &table.name, rows.len());
    record_dropped(&table.name, dropped);
    Ok(RowsResponse {
        count: rows.len(),
        rows,
        next_cursor,
        dropped_stale: dropped,
        source: Source::Store,
        missing_shards,
        took_ms: took_ms(started),
    })
}

/// Looks up many values of one field in one call: every value through the index, then one
/// multi-get for all their rows. A value that can't be looked up gets an `error` of its own.
#[utoipa::path(
    post,
    path = "/v1/tables/{table}/rows:batch-lookup",
    tag = "lookups",
    params(("table" = String, Path, description = "Table name")),
    request_body = BatchLookupRequest,
    security(("api_key" = ["lookup"])),
    responses(
        (status = 200, description = "Rows per value", body = BatchResponse),
        (status = 400, description = "The body is wrong; `field` names what", body = crate::ErrorResponse),
        (status = 404, description = "No such table", body = crate::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = crate::ErrorResponse),
        (status = 503, description = "The row store can't be reached", body = crate::ErrorResponse),
    )
)]
pub async fn batch_lookup(
    State(state): State<SharedState>,
    caller: Option<Extension<Caller>>,
    Path(table_name): Path<String>,
    request: Result<ApiJson<BatchLookupRequest>, ApiError>,
) -> Result<JsonBody<BatchResponse>, ApiError> {
    let runtime = state.tables.get(&table_name);
    // A body that doesn't parse is audited too (as a failed lookup of unknown kind).
    let (kinds, values) = match (&request, runtime) {
        (Ok(ApiJson(request)), Some(runtime)) => (
            resolve_field(&runtime.config, &request.field)
                .map(|field| vec![field.kind.as_str().to_string()])
                .unwrap_or_default(),
            request.values.len(),
        ),
        _ => (Vec::new(), 0),
    };
    let result = match request {
        Ok(ApiJson(request)) => batch_lookup_rows(&state, &table_name, request).await,
        Err(err) => Err(err),
    };
    audit_lookup(
        caller.as_deref(),
        "batch_lookup",
        runtime,
        &kinds,
        values,
        &result,
        |answer| answer.count,
    );
    result.map(JsonBody)
}
