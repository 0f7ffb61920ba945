//! One tantivy index per table: the writer side ([`TableIndexWriter`], owned by the table's
//! indexer thread) and the read side ([`TableSearcher`], cheap to clone, used by the query
//! service).
//!
//! Document layout (see ARCHITECTURE.md):
//! - `_rk`: the rowkey's bytes. Indexed (upserts delete by this term) and a fast field (lookups
//!   rank its term ordinals, which sort like the bytes: HBase's rowkey order). Not stored: the
//!   column gives it back. Raw bytes rather than hex text: half the bytes in every term to sort,
//!   write and compare (on the order of 15% of the indexing CPU).
//! - `_key`: declared and never written, so that indexes that have it still open. Nothing reads
//!   a natural key from the index, and rebuilding it per event (the codec re-hashes the key to
//!   check an md5 prefix) costs more than encoding the row state.
//! - `_state`: the row's [`RowState`], stored (see `state.rs` for why): the latest version of
//!   every indexed column and of every covered column, so a lookup that wants only those is
//!   answered from the index ([`TableSearcher::kept_rows`]).
//! - `_covered.{column}`: one per covered column, neither indexed nor stored: it only makes the
//!   schema say which columns `_state` covers, so changing `covered` is a schema change and the
//!   server rebuilds the index, which fills the new columns in.
//! - one raw field per indexed field with its normalised value, plus kind-specific sub-fields
//!   (`__tail`, `__gram`, `__py`) built by `analysis.rs`. A phone field's own field is declared
//!   and left empty: its reversed digits in `__tail` answer exact lookups too.

use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hbidx_schema::config::{FieldKind, TableConfig};
use hbidx_schema::model::{CellOp, Mutation};
use tantivy::columnar::BytesColumn;
use tantivy::directory::MmapDirectory;
use tantivy::index::SegmentId;
use tantivy::indexer::UserOperation;
use tantivy::query::{BooleanQuery, EnableScoring, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{
    BytesOptions, Field, IndexRecordOption, STORED, Schema, TextFieldIndexing, TextOptions, Value,
};
use tantivy::{
    DocAddress, DocSet, Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term,
};

use crate::analysis::{self, Condition, GRAM, PINYIN, TAIL};
use crate::checkpoint::Checkpoint;
use crate::error::{IndexerError, Result};
use crate::state::RowState;

/// The tantivy fields of one indexed field.
#[derive(Debug, Clone)]
struct FieldHandles {
    column: String,
    kind: FieldKind,
    exact: Field,
    tail: Option<Field>,
    gram: Option<Field>,
    pinyin: Option<Field>,
}

#[derive(Debug)]
struct Fields {
    rowkey: Field,
    state: Field,
    /// `"1"` on documents of rows with at least one visible value. The others only keep the
    /// row's tombstones (so a late, older put can't resurrect it) and are not rows any more.
    live: Field,
    by_name: HashMap<String, FieldHandles>,
}

/// A term field whose terms hbidx makes itself (see `analysis.rs`): untokenised, postings
/// without frequencies or positions, and no field norms. Lookups never score, so norms (one
/// byte per document and field, written at every commit and merge) would be paid for nothing.
fn raw_terms() -> TextOptions {
    TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer("raw")
            .set_fieldnorms(false)
            .set_index_option(IndexRecordOption::Basic),
    )
}

/// The schema of a table's index: its layout (see the module docs) for the table's fields.
/// An index whose schema differs (a changed field config, or an index written by an hbidx with
/// an older layout) can't be opened; the server rebuilds it from the store
/// ([`IndexerError::SchemaMismatch`]).
fn build_schema(table: &TableConfig) -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let rowkey = builder.add_bytes_field("_rk", BytesOptions::default().set_indexed().set_fast());
    // Not written any more (see the module docs); declared so that existing indexes still open.
    builder.add_text_field("_key", STORED);
    let state = builder.add_bytes_field("_state", STORED);
    let live = builder.add_text_field("_live", raw_terms());
    for column in &table.covered {
        builder.add_bytes_field(&format!("_covered.{column}"), BytesOptions::default());
    }
    let mut by_name = HashMap::new();
    for field in &table.fields {
        let name = &field.name;
        let exact = builder.add_text_field(name, raw_terms());
        let mut sub =
            |suffix: &str| Some(builder.add_text_field(&format!("{name}{suffix}"), raw_terms()));
        let (tail, gram, pinyin) = match field.kind {
            FieldKind::Phone => (sub(TAIL), None, None),
            FieldKind::Name => (None, sub(GRAM), sub(PINYIN)),
            FieldKind::Idcard | FieldKind::Keyword => (None, None, None),
        };
        by_name.insert(
            name.clone(),
            FieldHandles {
                column: field.column.clone(),
                kind: field.kind,
                exact,
                tail,
                gram,
                pinyin,
            },
        );
    }
    (
        builder.build(),
        Fields {
            rowkey,
            state,
            live,
            by_name,
        },
    )
}

/// Opens (or creates) the index of `table` under `dir`. The returned searcher and writer share
/// one `Index`. Only one process may hold the writer of a directory (tantivy takes a lock).
pub fn open_table_index(
    dir: &Path,
    table: Arc<TableConfig>,
    options: &WriterOptions,
) -> Result<(TableIndexWriter, TableSearcher)> {
    std::fs::create_dir_all(dir).map_err(|err| IndexerError::Directory {
        path: dir.display().to_string(),
        reason: err.to_string(),
    })?;
    let (schema, fields) = build_schema(&table);
    let directory = MmapDirectory::open(dir).map_err(|err| IndexerError::Directory {
        path: dir.display().to_string(),
        reason: err.to_string(),
    })?;
    // Not `Index::open_or_create`: on a schema mismatch it fails with a generic schema error,
    // and the server must tell this case apart to rebuild the index.
    let index = if Index::exists(&directory).map_err(tantivy::TantivyError::from)? {
        let index = Index::open(directory)?;
        if index.schema() != schema {
            return Err(IndexerError::SchemaMismatch {
                path: dir.display().to_string(),
            });
        }
        index
    } else {
        Index::create(directory, schema, tantivy::IndexSettings::default())?
    };
    let checkpoint = Checkpoint::from_payload(index.load_metas()?.payload.as_deref())?;
    let writer: IndexWriter<TantivyDocument> =
        index.writer_with_num_threads(options.threads, options.memory_budget_bytes)?;
    let heap = HeapReservation::new(options.memory_budget_bytes as u64);
    let reader = index
        .reader_builder()
        .reload_policy(ReloadPolicy::Manual)
        .try_into()?;
    let fields = Arc::new(fields);
    let searcher = TableSearcher {
        table: table.clone(),
        reader: Arc::new(std::sync::RwLock::new(reader)),
        fields: fields.clone(),
        rowkey_columns: Arc::default(),
        rowkey_cache: Arc::new(rowkey_cache(options.rowkey_cache_bytes)),
        rowkey_counts: Arc::default(),
        segment_bytes: Arc::default(),
        rowkey_filters: Arc::default(),
    };
    let rows = searcher.stats().rows;
    let writer = TableIndexWriter {
        table,
        writer,
        fields,
        searcher: searcher.clone(),
        overlay: HashMap::default(),
        committed: checkpoint.clone(),
        checkpoint,
        uncommitted_ops: 0,
        invalid_values: 0,
        pending: Vec::with_capacity(PENDING_BATCH),
        rows,
        rows_delta: 0,
        _heap: heap,
    };
    Ok((writer, searcher))
}

