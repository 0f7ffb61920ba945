//! HBase's filter language, the `TScan.filterString` of `scannerOpenWithScan`: parsed
//! (parse.rs, comparators in compare.rs) into a tree of filters (node.rs) that a scanner runs
//! over each row (eval.rs) before the row is cut into `batchSize` parts and handed out.
//!
//! [`ScanFilter::parse`] checks the whole string when the scanner opens, so a bad filter is an
//! error of `scannerOpenWithScan` naming the byte offset and what was expected there;
//! [`ScanFilter::apply`] then filters each row the store returns, and [`ScanFilter::is_done`]
//! says when a filter (PageFilter, WhileMatchFilter, InclusiveStopFilter, a PrefixFilter past
//! its prefix, ColumnCountGetFilter over its limit) has ended the scan.
//!
//! A filter's state lives as long as its scanner. HBase keeps it per region: on a table split
//! into regions, PageFilter(n) answers up to n rows per region and WhileMatchFilter starts over
//! in each. The gateway's scanner reads the table as one range, so its filters see the scan as
//! one region: PageFilter(n) answers at most n rows in all.
//!
//! The supported filters, comparators and differences from HBase are listed in
//! docs/guide/thrift-gateway.md ("The filter language").

mod compare;
mod eval;
mod node;
mod parse;

use hbidx_store::Row;

pub(crate) use parse::MAX_DEPTH;

/// A filter string that can't be used, with the byte offset where the problem starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// The string doesn't follow the language's grammar.
    #[error("filter string, byte {position}: expected {expected}, found {found}")]
    Syntax {
        position: usize,
        expected: &'static str,
        found: String,
    },
    /// A name that isn't one of the language's filters.
    #[error(
        "filter string, byte {position}: unknown filter `{name}`; the filters are {}",
        parse::FILTER_NAMES.join(", ")
    )]
    UnknownFilter { position: usize, name: String },
    /// A known filter with arguments it doesn't take.
    #[error("filter string, byte {position}: {filter} {reason}")]
    Argument {
        position: usize,
        filter: &'static str,
        reason: String,
    },
    /// SKIP, WHILE and parentheses nested deeper than [`MAX_DEPTH`].
    #[error("filter string, byte {position}: nested more than {MAX_DEPTH} levels deep")]
    TooDeep { position: usize },
    /// More filters, or regex comparators, than one string may hold.
    #[error("filter string, byte {position}: more than {limit} {what} in one filter string")]
    TooMany {
        position: usize,
        what: &'static str,
        limit: usize,
    },
}

impl FilterError {
    /// The byte offset in the filter string where the problem starts.
    #[cfg(test)]
    pub(crate) fn position(&self) -> usize {
        match self {
            FilterError::Syntax { position, .. }
            | FilterError::UnknownFilter { position, .. }
            | FilterError::Argument { position, .. }
            | FilterError::TooDeep { position }
            | FilterError::TooMany { position, .. } => *position,
        }
    }
}

/// A scanner's filter: the parsed string and its state over the scan.
#[derive(Debug)]
pub(crate) struct ScanFilter {
    inner: eval::ScanFilter,
}

/// Thrift scans answer one version per column (`TScan` has no `maxVersions`).
const SCAN_VERSIONS: usize = 1;

impl ScanFilter {
    /// Parses a filter string. An empty one is an error, as in HBase ("Incorrect Filter
    /// String").
    pub(crate) fn parse(text: &[u8]) -> Result<Self, FilterError> {
        let expr = parse::parse(text)?;
        Ok(Self {
            inner: eval::ScanFilter::new(&expr),
        })
    }

    /// The scan runs in descending rowkey order: the filters that end a scan by row order
    /// look the other way, as HBase's region server tells them (`Filter.setReversed`).
    pub(crate) fn reversed(mut self, reversed: bool) -> Self {
        self.inner.set_reversed(reversed);
        self
    }

    /// Whether the filter has ended the scan: no later row can pass.
    pub(crate) fn is_done(&self) -> bool {
        self.inner.is_done()
    }

    /// One store row through the filter: the cells it answers (the scan's time range applied
    /// first, as HBase checks it before the filter), or `None` when the row is filtered out.
    ///
    /// The evaluator takes every version of a column in the time range, newest first, and
    /// answers at most [`SCAN_VERSIONS`] of those the filter includes (HBase 1.x filters before
    /// it counts versions), so a store row with older versions converts into more cells here.
    pub(crate) fn apply(&mut self, row: Row, before_ts: Option<i64>) -> Option<Row> {
        let mut cells: Vec<eval::Cell> = row
            .cells
            .iter()
            .filter(|(_, cell)| before_ts.is_none_or(|ts| cell.ts < ts))
            .map(|(column, cell)| {
                let (family, qualifier) = column.split_once(':').unwrap_or((column, ""));
                eval::Cell {
                    family: family.as_bytes().to_vec(),
                    qualifier: qualifier.as_bytes().to_vec(),
                    timestamp: cell.ts,
                    value: cell.value.clone(),
                }
            })
            .collect();
        // The store orders columns as `family:qualifier` strings, so `cf1:a` before `cf:a`;
        // HBase orders by family first.
        cells.sort_by(|a, b| {
            (&a.family, &a.qualifier, b.timestamp).cmp(&(&b.family, &b.qualifier, a.timestamp))
        });
        let answered = self.inner.filter_row(&row.rowkey, &cells, SCAN_VERSIONS)?;
        let cells = answered
            .into_iter()
            .map(|cell| {
                let column = format!(
                    "{}:{}",
                    String::from_utf8_lossy(&cell.family),
                    String::from_utf8_lossy(&cell.qualifier)
                );
                let value = hbidx_store::Cell {
                    value: cell.value,
                    ts: cell.timestamp,
                };
                (column, value)
            })
            .collect();
        Some(Row {
            rowkey: row.rowkey,
            cells,
        })
    }
}

#[cfg(test)]
mod eval_tests;
#[cfg(test)]
mod parse_tests;
