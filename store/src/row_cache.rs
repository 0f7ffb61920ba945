//! A bounded cache of recently read rows (their encoded bytes, as stored) in front of a table's
//! fjall keyspace.
//!
//! Why: without it a lookup's row read is a descent of fjall's memtable skiplist, a cache miss
//! per level and several percent of a lookup's server CPU; a hash probe is a few misses. On the
//! order of 10% more lookups/s (docs/design/row-cache.md). HBase keeps a BlockCache and
//! PostgreSQL its shared buffers for the same reason.
//!
//! Consistency with writers. The cache is only filled by reads and only emptied by writes, and
//! a read that raced a write must not put the older row back after the write removed it. Each
//! key maps to one of [`STRIPES`] stripes, each holding a generation under a mutex:
//! - a reader takes the stripe's generation *before* reading the keyspace, and inserts what it
//!   read only if the generation is unchanged (checked under the stripe mutex);
//! - a writer, *after* its batch is committed (visible to reads), bumps the generation and
//!   removes the key, under the same mutex.
//!
//! A reader that read before the commit either finds the generation bumped (no insert) or
//! inserts before the writer's removal (which then removes it). A reader that took the
//! generation after the bump reads after the commit. Hits take no stripe mutex, only
//! quick_cache's shard lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use fjall::Slice;

/// Generation stripes per table: enough that concurrent writes rarely stop an unrelated read
/// from caching what it read.
const STRIPES: usize = 64;

/// Budget of each table's row cache.
pub const DEFAULT_ROW_CACHE_BYTES: u64 = 64 << 20;

#[derive(Clone)]
struct RowWeight;

impl quick_cache::Weighter<Vec<u8>, Slice> for RowWeight {
    fn weight(&self, key: &Vec<u8>, row: &Slice) -> u64 {
        // The key's heap bytes, the row's, and the per-entry overhead (vector header, the
        // slice's shared header, the map slot).
        key.len() as u64 + row.len() as u64 + 96
    }
}

/// Hits and misses since open, and what the cache holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowCacheStats {
    pub hits: u64,
    pub misses: u64,
    pub entries: u64,
    pub bytes: u64,
    pub budget: u64,
}

