//! `hbidx-indexer`: keeps one tantivy index per table mapping indexed field values to rowkeys.
//!
//! Data flow: a [`source::Source`] (the embedded change feed, or [`kafka`] with [`formats`])
//! yields
//! [`hbidx_schema::model::ChangeEvent`]s → [`pipeline`] applies them on the table's indexer
//! thread through [`index::TableIndexWriter`], merging with per-row [`state`] → commits carry the
//! source [`checkpoint`] as payload → [`index::TableSearcher`] answers lookups built from
//! [`analysis::Condition`]s.

pub mod analysis;
pub mod checkpoint;

mod error;
mod filters;
pub mod formats;
pub mod index;
pub mod kafka;
pub mod pipeline;
pub mod prefetch;
pub mod publisher;
pub mod repair;
pub mod source;
pub mod state;

pub use analysis::{Condition, MatchMode};
pub use checkpoint::Checkpoint;
pub use error::{IndexerError, Result};
pub use filters::FilterStats;
pub use index::{
    CoveredSize, IndexStats, LiveRowkeys, LookupPage, RowkeyCacheStats, TableIndexWriter,
    TableSearcher, WriterOptions, open_table_index,
};
pub use pipeline::{
    CommitPolicy, IndexerHandle, IndexerStats, PartitionStatus, spawn, spawn_shadow, spawn_with,
};
pub use prefetch::Prefetch;
pub use source::{
    ApplyToStore, CHANGE_FEED, ChangeFeedSource, CommitBarrier, IdleSource, PartitionReport,
    Source, Waker,
};
