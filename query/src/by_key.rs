//! Reads by natural key, without the index: `GET /v1/tables/{table}/rows/{key}` (the row, from
//! the store) and the rowkey calculator (`GET /v1/tables/{table}/rowkey`). Both start from the
//! rowkeys a key may be stored under, as deletes do.

use std::time::Instant;

use axum::extract::{Path, State};
use axum::{Extension, Json};
use hbidx_schema::codec::printable;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Caller;
use crate::extract::QueryPairs;
use crate::lookup::took_ms;
use crate::{ApiError, SharedState};

/// Every rowkey a natural key may be stored under: one for deterministic designs, every bucket
/// for a random salt.
pub(crate) fn existing_rowkeys(
    codec: &hbidx_schema::codec::RowkeyCodec,
    key: &str,
) -> Result<Vec<Vec<u8>>, ApiError> {
    let rowkeys = if codec.is_deterministic() {
        codec.encode(key).map(|rowkey| vec![rowkey])
    } else {
        codec.candidate_rowkeys(key)
    };
    rowkeys.map_err(|err| ApiError::bad_request("key", err.to_string()))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RowkeyResponse {
    pub key: String,
    pub design: String,
    pub deterministic: bool,
    /// Printable rowkeys: one for deterministic designs, every candidate for a random salt.
    pub rowkeys: Vec<String>,
    pub rowkeys_hex: Vec<String>,
}

/// The rowkey calculator: the rowkey(s) a natural key is stored under.
#[utoipa::path(
    get,
    path = "/v1/tables/{table}/rowkey",
    tag = "tables",
    params(
        ("table" = String, Path, description = "Table name"),
        ("key" = String, Query, description = "The natural key", min_length = 1, example = "u00000001"),
    ),
    security(("api_key" = ["lookup"])),
    responses(
        (status = 200, description = "The rowkeys", body = RowkeyResponse),
        (status = 400, description = "The request is wrong; `field` names what", body = crate::ErrorResponse),
        (status = 404, description = "No such table", body = crate::ErrorResponse),
    )
)]
pub async fn rowkey(
    State(state): State<SharedState>,
    Path(table_name): Path<String>,
    QueryPairs(pairs): QueryPairs,
) -> Result<Json<RowkeyResponse>, ApiError> {
    let runtime = state.table(&table_name)?;
    let mut key = None;
    for (name, value) in pairs {
        match name.as_str() {
            "key" => key = Some(value),
            other => return Err(ApiError::bad_request(other, "unknown parameter")),
        }
    }
    let key = key.ok_or_else(|| ApiError::bad_request("key", "missing"))?;
    let codec = &runtime.config.rowkey;
    let rowkeys = existing_rowkeys(codec, &key)?;
    Ok(Json(RowkeyResponse {
        key,
        design: codec.describe(),
        deterministic: codec.is_deterministic(),
        rowkeys: rowkeys.iter().map(|rk| printable(rk)).collect(),
        rowkeys_hex: rowkeys.iter().map(hex::encode).collect(),
    }))
}

/// `GET /v1/tables/{table}/rows/{key}`: the row of a natural key, straight from the store (no
/// index involved). With a random salt every candidate rowkey is fetched.
#[utoipa::path(
    get,
    path = "/v1/tables/{table}/rows/{key}",
    tag = "lookups",
    params(
        ("table" = String, Path, description = "Table name"),
        ("key" = String, Path, description = "The row's natural key", example = "u00000001"),
        ("columns" = Option<String>, Query, description = "Comma-separated `family:qualifier` or `family` projection", min_length = 1),
    ),
    security(("api_key" = ["lookup"])),
    responses(
        (status = 200, description = "The row", body = crate::lookup::RowsResponse),
        (status = 400, description = "The request is wrong; `field` names what", body = crate::ErrorResponse),
        (status = 404, description = "No such table, or no such row", body = crate::ErrorResponse),
        (status = 503, description = "The row store can't be reached", body = crate::ErrorResponse),
    )
)]
pub async fn get_row(
    State(state): State<SharedState>,
    caller: Option<Extension<Caller>>,
    Path((table_name, key)): Path<(String, String)>,
    QueryPairs(pairs): QueryPairs,
) -> Result<Json<crate::lookup::RowsResponse>, ApiError> {
    let result = read_row(&state, &table_name, &key, &pairs).await;
    // Reading a row by its key is audited like a lookup (kind "key"): it returns the same data.
    crate::lookup::audit_lookup(
        caller.as_deref(),
        "get_row",
        state.tables.get(&table_name),
        &["key".to_string()],
        1,
        &result,
        |answer| answer.count,
    );
    result.map(Json)
}

async fn read_row(
    state: &SharedState,
    table_name: &str,
    key: &str,
    pairs: &[(String, String)],
) -> Result<crate::lookup::RowsResponse, ApiError> {
    let started = Instant::now();
    let runtime = state.table(table_name)?;
    let table = &runtime.config;
    let mut columns = None;
    for (name, value) in pairs {
        match name.as_str() {
            "columns" => columns = Some(crate::lookup::parse_columns(table, "columns", value)?),
            other => return Err(ApiError::bad_request(other, "unknown parameter")),
        }
    }
    let codec = &table.rowkey;
    let rowkeys = existing_rowkeys(codec, key)?;
    let fetched = state
        .store
        .get_rows(&table.name, &rowkeys, columns.as_deref())
        .await?;
    let rows: Vec<_> = fetched
        .into_iter()
        .flatten()
        .map(|row| crate::lookup::row_out(table, row, None))
        .collect();
    if rows.is_empty() {
        return Err(ApiError::NotFound {
            what: format!("row with key \"{key}\" in table \"{}\"", table.name),
        });
    }
    Ok(crate::lookup::RowsResponse {
        count: rows.len(),
        rows,
        next_cursor: None,
        dropped_stale: 0,
        source: crate::lookup::Source::Store,
        missing_shards: None,
        took_ms: took_ms(started),
    })
}
