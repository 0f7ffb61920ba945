//! The storage-neutral interface: what the query service and the CLI need from a row store.

use std::collections::BTreeMap;

use async_trait::async_trait;
use hbidx_schema::model::Mutation;
use serde::{Deserialize, Serialize};

use crate::error::Result;

/// The latest visible version of one cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    /// The cell value.
    pub value: Vec<u8>,
    /// The HBase cell timestamp (milliseconds since the Unix epoch) of this version.
    pub ts: i64,
}

/// One row as a read returns it: only visible cells, only the latest version of each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// The raw rowkey.
    pub rowkey: Vec<u8>,
    /// Cells by `family:qualifier`, in column order. Never empty: a row without visible cells is
    /// not returned at all.
    pub cells: BTreeMap<String, Cell>,
}

/// A range or prefix scan, one batch at a time.
///
/// The rows returned are those with `start <= rowkey`, `rowkey < stop` (when given) and
/// `rowkey` starting with `prefix` (when given), in rowkey byte order. To continue, send the same
/// request again with `start` set to the previous batch's [`ScanBatch::next_start`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanRequest {
    /// First rowkey to consider, inclusive. Empty = from the first row.
    pub start: Vec<u8>,
    /// Rowkey to stop at, exclusive. `None` = to the end of the table.
    pub stop: Option<Vec<u8>>,
    /// Only rows whose key starts with these bytes.
    pub prefix: Option<Vec<u8>>,
    /// Column projection, as in [`RowStore::get_rows`]. Rows with no matching visible cell are
    /// skipped.
    pub columns: Option<Vec<String>>,
    /// Maximum number of rows in the batch; must be at least 1.
    pub batch: usize,
}

/// One batch of a scan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanBatch {
    /// Up to `batch` rows, in rowkey order.
    pub rows: Vec<Row>,
    /// The `start` of the next batch; `None` when the scan is complete (there is no further
    /// matching row).
    pub next_start: Option<Vec<u8>>,
}

/// What a successful [`RowStore::mutate`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteReceipt {
    /// For each table the batch touched (sorted by table name), the change-feed offset of the
    /// batch's last event in that table. An indexer that has reached this offset has seen the
    /// write. Empty for stores without a change feed.
    pub last_offset_by_table: Vec<(String, i64)>,
}

/// A table → rowkey → `family:qualifier` → value store with HBase cell semantics.
///
/// Implementations are shared as `Arc<dyn RowStore>`.
#[async_trait]
pub trait RowStore: Send + Sync {
    /// Reads rows by key. The result is positional: `result[i]` answers `rowkeys[i]`, `None` when
    /// the row doesn't exist or has no visible cell (after projection).
    ///
    /// `columns` projects: an entry with a `:` (`info:phone`) selects that column, an entry
    /// without (`info`) selects the whole family. `None` or an empty slice selects everything.
    async fn get_rows(
        &self,
        table: &str,
        rowkeys: &[Vec<u8>],
        columns: Option<&[String]>,
    ) -> Result<Vec<Option<Row>>>;

    /// Reads the next batch of a range or prefix scan.
    async fn scan(&self, table: &str, request: &ScanRequest) -> Result<ScanBatch>;

    /// Applies row mutations (puts and deletes with explicit timestamps). The whole call is
    /// atomic: it is validated first, and either every mutation is applied or none is.
    async fn mutate(&self, mutations: Vec<Mutation>) -> Result<WriteReceipt>;

    /// Whether the store can serve every table it was opened for: reachable, and each table
    /// present and enabled. Bounded by a short deadline, since a readiness probe calls it
    /// periodically. The error names the table at fault. A store that is local and open (the
    /// embedded one) is always healthy.
    async fn health(&self) -> Result<()> {
        Ok(())
    }

    /// The tables this store serves.
    fn tables(&self) -> Vec<String>;
}
