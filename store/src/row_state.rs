//! A stored row: its latest cell versions and tombstones, the HBase timestamp rules that update
//! it, and its compact on-disk encoding.
//!
//! # Semantics (the newest version of each cell)
//!
//! Only the newest version of each cell is kept here, so a read of the row state returns the
//! latest version. (The embedded store keeps older versions of families with `VERSIONS` above 1
//! apart, in `embedded/versions.rs`; this state and its rules stay the same for them.) With `<=`-style deletes only (delete cell, family, row: HBase `addColumns`,
//! `addFamily`, `deleteAll`), that is enough to answer every read exactly as HBase would:
//!
//! - A cell is `(ts, Some(value))` (a put) or `(ts, None)` (a cell tombstone). A new put or cell
//!   delete replaces it only if its timestamp is newer; on equal timestamps a delete beats a put
//!   and a later put overwrites an earlier put.
//! - Family and row tombstones keep their highest timestamp. A put with `ts <=` an applicable
//!   tombstone is masked and dropped, now and when it arrives late.
//! - Whatever a tombstone masks is dropped from the state (cells, redundant cell and family
//!   tombstones) but the tombstone itself stays, so late, older puts stay masked. Consequently
//!   every stored put is visible.
//!
//! # Encoding
//!
//! One format byte ([`FORMAT_V1`]) followed by the postcard encoding of [`RowState`]. Reads
//! decode into [`RowView`] instead, which borrows column names and values from the stored bytes:
//! postcard encodes a map exactly like a sequence of pairs and a `Vec<u8>` exactly like a byte
//! string, so the two types share one wire format (pinned by a test below).

use std::collections::BTreeMap;

use hbidx_schema::model::{CellOp, Mutation, split_column};
use serde::{Deserialize, Serialize};

use crate::api::Cell;
use crate::error::{Result, StoreError};

/// The first byte of every stored row; bump when the encoding changes.
pub(crate) const FORMAT_V1: u8 = 1;

/// HBase's own rowkey limit (`HConstants.MAX_ROW_LENGTH`).
pub(crate) const MAX_ROWKEY_LEN: usize = i16::MAX as usize;

/// The owned, mutable form of a stored row, used on the write path.
///
/// This is the one implementation of HBase's cell timestamp rules in hbidx: the indexer keeps a
/// `RowState` of each row's indexed columns (inside the tantivy document) and merges events with
/// the same [`RowState::apply`], so the index and the store converge whatever order events
/// arrive in.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowState {
    /// Highest `DeleteRow` timestamp seen.
    pub row_tombstone: Option<i64>,
    /// Highest `DeleteFamily` timestamp per family, only where above the row tombstone.
    pub family_tombstones: BTreeMap<String, i64>,
    /// The newest version or cell tombstone per `family:qualifier`.
    pub cells: BTreeMap<String, StoredCell>,
}

/// The newest version of one cell: a put (`value: Some`) or a cell tombstone (`value: None`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredCell {
    pub ts: i64,
    pub value: Option<Vec<u8>>,
}

/// The borrowed, read-only form of a stored row; see the module docs for why it decodes from
/// [`RowState`]'s bytes.
#[derive(Debug, Deserialize)]
pub(crate) struct RowView<'a> {
    pub row_tombstone: Option<i64>,
    #[serde(borrow)]
    pub family_tombstones: Vec<(&'a str, i64)>,
    #[serde(borrow)]
    pub cells: Vec<(&'a str, CellView<'a>)>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct CellView<'a> {
    pub ts: i64,
    #[serde(borrow)]
    pub value: Option<&'a [u8]>,
}

