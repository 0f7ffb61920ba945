//! The table registry: which tables are served, how created tables are persisted in the meta
//! keyspace, and the operations on them (create, delete, enable). Configured tables only ever
//! pass through here when the store opens.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use fjall::PersistMode;
use serde::{Deserialize, Serialize};

use crate::error::{Result, StoreError, escape_key};

use super::{
    EmbeddedStore, MAX_KEYSPACE_NAME, TABLE_KEY_PREFIX, TABLE_RECORD_V1, TABLE_RECORD_V2, Table,
    TableInfo, TableOrigin, escape_table_name, lock,
};

/// A created table as persisted in the meta keyspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct TableRecord {
    pub(super) families: Vec<String>,
    pub(super) enabled: bool,
    /// The families keeping more than one version, and how many.
    pub(super) versions: BTreeMap<String, u32>,
}

/// A [`TableRecord`] as written before families could keep versions.
#[derive(Deserialize)]
struct TableRecordV1 {
    families: Vec<String>,
    enabled: bool,
}

impl TableRecord {
    fn encode(&self) -> Result<Vec<u8>> {
        postcard::to_extend(self, vec![TABLE_RECORD_V2])
            .map_err(|error| StoreError::Storage(Box::new(error)))
    }

    pub(super) fn decode(name: &str, bytes: &[u8]) -> Result<Self> {
        let corrupt = |reason: String| StoreError::Corrupt {
            table: "<meta>".to_owned(),
            key: escape_key(&table_key(name)),
            reason,
        };
        match bytes.split_first() {
            Some((&TABLE_RECORD_V2, rest)) => postcard::from_bytes(rest)
                .map_err(|error| corrupt(format!("table record: {error}"))),
            Some((&TABLE_RECORD_V1, rest)) => postcard::from_bytes(rest)
                .map(|record: TableRecordV1| TableRecord {
                    families: record.families,
                    enabled: record.enabled,
                    versions: BTreeMap::new(),
                })
                .map_err(|error| corrupt(format!("table record: {error}"))),
            Some((version, _)) => Err(corrupt(format!(
                "table record version {version}, this build reads {TABLE_RECORD_V1} and \
                 {TABLE_RECORD_V2}"
            ))),
            None => Err(corrupt("empty table record".to_owned())),
        }
    }
}

/// The tables being served, in the order they were opened or created.
#[derive(Default)]
pub(super) struct Registry {
    pub(super) by_name: HashMap<String, Arc<Table>>,
    pub(super) order: Vec<Arc<Table>>,
}

impl Registry {
    pub(super) fn insert(&mut self, table: Arc<Table>) {
        self.by_name.insert(table.name.clone(), table.clone());
        self.order.push(table);
    }

    fn remove(&mut self, name: &str) -> Option<Arc<Table>> {
        let table = self.by_name.remove(name)?;
        self.order.retain(|other| !Arc::ptr_eq(other, &table));
        Some(table)
    }
}

fn table_key(table: &str) -> Vec<u8> {
    [TABLE_KEY_PREFIX, table.as_bytes()].concat()
}

/// Checks a table name against what the keyspace names can hold.
pub(super) fn validate_table_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(StoreError::InvalidRequest {
            reason: "empty table name".to_owned(),
        });
    }
    let longest = format!("rows.{}", escape_table_name(name));
    if longest.len() > MAX_KEYSPACE_NAME {
        return Err(StoreError::InvalidRequest {
            reason: format!("table name `{name}` is too long for the embedded store"),
        });
    }
    Ok(())
}

/// Checks the families of a table being created: at least one, each a valid family name, no
/// duplicates.
fn validate_families(table: &str, families: &[String]) -> Result<()> {
    let invalid = |reason: String| Err(StoreError::InvalidRequest { reason });
    if families.is_empty() {
        return invalid(format!("table `{table}` needs at least one column family"));
    }
    for (index, family) in families.iter().enumerate() {
        if family.is_empty() || family.contains(':') || family.chars().any(char::is_control) {
            return invalid(format!(
                "column family `{}` of table `{table}` must be non-empty, without `:` or control characters",
                family.escape_debug()
            ));
        }
        if families[..index].contains(family) {
            return invalid(format!(
                "column family `{family}` is given twice for table `{table}`"
            ));
        }
    }
    Ok(())
}

impl EmbeddedStore {
    /// What the store knows about `table`.
    pub fn table_info(&self, table: &str) -> Result<TableInfo> {
        self.table(table).map(|table| table.info())
    }

    /// Every table served, configured ones first (in `open` order), then created ones (in
    /// creation order, then name order after a restart).
    pub fn table_infos(&self) -> Vec<TableInfo> {
        self.registry()
            .order
            .iter()
            .map(|table| table.info())
            .collect()
    }

