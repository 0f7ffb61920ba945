//! The writer side of a table index: merging events into row states, building documents,
//! commits, rollbacks and compactions, and the writer heap every open writer reserves.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use hbidx_schema::config::{FieldKind, KeyRange, TableConfig};
use hbidx_schema::model::{CellOp, Mutation};
use tantivy::index::SegmentId;
use tantivy::indexer::UserOperation;
use tantivy::{IndexWriter, TantivyDocument, Term};

use crate::analysis;
use crate::checkpoint::{Checkpoint, PayloadFlags};
use crate::error::{IndexerError, Result};
use crate::state::RowState;

use super::merge_policy::{MergeBudget, MergeReservation, merge_candidates};
use super::rowkey_ref;
use super::schema::Fields;
use super::searcher::TableSearcher;
use super::stats::IndexStats;

/// Heap the open writers of this process may use (each writer's `memory_budget_bytes`).
static WRITER_HEAP_RESERVED: AtomicU64 = AtomicU64::new(0);

/// The writer heap every open [`TableIndexWriter`] of this process may fill, live indexes and
/// reindex shadows alike: what `[memory] index_writers_mb` bounds. tantivy fills a writer's heap
/// up to its budget and then writes a segment, so this is the part's use at its peak.
pub fn writer_heap_reserved() -> u64 {
    WRITER_HEAP_RESERVED.load(Ordering::Relaxed)
}

/// One writer's share of [`writer_heap_reserved`], given back when the writer is dropped.
pub(super) struct HeapReservation(u64);

impl HeapReservation {
    pub(super) fn new(bytes: u64) -> Self {
        WRITER_HEAP_RESERVED.fetch_add(bytes, Ordering::Relaxed);
        Self(bytes)
    }
}

impl Drop for HeapReservation {
    fn drop(&mut self) {
        WRITER_HEAP_RESERVED.fetch_sub(self.0, Ordering::Relaxed);
    }
}

/// The writer side of a table index. Not `Sync`: one indexer thread owns it.
pub struct TableIndexWriter {
    table: Arc<TableConfig>,
    writer: IndexWriter<TantivyDocument>,
    fields: Arc<Fields>,
    searcher: TableSearcher,
    /// Row states changed since the last commit. The committed index can't see them yet, so
    /// they must be read from here.
    /// The flag says whether a document for the row exists (committed or pending).
    overlay: HashMap<Vec<u8>, (RowState, bool), foldhash::fast::RandomState>,
    checkpoint: Checkpoint,
    /// Every document of the index carries its delete mark ([`super::DELETE_MARK`]): said in
    /// each commit's payload ([`crate::checkpoint::PayloadFlags`]).
    delete_marks: bool,
    /// The checkpoint of the last successful commit, for rollback.
    committed: Checkpoint,
    uncommitted_ops: usize,
    invalid_values: u64,
    /// Operations not yet handed to tantivy. `IndexWriter::run` takes them as one batch: one
    /// channel message to the indexing threads instead of one (and a wake-up) per document.
    pending: Vec<UserOperation>,
    /// Live rows (documents with `_live`) as of the last commit, and the change since. Read from
    /// the commit payload when the index opens (counted there once if the payload lacks it),
    /// then kept up to date from each applied event: the writer knows whether a row had visible
    /// values before and after. Counting them again at each commit walks the `_live` postings
    /// of every segment with new deletes, which is nearly every commit of a table taking
    /// updates (~1 ns a row: 0.1 s per commit at 100M rows).
    pub(super) rows: u64,
    rows_delta: i64,
    /// The rowkeys this instance indexes (its shard of the table); `None`: all of them.
    own_range: Option<KeyRange>,
    /// Compactions tantivy refused after they started ([`TableIndexWriter::compact`]).
    compactions_skipped: Arc<std::sync::atomic::AtomicU64>,
    /// Compactions merging now.
    compactions_running: Arc<std::sync::atomic::AtomicUsize>,
    /// Whether [`TableIndexWriter::apply_scanned`] may skip the row-state lookups.
    scan_load: ScanLoad,
    /// The table's merges, this writer's and any other writer's of the table (a reindex's
    /// shadow), within [`super::WriterOptions::merge_max_docs`] documents at once.
    merges: Arc<MergeBudget>,
    /// Segments in the merges this writer started: no other merge may take them.
    merging: Arc<Mutex<HashSet<SegmentId>>>,
    _heap: HeapReservation,
}

