//! `mutateRow*` and `deleteAll*`: Thrift mutations written to the store through its change feed.

use hbase_thrift::hbase::Mutation as TMutation;
use hbidx_schema::model::{CellOp, Mutation};
use hbidx_store::now_ms;

use crate::error::{Answer, Failure};
use crate::handler::Gateway;

impl Gateway {
    pub(crate) fn write(
        &self,
        table: &[u8],
        rows: Vec<(Vec<u8>, Vec<TMutation>)>,
        ts: Option<i64>,
    ) -> Answer<()> {
        let ts = match ts {
            Some(ts) if ts < 0 => {
                return Err(Failure::IllegalArgument(format!(
                    "timestamp {ts} is negative"
                )));
            }
            Some(ts) => ts,
            None => now_ms(),
        };
        let target = self.target(table)?;
        target.check_writable()?;
        let mut mutations = Vec::with_capacity(rows.len());
        for (rowkey, row_mutations) in rows {
            let ops = target.ops(row_mutations, ts)?;
            // HBase skips empty puts and deletes.
            if ops.is_empty() {
                continue;
            }
            mutations.push(Mutation {
                table: target.store_name.clone(),
                rowkey,
                ops,
            });
        }
        self.store.mutate_sync(mutations)?;
        Ok(())
    }

    pub(crate) fn delete_all(
        &self,
        table: &[u8],
        row: Vec<u8>,
        column: &[u8],
        ts: Option<i64>,
    ) -> Answer<()> {
        let mutation = TMutation::new(true, column.to_vec(), None, true);
        self.write(table, vec![(row, vec![mutation])], ts)
    }

    pub(crate) fn delete_row(&self, table: &[u8], row: Vec<u8>, ts: Option<i64>) -> Answer<()> {
        let ts = ts.unwrap_or_else(now_ms);
        if ts < 0 {
            return Err(Failure::IllegalArgument(format!(
                "timestamp {ts} is negative"
            )));
        }
        let target = self.target(table)?;
        target.check_writable()?;
        self.store.mutate_sync(vec![Mutation {
            table: target.store_name,
            rowkey: row,
            ops: vec![CellOp::DeleteRow { ts }],
        }])?;
        Ok(())
    }
}
