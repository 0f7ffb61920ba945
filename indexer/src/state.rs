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

use std::borrow::Cow;

use hbidx_schema::config::TableConfig;
use hbidx_schema::model::CellOp;
pub use hbidx_store::RowState;

/// The operations of an event as the index state takes them: a put of a blind field's column
/// carries the field's tags ([`crate::analysis::blind_state_value`]) instead of the value, so
/// the state stored in the index never holds a blind column's plaintext. Borrowed unchanged for
/// tables without blind fields.
pub fn blind_ops<'a>(table: &TableConfig, ops: &'a [CellOp]) -> Cow<'a, [CellOp]> {
    if !table.has_blind_fields() {
        return Cow::Borrowed(ops);
    }
    Cow::Owned(
        ops.iter()
            .map(|op| match op {
                CellOp::Put { column, ts, value } => match table.blind_field_of(column) {
                    Some(field) => CellOp::Put {
                        column: column.clone(),
                        ts: *ts,
                        value: crate::analysis::blind_state_value(field, value),
                    },
                    None => op.clone(),
                },
                _ => op.clone(),
            })
            .collect(),
    )
}

/// Applies the operations of one event to a row's index state, keeping only the columns the
/// index tracks (`is_indexed`). Family and row deletes always apply: they mask indexed columns
/// too. Returns whether anything changed.
pub fn apply_indexed(
    state: &mut RowState,
    ops: &[CellOp],
    is_indexed: impl Fn(&str) -> bool,
) -> bool {
    let mut changed = false;
    for op in ops {
        let tracked = match op {
            CellOp::Put { column, .. } | CellOp::DeleteCell { column, .. } => is_indexed(column),
            CellOp::DeleteFamily { .. } | CellOp::DeleteRow { .. } => true,
        };
        if tracked {
            changed |= state.apply(op.clone());
        }
    }
    changed
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

    #[test]
    fn partial_update_keeps_other_columns_and_ignores_unindexed_ones() {
        let mut state = RowState::default();
        let indexed = |c: &str| c != "info:city";
        apply_indexed(&mut state, &[put("info:phone", 1, "13800138000")], indexed);
        apply_indexed(
            &mut state,
            &[put("info:name", 2, "张三"), put("info:city", 2, "北京")],
            indexed,
        );
        assert_eq!(state.value("info:phone"), Some(&b"13800138000"[..]));
        assert_eq!(state.value("info:name"), Some("张三".as_bytes()));
        assert_eq!(state.value("info:city"), None);
    }

    #[test]
    fn late_events_lose_and_replay_is_idempotent() {
        let mut state = RowState::default();
        let all = |_: &str| true;
        let events = [
            vec![put("info:name", 10, "new")],
            vec![put("info:name", 5, "old")],
            vec![CellOp::DeleteRow { ts: 20 }],
            vec![put("info:name", 15, "late")],
        ];
        for ops in &events {
            apply_indexed(&mut state, ops, all);
        }
        let snapshot = state.clone();
        for ops in &events {
            assert!(!apply_indexed(&mut state, ops, all));
        }
        assert_eq!(state, snapshot);
        assert!(!state.has_values());
        assert!(!state.is_empty(), "the row tombstone is remembered");
    }
}
