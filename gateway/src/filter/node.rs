//! One filter's state and its answers to each call of HBase's `Filter` interface (`reset`,
//! `filterAllRemaining`, `filterRowKey`, `filterKeyValue`, `transformCell`, `filterRowCells`,
//! `filterRow`), as the HBase 1.x class of the same name answers it.

use std::collections::{BTreeSet, HashSet};
use std::ops::Bound;

use super::compare::Compare;
use super::eval::{Cell, ReturnCode};
use super::parse::{Expr, Spec};

/// The runtime state of one filter of the tree.
#[derive(Debug)]
pub(super) enum Node {
    KeyOnly {
        len_as_value: bool,
    },
    FirstKeyOnly {
        found: bool,
    },
    Prefix {
        prefix: Vec<u8>,
        filter_row: bool,
        passed_prefix: bool,
        /// A reversed scan passes the prefix going down (HBase sets the scan's direction on
        /// its filter: `Filter.setReversed`).
        reversed: bool,
    },
    ColumnPrefix(Vec<u8>),
    MultipleColumnPrefix(BTreeSet<Vec<u8>>),
    ColumnCountGet {
        limit: u64,
        count: u64,
    },
    ColumnPagination {
        limit: u64,
        offset: u64,
        count: u64,
    },
    ColumnRange {
        min: Option<Vec<u8>>,
        min_inclusive: bool,
        max: Option<Vec<u8>>,
        max_inclusive: bool,
    },
    InclusiveStop {
        stop: Vec<u8>,
        done: bool,
        /// A reversed scan stops below `stop`, not above.
        reversed: bool,
    },
    Page {
        size: u64,
        accepted: u64,
    },
    Timestamps {
        timestamps: BTreeSet<i64>,
    },
    Row {
        compare: Compare,
        filter_out: bool,
    },
    Family(Compare),
    Qualifier(Compare),
    Value(Compare),
    DependentColumn {
        family: Vec<u8>,
        qualifier: Vec<u8>,
        drop_dependent: bool,
        compare: Option<Compare>,
        timestamps: HashSet<i64>,
    },
    SingleColumnValue {
        family: Vec<u8>,
        qualifier: Vec<u8>,
        compare: Compare,
        filter_if_missing: bool,
        latest_version_only: bool,
        exclude: bool,
        found_column: bool,
        matched_column: bool,
    },
    List {
        must_pass_all: bool,
        children: Vec<Node>,
        /// Which children included the last cell: their transforms apply to it.
        included: Vec<bool>,
    },
    Skip {
        inner: Box<Node>,
        filter_row: bool,
    },
    While {
        inner: Box<Node>,
        all_remaining: bool,
    },
}

fn matches_column(cell: &Cell, family: &[u8], qualifier: &[u8]) -> bool {
    cell.family == family && cell.qualifier == qualifier
}

impl Node {
    pub(super) fn new(expr: &Expr) -> Node {
        let list = |must_pass_all: bool, operands: &[Expr]| Node::List {
            must_pass_all,
            children: operands.iter().map(Node::new).collect(),
            included: vec![false; operands.len()],
        };
        match expr {
            Expr::And(operands) => list(true, operands),
            Expr::Or(operands) => list(false, operands),
            Expr::Skip(inner) => Node::Skip {
                inner: Box::new(Node::new(inner)),
                filter_row: false,
            },
            Expr::While(inner) => Node::While {
                inner: Box::new(Node::new(inner)),
                all_remaining: false,
            },
            Expr::Filter(spec) => Node::from_spec(spec.clone()),
        }
    }

