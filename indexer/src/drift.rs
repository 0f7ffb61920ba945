//! Drift between the index and the row store, and the repair that fixes a row of it.
//!
//! The index can drift from the table when writes bypass the event path (a row deleted in HBase
//! without replication, a bulk load, a lost event). Two tools find it: a lookup re-checks every
//! row it returns (read repair), and `hbidx verify` compares index and store both ways. Both
//! turn what they see into a repair [`Mutation`] with [`diff_row`] and hand it to the table's
//! live indexer through its repair queue (`repair_queue.rs`); the indexer applies it like an
//! event but without moving any source position.
//!
//! Repairs use the ordinary merge rules (cell timestamps decide), never a blind overwrite: a
//! repair built from a store read that raced with a newer write can then never roll the index
//! back. The price: where the index holds a *newer* timestamp than the store (a store write made
//! with an old explicit timestamp), the repair can't win; `diff_row` reports such drift as
//! not fixable.

use hbidx_schema::config::TableConfig;
use hbidx_schema::model::{CellOp, Mutation};
use hbidx_store::{Row, RowState};

/// What kind of drift a row shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftKind {
    /// The store has indexed values the index lacks entirely.
    Missing,
    /// The index has a live document for a row the store doesn't have (with indexed values).
    Ghost,
    /// Both have the row, with different indexed values.
    Mismatch,
}

/// One row's drift and the mutation that repairs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub kind: DriftKind,
    /// Merge operations that bring the index to the store's values.
    pub repair: Mutation,
    /// False when the index holds a newer timestamp for a differing column than the store, so
    /// the merge rules keep the index's value.
    pub fixable: bool,
}

/// The columns whose latest values a table's index keeps, in config order: the indexed fields'
/// columns, then the covered ones. What a store scan or multi-get must read to rebuild, check or
/// repair the index.
pub fn kept_columns(table: &TableConfig) -> Vec<String> {
    table.kept_columns().map(str::to_owned).collect()
}

/// Compares a row's index state with the store's row (read with at least the kept columns).
/// `None` when they agree on every indexed and covered column.
pub fn diff_row(
    table: &TableConfig,
    rowkey: &[u8],
    indexed: Option<&RowState>,
    stored: Option<&Row>,
) -> Option<Drift> {
    let mut ops = Vec::new();
    let mut fixable = true;
    let mut index_has = false;
    let mut store_has = false;
    for column in kept_columns(table) {
        let in_index = indexed.and_then(|state| {
            state
                .cells
                .get(&column)
                .and_then(|cell| cell.value.as_ref().map(|value| (value.as_slice(), cell.ts)))
        });
        let in_store = stored.and_then(|row| row.cells.get(&column));
        index_has |= in_index.is_some();
        store_has |= in_store.is_some();
        // The index keeps a blind column as its tags: the store's value is compared in that
        // form (the repair still carries the value, which the writer turns into tags).
        let blind = table.blind_field_of(&column);
        let agrees = |value: &[u8], stored: &[u8]| match blind {
            Some(field) => value == crate::analysis::blind_state_value(field, stored).as_slice(),
            None => value == stored,
        };
        match (in_index, in_store) {
            (None, None) => {}
            (Some((value, _)), Some(cell)) if agrees(value, &cell.value) => {}
            (index, Some(cell)) => {
                if index.is_some_and(|(_, ts)| ts > cell.ts) {
                    fixable = false;
                }
                ops.push(CellOp::Put {
                    column: column.clone(),
                    ts: cell.ts,
                    value: cell.value.clone(),
                });
            }
            // Gone from the store: mask exactly the version the index has, nothing newer, so
            // an event still on its way with a newer value is not lost.
            (Some((_, ts)), None) => ops.push(CellOp::DeleteCell {
                column: column.clone(),
                ts,
            }),
        }
    }
    if ops.is_empty() {
        return None;
    }
    let kind = match (index_has, store_has) {
        (false, _) => DriftKind::Missing,
        (true, false) => DriftKind::Ghost,
        (true, true) => DriftKind::Mismatch,
    };
    Some(Drift {
        kind,
        repair: Mutation {
            table: table.name.clone(),
            rowkey: rowkey.to_vec(),
            ops,
        },
        fixable,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hbidx_store::Cell;

    use super::*;

    fn table() -> TableConfig {
        let config = hbidx_schema::config::parse_config(
            r#"
[[tables]]
name = "user"
[[tables.families]]
name = "info"
[tables.rowkey]
parts = [{ kind = "key" }]
[[tables.fields]]
name = "phone"
kind = "phone"
column = "info:phone"
[[tables.fields]]
name = "name"
kind = "name"
column = "info:name"
"#,
        )
        .unwrap();
        config.tables[0].clone()
    }

    fn state(cells: &[(&str, &str, i64)]) -> RowState {
        let mut state = RowState::default();
        for (column, value, ts) in cells {
            state.apply(CellOp::Put {
                column: column.to_string(),
                ts: *ts,
                value: value.as_bytes().to_vec(),
            });
        }
        state
    }

    fn row(cells: &[(&str, &str, i64)]) -> Row {
        Row {
            rowkey: b"k".to_vec(),
            cells: cells
                .iter()
                .map(|(column, value, ts)| {
                    (
                        column.to_string(),
                        Cell {
                            value: value.as_bytes().to_vec(),
                            ts: *ts,
                        },
                    )
                })
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn agreement_is_no_drift() {
        let table = table();
        let indexed = state(&[("info:phone", "13800138000", 5)]);
        let stored = row(&[("info:phone", "13800138000", 5), ("info:city", "x", 9)]);
        assert_eq!(diff_row(&table, b"k", Some(&indexed), Some(&stored)), None);
        assert_eq!(diff_row(&table, b"k", None, None), None);
    }

    #[test]
    fn ghost_missing_and_mismatch_repair_by_merge() {
        let table = table();
        let indexed = state(&[("info:phone", "13800138000", 5), ("info:name", "张三", 5)]);

        let ghost = diff_row(&table, b"k", Some(&indexed), None).unwrap();
        assert_eq!(ghost.kind, DriftKind::Ghost);
        let mut repaired = indexed.clone();
        for op in ghost.repair.ops {
            repaired.apply(op);
        }
        assert!(!repaired.has_values());

        let stored = row(&[("info:phone", "13900139000", 7), ("info:name", "张三", 5)]);
        let mismatch = diff_row(&table, b"k", Some(&indexed), Some(&stored)).unwrap();
        assert_eq!(mismatch.kind, DriftKind::Mismatch);
        assert!(mismatch.fixable);
        let mut repaired = indexed.clone();
        for op in mismatch.repair.ops {
            repaired.apply(op);
        }
        assert_eq!(repaired.value("info:phone"), Some(&b"13900139000"[..]));

        let missing = diff_row(&table, b"k", None, Some(&stored)).unwrap();
        assert_eq!(missing.kind, DriftKind::Missing);
    }

    #[test]
    fn index_newer_than_store_is_reported_unfixable() {
        let table = table();
        let indexed = state(&[("info:phone", "13800138000", 9)]);
        let stored = row(&[("info:phone", "13900139000", 3)]);
        let drift = diff_row(&table, b"k", Some(&indexed), Some(&stored)).unwrap();
        assert!(!drift.fixable);
    }
}