/// Checks a mutation against the rules every store enforces, before anything is written.
pub(crate) fn validate_mutation(mutation: &Mutation) -> Result<()> {
    let invalid = |reason: String| Err(StoreError::InvalidMutation { reason });
    if mutation.rowkey.is_empty() {
        return invalid(format!("empty rowkey in table `{}`", mutation.table));
    }
    if mutation.rowkey.len() > MAX_ROWKEY_LEN {
        return invalid(format!(
            "rowkey of {} bytes in table `{}` exceeds the {MAX_ROWKEY_LEN}-byte limit",
            mutation.rowkey.len(),
            mutation.table
        ));
    }
    if mutation.ops.is_empty() {
        return invalid(format!(
            "mutation of row {} in table `{}` has no operations",
            crate::error::escape_key(&mutation.rowkey),
            mutation.table
        ));
    }
    for op in &mutation.ops {
        match op {
            CellOp::Put { column, .. } | CellOp::DeleteCell { column, .. } => {
                if split_column(column).is_none() {
                    return invalid(format!(
                        "column `{column}` is not of the form `family:qualifier` with a non-empty family"
                    ));
                }
            }
            CellOp::DeleteFamily { family, .. } => {
                if family.is_empty() || family.contains(':') {
                    return invalid(format!(
                        "family `{family}` must be non-empty and contain no `:`"
                    ));
                }
            }
            CellOp::DeleteRow { .. } => {}
        }
    }
    Ok(())
}

/// The family part of a stored (hence validated) column name.
pub(crate) fn family_of(column: &str) -> &str {
    column.split_once(':').map_or(column, |(family, _)| family)
}

impl RowState {
    /// Decodes a stored row.
    pub fn decode(bytes: &[u8]) -> std::result::Result<Self, String> {
        let body = strip_format(bytes)?;
        postcard::from_bytes(body).map_err(|error| format!("row state: {error}"))
    }

    /// Encodes the row for storage.
    pub fn encode(&self) -> Vec<u8> {
        let buffer = vec![FORMAT_V1];
        // Serializing plain maps, strings, integers and bytes into a Vec can't fail.
        postcard::to_extend(self, buffer).unwrap_or_else(|_| unreachable!("postcard to Vec"))
    }

    /// The visible value of `column`, if any. Every stored put is visible (see the module docs).
    pub fn value(&self, column: &str) -> Option<&[u8]> {
        self.cells
            .get(column)
            .and_then(|cell| cell.value.as_deref())
    }

    /// Whether any cell has a visible value.
    pub fn has_values(&self) -> bool {
        self.cells.values().any(|cell| cell.value.is_some())
    }

    /// Whether there is nothing to remember: no cells and no tombstones.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty() && self.row_tombstone.is_none() && self.family_tombstones.is_empty()
    }

    /// The highest tombstone that applies to every cell of `family`.
    pub(crate) fn floor_for_family(&self, family: &str) -> Option<i64> {
        let family_tombstone = self.family_tombstones.get(family).copied();
        self.row_tombstone.max(family_tombstone)
    }

    /// Applies one operation with HBase's timestamp rules. Returns whether the state changed
    /// (`false` for operations masked by, or older than, what is already stored).
    pub fn apply(&mut self, op: CellOp) -> bool {
        match op {
            CellOp::Put { column, ts, value } => self.write_cell(column, ts, Some(value)),
            CellOp::DeleteCell { column, ts } => self.write_cell(column, ts, None),
            CellOp::DeleteFamily { family, ts } => self.delete_family(family, ts),
            CellOp::DeleteRow { ts } => self.delete_row(ts),
        }
    }

    /// A put (`value: Some`) or a cell delete (`value: None`) at `ts`.
    fn write_cell(&mut self, column: String, ts: i64, value: Option<Vec<u8>>) -> bool {
        // Row and family tombstones mask every cell at or below them; masked writes of either
        // kind change nothing a read can observe, now or later.
        if self
            .floor_for_family(family_of(&column))
            .is_some_and(|floor| ts <= floor)
        {
            return false;
        }
        match self.cells.get_mut(&column) {
            Some(current) => {
                let newer = ts > current.ts;
                // Equal timestamps: a delete beats a put; a later put overwrites an earlier put;
                // nothing overwrites a cell tombstone.
                let tie_wins = ts == current.ts && current.value.is_some();
                if !(newer || tie_wins) {
                    return false;
                }
                if tie_wins && current.value == value {
                    return false;
                }
                *current = StoredCell { ts, value };
            }
            None => {
                self.cells.insert(column, StoredCell { ts, value });
            }
        }
        true
    }

    fn delete_family(&mut self, family: String, ts: i64) -> bool {
        if self
            .floor_for_family(&family)
            .is_some_and(|floor| ts <= floor)
        {
            return false;
        }
        self.cells
            .retain(|column, cell| !(cell.ts <= ts && family_of(column) == family));
        self.family_tombstones.insert(family, ts);
        true
    }

    fn delete_row(&mut self, ts: i64) -> bool {
        if self.row_tombstone.is_some_and(|floor| ts <= floor) {
            return false;
        }
        self.row_tombstone = Some(ts);
        self.family_tombstones
            .retain(|_, family_ts| *family_ts > ts);
        self.cells.retain(|_, cell| cell.ts > ts);
        true
    }
}