    fn from_spec(spec: Spec) -> Node {
        match spec {
            Spec::KeyOnly { len_as_value } => Node::KeyOnly { len_as_value },
            Spec::FirstKeyOnly => Node::FirstKeyOnly { found: false },
            Spec::Prefix(prefix) => Node::Prefix {
                prefix,
                filter_row: true,
                passed_prefix: false,
                reversed: false,
            },
            Spec::ColumnPrefix(prefix) => Node::ColumnPrefix(prefix),
            Spec::MultipleColumnPrefix(prefixes) => {
                Node::MultipleColumnPrefix(prefixes.into_iter().collect())
            }
            Spec::ColumnCountGet(limit) => Node::ColumnCountGet {
                limit: limit.into(),
                count: 0,
            },
            Spec::ColumnPagination { limit, offset } => Node::ColumnPagination {
                limit: limit.into(),
                offset: offset.into(),
                count: 0,
            },
            Spec::ColumnRange {
                min,
                min_inclusive,
                max,
                max_inclusive,
            } => Node::ColumnRange {
                min,
                min_inclusive,
                max,
                max_inclusive,
            },
            Spec::InclusiveStop(stop) => Node::InclusiveStop {
                stop,
                done: false,
                reversed: false,
            },
            Spec::Page(size) => Node::Page { size, accepted: 0 },
            Spec::Timestamps(timestamps) => Node::Timestamps {
                timestamps: timestamps.into_iter().collect(),
            },
            Spec::Row(compare) => Node::Row {
                compare,
                filter_out: false,
            },
            Spec::Family(compare) => Node::Family(compare),
            Spec::Qualifier(compare) => Node::Qualifier(compare),
            Spec::Value(compare) => Node::Value(compare),
            Spec::DependentColumn {
                family,
                qualifier,
                drop_dependent,
                compare,
            } => Node::DependentColumn {
                family,
                qualifier,
                drop_dependent,
                compare,
                timestamps: HashSet::new(),
            },
            Spec::SingleColumnValue {
                family,
                qualifier,
                compare,
                filter_if_missing,
                latest_version_only,
                exclude,
            } => Node::SingleColumnValue {
                family,
                qualifier,
                compare,
                filter_if_missing,
                latest_version_only,
                exclude,
                found_column: false,
                matched_column: false,
            },
        }
    }

    pub(super) fn reset(&mut self) {
        match self {
            Node::FirstKeyOnly { found } => *found = false,
            Node::Prefix { filter_row, .. } => *filter_row = true,
            Node::ColumnCountGet { count, .. } | Node::ColumnPagination { count, .. } => *count = 0,
            Node::Row { filter_out, .. } => *filter_out = false,
            Node::DependentColumn { timestamps, .. } => timestamps.clear(),
            Node::SingleColumnValue {
                found_column,
                matched_column,
                ..
            } => {
                *found_column = false;
                *matched_column = false;
            }
            Node::List { children, .. } => children.iter_mut().for_each(Node::reset),
            Node::Skip { inner, filter_row } => {
                inner.reset();
                *filter_row = false;
            }
            // WhileMatchFilter keeps its verdict across rows: that is its point.
            Node::While { inner, .. } => inner.reset(),
            _ => {}
        }
    }

    pub(super) fn filter_all_remaining(&self) -> bool {
        match self {
            Node::Prefix { passed_prefix, .. } => *passed_prefix,
            Node::ColumnCountGet { limit, count } => count > limit,
            Node::InclusiveStop { done, .. } => *done,
            Node::Page { size, accepted } => accepted >= size,
            Node::List {
                must_pass_all,
                children,
                ..
            } => {
                if *must_pass_all {
                    children.iter().any(Node::filter_all_remaining)
                } else {
                    children.iter().all(Node::filter_all_remaining)
                }
            }
            Node::While {
                inner,
                all_remaining,
            } => *all_remaining || inner.filter_all_remaining(),
            _ => false,
        }
    }

    /// Tells every filter the scan's direction (HBase's `Filter.setReversed`, which a region
    /// server calls on a reversed scan's filter): the filters that end a scan by row order
    /// (PrefixFilter, InclusiveStopFilter) then look the other way.
    pub(super) fn set_reversed(&mut self, to: bool) {
        match self {
            Node::Prefix { reversed, .. } | Node::InclusiveStop { reversed, .. } => *reversed = to,
            Node::List { children, .. } => children.iter_mut().for_each(|c| c.set_reversed(to)),
            Node::Skip { inner, .. } | Node::While { inner, .. } => inner.set_reversed(to),
            _ => {}
        }
    }

