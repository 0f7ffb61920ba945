//! Reads and writes of rows: multi-gets, scans and row counts, and the batched write that
//! commits new row states together with their change-feed events.

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use fjall::{OwnedWriteBatch, PersistMode};
use hbidx_schema::model::{CellOp, Mutation};

use crate::api::Cell;
use crate::api::{Row, ScanBatch, ScanRequest, WriteReceipt};
use crate::error::{Result, StoreError};
use crate::row_cache::RowCacheStats;
use crate::row_state::{MAX_ROWKEY_LEN, Projection, RowState, RowView, validate_mutation};

use super::feed::offset_of;
use super::versions::{self, History};
use super::{EmbeddedStore, Table, Versions, lock};

/// A call's mutations, resolved and validated (`EmbeddedStore::prepare`).
struct Prepared {
    mutations: Vec<Mutation>,
    /// The distinct tables of the call.
    touched: Vec<Arc<Table>>,
    /// Each mutation's table, as an index into `touched`.
    slots: Vec<usize>,
}

/// The smallest key greater than every key starting with `prefix`, if any. Shared with the
/// HBase store, which turns a prefix scan into a start/stop range the same way.
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let last_incrementable = prefix.iter().rposition(|&byte| byte != u8::MAX)?;
    let mut successor = prefix[..=last_incrementable].to_vec();
    successor[last_incrementable] += 1;
    Some(successor)
}

impl EmbeddedStore {
    /// Seals the memtables of `tables` (those just written) when all memtables together are
    /// over their budget. fjall's own limit is per keyspace and fixed when the keyspace is
    /// created, so this is what holds a data dir created with other limits, or a process with
    /// many tables, to the budget. Sealed memtables are flushed by fjall's background workers,
    /// and fjall slows writers down when flushes fall behind: over budget means slower writes.
    ///
    /// A keyspace that still has a sealed memtable waiting for its flush is left alone: what is
    /// over the budget then is the flush backlog, and sealing the small active memtable again
    /// at every write would only make tiny tables (and fjall stalls writers at four sealed
    /// memtables).
    fn keep_memtables_in_budget(&self, tables: &[Arc<Table>]) {
        if self.db.write_buffer_size() <= self.memtable_bytes {
            return;
        }
        for table in tables {
            for keyspace in table.keyspaces() {
                if keyspace.sealed_memtable_count() > 0 {
                    continue;
                }
                if let Err(err) = keyspace.rotate_memtable() {
                    tracing::warn!(table = %table.name, error = %err, "sealing a memtable failed");
                }
            }
        }
    }

    /// Hits, misses and size of `table`'s row cache.
    pub fn row_cache_stats(&self, table: &str) -> Result<RowCacheStats> {
        self.table(table).map(|table| table.cache.stats())
    }

    /// [`RowStore::get_rows`](crate::RowStore::get_rows), callable from any thread.
    pub fn get_rows_sync(
        &self,
        table: &str,
        rowkeys: &[Vec<u8>],
        columns: Option<&[String]>,
    ) -> Result<Vec<Option<Row>>> {
        let table = &*self.table(table)?;
        let projection = Projection::new(columns);
        let mut rows = Vec::with_capacity(rowkeys.len());
        for rowkey in rowkeys {
            // Keys that no write could have stored (fjall rejects an empty key).
            if rowkey.is_empty() || rowkey.len() > MAX_ROWKEY_LEN {
                rows.push(None);
                continue;
            }
            let Some(bytes) = table.cache.get_or_read(rowkey, || table.rows.get(rowkey))? else {
                rows.push(None);
                continue;
            };
            let view = RowView::decode(&bytes)
                .map_err(|reason| Self::corrupt_row(table, rowkey, reason))?;
            let cells = view.visible_cells(projection);
            rows.push((!cells.is_empty()).then(|| Row {
                rowkey: rowkey.clone(),
                cells,
            }));
        }
        Ok(rows)
    }

