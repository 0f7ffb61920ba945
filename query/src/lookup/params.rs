//! Reading a lookup's parameters: the query string of `GET .../rows` into conditions, limit,
//! cursor, projection and consistency, and the field names both endpoints accept.

use hbidx_indexer::{Condition, MatchMode};
use hbidx_schema::config::{FieldKind, IndexedField, TableConfig};

use crate::{ApiError, TableRuntime};

use super::response::Consistency;

/// Resolves a parameter name to an indexed field: a field's own name, or a field kind
/// (`phone`, `idcard`, `name`) when the table has exactly one field of that kind.
pub(super) fn resolve_field<'a>(table: &'a TableConfig, param: &str) -> Option<&'a IndexedField> {
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

pub(crate) struct RowsQuery {
    pub(crate) conditions: Vec<Condition>,
    pub(crate) limit: usize,
    pub(crate) cursor: Option<Vec<u8>>,
    pub(crate) columns: Option<Vec<String>>,
    pub(crate) index_only: bool,
    pub(crate) consistency: Consistency,
    /// On a sharded tier: answer without unavailable shards (listing them).
    pub(crate) partial: bool,
}

impl RowsQuery {
    /// Whether a condition is on a blind field (see `rows::answered_by_index`).
    pub(crate) fn has_blind_condition(&self) -> bool {
        self.conditions
            .iter()
            .any(|condition| condition.blind.is_some())
    }
}

fn parse_bool(field: &str, value: &str) -> Result<bool, ApiError> {
    match value {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(ApiError::bad_request(field, "must be true or false")),
    }
}

pub(crate) fn parse_rows_query(
    runtime: &TableRuntime,
    pairs: &[(String, String)],
    limits: &crate::Limits,
    cursors: &super::CursorSeal,
) -> Result<RowsQuery, ApiError> {
    let table = &runtime.config;
    let mut mode = MatchMode::Exact;
    let mut limit = limits.default_page;
    let mut cursor = None;
    let mut columns = None;
    let mut index_only = false;
    let mut consistency = Consistency::default();
    let mut partial = false;
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
                    ApiError::bad_request(
                        "match",
                        "must be exact, prefix, partial, pinyin or pinyin_prefix",
                    )
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
            "cursor" => cursor = Some(cursors.open(&table.name, value)?),
            "columns" => columns = Some(parse_columns(table, "columns", value)?),
            "consistency" => consistency = Consistency::parse("consistency", value)?,
            "index_only" => index_only = parse_bool("index_only", value)?,
            "partial" => partial = parse_bool("partial", value)?,
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
            // match= applies to name fields; other kinds are always exact. A blind field takes
            // it too, so that prefix and partial are refused (400) rather than ignored.
            let field_mode = if field.kind == FieldKind::Name || field.blind {
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
        partial,
    })
}
