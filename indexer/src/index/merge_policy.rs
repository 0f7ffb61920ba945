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

impl BoundedMergePolicy {
    pub(crate) fn new(max_docs: u64) -> Self {
        let mut log = LogMergePolicy::default();
        // A segment over half the cap can't merge with another of its size level within it.
        log.set_max_docs_before_merge(usize::try_from(max_docs / 2).unwrap_or(usize::MAX));
        Self { log, max_docs }
    }
}

impl MergePolicy for BoundedMergePolicy {
    fn compute_merge_candidates(&self, segments: &[SegmentMeta]) -> Vec<MergeCandidate> {
        let docs: HashMap<SegmentId, u64> = segments
            .iter()
            .map(|meta| (meta.id(), u64::from(meta.max_doc())))
            .collect();
        self.log
            .compute_merge_candidates(segments)
            .into_iter()
            .flat_map(|candidate| {
                split(
                    &candidate.0,
                    |id| docs.get(id).copied().unwrap_or(0),
                    self.max_docs,
                )
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
        // Eight segments of a size level just under tantivy's own limit: one 80M-doc merge.
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
    fn tantivy_merges_under_the_policy_stay_within_the_cap() {
        use tantivy::schema::{STORED, Schema};
        let mut builder = Schema::builder();
        let field = builder.add_u64_field("n", STORED);
        let index = tantivy::Index::create_in_ram(builder.build());
        let mut writer: tantivy::IndexWriter =
            index.writer_with_num_threads(1, 15_000_000).unwrap();
        writer.set_merge_policy(Box::new(BoundedMergePolicy::new(30)));
        // Twelve segments of 5 documents: one size level, which the log policy merges whole.
        for commit in 0..12u64 {
            for n in 0..5 {
                writer
                    .add_document(tantivy::doc!(field => commit * 5 + n))
                    .unwrap();
            }
            writer.commit().unwrap();
        }
        writer.wait_merging_threads().unwrap();
        let metas = index.searchable_segment_metas().unwrap();
        let mut docs: Vec<u32> = metas.iter().map(|m| m.max_doc()).collect();
        docs.sort_unstable();
        assert_eq!(docs.iter().sum::<u32>(), 60);
        assert!(docs.len() < 12, "nothing merged: {docs:?}");
        assert!(
            docs.iter().all(|&d| d <= 30),
            "a merge over the cap: {docs:?}"
        );
    }
}