/// Checks and strips the format byte.
fn strip_format(bytes: &[u8]) -> std::result::Result<&[u8], String> {
    match bytes.split_first() {
        Some((&FORMAT_V1, body)) => Ok(body),
        Some((other, _)) => Err(format!("unknown row format {other}")),
        None => Err("empty row value".to_owned()),
    }
}

/// A parsed column projection: `family:qualifier` entries match one column, bare `family`
/// entries a whole family. `None` (or no entries) matches everything.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Projection<'a> {
    entries: Option<&'a [String]>,
}

impl<'a> Projection<'a> {
    pub fn new(columns: Option<&'a [String]>) -> Self {
        Self {
            entries: columns.filter(|entries| !entries.is_empty()),
        }
    }

    fn matches(&self, column: &str) -> bool {
        let Some(entries) = self.entries else {
            return true;
        };
        entries.iter().any(|entry| {
            if entry.contains(':') {
                entry == column
            } else {
                family_of(column) == entry
            }
        })
    }
}

impl<'a> RowView<'a> {
    /// Decodes a stored row without copying column names or values.
    pub fn decode(bytes: &'a [u8]) -> std::result::Result<Self, String> {
        let body = strip_format(bytes)?;
        postcard::from_bytes(body).map_err(|error| format!("row state: {error}"))
    }

    /// Whether a stored cell is visible. Writes drop masked cells, so this only re-checks
    /// tombstones as a guard against states written by other code paths.
    fn is_visible(&self, column: &str, cell: &CellView<'_>) -> bool {
        if cell.value.is_none() {
            return false;
        }
        if self.row_tombstone.is_some_and(|floor| cell.ts <= floor) {
            return false;
        }
        if self.family_tombstones.is_empty() {
            return true;
        }
        let family = family_of(column);
        !self
            .family_tombstones
            .iter()
            .any(|&(masked, floor)| masked == family && cell.ts <= floor)
    }

    /// The visible cells that match `projection`, copied out.
    pub fn visible_cells(&self, projection: Projection<'_>) -> BTreeMap<String, Cell> {
        let mut cells = BTreeMap::new();
        for (column, cell) in &self.cells {
            if !self.is_visible(column, cell) || !projection.matches(column) {
                continue;
            }
            if let Some(value) = cell.value {
                cells.insert(
                    (*column).to_owned(),
                    Cell {
                        value: value.to_vec(),
                        ts: cell.ts,
                    },
                );
            }
        }
        cells
    }

