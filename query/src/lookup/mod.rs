//! `GET /v1/tables/{table}/rows` and `POST /v1/tables/{table}/rows:batch-lookup`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Extension;
use axum::extract::{Path, State};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hbidx_indexer::ConditionOp;
use hbidx_indexer::{Condition, MatchMode};
use hbidx_schema::codec::printable;
use hbidx_schema::config::{FieldKind, IndexedField, TableConfig};
use hbidx_store::{Cell, Row, RowState};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Caller;
use crate::extract::{ApiJson, JsonBody, QueryPairs};
use crate::{ApiError, AppState, SharedState, TableRuntime};

/// One row in a response. The shape is part of the public API (docs/guide/lookups.md).
#[derive(Debug, Serialize, ToSchema)]
pub struct RowOut {
    /// The natural key, when the rowkey design can rebuild it.
    pub key: Option<String>,
    /// The rowkey in HBase's printable form (`Bytes.toStringBinary`).
    pub rowkey: String,
    /// `family:qualifier` → value (UTF-8; invalid bytes are replaced).
    #[serde(serialize_with = "cells_as_text")]
    #[schema(value_type = BTreeMap<String, String>)]
    pub cells: BTreeMap<String, Cell>,
}

/// Cell values as JSON strings, converted while serialising: the row's map is handed over
/// as the store returned it, without copying every value into a new `String` first.
fn cells_as_text<S: serde::Serializer>(
    cells: &BTreeMap<String, Cell>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(
        cells
            .iter()
            .map(|(column, cell)| (column, text(&cell.value))),
    )
}

/// A cell value as text, invalid UTF-8 replaced. `str::from_utf8` first: it validates a word at
/// a time where `from_utf8_lossy` goes byte by byte, and values are almost always valid.
fn text(value: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(value) {
        Ok(text) => text.into(),
        Err(_) => String::from_utf8_lossy(value),
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RowsResponse {
    /// In rowkey order.
    pub rows: Vec<RowOut>,
    /// Pass as `cursor=` for the next page; null on the last page.
    pub next_cursor: Option<String>,
    /// Rows in this page.
    pub count: usize,
    /// Index hits dropped because the row no longer matched or no longer existed.
    pub dropped_stale: usize,
    /// Where the rows' cells came from.
    pub source: Source,
    /// Server time spent, in milliseconds.
    pub took_ms: f64,
}

/// Where a lookup's cells came from: the row store (multi-get, each row re-checked against the
/// lookup), or the index alone, when every requested column is indexed or covered (or with
/// `index_only`, which returns no cells).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Store,
    Index,
}

/// `consistency=`: whether a lookup whose columns are all covered may be answered from the
/// index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Consistency {
    /// From the index when every requested column is indexed or covered (the latest values
    /// the index has applied, a few tens of milliseconds behind the store while writes flow),
    /// else from the store.
    #[default]
    Index,
    /// Always multi-get the rows from the store and re-check them.
    Store,
}

impl Consistency {
    fn parse(field: &str, text: &str) -> Result<Self, ApiError> {
        match text {
            "index" => Ok(Self::Index),
            "store" => Ok(Self::Store),
            _ => Err(ApiError::bad_request(field, "must be index or store")),
        }
    }
}

/// How a `name` (or keyword) value is matched. Phone and idcard fields always match exactly
/// (a phone's last digits go in `phone_suffix`).
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MatchParam {
    Exact,
    Prefix,
    Partial,
    Pinyin,
}

