//! The demo table: which columns a generated person is written to, in any table whose config
//! has phone, idcard and name fields. The demo and the benchmark load people through it.

use anyhow::{Context, Result, bail};
use hbidx_schema::config::{FieldKind, HbidxConfig, TableConfig};
use hbidx_schema::model::{CellOp, Mutation};

use crate::people::Person;

/// The demo data set is deterministic so the printed examples match what was loaded.
pub const DEMO_SEED: u64 = 20_261_120;

/// The columns a person is written to, found through the table's field kinds so the demo works
/// with any config that has phone, idcard and name fields.
pub struct PersonColumns {
    name: String,
    phone: String,
    idcard: String,
    city: String,
}

/// A put of `value` into `column` at `ts`.
fn put(column: &str, value: &str, ts: i64) -> CellOp {
    CellOp::Put {
        column: column.to_string(),
        ts,
        value: value.as_bytes().to_vec(),
    }
}

impl PersonColumns {
    pub fn for_table(table: &TableConfig) -> Result<Self> {
        let column_of = |kind: FieldKind| {
            table
                .fields
                .iter()
                .find(|f| f.kind == kind)
                .map(|f| f.column.clone())
                .with_context(|| {
                    format!(
                        "table \"{}\" has no {} field; the demo needs one",
                        table.name,
                        kind.as_str()
                    )
                })
        };
        let name = column_of(FieldKind::Name)?;
        let family = name.split(':').next().unwrap_or("info").to_string();
        Ok(Self {
            phone: column_of(FieldKind::Phone)?,
            idcard: column_of(FieldKind::Idcard)?,
            city: format!("{family}:city"),
            name,
        })
    }

    pub fn mutation(&self, table: &TableConfig, person: &Person, ts: i64) -> Result<Mutation> {
        let rowkey = table
            .rowkey
            .encode_random(&person.uid, &mut rand::rng())
            .with_context(|| format!("encoding the rowkey of {}", person.uid))?;
        let put = |column: &str, value: &str| put(column, value, ts);
        Ok(Mutation {
            table: table.name.clone(),
            rowkey,
            ops: vec![
                put(&self.name, &person.name),
                put(&self.phone, &person.phone),
                put(&self.idcard, &person.idcard),
                put(&self.city, &person.city),
            ],
        })
    }

    /// An update of the person `uid`: a new phone and name, the other columns untouched. The
    /// rowkey must be a function of the uid, so that it is the same row.
    pub fn update(
        &self,
        table: &TableConfig,
        uid: &str,
        phone: &str,
        name: &str,
        ts: i64,
    ) -> Result<Mutation> {
        let rowkey = table
            .rowkey
            .encode(uid)
            .with_context(|| format!("encoding the rowkey of {uid} (updates need the same row)"))?;
        Ok(Mutation {
            table: table.name.clone(),
            rowkey,
            ops: vec![put(&self.phone, phone, ts), put(&self.name, name, ts)],
        })
    }
}

/// The table the demo loads: `user`, else the config's first.
pub fn demo_table(config: &HbidxConfig) -> Result<&TableConfig> {
    match config.table("user").or_else(|| config.tables.first()) {
        Some(table) => Ok(table),
        None => bail!("the config has no tables"),
    }
}
