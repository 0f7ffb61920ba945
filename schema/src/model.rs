//! The mutation model: one definition of "a write to an HBase-style table".
//!
//! The embedded store writes it into its change feed, the Kafka sources decode JSON and HBase
//! Kafka Proxy events into it, and the indexer consumes it. Keeping it in the bottom crate is what
//! lets data flow one way (write → change event → indexer) without any crate importing back up.
//!
//! Timestamps are HBase cell timestamps: milliseconds since the Unix epoch, as `i64`.

use serde::{Deserialize, Serialize};

/// A column name in HBase's `family:qualifier` form.
///
/// Qualifiers are bytes in HBase; hbidx requires them to be UTF-8 so that they can be named in
/// TOML config and JSON. The family is everything before the first `:`.
pub type ColumnName = String;

/// Splits `family:qualifier` at the first `:`. Returns `None` when there is no `:` or the family
/// is empty, which is never a valid HBase column.
pub fn split_column(column: &str) -> Option<(&str, &str)> {
    let (family, qualifier) = column.split_once(':')?;
    if family.is_empty() {
        return None;
    }
    Some((family, qualifier))
}

/// One cell-level operation inside a row mutation.
///
/// Delete semantics follow HBase: a delete at timestamp `ts` masks every version of the cell (or
/// family, or row) whose timestamp is `<= ts`, including puts that arrive later with an older
/// timestamp.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CellOp {
    /// Write `value` into `column` at `ts`.
    Put {
        column: ColumnName,
        ts: i64,
        value: Vec<u8>,
    },
    /// Delete all versions of `column` with timestamp `<= ts` (HBase `Delete.addColumns`).
    DeleteCell { column: ColumnName, ts: i64 },
    /// Delete all versions of every column in `family` with timestamp `<= ts`.
    DeleteFamily { family: String, ts: i64 },
    /// Delete every cell of the row with timestamp `<= ts`.
    DeleteRow { ts: i64 },
}

impl CellOp {
    /// The cell timestamp this operation carries.
    pub fn ts(&self) -> i64 {
        match self {
            CellOp::Put { ts, .. }
            | CellOp::DeleteCell { ts, .. }
            | CellOp::DeleteFamily { ts, .. }
            | CellOp::DeleteRow { ts } => *ts,
        }
    }
}

/// All operations on one row of one table, applied atomically (like an HBase `Put` or `Delete`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mutation {
    pub table: String,
    pub rowkey: Vec<u8>,
    pub ops: Vec<CellOp>,
}

/// A mutation at a position in a source: the embedded change feed's sequence number, or a Kafka
/// partition's offset. `partition` is 0 for the change feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeEvent {
    pub partition: i32,
    pub offset: i64,
    pub mutation: Mutation,
}
