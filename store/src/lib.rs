//! `hbidx-store`: where rows live.
//!
//! - [`RowStore`]: the storage-neutral interface the query service and the CLI use, shared as
//!   `Arc<dyn RowStore>`: positional multi-get with column projection, batched range/prefix
//!   scans, and timestamped puts and deletes.
//! - [`EmbeddedStore`]: the implementation on fjall (an LSM-tree like HBase's), with HBase cell
//!   semantics (latest version wins, delete tombstones, older versions for families whose
//!   `VERSIONS` is above 1, atomic read-modify-writes, reversed scans) and a per-table change
//!   feed written in the same atomic batch as the rows: the coprocessor-style path from a write
//!   to the indexer, without Kafka.
//! - [`MeteredStore`]: wraps any of them with call latency and error metrics.
//!
//! - [`HbaseStore`]: the implementation over a real HBase cluster's Thrift1 server, with a
//!   connection pool, deadlines, retries for transport errors and a circuit breaker.
//! - [`StoreConfig`]: the `[store]` config section (parsed by the schema crate's config builder).
//! - [`RowState`]: the cell/tombstone merge rules the store and the indexer share.
//! - [`now_ms`]: the one wall clock every default cell timestamp comes from; [`lock`]: a mutex
//!   lock that ignores poisoning, for the crates above.
//!
//! The mutation model itself ([`hbidx_schema::model`]) lives in the schema crate so that the
//! indexer can consume it without depending on this crate's storage.

mod api;
mod breaker;
mod clock;
pub mod durable;
mod embedded;
mod error;
mod hbase;
mod metered;
mod row_cache;
mod row_state;
mod sync;
mod thrift1;
pub mod thrift_limits;

pub use api::{Cell, Row, RowStore, ScanBatch, ScanRequest, WriteReceipt};
pub use breaker::BreakerState;
pub use clock::now_ms;
pub use embedded::{
    EmbeddedStore, EmbeddedStoreOptions, FeedHold, StoreMemory, TableInfo, TableOrigin, TableSpec,
};
pub use error::{Result, StoreError, is_storage_full, is_storage_full_io};
pub use hbase::HbaseStore;
pub use hbidx_schema::config::{HbaseConfig, StoreConfig, ThriftProtocol, ThriftTransport};
pub use metered::MeteredStore;
pub use row_cache::{DEFAULT_ROW_CACHE_BYTES, RowCacheStats};
pub use row_state::{RowState, StoredCell};
pub use sync::lock;
pub use thrift1::{HBASE_1_2_METHODS, HBASE_2_ONLY};
