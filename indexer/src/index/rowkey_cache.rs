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
pub(super) type RowkeyCache = quick_cache::sync::Cache<(SegmentId, u64), Arc<Chunk>, ChunkWeight>;

/// The rowkeys of one chunk, back to back in one buffer: a table far bigger than the cache
/// misses on nearly every lookup, and a chunk of 64 separately allocated keys made a miss's
/// allocations (and their frees at eviction) a tenth of a lookup's CPU.
pub(super) struct Chunk {
    bytes: Box<[u8]>,
    /// Where each rowkey ends in `bytes`; the first starts at 0.
    ends: Box<[u32]>,
}

impl Chunk {
    /// `ends` as offsets of u32: 64 rowkeys of HBase's at most 32 KiB each are far below 4 GiB,
    /// so the error only guards against a corrupt dictionary.
    fn new(bytes: Vec<u8>, ends: &[usize]) -> Result<Self> {
        let ends = ends
            .iter()
            .map(|&end| u32::try_from(end))
            .collect::<std::result::Result<Box<[u32]>, _>>()
            .map_err(|_| {
                tantivy::TantivyError::InternalError("a rowkey chunk over 4 GiB".into())
            })?;
        Ok(Self {
            bytes: bytes.into_boxed_slice(),
            ends,
        })
    }

    fn get(&self, index: usize) -> Option<&[u8]> {
        let end = *self.ends.get(index)? as usize;
        let start = match index {
            0 => 0,
            _ => self.ends[index - 1] as usize,
        };
        self.bytes.get(start..end)
    }
}

#[derive(Clone)]
pub(super) struct ChunkWeight;

impl quick_cache::Weighter<(SegmentId, u64), Arc<Chunk>> for ChunkWeight {
    fn weight(&self, _key: &(SegmentId, u64), chunk: &Arc<Chunk>) -> u64 {
        // Heap bytes of the keys and their ends plus the entry's overhead (the Arc, the
        // boxes, the map slot).
        (chunk.bytes.len() + chunk.ends.len() * 4) as u64 + 96
    }
}

pub(super) fn rowkey_cache(budget_bytes: u64) -> RowkeyCache {
    // quick_cache sizes its table from an item estimate: one chunk of 15-byte rowkeys (the
    // example design) weighs about 1.3 KB.
    let items = (budget_bytes / 1_300).max(16) as usize;
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
        let entry =
            self.rowkey_cache
                .get_or_insert_with(&(segment, chunk), || -> Result<Arc<Chunk>> {
                    // Counted here, where a chunk is really decoded: quick_cache's own `stats`
                    // count a miss twice in `get_or_insert_with` (the probe and the guard).
                    self.rowkey_counts.misses.fetch_add(1, Ordering::Relaxed);
                    let dictionary = column.dictionary();
                    let start = chunk * ROWKEY_CHUNK;
                    let end = (start + ROWKEY_CHUNK).min(dictionary.num_terms() as u64);
                    let mut ords = [0u64; ROWKEY_CHUNK as usize];
                    let ords = &mut ords[..(end - start) as usize];
                    for (slot, ord) in ords.iter_mut().zip(start..end) {
                        *slot = ord;
                    }
                    let mut bytes = Vec::with_capacity(ords.len() * 24);
                    let mut ends = Vec::with_capacity(ords.len());
                    dictionary
                        .sorted_ords_to_term_cb(ords, |key| {
                            bytes.extend_from_slice(key);
                            ends.push(bytes.len());
                        })
                        .map_err(tantivy::TantivyError::from)?;
                    Chunk::new(bytes, &ends).map(Arc::new)
                })?;
        Ok(entry
            .get((ord - chunk * ROWKEY_CHUNK) as usize)
            .map(<[u8]>::to_vec))
    }
}

#[cfg(test)]
mod tests {
    use super::Chunk;

    #[test]
    fn a_chunk_returns_each_rowkey_whole() {
        let keys: [&[u8]; 4] = [b"a", b"", b"0123456789abcdef", b"\x00\xff"];
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        for key in keys {
            bytes.extend_from_slice(key);
            ends.push(bytes.len());
        }
        let chunk = Chunk::new(bytes, &ends).unwrap();
        for (index, key) in keys.iter().enumerate() {
            assert_eq!(chunk.get(index), Some(*key), "rowkey {index}");
        }
        assert_eq!(chunk.get(keys.len()), None);
    }
}