/// What [`TableIndexWriter::apply_ops`] knows of a row before applying to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    /// It may have a document and a state (committed, or since the last commit): look them up.
    Unknown,
    /// It has neither ([`ScanLoad::Ascending`]).
    Fresh,
}

/// A table scan loaded into an empty index ([`TableIndexWriter::apply_scanned`]).
#[derive(Debug, Clone, PartialEq, Eq)]
enum ScanLoad {
    /// Nothing applied yet: a scan may start if the index is empty.
    NotStarted,
    /// Every row since the empty index opened came from the scan, in ascending rowkey order;
    /// this was the last one. A greater rowkey has no document and no state anywhere.
    Ascending(Vec<u8>),
    /// Something else was applied, or a row came out of order: every row takes the full path.
    Off,
}

/// Operations are handed to tantivy in batches of this many.
const PENDING_BATCH: usize = 1024;

/// Bytes a document's indexed values take beyond its rowkey and state, as first reserved: a
/// phone, an idcard and a name with its pinyin forms and grams, each with a few bytes of framing.
const DOC_VALUES_GUESS: usize = 192;

/// What applying one event did, for counters and reports.
#[derive(Debug, Default, Clone, Copy)]
pub struct ApplyOutcome {
    pub changed: bool,
    /// Values that failed normalisation (e.g. a malformed phone); the row is still indexed on
    /// its valid fields.
    pub invalid_values: u32,
    /// The row is outside this writer's shard ([`TableIndexWriter::own_range`]): nothing was
    /// indexed (an event's position still moved).
    pub foreign: bool,
}

impl ApplyOutcome {
    fn foreign() -> Self {
        Self {
            foreign: true,
            ..Self::default()
        }
    }
}

impl TableIndexWriter {
    /// A writer over an index committed up to `checkpoint`, which holds `rows` live rows.
    pub(super) fn new(
        table: Arc<TableConfig>,
        writer: IndexWriter<TantivyDocument>,
        fields: Arc<Fields>,
        searcher: TableSearcher,
        checkpoint: Checkpoint,
        rows: u64,
        heap: HeapReservation,
    ) -> Self {
        Self {
            table,
            writer,
            fields,
            searcher,
            overlay: HashMap::default(),
            committed: checkpoint.clone(),
            checkpoint,
            delete_marks: false,
            uncommitted_ops: 0,
            invalid_values: 0,
            pending: Vec::with_capacity(PENDING_BATCH),
            rows,
            rows_delta: 0,
            own_range: None,
            compactions_skipped: Arc::default(),
            compactions_running: Arc::default(),
            scan_load: ScanLoad::NotStarted,
            merges: MergeBudget::new(u64::MAX),
            merging: Arc::default(),
            _heap: heap,
        }
    }

    /// Says whether every document of the index carries its delete mark (an index this
    /// writer's open created, or whose payload says so).
    pub(super) fn with_delete_marks(mut self, delete_marks: bool) -> Self {
        self.delete_marks = delete_marks;
        self
    }

    /// Draws every merge of this writer from the table's `budget`.
    pub(super) fn with_merge_budget(mut self, budget: Arc<MergeBudget>) -> Self {
        self.merges = budget;
        self
    }

    /// The most documents one merge writes (and the table's merges together): what
    /// [`TableIndexWriter::compact`] is given by the indexer loop.
    pub fn merge_max_docs(&self) -> u64 {
        self.merges.max_docs()
    }

    /// Restricts the writer to one shard's rowkeys (`[cluster]`).
    pub(super) fn with_own_range(mut self, own_range: Option<KeyRange>) -> Self {
        self.own_range = own_range;
        self
    }

    /// The rowkeys this writer indexes: with `[cluster]`, its table's range in this instance's
    /// shard. A mutation for any other row is skipped and reported as
    /// [`ApplyOutcome::foreign`]. Sources filter foreign rows before they get here (cheaper,
    /// and counted per partition); this is the one check every path passes through: repairs,
    /// this instance's own writes, store scans and replays.
    pub fn own_range(&self) -> Option<&KeyRange> {
        self.own_range.as_ref()
    }

