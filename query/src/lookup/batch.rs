//! `POST .../rows:batch-lookup`: many values of one field, each through the index, then one
//! multi-get (or one read of the index's kept rows) for all their rows.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

use hbidx_indexer::{Condition, MatchMode};
use hbidx_schema::config::{FieldKind, IndexedField};
use hbidx_store::Row;

use crate::{ApiError, Limits, SharedState, TableRuntime};

use super::audit::{count_condition, record_dropped, record_hits};
use super::params::{parse_columns, resolve_field};
use super::response::{BatchLookupRequest, BatchResponse, BatchResult, Source};
use super::rows::{answered_by_index, index_only_row, kept_rows, row_matches, row_out};
use super::took_ms;

/// One batch value's condition and the rowkeys the index gave for it.
type ValueHits = (Condition, Vec<Vec<u8>>);

/// A checked batch request: the field, the rows per value, the projection and each value's
/// condition (or why it has none).
pub(crate) struct BatchPlan<'a> {
    field: &'a IndexedField,
    pub(crate) per_value: usize,
    projection: Option<Vec<String>>,
    conditions: Vec<Result<Condition, String>>,
}

impl BatchPlan<'_> {
    /// Whether the rows come from the index's kept rows rather than the store.
    pub(crate) fn answered_from_index(
        &self,
        runtime: &TableRuntime,
        request: &BatchLookupRequest,
    ) -> bool {
        answered_by_index(
            &runtime.config,
            self.field.blind,
            self.projection.as_deref(),
            request.consistency,
        ) || request.index_only
    }
}

pub(crate) fn plan<'a>(
    runtime: &'a TableRuntime,
    request: &BatchLookupRequest,
    limits: &Limits,
) -> Result<BatchPlan<'a>, ApiError> {
    let table = &runtime.config;
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
            ApiError::bad_request(
                "match",
                "must be exact, prefix, partial, pinyin or pinyin_prefix",
            )
        })?,
    };
    let per_value = request.limit_per_value.unwrap_or(limits.default_page);
    if !(1..=limits.max_page).contains(&per_value) {
        return Err(ApiError::bad_request(
            "limit_per_value",
            format!("must be from 1 to {}", limits.max_page),
        ));
    }
    let rows = request.values.len().saturating_mul(per_value);
    if rows > limits.max_batch_rows {
        return Err(ApiError::bad_request(
            "limit_per_value",
            format!(
                "a batch returns at most {} rows in all (values × limit_per_value), and {} values \
                 × {per_value} is {rows}: lower limit_per_value or split the batch",
                limits.max_batch_rows,
                request.values.len()
            ),
        ));
    }
    let projection = match &request.columns {
        Some(columns) => Some(parse_columns(table, "columns", &columns.join(","))?),
        None => None,
    };
    // On a blind field every value would fail alike: the request is refused, naming the field.
    if field.blind && mode != MatchMode::Exact {
        return Err(ApiError::bad_request(
            "match",
            format!(
                "match={} does not work on blind field \"{}\": its index holds keyed hashes of whole values, not the values, so only exact lookups work",
                mode.as_str(),
                field.name
            ),
        ));
    }
    let field_mode = if field.kind == FieldKind::Name {
        mode
    } else {
        MatchMode::Exact
    };
    let conditions = request
        .values
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            Condition::build(&format!("values[{i}]"), field, field_mode, false, raw)
                .map_err(|err| err.to_string())
        })
        .collect();
    Ok(BatchPlan {
        field,
        per_value,
        projection,
        conditions,
    })
}