    /// Every visible version of the cells of `rowkey` that `columns` selects (as in
    /// [`get_rows_sync`](Self::get_rows_sync)), newest first per column: up to the family's
    /// `VERSIONS`, one for the families keeping one. `None` when no such cell is visible.
    pub fn get_versions_sync(
        &self,
        table: &str,
        rowkey: &[u8],
        columns: Option<&[String]>,
    ) -> Result<Option<std::collections::BTreeMap<String, Vec<Cell>>>> {
        let table = &*self.table(table)?;
        if rowkey.is_empty() || rowkey.len() > MAX_ROWKEY_LEN {
            return Ok(None);
        }
        let Some(bytes) = table.cache.get_or_read(rowkey, || table.rows.get(rowkey))? else {
            return Ok(None);
        };
        let view =
            RowView::decode(&bytes).map_err(|reason| Self::corrupt_row(table, rowkey, reason))?;
        let history = match &table.versions {
            Some(versions) => Some(self.read_history(table, versions, rowkey)?),
            None => None,
        };
        let keep = table.keep();
        let cells =
            versions::visible_versions(&view, history.as_ref(), Projection::new(columns), &keep);
        Ok((!cells.is_empty()).then_some(cells))
    }

    /// The stored older versions of one row (empty when there are none).
    fn read_history(&self, table: &Table, versions: &Versions, rowkey: &[u8]) -> Result<History> {
        match versions.keyspace.get(rowkey)? {
            Some(bytes) => {
                History::decode(&bytes).map_err(|reason| Self::corrupt_row(table, rowkey, reason))
            }
            None => Ok(History::default()),
        }
    }

