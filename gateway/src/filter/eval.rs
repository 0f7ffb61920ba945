//! Running a parsed filter over rows the way an HBase 1.x region server does.
//!
//! Each filter answers the calls HBase's `Filter` interface makes, in the order a region
//! scanner makes them (see [`ScanFilter::filter_row`]): `filterAllRemaining` before each row and
//! each cell, `reset` and `filterRowKey` per row, `filterKeyValue` and `transformCell` per cell
//! in HBase order (family, qualifier, timestamp newest first), then `filterRowCells` and
//! `filterRow` once per row. The answers and state changes are each filter's own, including
//! its quirks (ColumnCountGetFilter ends a scan once a row has more columns than its limit;
//! MultipleColumnPrefixFilter with overlapping prefixes skips a family early), since an
//! application tested against the gateway should see what HBase would answer.

use super::node::Node;
use super::parse::Expr;

/// One cell as the filters see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cell {
    pub(crate) family: Vec<u8>,
    pub(crate) qualifier: Vec<u8>,
    pub(crate) timestamp: i64,
    pub(crate) value: Vec<u8>,
}

/// What a filter says of one cell (HBase's `Filter.ReturnCode`). `NextRow` skips the rest of
/// the cell's family in this row: HBase scans each family with its own store scanner, and the
/// code is that scanner's, so the row's next family is still offered to the filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReturnCode {
    Include,
    IncludeAndNextCol,
    Skip,
    NextCol,
    NextRow,
    /// Skip to the first cell of this family whose qualifier is at least this.
    SeekNextUsingHint(Vec<u8>),
}

/// A parsed filter with its state over one scan.
#[derive(Debug)]
pub(crate) struct ScanFilter {
    root: Node,
    /// The scan is over: `filterAllRemaining` said so.
    done: bool,
}

impl ScanFilter {
    pub(crate) fn new(expr: &Expr) -> Self {
        Self {
            root: Node::new(expr),
            done: false,
        }
    }

    /// For a reversed scan (see [`Node::set_reversed`]).
    pub(crate) fn set_reversed(&mut self, reversed: bool) {
        self.root.set_reversed(reversed);
    }

    /// Whether the filter ended the scan: no later row can pass.
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// One row through the filter: `cells` in HBase order (family, qualifier, newest first),
    /// at most `max_versions` included per column. `None` when the row is filtered out (or the
    /// scan is over).
    pub(crate) fn filter_row(
        &mut self,
        row: &[u8],
        cells: &[Cell],
        max_versions: usize,
    ) -> Option<Vec<Cell>> {
        if self.done || self.root.filter_all_remaining() {
            self.done = true;
            return None;
        }
        self.root.reset();
        if self.root.filter_row_key(row) {
            // HBase skips the row's cells with the filter still in place: a filter that is
            // now done (InclusiveStopFilter past its row, WhileMatchFilter) ends the scan there.
            self.done = self.root.filter_all_remaining();
            return None;
        }
        let mut out = Vec::new();
        let mut index = 0;
        'families: while index < cells.len() {
            let family = cells[index].family.as_slice();
            let end = cells[index..]
                .iter()
                .position(|cell| cell.family != family)
                .map_or(cells.len(), |offset| index + offset);
            let mut hint: Option<Vec<u8>> = None;
            let mut column: Option<&[u8]> = None;
            let mut column_included = 0;
            let mut column_done = false;
            for cell in &cells[index..end] {
                if self.root.filter_all_remaining() {
                    self.done = true;
                    break 'families;
                }
                if let Some(seek) = &hint {
                    if cell.qualifier.as_slice() < seek.as_slice() {
                        continue;
                    }
                    hint = None;
                }
                if column != Some(cell.qualifier.as_slice()) {
                    column = Some(cell.qualifier.as_slice());
                    column_included = 0;
                    column_done = false;
                }
                if column_done {
                    continue;
                }
                // HBase 1.x asks the filter before counting versions: the first versions the
                // filter includes are answered, and the filter also sees the version after the
                // last answered one (whose count then ends the column).
                match self.root.filter_cell(cell) {
                    ReturnCode::Include | ReturnCode::IncludeAndNextCol
                        if column_included >= max_versions =>
                    {
                        column_done = true;
                    }
                    ReturnCode::Include => {
                        out.push(self.root.transform(cell.clone()));
                        column_included += 1;
                    }
                    ReturnCode::IncludeAndNextCol => {
                        out.push(self.root.transform(cell.clone()));
                        column_done = true;
                    }
                    ReturnCode::Skip => {}
                    ReturnCode::NextCol => column_done = true,
                    ReturnCode::NextRow => break,
                    ReturnCode::SeekNextUsingHint(seek) => {
                        if seek.as_slice() > cell.qualifier.as_slice() {
                            hint = Some(seek);
                        }
                    }
                }
            }
            index = end;
        }
        self.root.filter_row_cells(&mut out);
        let keep = !out.is_empty() && !self.root.filter_row();
        // The store scanners ask filterAllRemaining at the next cell they look at, before the
        // next row's reset: a filter done now ends the scan after this row.
        if self.root.filter_all_remaining() {
            self.done = true;
        }
        keep.then_some(out)
    }
}