    fn is_foreign(&self, rowkey: &[u8]) -> bool {
        self.own_range
            .as_ref()
            .is_some_and(|range| !range.contains(rowkey))
    }

    /// Merges `ids` as tantivy's merge policy does: the index's segment list changes, the
    /// searcher is not reloaded.
    #[cfg(test)]
    pub(super) fn merge_unseen(&mut self, ids: &[tantivy::index::SegmentId]) {
        self.writer.merge(ids).wait().unwrap();
    }

    /// Commits from here on say the index is not all marked, as an hbidx without delete marks
    /// writes them.
    #[cfg(test)]
    pub(super) fn forget_delete_marks(&mut self) {
        self.delete_marks = false;
    }

    /// The checkpoint of the last commit plus everything applied since.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// Starts a fresh index at another index's checkpoint (a store reindex: the new index
    /// resumes the live source where the old one was when the scan began).
    pub fn seed_checkpoint(&mut self, checkpoint: Checkpoint) {
        self.checkpoint = checkpoint;
    }

    pub fn table(&self) -> &Arc<TableConfig> {
        &self.table
    }

    pub fn uncommitted_ops(&self) -> usize {
        self.uncommitted_ops
    }

    pub fn invalid_values(&self) -> u64 {
        self.invalid_values
    }

    /// Size and counts of the committed index, read on the indexer thread after a commit so
    /// the async side never has to walk segments itself. Unlike [`TableSearcher::stats`], the
    /// live rows are this writer's running count, not a walk of the index.
    pub fn stats(&self) -> IndexStats {
        IndexStats {
            rows: self.rows,
            ..self.searcher.sizes()
        }
    }

    /// See [`TableSearcher::generation`].
    pub fn reader_generation(&self) -> u64 {
        self.searcher.generation()
    }

    /// Applies one mutation and records `(source, partition, offset)` as applied.
    pub fn apply(
        &mut self,
        mutation: &Mutation,
        source: &str,
        partition: i32,
        offset: i64,
    ) -> Result<ApplyOutcome> {
        // An event with no operations only moves the position (a dead-lettered or skipped
        // message): the checkpoint must pass it so that it is not read again.
        let outcome = if mutation.ops.is_empty() {
            ApplyOutcome::default()
        } else if self.is_foreign(&mutation.rowkey) {
            ApplyOutcome::foreign()
        } else {
            self.scan_load = ScanLoad::Off;
            self.apply_ops(&mutation.rowkey, &mutation.ops, Known::Unknown)?
        };
        self.checkpoint.advance(source, partition, offset);
        Ok(outcome)
    }

    /// Applies a repair (see [`crate::repair`]): merged like an event, but it moves no source
    /// position, so the checkpoint keeps meaning "every event up to here".
    pub fn apply_repair(&mut self, mutation: &Mutation) -> Result<ApplyOutcome> {
        if mutation.ops.is_empty() {
            return Ok(ApplyOutcome::default());
        }
        if self.is_foreign(&mutation.rowkey) {
            return Ok(ApplyOutcome::foreign());
        }
        self.scan_load = ScanLoad::Off;
        self.apply_ops(&mutation.rowkey, &mutation.ops, Known::Unknown)
    }

