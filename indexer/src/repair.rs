//! Drift between the index and the row store, and its repair.
//!
//! The index can drift from the table when writes bypass the event path (a row deleted in HBase
//! without replication, a bulk load, a lost event). Two tools find it: a lookup re-checks every
//! row it returns (read repair), and `hbidx verify` compares index and store both ways. Both
//! turn what they see into a repair [`Mutation`] with [`diff_row`] and hand it to the table's
//! live indexer through its [`RepairQueue`]; the indexer applies it like an event but without
//! moving any source position.
//!
//! Repairs use the ordinary merge rules (cell timestamps decide), never a blind overwrite: a
//! repair built from a store read that raced with a newer write can then never roll the index
//! back. The price: where the index holds a *newer* timestamp than the store (a store write made
//! with an old explicit timestamp), the repair can't win; `diff_row` reports such drift as
//! not fixable.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// Mutations waiting for a table's live indexer that move no source position: repairs, and
/// the writes this instance made to HBase (read-your-writes). Shared by every indexer the
/// table gets over its life (a reindex swap starts a new one), like the checkpoint channel.
/// Bounded: both are best effort (the next lookup or verify finds drift again; a write's
/// replicated event or the next verify brings it in), so when the indexer is far behind, new
/// ones are dropped and counted rather than growing memory.
///
/// Each accepted mutation gets a ticket, counting up from 1 in queue order; the indexer
/// publishes the highest ticket covered by an index commit ([`RepairQueue::committed_tickets`]),
/// which is what a write with `?wait=indexed` waits for.
pub struct RepairQueue {
    pending: Mutex<Pending>,
    /// The live indexer's source's waker, called when something is queued so that the
    /// indexer takes it at once rather than after its current poll.
    waker: Mutex<Option<crate::source::Waker>>,
    capacity: usize,
    /// Repairs accepted.
    pub queued: AtomicU64,
    /// Repairs refused because the queue was full.
    pub dropped: AtomicU64,
    /// Repairs applied by the indexer.
    pub applied: AtomicU64,
    /// The ticket of the last mutation covered by an index commit.
    committed_ticket: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for RepairQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepairQueue")
            .field("pending", &self.len())
            .field("capacity", &self.capacity)
            .field("queued", &self.queued)
            .field("dropped", &self.dropped)
            .field("applied", &self.applied)
            .field("committed_ticket", &*self.committed_ticket.borrow())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Pending {
    mutations: Vec<Mutation>,
    /// The ticket of the last mutation accepted.
    last_ticket: u64,
}

impl Default for RepairQueue {
    fn default() -> Self {
        Self::with_capacity(100_000)
    }
}

impl RepairQueue {
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            pending: Mutex::new(Pending::default()),
            waker: Mutex::new(None),
            capacity,
            queued: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            committed_ticket: tokio::sync::watch::Sender::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues a repair; false (and counted) when the queue is full. Never blocks for long: safe
    /// to call from async code.
    pub fn push(&self, repair: Mutation) -> bool {
        self.submit(repair).is_some()
    }

    /// Queues a mutation and returns its ticket; `None` (and counted) when the queue is full.
    /// Never blocks for long: safe to call from async code.
    pub fn submit(&self, mutation: Mutation) -> Option<u64> {
        let mut pending = self.lock();
        if pending.mutations.len() >= self.capacity {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        pending.mutations.push(mutation);
        pending.last_ticket += 1;
        let ticket = pending.last_ticket;
        drop(pending);
        self.queued.fetch_add(1, Ordering::Relaxed);
        let waker = self
            .waker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(wake) = waker {
            wake();
        }
        Some(ticket)
    }

    /// Set by each indexer that starts taking from this queue; `None` clears it.
    pub fn set_waker(&self, waker: Option<crate::source::Waker>) {
        *self
            .waker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = waker;
    }

    /// Everything queued so far, oldest first, and the ticket of the last one.
    pub fn drain(&self) -> (Vec<Mutation>, u64) {
        let mut pending = self.lock();
        (std::mem::take(&mut pending.mutations), pending.last_ticket)
    }

    /// Called by the indexer after an index commit covered every mutation up to `ticket`.
    pub fn mark_committed(&self, ticket: u64) {
        self.committed_ticket.send_if_modified(|committed| {
            let newer = ticket > *committed;
            if newer {
                *committed = ticket;
            }
            newer
        });
    }

    /// The highest ticket covered by an index commit, to wait on.
    pub fn committed_tickets(&self) -> tokio::sync::watch::Receiver<u64> {
        self.committed_ticket.subscribe()
    }

    pub fn len(&self) -> usize {
        self.lock().mutations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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

    #[test]
    fn queue_is_bounded() {
        let queue = RepairQueue::with_capacity(1);
        let m = Mutation {
            table: "user".into(),
            rowkey: b"k".to_vec(),
            ops: vec![CellOp::DeleteRow { ts: 1 }],
        };
        assert!(queue.push(m.clone()));
        assert!(!queue.push(m.clone()));
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 1);
        assert_eq!(queue.drain(), (vec![m.clone()], 1));
        assert!(queue.is_empty());
        // A queued mutation wakes the live indexer's source.
        let wakes = std::sync::Arc::new(AtomicU64::new(0));
        let counter = wakes.clone();
        queue.set_waker(Some(std::sync::Arc::new(move || {
            counter.fetch_add(1, Ordering::Relaxed);
        })));
        // Tickets go on counting after a drain; commits publish them.
        assert_eq!(queue.submit(m), Some(2));
        let committed = queue.committed_tickets();
        queue.mark_committed(2);
        queue.mark_committed(1);
        assert_eq!(*committed.borrow(), 2);
        assert_eq!(wakes.load(Ordering::Relaxed), 1);
    }
}
