//! Tables and admin calls: listing, creating, enabling, disabling and deleting tables, their
//! column descriptors and regions, and the no-op compactions.

use std::collections::BTreeMap;

use hbase_thrift::hbase::{ColumnDescriptor, TRegionInfo};
use hbidx_schema::config::{FamilyConfig, Ttl};
use hbidx_store::{StoreError, TableOrigin};

use crate::error::{Answer, Failure};
use crate::handler::Gateway;
use crate::parse::{ColumnSpec, validate_hbase_table_name};

impl Gateway {
    pub(crate) fn table_names(&self) -> Vec<(String, bool)> {
        let mut names: Vec<(String, bool)> = self
            .store
            .table_infos()
            .iter()
            .map(|info| (self.thrift_name(info), info.enabled))
            .collect();
        names.sort();
        names
    }

    pub(crate) fn create_table(&self, name: &[u8], families: Vec<ColumnDescriptor>) -> Answer<()> {
        let name = std::str::from_utf8(name)
            .map_err(|_| Failure::IllegalArgument("table name is not UTF-8".to_owned()))?;
        let name = name.strip_prefix("default:").unwrap_or(name);
        validate_hbase_table_name(name)?;
        if self.by_thrift_name.contains_key(name) {
            return Err(Failure::AlreadyExists(format!(
                "TableExistsException: table `{name}` already exists (it comes from the hbidx config)"
            )));
        }
        let mut names = Vec::with_capacity(families.len());
        let mut versions = BTreeMap::new();
        for descriptor in families {
            let family = descriptor.name.ok_or_else(|| {
                Failure::IllegalArgument("a column descriptor has no name".to_owned())
            })?;
            let family = ColumnSpec::parse_family(&family)?;
            // The IDL's default, what HBase's Thrift server gets when a client leaves it out.
            let max_versions = descriptor
                .max_versions
                .unwrap_or(DEFAULT_THRIFT_MAX_VERSIONS);
            let kept = u32::try_from(max_versions)
                .ok()
                .filter(|versions| *versions >= 1)
                .ok_or_else(|| {
                    Failure::IllegalArgument(format!(
                        "maxVersions {max_versions} of column family `{family}`: must be at least 1"
                    ))
                })?;
            versions.insert(family.clone(), kept);
            names.push(family);
        }
        self.store
            .create_table_with_versions(name, &names, &versions)?;
        Ok(())
    }

    pub(crate) fn column_descriptors(
        &self,
        table: &[u8],
    ) -> Answer<BTreeMap<Vec<u8>, ColumnDescriptor>> {
        let target = self.target(table)?;
        let families = target.info.families.clone().unwrap_or_default();
        let configured = target.configured.as_ref();
        Ok(families
            .into_iter()
            .map(|family| {
                let config = configured.and_then(|table| table.config.family(&family));
                let versions = target.info.versions.get(&family).copied().unwrap_or(1);
                let descriptor = column_descriptor(&family, config, versions);
                (format!("{family}:").into_bytes(), descriptor)
            })
            .collect())
    }

    pub(crate) fn regions(&self, table: &[u8]) -> Answer<Vec<TRegionInfo>> {
        let target = self.target(table)?;
        let splits: &[Vec<u8>] = target
            .configured
            .as_ref()
            .map_or(&[], |table| &table.split_keys);
        let mut bounds: Vec<&[u8]> = Vec::with_capacity(splits.len() + 2);
        bounds.push(b"");
        bounds.extend(splits.iter().map(Vec::as_slice));
        bounds.push(b"");
        let host = self.address.ip().to_string().into_bytes();
        let port = i32::from(self.address.port());
        Ok(bounds
            .windows(2)
            .enumerate()
            .map(|(index, bounds)| {
                let id = i64::try_from(index).unwrap_or(i64::MAX);
                // HBase's region name: `table,startKey,regionId.encodedName.`, the encoded name
                // being a hash of the rest.
                let mut name = format!("{},", target.thrift_name).into_bytes();
                name.extend_from_slice(bounds[0]);
                name.extend_from_slice(format!(",{id}").as_bytes());
                let encoded = format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&name));
                name.extend_from_slice(format!(".{encoded}.").as_bytes());
                TRegionInfo::new(
                    bounds[0].to_vec(),
                    bounds[1].to_vec(),
                    id,
                    name,
                    1i8,
                    host.clone(),
                    port,
                )
            })
            .collect())
    }

    pub(crate) fn set_enabled(&self, table: &[u8], enabled: bool) -> Answer<()> {
        let target = self.target(table)?;
        if target.info.enabled == enabled {
            return Ok(());
        }
        self.store.set_table_enabled(&target.store_name, enabled)?;
        Ok(())
    }

    pub(crate) fn delete_table(&self, table: &[u8]) -> Answer<()> {
        let target = self.target(table)?;
        if target.info.origin == TableOrigin::Configured {
            return Err(StoreError::ConfiguredTable(target.thrift_name).into());
        }
        if target.info.enabled {
            return Err(Failure::Io(format!(
                "TableNotDisabledException: table `{}` is enabled; disable it first (HBase deletes \
                 only disabled tables)",
                target.thrift_name
            )));
        }
        self.store.delete_table(&target.store_name)?;
        Ok(())
    }
}

/// `ColumnDescriptor.maxVersions` when `createTable` leaves it out: the default of HBase's
/// Thrift IDL (HBase's Java API and shell default to 1).
const DEFAULT_THRIFT_MAX_VERSIONS: i32 = 3;

/// A family as `getColumnDescriptors` reports it: the configured HBase options where the config
/// has them, HBase's defaults otherwise; `maxVersions` is what the store keeps.
fn column_descriptor(
    family: &str,
    config: Option<&FamilyConfig>,
    versions: u32,
) -> ColumnDescriptor {
    let compression = config
        .and_then(|family| family.compression)
        .map_or("NONE", |compression| compression.as_str());
    let bloom_filter = config
        .and_then(|family| family.bloomfilter)
        .map_or("NONE", |bloom| bloom.as_str());
    let ttl = match config.and_then(|family| family.ttl) {
        Some(Ttl::Seconds(seconds)) => i32::try_from(seconds).unwrap_or(i32::MAX),
        Some(Ttl::Forever) | None => i32::MAX,
    };
    ColumnDescriptor::new(
        format!("{family}:").into_bytes(),
        i32::try_from(versions).unwrap_or(i32::MAX),
        compression.to_owned(),
        false,
        bloom_filter.to_owned(),
        0i32,
        0i32,
        true,
        ttl,
    )
}

/// `compact`/`majorCompact`: accepted for known tables (or their regions) as no-ops, since the
/// embedded store compacts on its own.
pub(crate) fn compact(gateway: &Gateway, table_or_region: &[u8]) -> thrift::Result<()> {
    // A region name is `table,startKey,id.encoded.`: the table is before the first comma.
    let table = table_or_region
        .split(|&byte| byte == b',')
        .next()
        .unwrap_or_default();
    gateway.target(table).map(|_| ()).map_err(Failure::io_only)
}