    /// Whether the row is filtered out by its key alone.
    pub(super) fn filter_row_key(&mut self, row: &[u8]) -> bool {
        match self {
            Node::Prefix {
                prefix,
                filter_row,
                passed_prefix,
                reversed,
            } => {
                if row.len() < prefix.len() {
                    return true;
                }
                let head = &row[..prefix.len()];
                let past = if *reversed {
                    head < prefix.as_slice()
                } else {
                    head > prefix.as_slice()
                };
                if past {
                    *passed_prefix = true;
                }
                *filter_row = head != prefix.as_slice();
                *filter_row
            }
            Node::InclusiveStop {
                stop,
                done,
                reversed,
            } => {
                let past = if *reversed {
                    stop.as_slice() > row
                } else {
                    stop.as_slice() < row
                };
                if past {
                    *done = true;
                }
                *done
            }
            Node::Row {
                compare,
                filter_out,
            } => {
                if !compare.passes(row) {
                    *filter_out = true;
                }
                *filter_out
            }
            // Every child is asked, no short cut, so each keeps its own per-row state.
            Node::List {
                must_pass_all,
                children,
                ..
            } => {
                let mut filtered = !*must_pass_all;
                for child in children.iter_mut() {
                    if *must_pass_all {
                        if child.filter_all_remaining() || child.filter_row_key(row) {
                            filtered = true;
                        }
                    } else if !child.filter_all_remaining() && !child.filter_row_key(row) {
                        filtered = false;
                    }
                }
                filtered
            }
            Node::While {
                inner,
                all_remaining,
            } => {
                if *all_remaining || inner.filter_all_remaining() {
                    return true;
                }
                let filtered = inner.filter_row_key(row);
                *all_remaining |= filtered;
                filtered
            }
            _ => false,
        }
    }

