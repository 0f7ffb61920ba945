//! Walks over a whole table index rather than lookups: every live row, pages of rows in rowkey
//! order, random samples, the live rowkeys of the region report and covered columns' sizes.
//! They serve verify and the ops endpoints, not the lookup path.

use tantivy::columnar::BytesColumn;
use tantivy::schema::IndexRecordOption;
use tantivy::{DocAddress, DocSet, Term};

use crate::checkpoint::PayloadFlags;
use crate::error::Result;
use crate::state::RowState;

use super::searcher::TableSearcher;

/// The rowkey of document `doc` from its segment's `_rk` column; `None` for a document without
/// one (the indexer writes none).
pub(super) fn rowkey_at(column: &BytesColumn, doc: tantivy::DocId) -> Result<Option<Vec<u8>>> {
    let Some(ord) = column.term_ords(doc).next() else {
        return Ok(None);
    };
    let mut rowkey = Vec::new();
    column
        .ord_to_bytes(ord, &mut rowkey)
        .map_err(tantivy::TantivyError::from)?;
    Ok(Some(rowkey))
}

/// Whether a row state remembers a delete: a row, family or cell tombstone.
pub(super) fn remembers_delete(state: &RowState) -> bool {
    state.row_tombstone.is_some()
        || !state.family_tombstones.is_empty()
        || state.cells.values().any(|cell| cell.value.is_none())
}

/// Rows a page of [`TableSearcher::each_delete`] reads on an index without delete marks.
const DELETES_PAGE: usize = 1000;

/// Deleted documents [`TableSearcher::sample_live`] steps over to reach a live one from a
/// sample point, at most: past it the point is left out, so that a sample's cost stays
/// bounded by its size whatever the segment's deletes.
const MAX_DELETED_SKIPPED: usize = 256;

/// What [`TableSearcher::live_rowkeys_sample`] read.
#[derive(Debug, Clone, Default)]
pub struct LiveRowkeys {
    /// All live rowkeys, or an evenly spaced sample of them, in no particular order.
    pub rowkeys: Vec<Vec<u8>>,
    /// How many rows are live: exact when the rowkeys are all of them, else counted from the
    /// segments' sizes: marked documents less deleted ones.
    pub live: u64,
}

/// Live rows in rowkey order and the cursor after them ([`TableSearcher::rows_after`]).
pub type RowsPage = (Vec<(Vec<u8>, RowState)>, Option<Vec<u8>>);

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

