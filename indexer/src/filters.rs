//! Per-segment membership filters of the `_rk` (rowkey) terms: HBase's ROW bloom filter, one per
//! immutable segment instead of one per HFile.
//!
//! Every event whose row is not in the writer's overlay asks the committed index for the row's
//! state, and that probe looks the rowkey up in every segment's term dictionary. A bulk load
//! mostly writes rows no segment has, and an update finds its row in one segment, so almost all
//! of those lookups miss; their cost grows with the segment count, which grows with the table
//! (a log merge policy keeps a few segments per size level). A filter answers "certainly not
//! here" from one cache line for ~99% of them.
//!
//! Filters are built from a segment's `_rk` dictionary the first time the segment is probed:
//! inline for small segments (a fresh commit's, microseconds to milliseconds), on a thread of
//! their own for big ones (a merge's output, about a second per 10M rows), during which the
//! segment is probed directly. Segments are immutable and their ids unique, so a filter never
//! goes stale; deleted documents' terms stay in the dictionary until a merge drops them, which
//! only costs a false positive. Filters of merged-away segments are dropped when the searcher no
//! longer lists them. About 1.2 bytes a row (1% false positives).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tantivy::SegmentReader;
use tantivy::index::SegmentId;
use tantivy::schema::Field;

/// Segments with more documents than this get their filter built on another thread.
const INLINE_BUILD_MAX_DOCS: u32 = 200_000;

/// The false positive rate: a probe of a segment that doesn't hold the row is answered by the
/// term dictionary this often.
const FALSE_POSITIVES: f64 = 0.01;

type Filter = fastbloom::BloomFilter;

enum Slot {
    Ready(Arc<Filter>),
    /// Being built on another thread; probe the segment directly meanwhile.
    Building,
}

/// The filters of one table's segments, shared by every clone of its searcher.
pub(crate) struct RowkeyFilters {
    slots: Mutex<HashMap<SegmentId, Slot>>,
    /// [`INLINE_BUILD_MAX_DOCS`]; tests lower it to take the other thread's path.
    inline_max_docs: AtomicU32,
}

impl Default for RowkeyFilters {
    fn default() -> Self {
        Self {
            slots: Mutex::default(),
            inline_max_docs: AtomicU32::new(INLINE_BUILD_MAX_DOCS),
        }
    }
}

/// What [`RowkeyFilters::stats`] reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FilterStats {
    pub filters: usize,
    pub bytes: u64,
}

impl RowkeyFilters {
    /// The filters of `segments`, in their order (`None`: probe that segment directly). With
    /// `build_missing`, missing ones are built (inline or on their own thread); without it, as on the
    /// lookup path, which runs on the async runtime, only those already built are used.
    pub(crate) fn for_segments(
        self: &Arc<Self>,
        segments: &[SegmentReader],
        field: Field,
        build_missing: bool,
    ) -> Vec<Option<Arc<Filter>>> {
        let inline_max_docs = self.inline_max_docs.load(Ordering::Relaxed);
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.len() > segments.len() {
            // Merged-away segments: their filters go with them.
            slots.retain(|id, _| segments.iter().any(|s| s.segment_id() == *id));
        }
        segments
            .iter()
            .map(|segment| {
                let id = segment.segment_id();
                match slots.get(&id) {
                    Some(Slot::Ready(filter)) => Some(filter.clone()),
                    Some(Slot::Building) => None,
                    None if !build_missing => None,
                    None if segment.max_doc() <= inline_max_docs => match build(segment, field) {
                        Some(filter) => {
                            let filter = Arc::new(filter);
                            slots.insert(id, Slot::Ready(filter.clone()));
                            Some(filter)
                        }
                        None => None,
                    },
                    None => {
                        slots.insert(id, Slot::Building);
                        let filters = self.clone();
                        let segment = segment.clone();
                        let spawned = std::thread::Builder::new()
                            .name("hbidx-rk-filter".into())
                            .spawn(move || {
                                let started = std::time::Instant::now();
                                let built = build(&segment, field);
                                tracing::debug!(
                                    docs = segment.max_doc(),
                                    ms = started.elapsed().as_millis() as u64,
                                    "built a segment's rowkey filter"
                                );
                                let mut slots =
                                    filters.slots.lock().unwrap_or_else(|p| p.into_inner());
                                match built {
                                    Some(filter) => {
                                        slots.insert(id, Slot::Ready(Arc::new(filter)));
                                    }
                                    // Unreadable now: the next probe tries again.
                                    None => {
                                        slots.remove(&id);
                                    }
                                }
                            });
                        if spawned.is_err() {
                            slots.remove(&id);
                        }
                        None
                    }
                }
            })
            .collect()
    }

    #[cfg(test)]
    pub(crate) fn set_inline_max_docs(&self, docs: u32) {
        self.inline_max_docs.store(docs, Ordering::Relaxed);
    }

    pub fn stats(&self) -> FilterStats {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots
            .values()
            .fold(FilterStats::default(), |stats, slot| match slot {
                Slot::Ready(filter) => FilterStats {
                    filters: stats.filters + 1,
                    bytes: stats.bytes + filter.num_bits() as u64 / 8,
                },
                Slot::Building => stats,
            })
    }
}

/// A filter of every `_rk` term of `segment`; `None` if its dictionary can't be read (the
/// segment is then probed directly, which is always correct).
///
/// The terms come from the `_rk` fast field's dictionary, which holds the same rowkeys as the
/// inverted index's (every document's, deleted ones too) in a delta-coded sstable: streaming it
/// is several times cheaper than walking the inverted index's FST, which took ~0.7 µs a term, 7 s
/// of a core for a 10M-row segment.
fn build(segment: &SegmentReader, field: Field) -> Option<Filter> {
    let name = segment.schema().get_field_name(field);
    let column = segment.fast_fields().bytes(name).ok()??;
    let dictionary = column.dictionary();
    let mut filter =
        Filter::with_false_pos(FALSE_POSITIVES).expected_items(dictionary.num_terms().max(1));
    let mut stream = dictionary.stream().ok()?;
    while stream.advance() {
        filter.insert(stream.key());
    }
    Some(filter)
}

/// Whether `rowkey` may have a document in the segment whose filter this is.
pub(crate) fn may_contain(filter: &Filter, rowkey: &[u8]) -> bool {
    filter.contains(rowkey)
}
