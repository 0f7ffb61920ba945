//! What a lookup records: metrics by table, field kind and match mode, and the audit line.
//! Kept together because both must never carry a looked-up value (personal data).

use hbidx_indexer::Condition;
use hbidx_indexer::ConditionOp;
use hbidx_schema::config::TableConfig;

use crate::auth::Caller;
use crate::{ApiError, AppState, TableRuntime};

use super::params::resolve_field;

/// The match-mode label of a condition (`suffix` is the phone tail lookup).
fn match_label(condition: &Condition) -> &'static str {
    match condition.op {
        ConditionOp::Exact(_) => "exact",
        ConditionOp::Suffix(_) => "suffix",
        ConditionOp::Prefix(_) => "prefix",
        ConditionOp::Partial(_) => "partial",
        ConditionOp::Pinyin(_) => "pinyin",
        ConditionOp::PinyinPrefix(_) => "pinyin_prefix",
    }
}

/// Counts a lookup condition by field kind and match mode: never by the value, which is
/// personal data and unbounded.
pub(super) fn count_condition(state: &AppState, table: &str, condition: &Condition) {
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
pub(super) fn record_hits(state: &AppState, table: &str, rows: usize) {
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

pub(super) fn record_dropped(table: &str, dropped: usize) {
    if dropped > 0 {
        metrics::counter!("hbidx_lookup_dropped_stale_total", "table" => table.to_string())
            .increment(dropped as u64);
    }
}

/// The field kinds a lookup's parameters name (`phone`, `phone_suffix`, `name`, …), for the
/// audit line: resolved through the table's fields, so neither values nor unknown parameter
/// names (which are caller text) are ever logged. Also returns how many values were given.
pub(crate) fn param_kinds(table: &TableConfig, pairs: &[(String, String)]) -> (Vec<String>, usize) {
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