/// The checkpoint committed in the index under `dir`, whatever schema it was built with: where
/// a rebuild of an index with an outdated schema resumes its source.
pub fn committed_checkpoint(dir: &Path) -> Result<Checkpoint> {
    let index = Index::open_in_dir(dir)?;
    Checkpoint::from_payload(index.load_metas()?.payload.as_deref())
}

/// Heap the open writers of this process may use (each writer's `memory_budget_bytes`).
static WRITER_HEAP_RESERVED: AtomicU64 = AtomicU64::new(0);

/// The writer heap every open [`TableIndexWriter`] of this process may fill, live indexes and
/// reindex shadows alike: what `[memory] index_writers_mb` bounds. tantivy fills a writer's heap
/// up to its budget and then writes a segment, so this is the part's use at its peak.
pub fn writer_heap_reserved() -> u64 {
    WRITER_HEAP_RESERVED.load(Ordering::Relaxed)
}

/// One writer's share of [`writer_heap_reserved`], given back when the writer is dropped.
struct HeapReservation(u64);

impl HeapReservation {
    fn new(bytes: u64) -> Self {
        WRITER_HEAP_RESERVED.fetch_add(bytes, Ordering::Relaxed);
        Self(bytes)
    }
}

impl Drop for HeapReservation {
    fn drop(&mut self) {
        WRITER_HEAP_RESERVED.fetch_sub(self.0, Ordering::Relaxed);
    }
}

/// Tuning of the tantivy writer.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    pub threads: usize,
    pub memory_budget_bytes: usize,
    /// Budget of the searcher's cache of decoded rowkeys ([`RowkeyCache`]), in bytes.
    pub rowkey_cache_bytes: u64,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            threads: 2,
            memory_budget_bytes: 256 << 20,
            rowkey_cache_bytes: DEFAULT_ROWKEY_CACHE_BYTES,
        }
    }
}

/// 64 MiB holds the decoded rowkeys of about a million rows: a warm working set for the
/// sizes one node serves, and small next to the index's own page cache.
pub const DEFAULT_ROWKEY_CACHE_BYTES: u64 = 64 << 20;

/// Consecutive `_rk` term ordinals decoded together and cached as one entry.
const ROWKEY_CHUNK: u64 = 64;

/// Decoded `_rk` dictionary entries, by (segment, chunk of [`ROWKEY_CHUNK`] ordinals).
///
/// Turning a term ordinal back into its rowkey walks the column dictionary's sstable block
/// from its start (about 70 delta-decoded entries on average, measured with hex rowkeys): a
/// quarter of an exact lookup's instructions. A chunk is decoded in one pass on a miss and then answers
/// every ordinal in it directly. Segments are immutable and their ids unique (across reindex
/// swaps too), so entries never go stale; those of merged-away segments age out. The cache
/// is bounded in bytes, like HBase's block cache or PostgreSQL's shared buffers.
type RowkeyCache = quick_cache::sync::Cache<(SegmentId, u64), Arc<Vec<Vec<u8>>>, ChunkWeight>;

#[derive(Clone)]
struct ChunkWeight;

impl quick_cache::Weighter<(SegmentId, u64), Arc<Vec<Vec<u8>>>> for ChunkWeight {
    fn weight(&self, _key: &(SegmentId, u64), chunk: &Arc<Vec<Vec<u8>>>) -> u64 {
        // Heap bytes of the keys plus the per-entry overhead (vector headers, the map slot).
        chunk.iter().map(|key| key.len() as u64 + 24).sum::<u64>() + 64
    }
}

fn rowkey_cache(budget_bytes: u64) -> RowkeyCache {
    // quick_cache sizes its table from an item estimate: one chunk of 15-byte rowkeys (the
    // example design) weighs about 2.6 KB.
    let items = (budget_bytes / 2_600).max(16) as usize;
    RowkeyCache::with_weighter(items, budget_bytes.max(1), ChunkWeight)
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
    /// The checkpoint of the last successful commit, for rollback.
    committed: Checkpoint,
    uncommitted_ops: usize,
    invalid_values: u64,
    /// Operations not yet handed to tantivy. `IndexWriter::run` takes them as one batch: one
    /// channel message to the indexing threads instead of one (and a wake-up) per document.
    pending: Vec<UserOperation>,
    /// Live rows (documents with `_live`) as of the last commit, and the change since. Counted
    /// once when the index opens, then kept up to date from each applied event: the writer knows
    /// whether a row had visible values before and after. Counting them again at each commit
    /// walks the `_live` postings of every segment with new deletes, which is nearly every
    /// commit of a table taking updates (~1 ns a row: 0.1 s per commit at 100M rows).
    rows: u64,
    rows_delta: i64,
    _heap: HeapReservation,
}

/// Operations are handed to tantivy in batches of this many.
const PENDING_BATCH: usize = 1024;

/// What applying one event did, for counters and reports.
#[derive(Debug, Default, Clone, Copy)]
pub struct ApplyOutcome {
    pub changed: bool,
    /// Values that failed normalisation (e.g. a malformed phone); the row is still indexed on
    /// its valid fields.
    pub invalid_values: u32,
}

