//! Write-through: `PUT` / `DELETE /v1/tables/{table}/rows/{key}`.
//!
//! Writes go to the row store; the index learns about them from the change feed like any other
//! write, so there is exactly one path into the index. When the table is fed from Kafka, writes
//! are published to its topic instead and the response waits for the broker's acknowledgement;
//! the consumed event is what applies the write (to the embedded store and the index), on this
//! instance and on every replica. `?wait=indexed` returns only once the table's index checkpoint
//! covers the write here (read-your-writes, `index_wait.rs`).
//!
//! With the rows in HBase, HBase is the log, and its replication (through Kafka, if the table
//! has a source) reaches the index at an offset hbidx can't know. So once HBase has acknowledged
//! a write, the same mutation, with the same cell timestamps, is handed to this instance's
//! indexer through the table's repair queue; `?wait=indexed` waits for the index commit that
//! covers its ticket. The replicated copy arriving later merges as a no-op (cell timestamps
//! decide). A crash between the acknowledgement and that commit leaves the row in HBase and
//! not in this index until the replicated event or the next `verify --repair` brings it in.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Json;
use axum::extract::{Path, State};
use hbidx_indexer::CHANGE_FEED;
use hbidx_schema::codec::printable;
use hbidx_schema::config::TableConfig;
use hbidx_schema::model::{CellOp, Mutation};
use hbidx_store::now_ms;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::by_key::existing_rowkeys;
use crate::extract::{ApiJson, QueryPairs};
use crate::index_wait::{WriteParams, Written, wait_indexed, wants_indexed};
use crate::lookup::took_ms;
use crate::{ApiError, SharedState, TableRuntime};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"cells": {"info:name": "张三", "info:phone": "13800138000"}}))]
pub struct PutBody {
    #[schema(schema_with = cells_schema)]
    pub cells: BTreeMap<String, String>,
    /// Cell timestamp in ms since the epoch; defaults to now. At most a day ahead of the
    /// server's clock.
    #[serde(default)]
    #[schema(minimum = 0)]
    pub ts: Option<i64>,
}

impl crate::extract::BodyShape for PutBody {}