/// The query parameters of `GET /v1/tables/{table}/rows`. The handler reads the query string as
/// ordered pairs (to name unknown and repeated parameters, and because a table's own field
/// names are parameters too); this type is its documented shape, and
/// query/tests/openapi.rs checks that the handler reads each one.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct LookupParams {
    /// A phone number (mainland mobile, with or without +86). Also accepted: the name of any
    /// indexed field of the table (`GET /v1/tables` lists them); `phone`, `idcard` and `name`
    /// name the table's one field of that kind.
    #[param(min_length = 1, example = "13800138000")]
    phone: Option<String>,
    /// The last 4 to 11 digits of a phone number.
    #[param(min_length = 1, example = "8000")]
    phone_suffix: Option<String>,
    /// A PRC resident identity card number (18 characters, checksum verified).
    #[param(min_length = 1, example = "11010519491231002X")]
    idcard: Option<String>,
    /// A name; how it matches is set by `match`.
    #[param(min_length = 1, example = "张三")]
    name: Option<String>,
    /// Match mode of name and keyword fields.
    #[serde(rename = "match")]
    #[param(inline)]
    match_mode: Option<MatchParam>,
    /// Rows per page.
    #[param(minimum = 1, maximum = 1000, default = 20)]
    limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[param(min_length = 1)]
    cursor: Option<String>,
    /// Comma-separated `family:qualifier` or `family` projection.
    #[param(min_length = 1, example = "info:name,info:phone")]
    columns: Option<String>,
    /// Rowkeys only, straight from the index: no store read and no re-check.
    #[param(default = false)]
    index_only: Option<bool>,
    /// `store` reads the rows from the store even when `columns` are all covered.
    #[param(inline)]
    consistency: Option<Consistency>,
}

/// The match-mode label of a condition (`suffix` is the phone tail lookup).
fn match_label(condition: &Condition) -> &'static str {
    match condition.op {
        ConditionOp::Exact(_) => "exact",
        ConditionOp::Suffix(_) => "suffix",
        ConditionOp::Prefix(_) => "prefix",
        ConditionOp::Partial(_) => "partial",
        ConditionOp::Pinyin(_) => "pinyin",
    }
}

/// Counts a lookup condition by field kind and match mode: never by the value, which is
/// personal data and unbounded.
fn count_condition(state: &AppState, table: &str, condition: &Condition) {
    let (kind, mode) = (condition.kind.as_str(), match_label(condition));
    state
        .metric_handles
        .lookups
        .get(
            |(t, k, m)| t == table && *k == kind && *m == mode,
            || {
                let counter = metrics::counter!(
                    "hbidx_lookups_total",
                    "table" => table.to_string(),
                    "kind" => kind,
                    "match" => mode,
                );
                ((table.to_string(), kind, mode), counter)
            },
        )
        .increment(1);
}

/// Rows one lookup (one batch value) returned, and the stale hits it dropped.
fn record_hits(state: &AppState, table: &str, rows: usize) {
    state
        .metric_handles
        .hits
        .get(
            |t| t == table,
            || {
                let histogram =
                    metrics::histogram!("hbidx_lookup_hits", "table" => table.to_string());
                (table.to_string(), histogram)
            },
        )
        .record(rows as f64);
}

fn record_dropped(table: &str, dropped: usize) {
    if dropped > 0 {
        metrics::counter!("hbidx_lookup_dropped_stale_total", "table" => table.to_string())
            .increment(dropped as u64);
    }
}

fn took_ms(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 1e6).round() / 1e3
}

/// Resolves a parameter name to an indexed field: a field's own name, or a field kind
/// (`phone`, `idcard`, `name`) when the table has exactly one field of that kind.
fn resolve_field<'a>(table: &'a TableConfig, param: &str) -> Option<&'a IndexedField> {
    if let Some(field) = table.fields.iter().find(|f| f.name == param) {
        return Some(field);
    }
    let kind = match param {
        "phone" => FieldKind::Phone,
        "idcard" => FieldKind::Idcard,
        "name" => FieldKind::Name,
        _ => return None,
    };
    let mut of_kind = table.fields.iter().filter(|f| f.kind == kind);
    match (of_kind.next(), of_kind.next()) {
        (Some(field), None) => Some(field),
        _ => None,
    }
}

/// Parsed `columns=` projection: `None` means all columns.
pub(crate) fn parse_columns(
    table: &TableConfig,
    field: &str,
    raw: &str,
) -> Result<Vec<String>, ApiError> {
    let mut columns = Vec::new();
    for column in raw.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let family = column.split(':').next().unwrap_or_default();
        if !table.families.iter().any(|f| f.name == family) {
            return Err(ApiError::bad_request(
                field,
                format!("column \"{column}\": family \"{family}\" is not declared for this table"),
            ));
        }
        columns.push(column.to_string());
    }
    if columns.is_empty() {
        return Err(ApiError::bad_request(field, "no columns given"));
    }
    Ok(columns)
}