impl TableIndexWriter {
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
        } else {
            self.apply_ops(&mutation.rowkey, &mutation.ops)?
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
        self.apply_ops(&mutation.rowkey, &mutation.ops)
    }

    fn apply_ops(&mut self, rowkey: &[u8], ops: &[CellOp]) -> Result<ApplyOutcome> {
        // `has_doc`: some document (committed, or added since the last commit) may exist for
        // this rowkey. When none can, the upsert skips its delete: tantivy resolves every delete
        // term against every segment at commit, which is most of a bulk load's cost otherwise.
        let (mut state, has_doc) = match self.overlay.remove(rowkey) {
            Some((state, has_doc)) => (state, has_doc),
            None => match self.searcher.committed_state(rowkey)? {
                Some(state) => (state, true),
                None => (RowState::default(), false),
            },
        };
        let was_live = state.has_values();
        let table = &self.table;
        let changed =
            crate::state::apply_indexed(&mut state, ops, |column| table.keeps_column(column));
        let mut outcome = ApplyOutcome {
            changed,
            invalid_values: 0,
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
        self.overlay.insert(rowkey.to_vec(), (state, doc_after));
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
        let mut doc = TantivyDocument::default();
        doc.add_bytes(self.fields.rowkey, rowkey);
        doc.add_bytes(self.fields.state, &state.encode());
        if state.has_values() {
            doc.add_text(self.fields.live, "1");
        }
        let mut invalid = 0;
        for (name, handles) in &self.fields.by_name {
            let Some(raw) = state.value(&handles.column) else {
                continue;
            };
            let raw = String::from_utf8_lossy(raw);
            match analysis::field_terms(handles.kind, &raw) {
                Ok(terms) => {
                    // A phone's exact lookups use its reversed digits (`analysis.rs`); its base
                    // field stays in the schema, empty, so indexes written before still open.
                    if handles.kind != FieldKind::Phone {
                        doc.add_text(handles.exact, &terms.exact);
                    }
                    if let (Some(field), Some(tail)) = (handles.tail, &terms.tail) {
                        doc.add_text(field, tail);
                    }
                    let pairs = [(handles.gram, &terms.gram), (handles.pinyin, &terms.pinyin)];
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
        (doc, invalid)
    }

    /// Commits everything applied so far, with the checkpoint as the commit payload, and makes
    /// it searchable. Blocking: call it from the indexer thread, never from async code.
    pub fn commit(&mut self) -> Result<Checkpoint> {
        self.flush_pending()?;
        let mut prepared = self.writer.prepare_commit()?;
        prepared.set_payload(&self.checkpoint.to_payload());
        prepared.commit()?;
        self.searcher.reader().reload()?;
        self.overlay.clear();
        self.uncommitted_ops = 0;
        self.rows = self
            .rows
            .saturating_add_signed(std::mem::take(&mut self.rows_delta));
        self.committed = self.checkpoint.clone();
        Ok(self.checkpoint.clone())
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

    /// Starts merging every searchable segment into one, if there are several and at most
    /// `max_docs` documents; returns whether a merge started. The merge runs in tantivy's merge
    /// threads and commits on its own (the checkpoint is untouched: a merge changes no
    /// document); a thread waits for it and reloads the reader, so lookups switch to the
    /// merged segment as soon as it exists. Deleted documents are dropped on the way.
    pub fn compact(&mut self, max_docs: u64) -> Result<bool> {
        let metas = self.writer.index().searchable_segment_metas()?;
        let docs: u64 = metas.iter().map(|meta| u64::from(meta.max_doc())).sum();
        if metas.len() < 2 || docs > max_docs {
            return Ok(false);
        }
        let ids: Vec<SegmentId> = metas.iter().map(|meta| meta.id()).collect();
        let merge = self.writer.merge(&ids);
        let reader = self.searcher.reader();
        let table = self.table.name.clone();
        let segments = ids.len();
        std::thread::Builder::new()
            .name("hbidx-compact".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                match merge.wait() {
                    Ok(_) => {
                        if let Err(err) = reader.reload() {
                            tracing::warn!(table = %table, error = %err, "reload after compaction failed");
                        }
                        tracing::info!(
                            table = %table,
                            segments,
                            docs,
                            secs = started.elapsed().as_secs_f64(),
                            "compacted the index into one segment"
                        );
                    }
                    // A segment the merge policy was already merging, or a writer shutting
                    // down: nothing is lost, a later idle period tries again.
                    Err(err) => {
                        tracing::info!(table = %table, error = %err, "compaction skipped")
                    }
                }
            })
            .map_err(|err| IndexerError::Tantivy(tantivy::TantivyError::from(err)))?;
        Ok(true)
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
        self.writer.delete_all_documents()?;
        self.checkpoint = Checkpoint::default();
        // Every row goes, counted as such only once the commit has happened (a failed one is
        // rolled back, and the count with it).
        self.rows_delta = -i64::try_from(self.rows).unwrap_or(i64::MAX);
        self.commit()?;
        Ok(())
    }
}

/// How a rowkey appears in logs and errors: a hash, never the bytes. Some rowkey designs are
/// built from the phone itself (reversal), and logs must not carry phone numbers.
pub fn rowkey_ref(rowkey: &[u8]) -> String {
    format!("#{:016x}", xxhash_rust::xxh3::xxh3_64(rowkey))
}

/// The rowkey of document `doc` from its segment's `_rk` column; `None` for a document without
/// one (the indexer writes none).
fn rowkey_at(column: &BytesColumn, doc: tantivy::DocId) -> Result<Option<Vec<u8>>> {
    let Some(ord) = column.term_ords(doc).next() else {
        return Ok(None);
    };
    let mut rowkey = Vec::new();
    column
        .ord_to_bytes(ord, &mut rowkey)
        .map_err(tantivy::TantivyError::from)?;
    Ok(Some(rowkey))
}

/// Every term of `field` that starts with `prefix`: the range from the prefix up to (not
/// including) the prefix with its last character incremented. UTF-8 preserves code point order,
/// so this is exactly the prefix's block of the term dictionary.
fn prefix_query(field: Field, prefix: &str) -> RangeQuery {
    let lower = Bound::Included(Term::from_field_text(field, prefix));
    let mut chars: Vec<char> = prefix.chars().collect();
    let upper = loop {
        let Some(last) = chars.pop() else {
            break Bound::Unbounded;
        };
        // The next scalar value, skipping the surrogate gap; char::MAX has no successor, so
        // the bound moves one character to the left.
        let next = (last as u32 + 1..=char::MAX as u32).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            let upper: String = chars.into_iter().collect();
            break Bound::Excluded(Term::from_field_text(field, &upper));
        }
    };
    RangeQuery::new(lower, upper)
}

/// How [`TableSearcher::lookup`] finds the matching documents of a segment.
enum Plan {
    /// One exact term: its postings, read directly.
    Term(Term),
    /// Anything else (prefix ranges, several terms, a cursor): a tantivy query weight.
    Weight(Box<dyn tantivy::query::Weight>),
}

/// What [`TableSearcher::live_rowkeys_sample`] read.
#[derive(Debug, Clone, Default)]
pub struct LiveRowkeys {
    /// All live rowkeys, or an evenly spaced sample of them, in no particular order.
    pub rowkeys: Vec<Vec<u8>>,
    /// How many rows are live (exact, whether or not the rowkeys are a sample).
    pub live: u64,
}

/// Live rows in rowkey order and the cursor after them ([`TableSearcher::rows_after`]).
pub type RowsPage = (Vec<(Vec<u8>, RowState)>, Option<Vec<u8>>);

/// A page of lookup results in rowkey order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupPage {
    pub rowkeys: Vec<Vec<u8>>,
    /// There are more matches after the last rowkey of this page.
    pub has_more: bool,
}

/// Sizes for the ops page and the status endpoint.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct IndexStats {
    /// Rows with at least one visible value.
    pub rows: u64,
    /// Documents, including those that only remember a deleted row's tombstones.
    pub docs: u64,
    pub segments: usize,
    pub bytes: u64,
    /// The reader generation these counts were read from. Every reload (a commit, a
    /// compaction, a background merge) starts a new one; see [`TableSearcher::generation`].
    pub generation: u64,
}

/// What [`TableSearcher::rowkey_cache_stats`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowkeyCacheStats {
    /// Weight of the cached chunks…
    pub bytes: u64,
    /// …bounded by this (`WriterOptions::rowkey_cache_bytes`).
    pub budget: u64,
    /// Cached chunks of [`ROWKEY_CHUNK`] rowkeys.
    pub entries: usize,
    pub hits: u64,
    pub misses: u64,
}