/// `cells`: a map with at least one entry (utoipa has no `min_properties` on a field).
fn cells_schema() -> utoipa::openapi::Object {
    utoipa::openapi::ObjectBuilder::new()
        .description(Some("`family:qualifier` → value; at least one"))
        .additional_properties(Some(
            utoipa::openapi::ObjectBuilder::new().schema_type(utoipa::openapi::Type::String),
        ))
        .min_properties(Some(1))
        .build()
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WriteResponse {
    /// The natural key written.
    pub key: String,
    /// Its rowkey in HBase's printable form.
    pub rowkey: String,
    /// Where the write landed: the change feed (partition 0) or the Kafka topic's partition, and
    /// its offset there (what `wait=indexed` waits for); null for a table whose rows are in
    /// HBase.
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    /// Whether the answer waited until the index had the write.
    pub indexed: bool,
    pub took_ms: f64,
}

fn offset_of(receipt: &hbidx_store::WriteReceipt, table: &str) -> Option<i64> {
    receipt
        .last_offset_by_table
        .iter()
        .find(|(name, _)| name == table)
        .map(|(_, offset)| *offset)
}

/// How far ahead of the clock a write's `ts` may be: HBase's timestamp slop
/// (`hbase.hregion.keyvalue.timestamp.slop.millisecs`), on by default here. A cell written in
/// the future outlives every delete made before that time, which a row delete without a
/// timestamp can't reach: the row seems undeletable.
const MAX_FUTURE_TS_MS: i64 = 24 * 60 * 60 * 1000;

/// A delete's `?wait=` and `?ts=` (HBase's `deleteAllRowTs`: the delete covers cells with a
/// timestamp up to `ts`, now by default).
fn delete_params(pairs: &[(String, String)]) -> Result<(bool, i64), ApiError> {
    let (ts_pairs, rest): (Vec<_>, Vec<_>) = pairs.iter().cloned().partition(|(n, _)| n == "ts");
    let wait = wants_indexed(&rest)?;
    let now = now_ms();
    let ts = match ts_pairs.as_slice() {
        [] => now,
        [(_, value)] => check_ts(
            value.parse::<i64>().map_err(|_| {
                ApiError::bad_request("ts", "must be an integer (ms since the epoch)")
            })?,
            now,
        )?,
        _ => return Err(ApiError::bad_request("ts", "give it once")),
    };
    Ok((wait, ts))
}

/// A write's cell timestamp: not negative and at most [`MAX_FUTURE_TS_MS`] ahead of `now`.
fn check_ts(ts: i64, now: i64) -> Result<i64, ApiError> {
    check_cell_ts("ts", ts, now)
}

/// A cell timestamp of a write or a forwarded mutation (`field` names it in the 400): not
/// negative and at most [`MAX_FUTURE_TS_MS`] ahead of `now`.
pub(crate) fn check_cell_ts(field: &str, ts: i64, now: i64) -> Result<i64, ApiError> {
    if ts < 0 {
        return Err(ApiError::bad_request(field, "must not be negative"));
    }
    if ts > now.saturating_add(MAX_FUTURE_TS_MS) {
        return Err(ApiError::bad_request(
            field,
            "is more than a day ahead of this server's clock: a delete without a timestamp (which \
             takes the current time) would not remove such cells, as in HBase",
        ));
    }
    Ok(ts)
}

/// The rowkey of `key`. For designs with a random salt the rowkey can't be computed, so the
/// existing row is looked for among every candidate first, and a new random one is drawn only
/// when none exists.
async fn rowkey_for_write(
    state: &SharedState,
    table: &TableConfig,
    key: &str,
) -> Result<Vec<u8>, ApiError> {
    let codec = &table.rowkey;
    if codec.is_deterministic() {
        return codec
            .encode(key)
            .map_err(|err| ApiError::bad_request("key", err.to_string()));
    }
    let candidates = codec
        .candidate_rowkeys(key)
        .map_err(|err| ApiError::bad_request("key", err.to_string()))?;
    let existing = state.store.get_rows(&table.name, &candidates, None).await?;
    if let Some(row) = existing.into_iter().flatten().next() {
        return Ok(row.rowkey);
    }
    codec
        .encode_random(key, &mut rand_rng())
        .map_err(|err| ApiError::bad_request("key", err.to_string()))
}

fn rand_rng() -> impl rand::Rng {
    rand::rng()
}

/// Writes mutations through: to the Kafka topic when the table has one, else to the store;
/// with the rows in HBase, also to this instance's index (see the module docs).
async fn write_through(
    state: &SharedState,
    runtime: &TableRuntime,
    mutations: Vec<Mutation>,
    op: &'static str,
    wait: bool,
) -> Result<Written, ApiError> {
    let table = &runtime.config.name;
    let written = match &runtime.publisher {
        Some(publisher) => {
            let mut landed = Vec::with_capacity(mutations.len());
            for mutation in &mutations {
                let published = publisher
                    .publish(mutation)
                    .await
                    .map_err(|err| ApiError::LogUnavailable(err.to_string()))?;
                landed.push((published.source_name, published.partition, published.offset));
            }
            Written {
                landed,
                ..Written::default()
            }
        }
        None if state.store_has_feed => {
            let receipt = state.store.mutate(mutations).await?;
            Written {
                landed: offset_of(&receipt, table)
                    .map(|offset| (CHANGE_FEED.to_string(), 0, offset))
                    .into_iter()
                    .collect(),
                ..Written::default()
            }
        }
        None => {
            // On a task of its own: a caller hanging up mid-call would otherwise drop this
            // future after HBase took the write (the blocking Thrift call runs on regardless)
            // and before the index got it.
            let store = state.store.clone();
            let stats = runtime.stats.clone();
            let table = table.clone();
            let peers = state.peers.clone();
            let index_wait = wait.then_some(state.limits.index_wait);
            let applied = tokio::spawn(async move {
                store.mutate(mutations.clone()).await?;
                // Acknowledged by HBase: now the index that owns each row (this one, or on a
                // sharded tier the owning shard's replicas), with the same timestamps.
                let (local, forwarded) = match &peers {
                    None => (mutations, Vec::new()),
                    Some(peers) => crate::cluster::split_mutations(peers, &table, mutations),
                };
                let mut forward_error = None;
                if let Some(peers) = &peers {
                    let calls = forwarded.iter().map(|(shard, mutations)| async {
                        (
                            *shard,
                            peers.apply(*shard, &table, mutations, index_wait).await,
                        )
                    });
                    for (shard, outcome) in futures_util::future::join_all(calls).await {
                        if let Err(reason) = outcome {
                            tracing::warn!(table = %table, shard, reason = %reason, "a write to HBase reached no replica of its shard; it is left to replication and verify");
                            forward_error = Some(format!("shard {shard}: {reason}"));
                        }
                    }
                }
                let has_local = !local.is_empty();
                // The queue hands out tickets in order, so the last one covers the whole write.
                let mut ticket = None;
                for mutation in local {
                    ticket = stats.repairs.submit(mutation);
                    if ticket.is_none() {
                        tracing::warn!(table = %table, "repair queue full: a write to HBase is left to replication and verify");
                        break;
                    }
                }
                Ok::<_, ApiError>((ticket, has_local, forward_error))
            });
            let (ticket, local, forward_error) = applied
                .await
                .map_err(|err| ApiError::Internal(format!("write task failed: {err}")))??;
            Written {
                landed: Vec::new(),
                ticket,
                hbase: true,
                local,
                forward_error,
            }
        }
    };
    state.counters.writes.fetch_add(1, Ordering::Relaxed);
    metrics::counter!("hbidx_writes_total", "table" => table.clone(), "op" => op).increment(1);
    Ok(written)
}

/// Writes cells of one row through to the store (or the table's Kafka topic). Indexed values
/// are validated first.
#[utoipa::path(
    put,
    path = "/v1/tables/{table}/rows/{key}",
    tag = "writes",
    params(
        ("table" = String, Path, description = "Table name"),
        ("key" = String, Path, description = "The row's natural key (its rowkey is computed by the table's design)", example = "u00000001"),
        WriteParams,
    ),
    request_body = PutBody,
    security(("api_key" = ["write"])),
    responses(
        (status = 200, description = "Written", body = WriteResponse),
        (status = 400, description = "The request is wrong; `field` names what", body = crate::ErrorResponse),
        (status = 404, description = "No such table", body = crate::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = crate::ErrorResponse),
        (status = 503, description = "The store or the table's topic can't be reached; nothing was written", body = crate::ErrorResponse),
        (status = 504, description = "Written, but not indexed within the wait limit", body = crate::ErrorResponse),
        (status = 507, description = "`insufficient_storage`: the data volume is full. Either nothing was written (the row store's volume), or the write was stored but the index volume is full (`wait=indexed`); the message says which", body = crate::ErrorResponse),
    )
)]
pub async fn put_row(
    State(state): State<SharedState>,
    Path((table_name, key)): Path<(String, String)>,
    QueryPairs(pairs): QueryPairs,
    ApiJson(body): ApiJson<PutBody>,
) -> Result<Json<WriteResponse>, ApiError> {
    let started = Instant::now();
    let wait = wants_indexed(&pairs)?;
    let runtime = state.table(&table_name)?;
    let table = runtime.config.clone();
    if body.cells.is_empty() {
        return Err(ApiError::bad_request("cells", "give at least one cell"));
    }
    let now = now_ms();
    let ts = check_ts(body.ts.unwrap_or(now), now)?;
    let mut ops = Vec::with_capacity(body.cells.len());
    for (column, value) in body.cells {
        let field_name = format!("cells.{column}");
        let family = match hbidx_schema::model::split_column(&column) {
            Some((family, _)) => family,
            None => {
                return Err(ApiError::bad_request(
                    field_name,
                    "a column is written as family:qualifier",
                ));
            }
        };
        if !table.families.iter().any(|f| f.name == family) {
            return Err(ApiError::bad_request(
                field_name,
                format!(
                    "family \"{family}\" is not declared for table \"{}\"",
                    table.name
                ),
            ));
        }
        // Indexed values are validated here, where the caller can still fix them; the
        // indexer would otherwise have to skip them.
        if let Some(field) = table.fields.iter().find(|f| f.column == column)
            && let Err(err) = field.kind.normalize(&value)
        {
            return Err(ApiError::bad_request(field_name, err.to_string()));
        }
        ops.push(CellOp::Put {
            column,
            ts,
            value: value.into_bytes(),
        });
    }
    let rowkey = rowkey_for_write(&state, &table, &key).await?;
    let written = write_through(
        &state,
        runtime,
        vec![Mutation {
            table: table.name.clone(),
            rowkey: rowkey.clone(),
            ops,
        }],
        "put",
        wait,
    )
    .await?;
    if wait {
        wait_indexed(&state, runtime, &written).await?;
    }
    let landed = &written.landed;
    Ok(Json(WriteResponse {
        key,
        rowkey: printable(&rowkey),
        partition: landed.last().map(|l| l.1),
        offset: landed.last().map(|l| l.2),
        indexed: wait,
        took_ms: took_ms(started),
    }))
}

