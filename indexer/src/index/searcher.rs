//! The read side of a table index: [`TableSearcher`], its lookups and the committed state of
//! single rows. Walks over the whole index, sizes and the rowkey cache have modules of their own.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;

use hbidx_schema::config::TableConfig;
use tantivy::columnar::BytesColumn;
use tantivy::index::SegmentId;
use tantivy::query::{BooleanQuery, EnableScoring, Occur, Query, RangeQuery, TermQuery};
use tantivy::schema::{Field, IndexRecordOption, Value};
use tantivy::{DocAddress, DocSet, IndexReader, TantivyDocument, Term};

use crate::analysis::{Condition, ConditionTerms, GRAM, INITIALS, PINYIN, TAIL};
use crate::error::{IndexerError, Result};
use crate::state::RowState;

use super::rowkey_cache::{RowkeyCache, RowkeyCacheCounts, rowkey_cache};
use super::rowkey_ref;
use super::schema::Fields;

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

/// A page of lookup results in rowkey order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupPage {
    pub rowkeys: Vec<Vec<u8>>,
    /// There are more matches after the last rowkey of this page.
    pub has_more: bool,
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
            let field_of = |wanted: &ConditionTerms| {
                match wanted.subfield_suffix {
                    "" => Some(handles.exact),
                    TAIL => handles.tail,
                    GRAM => handles.gram,
                    PINYIN => handles.pinyin,
                    INITIALS => handles.initials,
                    _ => None,
                }
                .ok_or_else(|| IndexerError::InvalidCondition {
                    field: condition.field.clone(),
                    reason: "this match mode is not indexed for the field".into(),
                })
            };
            let query_of = |field: Field, wanted: &ConditionTerms, term: &str| -> Box<dyn Query> {
                if wanted.prefix {
                    Box::new(prefix_query(field, term))
                } else {
                    Box::new(TermQuery::new(
                        Term::from_field_text(field, term),
                        IndexRecordOption::Basic,
                    ))
                }
            };
            let mut alternatives = condition.terms();
            if alternatives.len() == 1
                && let Some(wanted) = alternatives.pop()
            {
                let field = field_of(&wanted)?;
                for term in &wanted.terms {
                    single_term = (!wanted.prefix).then(|| Term::from_field_text(field, term));
                    clauses.push((Occur::Must, query_of(field, &wanted, term)));
                }
                continue;
            }
            // Alternatives (a pinyin lookup: an initials or a full spelling): any one of them,
            // each with all of its terms.
            let mut any: Vec<(Occur, Box<dyn Query>)> = Vec::new();
            for wanted in &alternatives {
                let field = field_of(wanted)?;
                let all: Vec<(Occur, Box<dyn Query>)> = wanted
                    .terms
                    .iter()
                    .map(|term| (Occur::Must, query_of(field, wanted, term)))
                    .collect();
                any.push((Occur::Should, Box::new(BooleanQuery::new(all))));
            }
            if !any.is_empty() {
                single_term = None;
                clauses.push((Occur::Must, Box::new(BooleanQuery::new(any))));
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

    /// Whether the idle compaction has work here: recent segments it would merge
    /// ([`CompactionScope::Recent`](super::CompactionScope::Recent)) of at most `max_docs`
    /// documents, as of the last reload.
    pub fn compaction_pending(&self, max_docs: u64) -> bool {
        let searcher = self.reader().searcher();
        let sizes: Vec<super::writer::SegmentSize> = searcher
            .segment_readers()
            .iter()
            .map(|segment| super::writer::SegmentSize {
                id: segment.segment_id(),
                docs: segment.max_doc(),
                live: segment.num_docs(),
            })
            .collect();
        super::writer::recent_segments(&sizes, max_docs).len() >= 2
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