    pub(super) fn filter_cell(&mut self, cell: &Cell) -> ReturnCode {
        use ReturnCode::*;
        match self {
            Node::KeyOnly { .. } | Node::Page { .. } => Include,
            Node::FirstKeyOnly { found } => {
                if *found {
                    return NextRow;
                }
                *found = true;
                Include
            }
            Node::Prefix { filter_row, .. } => {
                if *filter_row {
                    NextRow
                } else {
                    Include
                }
            }
            Node::ColumnPrefix(prefix) => column_prefix(&cell.qualifier, prefix),
            Node::MultipleColumnPrefix(prefixes) => {
                multiple_column_prefix(&cell.qualifier, prefixes)
            }
            Node::ColumnCountGet { limit, count } => {
                *count += 1;
                if count > limit {
                    NextCol
                } else {
                    IncludeAndNextCol
                }
            }
            Node::ColumnPagination {
                limit,
                offset,
                count,
            } => {
                if *count >= *offset + *limit {
                    return NextRow;
                }
                let code = if count < offset {
                    NextCol
                } else {
                    IncludeAndNextCol
                };
                *count += 1;
                code
            }
            Node::ColumnRange {
                min,
                min_inclusive,
                max,
                max_inclusive,
            } => {
                let qualifier = cell.qualifier.as_slice();
                if let Some(min) = min {
                    if qualifier < min.as_slice() {
                        return SeekNextUsingHint(min.clone());
                    }
                    // HBase 1.x skips each version of an exclusive minimum one by one.
                    if !*min_inclusive && qualifier == min.as_slice() {
                        return Skip;
                    }
                }
                let Some(max) = max else {
                    return Include;
                };
                let below = if *max_inclusive {
                    qualifier <= max.as_slice()
                } else {
                    qualifier < max.as_slice()
                };
                if below { Include } else { NextRow }
            }
            Node::InclusiveStop { done, .. } => {
                if *done {
                    NextRow
                } else {
                    Include
                }
            }
            Node::Timestamps { timestamps } => {
                if timestamps.contains(&cell.timestamp) {
                    Include
                } else if timestamps.first().is_none_or(|&min| cell.timestamp < min) {
                    NextCol
                } else {
                    Skip
                }
            }
            Node::Row { filter_out, .. } => {
                if *filter_out {
                    NextRow
                } else {
                    Include
                }
            }
            Node::Family(compare) => {
                if !cell.family.is_empty() && !compare.passes(&cell.family) {
                    NextRow
                } else {
                    Include
                }
            }
            Node::Qualifier(compare) => {
                if !cell.qualifier.is_empty() && !compare.passes(&cell.qualifier) {
                    Skip
                } else {
                    Include
                }
            }
            Node::Value(compare) => {
                if compare.passes(&cell.value) {
                    Include
                } else {
                    Skip
                }
            }
            Node::DependentColumn {
                family,
                qualifier,
                drop_dependent,
                compare,
                timestamps,
            } => {
                // Other columns are kept for now; filter_row_cells drops those without a
                // dependent cell of the same timestamp.
                if !matches_column(cell, family, qualifier) {
                    return Include;
                }
                if compare
                    .as_ref()
                    .is_some_and(|compare| !compare.passes(&cell.value))
                {
                    return Skip;
                }
                timestamps.insert(cell.timestamp);
                if *drop_dependent { Skip } else { Include }
            }
            Node::SingleColumnValue {
                family,
                qualifier,
                compare,
                latest_version_only,
                found_column,
                matched_column,
                ..
            } => {
                if *matched_column {
                    return Include;
                }
                if *latest_version_only && *found_column {
                    return NextRow;
                }
                if !matches_column(cell, family, qualifier) {
                    return Include;
                }
                *found_column = true;
                if !compare.passes(&cell.value) {
                    return if *latest_version_only {
                        NextRow
                    } else {
                        Include
                    };
                }
                *matched_column = true;
                Include
            }
            Node::List {
                must_pass_all,
                children,
                included,
            } => {
                included.fill(false);
                if *must_pass_all {
                    let mut code = Include;
                    for (child, included) in children.iter_mut().zip(included.iter_mut()) {
                        if child.filter_all_remaining() {
                            return NextRow;
                        }
                        match child.filter_cell(cell) {
                            IncludeAndNextCol => {
                                code = IncludeAndNextCol;
                                *included = true;
                            }
                            Include => *included = true,
                            other => return other,
                        }
                    }
                    code
                } else {
                    // MUST_PASS_ONE asks every child; a cell no child includes is skipped, even
                    // when all of them would skip further (HBase 1.x answers SKIP here).
                    let mut code = Skip;
                    for (child, included) in children.iter_mut().zip(included.iter_mut()) {
                        if child.filter_all_remaining() {
                            continue;
                        }
                        match child.filter_cell(cell) {
                            Include => {
                                if code != IncludeAndNextCol {
                                    code = Include;
                                }
                                *included = true;
                            }
                            IncludeAndNextCol => {
                                code = IncludeAndNextCol;
                                *included = true;
                            }
                            _ => {}
                        }
                    }
                    code
                }
            }
            Node::Skip { inner, filter_row } => {
                let code = inner.filter_cell(cell);
                *filter_row |= code != Include;
                code
            }
            Node::While {
                inner,
                all_remaining,
            } => {
                let code = inner.filter_cell(cell);
                *all_remaining |= code != Include;
                code
            }
        }
    }

    /// The cell as answered, once included.
    pub(super) fn transform(&self, mut cell: Cell) -> Cell {
        match self {
            Node::KeyOnly { len_as_value } => {
                cell.value = if *len_as_value {
                    // The value's length as a 4-byte big-endian int (values are far below
                    // 2 GiB: the gateway's string limit bounds them).
                    i32::try_from(cell.value.len())
                        .unwrap_or(i32::MAX)
                        .to_be_bytes()
                        .to_vec()
                } else {
                    Vec::new()
                };
                cell
            }
            Node::List {
                children, included, ..
            } => children
                .iter()
                .zip(included)
                .filter(|(_, included)| **included)
                .fold(cell, |cell, (child, _)| child.transform(cell)),
            Node::Skip { inner, .. } | Node::While { inner, .. } => inner.transform(cell),
            _ => cell,
        }
    }