/// What one covered column costs in a table's index ([`TableSearcher::covered_sizes`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct CoveredSize {
    /// `family:qualifier`.
    pub column: String,
    /// Bytes of the column in the index's row states (estimated from `sampled` rows).
    pub bytes: u64,
    /// Live rows that have a value for it (estimated likewise).
    pub rows: u64,
    /// Live rows read for the estimate.
    pub sampled: u64,
}

/// Reads of the rowkey cache and the misses among them (chunks decoded).
#[derive(Debug, Default)]
struct RowkeyCacheCounts {
    reads: AtomicU64,
    misses: AtomicU64,
}

/// The read side of a table index. Cloning is cheap; every clone sees each commit.
#[derive(Clone)]
pub struct TableSearcher {
    table: Arc<TableConfig>,
    /// Shared by every clone, so that a reindex can swap the index under all of them at once
    /// ([`TableSearcher::adopt`]).
    reader: Arc<std::sync::RwLock<IndexReader>>,
    fields: Arc<Fields>,
    /// The `_rk` columns of the segments last searched ([`TableSearcher::rowkey_columns`]).
    /// Keyed by segment ids, which are unique across indexes, so a reindex swap can't hit a
    /// stale entry.
    rowkey_columns: Arc<std::sync::Mutex<Option<RowkeyColumns>>>,
    rowkey_cache: Arc<RowkeyCache>,
    rowkey_counts: Arc<RowkeyCacheCounts>,
    /// Each segment's size on disk without its deletes file ([`TableSearcher::sizes`]).
    segment_bytes: Arc<std::sync::Mutex<HashMap<SegmentId, u64>>>,
    /// Membership filters of each segment's rowkeys, for [`TableSearcher::committed_state`].
    rowkey_filters: Arc<crate::filters::RowkeyFilters>,
}

/// Segment ids and their `_rk` columns, in the searcher's segment order.
type RowkeyColumns = (Vec<SegmentId>, Arc<Vec<Option<BytesColumn>>>);

impl TableSearcher {
    pub fn table(&self) -> &Arc<TableConfig> {
        &self.table
    }

