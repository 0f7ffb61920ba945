//! `hbidx-store`: where rows live.
//!
//! - [`RowStore`]: the storage-neutral interface the query service and the CLI use, shared as
//!   `Arc<dyn RowStore>`: positional multi-get with column projection, batched range/prefix
//!   scans, and timestamped puts and deletes.
//! - [`EmbeddedStore`]: the implementation on fjall (an LSM-tree like HBase's), with HBase cell
//!   semantics (latest version wins, delete tombstones, `VERSIONS => 1`) and a per-table change
//!   feed written in the same atomic batch as the rows: the coprocessor-style path from a write
//!   to the indexer, without Kafka.
//!
//! The mutation model itself ([`hbidx_schema::model`]) lives in the schema crate so that the
//! indexer can consume it without depending on this crate's storage.

mod api;
mod embedded;
mod error;
mod row_state;

pub use api::{Cell, Row, RowStore, ScanBatch, ScanRequest, WriteReceipt};
pub use embedded::{EmbeddedStore, EmbeddedStoreOptions};
pub use error::{Result, StoreError};
pub use row_state::{RowState, StoredCell};
