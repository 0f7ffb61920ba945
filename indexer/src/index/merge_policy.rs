//! Merges bounded in documents, so that merge memory is bounded by `[memory]`, not by the
//! table.
//!
//! A tantivy merge holds about [`MERGE_BYTES_PER_DOC`] bytes of heap per document it writes,
//! whatever the documents hold: a map from each new document to its old segment and id, a copy
//! of it for the fast fields, and the `_rk` column's map from each segment's rowkey ordinals to
//! the merged dictionary's. tantivy's log merge policy merges a whole size level at a time with
//! no cap (eight segments just under its 10M-document limit make an 80M-document merge, about
//! 2 GB), and a 10M-row table's compaction into one segment held ~250 MB.
//!
//! So hbidx starts every merge itself ([`TableIndexWriter`](super::TableIndexWriter): after
//! each commit the log policy's choice, when idle the compaction's) and draws it from the
//! table's [`MergeBudget`]: `[memory] index_merges_mb` ÷ [`MERGE_BYTES_PER_DOC`] documents
//! merging at once, shared by the table's live writer and a reindex's shadow writer. tantivy's
//! policy sees neither the other writer's merges nor the compaction, nor when its own end: a
//! cap it enforced would hold per writer and per call, so a reindex beside the live index's
//! compaction, with merges of several size levels, could hold two or three caps' worth.
//! A table bigger than the cap keeps several segments of about the cap each (a lookup probes
//! each one: slower, not bigger).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tantivy::index::{SegmentId, SegmentMeta};
use tantivy::indexer::{LogMergePolicy, MergeCandidate, MergePolicy};

/// Heap one merge holds per document it writes: three 8-byte entries a document (tantivy
/// 0.27's merger; measured 23 bytes a document merging 11M documents into one segment).
pub const MERGE_BYTES_PER_DOC: u64 = 24;

/// How many segments of one size level the log policy merges at once (its default).
const LEVEL_SEGMENTS: u64 = 8;

/// A merge of at most the cap over this many documents starts whatever else merges, and the
/// others don't wait for it: while a merge of the cap's size runs for a minute, a trickle of
/// writes still merges its small segments instead of piling up hundreds for every lookup to
/// probe, and those never hold a big merge back. tantivy runs at most four merges a writer at
/// once, so these add at most 1/16 of the cap a writer.
const SMALL_MERGE_SHARE: u64 = 64;

/// The documents a table's merges may write at once, and those they are writing now.
#[derive(Debug)]
pub struct MergeBudget {
    max_docs: u64,
    merging: Mutex<Merging>,
}

/// Documents being merged: by every merge, and by those that aren't small.
#[derive(Debug, Default)]
struct Merging {
    all: u64,
    big: u64,
}

impl MergeBudget {
    pub fn new(max_docs: u64) -> Arc<Self> {
        Arc::new(Self {
            max_docs,
            merging: Mutex::default(),
        })
    }

    /// The most documents the table's merges write at once; no merge is bigger.
    pub fn max_docs(&self) -> u64 {
        self.max_docs
    }

    /// Documents being merged now, by every writer of the table.
    pub fn merging_docs(&self) -> u64 {
        self.merging
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .all
    }

    /// Room for a merge of `docs` documents, if it fits beside the other merges that aren't
    /// small (or is small itself: [`SMALL_MERGE_SHARE`]); given back when the reservation is
    /// dropped.
    pub(crate) fn try_reserve(self: &Arc<Self>, docs: u64) -> Option<MergeReservation> {
        let mut merging = self.merging.lock().unwrap_or_else(PoisonError::into_inner);
        let big = docs > self.max_docs / SMALL_MERGE_SHARE;
        if big {
            if merging.big.saturating_add(docs) > self.max_docs {
                return None;
            }
            merging.big += docs;
        }
        merging.all = merging.all.saturating_add(docs);
        Some(MergeReservation {
            budget: self.clone(),
            docs,
            big,
        })
    }
}

/// One running merge's share of its table's [`MergeBudget`].
#[derive(Debug)]
pub(crate) struct MergeReservation {
    budget: Arc<MergeBudget>,
    docs: u64,
    big: bool,
}

impl Drop for MergeReservation {
    fn drop(&mut self) {
        let mut merging = self
            .budget
            .merging
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        merging.all = merging.all.saturating_sub(self.docs);
        if self.big {
            merging.big = merging.big.saturating_sub(self.docs);
        }
    }
}

/// The merge budget of each table of a process, so that a table's live writer and a reindex's
/// shadow writer draw on one. Clones share the budgets.
#[derive(Debug, Clone, Default)]
pub struct MergeBudgets(Arc<Mutex<HashMap<String, Arc<MergeBudget>>>>);

impl MergeBudgets {
    /// `table`'s budget, made with `max_docs` by its first writer.
    pub fn for_table(&self, table: &str, max_docs: u64) -> Arc<MergeBudget> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(table.to_owned())
            .or_insert_with(|| MergeBudget::new(max_docs))
            .clone()
    }

    /// Documents being merged now, every table's merges together.
    pub fn merging_docs(&self) -> u64 {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|budget| budget.merging_docs())
            .sum()
    }
}