/// Deletes a row (every candidate rowkey of a salted design).
#[utoipa::path(
    delete,
    path = "/v1/tables/{table}/rows/{key}",
    tag = "writes",
    params(
        ("table" = String, Path, description = "Table name"),
        ("key" = String, Path, description = "The row's natural key", example = "u00000001"),
        WriteParams,
        ("ts" = Option<i64>, Query, description = "Delete the cells with a timestamp up to this (ms since the epoch; HBase's `deleteAllRowTs`); now by default. At most a day ahead of the server's clock", minimum = 0, example = json!(1700000000000i64)),
    ),
    security(("api_key" = ["write"])),
    responses(
        (status = 200, description = "Deleted (also when there was no such row)", body = WriteResponse),
        (status = 400, description = "The request is wrong; `field` names what", body = crate::ErrorResponse),
        (status = 404, description = "No such table", body = crate::ErrorResponse),
        (status = 503, description = "The store or the table's topic can't be reached; nothing was written", body = crate::ErrorResponse),
        (status = 504, description = "Deleted, but not indexed within the wait limit", body = crate::ErrorResponse),
        (status = 507, description = "`insufficient_storage`: the data volume is full. Either nothing was written (the row store's volume), or the delete was stored but the index volume is full (`wait=indexed`); the message says which", body = crate::ErrorResponse),
    )
)]
pub async fn delete_row(
    State(state): State<SharedState>,
    Path((table_name, key)): Path<(String, String)>,
    QueryPairs(pairs): QueryPairs,
) -> Result<Json<WriteResponse>, ApiError> {
    let started = Instant::now();
    let (wait, ts) = delete_params(&pairs)?;
    let runtime = state.table(&table_name)?;
    let table = runtime.config.clone();
    let codec = &table.rowkey;
    let rowkeys = existing_rowkeys(codec, &key)?;
    let mutations: Vec<Mutation> = rowkeys
        .iter()
        .map(|rowkey| Mutation {
            table: table.name.clone(),
            rowkey: rowkey.clone(),
            ops: vec![CellOp::DeleteRow { ts }],
        })
        .collect();
    let written = write_through(&state, runtime, mutations, "delete", wait).await?;
    if wait {
        wait_indexed(&state, runtime, &written).await?;
    }
    let landed = &written.landed;
    Ok(Json(WriteResponse {
        key,
        rowkey: rowkeys.first().map(|rk| printable(rk)).unwrap_or_default(),
        partition: landed.last().map(|l| l.1),
        offset: landed.last().map(|l| l.2),
        indexed: wait,
        took_ms: took_ms(started),
    }))
}