    fn reader(&self) -> IndexReader {
        self.reader
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Makes this searcher, and every clone of it, read `other`'s index from now on. Lookups
    /// in flight finish on the index they started with.
    pub fn adopt(&self, other: &TableSearcher) {
        let reader = other.reader();
        *self
            .reader
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = reader;
    }

    /// The committed state of a row, if the index has a document for it.
    ///
    /// Looks the rowkey term up directly in each segment's term dictionary and walks its
    /// postings to the live document. This runs once per indexed event whose row isn't in the
    /// writer's overlay, so it avoids the query/collector/scorer machinery: for a row the index
    /// has never seen (the common case in a bulk load) it costs one FST probe per segment.
    pub fn committed_state(&self, rowkey: &[u8]) -> Result<Option<RowState>> {
        self.state_in(&self.reader().searcher(), rowkey, true)
    }

    /// `build_filters`: build the rowkey filters of segments that have none yet (the indexer
    /// and verify do; a lookup, on the async runtime, only uses those already built).
    fn state_in(
        &self,
        searcher: &tantivy::Searcher,
        rowkey: &[u8],
        build_filters: bool,
    ) -> Result<Option<RowState>> {
        let term = Term::from_field_bytes(self.fields.rowkey, rowkey);
        let segments = searcher.segment_readers();
        let filters = self
            .rowkey_filters
            .for_segments(segments, self.fields.rowkey, build_filters);
        for (segment_ord, (segment, filter)) in segments.iter().zip(filters).enumerate() {
            if filter.is_some_and(|filter| !crate::filters::may_contain(&filter, rowkey)) {
                continue;
            }
            let inverted = segment.inverted_index(self.fields.rowkey)?;
            let Some(mut postings) = inverted
                .read_postings(&term, IndexRecordOption::Basic)
                .map_err(tantivy::TantivyError::from)?
            else {
                continue;
            };
            let alive = segment.alive_bitset();
            let mut doc = postings.doc();
            while doc != tantivy::TERMINATED {
                if alive.is_none_or(|bits| bits.is_alive(doc)) {
                    let address = DocAddress::new(segment_ord as u32, doc);
                    return self.state_at(searcher, address, rowkey).map(Some);
                }
                doc = postings.advance();
            }
        }
        Ok(None)
    }

    fn state_at(
        &self,
        searcher: &tantivy::Searcher,
        address: DocAddress,
        rowkey: &[u8],
    ) -> Result<RowState> {
        let doc: TantivyDocument = searcher.doc(address)?;
        let bytes = doc
            .get_first(self.fields.state)
            .and_then(|value| value.as_bytes())
            .unwrap_or_default();
        RowState::decode(bytes).map_err(|err| IndexerError::CorruptState {
            rowkey: rowkey_ref(rowkey),
            reason: err.to_string(),
        })
    }

    /// The committed states of rows, in the order given (`None` where the index has no
    /// document): the latest values of their indexed and covered columns, read from one
    /// snapshot of the index. A lookup whose columns are all kept answers from these instead of
    /// the store.
    pub fn kept_rows(&self, rowkeys: &[Vec<u8>]) -> Result<Vec<Option<RowState>>> {
        let searcher = self.reader().searcher();
        rowkeys
            .iter()
            .map(|rowkey| self.state_in(&searcher, rowkey, false))
            .collect()
    }

    /// Finds rows matching all conditions, in rowkey order, after `after` (exclusive).
    ///
    /// Ordering is by rowkey: it is deterministic, stays stable while the index changes under a
    /// paging client (the cursor is simply the last rowkey returned), and is the order in which a
    /// multi-get visits HBase regions.
    pub fn lookup(
        &self,
        conditions: &[Condition],
        limit: usize,
        after: Option<&[u8]>,
    ) -> Result<LookupPage> {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        // The term of the last exact clause: used when it is the only clause.
        let mut single_term: Option<Term> = None;
        for condition in conditions {
            let handles = self.fields.by_name.get(&condition.field).ok_or_else(|| {
                IndexerError::InvalidCondition {
                    field: condition.field.clone(),
                    reason: "not an indexed field of this table".into(),
                }
            })?;
            let wanted = condition.terms();
            let field = match wanted.subfield_suffix {
                "" => Some(handles.exact),
                TAIL => handles.tail,
                GRAM => handles.gram,
                PINYIN => handles.pinyin,
                _ => None,
            }
            .ok_or_else(|| IndexerError::InvalidCondition {
                field: condition.field.clone(),
                reason: "this match mode is not indexed for the field".into(),
            })?;
            for term in wanted.terms {
                let query: Box<dyn Query> = if wanted.prefix {
                    single_term = None;
                    Box::new(prefix_query(field, &term))
                } else {
                    let term = Term::from_field_text(field, &term);
                    single_term = Some(term.clone());
                    Box::new(TermQuery::new(term, IndexRecordOption::Basic))
                };
                clauses.push((Occur::Must, query));
            }
        }
        if clauses.is_empty() {
            return Ok(LookupPage {
                rowkeys: Vec::new(),
                has_more: false,
            });
        }
        if let Some(after) = after {
            clauses.push((
                Occur::Must,
                Box::new(RangeQuery::new(
                    Bound::Excluded(Term::from_field_bytes(self.fields.rowkey, after)),
                    Bound::Unbounded,
                )),
            ));
        }
        let searcher = self.reader().searcher();
        let columns = self.rowkey_columns(&searcher)?;
        // The common lookup (one exact phone or idcard, first page) is a single term: its
        // postings are walked directly, without building a query weight and scorer, which cost
        // about as much as the term probe itself.
        let plan = match (clauses.len(), single_term) {
            (1, Some(term)) => Plan::Term(term),
            _ => {
                let query: Box<dyn Query> = if clauses.len() == 1 {
                    clauses
                        .pop()
                        .map(|(_, q)| q)
                        .unwrap_or_else(|| Box::new(BooleanQuery::new(vec![])))
                } else {
                    Box::new(BooleanQuery::new(clauses))
                };
                Plan::Weight(query.weight(EnableScoring::disabled_from_searcher(&searcher))?)
            }
        };
        // Per segment, the `limit + 1` smallest rowkeys among the live matches. Term ordinals of
        // the `_rk` column sort like the rowkeys themselves, so ranking happens on integers and
        // only the winners are turned back into rowkeys (one dictionary block decode each).
        // This replaces tantivy's sort-by-string collector, which opened the column and
        // resolved ordinals to strings on every query: most of a lookup's index time.
        let keep = limit + 1;
        // A broad match (a one-character name prefix over millions of rows) is pruned back to
        // `keep` whenever this many ordinals pile up, so memory stays bounded like a top-k heap.
        let prune_at = (keep * 2).max(4096);
        let mut rowkeys: Vec<Vec<u8>> = Vec::new();
        let mut ords: Vec<u64> = Vec::new();
        for (segment, column) in searcher.segment_readers().iter().zip(columns.iter()) {
            let Some(column) = column else { continue };
            let alive = segment.alive_bitset();
            ords.clear();
            let mut collect = |docs: &[tantivy::DocId]| {
                for &doc in docs {
                    if alive.is_none_or(|bits| bits.is_alive(doc)) {
                        ords.extend(column.term_ords(doc));
                    }
                }
                if ords.len() >= prune_at {
                    ords.select_nth_unstable(keep - 1);
                    ords.truncate(keep);
                }
            };
            match &plan {
                Plan::Term(term) => {
                    let postings = segment
                        .inverted_index(term.field())?
                        .read_postings(term, IndexRecordOption::Basic)
                        .map_err(tantivy::TantivyError::from)?;
                    if let Some(mut postings) = postings {
                        let mut block = [0; tantivy::COLLECT_BLOCK_BUFFER_LEN];
                        loop {
                            let filled = postings.fill_buffer(&mut block);
                            collect(&block[..filled]);
                            if filled < block.len() {
                                break;
                            }
                        }
                    }
                }
                Plan::Weight(weight) => weight.for_each_no_score(segment, &mut collect)?,
            }
            if ords.len() > keep {
                ords.select_nth_unstable(keep - 1);
                ords.truncate(keep);
            }
            for &ord in &ords {
                if let Some(rowkey) = self.rowkey_term(segment.segment_id(), column, ord)? {
                    rowkeys.push(rowkey);
                }
            }
        }
        // A rowkey has one live document, so there is nothing to deduplicate across segments.
        rowkeys.sort_unstable();
        let has_more = rowkeys.len() > limit;
        rowkeys.truncate(limit);
        Ok(LookupPage { rowkeys, has_more })
    }

    /// How many segments have a rowkey filter, and their bytes.
    pub fn rowkey_filter_stats(&self) -> crate::filters::FilterStats {
        self.rowkey_filters.stats()
    }

    /// Size (by the cache's own weighing) and hit counts of the rowkey cache, for `/metrics`:
    /// hits and misses since the process opened the table (a reindex swap keeps the cache,
    /// see [`TableSearcher::adopt`]).
    pub fn rowkey_cache_stats(&self) -> RowkeyCacheStats {
        // Misses first: a read is counted before its miss, so `reads` read after `misses` is
        // never below it.
        let misses = self.rowkey_counts.misses.load(Ordering::Relaxed);
        let reads = self.rowkey_counts.reads.load(Ordering::Relaxed);
        RowkeyCacheStats {
            bytes: self.rowkey_cache.weight(),
            budget: self.rowkey_cache.capacity(),
            entries: self.rowkey_cache.len(),
            hits: reads.saturating_sub(misses),
            misses,
        }
    }

    /// The `_rk` term (the rowkey's bytes) of ordinal `ord` in a segment's column, through the
    /// [`RowkeyCache`].
    fn rowkey_term(
        &self,
        segment: SegmentId,
        column: &BytesColumn,
        ord: u64,
    ) -> Result<Option<Vec<u8>>> {
        let chunk = ord / ROWKEY_CHUNK;
        self.rowkey_counts.reads.fetch_add(1, Ordering::Relaxed);
        let entry = self.rowkey_cache.get_or_insert_with(
            &(segment, chunk),
            || -> Result<Arc<Vec<Vec<u8>>>> {
                // Counted here, where a chunk is really decoded: quick_cache's own `stats`
                // count a miss twice in `get_or_insert_with` (the probe and the guard).
                self.rowkey_counts.misses.fetch_add(1, Ordering::Relaxed);
                let dictionary = column.dictionary();
                let start = chunk * ROWKEY_CHUNK;
                let end = (start + ROWKEY_CHUNK).min(dictionary.num_terms() as u64);
                let ords: Vec<u64> = (start..end).collect();
                let mut keys = Vec::with_capacity(ords.len());
                dictionary
                    .sorted_ords_to_term_cb(&ords, |key| keys.push(key.to_vec()))
                    .map_err(tantivy::TantivyError::from)?;
                Ok(Arc::new(keys))
            },
        )?;
        Ok(entry.get((ord - chunk * ROWKEY_CHUNK) as usize).cloned())
    }

    /// The `_rk` fast-field column of each segment of `searcher`, in segment order. Opening a
    /// column walks the segment's columnar index, so the columns are opened once per set of
    /// segments (a reload that only changes deletes keeps them) rather than once per lookup.
    fn rowkey_columns(
        &self,
        searcher: &tantivy::Searcher,
    ) -> Result<Arc<Vec<Option<BytesColumn>>>> {
        let segments = searcher.segment_readers();
        let mut cache = self
            .rowkey_columns
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((ids, columns)) = cache.as_ref()
            && ids.len() == segments.len()
            && ids
                .iter()
                .zip(segments)
                .all(|(id, s)| *id == s.segment_id())
        {
            return Ok(columns.clone());
        }
        let ids: Vec<SegmentId> = segments.iter().map(|s| s.segment_id()).collect();
        let columns = segments
            .iter()
            .map(|segment| segment.fast_fields().bytes("_rk"))
            .collect::<tantivy::Result<Vec<_>>>()?;
        let columns = Arc::new(columns);
        *cache = Some((ids, columns.clone()));
        Ok(columns)
    }

    /// Every live rowkey with its indexed values (column → raw value), in no particular order.
    /// Used by verify and by tests that compare the index with ground truth.
    pub fn all_rows(&self) -> Result<Vec<(Vec<u8>, RowState)>> {
        let searcher = self.reader().searcher();
        let columns = self.rowkey_columns(&searcher)?;
        let mut out = Vec::new();
        for (segment_ord, segment) in searcher.segment_readers().iter().enumerate() {
            let Some(column) = &columns[segment_ord] else {
                continue;
            };
            let alive = segment.alive_bitset();
            for doc_id in 0..segment.max_doc() {
                if alive.is_some_and(|bits| !bits.is_alive(doc_id)) {
                    continue;
                }
                let Some(rowkey) = rowkey_at(column, doc_id)? else {
                    continue;
                };
                let address = DocAddress::new(segment_ord as u32, doc_id);
                let state = self.state_at(&searcher, address, &rowkey)?;
                if state.has_values() {
                    out.push((rowkey, state));
                }
            }
        }
        Ok(out)
    }

    /// The next live rows after `after` (exclusive; `None`: from the start) in rowkey order,
    /// with their indexed and covered values, for a full verify that walks the index beside a
    /// store scan in constant memory. At most `limit` rowkeys are read; documents that only
    /// remember tombstones are among them but not returned (as in [`Self::all_rows`]). The
    /// cursor is the last rowkey read, `None` once the index has no more.
    ///
    /// Each segment's `_rk` term dictionary is sorted, so the first `limit` live rowkeys of the
    /// index are among the first `limit` of each segment.
    pub fn rows_after(&self, after: Option<&[u8]>, limit: usize) -> Result<RowsPage> {
        let searcher = self.reader().searcher();
        let mut found: Vec<(Vec<u8>, DocAddress)> = Vec::new();
        for (segment_ord, segment) in searcher.segment_readers().iter().enumerate() {
            let inverted = segment.inverted_index(self.fields.rowkey)?;
            let alive = segment.alive_bitset();
            let mut range = inverted.terms().range();
            if let Some(after) = after {
                range = range.gt(after);
            }
            let mut stream = range.into_stream().map_err(tantivy::TantivyError::from)?;
            let mut taken = 0;
            while taken < limit && stream.advance() {
                let mut postings = inverted
                    .read_postings_from_terminfo(stream.value(), IndexRecordOption::Basic)
                    .map_err(tantivy::TantivyError::from)?;
                let mut doc = postings.doc();
                while doc != tantivy::TERMINATED {
                    if alive.is_none_or(|bits| bits.is_alive(doc)) {
                        let address = DocAddress::new(segment_ord as u32, doc);
                        found.push((stream.key().to_vec(), address));
                        taken += 1;
                        break;
                    }
                    doc = postings.advance();
                }
            }
        }
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let cursor = (found.len() >= limit && limit > 0)
            .then(|| found.get(limit - 1).map(|(key, _)| key.clone()))
            .flatten();
        found.truncate(limit);
        let mut rows = Vec::with_capacity(found.len());
        for (rowkey, address) in found {
            let state = self.state_at(&searcher, address, &rowkey)?;
            if state.has_values() {
                rows.push((rowkey, state));
            }
        }
        Ok((rows, cursor))
    }

    /// Up to `n` live rows picked at random (document addresses drawn uniformly; a few extra
    /// draws cover deleted and tombstone-only documents). For `hbidx verify --sample`.
    pub fn sample_rows(&self, n: usize, seed: u64) -> Result<Vec<(Vec<u8>, RowState)>> {
        use rand::{Rng, SeedableRng};
        let searcher = self.reader().searcher();
        let segments = searcher.segment_readers();
        let total: u64 = segments.iter().map(|s| u64::from(s.max_doc())).sum();
        if total == 0 || n == 0 {
            return Ok(Vec::new());
        }
        if (n as u64) * 2 >= total {
            let mut all = self.all_rows()?;
            all.truncate(n);
            return Ok(all);
        }
        let columns = self.rowkey_columns(&searcher)?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(n);
        for _ in 0..n.saturating_mul(4) {
            if out.len() == n {
                break;
            }
            let mut pick = rng.random_range(0..total);
            let mut segment_ord = 0;
            while pick >= u64::from(segments[segment_ord].max_doc()) {
                pick -= u64::from(segments[segment_ord].max_doc());
                segment_ord += 1;
            }
            let doc_id = pick as u32;
            if !seen.insert((segment_ord, doc_id)) {
                continue;
            }
            let segment = &segments[segment_ord];
            if segment
                .alive_bitset()
                .is_some_and(|bits| !bits.is_alive(doc_id))
            {
                continue;
            }
            let Some(rowkey) = columns[segment_ord]
                .as_ref()
                .map(|column| rowkey_at(column, doc_id))
                .transpose()?
                .flatten()
            else {
                continue;
            };
            let address = DocAddress::new(segment_ord as u32, doc_id);
            let state = self.state_at(&searcher, address, &rowkey)?;
            if state.has_values() {
                out.push((rowkey, state));
            }
        }
        Ok(out)
    }

    /// Live rowkeys (rows with at least one visible value) for the region report: all of them
    /// when there are at most `max`, else an evenly spaced sample of about `max` (every k-th
    /// live document in index order), with the exact live count next to it. Reads only the
    /// `_live` postings and the `_rk` fast-field column, never stored documents. Walking the
    /// postings costs ~1 ns a row; reading a rowkey from the column's dictionary costs ~1 µs,
    /// and the rowkeys are kept in memory, so a bounded sample keeps a report over a table of
    /// 100M rows at a fraction of a second and a few MB instead of minutes and gigabytes.
    /// Blocking: call it from a blocking thread.
    pub fn live_rowkeys_sample(&self, max: usize) -> Result<LiveRowkeys> {
        let searcher = self.reader().searcher();
        // Pass 1 counts the live rows, pass 2 reads every `stride`-th one.
        let live = self.walk_live(&searcher, |_, _, _| Ok(()))?;
        let stride = live.div_ceil(max.max(1) as u64).max(1);
        let mut rowkeys = Vec::new();
        self.walk_live(&searcher, |i, _, read| {
            if i % stride == 0
                && let Some(rowkey) = read()?
            {
                rowkeys.push(rowkey);
            }
            Ok(())
        })?;
        Ok(LiveRowkeys { rowkeys, live })
    }

    /// The bytes each covered column takes in the index (its values, names and timestamps in
    /// the rows' `_state`), estimated from at most `max` live rows read evenly across the index
    /// and scaled to all of them: exact for tables of up to `max` rows. Blocking: call it from
    /// a blocking thread.
    pub fn covered_sizes(&self, max: usize) -> Result<Vec<CoveredSize>> {
        let covered = &self.table.covered;
        if covered.is_empty() {
            return Ok(Vec::new());
        }
        let searcher = self.reader().searcher();
        let live = self.walk_live(&searcher, |_, _, _| Ok(()))?;
        let stride = live.div_ceil(max.max(1) as u64).max(1);
        let mut bytes = vec![0u64; covered.len()];
        let mut rows = vec![0u64; covered.len()];
        let mut sampled = 0u64;
        self.walk_live(&searcher, |i, address, _| {
            if i % stride == 0 {
                sampled += 1;
                let state = self.state_at(&searcher, address, b"")?;
                for (n, column) in covered.iter().enumerate() {
                    if let Some(value) = state.value(column) {
                        // The value, its column name and an i64 timestamp (postcard varints
                        // make the real figure a little smaller).
                        bytes[n] += (value.len() + column.len() + 8) as u64;
                        rows[n] += 1;
                    }
                }
            }
            Ok(())
        })?;
        let scale = |sampled_count: u64| {
            if sampled == 0 {
                0
            } else {
                (sampled_count as f64 * live as f64 / sampled as f64).round() as u64
            }
        };
        Ok(covered
            .iter()
            .enumerate()
            .map(|(n, column)| CoveredSize {
                column: column.clone(),
                bytes: scale(bytes[n]),
                rows: scale(rows[n]),
                sampled,
            })
            .collect())
    }

    /// Calls `visit(i, address, read_rowkey)` for the i-th live document over all segments, in
    /// index order, and returns how many there are. `read_rowkey` reads that document's `_rk`.
    fn walk_live(
        &self,
        searcher: &tantivy::Searcher,
        mut visit: impl FnMut(u64, DocAddress, &dyn Fn() -> Result<Option<Vec<u8>>>) -> Result<()>,
    ) -> Result<u64> {
        let term = Term::from_field_text(self.fields.live, "1");
        let mut seen = 0u64;
        for (segment_ord, segment) in searcher.segment_readers().iter().enumerate() {
            let Some(mut postings) = segment
                .inverted_index(self.fields.live)?
                .read_postings(&term, IndexRecordOption::Basic)
                .map_err(tantivy::TantivyError::from)?
            else {
                continue;
            };
            let Some(column) = segment.fast_fields().bytes("_rk")? else {
                continue;
            };
            let alive = segment.alive_bitset();
            let mut doc = postings.doc();
            while doc != tantivy::TERMINATED {
                if alive.is_none_or(|bits| bits.is_alive(doc)) {
                    let address = DocAddress::new(segment_ord as u32, doc);
                    visit(seen, address, &|| rowkey_at(&column, doc))?;
                    seen += 1;
                }
                doc = postings.advance();
            }
        }
        Ok(seen)
    }

    /// The generation of the reader lookups use now: cheap (no segment walk), so the indexer
    /// thread polls it to notice reloads that no commit of its own caused.
    pub fn generation(&self) -> u64 {
        self.reader().searcher().generation().generation_id()
    }

    pub fn stats(&self) -> IndexStats {
        // Walks the `_live` postings of every segment with deletes (tantivy counts a term by its
        // doc frequency only in segments without any): O(rows). The indexer's counts come from
        // `TableIndexWriter::stats` instead, which keeps a running count.
        let searcher = self.reader().searcher();
        let live = TermQuery::new(
            Term::from_field_text(self.fields.live, "1"),
            IndexRecordOption::Basic,
        );
        IndexStats {
            rows: live.count(&searcher).map_or(0, |count| count as u64),
            ..self.sizes_of(&searcher)
        }
    }

    /// Everything [`TableSearcher::stats`] reports but the live rows (left 0), without walking
    /// postings. A segment's files are immutable except its deletes, so each segment is
    /// measured once and its current deletes bitset added.
    pub fn sizes(&self) -> IndexStats {
        self.sizes_of(&self.reader().searcher())
    }

    fn sizes_of(&self, searcher: &tantivy::Searcher) -> IndexStats {
        let mut cache = self
            .segment_bytes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut current = HashMap::with_capacity(searcher.segment_readers().len());
        let mut bytes = 0;
        for segment in searcher.segment_readers() {
            let id = segment.segment_id();
            let size = match cache.get(&id) {
                Some(size) => Some(*size),
                // A failed read counts as nothing this time and is not remembered, so the next
                // call tries again.
                None => segment
                    .space_usage()
                    .ok()
                    .map(|usage| usage.total().get_bytes() - usage.deletes().get_bytes()),
            };
            if let Some(size) = size {
                let deletes = segment
                    .alive_bitset()
                    .map_or(0, |alive| alive.space_usage().get_bytes());
                bytes += size + deletes;
                current.insert(id, size);
            }
        }
        // Only the current segments stay: merged-away ones go.
        *cache = current;
        IndexStats {
            rows: 0,
            docs: searcher.num_docs(),
            segments: searcher.segment_readers().len(),
            bytes,
            generation: searcher.generation().generation_id(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rowkeys_are_hashed_for_logs() {
        // A reversal design: the rowkey is the phone number reversed.
        let rowkey = b"00083100831";
        let shown = rowkey_ref(rowkey);
        assert!(!shown.contains("00083100831") && !shown.contains("13800138000"));
        assert_eq!(
            shown,
            rowkey_ref(rowkey),
            "stable, so log lines of one row match"
        );
        assert_ne!(shown, rowkey_ref(b"00083100832"));
    }

    /// Writer options with one indexing thread: each commit writes exactly one segment.
    fn one_thread() -> WriterOptions {
        WriterOptions {
            threads: 1,
            ..WriterOptions::default()
        }
    }

    /// The example config's `user` table and an empty index of it in a fresh directory.
    fn user_index() -> (
        tempfile::TempDir,
        Arc<TableConfig>,
        TableIndexWriter,
        TableSearcher,
    ) {
        let config =
            hbidx_schema::parse_config(include_str!("../../deploy/config/hbidx.toml")).unwrap();
        let table = Arc::new(config.table("user").unwrap().clone());
        let dir = tempfile::tempdir().unwrap();
        let (writer, searcher) =
            open_table_index(dir.path(), table.clone(), &one_thread()).unwrap();
        (dir, table, writer, searcher)
    }

    fn mutation(table: &TableConfig, key: &str, ts: i64, op: Option<&str>) -> Mutation {
        let ops = match op {
            Some(name) => vec![CellOp::Put {
                column: "info:name".into(),
                ts,
                value: name.as_bytes().to_vec(),
            }],
            None => vec![CellOp::DeleteRow { ts }],
        };
        Mutation {
            table: table.name.clone(),
            rowkey: table.rowkey.encode(key).unwrap(),
            ops,
        }
    }

    /// Paging through `rows_after` with a small limit returns every live row of every segment
    /// once, in rowkey order, and skips deleted rows and tombstone-only documents.
    #[test]
    fn rows_after_pages_through_live_rows_in_rowkey_order() {
        let (_dir, table, mut writer, searcher) = user_index();
        let mut offset = 0;
        let mut expected = std::collections::BTreeSet::new();
        for segment in 0..3 {
            for i in 0..20 {
                offset += 1;
                let key = format!("u{}", segment * 100 + i * 7 % 20);
                let event = mutation(&table, &key, offset, Some("张三"));
                writer.apply(&event, "t", 0, offset).unwrap();
                expected.insert(table.rowkey.encode(&key).unwrap());
            }
            writer.commit().unwrap();
        }
        // A row deleted (a tombstone-only document) and a row updated into a later segment.
        for (key, op) in [("u5", None), ("u107", Some("李四"))] {
            offset += 1;
            let event = mutation(&table, key, offset, op);
            writer.apply(&event, "t", 0, offset).unwrap();
        }
        writer.commit().unwrap();
        expected.remove(&table.rowkey.encode("u5").unwrap());
        let mut seen = Vec::new();
        let mut cursor: Option<Vec<u8>> = None;
        loop {
            let (rows, next) = searcher.rows_after(cursor.as_deref(), 7).unwrap();
            seen.extend(rows.into_iter().map(|(key, _)| key));
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let expected: Vec<Vec<u8>> = expected.into_iter().collect();
        assert_eq!(seen, expected);
    }

    /// A lookup's state reads (covered columns) use built filters but never build one: they run
    /// on the async runtime. The indexer's probes build them.
    #[test]
    fn only_the_indexer_side_builds_rowkey_filters() {
        let (_dir, table, mut writer, searcher) = user_index();
        let event = mutation(&table, "u1", 1, Some("张三"));
        writer.apply(&event, "t", 0, 1).unwrap();
        writer.commit().unwrap();
        let rowkey = table.rowkey.encode("u1").unwrap();
        let found = searcher.kept_rows(std::slice::from_ref(&rowkey)).unwrap();
        assert!(found[0].is_some());
        assert_eq!(searcher.rowkey_filter_stats().filters, 0);
        assert!(searcher.committed_state(&rowkey).unwrap().is_some());
        assert_eq!(searcher.rowkey_filter_stats().filters, 1);
    }

    /// Rows spread over several segments are found through their segments' rowkey filters,
    /// whether a filter was built inline or on its own thread, and rows no segment has are
    /// answered from the filters alone.
    #[test]
    fn rowkey_filters_find_every_row_and_skip_segments_without_it() {
        for inline in [true, false] {
            let (_dir, table, mut writer, searcher) = user_index();
            if !inline {
                searcher.rowkey_filters.set_inline_max_docs(0);
            }
            let mut offset = 0;
            // Four segments of 50 rows each.
            for segment in 0..4 {
                for i in 0..50 {
                    offset += 1;
                    let key = format!("u{segment}-{i}");
                    let event = mutation(&table, &key, offset, Some("张三"));
                    writer.apply(&event, "t", 0, offset).unwrap();
                }
                writer.commit().unwrap();
            }
            let rowkey = |key: &str| table.rowkey.encode(key).unwrap();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            loop {
                // Every row is found in its segment (a filter never hides a row, built or not).
                for segment in 0..4 {
                    for i in [0, 17, 49] {
                        let state = searcher
                            .committed_state(&rowkey(&format!("u{segment}-{i}")))
                            .unwrap();
                        assert!(state.is_some(), "u{segment}-{i}");
                    }
                }
                assert!(
                    searcher
                        .committed_state(&rowkey("nobody"))
                        .unwrap()
                        .is_none()
                );
                if searcher.rowkey_filter_stats().filters == 4 {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "filters built: {:?}",
                    searcher.rowkey_filter_stats()
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert!(searcher.rowkey_filter_stats().bytes > 0);
            // An update of a row of the first segment replaces its document (the probe found
            // it behind the filters): still 200 documents and rows.
            offset += 1;
            let event = mutation(&table, "u0-3", offset, Some("李四"));
            writer.apply(&event, "t", 0, offset).unwrap();
            writer.commit().unwrap();
            let stats = searcher.stats();
            assert_eq!((stats.rows, stats.docs), (200, 200), "inline: {inline}");
            // Merged into one segment, the four filters give way to the merged segment's.
            assert!(writer.compact(u64::MAX).unwrap());
            while searcher.stats().segments > 1 {
                assert!(std::time::Instant::now() < deadline);
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert!(
                searcher
                    .committed_state(&rowkey("u3-49"))
                    .unwrap()
                    .is_some()
            );
            while searcher.rowkey_filter_stats().filters != 1 {
                assert!(std::time::Instant::now() < deadline);
                assert!(searcher.committed_state(&rowkey("u2-2")).unwrap().is_some());
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }

    #[test]
    fn the_writer_counts_live_rows_as_it_goes_and_measures_only_changed_segments() {
        let (dir, table, mut writer, searcher) = user_index();
        let options = one_thread();
        let mut offset = 0;
        let mut apply = |writer: &mut TableIndexWriter, key: &str, op: Option<&str>| {
            offset += 1;
            let event = mutation(&table, key, offset, op);
            writer.apply(&event, "t", 0, offset).unwrap();
        };
        for key in ["u1", "u2", "u3"] {
            apply(&mut writer, key, Some("张三"));
        }
        // An update of a row added in the same batch is still one row.
        apply(&mut writer, "u3", Some("张三丰"));
        writer.commit().unwrap();
        assert_eq!(writer.stats().rows, 3);
        assert_eq!(searcher.stats().rows, 3, "the walk agrees");
        // Mark the remembered size of the first segment: if the next call measured it again,
        // the mark would be gone.
        {
            let mut cache = searcher.segment_bytes.lock().unwrap();
            assert_eq!(cache.len(), 1);
            *cache.values_mut().next().unwrap() += 1_000_000;
        }
        let marked = writer.stats().bytes;
        assert!(
            marked > 1_000_000,
            "an unchanged segment is not measured again"
        );

        // The running count is what the writer reports: mark it too. A walk would lose the mark.
        writer.rows += 1000;
        apply(&mut writer, "u4", Some("李四"));
        apply(&mut writer, "u5", Some("李四"));
        writer.commit().unwrap();
        let stats = writer.stats();
        assert_eq!((stats.rows, stats.segments), (1005, 2));
        assert!(stats.bytes > marked, "only the new segment was added");
        writer.rows -= 1000;

        // Deleting u1 marks its document in the first segment deleted (its deletes bitset is
        // added, the rest is still remembered) and leaves a tombstone-only document, which is
        // not a row.
        apply(&mut writer, "u1", None);
        // A rolled-back change is not counted.
        writer.commit().unwrap();
        apply(&mut writer, "u2", None);
        writer.rollback().unwrap();
        let stats = writer.stats();
        assert_eq!((stats.rows, stats.docs), (4, 5));
        assert!(
            stats.bytes > marked,
            "the first segment's size is still the marked one"
        );
        assert_eq!(searcher.stats().rows, 4, "the walk agrees");
        // A row deleted and put again is live again.
        apply(&mut writer, "u1", Some("王五"));
        writer.commit().unwrap();
        assert_eq!(writer.stats().rows, 5);
        assert_eq!(searcher.stats().rows, 5);
        // Compacted into one segment, the merged-away ones are forgotten, and the size is the
        // real one again.
        assert!(writer.compact(u64::MAX).unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while writer.stats().segments > 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let stats = writer.stats();
        assert_eq!((stats.segments, stats.rows), (1, 5));
        assert!(stats.bytes < 1_000_000);
        assert_eq!(searcher.segment_bytes.lock().unwrap().len(), 1);
        // Clearing empties the count with the index; a reopened writer counts from the index.
        writer.clear().unwrap();
        assert_eq!(writer.stats().rows, 0);
        apply(&mut writer, "u6", Some("赵六"));
        writer.commit().unwrap();
        drop(writer);
        let (writer, _) = open_table_index(dir.path(), table.clone(), &options).unwrap();
        assert_eq!(writer.stats().rows, 1);
    }
}
