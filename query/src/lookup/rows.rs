//! From index hits to response rows: rows read from the index's kept states or from the
//! store, re-checked against the lookup and projected onto the requested columns.

use std::collections::BTreeMap;

use hbidx_indexer::Condition;
use hbidx_schema::codec::printable;
use hbidx_schema::config::TableConfig;
use hbidx_store::{Cell, Row, RowState};

use crate::{ApiError, TableRuntime};

use super::response::{Consistency, RowOut, text};

/// Whether a lookup asking for `columns` may be answered from the index: every requested
/// column is one whose latest value the index keeps (a family alone is not: the index can't
/// know which qualifiers the family has). Never when a blind field is involved: the index
/// keeps only keyed hashes of a blind column, which can neither be returned nor re-checked
/// against the lookup (`blind_condition`: a condition is on a blind field).
pub(crate) fn answered_by_index(
    table: &TableConfig,
    blind_condition: bool,
    columns: Option<&[String]>,
    consistency: Consistency,
) -> bool {
    consistency == Consistency::Index
        && !blind_condition
        && columns.is_some_and(|columns| columns.iter().all(|column| table.answers_column(column)))
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
pub(super) fn fetch_columns(
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

pub(super) fn row_matches(table: &TableConfig, row: &Row, conditions: &[Condition]) -> bool {
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

pub(super) fn index_only_row(table: &TableConfig, rowkey: &[u8]) -> RowOut {
    RowOut {
        key: table.rowkey.decode(rowkey).ok(),
        rowkey: printable(rowkey),
        cells: BTreeMap::new(),
    }
}

/// The rows of `rowkeys` as the index keeps them (see [`kept_row`]), in order. A row's state is
/// a stored document: a few µs each from the memory-mapped index, so a page of a typical size
/// is read inline like the lookup itself, and bigger ones on a blocking thread.
pub(crate) async fn kept_rows(
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
