//! [`RowStore`] for [`HbaseStore`]: multi-gets, scans, mutations as Thrift1 calls, the health
//! check, and turning Thrift results and errors into the store's own.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use hbase_thrift::hbase::{BatchMutation, Mutation as TMutation, TRowResult, TScan};
use hbidx_schema::model::{CellOp, Mutation};

use crate::api::{Cell, Row, RowStore, ScanBatch, ScanRequest, WriteReceipt};
use crate::embedded::prefix_successor;
use crate::error::{Result, StoreError};

use super::{HEALTH_TIMEOUT, HbaseStore};

/// Turns an HBase "table not found" answer into [`StoreError::TableMissing`].
pub(super) fn table_missing(table: &str, hbase_table: &str, err: StoreError) -> StoreError {
    match err {
        StoreError::Rejected(message)
            if message.contains("TableNotFoundException")
                || message.contains("table not found") =>
        {
            StoreError::TableMissing {
                table: table.to_owned(),
                store_table: hbase_table.to_owned(),
            }
        }
        other => other,
    }
}

fn to_row(result: TRowResult) -> Option<Row> {
    let rowkey = result.row?;
    let cells: BTreeMap<String, Cell> = result
        .columns
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(column, cell)| {
            let value = cell.value?;
            // hbidx names columns as UTF-8 `family:qualifier`; a binary qualifier is shown
            // lossily rather than dropping the cell.
            let column = String::from_utf8(column)
                .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned());
            Some((
                column,
                Cell {
                    value,
                    ts: cell.timestamp.unwrap_or(0),
                },
            ))
        })
        .collect();
    (!cells.is_empty()).then_some(Row { rowkey, cells })
}

/// The most rows asked for in one `getRowsWithColumns` (HBase's own multi-get batches further).
const MULTI_GET_CHUNK: usize = 1000;

#[async_trait]
impl RowStore for HbaseStore {
    async fn get_rows(
        &self,
        table: &str,
        rowkeys: &[Vec<u8>],
        columns: Option<&[String]>,
    ) -> Result<Vec<Option<Row>>> {
        let hbase_table = self.hbase_table(table)?;
        let columns: Vec<Vec<u8>> = columns
            .unwrap_or_default()
            .iter()
            .map(|c| c.as_bytes().to_vec())
            .collect();
        let mut found: HashMap<Vec<u8>, Row> = HashMap::with_capacity(rowkeys.len());
        for chunk in rowkeys.chunks(MULTI_GET_CHUNK) {
            let rows: Vec<Vec<u8>> = chunk.iter().filter(|k| !k.is_empty()).cloned().collect();
            if rows.is_empty() {
                continue;
            }
            let name = hbase_table.clone().into_bytes();
            let columns = columns.clone();
            let results = self
                .call("get_rows_with_columns", move |client| {
                    client.get_rows_with_columns(name.clone(), rows.clone(), columns.clone())
                })
                .await
                .map_err(|err| table_missing(table, &hbase_table, err))?;
            // Not positional, and missing rows are left out: match on the row.
            for row in results.into_iter().filter_map(to_row) {
                found.insert(row.rowkey.clone(), row);
            }
        }
        Ok(rowkeys.iter().map(|key| found.get(key).cloned()).collect())
    }

    async fn scan(&self, table: &str, request: &ScanRequest) -> Result<ScanBatch> {
        let hbase_table = self.hbase_table(table)?;
        if request.batch == 0 {
            return Err(StoreError::InvalidRequest {
                reason: "scan batch size must be at least 1".to_owned(),
            });
        }
        let mut lower = request.start.clone();
        let mut upper = request.stop.clone();
        if let Some(prefix) = &request.prefix {
            if lower < *prefix {
                lower = prefix.clone();
            }
            if let Some(end) = prefix_successor(prefix) {
                upper = Some(match upper {
                    Some(stop) if stop < end => stop,
                    _ => end,
                });
            }
        }
        if upper.as_ref().is_some_and(|upper| *upper <= lower) {
            return Ok(ScanBatch::default());
        }
        // One extra row tells whether the scan is complete, as in the embedded store.
        let want = request.batch + 1;
        let caching = i32::try_from(want).unwrap_or(i32::MAX);
        let scan = TScan {
            start_row: Some(lower),
            stop_row: upper,
            timestamp: None,
            columns: request
                .columns
                .as_ref()
                .map(|cols| cols.iter().map(|c| c.as_bytes().to_vec()).collect()),
            caching: Some(caching),
            filter_string: None,
            // No batch size: it would split wide rows into partial rows.
            batch_size: None,
            sort_columns: None,
            reversed: None,
            // A hint for HBase 2.x (a full-table scan shouldn't churn the block cache); 1.x
            // doesn't know the field and skips it. Nothing depends on it being honoured.
            cache_blocks: Some(false),
        };
        let name = hbase_table.clone().into_bytes();
        let mut rows: Vec<Row> = self
            .call("scan", move |client| {
                let id = client.scanner_open_with_scan(name.clone(), scan.clone())?;
                let mut rows = Vec::new();
                let result = (|| {
                    while rows.len() < want {
                        let left = i32::try_from(want - rows.len()).unwrap_or(i32::MAX);
                        let got = client.scanner_get_list(id, left)?;
                        if got.is_empty() {
                            break;
                        }
                        rows.extend(got.into_iter().filter_map(to_row));
                    }
                    Ok(())
                })();
                // Always close: an open scanner holds a lease and memory on the region server.
                let closed = client.scanner_close(id);
                result.and(closed).map(|()| rows)
            })
            .await
            .map_err(|err| table_missing(table, &hbase_table, err))?;
        let next_start = (rows.len() > request.batch).then(|| rows[request.batch].rowkey.clone());
        rows.truncate(request.batch);
        Ok(ScanBatch { rows, next_start })
    }

