//! `atomicIncrement`, `increment(Rows)`, `append` and `checkAndPut`: HBase's read-modify-write
//! calls. Each reads a row and writes what it makes of it with no other write to the store in
//! between ([`EmbeddedStore::mutate_row_with`] holds the store's writer mutex across both), so
//! concurrent increments of one counter never lose an update, and each write goes through the
//! change feed like any other, so the index sees it.
//!
//! [`EmbeddedStore::mutate_row_with`]: hbidx_store::EmbeddedStore::mutate_row_with

use hbase_thrift::hbase::{Mutation as TMutation, TAppend, TCell, TIncrement};
use hbidx_schema::model::CellOp;
use hbidx_store::{RowState, StoredCell, now_ms};

use crate::error::{Answer, Failure};
use crate::handler::Gateway;
use crate::parse::ColumnSpec;
use crate::target::Target;

/// The newest value of `column` and its timestamp, if the row has one.
fn newest<'a>(state: &'a RowState, column: &str) -> Option<(&'a [u8], i64)> {
    match state.cells.get(column) {
        Some(StoredCell {
            ts,
            value: Some(value),
        }) => Some((value, *ts)),
        _ => None,
    }
}

/// The timestamp of a read-modify-write's new version: the server's clock, or the replaced
/// version's timestamp when a client chose a later one, so the new value is the newest (at an
/// equal timestamp the later write wins). HBase does the same; not going above the replaced
/// version keeps a plain put right after an increment in the same millisecond the newest, as
/// happybase's `counter_set` expects.
fn next_ts(now: i64, current: Option<i64>) -> i64 {
    current.map_or(now, |ts| now.max(ts))
}

impl Target {
    /// The column of an increment, append or check: `family:qualifier` of a known family.
    /// With `bare_family_is_empty_qualifier`, a bare `family` means `family:` (HBase's
    /// `atomicIncrement` does so); otherwise it is refused.
    fn cell_column(
        &self,
        column: &[u8],
        what: &str,
        bare_family_is_empty_qualifier: bool,
    ) -> Answer<String> {
        let spec = ColumnSpec::parse(column)?;
        self.check_family(spec.family_name())?;
        match spec {
            ColumnSpec::Column(column) => Ok(column),
            ColumnSpec::Family(family) if bare_family_is_empty_qualifier => {
                Ok(format!("{family}:"))
            }
            ColumnSpec::Family(family) => Err(Failure::IllegalArgument(format!(
                "{what} of `{family}` has no qualifier: name a column `family:qualifier`"
            ))),
        }
    }
}

impl Gateway {
    /// Adds `amount` to the 8-byte big-endian counter in `column` (a missing counter counts as
    /// 0) and returns the new value. An increment by 0 of an existing counter writes nothing.
    pub(crate) fn increment(
        &self,
        table: &[u8],
        row: &[u8],
        column: &[u8],
        amount: i64,
        bare_family_is_empty_qualifier: bool,
    ) -> Answer<i64> {
        let target = self.target(table)?;
        target.check_writable()?;
        let column = target.cell_column(column, "an increment", bare_family_is_empty_qualifier)?;
        let now = now_ms();
        self.store
            .mutate_row_with(&target.store_name, row, |state| {
                let current = newest(state, &column);
                let value = match current {
                    None => 0,
                    Some((bytes, _)) => {
                        let bytes: [u8; 8] = bytes.try_into().map_err(|_| {
                            Failure::Io(format!(
                                "DoNotRetryIOException: Attempted to increment field that isn't \
                                 64 bits wide: `{column}` holds {} bytes",
                                bytes.len()
                            ))
                        })?;
                        i64::from_be_bytes(bytes)
                    }
                };
                // Java's long arithmetic, which HBase's counters use, wraps.
                let next = value.wrapping_add(amount);
                if amount == 0 && current.is_some() {
                    return Ok((Vec::new(), next));
                }
                let put = CellOp::Put {
                    column: column.clone(),
                    ts: next_ts(now, current.map(|(_, ts)| ts)),
                    value: next.to_be_bytes().to_vec(),
                };
                Ok((vec![put], next))
            })
    }

