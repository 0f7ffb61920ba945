//! The bounded cache of decoded `_rk` dictionary entries that turns a lookup's winning term
//! ordinals back into rowkeys, with its counters. Separate from the searcher because its
//! weighing, chunking and hit accounting are a concern of their own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tantivy::columnar::BytesColumn;
use tantivy::index::SegmentId;

use crate::error::Result;

use super::searcher::TableSearcher;

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
pub(super) type RowkeyCache =
    quick_cache::sync::Cache<(SegmentId, u64), Arc<Vec<Vec<u8>>>, ChunkWeight>;

#[derive(Clone)]
pub(super) struct ChunkWeight;

impl quick_cache::Weighter<(SegmentId, u64), Arc<Vec<Vec<u8>>>> for ChunkWeight {
    fn weight(&self, _key: &(SegmentId, u64), chunk: &Arc<Vec<Vec<u8>>>) -> u64 {
        // Heap bytes of the keys plus the per-entry overhead (vector headers, the map slot).
        chunk.iter().map(|key| key.len() as u64 + 24).sum::<u64>() + 64
    }
}

pub(super) fn rowkey_cache(budget_bytes: u64) -> RowkeyCache {
    // quick_cache sizes its table from an item estimate: one chunk of 15-byte rowkeys (the
    // example design) weighs about 2.6 KB.
    let items = (budget_bytes / 2_600).max(16) as usize;
    RowkeyCache::with_weighter(items, budget_bytes.max(1), ChunkWeight)
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

/// Reads of the rowkey cache and the misses among them (chunks decoded).
#[derive(Debug, Default)]
pub(super) struct RowkeyCacheCounts {
    reads: AtomicU64,
    misses: AtomicU64,
}

impl TableSearcher {
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
    pub(super) fn rowkey_term(
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
}
