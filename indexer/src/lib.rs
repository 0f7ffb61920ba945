//! `hbidx-indexer`: keeps one tantivy index per table mapping indexed field values to rowkeys,
//! fed by a change stream.
//!
//! Data flow: a [`Source`] (the embedded store's [`ChangeFeedSource`], or a [`KafkaSource`]
//! decoding hbidx JSON or HBase Kafka Proxy Avro events) yields
//! [`hbidx_schema::model::ChangeEvent`]s → the indexer thread ([`spawn`]) applies them through
//! a [`TableIndexWriter`], merging each with the row's kept state → commits carry the source's
//! [`Checkpoint`] as payload → a [`TableSearcher`] answers lookups built from [`Condition`]s.
//!
//! The modules are private; this list is the crate's whole API:
//! - index: [`open_table_index`], [`TableIndexWriter`], [`TableSearcher`], [`WriterOptions`]
//!   and their stats;
//! - lookups: [`Condition`], [`ConditionOp`], [`MatchMode`], [`LookupPage`];
//! - the indexer thread: [`spawn`], [`spawn_shadow`], [`spawn_with`], [`CommitPolicy`],
//!   [`IndexerHandle`], [`IndexerStats`];
//! - sources: [`Source`] and its kinds, [`Prefetch`], [`KafkaSource`], [`DeadLetterFile`],
//!   [`ReplayTargets`]; event formats: [`decode_json`], [`decode_proxy`] and their encoders,
//!   [`proxy_rowkey`] (a Kafka Proxy event's rowkey without decoding it);
//! - write-through: [`KafkaPublisher`]; what a reindex records of the repair queue: [`Recorded`];
//! - drift: [`diff_row`], [`kept_columns`], [`Drift`], [`DriftKind`].

mod analysis;
mod checkpoint;
mod drift;
mod error;
mod filters;
mod formats;
mod index;
mod kafka;
mod pipeline;
mod prefetch;
mod publisher;
mod repair_queue;
mod source;
mod state;

pub use analysis::{Condition, ConditionOp, MatchMode};
pub use checkpoint::Checkpoint;
pub use drift::{Drift, DriftKind, diff_row, kept_columns};
pub use error::{IndexerError, Result};
pub use filters::FilterStats;
pub use formats::{
    DecodeError, Decoded, EventFormat, HBASE_KAFKA_EVENT_SCHEMA, ProxyCell, ProxyDecoded,
    decode_json, decode_proxy, encode_json, encode_proxy, proxy_rowkey,
};
pub use index::{
    ApplyOutcome, Compaction, CompactionScope, CoveredSize, IndexStats, LiveRowkeys, LookupPage,
    MERGE_BYTES_PER_DOC, MergeBudget, MergeBudgets, RowkeyCacheStats, RowsPage, TableIndexWriter,
    TableSearcher, WriterOptions, committed_checkpoint, open_table_index, writer_heap_reserved,
};
pub use kafka::{DeadLetterFile, KafkaSource, KafkaSourceConfig, ReplayTargets, StartPolicy};
pub use pipeline::{
    CommitPolicy, IndexerHandle, IndexerStats, PartitionStatus, spawn, spawn_shadow, spawn_with,
};
pub use prefetch::Prefetch;
pub use publisher::KafkaPublisher;
pub use repair_queue::{RECORDING_CAPACITY, Recorded};
pub use source::{
    ApplyToStore, CHANGE_FEED, ChangeFeedSource, CommitBarrier, IdleSource, PartitionReport,
    Source, Waker,
};