pub(crate) fn encode_cursor(rowkey: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(rowkey)
}

fn decode_cursor(raw: &str) -> Result<Vec<u8>, ApiError> {
    URL_SAFE_NO_PAD
        .decode(raw)
        .map_err(|_| ApiError::bad_request("cursor", "not a cursor returned by this service"))
}

struct RowsQuery {
    conditions: Vec<Condition>,
    limit: usize,
    cursor: Option<Vec<u8>>,
    columns: Option<Vec<String>>,
    index_only: bool,
    consistency: Consistency,
}

fn parse_rows_query(
    runtime: &TableRuntime,
    pairs: &[(String, String)],
    limits: &crate::Limits,
) -> Result<RowsQuery, ApiError> {
    let table = &runtime.config;
    let mut mode = MatchMode::Exact;
    let mut limit = limits.default_page;
    let mut cursor = None;
    let mut columns = None;
    let mut index_only = false;
    let mut consistency = Consistency::default();
    let mut field_values: Vec<(&str, &IndexedField, bool, &str)> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (name, value) in pairs {
        if seen.contains(&name.as_str()) {
            return Err(ApiError::bad_request(name, "given more than once"));
        }
        seen.push(name);
        match name.as_str() {
            "match" => {
                mode = MatchMode::parse(value).ok_or_else(|| {
                    ApiError::bad_request("match", "must be exact, prefix, partial or pinyin")
                })?;
            }
            "limit" => {
                limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=limits.max_page).contains(n))
                    .ok_or_else(|| {
                        ApiError::bad_request(
                            "limit",
                            format!("must be a whole number from 1 to {}", limits.max_page),
                        )
                    })?;
            }
            "cursor" => cursor = Some(decode_cursor(value)?),
            "columns" => columns = Some(parse_columns(table, "columns", value)?),
            "consistency" => consistency = Consistency::parse("consistency", value)?,
            "index_only" => {
                index_only = match value.as_str() {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => return Err(ApiError::bad_request("index_only", "must be true or false")),
                }
            }
            other => {
                let (base, suffix) = match other.strip_suffix("_suffix") {
                    Some(base) => (base, true),
                    None => (other, false),
                };
                let field = resolve_field(table, base).ok_or_else(|| {
                    let known: Vec<_> = table.fields.iter().map(|f| f.name.as_str()).collect();
                    ApiError::bad_request(
                        other,
                        format!(
                            "unknown parameter; lookup fields of table \"{}\" are {}",
                            table.name,
                            known.join(", ")
                        ),
                    )
                })?;
                field_values.push((other, field, suffix, value.as_str()));
            }
        }
    }
    if field_values.is_empty() {
        return Err(ApiError::bad_request(
            "query",
            "give at least one lookup field, e.g. phone=, phone_suffix=, idcard= or name=",
        ));
    }
    let conditions = field_values
        .into_iter()
        .map(|(param, field, suffix, raw)| {
            // match= applies to name fields; other kinds are always exact.
            let field_mode = if field.kind == FieldKind::Name {
                mode
            } else {
                MatchMode::Exact
            };
            Condition::build(param, field, field_mode, suffix, raw)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RowsQuery {
        conditions,
        limit,
        cursor,
        columns,
        index_only,
        consistency,
    })
}

/// Whether a lookup asking for `columns` may be answered from the index: every requested
/// column is one whose latest value the index keeps (a family alone is not: the index can't
/// know which qualifiers the family has).
fn answered_by_index(
    table: &TableConfig,
    columns: Option<&[String]>,
    consistency: Consistency,
) -> bool {
    consistency == Consistency::Index
        && columns.is_some_and(|columns| columns.iter().all(|column| table.keeps_column(column)))
}

/// A row as the index keeps it: the visible values of its indexed and covered columns.
fn kept_row(rowkey: &[u8], state: RowState) -> Option<Row> {
    let cells: BTreeMap<String, Cell> = state
        .cells
        .into_iter()
        .filter_map(|(column, cell)| {
            Some((
                column,
                Cell {
                    value: cell.value?,
                    ts: cell.ts,
                },
            ))
        })
        .collect();
    (!cells.is_empty()).then(|| Row {
        rowkey: rowkey.to_vec(),
        cells,
    })
}

