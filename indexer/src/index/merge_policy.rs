//! Merges bounded in documents, so that a merge's memory is bounded by `[memory]`, not by the
//! table.
//!
//! A tantivy merge holds about [`MERGE_BYTES_PER_DOC`] bytes of heap per document it writes,
//! whatever the documents hold: a map from each new document to its old segment and id, a copy
//! of it for the fast fields, and the `_rk` column's map from each segment's rowkey ordinals to
//! the merged dictionary's. tantivy's log merge policy merges a whole size level at a time with
//! no cap (eight segments just under its 10M-document limit make an 80M-document merge, about
//! 2 GB), and a 10M-row table's compaction into one segment held ~250 MB. Capping every merge
//! at `[memory] index_merges_mb` ÷ [`MERGE_BYTES_PER_DOC`] documents keeps that inside the
//! budget; a table bigger than the cap keeps several segments of about the cap each (a lookup
//! probes each one: slower, not bigger).

use std::collections::HashMap;

use tantivy::index::{SegmentId, SegmentMeta};
use tantivy::indexer::{LogMergePolicy, MergeCandidate, MergePolicy};

/// Heap one merge holds per document it writes: three 8-byte entries a document (tantivy
/// 0.27's merger; measured 23 bytes a document merging 11M documents into one segment).
pub const MERGE_BYTES_PER_DOC: u64 = 24;

/// tantivy's log merge policy, each of whose merges is split into merges of at most `max_docs`
/// documents (counting deleted ones: the rowkey dictionary still holds their terms).
#[derive(Debug)]
pub(crate) struct BoundedMergePolicy {
    log: LogMergePolicy,
    max_docs: u64,
}

/// How many segments of one size level the log policy merges at once (its default).
const LEVEL_SEGMENTS: u64 = 8;

impl BoundedMergePolicy {
    pub(crate) fn new(max_docs: u64) -> Self {
        let mut log = LogMergePolicy::default();
        // The log policy merges a level of eight segments at once: with none over an eighth
        // of the cap, a level's merge is within it. Bigger segments are merged by the idle
        // compaction, within the cap too.
        log.set_min_num_segments(LEVEL_SEGMENTS as usize);
        log.set_max_docs_before_merge(
            usize::try_from(max_docs / LEVEL_SEGMENTS).unwrap_or(usize::MAX),
        );
        Self { log, max_docs }
    }
}

impl MergePolicy for BoundedMergePolicy {
    fn compute_merge_candidates(&self, segments: &[SegmentMeta]) -> Vec<MergeCandidate> {
        let docs: HashMap<SegmentId, u64> = segments
            .iter()
            .map(|meta| (meta.id(), u64::from(meta.max_doc())))
            .collect();
        let size = |id: &SegmentId| docs.get(id).copied().unwrap_or(0);
        // The merges started here run at once: together they stay within the cap too (a
        // level that outgrew eight segments between two calls merges the rest next time).
        let mut left = self.max_docs;
        self.log
            .compute_merge_candidates(segments)
            .into_iter()
            .flat_map(|candidate| split(&candidate.0, size, self.max_docs))
            .filter(|group| {
                let group_docs: u64 = group.0.iter().map(size).sum();
                let fits = group_docs <= left;
                if fits {
                    left -= group_docs;
                }
                fits
            })
            .collect()
    }
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
    fn the_merges_started_at_once_stay_within_the_cap_together() {
        let schema = tantivy::schema::Schema::builder().build();
        let index = tantivy::Index::create_in_ram(schema);
        // Sixteen segments of one level, each an eighth of the cap: two merges of eight.
        let metas: Vec<SegmentMeta> = (0..16)
            .map(|_| index.new_segment_meta(SegmentId::generate_random(), 100))
            .collect();
        let candidates = BoundedMergePolicy::new(800).compute_merge_candidates(&metas);
        assert_eq!(candidates.len(), 1, "{candidates:?}");
        assert_eq!(candidates[0].0.len(), 8);
    }

    #[test]
    fn tantivy_merges_under_the_policy_stay_within_the_cap() {
        use tantivy::schema::{STORED, Schema};
        let mut builder = Schema::builder();
        let field = builder.add_u64_field("n", STORED);
        let index = tantivy::Index::create_in_ram(builder.build());
        let mut writer: tantivy::IndexWriter =
            index.writer_with_num_threads(1, 15_000_000).unwrap();
        writer.set_merge_policy(Box::new(BoundedMergePolicy::new(30)));
        // Eight segments of 20 documents, then twelve of 3: under 10k documents the log
        // policy alone sees one size level and merges eight at a time, 160 documents.
        let mut n = 0u64;
        for docs in [20; 8].into_iter().chain([3; 12]) {
            for _ in 0..docs {
                writer.add_document(tantivy::doc!(field => n)).unwrap();
                n += 1;
            }
            writer.commit().unwrap();
        }
        writer.wait_merging_threads().unwrap();
        let metas = index.searchable_segment_metas().unwrap();
        let mut docs: Vec<u32> = metas.iter().map(|m| m.max_doc()).collect();
        docs.sort_unstable();
        assert_eq!(docs.iter().sum::<u32>(), 196);
        assert!(docs.len() < 20, "nothing merged: {docs:?}");
        assert!(
            docs.iter().all(|&d| d <= 30),
            "a merge over the cap: {docs:?}"
        );
    }
}