    /// Applies one row of a table scan (a reindex by scan, a rebuild), like
    /// [`Self::apply_repair`]. While the index was empty when the scan began and the rows come
    /// in ascending rowkey order, as HBase and the embedded store return them, a row can have no
    /// document and no state yet: it is indexed without looking either up and without keeping
    /// its state in memory until the commit. That removes the per-row probe of every segment
    /// (a cost that grows with the index) and the uncommitted states (~100 MB for 200k rows).
    /// A row out of order commits what came before and takes the full path from then on.
    pub fn apply_scanned(&mut self, mutation: &Mutation) -> Result<ApplyOutcome> {
        if mutation.ops.is_empty() {
            return Ok(ApplyOutcome::default());
        }
        if self.is_foreign(&mutation.rowkey) {
            return Ok(ApplyOutcome::foreign());
        }
        let rowkey = mutation.rowkey.as_slice();
        let fresh = match &self.scan_load {
            ScanLoad::NotStarted => self.is_empty(),
            ScanLoad::Ascending(last) => rowkey > last.as_slice(),
            ScanLoad::Off => false,
        };
        if fresh {
            // The last rowkey's buffer is reused: one allocation per scan, not per row.
            match &mut self.scan_load {
                ScanLoad::Ascending(last) => {
                    last.clear();
                    last.extend_from_slice(rowkey);
                }
                load => *load = ScanLoad::Ascending(rowkey.to_vec()),
            }
            return self.apply_ops(rowkey, &mutation.ops, Known::Fresh);
        }
        if matches!(self.scan_load, ScanLoad::Ascending(_)) {
            // Rows applied since the last commit kept no state: commit them so that the full
            // path finds them.
            self.commit()?;
        }
        self.scan_load = ScanLoad::Off;
        self.apply_ops(rowkey, &mutation.ops, Known::Unknown)
    }

    /// Nothing applied since the writer opened and no document committed.
    fn is_empty(&self) -> bool {
        self.overlay.is_empty()
            && self.pending.is_empty()
            && self.uncommitted_ops == 0
            && self
                .searcher
                .reader()
                .searcher()
                .segment_readers()
                .iter()
                .all(|segment| segment.max_doc() == 0)
    }

    /// Row states applied since the last commit and kept in memory for it.
    pub fn uncommitted_states(&self) -> usize {
        self.overlay.len()
    }

    fn apply_ops(&mut self, rowkey: &[u8], ops: &[CellOp], known: Known) -> Result<ApplyOutcome> {
        // `has_doc`: some document (committed, or added since the last commit) may exist for
        // this rowkey. When none can, the upsert skips its delete: tantivy resolves every delete
        // term against every segment at commit, which is most of a bulk load's cost otherwise.
        let (mut state, has_doc) = match known {
            Known::Fresh => (RowState::default(), false),
            Known::Unknown => match self.overlay.remove(rowkey) {
                Some((state, has_doc)) => (state, has_doc),
                None => match self.searcher.committed_state(rowkey)? {
                    Some(state) => (state, true),
                    None => (RowState::default(), false),
                },
            },
        };
        let was_live = state.has_values();
        let table = &self.table;
        let ops = crate::state::blind_ops(table, ops);
        let changed =
            crate::state::apply_indexed(&mut state, &ops, |column| table.keeps_column(column));
        let mut outcome = ApplyOutcome {
            changed,
            ..ApplyOutcome::default()
        };
        let mut doc_after = has_doc;
        if changed {
            if has_doc {
                self.pending
                    .push(UserOperation::Delete(Term::from_field_bytes(
                        self.fields.rowkey,
                        rowkey,
                    )));
            }
            doc_after = false;
            if !state.is_empty() {
                let (doc, invalid) = self.build_doc(rowkey, &state);
                outcome.invalid_values = invalid;
                self.invalid_values += u64::from(invalid);
                self.pending.push(UserOperation::Add(doc));
                doc_after = true;
            }
            self.uncommitted_ops += 1;
            // The document just added carries `_live` exactly when the row has visible values
            // (`build_doc`); the one it replaces did when the previous state had them.
            self.rows_delta += i64::from(state.has_values()) - i64::from(was_live);
        }
        // A fresh row of a scan is never looked up again before the commit (see
        // `apply_scanned`): its state needn't stay in memory.
        if known == Known::Unknown {
            self.overlay.insert(rowkey.to_vec(), (state, doc_after));
        }
        if self.pending.len() >= PENDING_BATCH {
            self.flush_pending()?;
        }
        Ok(outcome)
    }

    fn flush_pending(&mut self) -> Result<()> {
        if !self.pending.is_empty() {
            self.writer.run(std::mem::take(&mut self.pending))?;
            self.pending.reserve(PENDING_BATCH);
        }
        Ok(())
    }