/// The columns to fetch: the caller's projection plus what the re-check needs.
fn fetch_columns(
    table: &TableConfig,
    conditions: &[Condition],
    projection: Option<&[String]>,
) -> Option<Vec<String>> {
    let projection = projection?;
    let mut columns: Vec<String> = projection.to_vec();
    for condition in conditions {
        if let Some(field) = table.field(&condition.field)
            && !columns.contains(&field.column)
        {
            columns.push(field.column.clone());
        }
    }
    Some(columns)
}

fn row_matches(table: &TableConfig, row: &Row, conditions: &[Condition]) -> bool {
    conditions.iter().all(|condition| {
        let Some(field) = table.field(&condition.field) else {
            return false;
        };
        row.cells
            .get(&field.column)
            .is_some_and(|cell| condition.matches(&text(&cell.value)))
    })
}

pub(crate) fn row_out(table: &TableConfig, row: Row, projection: Option<&[String]>) -> RowOut {
    let mut cells = row.cells;
    if let Some(wanted) = projection {
        cells.retain(|column, _| {
            wanted
                .iter()
                .any(|w| w == column || (!w.contains(':') && column.split(':').next() == Some(w)))
        });
    }
    RowOut {
        key: table.rowkey.decode(&row.rowkey).ok(),
        rowkey: printable(&row.rowkey),
        cells,
    }
}

fn index_only_row(table: &TableConfig, rowkey: &[u8]) -> RowOut {
    RowOut {
        key: table.rowkey.decode(rowkey).ok(),
        rowkey: printable(rowkey),
        cells: BTreeMap::new(),
    }
}

/// The field kinds a lookup's parameters name (`phone`, `phone_suffix`, `name`, …), for the
/// audit line: resolved through the table's fields, so neither values nor unknown parameter
/// names (which are caller text) are ever logged. Also returns how many values were given.
fn param_kinds(table: &TableConfig, pairs: &[(String, String)]) -> (Vec<String>, usize) {
    let mut kinds: Vec<String> = Vec::new();
    let mut values = 0;
    for (name, _) in pairs {
        let (base, suffix) = match name.strip_suffix("_suffix") {
            Some(base) => (base, "_suffix"),
            None => (name.as_str(), ""),
        };
        if let Some(field) = resolve_field(table, base) {
            values += 1;
            let kind = format!("{}{suffix}", field.kind.as_str());
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
    }
    (kinds, values)
}

/// The audit line of one lookup (tracing target `audit`): the caller's key id, the table, the
/// field kinds, how many values, and the result count or the error status. Never the values.
pub(crate) fn audit_lookup<T>(
    caller: Option<&Caller>,
    operation: &'static str,
    runtime: Option<&TableRuntime>,
    kinds: &[String],
    values: usize,
    result: &Result<T, ApiError>,
    count: impl FnOnce(&T) -> usize,
) {
    let key = caller.map_or("-", |caller| &*caller.key_id);
    // Only configured table names: the path segment of an unknown table is caller text.
    let table = runtime.map_or("-", |runtime| runtime.config.name.as_str());
    let fields = kinds.join(",");
    let fields = fields.as_str();
    match result {
        Ok(answer) => tracing::info!(
            target: "audit",
            key,
            operation,
            table,
            fields,
            values,
            results = count(answer),
            status = 200u16,
            "lookup"
        ),
        Err(err) => tracing::info!(
            target: "audit",
            key,
            operation,
            table,
            fields,
            values,
            results = 0usize,
            status = err.status().as_u16(),
            "lookup"
        ),
    }
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
    let result = lookup_rows(&state, &table_name, &pairs).await;
    // Resolving the field kinds allocates; a single lookup is a few microseconds, so this is
    // skipped when the audit target is filtered out.
    if !tracing::enabled!(target: "audit", tracing::Level::INFO) {
        return result.map(JsonBody);
    }
    let runtime = state.tables.get(&table_name);
    let (kinds, values) = runtime.map_or_else(
        || (Vec::new(), 0),
        |runtime| param_kinds(&runtime.config, &pairs),
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
    let query = parse_rows_query(runtime, pairs, &state.limits)?;
    state.counters.lookups.fetch_add(1, Ordering::Relaxed);
    for condition in &query.conditions {
        count_condition(state, table_name, condition);
    }
    // A term lookup in a memory-mapped index takes microseconds: fine on the async runtime.
    let page = runtime
        .searcher
        .lookup(&query.conditions, query.limit, query.cursor.as_deref())?;
    let next_cursor = match (page.has_more, page.rowkeys.last()) {
        (true, Some(last)) => Some(encode_cursor(last)),
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
            took_ms: took_ms(started),
        });
    }
    if answered_by_index(table, query.columns.as_deref(), query.consistency) {
        let kept = kept_rows(runtime, page.rowkeys).await?;
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
        crate::repair::schedule(state, runtime, stale);
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
        took_ms: took_ms(started),
    })
}