/// The merges tantivy's log merge policy would start among `segments` (those not merging),
/// each cut into merges of at most `max_docs` documents (counting deleted ones: the rowkey
/// dictionary still holds their terms), with their sizes. The policy merges eight segments of
/// a size level at once: it is given none over an eighth of the cap, so a level's merge is
/// within it; bigger segments are merged by the idle compaction, within the cap too.
pub(crate) fn merge_candidates(
    segments: &[SegmentMeta],
    max_docs: u64,
) -> Vec<(Vec<SegmentId>, u64)> {
    let mut log = LogMergePolicy::default();
    log.set_min_num_segments(LEVEL_SEGMENTS as usize);
    log.set_max_docs_before_merge(usize::try_from(max_docs / LEVEL_SEGMENTS).unwrap_or(usize::MAX));
    let docs: HashMap<SegmentId, u64> = segments
        .iter()
        .map(|meta| (meta.id(), u64::from(meta.max_doc())))
        .collect();
    let size = |id: &SegmentId| docs.get(id).copied().unwrap_or(0);
    log.compute_merge_candidates(segments)
        .into_iter()
        .flat_map(|candidate| split(&candidate.0, size, max_docs))
        .map(|group| {
            let docs = group.0.iter().map(size).sum();
            (group.0, docs)
        })
        .collect()
}

/// `ids` cut, in their order, into groups of at most `max_docs` documents; groups of one
/// segment are dropped (nothing to merge).
fn split(
    ids: &[SegmentId],
    docs: impl Fn(&SegmentId) -> u64,
    max_docs: u64,
) -> Vec<MergeCandidate> {
    let mut groups = Vec::new();
    let mut group: Vec<SegmentId> = Vec::new();
    let mut in_group = 0u64;
    for id in ids {
        let size = docs(id);
        if !group.is_empty() && in_group + size > max_docs {
            groups.push(std::mem::take(&mut group));
            in_group = 0;
        }
        group.push(*id);
        in_group += size;
    }
    groups.push(group);
    groups
        .into_iter()
        .filter(|group| group.len() >= 2)
        .map(MergeCandidate)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(docs: &[u64]) -> (Vec<SegmentId>, HashMap<SegmentId, u64>) {
        let ids: Vec<SegmentId> = docs.iter().map(|_| SegmentId::generate_random()).collect();
        let map = ids.iter().copied().zip(docs.iter().copied()).collect();
        (ids, map)
    }

    fn group_docs(groups: &[MergeCandidate], map: &HashMap<SegmentId, u64>) -> Vec<Vec<u64>> {
        groups
            .iter()
            .map(|group| group.0.iter().map(|id| map[id]).collect())
            .collect()
    }

    #[test]
    fn a_level_over_the_cap_is_split_into_merges_within_it() {
        // Eight segments of one size level under tantivy's own 10M limit: to it, one merge of
        // 72M documents.
        let (ids, map) = sizes(&[9_000_000; 8]);
        let groups = split(&ids, |id| map[id], 20_000_000);
        assert_eq!(group_docs(&groups, &map), vec![vec![9_000_000; 2]; 4]);
    }

    #[test]
    fn a_lone_segment_is_left_alone_and_a_level_within_the_cap_stays_whole() {
        let (ids, map) = sizes(&[3_000_000, 2_500_000, 2_000_000]);
        let groups = split(&ids, |id| map[id], 5_000_000);
        assert_eq!(group_docs(&groups, &map), vec![vec![2_500_000, 2_000_000]]);
        let groups = split(&ids, |id| map[id], 10_000_000);
        assert_eq!(
            group_docs(&groups, &map),
            vec![vec![3_000_000, 2_500_000, 2_000_000]]
        );
    }

    #[test]
    fn merges_reserve_the_table_budget_together_and_small_ones_always_start() {
        let schema = tantivy::schema::Schema::builder().build();
        let index = tantivy::Index::create_in_ram(schema);
        // Sixteen segments of one level, each an eighth of the cap: two merges of eight, and
        // only one fits the budget at a time.
        let metas: Vec<SegmentMeta> = (0..16)
            .map(|_| index.new_segment_meta(SegmentId::generate_random(), 100))
            .collect();
        let candidates = merge_candidates(&metas, 800);
        assert_eq!(candidates.len(), 2, "{candidates:?}");
        assert!(
            candidates
                .iter()
                .all(|(ids, docs)| ids.len() == 8 && *docs == 800)
        );
        let budget = MergeBudget::new(800);
        let first = budget
            .try_reserve(800)
            .expect("an idle budget takes a merge of the cap");
        assert!(budget.try_reserve(800).is_none(), "two caps' worth at once");
        assert!(
            budget.try_reserve(20).is_none(),
            "a merge over 1/64 of the cap waits too"
        );
        let small = budget
            .try_reserve(12)
            .expect("a small merge starts beside a big one");
        assert_eq!(budget.merging_docs(), 812);
        drop(first);
        let second = budget
            .try_reserve(800)
            .expect("small merges never hold a big one back");
        drop((small, second));
        assert_eq!(budget.merging_docs(), 0);
        assert!(
            budget.try_reserve(800).is_some(),
            "given back when the merge ends"
        );
    }

    #[test]
    fn a_tables_writers_share_one_budget() {
        let budgets = MergeBudgets::default();
        let live = budgets.for_table("user", 800);
        let shadow = budgets.clone().for_table("user", 800);
        let _held = live.try_reserve(700).unwrap();
        assert_eq!(shadow.merging_docs(), 700);
        assert!(shadow.try_reserve(200).is_none());
        assert_eq!(budgets.for_table("order", 800).merging_docs(), 0);
    }
}