    fn build_doc(&self, rowkey: &[u8], state: &RowState) -> (TantivyDocument, u32) {
        let encoded = state.encode();
        // tantivy's `TantivyDocument::default()` reserves 1 KiB for the values, several times a
        // row's document, and every document waits in tantivy's queue until an indexing
        // thread takes it: up to a commit's worth (tens of thousands of rows in a reindex by
        // scan), outside every budget. Sized to the row instead, and trimmed below.
        let mut doc =
            TantivyDocument::with_capacity(rowkey.len() + encoded.len() + DOC_VALUES_GUESS);
        doc.add_bytes(self.fields.rowkey, rowkey);
        doc.add_bytes(self.fields.state, &encoded);
        if state.has_values() {
            doc.add_text(self.fields.live, super::LIVE_MARK);
        }
        if super::scan::remembers_delete(state) {
            doc.add_text(self.fields.live, super::DELETE_MARK);
        }
        let mut invalid = 0;
        for (name, handles) in &self.fields.by_name {
            let Some(raw) = state.value(&handles.column) else {
                continue;
            };
            if handles.blind {
                // The state holds the tags already (`state::blind_ops`).
                if let Some((exact, tails)) = analysis::blind_terms(raw) {
                    doc.add_text(handles.exact, exact);
                    if let Some(field) = handles.tail {
                        for tail in tails {
                            doc.add_text(field, tail);
                        }
                    }
                } else {
                    invalid += 1;
                    tracing::warn!(
                        table = %self.table.name,
                        rowkey_hash = %rowkey_ref(rowkey),
                        field = %name,
                        reason = "not a valid value of the field's kind",
                        "blind value not indexed"
                    );
                }
                continue;
            }
            let raw = String::from_utf8_lossy(raw);
            match analysis::field_terms(handles.kind, &raw) {
                Ok(terms) => {
                    // A phone's exact lookups use its reversed digits (`analysis/`); its base
                    // field stays in the schema, empty, so indexes written before still open.
                    if handles.kind != FieldKind::Phone {
                        doc.add_text(handles.exact, &terms.exact);
                    }
                    if let (Some(field), Some(tail)) = (handles.tail, &terms.tail) {
                        doc.add_text(field, tail);
                    }
                    let pairs = [
                        (handles.gram, &terms.gram),
                        (handles.head, &terms.head),
                        (handles.pinyin, &terms.pinyin),
                        (handles.initials, &terms.initials),
                    ];
                    for (field, values) in pairs {
                        if let Some(field) = field {
                            for value in values {
                                doc.add_text(field, value);
                            }
                        }
                    }
                }
                Err(err) => {
                    invalid += 1;
                    // The reason never contains the value itself (phone and idcard are
                    // personal data), only what is wrong with it. Nor does the rowkey appear: some
                    // designs build it from the phone itself (reversal); a hash still lets an
                    // operator match log lines for one row.
                    tracing::warn!(
                        table = %self.table.name,
                        rowkey_hash = %rowkey_ref(rowkey),
                        field = %name,
                        reason = %err,
                        "value not indexed"
                    );
                }
            }
        }
        // Usually in place (mimalloc keeps a block asked to shrink by less than half); a copy of
        // a few hundred bytes otherwise, against the microseconds tantivy spends indexing it.
        doc.shrink_to_fit();
        (doc, invalid)
    }

    /// Commits everything applied so far, with the checkpoint as the commit payload, and makes
    /// it searchable. Blocking: call it from the indexer thread, never from async code.
    pub fn commit(&mut self) -> Result<Checkpoint> {
        self.flush_pending()?;
        let rows = self.rows.saturating_add_signed(self.rows_delta);
        let mut prepared = self.writer.prepare_commit()?;
        prepared.set_payload(&self.checkpoint.to_payload_with(&PayloadFlags {
            delete_marks: self.delete_marks,
            rows: Some(rows),
        }));
        prepared.commit()?;
        self.searcher.reader().reload()?;
        self.overlay.clear();
        self.uncommitted_ops = 0;
        self.rows = rows;
        self.rows_delta = 0;
        self.committed = self.checkpoint.clone();
        self.start_merges();
        Ok(self.checkpoint.clone())
    }