    /// A scan in descending rowkey order, as HBase's reversed scans: `request.start` is the
    /// largest rowkey to return (inclusive; empty = from the last row), `request.stop` the
    /// smallest bound (exclusive; `None` = to the first row). `next_start` continues it. A
    /// `prefix` is refused: HBase's reversed scans take none.
    pub fn scan_reversed_sync(&self, table: &str, request: &ScanRequest) -> Result<ScanBatch> {
        let table = &*self.table(table)?;
        if request.batch == 0 {
            return Err(StoreError::InvalidRequest {
                reason: "scan batch size must be at least 1".to_owned(),
            });
        }
        if request.prefix.is_some() {
            return Err(StoreError::InvalidRequest {
                reason: "a reversed scan takes no prefix: give start and stop rows".to_owned(),
            });
        }
        let projection = Projection::new(request.columns.as_deref());
        let upper: Bound<&[u8]> = if request.start.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Included(&request.start)
        };
        let lower: Bound<&[u8]> = match request.stop.as_deref() {
            Some(stop) if !stop.is_empty() => {
                if !request.start.is_empty() && request.start.as_slice() <= stop {
                    return Ok(ScanBatch::default());
                }
                Bound::Excluded(stop)
            }
            _ => Bound::Unbounded,
        };
        let rows = table.rows.range::<&[u8], _>((lower, upper)).rev();
        Self::fill_batch(table, rows, request.batch, projection)
    }

    /// [`RowStore::scan`](crate::RowStore::scan), callable from any thread.
    pub fn scan_sync(&self, table: &str, request: &ScanRequest) -> Result<ScanBatch> {
        let table = &*self.table(table)?;
        if request.batch == 0 {
            return Err(StoreError::InvalidRequest {
                reason: "scan batch size must be at least 1".to_owned(),
            });
        }
        let projection = Projection::new(request.columns.as_deref());

        let mut lower: &[u8] = &request.start;
        let mut upper: Option<&[u8]> = request.stop.as_deref();
        let prefix_end;
        if let Some(prefix) = request.prefix.as_deref() {
            lower = lower.max(prefix);
            prefix_end = prefix_successor(prefix);
            if let Some(prefix_end) = prefix_end.as_deref() {
                upper = Some(upper.map_or(prefix_end, |stop| stop.min(prefix_end)));
            }
        }
        if upper.is_some_and(|upper| upper <= lower) {
            return Ok(ScanBatch::default());
        }
        let upper = upper.map_or(Bound::Unbounded, Bound::Excluded);

        let rows = table
            .rows
            .range::<&[u8], _>((Bound::Included(lower), upper));
        Self::fill_batch(table, rows, request.batch, projection)
    }

    /// Up to `size` rows with a cell `projection` shows, in the order `rows` gives them (either
    /// direction), and the next such row's key as `next_start`: a look-ahead, so that
    /// `next_start` is `None` exactly when the scan is complete.
    fn fill_batch(
        table: &Table,
        rows: impl Iterator<Item = fjall::Guard>,
        size: usize,
        projection: Projection<'_>,
    ) -> Result<ScanBatch> {
        let mut batch = ScanBatch::default();
        for guard in rows {
            let (key, value) = guard.into_inner()?;
            let view =
                RowView::decode(&value).map_err(|reason| Self::corrupt_row(table, &key, reason))?;
            if batch.rows.len() == size {
                if view.has_visible_cell(projection) {
                    batch.next_start = Some(key.to_vec());
                    break;
                }
                continue;
            }
            let cells = view.visible_cells(projection);
            if !cells.is_empty() {
                batch.rows.push(Row {
                    rowkey: key.to_vec(),
                    cells,
                });
            }
        }
        Ok(batch)
    }

    /// [`RowStore::mutate`](crate::RowStore::mutate), callable from any thread. The whole call is
    /// one fjall write batch.
    pub fn mutate_sync(&self, mutations: Vec<Mutation>) -> Result<WriteReceipt> {
        self.mutate_inner(mutations, true)
    }

    /// Applies mutations that already come from a durable log (a Kafka topic) to the rows only,
    /// without change-feed events: the log is the feed, and its consumer indexes them itself.
    /// Replaying a mutation is harmless because cell timestamps decide (see `RowState`).
    pub fn apply_replicated(&self, mutations: Vec<Mutation>) -> Result<()> {
        self.mutate_inner(mutations, false).map(|_| ())
    }

    fn mutate_inner(&self, mutations: Vec<Mutation>, with_feed: bool) -> Result<WriteReceipt> {
        if mutations.is_empty() {
            return Ok(WriteReceipt::default());
        }
        let prepared = self.prepare(mutations)?;
        let writer = lock(&self.writer);
        self.commit_locked(&writer, prepared, with_feed)
    }

    /// Reads a row's latest state and writes what `decide` makes of it, with no other write in
    /// between (under the writer mutex): HBase's atomic read-modify-write calls (increments,
    /// appends, check-and-put). The operations go through the change feed like any write; none
    /// means nothing is written. `decide`'s error is returned as it is, nothing written.
    pub fn mutate_row_with<T, E: From<StoreError>>(
        &self,
        table: &str,
        rowkey: &[u8],
        decide: impl FnOnce(&RowState) -> std::result::Result<(Vec<CellOp>, T), E>,
    ) -> std::result::Result<T, E> {
        let handle = self.table(table)?;
        if rowkey.is_empty() || rowkey.len() > MAX_ROWKEY_LEN {
            return Err(StoreError::InvalidMutation {
                reason: format!(
                    "rowkey of {} bytes in table `{table}`: must be 1 to {MAX_ROWKEY_LEN} bytes",
                    rowkey.len()
                ),
            }
            .into());
        }
        let writer = lock(&self.writer);
        self.check_writable()?;
        let state = match handle.rows.get(rowkey).map_err(StoreError::from)? {
            Some(bytes) => RowState::decode(&bytes)
                .map_err(|reason| Self::corrupt_row(&handle, rowkey, reason))?,
            None => RowState::default(),
        };
        let (ops, answer) = decide(&state)?;
        if !ops.is_empty() {
            let mutation = Mutation {
                table: table.to_owned(),
                rowkey: rowkey.to_vec(),
                ops,
            };
            let prepared = self.prepare(vec![mutation])?;
            self.commit_locked(&writer, prepared, true)?;
        }
        Ok(answer)
    }

    /// Resolves and validates a call's mutations before the writer mutex is taken.
    fn prepare(&self, mutations: Vec<Mutation>) -> Result<Prepared> {
        // The distinct tables of the call, and each mutation's slot among them.
        let mut touched: Vec<Arc<Table>> = Vec::new();
        let mut slots = Vec::with_capacity(mutations.len());
        for mutation in &mutations {
            let slot = match touched
                .iter()
                .position(|table| table.name == mutation.table)
            {
                Some(slot) => slot,
                None => {
                    touched.push(self.table(&mutation.table)?);
                    touched.len() - 1
                }
            };
            slots.push(slot);
            validate_mutation(mutation)?;
        }
        Ok(Prepared {
            mutations,
            touched,
            slots,
        })
    }

    /// Writes prepared mutations as one batch; `_writer` is the writer mutex, held.
    fn commit_locked(
        &self,
        _writer: &std::sync::MutexGuard<'_, ()>,
        prepared: Prepared,
        with_feed: bool,
    ) -> Result<WriteReceipt> {
        let Prepared {
            mutations,
            touched,
            slots,
        } = prepared;
        self.check_writable()?;
        // Tables are only deleted under the writer mutex: one still registered now stays so
        // until this batch is committed.
        {
            let registry = self.registry();
            for table in &touched {
                if !registry
                    .by_name
                    .get(&table.name)
                    .is_some_and(|current| Arc::ptr_eq(current, table))
                {
                    return Err(StoreError::UnknownTable(table.name.clone()));
                }
            }
        }
        let first_seq: Vec<u64> = touched
            .iter()
            .map(|table| table.next_seq.load(Ordering::Relaxed))
            .collect();
        let mut next_seq = first_seq.clone();
        let mut batch = OwnedWriteBatch::with_capacity(self.db.clone(), 2 * mutations.len())
            .durability(Some(self.persist_mode));
        // Each mutation's row, as (table slot, rowkey, ops), in call order.
        let mut rows: Vec<(usize, Vec<u8>, Vec<CellOp>)> = Vec::with_capacity(mutations.len());
        for (mutation, slot) in mutations.into_iter().zip(slots) {
            let table = &*touched[slot];
            if with_feed && let Some(feed) = &table.feed {
                let seq = next_seq[slot];
                next_seq[slot] += 1;
                let event = postcard::to_allocvec(&mutation)
                    .map_err(|error| StoreError::Storage(Box::new(error)))?;
                batch.insert(feed, seq.to_be_bytes(), event);
            }
            let Mutation { rowkey, ops, .. } = mutation;
            rows.push((slot, rowkey, ops));
        }
        // Rows are read, merged and written in key order. Rowkeys are usually hashed, so in call
        // order every read (and every insert of the batch into the memtable) descends the
        // memtable's skiplist to an unrelated place, a cache miss per level; in key order
        // neighbouring descents share their upper levels. The sort is stable, so several
        // mutations of one row still apply in call order, building on each other, and the
        // batch writes each row once.
        rows.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut written = Vec::new();
        let mut rows = rows.into_iter().peekable();
        while let Some((slot, rowkey, ops)) = rows.next() {
            let table = &*touched[slot];
            let mut state = match table.rows.get(&rowkey)? {
                Some(bytes) => RowState::decode(&bytes)
                    .map_err(|reason| Self::corrupt_row(table, &rowkey, reason))?,
                None => RowState::default(),
            };
            // Only tables with a family keeping more than one version read and write a history.
            let mut history = match &table.versions {
                Some(versions) => Some((self.read_history(table, versions, &rowkey)?, false)),
                None => None,
            };
            let mut changed = false;
            let mut apply = |op: CellOp| match (&mut history, &table.versions) {
                (Some((history, history_changed)), Some(versions)) => {
                    let (state_changed, masked) =
                        versions::apply(&mut state, history, op, &versions.keep);
                    changed |= state_changed;
                    *history_changed |= masked;
                }
                _ => changed |= state.apply(op),
            };
            for op in ops {
                apply(op);
            }
            while let Some((_, _, ops)) =
                rows.next_if(|(next_slot, next_key, _)| *next_slot == slot && *next_key == rowkey)
            {
                for op in ops {
                    apply(op);
                }
            }
            if let (Some((history, true)), Some(versions)) = (&history, &table.versions) {
                if history.is_empty() {
                    batch.remove(&versions.keyspace, rowkey.clone());
                } else {
                    batch.insert(&versions.keyspace, rowkey.clone(), history.encode());
                }
            }
            if changed {
                written.push((slot, rowkey.clone()));
                batch.insert(&table.rows, rowkey, state.encode());
            }
        }

        // Reserve the sequence numbers before committing: if the commit fails they become a gap,
        // which readers skip; reusing them could overwrite events of a later commit.
        for (table, next) in touched.iter().zip(&next_seq) {
            table.next_seq.store(*next, Ordering::Relaxed);
        }
        batch.commit().map_err(|error| self.write_failed(error))?;
        // Now that the rows are visible, no read from before the commit may stay cached.
        for (slot, rowkey) in &written {
            touched[*slot].cache.invalidate(rowkey);
        }
        self.keep_memtables_in_budget(&touched);

        let mut receipt = WriteReceipt::default();
        for ((table, first), next) in touched.iter().zip(first_seq).zip(next_seq) {
            if next != first {
                let last = offset_of(next - 1);
                table.clock.publish(last);
                receipt
                    .last_offset_by_table
                    .push((table.name.clone(), last));
            }
        }
        receipt.last_offset_by_table.sort_unstable();
        Ok(receipt)
    }

    /// An O(1) estimate of the number of stored rows of `table` (including fully deleted rows
    /// whose tombstones are kept; drifts with overwrites until compaction).
    pub fn row_count_estimate(&self, table: &str) -> Result<u64> {
        let table = self.table(table)?;
        Ok(u64::try_from(table.rows.approximate_len()).unwrap_or(u64::MAX))
    }

    /// The exact number of rows of `table` with at least one visible cell. Scans the table.
    pub fn count_rows(&self, table: &str) -> Result<u64> {
        let table = &*self.table(table)?;
        let everything = Projection::new(None);
        let mut count = 0;
        for guard in table.rows.iter() {
            let (key, value) = guard.into_inner()?;
            let view =
                RowView::decode(&value).map_err(|reason| Self::corrupt_row(table, &key, reason))?;
            if view.has_visible_cell(everything) {
                count += 1;
            }
        }
        Ok(count)
    }

    /// Fsyncs the journal, making every committed write survive power loss. Dropping the store
    /// does this too.
    pub fn sync_to_disk(&self) -> Result<()> {
        self.db.persist(PersistMode::SyncAll)?;
        Ok(())
    }

    /// Writes every memtable out as a table file and waits for it, so that the journal holds
    /// nothing the next open must replay. A graceful stop does this: replaying a journal costs
    /// seconds per hundred MB of recent writes (a bulk load leaves up to the memtable budget
    /// there), writing it out now costs about as much once, when nobody waits on a lookup.
    ///
    /// Waits at most `wait`: a flush that can't finish (a full volume) leaves its writes in
    /// the journal, which the next open replays as after a crash.
    pub fn flush_memtables(&self, wait: std::time::Duration) -> Result<()> {
        if self.check_writable().is_err() {
            // A failed write halted fjall: no flush can succeed, and waiting for one would
            // only hold the stop for `wait`. The journal keeps every acknowledged write.
            self.db.persist(PersistMode::SyncAll)?;
            return Ok(());
        }
        let tables: Vec<Arc<Table>> = self.registry().by_name.values().cloned().collect();
        let keyspaces = || tables.iter().flat_map(|table| table.keyspaces());
        for keyspace in keyspaces() {
            if let Err(err) = keyspace.rotate_memtable() {
                tracing::warn!(error = %err, "sealing a memtable at shutdown failed; its writes stay in the journal");
            }
        }
        let deadline = std::time::Instant::now() + wait;
        while self.db.outstanding_flushes() > 0
            || keyspaces().any(|keyspace| keyspace.sealed_memtable_count() > 0)
        {
            if std::time::Instant::now() > deadline {
                tracing::warn!(
                    "memtables not written out in time; the next start replays them from the journal"
                );
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.db.persist(PersistMode::SyncAll)?;
        Ok(())
    }
}
