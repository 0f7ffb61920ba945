//! Per-row index state: what makes partial updates and late events correct.
//!
//! A change event rarely carries the whole row: a put of `info:name` alone must not wipe the
//! phone and idcard terms of that row, and an event that arrives late with an older timestamp
//! must not overwrite a newer value. tantivy can only replace whole documents, so the indexer
//! needs the row's current indexed values to rebuild the document.
//!
//! Choice: that state lives **inside the index**, as a stored field of the row's document
//! (postcard-encoded [`RowState`]): the latest value and timestamp of each indexed column, and the
//! row / family / cell tombstones. Because it is committed in the same tantivy commit as the terms
//! and the source checkpoint, state, terms and position can never disagree after a crash, and no
//! second database has to be kept in step. Reading it back costs one term lookup plus one stored
//! document read, and only for rows updated after their first write; rows touched since the last
//! commit are served from an in-memory overlay.
//!
//! The merge rules are HBase's, the same ones the embedded store applies, so index and store
//! converge whatever order events arrive in: the highest timestamp wins, a delete wins a tie with
//! a put, and a delete at `ts` masks every version `<= ts`, including puts that arrive later.
//! Applying an event twice changes nothing, which is what makes replay after a crash safe.

use hbidx_schema::model::{CellOp, split_column};
use serde::{Deserialize, Serialize};

/// The latest known version of one indexed column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellState {
    pub column: String,
    pub ts: i64,
    /// `None` is a cell tombstone.
    pub value: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowState {
    pub row_tombstone: Option<i64>,
    pub family_tombstones: Vec<(String, i64)>,
    pub cells: Vec<CellState>,
}

impl RowState {
    pub fn encode(&self) -> Vec<u8> {
        // Serialising plain owned data into a Vec cannot fail.
        postcard::to_allocvec(self).unwrap_or_default()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, postcard::Error> {
        postcard::from_bytes(bytes)
    }

    fn masked_by_tombstones(&self, column: &str, ts: i64) -> bool {
        if self.row_tombstone.is_some_and(|tomb| tomb >= ts) {
            return true;
        }
        let Some((family, _)) = split_column(column) else {
            return false;
        };
        self.family_tombstones
            .iter()
            .any(|(fam, tomb)| fam == family && *tomb >= ts)
    }

    /// Applies one operation. `is_indexed` says which columns the index tracks; others are
    /// ignored. Returns whether the state changed.
    pub fn apply(&mut self, op: &CellOp, is_indexed: impl Fn(&str) -> bool) -> bool {
        match op {
            CellOp::Put { column, ts, value } => {
                if !is_indexed(column) || self.masked_by_tombstones(column, *ts) {
                    return false;
                }
                let value = String::from_utf8_lossy(value).into_owned();
                self.set_cell(column, *ts, Some(value))
            }
            CellOp::DeleteCell { column, ts } => {
                if !is_indexed(column) {
                    return false;
                }
                self.set_cell(column, *ts, None)
            }
            CellOp::DeleteFamily { family, ts } => {
                let before = self.clone();
                match self.family_tombstones.iter_mut().find(|(f, _)| f == family) {
                    Some((_, tomb)) => *tomb = (*tomb).max(*ts),
                    None => self.family_tombstones.push((family.clone(), *ts)),
                }
                self.cells.retain(|cell| {
                    !(cell.ts <= *ts
                        && split_column(&cell.column).is_some_and(|(f, _)| f == family))
                });
                *self != before
            }
            CellOp::DeleteRow { ts } => {
                let before = self.clone();
                self.row_tombstone = Some(self.row_tombstone.map_or(*ts, |t| t.max(*ts)));
                self.cells.retain(|cell| cell.ts > *ts);
                *self != before
            }
        }
    }

    fn set_cell(&mut self, column: &str, ts: i64, value: Option<String>) -> bool {
        match self.cells.iter_mut().find(|cell| cell.column == column) {
            Some(cell) => {
                // Newer wins; on a tie a delete wins over a put, and a put replaces a put.
                let wins =
                    ts > cell.ts || (ts == cell.ts && (value.is_none() || cell.value.is_some()));
                if !wins || (cell.ts == ts && cell.value == value) {
                    return false;
                }
                cell.ts = ts;
                cell.value = value;
                true
            }
            None => {
                self.cells.push(CellState {
                    column: column.to_string(),
                    ts,
                    value,
                });
                true
            }
        }
    }

    /// The current visible value of a column.
    pub fn value(&self, column: &str) -> Option<&str> {
        self.cells
            .iter()
            .find(|cell| cell.column == column)
            .and_then(|cell| cell.value.as_deref())
    }

    /// Whether any indexed column has a visible value (the row is findable by some field).
    pub fn is_live(&self) -> bool {
        self.cells.iter().any(|cell| cell.value.is_some())
    }

    /// Whether there is nothing worth remembering: no values and no tombstones.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty() && self.row_tombstone.is_none() && self.family_tombstones.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(column: &str, ts: i64, value: &str) -> CellOp {
        CellOp::Put {
            column: column.into(),
            ts,
            value: value.as_bytes().to_vec(),
        }
    }