    /// `increment`: one `TIncrement`, every field required.
    pub(crate) fn increment_one(&self, increment: TIncrement) -> Answer<()> {
        let missing = |field: &str| Failure::IllegalArgument(format!("TIncrement has no {field}"));
        let table = increment.table.ok_or_else(|| missing("table"))?;
        let row = increment.row.ok_or_else(|| missing("row"))?;
        let column = increment.column.ok_or_else(|| missing("column"))?;
        let amount = increment.ammount.ok_or_else(|| missing("ammount"))?;
        self.increment(&table, &row, &column, amount, false)
            .map(|_| ())
    }

    /// `append`: the values appended to the columns' newest values (a missing cell counts as
    /// empty), all columns of the row at once; answers the new cells.
    pub(crate) fn append(&self, append: TAppend) -> Answer<Vec<TCell>> {
        let missing = |field: &str| Failure::IllegalArgument(format!("TAppend has no {field}"));
        let table = append.table.ok_or_else(|| missing("table"))?;
        let row = append.row.ok_or_else(|| missing("row"))?;
        let columns = append.columns.unwrap_or_default();
        let values = append.values.unwrap_or_default();
        if columns.len() != values.len() {
            return Err(Failure::IllegalArgument(format!(
                "TAppend has {} columns and {} values: they must pair up",
                columns.len(),
                values.len()
            )));
        }
        let target = self.target(&table)?;
        target.check_writable()?;
        let mut suffixes = Vec::with_capacity(columns.len());
        for (column, value) in columns.iter().zip(values) {
            suffixes.push((target.cell_column(column, "an append", false)?, value));
        }
        if suffixes.is_empty() {
            return Ok(Vec::new());
        }
        let now = now_ms();
        self.store
            .mutate_row_with(&target.store_name, &row, |state| {
                let mut ops: Vec<CellOp> = Vec::with_capacity(suffixes.len());
                let mut cells = Vec::with_capacity(suffixes.len());
                for (column, suffix) in &suffixes {
                    // A column named twice appends to what the call appended before.
                    let earlier = ops.iter().rev().find_map(|op| match op {
                        CellOp::Put {
                            column: put, value, ..
                        } if put == column => Some(value.as_slice()),
                        _ => None,
                    });
                    let current = newest(state, column);
                    let mut value = earlier
                        .or(current.map(|(value, _)| value))
                        .unwrap_or_default()
                        .to_vec();
                    value.extend_from_slice(suffix);
                    let ts = next_ts(now, current.map(|(_, ts)| ts));
                    cells.push(TCell::new(value.clone(), ts));
                    ops.push(CellOp::Put {
                        column: column.clone(),
                        ts,
                        value,
                    });
                }
                Ok((ops, cells))
            })
    }

    /// `checkAndPut`: writes `put` when `column`'s newest value equals `expected`; an empty
    /// `expected` matches a missing cell (and an empty value), as in HBase's Thrift server,
    /// which sends a missing value as empty.
    pub(crate) fn check_and_put(
        &self,
        table: &[u8],
        row: &[u8],
        column: &[u8],
        expected: Vec<u8>,
        put: TMutation,
    ) -> Answer<bool> {
        let target = self.target(table)?;
        target.check_writable()?;
        let checked = target.cell_column(column, "a check", false)?;
        let put_column = put
            .column
            .ok_or_else(|| Failure::IllegalArgument("the put has no column".to_owned()))?;
        let put_column = target.cell_column(&put_column, "a put", false)?;
        let value = put.value.unwrap_or_default();
        let ts = now_ms();
        self.store
            .mutate_row_with(&target.store_name, row, |state| {
                let matches = match newest(state, &checked) {
                    Some((current, _)) => current == expected.as_slice(),
                    None => expected.is_empty(),
                };
                if !matches {
                    return Ok((Vec::new(), false));
                }
                let put = CellOp::Put {
                    column: put_column.clone(),
                    ts,
                    value: value.clone(),
                };
                Ok((vec![put], true))
            })
    }
}