/// This instance's own index hits for every value of a checked batch, off the HTTP runtime
/// (`index_work`): up to `max_batch_values` lookups, each possibly a walk of many matches, each
/// within `max_lookup_matches` and all within `max_batch_matches`; the value that overdraws
/// either is refused by name.
pub(crate) async fn local_hits(
    state: &SharedState,
    runtime: &TableRuntime,
    plan: &BatchPlan<'_>,
) -> Result<Vec<Option<Vec<Vec<u8>>>>, ApiError> {
    let searcher = runtime.searcher.clone();
    let (conditions, per_value) = (plan.conditions.clone(), plan.per_value);
    let (per_value_bound, budget) = (
        state.limits.max_lookup_matches,
        state.limits.max_batch_matches,
    );
    crate::index_work::run(state, move || {
        let mut left = budget;
        let mut hits = Vec::with_capacity(conditions.len());
        for (i, condition) in conditions.iter().enumerate() {
            let Ok(condition) = condition else {
                hits.push(None);
                continue;
            };
            let page = searcher
                .lookup(
                    std::slice::from_ref(condition),
                    per_value,
                    None,
                    left.min(per_value_bound),
                )
                .map_err(|err| match err {
                    hbidx_indexer::IndexerError::TooBroad { .. } if left < per_value_bound => {
                        ApiError::bad_request(
                            format!("values[{i}]"),
                            format!(
                                "the batch's values match more than {budget} rows in all, the most one batch walks ([server] max_batch_matches); send fewer or narrower values"
                            ),
                        )
                    }
                    hbidx_indexer::IndexerError::TooBroad { max, .. } => ApiError::bad_request(
                        format!("values[{i}]"),
                        format!(
                            "the value matches more than {max} rows, the most one lookup walks ([server] max_lookup_matches); send a narrower value"
                        ),
                    ),
                    other => other.into(),
                })?;
            left = left.saturating_sub(usize::try_from(page.walked).unwrap_or(usize::MAX));
            hits.push(Some(page.rowkeys));
        }
        Ok(hits)
    })
    .await
}

pub(super) async fn batch_lookup_rows(
    state: &SharedState,
    table_name: &str,
    request: BatchLookupRequest,
) -> Result<BatchResponse, ApiError> {
    let started = Instant::now();
    let runtime = state.table(table_name)?;
    let table = &runtime.config;
    let plan = plan(runtime, &request, &state.limits)?;
    let projection = plan.projection.clone();
    state.counters.lookups.fetch_add(1, Ordering::Relaxed);
    let from_index = plan.answered_from_index(runtime, &request);

    // Every value's rowkeys: from this index, or gathered from every shard with the rows the
    // shards' indexes keep (when the answer comes from the index).
    let mut kept_by_rowkey: Option<HashMap<Vec<u8>, Option<Row>>> = None;
    let mut missing_shards = None;
    let hits: Vec<Option<Vec<Vec<u8>>>> = match &state.peers {
        None => local_hits(state, runtime, &plan).await?,
        Some(peers) => {
            let fanned =
                crate::cluster::batch_hits_of(state, peers, runtime, &request, &plan).await?;
            if request.partial {
                missing_shards = Some(fanned.missing);
            }
            let mut kept = HashMap::new();
            let hits = fanned
                .values
                .into_iter()
                .zip(&plan.conditions)
                .map(|(value, condition)| {
                    let (rowkeys, rows) = value.unwrap_or_default();
                    if let Some(rows) = rows {
                        kept.extend(rowkeys.iter().cloned().zip(rows));
                    }
                    condition.is_ok().then_some(rowkeys)
                })
                .collect();
            if from_index && !request.index_only {
                kept_by_rowkey = Some(kept);
            }
            hits
        }
    };

    // Resolve every value through the index first, then fetch all rows in ONE multi-get.
    let mut per_value_hits: Vec<Result<ValueHits, String>> = Vec::new();
    let mut unique: Vec<Vec<u8>> = Vec::new();
    let mut position: HashMap<Vec<u8>, usize> = HashMap::new();
    for (condition, rowkeys) in plan.conditions.into_iter().zip(hits) {
        match (condition, rowkeys) {
            (Ok(condition), Some(rowkeys)) => {
                count_condition(state, &table.name, &condition);
                for rowkey in &rowkeys {
                    if !position.contains_key(rowkey) {
                        position.insert(rowkey.clone(), unique.len());
                        unique.push(rowkey.clone());
                    }
                }
                per_value_hits.push(Ok((condition, rowkeys)));
            }
            (Err(err), _) => per_value_hits.push(Err(err)),
            (Ok(_), None) => per_value_hits.push(Err("no shard answered".into())),
        }
    }
    let fetched: Vec<Option<Row>> = if request.index_only || unique.is_empty() {
        Vec::new()
    } else if let Some(mut kept) = kept_by_rowkey {
        unique
            .iter()
            .map(|rowkey| kept.remove(rowkey).flatten())
            .collect()
    } else if from_index {
        kept_rows(runtime, unique).await?
    } else {
        let fetch = projection.as_ref().map(|p| {
            let mut columns = p.clone();
            if !columns.contains(&plan.field.column) {
                columns.push(plan.field.column.clone());
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
            crate::read_repair::schedule(state, runtime, stale);
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
        missing_shards,
        took_ms: took_ms(started),
    })
}
