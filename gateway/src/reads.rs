//! `get*`: rows and cells read from the store, shaped into `TRowResult`s and `TCell`s, and the
//! older versions a read at a timestamp or of several versions needs.

use std::collections::BTreeMap;

use hbase_thrift::hbase::{TCell, TColumn, TRowResult};
use hbidx_schema::model::split_column;
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

/// What a read at a timestamp needs to know of its table: where its rows are, which families
/// keep older versions, and the read's columns.
#[derive(Debug, Clone)]
pub(crate) struct VersionedRead {
    pub(crate) store_name: String,
    /// Families keeping more than one version; empty: the newest version is all there is.
    pub(crate) versions: BTreeMap<String, u32>,
    pub(crate) projection: Option<Vec<String>>,
}

impl Gateway {
    /// `row` as a read of the time range `[0, before_ts)` sees it: a cell whose newest version is
    /// too new is answered with the newest older version its family keeps. Only rows with such
    /// a cell in a family keeping versions cost a second read; `ResultShape` drops the rest.
    pub(crate) fn as_of(
        &self,
        read: &VersionedRead,
        row: Row,
        before_ts: Option<i64>,
    ) -> Answer<Row> {
        let Some(before_ts) = before_ts else {
            return Ok(row);
        };
        let keeps_older = |column: &str| {
            split_column(column).is_some_and(|(family, _)| read.versions.contains_key(family))
        };
        if !row
            .cells
            .iter()
            .any(|(column, cell)| cell.ts >= before_ts && keeps_older(column))
        {
            return Ok(row);
        }
        let versions = self.store.get_versions_sync(
            &read.store_name,
            &row.rowkey,
            read.projection.as_deref(),
        )?;
        let cells = versions
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(column, versions)| {
                let cell = versions.into_iter().find(|cell| cell.ts < before_ts)?;
                Some((column, cell))
            })
            .collect();
        Ok(Row {
            rowkey: row.rowkey,
            cells,
        })
    }

    pub(crate) fn read_rows(
        &self,
        table: &[u8],
        rows: Vec<Vec<u8>>,
        columns: &[Vec<u8>],
        before_ts: Option<i64>,
    ) -> Answer<Vec<TRowResult>> {
        let target = self.readable(table)?;
        let read = VersionedRead {
            projection: target.projection(columns)?,
            versions: target.info.versions.clone(),
            store_name: target.store_name,
        };
        let found =
            self.store
                .get_rows_sync(&read.store_name, &rows, read.projection.as_deref())?;
        let shape = ResultShape::with_ts(before_ts);
        let mut results = Vec::with_capacity(found.len());
        // Missing rows are left out, as HBase's Thrift server does.
        for row in found.into_iter().flatten() {
            shape.results(self.as_of(&read, row, before_ts)?, &mut results);
        }
        Ok(results)
    }

    /// `get`, `getVer`, `getVerTs`: the newest `versions` (1 when not given) versions older than
    /// `before_ts` of one column, or of every column of a family, column by column and newest
    /// first, as HBase's `Result.rawCells`.
    pub(crate) fn read_cells(
        &self,
        table: &[u8],
        row: Vec<u8>,
        column: &[u8],
        before_ts: Option<i64>,
        versions: Option<i32>,
    ) -> Answer<Vec<TCell>> {
        let wanted = match versions {
            None => 1,
            Some(versions) => usize::try_from(versions)
                .ok()
                .filter(|versions| *versions >= 1)
                .ok_or_else(|| {
                    Failure::IllegalArgument(format!("numVersions {versions}: must be at least 1"))
                })?,
        };
        let target = self.readable(table)?;
        if target.info.versions.is_empty() {
            // One version per cell: the plain row read answers.
            let results = self.read_rows(table, vec![row], &[column.to_vec()], before_ts)?;
            return Ok(results
                .into_iter()
                .flat_map(|result| result.columns.unwrap_or_default().into_values())
                .collect());
        }
        let projection = target.projection(&[column.to_vec()])?;
        let found =
            self.store
                .get_versions_sync(&target.store_name, &row, projection.as_deref())?;
        Ok(found
            .unwrap_or_default()
            .into_values()
            .flat_map(|versions| {
                versions
                    .into_iter()
                    .filter(|cell| before_ts.is_none_or(|ts| cell.ts < ts))
                    .take(wanted)
                    .map(|cell| TCell::new(cell.value, cell.ts))
            })
            .collect())
    }
}
