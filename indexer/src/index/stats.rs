//! What a table index weighs: [`IndexStats`] and how the searcher measures it, remembering
//! each immutable segment's size so that a status read doesn't walk every segment's files.

use std::collections::HashMap;

use tantivy::Term;
use tantivy::query::{Query, TermQuery};
use tantivy::schema::IndexRecordOption;

use super::searcher::TableSearcher;

/// Sizes for the ops page and the status endpoint.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct IndexStats {
    /// Rows with at least one visible value.
    pub rows: u64,
    /// Documents, including those that only remember a deleted row's tombstones.
    pub docs: u64,
    pub segments: usize,
    pub bytes: u64,
    /// The reader generation these counts were read from. Every reload (a commit, a
    /// compaction, a background merge) starts a new one; see [`TableSearcher::generation`].
    pub generation: u64,
}

impl TableSearcher {
    /// The generation of the reader lookups use now: cheap (no segment walk), so the indexer
    /// thread polls it to notice reloads that no commit of its own caused.
    pub fn generation(&self) -> u64 {
        self.reader().searcher().generation().generation_id()
    }

    pub fn stats(&self) -> IndexStats {
        // Walks the `_live` postings of every segment with deletes (tantivy counts a term by its
        // doc frequency only in segments without any): O(rows). The indexer's counts come from
        // `TableIndexWriter::stats` instead, which keeps a running count.
        let searcher = self.reader().searcher();
        let live = TermQuery::new(
            Term::from_field_text(self.fields.live, super::LIVE_MARK),
            IndexRecordOption::Basic,
        );
        IndexStats {
            rows: live.count(&searcher).map_or(0, |count| count as u64),
            ..self.sizes_of(&searcher)
        }
    }

    /// Everything [`TableSearcher::stats`] reports but the live rows (left 0), without walking
    /// postings. A segment's files are immutable except its deletes, so each segment is
    /// measured once and its current deletes bitset added.
    pub fn sizes(&self) -> IndexStats {
        self.sizes_of(&self.reader().searcher())
    }

    fn sizes_of(&self, searcher: &tantivy::Searcher) -> IndexStats {
        let mut cache = self
            .segment_bytes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut current = HashMap::with_capacity(searcher.segment_readers().len());
        let mut bytes = 0;
        for segment in searcher.segment_readers() {
            let id = segment.segment_id();
            let size = match cache.get(&id) {
                Some(size) => Some(*size),
                // A failed read counts as nothing this time and is not remembered, so the next
                // call tries again.
                None => segment
                    .space_usage()
                    .ok()
                    .map(|usage| usage.total().get_bytes() - usage.deletes().get_bytes()),
            };
            if let Some(size) = size {
                let deletes = segment
                    .alive_bitset()
                    .map_or(0, |alive| alive.space_usage().get_bytes());
                bytes += size + deletes;
                current.insert(id, size);
            }
        }
        // Only the current segments stay: merged-away ones go.
        *cache = current;
        IndexStats {
            rows: 0,
            docs: searcher.num_docs(),
            segments: searcher.segment_readers().len(),
            bytes,
            generation: searcher.generation().generation_id(),
        }
    }
}