    /// Starts the merges tantivy's log merge policy would start after a commit, among the
    /// segments no merge holds, as far as the table's merge budget has room; the others wait
    /// for a later commit. tantivy's own policy runs no merge (`NoMergePolicy`): it can't see
    /// the other writer's merges nor the compaction's, nor say when its own end.
    fn start_merges(&mut self) {
        let metas = match self.writer.index().searchable_segment_metas() {
            Ok(metas) => metas,
            Err(err) => {
                tracing::warn!(table = %self.table.name, error = %err, "no merge started: the segment list can't be read");
                return;
            }
        };
        let free: Vec<_> = {
            let merging = self.merging.lock().unwrap_or_else(PoisonError::into_inner);
            metas
                .into_iter()
                .filter(|meta| !merging.contains(&meta.id()))
                .collect()
        };
        for (ids, docs) in merge_candidates(&free, self.merges.max_docs()) {
            let Some(reservation) = self.merges.try_reserve(docs) else {
                continue;
            };
            if let Err(err) = self.spawn_merge(ids, docs, reservation, MergeKind::Level) {
                tracing::warn!(table = %self.table.name, error = %err, "merge not started");
            }
        }
    }

    /// Starts merging `ids` and a thread that waits for the merge's end to give its segments
    /// and its `reservation` back and make the merged segment searchable.
    fn spawn_merge(
        &mut self,
        ids: Vec<SegmentId>,
        docs: u64,
        reservation: MergeReservation,
        kind: MergeKind,
    ) -> Result<()> {
        self.merging
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(ids.iter().copied());
        let skipped = self.compactions_skipped.clone();
        let running = self.compactions_running.clone();
        if kind == MergeKind::Compaction {
            // Counted before the waiter thread starts (it counts the merge done), and undone
            // below if that thread can't be started.
            running.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let merge = self.writer.merge(&ids);
        let reader = self.searcher.reader();
        let table = self.table.name.clone();
        let merging = self.merging.clone();
        let segments = ids.len();
        let given_back = ids.clone();
        let spawned = std::thread::Builder::new()
            .name("hbidx-merge".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                let result = merge.wait();
                {
                    let mut merging = merging.lock().unwrap_or_else(PoisonError::into_inner);
                    for id in &ids {
                        merging.remove(id);
                    }
                }
                drop(reservation);
                match result {
                    Ok(_) => {
                        // A compaction runs when the table is quiet: no commit would show its
                        // segment soon. A size level's merge runs among commits, whose reload
                        // shows it (a reload of its own cost the bulk load ~10% more CPU).
                        if kind == MergeKind::Compaction
                            && let Err(err) = reader.reload()
                        {
                            tracing::warn!(table = %table, error = %err, "reload after a merge failed");
                        }
                        // Whole milliseconds: a float's digits (12.112341252) can read as a
                        // grouped mobile number to the log's PII masking and be masked.
                        let ms = started.elapsed().as_millis() as u64;
                        match kind {
                            MergeKind::Compaction => tracing::info!(
                                table = %table,
                                segments,
                                docs,
                                ms,
                                "compacted segments into one"
                            ),
                            MergeKind::Level => {
                                tracing::debug!(table = %table, segments, docs, ms, "merged segments")
                            }
                        }
                    }
                    // A writer shutting down or rolling back: nothing is lost, and the indexer
                    // loop tries again.
                    Err(err) => {
                        if kind == MergeKind::Compaction {
                            skipped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        tracing::info!(table = %table, error = %err, "merge skipped")
                    }
                }
                if kind == MergeKind::Compaction {
                    running.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                }
            });
        if let Err(err) = spawned {
            // The merge runs on, unwatched: its segments are free again for later merges
            // (tantivy refuses those while it runs), and its documents leave the budget.
            let mut merging = self.merging.lock().unwrap_or_else(PoisonError::into_inner);
            for id in &given_back {
                merging.remove(id);
            }
            if kind == MergeKind::Compaction {
                self.compactions_running
                    .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
            return Err(IndexerError::Tantivy(tantivy::TantivyError::from(err)));
        }
        Ok(())
    }

    /// Throws away everything applied since the last commit and returns the checkpoint the
    /// source must seek back to.
    pub fn rollback(&mut self) -> Result<Checkpoint> {
        self.pending.clear();
        self.writer.rollback()?;
        self.overlay.clear();
        self.uncommitted_ops = 0;
        self.rows_delta = 0;
        self.checkpoint = self.committed.clone();
        Ok(self.checkpoint.clone())
    }

    /// Starts merging searchable segments (all of them, or the recent ones: see
    /// [`CompactionScope`]) of at most `max_docs` documents in all, among those no merge holds.
    /// The merge runs in tantivy's merge threads and commits on its own (the checkpoint is
    /// untouched: a merge changes no document); a thread waits for it and reloads the reader,
    /// so lookups switch to the merged segment as soon as it exists. Deleted documents are
    /// dropped on the way. A merge tantivy refuses after it started is counted in
    /// [`TableIndexWriter::compactions_skipped`]; one the table's merge budget has no room for
    /// now (other merges of the table run) is [`Compaction::Busy`].
    pub fn compact(&mut self, max_docs: u64, scope: CompactionScope) -> Result<Compaction> {
        let metas = self.writer.index().searchable_segment_metas()?;
        let merging = self
            .merging
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let sizes: Vec<SegmentSize> = metas
            .iter()
            .filter(|meta| !merging.contains(&meta.id()))
            .map(|meta| SegmentSize {
                id: meta.id(),
                docs: meta.max_doc(),
                live: meta.num_docs(),
            })
            .collect();
        let ids = match scope {
            CompactionScope::Whole => {
                let docs: u64 = sizes.iter().map(|s| u64::from(s.docs)).sum();
                if docs > max_docs {
                    return Ok(Compaction::NothingToMerge);
                }
                sizes.iter().map(|s| s.id).collect()
            }
            CompactionScope::Recent => recent_segments(&sizes, max_docs),
        };
        if ids.len() < 2 {
            return Ok(Compaction::NothingToMerge);
        }
        let docs: u64 = sizes
            .iter()
            .filter(|s| ids.contains(&s.id))
            .map(|s| u64::from(s.docs))
            .sum();
        let Some(reservation) = self.merges.try_reserve(docs) else {
            return Ok(Compaction::Busy);
        };
        self.spawn_merge(ids, docs, reservation, MergeKind::Compaction)?;
        Ok(Compaction::Started)
    }

    /// Compactions started and then refused by tantivy, since this writer opened: the indexer
    /// loop compares it across an attempt to try again instead of waiting for the next change.
    pub fn compactions_skipped(&self) -> u64 {
        self.compactions_skipped
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a compaction this writer started is still merging.
    pub fn compacting(&self) -> bool {
        self.compactions_running
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0
    }

    /// Waits for merges in flight (an idle compaction, the merge policy's), so that nobody
    /// moves or deletes the directory (a reindex swap) under a merge still writing to it.
    pub fn finish(self) -> Result<()> {
        self.writer.wait_merging_threads()?;
        Ok(())
    }

    /// Drops everything (documents and checkpoint) and commits the empty index.
    pub fn clear(&mut self) -> Result<()> {
        self.pending.clear();
        self.overlay.clear();
        self.scan_load = ScanLoad::NotStarted;
        self.writer.delete_all_documents()?;
        self.checkpoint = Checkpoint::default();
        // Whatever is written from here on is marked.
        self.delete_marks = true;
        // Every row goes, counted as such only once the commit has happened (a failed one is
        // rolled back, and the count with it).
        self.rows_delta = -i64::try_from(self.rows).unwrap_or(i64::MAX);
        self.commit()?;
        Ok(())
    }
}

/// What [`TableIndexWriter::compact`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compaction {
    /// A merge started.
    Started,
    /// Fewer than two segments to merge within the limit.
    NothingToMerge,
    /// The table's other merges fill its merge budget: try again later.
    Busy,
}

/// A merge a writer starts: a size level's (after a commit) or a compaction's (when idle).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MergeKind {
    Level,
    Compaction,
}

/// Which segments [`TableIndexWriter::compact`] merges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionScope {
    /// Every segment, into one.
    Whole,
    /// The recent ones ([`recent_segments`]): what an idle table's compaction merges.
    Recent,
}