impl TableSearcher {
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
        self.states_after(after, limit, RowState::has_values)
    }

    /// Like [`Self::rows_after`], but the rows that remember a delete (a row, family or cell
    /// tombstone), live or not, with their whole state. A store reindex copies them into the
    /// new index, whose scanned rows can't show what HBase masks.
    fn deletes_after(&self, after: Option<&[u8]>, limit: usize) -> Result<RowsPage> {
        self.states_after(after, limit, remembers_delete)
    }

    /// Calls `visit` once with each row that remembers a delete (as [`Self::deletes_after`]
    /// finds them), in no particular order, from one snapshot of the index; returns how many.
    ///
    /// On an index whose documents all carry the delete mark this walks the mark's postings:
    /// proportional to the deletes, not to the table (reading every row's state was two
    /// minutes of a 10M-row reindex). An index written before marks is paged through whole.
    pub fn each_delete(
        &self,
        mut visit: impl FnMut(Vec<u8>, RowState) -> Result<()>,
    ) -> Result<u64> {
        let searcher = self.reader().searcher();
        let flags = PayloadFlags::of(searcher.index().load_metas()?.payload.as_deref());
        let mut visited = 0u64;
        if !flags.delete_marks {
            let mut after: Option<Vec<u8>> = None;
            loop {
                let (rows, cursor) = self.deletes_after(after.as_deref(), DELETES_PAGE)?;
                for (rowkey, state) in rows {
                    visit(rowkey, state)?;
                    visited += 1;
                }
                match cursor {
                    Some(next) => after = Some(next),
                    None => return Ok(visited),
                }
            }
        }
        self.walk_marked(&searcher, super::DELETE_MARK, |_, address, read_rowkey| {
            if let Some(rowkey) = read_rowkey()? {
                let state = self.state_at(&searcher, address, &rowkey)?;
                visit(rowkey, state)?;
            }
            Ok(())
        })
    }

    fn states_after(
        &self,
        after: Option<&[u8]>,
        limit: usize,
        keep: impl Fn(&RowState) -> bool,
    ) -> Result<RowsPage> {
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
            if keep(&state) {
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
    /// when the index holds at most `max` documents marked live, else a sample of about `max`
    /// spread evenly over each segment's documents ([`Self::sample_live`]), with the live count
    /// next to it. Reads only the `_live` postings and the `_rk` fast-field column, never
    /// stored documents, and costs the sample's size, not the table's: a few MB and, reading
    /// the rowkeys by sorted ordinal, up to one dictionary block decoded a rowkey. Blocking:
    /// call it from a blocking thread.
    pub fn live_rowkeys_sample(&self, max: usize) -> Result<LiveRowkeys> {
        let searcher = self.reader().searcher();
        let mut docs: Vec<DocAddress> = Vec::new();
        let live = self.sample_live(&searcher, max, |address| {
            docs.push(address);
            Ok(())
        })?;
        // Each segment's rowkeys by sorted ordinal, in one pass over its dictionary: read one
        // at a time, each costs a block search and the decoding of the block up to it (~3 µs,
        // a third of a second for 100k).
        let mut rowkeys = Vec::with_capacity(docs.len());
        for group in docs.chunk_by(|a, b| a.segment_ord == b.segment_ord) {
            let segment = searcher.segment_reader(group[0].segment_ord);
            let Some(column) = segment.fast_fields().bytes("_rk")? else {
                continue;
            };
            let mut ords: Vec<u64> = group
                .iter()
                .filter_map(|address| column.term_ords(address.doc_id).next())
                .collect();
            ords.sort_unstable();
            ords.dedup();
            column
                .dictionary()
                .sorted_ords_to_term_cb(&ords, |rowkey| rowkeys.push(rowkey.to_vec()))
                .map_err(tantivy::TantivyError::from)?;
        }
        Ok(LiveRowkeys { rowkeys, live })
    }

    /// The bytes each covered column takes in the index (its values, names and timestamps in
    /// the rows' `_state`), estimated from about `max` live rows read evenly across the index
    /// ([`Self::sample_live`]) and scaled to all of them: exact while the index holds at most
    /// `max` documents marked live. Blocking: call it from a blocking thread.
    pub fn covered_sizes(&self, max: usize) -> Result<Vec<CoveredSize>> {
        let covered = &self.table.covered;
        if covered.is_empty() {
            return Ok(Vec::new());
        }
        let searcher = self.reader().searcher();
        let mut bytes = vec![0u64; covered.len()];
        let mut rows = vec![0u64; covered.len()];
        let mut sampled = 0u64;
        let live = self.sample_live(&searcher, max, |address| {
            sampled += 1;
            let state = self.state_at(&searcher, address, b"")?;
            for (n, column) in covered.iter().enumerate() {
                if let Some(value) = state.value(column) {
                    // The value, its column name and an i64 timestamp (postcard varints make
                    // the real figure a little smaller).
                    bytes[n] += (value.len() + column.len() + 8) as u64;
                    rows[n] += 1;
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

    /// Calls `visit(address)` for about `max` live documents spread over the index, in segment
    /// order, and returns how many rows are live.
    ///
    /// While the index holds at most `max` documents marked live (deleted ones included), it
    /// walks them all: every live row is visited and the count is exact. Beyond, the walk would
    /// grow with the table (~1 ns a document, twice: 0.2 s at 100M rows, every report), so each
    /// segment gets its share of `max` by its marked documents and is visited at evenly spaced
    /// document ids, one skip-list seek each, taking the first live document at or after each.
    /// The count is then each segment's marked documents less its deleted ones: exact while
    /// every deleted document had a visible value (an update's or a delete's old version),
    /// short by the deleted documents of rows that were already deleted.
    fn sample_live(
        &self,
        searcher: &tantivy::Searcher,
        max: usize,
        mut visit: impl FnMut(DocAddress) -> Result<()>,
    ) -> Result<u64> {
        let term = Term::from_field_text(self.fields.live, super::LIVE_MARK);
        let mut segments = Vec::with_capacity(searcher.segment_readers().len());
        let mut marked = 0u64;
        for (segment_ord, segment) in searcher.segment_readers().iter().enumerate() {
            let Some(postings) = segment
                .inverted_index(self.fields.live)?
                .read_postings(&term, IndexRecordOption::Basic)
                .map_err(tantivy::TantivyError::from)?
            else {
                continue;
            };
            marked += u64::from(postings.doc_freq());
            segments.push((segment_ord, segment, postings));
        }
        if marked <= max as u64 {
            return self.walk_live(searcher, |_, address, _| visit(address));
        }
        let mut live = 0u64;
        for (segment_ord, segment, mut postings) in segments {
            let alive = segment.alive_bitset();
            let doc_freq = u64::from(postings.doc_freq());
            live += doc_freq.saturating_sub(u64::from(segment.num_deleted_docs()));
            // This segment's share of the sample, at least one, at evenly spaced doc ids.
            let share = (max as u64 * doc_freq).div_ceil(marked).max(1);
            let step = f64::from(segment.max_doc()) / share as f64;
            let mut last_visited = None;
            for i in 0..share {
                let target = (i as f64 * step) as tantivy::DocId;
                let mut doc = postings.doc();
                if doc < target {
                    doc = postings.seek(target);
                }
                // Past deleted documents, a bounded number of them: a long run of deletes
                // (a range rewritten since the segment was made) leaves this point out.
                let mut skipped = 0;
                while doc != tantivy::TERMINATED
                    && alive.is_some_and(|bits| bits.is_deleted(doc))
                    && skipped < MAX_DELETED_SKIPPED
                {
                    doc = postings.advance();
                    skipped += 1;
                }
                if doc == tantivy::TERMINATED {
                    break;
                }
                if alive.is_some_and(|bits| bits.is_deleted(doc)) {
                    continue;
                }
                if last_visited != Some(doc) {
                    last_visited = Some(doc);
                    visit(DocAddress::new(segment_ord as u32, doc))?;
                }
            }
        }
        Ok(live)
    }

    /// Calls `visit(i, address, read_rowkey)` for the i-th live document over all segments, in
    /// index order, and returns how many there are. `read_rowkey` reads that document's `_rk`.
    fn walk_live(
        &self,
        searcher: &tantivy::Searcher,
        visit: impl FnMut(u64, DocAddress, &dyn Fn() -> Result<Option<Vec<u8>>>) -> Result<()>,
    ) -> Result<u64> {
        self.walk_marked(searcher, super::LIVE_MARK, visit)
    }

    /// Like [`Self::walk_live`], over the documents (not deleted) whose `_live` terms hold
    /// `mark`.
    fn walk_marked(
        &self,
        searcher: &tantivy::Searcher,
        mark: &str,
        mut visit: impl FnMut(u64, DocAddress, &dyn Fn() -> Result<Option<Vec<u8>>>) -> Result<()>,
    ) -> Result<u64> {
        let term = Term::from_field_text(self.fields.live, mark);
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
}