/// The rows of `rowkeys` as the index keeps them (see [`kept_row`]), in order. A row's state is
/// a stored document: a few µs each from the memory-mapped index, so a page of a typical size
/// is read inline like the lookup itself, and bigger ones on a blocking thread.
async fn kept_rows(
    runtime: &TableRuntime,
    rowkeys: Vec<Vec<u8>>,
) -> Result<Vec<Option<Row>>, ApiError> {
    const INLINE: usize = 64;
    let inline = rowkeys.len() <= INLINE;
    let read = move |searcher: &hbidx_indexer::TableSearcher| {
        let states = searcher.kept_rows(&rowkeys)?;
        Ok::<_, ApiError>(
            states
                .into_iter()
                .zip(&rowkeys)
                .map(|(state, rowkey)| state.and_then(|state| kept_row(rowkey, state)))
                .collect(),
        )
    };
    if inline {
        return read(&runtime.searcher);
    }
    let searcher = runtime.searcher.clone();
    tokio::task::spawn_blocking(move || read(&searcher))
        .await
        .map_err(|err| ApiError::Internal(format!("reading covered rows: {err}")))?
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"field": "phone", "values": ["13800138000", "18919415435"]}))]
pub struct BatchLookupRequest {
    /// A field name or kind (`phone`, `idcard`, `name`).
    pub field: String,
    /// The values to look up.
    #[schema(min_items = 1, max_items = 1000)]
    pub values: Vec<String>,
    /// Match mode of name and keyword fields.
    #[serde(default, rename = "match")]
    #[schema(value_type = Option<MatchParam>)]
    pub match_mode: Option<String>,
    /// `family:qualifier` or `family` projection.
    #[serde(default)]
    #[schema(min_items = 1)]
    pub columns: Option<Vec<String>>,
    /// Rowkeys only, straight from the index.
    #[serde(default)]
    pub index_only: bool,
    /// Rows returned per value at most (default 20).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000)]
    pub limit_per_value: Option<usize>,
    /// `store` reads the rows from the store even when `columns` are all covered.
    #[serde(default)]
    pub consistency: Consistency,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchResult {
    /// Position of the value in the request.
    pub index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<RowOut>>,
    /// Why this value could not be looked up (the value itself is not echoed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BatchResponse {
    /// One per value, in request order.
    pub results: Vec<BatchResult>,
    pub count: usize,
    pub dropped_stale: usize,
    /// Where the rows' cells came from.
    pub source: Source,
    pub took_ms: f64,
}

/// One batch value's condition and the rowkeys the index gave for it.
type ValueHits = (Condition, Vec<Vec<u8>>);

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

async fn batch_lookup_rows(
    state: &SharedState,
    table_name: &str,
    request: BatchLookupRequest,
) -> Result<BatchResponse, ApiError> {
    let started = Instant::now();
    let runtime = state.table(table_name)?;
    let table = &runtime.config;
    let limits = &state.limits;
    if request.values.is_empty() || request.values.len() > limits.max_batch_values {
        return Err(ApiError::bad_request(
            "values",
            format!(
                "give 1 to {} values, got {}",
                limits.max_batch_values,
                request.values.len()
            ),
        ));
    }
    let field = resolve_field(table, &request.field).ok_or_else(|| {
        ApiError::bad_request(
            "field",
            format!("\"{}\" is not a lookup field of this table", request.field),
        )
    })?;
    let mode = match request.match_mode.as_deref() {
        None => MatchMode::Exact,
        Some(text) => MatchMode::parse(text).ok_or_else(|| {
            ApiError::bad_request("match", "must be exact, prefix, partial or pinyin")
        })?,
    };
    let per_value = request.limit_per_value.unwrap_or(limits.default_page);
    if !(1..=limits.max_page).contains(&per_value) {
        return Err(ApiError::bad_request(
            "limit_per_value",
            format!("must be from 1 to {}", limits.max_page),
        ));
    }
    let projection = match &request.columns {
        Some(columns) => Some(parse_columns(table, "columns", &columns.join(","))?),
        None => None,
    };
    state.counters.lookups.fetch_add(1, Ordering::Relaxed);

    // Resolve every value through the index first, then fetch all rows in ONE multi-get.
    let mut per_value_hits: Vec<Result<ValueHits, String>> = Vec::new();
    let mut unique: Vec<Vec<u8>> = Vec::new();
    let mut position: HashMap<Vec<u8>, usize> = HashMap::new();
    for (i, raw) in request.values.iter().enumerate() {
        let param = format!("values[{i}]");
        let field_mode = if field.kind == FieldKind::Name {
            mode
        } else {
            MatchMode::Exact
        };
        match Condition::build(&param, field, field_mode, false, raw) {
            Ok(condition) => {
                count_condition(state, &table.name, &condition);
                let page =
                    runtime
                        .searcher
                        .lookup(std::slice::from_ref(&condition), per_value, None)?;
                for rowkey in &page.rowkeys {
                    if !position.contains_key(rowkey) {
                        position.insert(rowkey.clone(), unique.len());
                        unique.push(rowkey.clone());
                    }
                }
                per_value_hits.push(Ok((condition, page.rowkeys)));
            }
            Err(err) => per_value_hits.push(Err(err.to_string())),
        }
    }
    let from_index =
        answered_by_index(table, projection.as_deref(), request.consistency) || request.index_only;
    let fetched: Vec<Option<Row>> = if request.index_only || unique.is_empty() {
        Vec::new()
    } else if from_index {
        kept_rows(runtime, unique).await?
    } else {
        let fetch = projection.as_ref().map(|p| {
            let mut columns = p.clone();
            if !columns.contains(&field.column) {
                columns.push(field.column.clone());
            }
            columns
        });
        state
            .store
            .get_rows(&table.name, &unique, fetch.as_deref())
            .await?
    };
    let mut results = Vec::with_capacity(per_value_hits.len());
    let mut count = 0;
    let mut dropped = 0;
    let mut stale: Vec<Vec<u8>> = Vec::new();
    for (index, hits) in per_value_hits.into_iter().enumerate() {
        match hits {
            Err(error) => results.push(BatchResult {
                index,
                rows: None,
                error: Some(error),
            }),
            Ok((condition, rowkeys)) => {
                let mut rows = Vec::with_capacity(rowkeys.len());
                for rowkey in rowkeys {
                    if request.index_only {
                        rows.push(index_only_row(table, &rowkey));
                        continue;
                    }
                    let row = position
                        .get(&rowkey)
                        .and_then(|&at| fetched.get(at))
                        .and_then(Option::as_ref);
                    match row {
                        Some(row) if row_matches(table, row, std::slice::from_ref(&condition)) => {
                            rows.push(row_out(table, row.clone(), projection.as_deref()));
                        }
                        _ => {
                            dropped += 1;
                            stale.push(rowkey.clone());
                        }
                    }
                }
                count += rows.len();
                record_hits(state, &table.name, rows.len());
                results.push(BatchResult {
                    index,
                    rows: Some(rows),
                    error: None,
                });
            }
        }
    }
    if dropped > 0 {
        state
            .counters
            .stale_dropped
            .fetch_add(dropped as u64, Ordering::Relaxed);
        // Rows read from the index that no longer match changed under the lookup; the index
        // holds their new values already. Only a store row can show the index is behind.
        if !from_index {
            stale.sort();
            stale.dedup();
            crate::repair::schedule(state, runtime, stale);
        }
    }
    record_dropped(&table.name, dropped);
    Ok(BatchResponse {
        source: if from_index {
            Source::Index
        } else {
            Source::Store
        },
        results,
        count,
        dropped_stale: dropped,
        took_ms: took_ms(started),
    })
}