/// A segment's documents: all of them (what a merge reads and writes) and the live ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentSize {
    pub id: SegmentId,
    pub docs: u32,
    pub live: u32,
}

/// How many times the live documents of all smaller segments a segment may hold and still be
/// merged with them. Segments left apart grow at least this factor from one to the next, so a
/// quiet index keeps at most log₄(rows) + 1 segments (~12 at 10M rows), and a merge writes at
/// most 5× the documents written since the bigger segments were made.
pub(crate) const RECENT_RATIO: u64 = 4;

/// The segments an idle compaction merges: the smallest ones, up to the biggest segment whose
/// live documents are at most [`RECENT_RATIO`] times those of all smaller segments together,
/// and at most `max_docs` documents in all. A few changes to a big index merge the few small
/// segments they made, never the big one: the work is at most `RECENT_RATIO + 1` times what
/// was written since the bigger segments were made, whatever the table's size (merging
/// everything after each quiet spell rewrote a 10M-row index, ~1.2 GB, for a handful of
/// writes). The segments left apart grow at least that factor from one to the next. After a
/// bulk load, whose big segments are of similar sizes, it merges them all.
pub(crate) fn recent_segments(sizes: &[SegmentSize], max_docs: u64) -> Vec<SegmentId> {
    let mut by_size: Vec<&SegmentSize> = sizes.iter().collect();
    by_size.sort_by_key(|s| (s.live, s.docs));
    let (mut live, mut docs, mut take) = (0u64, 0u64, 0usize);
    for (at, segment) in by_size.iter().enumerate() {
        docs += u64::from(segment.docs);
        if docs > max_docs {
            break;
        }
        if at == 0 || u64::from(segment.live) <= RECENT_RATIO * live {
            take = at + 1;
        }
        live += u64::from(segment.live);
    }
    by_size[..take].iter().map(|s| s.id).collect()
}

