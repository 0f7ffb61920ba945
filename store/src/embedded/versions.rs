//! Older cell versions, for column families that keep more than one (HBase's `VERSIONS`).
//!
//! # Why a keyspace of their own
//!
//! The row keyspace holds each row's latest state ([`RowState`]): the newest version of every
//! cell and the tombstones. Lookups, scans and the indexer read that format on their hot paths,
//! and it stays exactly as it is whatever a family's `VERSIONS`. The versions below the newest go
//! to a second keyspace, `vers.<esc(T)>`, keyed by rowkey like the rows, which only a table with
//! a family keeping more than one version has. A table whose families all keep one version
//! (every configured table unless its `versions` says otherwise) has no such keyspace, and its
//! reads and writes do exactly what they did without versions: not a read or a byte more.
//!
//! The change feed carries mutations as they were submitted, as before; its consumers merge them
//! with [`RowState::apply`], which keeps the newest version only, so an older version written
//! late never becomes the indexed value.
//!
//! # Rules (HBase's, for `<=` deletes)
//!
//! A [`History`] holds, per column of a versioned family, the versions older than the row
//! state's newest put (newest first, at most `VERSIONS - 1`), and the highest cell delete that
//! lies below that newest put. Every version kept is visible:
//!
//! - A put above the newest becomes the newest; the previous newest moves into the history.
//!   A put at the newest's timestamp overwrites it (HBase: the later write wins). A put below it
//!   takes its place among the older versions (overwriting one with the same timestamp) unless
//!   `VERSIONS` newer ones are kept already.
//! - A put at or below a row, family or cell delete is masked, now and when it arrives late. The
//!   row and family tombstones stay in the row state; a cell delete stays there while it is the
//!   cell's newest state, and moves into the history (`deleted_to`) once a newer put replaces it
//!   or when it was older than the newest put to begin with.
//! - A delete drops every kept version at or below it.
//!
//! HBase drops versions beyond `VERSIONS` at flush and compaction, so until then a time-range
//! read can see one more; here they are dropped when written, which is what HBase answers after
//! a compaction.

use std::collections::BTreeMap;

use hbidx_schema::model::CellOp;
use serde::{Deserialize, Serialize};

use crate::api::Cell;
use crate::row_state::{RowState, RowView, StoredCell, family_of};

/// The first byte of every stored history; bump when the encoding changes.
const HISTORY_V1: u8 = 1;

/// How many versions each family keeps: only the families keeping more than one are named.
pub(crate) type Keep = BTreeMap<String, u32>;

/// The versions a family keeps (1 when not named).
fn keep_of(keep: &Keep, family: &str) -> usize {
    keep.get(family).map_or(1, |&versions| {
        usize::try_from(versions).unwrap_or(usize::MAX)
    })
}

/// The older versions of one row; see the module docs.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct History {
    columns: BTreeMap<String, ColumnHistory>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ColumnHistory {
    /// A cell delete below the newest put: puts at or below it are masked.
    deleted_to: Option<i64>,
    /// Versions older than the row state's newest put, newest first.
    older: Vec<(i64, Vec<u8>)>,
}

impl ColumnHistory {
    fn is_empty(&self) -> bool {
        self.deleted_to.is_none() && self.older.is_empty()
    }

    /// Drops what a delete at `ts` masks; returns whether anything changed.
    fn mask_to(&mut self, ts: i64) -> bool {
        let before = self.older.len();
        self.older.retain(|(version, _)| *version > ts);
        let mut changed = self.older.len() != before;
        if self.deleted_to.is_some_and(|deleted| deleted <= ts) {
            // The row or family tombstone at `ts` masks as much.
            self.deleted_to = None;
            changed = true;
        }
        changed
    }
}

impl History {
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        match bytes.split_first() {
            Some((&HISTORY_V1, body)) => {
                postcard::from_bytes(body).map_err(|error| format!("versions: {error}"))
            }
            Some((other, _)) => Err(format!("unknown versions format {other}")),
            None => Err("empty versions value".to_owned()),
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        // Serializing plain maps, strings, integers and bytes into a Vec can't fail.
        postcard::to_extend(self, vec![HISTORY_V1])
            .unwrap_or_else(|_| unreachable!("postcard to Vec"))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.columns.is_empty()
    }

    /// Drops what a delete at `ts` masks in the columns `masked` selects.
    fn mask(&mut self, ts: i64, masked: impl Fn(&str) -> bool) -> bool {
        let mut changed = false;
        self.columns.retain(|column, history| {
            if masked(column) {
                changed |= history.mask_to(ts);
            }
            let keep = !history.is_empty();
            changed |= !keep;
            keep
        });
        changed
    }
}

/// Inserts `(ts, value)` among `older` (newest first), keeping at most `cap`; returns whether
/// anything changed.
fn insert_older(older: &mut Vec<(i64, Vec<u8>)>, ts: i64, value: Vec<u8>, cap: usize) -> bool {
    let position = older
        .iter()
        .position(|(version, _)| *version <= ts)
        .unwrap_or(older.len());
    if let Some((version, current)) = older.get_mut(position)
        && *version == ts
    {
        if *current == value {
            return false;
        }
        *current = value;
        return true;
    }
    if position >= cap {
        return false;
    }
    older.insert(position, (ts, value));
    older.truncate(cap);
    true
}

