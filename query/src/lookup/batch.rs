//! `POST .../rows:batch-lookup`: many values of one field, each through the index, then one
//! multi-get (or one read of the index's kept rows) for all their rows.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use hbidx_indexer::{Condition, MatchMode};
use hbidx_schema::config::FieldKind;
use hbidx_store::Row;

use crate::{ApiError, SharedState};

use super::audit::{count_condition, record_dropped, record_hits};
use super::params::{parse_columns, resolve_field};
use super::response::{BatchLookupRequest, BatchResponse, BatchResult, Source};
use super::rows::{answered_by_index, index_only_row, kept_rows, row_matches, row_out};
use super::took_ms;

/// One batch value's condition and the rowkeys the index gave for it.
type ValueHits = (Condition, Vec<Vec<u8>>);

pub(super) async fn batch_lookup_rows(
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