#[cfg(test)]
mod compaction_tests {
    use super::*;

    fn sizes(live: &[u32]) -> Vec<SegmentSize> {
        live.iter()
            .map(|&n| SegmentSize {
                id: SegmentId::generate_random(),
                docs: n,
                live: n,
            })
            .collect()
    }

    fn taken(sizes: &[SegmentSize], max_docs: u64) -> Vec<u32> {
        let ids = recent_segments(sizes, max_docs);
        let mut docs: Vec<u32> = sizes
            .iter()
            .filter(|s| ids.contains(&s.id))
            .map(|s| s.docs)
            .collect();
        docs.sort_unstable();
        docs
    }

    #[test]
    fn a_few_changes_merge_the_small_segments_never_the_big_one() {
        // A 10M-row index after a trickle: the trickle's segments merge, the big one stays.
        assert_eq!(
            taken(&sizes(&[10_000_000, 3, 2, 4, 1]), u64::MAX),
            vec![1, 2, 3, 4]
        );
        // The merged result and new small ones: the ladder is kept, each step ≥ 4× the rest.
        assert_eq!(
            taken(&sizes(&[10_000_000, 10, 2, 1]), u64::MAX),
            vec![1, 2, 10]
        );
        assert_eq!(taken(&sizes(&[10_000_000, 40, 2, 1]), u64::MAX), vec![1, 2]);
        assert_eq!(
            taken(&sizes(&[10_000_000, 10, 2, 1, 1]), u64::MAX),
            vec![1, 1, 2, 10]
        );
        // Once the small ones add up to a quarter of the big one, it merges with them.
        assert_eq!(
            taken(&sizes(&[10_000_000, 2_000_000, 500_000]), u64::MAX),
            vec![500_000, 2_000_000, 10_000_000]
        );
    }

    #[test]
    fn a_bulk_load_merges_whole_and_the_cap_holds() {
        let load = sizes(&[2_500_000, 2_400_000, 2_600_000, 900_000, 100_000, 20_000]);
        assert_eq!(taken(&load, u64::MAX).len(), 6);
        // At most max_docs documents in one merge: the smallest first.
        assert_eq!(
            taken(&load, 5_000_000),
            vec![20_000, 100_000, 900_000, 2_400_000]
        );
        // Deleted documents count as what the merge reads, not as live weight: a big segment
        // mostly updated away merges like the small one it has become.
        let mut updated = sizes(&[1_000_000, 1_000]);
        updated[0].live = 2_000;
        assert_eq!(taken(&updated, u64::MAX), vec![1_000, 1_000_000]);
        assert!(recent_segments(&sizes(&[7]), u64::MAX).len() < 2);
    }
}