/// Applies `op` to a row's latest state and its history with the rules in the module docs.
/// Returns whether the state changed and whether the history did.
pub(crate) fn apply(
    state: &mut RowState,
    history: &mut History,
    op: CellOp,
    keep: &Keep,
) -> (bool, bool) {
    match op {
        CellOp::Put { column, ts, value } => {
            let family = family_of(&column);
            let versions = keep_of(keep, family);
            if versions <= 1 {
                return (state.apply(CellOp::Put { column, ts, value }), false);
            }
            if state
                .floor_for_family(family)
                .is_some_and(|floor| ts <= floor)
                || history
                    .columns
                    .get(&column)
                    .and_then(|history| history.deleted_to)
                    .is_some_and(|deleted| ts <= deleted)
            {
                return (false, false);
            }
            let newest = state
                .cells
                .get(&column)
                .map(|cell| (cell.ts, cell.value.is_some()));
            match newest {
                None => (state.apply(CellOp::Put { column, ts, value }), false),
                Some((newest, _)) if ts == newest => {
                    (state.apply(CellOp::Put { column, ts, value }), false)
                }
                Some((newest, false)) => {
                    if ts < newest {
                        return (false, false);
                    }
                    // The cell delete stops being the newest state: it moves into the history.
                    let entry = history.columns.entry(column.clone()).or_default();
                    entry.deleted_to = Some(entry.deleted_to.map_or(newest, |d| d.max(newest)));
                    entry.older.clear();
                    let stored = StoredCell {
                        ts,
                        value: Some(value),
                    };
                    state.cells.insert(column, stored);
                    (true, true)
                }
                Some((newest, true)) if ts > newest => {
                    let stored = StoredCell {
                        ts,
                        value: Some(value),
                    };
                    let previous = state.cells.insert(column.clone(), stored);
                    if let Some(StoredCell {
                        ts: previous_ts,
                        value: Some(previous),
                    }) = previous
                    {
                        let entry = history.columns.entry(column).or_default();
                        entry.older.insert(0, (previous_ts, previous));
                        entry.older.truncate(versions - 1);
                    }
                    (true, true)
                }
                Some(_) => {
                    let entry = history.columns.entry(column.clone()).or_default();
                    let changed = insert_older(&mut entry.older, ts, value, versions - 1);
                    if entry.is_empty() {
                        history.columns.remove(&column);
                    }
                    (false, changed)
                }
            }
        }
        CellOp::DeleteCell { column, ts } => {
            if keep_of(keep, family_of(&column)) <= 1 {
                return (state.apply(CellOp::DeleteCell { column, ts }), false);
            }
            let state_changed = state.apply(CellOp::DeleteCell {
                column: column.clone(),
                ts,
            });
            let newest_is_put = state
                .cells
                .get(&column)
                .is_some_and(|cell| cell.value.is_some());
            if !newest_is_put {
                // The delete is the cell's newest state now: everything older is masked.
                return (state_changed, history.columns.remove(&column).is_some());
            }
            let entry = history.columns.entry(column).or_default();
            let before = entry.clone();
            entry.older.retain(|(version, _)| *version > ts);
            entry.deleted_to = Some(entry.deleted_to.map_or(ts, |d| d.max(ts)));
            (state_changed, *entry != before)
        }
        CellOp::DeleteFamily { family, ts } => {
            let versioned = keep_of(keep, &family) > 1;
            let masked = if versioned {
                history.mask(ts, |column| family_of(column) == family)
            } else {
                false
            };
            (state.apply(CellOp::DeleteFamily { family, ts }), masked)
        }
        CellOp::DeleteRow { ts } => {
            let masked = history.mask(ts, |_| true);
            (state.apply(CellOp::DeleteRow { ts }), masked)
        }
    }
}

