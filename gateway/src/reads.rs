//! `get*`: rows and cells read from the store, shaped into `TRowResult`s and `TCell`s.

use std::collections::BTreeMap;

use hbase_thrift::hbase::{TCell, TColumn, TRowResult};
use hbidx_store::{Cell, Row};

use crate::error::{Answer, Failure};
use crate::handler::Gateway;

/// How rows are turned into `TRowResult`s.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ResultShape {
    /// Only cells with a timestamp below this (HBase's time range `[0, ts)`).
    pub(crate) before_ts: Option<i64>,
    /// Fill `sortedColumns` instead of `columns` (`TScan.sortColumns`).
    pub(crate) sorted: bool,
    /// Cut rows into partial rows of this many cells (`TScan.batchSize`).
    pub(crate) cells_per_result: Option<usize>,
}

impl ResultShape {
    pub(crate) fn with_ts(before_ts: Option<i64>) -> Self {
        Self {
            before_ts,
            ..Self::default()
        }
    }

    fn cells<'a>(&self, row: &'a Row) -> impl Iterator<Item = (&'a String, &'a Cell)> {
        let before_ts = self.before_ts;
        row.cells
            .iter()
            .filter(move |(_, cell)| before_ts.is_none_or(|ts| cell.ts < ts))
    }

    /// The results of one row: none when no cell is left, several with `cells_per_result`.
    pub(crate) fn results(&self, row: Row, out: &mut impl Extend<TRowResult>) {
        let cells: Vec<(&String, &Cell)> = self.cells(&row).collect();
        if cells.is_empty() {
            return;
        }
        let chunk = self.cells_per_result.unwrap_or(cells.len()).max(1);
        out.extend(cells.chunks(chunk).map(|cells| {
            let tcell = |cell: &Cell| TCell::new(cell.value.clone(), cell.ts);
            if self.sorted {
                let sorted = cells
                    .iter()
                    .map(|(name, cell)| TColumn::new(name.as_bytes().to_vec(), tcell(cell)))
                    .collect::<Vec<_>>();
                TRowResult::new(row.rowkey.clone(), None, sorted)
            } else {
                let columns = cells
                    .iter()
                    .map(|(name, cell)| (name.as_bytes().to_vec(), tcell(cell)))
                    .collect::<BTreeMap<_, _>>();
                TRowResult::new(row.rowkey.clone(), columns, None)
            }
        }));
    }
}

impl Gateway {
    pub(crate) fn read_rows(
        &self,
        table: &[u8],
        rows: Vec<Vec<u8>>,
        columns: &[Vec<u8>],
        before_ts: Option<i64>,
    ) -> Answer<Vec<TRowResult>> {
        let target = self.readable(table)?;
        let projection = target.projection(columns)?;
        let found = self
            .store
            .get_rows_sync(&target.store_name, &rows, projection.as_deref())?;
        let shape = ResultShape::with_ts(before_ts);
        let mut results = Vec::with_capacity(found.len());
        // Missing rows are left out, as HBase's Thrift server does.
        for row in found.into_iter().flatten() {
            shape.results(row, &mut results);
        }
        Ok(results)
    }

    pub(crate) fn read_cells(
        &self,
        table: &[u8],
        row: Vec<u8>,
        column: &[u8],
        before_ts: Option<i64>,
        versions: Option<i32>,
    ) -> Answer<Vec<TCell>> {
        if versions.is_some_and(|versions| versions < 1) {
            return Err(Failure::IllegalArgument(
                "numVersions must be at least 1".to_owned(),
            ));
        }
        let results = self.read_rows(table, vec![row], &[column.to_vec()], before_ts)?;
        Ok(results
            .into_iter()
            .flat_map(|result| result.columns.unwrap_or_default().into_values())
            .collect())
    }
}
