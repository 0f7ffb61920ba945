//! The read side of a table index: [`TableSearcher`], its lookups and the committed state of
//! single rows. Walks over the whole index, sizes and the rowkey cache have modules of their own.

use std::collections::HashMap;
use std::sync::Arc;

use hbidx_schema::config::TableConfig;
use tantivy::columnar::BytesColumn;
use tantivy::index::SegmentId;
use tantivy::schema::{IndexRecordOption, Value};
use tantivy::{DocAddress, DocSet, IndexReader, TantivyDocument, Term};

use crate::error::{IndexerError, Result};
use crate::state::RowState;

use super::rowkey_cache::{RowkeyCache, RowkeyCacheCounts, rowkey_cache};
use super::rowkey_ref;
use super::schema::Fields;

/// A page of lookup results in rowkey order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LookupPage {
    pub rowkeys: Vec<Vec<u8>>,
    /// There are more matches after the last rowkey of this page.
    pub has_more: bool,
    /// Documents the lookup walked (its narrowest clause's, deleted ones included): what it
    /// cost, at most its `max_matches`.
    pub walked: u64,
}

/// The read side of a table index. Cloning is cheap; every clone sees each commit.
#[derive(Clone)]
pub struct TableSearcher {
    pub(super) table: Arc<TableConfig>,
    /// Shared by every clone, so that a reindex can swap the index under all of them at once
    /// ([`TableSearcher::adopt`]).
    reader: Arc<std::sync::RwLock<IndexReader>>,
    pub(super) fields: Arc<Fields>,
    /// The `_rk` columns of the segments last searched ([`TableSearcher::rowkey_columns`]).
    /// Keyed by segment ids, which are unique across indexes, so a reindex swap can't hit a
    /// stale entry.
    rowkey_columns: Arc<std::sync::Mutex<Option<RowkeyColumns>>>,
    pub(super) rowkey_cache: Arc<RowkeyCache>,
    pub(super) rowkey_counts: Arc<RowkeyCacheCounts>,
    /// Each segment's size on disk without its deletes file ([`TableSearcher::sizes`]).
    pub(super) segment_bytes: Arc<std::sync::Mutex<HashMap<SegmentId, u64>>>,
    /// Membership filters of each segment's rowkeys, for [`TableSearcher::committed_state`].
    pub(super) rowkey_filters: Arc<crate::filters::RowkeyFilters>,
    /// The most documents one merge writes ([`super::WriterOptions::merge_max_docs`]).
    merge_max_docs: u64,
}

/// Segment ids and their `_rk` columns, in the searcher's segment order.
type RowkeyColumns = (Vec<SegmentId>, Arc<Vec<Option<BytesColumn>>>);

impl TableSearcher {
    /// A searcher over `reader`, with empty caches and a rowkey cache of `rowkey_cache_bytes`.
    pub(super) fn new(
        table: Arc<TableConfig>,
        reader: IndexReader,
        fields: Arc<Fields>,
        rowkey_cache_bytes: u64,
        merge_max_docs: u64,
    ) -> Self {
        Self {
            table,
            reader: Arc::new(std::sync::RwLock::new(reader)),
            fields,
            rowkey_columns: Arc::default(),
            rowkey_cache: Arc::new(rowkey_cache(rowkey_cache_bytes)),
            rowkey_counts: Arc::default(),
            segment_bytes: Arc::default(),
            rowkey_filters: Arc::default(),
            merge_max_docs,
        }
    }

    pub fn table(&self) -> &Arc<TableConfig> {
        &self.table
    }

    pub(super) fn reader(&self) -> IndexReader {
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

    pub(super) fn state_at(
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

    /// Whether the idle compaction has work here: recent segments it would merge
    /// ([`CompactionScope::Recent`](super::CompactionScope::Recent)) within the merge cap
    /// ([`super::WriterOptions::merge_max_docs`]). From the index's committed segment list, as
    /// the compaction itself decides: the reader is reloaded at commits, not when one of
    /// tantivy's own merges ends, so its segments can be ones merged away since (and would say
    /// "pending" until the next commit).
    pub fn compaction_pending(&self) -> bool {
        let Ok(metas) = self.reader().searcher().index().searchable_segment_metas() else {
            return false;
        };
        let sizes: Vec<super::writer::SegmentSize> = metas
            .iter()
            .map(|meta| super::writer::SegmentSize {
                id: meta.id(),
                docs: meta.max_doc(),
                live: meta.num_docs(),
            })
            .collect();
        super::writer::recent_segments(&sizes, self.merge_max_docs).len() >= 2
    }

    /// How many segments have a rowkey filter, and their bytes.
    pub fn rowkey_filter_stats(&self) -> crate::filters::FilterStats {
        self.rowkey_filters.stats()
    }

    /// The `_rk` fast-field column of each segment of `searcher`, in segment order. Opening a
    /// column walks the segment's columnar index, so the columns are opened once per set of
    /// segments (a reload that only changes deletes keeps them) rather than once per lookup.
    pub(super) fn rowkey_columns(
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
}