/// Every visible version of the columns `projection` selects, newest first and at most the
/// family's `VERSIONS` per column.
pub(crate) fn visible_versions(
    view: &RowView<'_>,
    history: Option<&History>,
    projection: crate::row_state::Projection<'_>,
    keep: &Keep,
) -> BTreeMap<String, Vec<Cell>> {
    let mut versions = BTreeMap::new();
    for (column, newest) in view.visible_cells(projection) {
        let cap = keep_of(keep, family_of(&column));
        let mut cells = vec![newest];
        if let Some(older) = history.and_then(|history| history.columns.get(&column)) {
            cells.extend(
                older
                    .older
                    .iter()
                    .take(cap.saturating_sub(1))
                    .map(|(ts, value)| Cell {
                        value: value.clone(),
                        ts: *ts,
                    }),
            );
        }
        versions.insert(column, cells);
    }
    versions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row_state::Projection;

    fn put(column: &str, ts: i64, value: &str) -> CellOp {
        CellOp::Put {
            column: column.to_owned(),
            ts,
            value: value.as_bytes().to_vec(),
        }
    }

    /// Families `v` (3 versions) and `one` (1).
    fn keep() -> Keep {
        Keep::from([("v".to_owned(), 3)])
    }

    fn run(ops: Vec<CellOp>) -> (RowState, History) {
        let (mut state, mut history) = (RowState::default(), History::default());
        for op in ops {
            apply(&mut state, &mut history, op, &keep());
        }
        (state, history)
    }

    fn versions(state: &RowState, history: &History, column: &str) -> Vec<(i64, String)> {
        let bytes = state.encode();
        let view = RowView::decode(&bytes).expect("decodes");
        let history = History::decode(&history.encode()).expect("decodes");
        visible_versions(&view, Some(&history), Projection::new(None), &keep())
            .remove(column)
            .unwrap_or_default()
            .into_iter()
            .map(|cell| (cell.ts, String::from_utf8(cell.value).expect("utf-8")))
            .collect()
    }

    fn delete_cell(column: &str, ts: i64) -> CellOp {
        CellOp::DeleteCell {
            column: column.to_owned(),
            ts,
        }
    }

    #[test]
    fn a_family_keeps_its_versions_newest_first_whatever_the_write_order() {
        let (state, history) = run(vec![
            put("v:a", 20, "b"),
            put("v:a", 10, "a"),
            put("v:a", 40, "d"),
            put("v:a", 30, "c"),
            put("v:a", 30, "c2"),
            put("v:a", 5, "too old"),
        ]);
        assert_eq!(
            versions(&state, &history, "v:a"),
            [(40, "d".into()), (30, "c2".into()), (20, "b".into())]
        );
        // The row state is the newest version only, in the format lookups read.
        assert_eq!(state.value("v:a"), Some(&b"d"[..]));
    }

    #[test]
    fn a_one_version_family_writes_no_history() {
        let (state, history) = run(vec![put("one:a", 2, "new"), put("one:a", 1, "old")]);
        assert!(history.is_empty());
        assert_eq!(versions(&state, &history, "one:a"), [(2, "new".into())]);
    }

    #[test]
    fn deletes_mask_versions_at_or_below_them_and_late_puts() {
        let (state, mut history) = run(vec![
            put("v:a", 10, "a"),
            put("v:a", 20, "b"),
            put("v:a", 30, "c"),
            delete_cell("v:a", 20),
        ]);
        assert_eq!(versions(&state, &history, "v:a"), [(30, "c".into())]);
        let mut state = state;
        let (_, changed) = apply(&mut state, &mut history, put("v:a", 15, "late"), &keep());
        assert!(!changed, "masked by the delete at 20");
        apply(&mut state, &mut history, put("v:a", 25, "between"), &keep());
        assert_eq!(
            versions(&state, &history, "v:a"),
            [(30, "c".into()), (25, "between".into())]
        );
    }

    #[test]
    fn a_delete_overtaken_by_a_newer_put_still_masks_older_puts() {
        let (mut state, mut history) = run(vec![
            put("v:a", 5, "old"),
            delete_cell("v:a", 7),
            put("v:a", 10, "new"),
        ]);
        assert_eq!(versions(&state, &history, "v:a"), [(10, "new".into())]);
        let (_, changed) = apply(&mut state, &mut history, put("v:a", 6, "late"), &keep());
        assert!(!changed);
        apply(&mut state, &mut history, put("v:a", 8, "kept"), &keep());
        assert_eq!(
            versions(&state, &history, "v:a"),
            [(10, "new".into()), (8, "kept".into())]
        );
    }

    #[test]
    fn family_and_row_deletes_drop_older_versions() {
        let (mut state, mut history) = run(vec![
            put("v:a", 10, "a"),
            put("v:a", 20, "b"),
            put("v:b", 5, "x"),
            put("v:b", 30, "y"),
        ]);
        apply(
            &mut state,
            &mut history,
            CellOp::DeleteFamily {
                family: "v".to_owned(),
                ts: 10,
            },
            &keep(),
        );
        assert_eq!(versions(&state, &history, "v:a"), [(20, "b".into())]);
        assert_eq!(versions(&state, &history, "v:b"), [(30, "y".into())]);
        apply(
            &mut state,
            &mut history,
            CellOp::DeleteRow { ts: 40 },
            &keep(),
        );
        assert!(history.is_empty());
        assert!(versions(&state, &history, "v:a").is_empty());
    }

    #[test]
    fn fewer_versions_kept_than_stored_are_cut_on_read() {
        let (state, history) = run(vec![
            put("v:a", 1, "a"),
            put("v:a", 2, "b"),
            put("v:a", 3, "c"),
        ]);
        let bytes = state.encode();
        let view = RowView::decode(&bytes).expect("decodes");
        let two = Keep::from([("v".to_owned(), 2)]);
        let cells = visible_versions(&view, Some(&history), Projection::new(None), &two);
        assert_eq!(cells["v:a"].len(), 2);
    }
}