    /// Whether any visible cell matches `projection`, without copying anything.
    pub fn has_visible_cell(&self, projection: Projection<'_>) -> bool {
        self.cells
            .iter()
            .any(|(column, cell)| self.is_visible(column, cell) && projection.matches(column))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(column: &str, ts: i64, value: &str) -> CellOp {
        CellOp::Put {
            column: column.to_owned(),
            ts,
            value: value.as_bytes().to_vec(),
        }
    }

    fn visible(state: &RowState) -> BTreeMap<String, (i64, String)> {
        let bytes = state.encode();
        let view = RowView::decode(&bytes).expect("decodes");
        view.visible_cells(Projection::new(None))
            .into_iter()
            .map(|(column, cell)| {
                (
                    column,
                    (cell.ts, String::from_utf8(cell.value).expect("utf-8")),
                )
            })
            .collect()
    }

    fn state_after(ops: Vec<CellOp>) -> RowState {
        let mut state = RowState::default();
        for op in ops {
            state.apply(op);
        }
        state
    }

    #[test]
    fn newer_put_wins_and_older_put_is_ignored() {
        let mut state = state_after(vec![put("i:a", 10, "ten")]);
        assert!(state.apply(put("i:a", 20, "twenty")));
        assert!(!state.apply(put("i:a", 15, "fifteen")));
        assert_eq!(visible(&state)["i:a"], (20, "twenty".to_owned()));
    }

    #[test]
    fn equal_timestamp_put_overwrites_put() {
        let state = state_after(vec![put("i:a", 10, "first"), put("i:a", 10, "second")]);
        assert_eq!(visible(&state)["i:a"], (10, "second".to_owned()));
    }

    #[test]
    fn identical_rewrite_is_a_no_op() {
        let mut state = state_after(vec![put("i:a", 10, "same")]);
        assert!(!state.apply(put("i:a", 10, "same")));
    }

    #[test]
    fn delete_wins_over_put_on_equal_timestamp_in_either_order() {
        let delete = || CellOp::DeleteCell {
            column: "i:a".to_owned(),
            ts: 10,
        };
        assert!(visible(&state_after(vec![put("i:a", 10, "x"), delete()])).is_empty());
        assert!(visible(&state_after(vec![delete(), put("i:a", 10, "x")])).is_empty());
    }

    #[test]
    fn delete_cell_masks_older_and_late_older_puts_but_not_newer() {
        let mut state = state_after(vec![
            put("i:a", 5, "old"),
            CellOp::DeleteCell {
                column: "i:a".to_owned(),
                ts: 7,
            },
        ]);
        assert!(visible(&state).is_empty());
        assert!(!state.apply(put("i:a", 6, "late")));
        assert!(visible(&state).is_empty());
        assert!(state.apply(put("i:a", 8, "new")));
        assert_eq!(visible(&state)["i:a"], (8, "new".to_owned()));
    }

    #[test]
    fn delete_cell_older_than_the_put_leaves_it() {
        let state = state_after(vec![
            put("i:a", 10, "kept"),
            CellOp::DeleteCell {
                column: "i:a".to_owned(),
                ts: 9,
            },
        ]);
        assert_eq!(visible(&state)["i:a"], (10, "kept".to_owned()));
    }

    #[test]
    fn delete_family_masks_only_that_family_up_to_its_timestamp() {
        let mut state = state_after(vec![
            put("i:a", 5, "a"),
            put("i:b", 12, "b"),
            put("x:a", 5, "other family"),
            CellOp::DeleteFamily {
                family: "i".to_owned(),
                ts: 10,
            },
        ]);
        assert!(!state.apply(put("i:c", 9, "late")));
        let cells = visible(&state);
        assert_eq!(cells.keys().collect::<Vec<_>>(), ["i:b", "x:a"]);
        // The masked cell is gone from the stored state, the tombstone is kept.
        assert!(!state.cells.contains_key("i:a"));
        assert_eq!(state.family_tombstones["i"], 10);
    }

    #[test]
    fn delete_row_masks_everything_up_to_its_timestamp_and_keeps_the_tombstone() {
        let mut state = state_after(vec![
            put("i:a", 5, "a"),
            put("x:b", 20, "b"),
            CellOp::DeleteFamily {
                family: "i".to_owned(),
                ts: 6,
            },
            CellOp::DeleteRow { ts: 10 },
        ]);
        assert!(
            state.family_tombstones.is_empty(),
            "subsumed by the row tombstone"
        );
        assert_eq!(state.row_tombstone, Some(10));
        assert!(!state.apply(put("i:a", 10, "late")));
        assert!(!state.apply(CellOp::DeleteRow { ts: 3 }));
        assert_eq!(
            visible(&state).keys().collect::<Vec<_>>(),
            ["x:b"],
            "newer cells survive"
        );
        assert!(state.apply(put("i:a", 11, "after")));
        assert_eq!(visible(&state).len(), 2);
    }

    #[test]
    fn projection_selects_columns_and_families() {
        let state = state_after(vec![
            put("info:phone", 1, "p"),
            put("info:name", 1, "n"),
            put("meta:x", 1, "x"),
        ]);
        let bytes = state.encode();
        let view = RowView::decode(&bytes).expect("decodes");
        let columns = |entries: &[&str]| {
            let entries: Vec<String> = entries.iter().map(|e| (*e).to_owned()).collect();
            let cells = view.visible_cells(Projection::new(Some(&entries)));
            cells.into_keys().collect::<Vec<_>>()
        };
        assert_eq!(columns(&["info:phone"]), ["info:phone"]);
        assert_eq!(columns(&["info"]), ["info:name", "info:phone"]);
        assert_eq!(columns(&["meta", "info:name"]), ["info:name", "meta:x"]);
        assert!(columns(&["nope"]).is_empty());
        assert!(
            columns(&["inf"]).is_empty(),
            "family match is exact, not a prefix"
        );
        assert_eq!(
            columns(&[]).len(),
            3,
            "an empty projection selects everything"
        );
    }

    #[test]
    fn owned_and_borrowed_forms_share_one_encoding() {
        let state = state_after(vec![
            put("info:phone", 3, "13800000000"),
            CellOp::DeleteCell {
                column: "info:gone".to_owned(),
                ts: 4,
            },
            CellOp::DeleteFamily {
                family: "meta".to_owned(),
                ts: 2,
            },
            CellOp::DeleteRow { ts: 1 },
        ]);
        let bytes = state.encode();
        assert_eq!(RowState::decode(&bytes).expect("owned decode"), state);
        let view = RowView::decode(&bytes).expect("borrowed decode");
        assert_eq!(view.row_tombstone, Some(1));
        assert_eq!(view.family_tombstones, [("meta", 2)]);
        assert_eq!(view.cells.len(), 2);
        assert_eq!(view.cells[1].0, "info:phone");
        assert_eq!(view.cells[1].1.value, Some(&b"13800000000"[..]));
        assert_eq!(view.cells[0].1.value, None);
    }

    #[test]
    fn unknown_format_is_rejected() {
        let mut bytes = RowState::default().encode();
        bytes[0] = 99;
        assert!(RowView::decode(&bytes).is_err());
        assert!(RowState::decode(&[]).is_err());
    }

    #[test]
    fn validation_rejects_malformed_mutations() {
        let mutation = |rowkey: &[u8], ops: Vec<CellOp>| Mutation {
            table: "t".to_owned(),
            rowkey: rowkey.to_vec(),
            ops,
        };
        assert!(validate_mutation(&mutation(b"r", vec![put("i:a", 1, "v")])).is_ok());
        assert!(validate_mutation(&mutation(b"r", vec![put("i:", 1, "v")])).is_ok());
        assert!(validate_mutation(&mutation(b"", vec![put("i:a", 1, "v")])).is_err());
        assert!(validate_mutation(&mutation(b"r", vec![])).is_err());
        assert!(validate_mutation(&mutation(b"r", vec![put("noqualifier", 1, "v")])).is_err());
        assert!(validate_mutation(&mutation(b"r", vec![put(":q", 1, "v")])).is_err());
        let bad_family = CellOp::DeleteFamily {
            family: "a:b".to_owned(),
            ts: 1,
        };
        assert!(validate_mutation(&mutation(b"r", vec![bad_family])).is_err());
        let long_key = vec![b'k'; MAX_ROWKEY_LEN + 1];
        assert!(validate_mutation(&mutation(&long_key, vec![put("i:a", 1, "v")])).is_err());
    }
}