    fn all(_: &str) -> bool {
        true
    }

    #[test]
    fn partial_update_keeps_other_columns() {
        let mut state = RowState::default();
        state.apply(&put("info:phone", 1, "13800138000"), all);
        state.apply(&put("info:name", 2, "张三"), all);
        assert_eq!(state.value("info:phone"), Some("13800138000"));
        assert_eq!(state.value("info:name"), Some("张三"));
    }

    #[test]
    fn late_older_put_loses() {
        let mut state = RowState::default();
        state.apply(&put("info:name", 10, "new"), all);
        assert!(!state.apply(&put("info:name", 5, "old"), all));
        assert_eq!(state.value("info:name"), Some("new"));
    }

    #[test]
    fn row_delete_masks_late_older_put_but_not_newer() {
        let mut state = RowState::default();
        state.apply(&put("info:name", 5, "a"), all);
        state.apply(&CellOp::DeleteRow { ts: 10 }, all);
        assert!(!state.is_live());
        assert!(!state.apply(&put("info:name", 9, "late"), all));
        assert!(!state.apply(&put("info:name", 10, "tie"), all));
        assert!(state.apply(&put("info:name", 11, "newer"), all));
        assert_eq!(state.value("info:name"), Some("newer"));
    }

    #[test]
    fn delete_wins_tie_and_apply_is_idempotent() {
        let mut state = RowState::default();
        state.apply(&put("info:phone", 7, "1"), all);
        state.apply(
            &CellOp::DeleteCell {
                column: "info:phone".into(),
                ts: 7,
            },
            all,
        );
        assert_eq!(state.value("info:phone"), None);
        let snapshot = state.clone();
        state.apply(
            &CellOp::DeleteCell {
                column: "info:phone".into(),
                ts: 7,
            },
            all,
        );
        state.apply(&put("info:phone", 7, "1"), all);
        assert_eq!(state, snapshot);
    }

    #[test]
    fn family_delete_only_hits_its_family() {
        let mut state = RowState::default();
        state.apply(&put("info:name", 1, "a"), all);
        state.apply(&put("extra:name", 1, "b"), all);
        state.apply(
            &CellOp::DeleteFamily {
                family: "info".into(),
                ts: 3,
            },
            all,
        );
        assert_eq!(state.value("info:name"), None);
        assert_eq!(state.value("extra:name"), Some("b"));
        assert!(!state.apply(&put("info:name", 2, "late"), all));
    }

    #[test]
    fn encode_round_trip() {
        let mut state = RowState::default();
        state.apply(&put("info:name", 1, "张三"), all);
        state.apply(&CellOp::DeleteRow { ts: 0 }, all);
        assert_eq!(RowState::decode(&state.encode()).unwrap(), state);
    }
}
