//! The request and response shapes of the lookup endpoints: part of the public API
//! (docs/guide/lookups.md) and of the OpenAPI document, so they sit apart from the code that
//! fills them.

use std::collections::BTreeMap;

use hbidx_store::Cell;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::ApiError;

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
pub(crate) fn text(value: &[u8]) -> std::borrow::Cow<'_, str> {
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
    /// With `partial=true` on a sharded tier: the shards no replica of which answered, whose
    /// rows are missing from this answer (empty when none). Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_shards: Option<Vec<usize>>,
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
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
    pub(crate) fn parse(field: &str, text: &str) -> Result<Self, ApiError> {
        match text {
            "index" => Ok(Self::Index),
            "store" => Ok(Self::Store),
            _ => Err(ApiError::bad_request(field, "must be index or store")),
        }
    }
}

/// How a `name` (or keyword) value is matched. Phone and idcard fields always match exactly
/// (a phone's last digits go in `phone_suffix`). `exact`: the whole name; `prefix`: names
/// starting with it; `partial`: names containing it; `pinyin`: names whose full pinyin or
/// initials are the letters (`zhangsan`, `zs`); `pinyin_prefix`: names whose full pinyin starts
/// with them (`zhang`, `zhangs`). Pinyin ignores case, spaces and tones, takes ü as `v`, `ü` or
/// `u:`, and a plain `u` after `l`/`n` matches ü too.
/// Names match with traditional characters folded to simplified and spaces between Chinese
/// characters ignored.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MatchParam {
    Exact,
    Prefix,
    Partial,
    Pinyin,
    PinyinPrefix,
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
    /// A name; how it matches is set by `match`. Traditional characters and spaces between
    /// Chinese characters don't matter (`張 三` finds 张三).
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
    /// On a sharded tier: when no replica of a shard answers, answer with the other shards'
    /// rows and list the missing ones in `missing_shards` instead of failing with 503.
    #[param(default = false)]
    partial: Option<bool>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
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
    /// On a sharded tier: answer without the shards no replica of which answers, listing them
    /// in `missing_shards`, instead of failing with 503.
    #[serde(default)]
    pub partial: bool,
}

impl crate::extract::BodyShape for BatchLookupRequest {}

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
    /// With `partial: true` on a sharded tier: the shards missing from this answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_shards: Option<Vec<usize>>,
    pub took_ms: f64,
}