pub(crate) struct RowCache {
    rows: quick_cache::sync::Cache<Vec<u8>, Slice, RowWeight>,
    generations: Box<[Mutex<u64>]>,
    budget: u64,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl RowCache {
    pub(crate) fn new(budget_bytes: u64) -> Self {
        // quick_cache sizes its table from an item estimate; a row of the example table weighs
        // ~350 bytes with the overhead.
        let items = (budget_bytes / 350).max(16) as usize;
        Self {
            rows: quick_cache::sync::Cache::with_weighter(items, budget_bytes.max(1), RowWeight),
            generations: (0..STRIPES).map(|_| Mutex::new(0)).collect(),
            budget: budget_bytes,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn stripe(&self, rowkey: &[u8]) -> MutexGuard<'_, u64> {
        let hash = xxhash_rust::xxh3::xxh3_64(rowkey);
        // A generation is a plain counter: a panic can't leave it half-written.
        self.generations[(hash % STRIPES as u64) as usize]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The row of `rowkey`: from the cache, else from `read` (the keyspace), cached when no
    /// write to the key's stripe committed in between.
    pub(crate) fn get_or_read<E>(
        &self,
        rowkey: &[u8],
        read: impl FnOnce() -> Result<Option<Slice>, E>,
    ) -> Result<Option<Slice>, E> {
        if let Some(row) = self.rows.get(rowkey) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(row));
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let generation = *self.stripe(rowkey);
        let row = read()?;
        if let Some(row) = &row {
            let current = self.stripe(rowkey);
            if *current == generation {
                // A copy of its own: a row read from a table file is a view into the whole
                // decompressed block it came from, and caching the view would keep the block
                // alive (KiBs for a row of a few hundred bytes) outside any budget: hundreds
                // of MB of anonymous memory at 10M rows, uncounted by the weight below.
                self.rows
                    .insert(rowkey.to_vec(), Slice::new(row.as_slice()));
            }
        }
        Ok(row)
    }

    /// Called once a write of `rowkey` is committed: no read from before it stays cached.
    pub(crate) fn invalidate(&self, rowkey: &[u8]) {
        let mut generation = self.stripe(rowkey);
        *generation = generation.wrapping_add(1);
        self.rows.remove(rowkey);
    }

    pub(crate) fn stats(&self) -> RowCacheStats {
        RowCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: self.rows.len() as u64,
            bytes: self.rows.weight(),
            budget: self.budget,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(text: &str) -> Slice {
        Slice::from(text.as_bytes())
    }

    fn read(value: &str) -> impl FnOnce() -> Result<Option<Slice>, ()> + use<> {
        let value = slice(value);
        move || Ok(Some(value))
    }

    #[test]
    fn reads_are_cached_and_writes_remove_them() {
        let cache = RowCache::new(1 << 20);
        assert_eq!(cache.get_or_read(b"k", read("v1")), Ok(Some(slice("v1"))));
        // Cached: the keyspace isn't read again.
        assert_eq!(
            cache.get_or_read(b"k", || -> Result<Option<Slice>, ()> {
                panic!("read again")
            }),
            Ok(Some(slice("v1")))
        );
        cache.invalidate(b"k");
        assert_eq!(cache.get_or_read(b"k", read("v2")), Ok(Some(slice("v2"))));
        // Missing rows are not cached.
        assert_eq!(cache.get_or_read(b"gone", || Ok::<_, ()>(None)), Ok(None));
        assert_eq!(
            cache.get_or_read(b"gone", read("new")),
            Ok(Some(slice("new")))
        );
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.entries), (1, 4, 2));
    }

    /// A read that started before a write and finishes after it must not cache the old row.
    #[test]
    fn a_read_racing_a_write_does_not_cache_the_old_row() {
        let cache = RowCache::new(1 << 20);
        let old = cache.get_or_read(b"k", || {
            // The write commits and invalidates while this read is in flight.
            cache.invalidate(b"k");
            Ok::<_, ()>(Some(slice("old")))
        });
        assert_eq!(old, Ok(Some(slice("old"))));
        assert_eq!(
            cache.get_or_read(b"k", read("new")),
            Ok(Some(slice("new"))),
            "the row read before the write was cached"
        );
    }

    #[test]
    fn a_cached_row_keeps_no_block_alive() {
        // What fjall returns for a row read from a table file: a view into its decompressed
        // block, sharing the block's allocation.
        let block = byteview::ByteView::from(vec![7u8; 64 << 10]);
        let row = Slice::from(block.slice(1000..1300));
        assert_eq!(block.ref_count(), 2, "the view shares the block");
        let cache = RowCache::new(1 << 20);
        let read = cache_row(&cache, row);
        assert_eq!(read.len(), 300);
        drop(read);
        assert_eq!(
            block.ref_count(),
            1,
            "the cache holds a view of the whole block for a 300-byte row"
        );
        assert_eq!(cache.stats().entries, 1);
    }

    /// Reads `row` through `cache` (a miss, which caches it; what it returns is dropped), then
    /// returns what a second read finds in the cache.
    fn cache_row(cache: &RowCache, row: Slice) -> Slice {
        let _ = cache.get_or_read(b"k", move || Ok::<_, ()>(Some(row)));
        cache
            .get_or_read(b"k", || -> Result<Option<Slice>, ()> {
                panic!("read again")
            })
            .unwrap()
            .unwrap()
    }

    #[test]
    fn the_budget_bounds_the_cache() {
        let cache = RowCache::new(64 << 10);
        for i in 0..10_000u32 {
            let _ = cache.get_or_read(&i.to_be_bytes(), || {
                Ok::<_, ()>(Some(Slice::from(vec![7u8; 200])))
            });
        }
        let stats = cache.stats();
        assert!(stats.bytes <= 64 << 10, "{stats:?}");
        assert!(stats.entries > 0 && stats.entries < 10_000, "{stats:?}");
    }
}