    /// Creates an empty table with `families`, each keeping one version per cell, enabled,
    /// rows only (no change feed), and remembers it across restarts.
    ///
    /// Errors: [`StoreError::TableExists`] when a table of that name is served,
    /// [`StoreError::InvalidRequest`] for an unusable name or family list.
    pub fn create_table(&self, name: &str, families: &[String]) -> Result<TableInfo> {
        self.create_table_with_versions(name, families, &BTreeMap::new())
    }

    /// [`EmbeddedStore::create_table`] where the families `versions` names keep that many
    /// versions per cell (HBase's `VERSIONS`; at least 1).
    pub fn create_table_with_versions(
        &self,
        name: &str,
        families: &[String],
        versions: &BTreeMap<String, u32>,
    ) -> Result<TableInfo> {
        validate_table_name(name)?;
        validate_families(name, families)?;
        for (family, count) in versions {
            if !families.contains(family) || *count == 0 {
                return Err(StoreError::InvalidRequest {
                    reason: format!(
                        "`{family}` keeping {count} versions: versions must be at least 1, for a \
                         family of the table"
                    ),
                });
            }
        }
        let versions: BTreeMap<String, u32> = versions
            .iter()
            .filter(|(_, count)| **count > 1)
            .map(|(family, count)| (family.clone(), *count))
            .collect();
        let _writing = lock(&self.writer);
        self.check_writable()?;
        if self.find_table(name).is_some() {
            return Err(StoreError::TableExists(name.to_owned()));
        }
        // Keyspaces first, then the record: a crash in between leaves empty keyspaces that a
        // later create of the same name simply reuses.
        let spec = super::TableSpec {
            name: name.to_owned(),
            families: Some(families.to_vec()),
            versions,
        };
        let table = Self::open_table(
            &self.db,
            &self.meta,
            &spec,
            TableOrigin::Created,
            true,
            self.budget,
        )?;
        if !table.rows.is_empty()? {
            // Rows of a table that an earlier config named: never adopt or wipe them silently.
            return Err(StoreError::InvalidRequest {
                reason: format!(
                    "the data dir already holds rows of a table `{name}` (from an earlier config); \
                     add it back to the config instead"
                ),
            });
        }
        self.write_record(name, families, &spec.versions, true)?;
        let info = table.info();
        self.registry_mut().insert(Arc::new(table));
        tracing::info!(table = %name, families = ?families, "created table");
        Ok(info)
    }

    /// Deletes a created table and all its rows.
    ///
    /// Errors: [`StoreError::UnknownTable`], or [`StoreError::ConfiguredTable`] for a table from
    /// the config (remove it there instead).
    pub fn delete_table(&self, name: &str) -> Result<()> {
        let _writing = lock(&self.writer);
        self.check_writable()?;
        let table = self.created_table(name)?;
        // Unregister first so no new read starts on it; running reads keep their `Arc` and
        // fjall keeps the files until the last handle is gone. The rows go before the record:
        // a crash in between brings the table back empty, never leaves rows without a table.
        self.registry_mut().remove(name);
        self.db.delete_keyspace(table.rows.clone())?;
        if let Some(versions) = &table.versions {
            self.db.delete_keyspace(versions.keyspace.clone())?;
        }
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        batch.remove(&self.meta, table_key(name));
        batch.commit().map_err(|error| self.write_failed(error))?;
        tracing::info!(table = %name, "deleted table");
        Ok(())
    }

    /// Sets HBase's enabled flag of a created table (persisted). Configured tables are always
    /// enabled: [`StoreError::ConfiguredTable`].
    pub fn set_table_enabled(&self, name: &str, enabled: bool) -> Result<()> {
        let _writing = lock(&self.writer);
        self.check_writable()?;
        let table = self.created_table(name)?;
        let families = table.families.clone().unwrap_or_default();
        self.write_record(name, &families, &table.keep(), enabled)?;
        table.enabled.store(enabled, Ordering::Release);
        Ok(())
    }

    fn created_table(&self, name: &str) -> Result<Arc<Table>> {
        let table = self.table(name)?;
        match table.origin {
            TableOrigin::Created => Ok(table),
            TableOrigin::Configured => Err(StoreError::ConfiguredTable(name.to_owned())),
        }
    }

    fn write_record(
        &self,
        name: &str,
        families: &[String],
        versions: &BTreeMap<String, u32>,
        enabled: bool,
    ) -> Result<()> {
        let record = TableRecord {
            families: families.to_vec(),
            enabled,
            versions: versions.clone(),
        };
        // Rare and small: always fsync, so a table the client saw created survives power loss.
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        batch.insert(&self.meta, table_key(name), record.encode()?);
        batch.commit().map_err(|error| self.write_failed(error))?;
        Ok(())
    }
}
