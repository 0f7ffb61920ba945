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
//! - `_state`: the row's [`RowState`](crate::state::RowState), stored (see `state.rs` for why):
//!   the latest version of every indexed column and of every covered column, so a lookup that
//!   wants only those is answered from the index ([`TableSearcher::kept_rows`]).
//! - `_live`: [`LIVE_MARK`] on documents of rows with a visible value (the others only keep a
//!   deleted row's tombstones), and [`DELETE_MARK`] on documents whose state remembers a delete
//!   (row, family or cell tombstone), which a store reindex copies over by walking its postings.
//! - `_covered.{column}`: one per covered column, neither indexed nor stored: it only makes the
//!   schema say which columns `_state` covers, so changing `covered` is a schema change and the
//!   server rebuilds the index, which fills the new columns in.
//! - one raw field per indexed field with its normalised value, plus kind-specific sub-fields
//!   (`__tail`, `__gram`, `__py`, `__ini`) built by `analysis/`. A phone field's own field is declared
//!   and left empty: its reversed digits in `__tail` answer exact lookups too.

use std::path::Path;
use std::sync::Arc;

use hbidx_schema::config::{ClusterConfig, MemoryBudget, MemoryPart, TableConfig};
use tantivy::directory::MmapDirectory;
use tantivy::{Index, IndexWriter, ReloadPolicy, TantivyDocument};

use crate::checkpoint::{Checkpoint, PayloadFlags};
use crate::error::{IndexerError, Result};

/// The `_live` term of a document whose row has a visible value.
const LIVE_MARK: &str = "1";
/// The `_live` term of a document whose state remembers a delete. Documents written before the
/// mark existed lack it; an index says in its commit payload whether all of its documents have
/// it ([`PayloadFlags::delete_marks`]).
const DELETE_MARK: &str = "d";

mod lookup;
mod merge_policy;
mod rowkey_cache;
mod scan;
mod schema;
mod searcher;
mod stats;
#[cfg(test)]
mod tests;
mod writer;

pub use merge_policy::{MERGE_BYTES_PER_DOC, MergeBudget, MergeBudgets};
pub use rowkey_cache::{DEFAULT_ROWKEY_CACHE_BYTES, RowkeyCacheStats};
pub use scan::{CoveredSize, LiveRowkeys, RowsPage};
pub use searcher::{LookupPage, TableSearcher};
pub use stats::IndexStats;
pub use writer::{
    ApplyOutcome, Compaction, CompactionScope, TableIndexWriter, writer_heap_reserved,
};

use schema::build_schema;
use writer::HeapReservation;

/// Opens (or creates) the index of `table` under `dir`. The returned searcher and writer share
/// one `Index`. Only one process may hold the writer of a directory (tantivy takes a lock).
pub fn open_table_index(
    dir: &Path,
    table: Arc<TableConfig>,
    options: &WriterOptions,
) -> Result<(TableIndexWriter, TableSearcher)> {
    // tantivy syncs the files it writes in the directory and the directory itself at each
    // commit, never the directory's own entry in its parent: without the parents' syncs a power
    // cut could take a committed index's directory, files and all.
    hbidx_store::durable::create_dir_all(dir, None).map_err(|err| IndexerError::Directory {
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
    let exists = Index::exists(&directory).map_err(tantivy::TantivyError::from)?;
    let index = if exists {
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
    let payload = index.load_metas()?.payload;
    let checkpoint = Checkpoint::from_payload(payload.as_deref())?;
    // An index this writer creates (or finds without a segment: created, never committed) has
    // every document marked; one written before marks keeps its unmarked documents until a
    // reindex replaces it.
    let flags = PayloadFlags::of(payload.as_deref());
    let delete_marks =
        !exists || flags.delete_marks || index.searchable_segment_metas()?.is_empty();
    let writer: IndexWriter<TantivyDocument> =
        index.writer_with_num_threads(options.threads, options.memory_budget_bytes)?;
    // hbidx starts every merge itself, within the table's merge budget (`merge_policy`).
    writer.set_merge_policy(Box::new(tantivy::indexer::NoMergePolicy));
    let heap = HeapReservation::new(options.memory_budget_bytes as u64);
    let reader = index
        .reader_builder()
        .reload_policy(ReloadPolicy::Manual)
        .try_into()?;
    let fields = Arc::new(fields);
    let searcher = TableSearcher::new(
        table.clone(),
        reader,
        fields.clone(),
        options.rowkey_cache_bytes,
        options.merge_max_docs,
    );
    // The count the last commit wrote; walking the postings instead grows with the table.
    let rows = match flags.rows {
        Some(rows) => rows,
        None => searcher.stats().rows,
    };
    let own_range = options
        .cluster
        .as_ref()
        .and_then(|cluster| cluster.own_range(&table.name));
    let merge_budget = options
        .merge_budgets
        .for_table(&table.name, options.merge_max_docs);
    let writer = TableIndexWriter::new(
        table,
        writer,
        fields,
        searcher.clone(),
        checkpoint,
        rows,
        heap,
    )
    .with_delete_marks(delete_marks)
    .with_own_range(own_range)
    .with_merge_budget(merge_budget);
    Ok((writer, searcher))
}

/// The checkpoint committed in the index under `dir`, whatever schema it was built with: where
/// a rebuild of an index with an outdated schema resumes its source.
pub fn committed_checkpoint(dir: &Path) -> Result<Checkpoint> {
    let index = Index::open_in_dir(dir)?;
    Checkpoint::from_payload(index.load_metas()?.payload.as_deref())
}

/// Tuning of the tantivy writer.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    pub threads: usize,
    pub memory_budget_bytes: usize,
    /// Budget of the searcher's cache of decoded rowkeys
    /// ([`RowkeyCache`](rowkey_cache::RowkeyCache)), in bytes.
    pub rowkey_cache_bytes: u64,
    /// `[cluster]` with this instance's identity: each writer then indexes only its table's own
    /// shard range ([`TableIndexWriter::own_range`]). `None`: every row.
    pub cluster: Option<Arc<ClusterConfig>>,
    /// The most documents a table's merges write at once (a size level's and the idle
    /// compaction's, of the live writer and a reindex's shadow together): a merge holds
    /// [`MERGE_BYTES_PER_DOC`] bytes of heap per document, so this is the table's share of
    /// `[memory] index_merges_mb` over that.
    pub merge_max_docs: u64,
    /// Each table's merge budget, shared by the writers opened with clones of these options.
    pub merge_budgets: MergeBudgets,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            threads: 2,
            memory_budget_bytes: 256 << 20,
            rowkey_cache_bytes: DEFAULT_ROWKEY_CACHE_BYTES,
            cluster: None,
            merge_max_docs: MemoryBudget::default().bytes(MemoryPart::IndexMerges)
                / MERGE_BYTES_PER_DOC,
            merge_budgets: MergeBudgets::default(),
        }
    }
}

/// How a rowkey appears in logs and errors: a hash, never the bytes. Some rowkey designs are
/// built from the phone itself (reversal), and logs must not carry phone numbers.
pub fn rowkey_ref(rowkey: &[u8]) -> String {
    format!("#{:016x}", xxhash_rust::xxh3::xxh3_64(rowkey))
}