    pub(super) fn filter_row_cells(&mut self, cells: &mut Vec<Cell>) {
        match self {
            Node::DependentColumn { timestamps, .. } => {
                cells.retain(|cell| timestamps.contains(&cell.timestamp));
            }
            Node::SingleColumnValue {
                family,
                qualifier,
                exclude: true,
                ..
            } => cells.retain(|cell| !matches_column(cell, family, qualifier)),
            Node::List { children, .. } => {
                for child in children.iter_mut() {
                    child.filter_row_cells(cells);
                }
            }
            // SkipFilter and WhileMatchFilter don't pass filterRowCells on (HBase's don't).
            _ => {}
        }
    }

    /// The last say on a row with cells left; true drops it.
    pub(super) fn filter_row(&mut self) -> bool {
        match self {
            Node::Prefix { filter_row, .. } => *filter_row,
            Node::Page { size, accepted } => {
                *accepted += 1;
                accepted > size
            }
            Node::Row { filter_out, .. } => *filter_out,
            Node::SingleColumnValue {
                filter_if_missing,
                found_column,
                matched_column,
                ..
            } => {
                if *found_column {
                    !*matched_column
                } else {
                    *filter_if_missing
                }
            }
            // Stops at the first child that decides, as HBase's FilterList does: the children
            // after it are not asked (a PageFilter there doesn't count the row).
            Node::List {
                must_pass_all,
                children,
                ..
            } => {
                for child in children.iter_mut() {
                    if *must_pass_all {
                        if child.filter_all_remaining() || child.filter_row() {
                            return true;
                        }
                    } else if !child.filter_all_remaining() && !child.filter_row() {
                        return false;
                    }
                }
                !*must_pass_all
            }
            Node::Skip { filter_row, .. } => *filter_row,
            Node::While {
                inner,
                all_remaining,
            } => {
                let filtered = inner.filter_row();
                *all_remaining |= filtered;
                filtered
            }
            _ => false,
        }
    }
}

fn column_prefix(qualifier: &[u8], prefix: &[u8]) -> ReturnCode {
    if qualifier.len() < prefix.len() {
        if qualifier <= &prefix[..qualifier.len()] {
            ReturnCode::SeekNextUsingHint(prefix.to_vec())
        } else {
            ReturnCode::NextRow
        }
    } else {
        match qualifier[..prefix.len()].cmp(prefix) {
            std::cmp::Ordering::Less => ReturnCode::SeekNextUsingHint(prefix.to_vec()),
            std::cmp::Ordering::Greater => ReturnCode::NextRow,
            std::cmp::Ordering::Equal => ReturnCode::Include,
        }
    }
}

/// HBase's MultipleColumnPrefixFilter looks only at the greatest prefix not above the qualifier,
/// so with overlapping prefixes (`a`, `ab`) a qualifier `ac` is not included.
fn multiple_column_prefix(qualifier: &[u8], prefixes: &BTreeSet<Vec<u8>>) -> ReturnCode {
    if prefixes.is_empty() {
        return ReturnCode::Include;
    }
    let mut not_above = prefixes.range::<[u8], _>((Bound::Unbounded, Bound::Included(qualifier)));
    match not_above.next_back() {
        Some(largest) => {
            if qualifier.starts_with(largest) {
                return ReturnCode::Include;
            }
            match prefixes
                .range::<[u8], _>((Bound::Excluded(largest.as_slice()), Bound::Unbounded))
                .next()
            {
                Some(next) => ReturnCode::SeekNextUsingHint(next.clone()),
                None => ReturnCode::NextRow,
            }
        }
        None => match prefixes.first() {
            Some(first) => ReturnCode::SeekNextUsingHint(first.clone()),
            None => ReturnCode::Include,
        },
    }
}