    async fn mutate(&self, mutations: Vec<Mutation>) -> Result<WriteReceipt> {
        // Validate everything before the first call, so a bad batch writes nothing.
        for mutation in &mutations {
            self.hbase_table(&mutation.table)?;
            if mutation.rowkey.is_empty() {
                return Err(StoreError::InvalidMutation {
                    reason: "empty rowkey".to_owned(),
                });
            }
            if mutation.ops.is_empty() {
                return Err(StoreError::InvalidMutation {
                    reason: "mutation without operations".to_owned(),
                });
            }
        }
        // (table, ts) -> row batches for one mutateRowsTs; row deletes separately.
        let mut batches: BTreeMap<(String, i64), Vec<BatchMutation>> = BTreeMap::new();
        let mut row_deletes: Vec<(String, Vec<u8>, i64)> = Vec::new();
        for mutation in mutations {
            let mut by_ts: BTreeMap<i64, Vec<TMutation>> = BTreeMap::new();
            for op in mutation.ops {
                let (ts, thrift_op) = match op {
                    CellOp::Put { column, ts, value } => {
                        (ts, TMutation::new(false, column.into_bytes(), value, true))
                    }
                    // Thrift1 turns a delete of `f:q` at ts into Delete.addColumns (all versions
                    // <= ts), and of `f` into addFamily: the same semantics as the model.
                    CellOp::DeleteCell { column, ts } => {
                        (ts, TMutation::new(true, column.into_bytes(), None, true))
                    }
                    CellOp::DeleteFamily { family, ts } => {
                        (ts, TMutation::new(true, family.into_bytes(), None, true))
                    }
                    CellOp::DeleteRow { ts } => {
                        row_deletes.push((mutation.table.clone(), mutation.rowkey.clone(), ts));
                        continue;
                    }
                };
                by_ts.entry(ts).or_default().push(thrift_op);
            }
            for (ts, ops) in by_ts {
                batches
                    .entry((mutation.table.clone(), ts))
                    .or_default()
                    .push(BatchMutation::new(mutation.rowkey.clone(), ops));
            }
        }
        // Row deletes first: a mutation that deletes a row and puts into it at a later
        // timestamp must end with the put visible.
        for (table, rowkey, ts) in row_deletes {
            let hbase_table = self.hbase_table(&table)?;
            let name = hbase_table.clone().into_bytes();
            self.call("delete_all_row_ts", move |client| {
                client.delete_all_row_ts(name.clone(), rowkey.clone(), ts)
            })
            .await
            .map_err(|err| table_missing(&table, &hbase_table, err))?;
        }
        for ((table, ts), rows) in batches {
            let hbase_table = self.hbase_table(&table)?;
            let name = hbase_table.clone().into_bytes();
            self.call("mutate_rows_ts", move |client| {
                client.mutate_rows_ts(name.clone(), rows.clone(), ts)
            })
            .await
            .map_err(|err| table_missing(&table, &hbase_table, err))?;
        }
        // No change feed: HBase replication (through Kafka) is the feed.
        Ok(WriteReceipt::default())
    }

    /// One `isTableEnabled` per configured table, each within [`HEALTH_TIMEOUT`] and without
    /// retries: it answers for reachability, presence (an `IOError` naming
    /// `TableNotFoundException`) and state at once, and both HBase 1.x and 2.x serve it. The
    /// breaker applies: while it is open the check fails at once, and a successful check is
    /// what closes it when HBase is back.
    async fn health(&self) -> Result<()> {
        let mut tables: Vec<(&String, &String)> = self.tables.iter().collect();
        tables.sort();
        for (table, hbase_table) in tables {
            let name = hbase_table.clone().into_bytes();
            let enabled = self
                .call_within(
                    "is_table_enabled",
                    HEALTH_TIMEOUT.min(self.config.timeout),
                    0,
                    move |client| client.is_table_enabled(name.clone()),
                )
                .await
                .map_err(|err| match table_missing(table, hbase_table, err) {
                    StoreError::Unavailable(reason) => {
                        StoreError::Unavailable(format!("checking table `{table}`: {reason}"))
                    }
                    other => other,
                })?;
            if !enabled {
                return Err(StoreError::TableDisabled {
                    table: table.clone(),
                    store_table: hbase_table.clone(),
                });
            }
        }
        Ok(())
    }

    fn tables(&self) -> Vec<String> {
        self.names.clone()
    }
}
