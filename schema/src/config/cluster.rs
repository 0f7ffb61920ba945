//! `[cluster]`: the index tier across machines. Every table's rowkey space is cut into shards
//! (contiguous rowkey ranges); each instance indexes one shard, and any instance answers any
//! lookup by asking one replica of each shard (docs/operations/cluster.md).
//!
//! ```toml
//! [cluster]
//! # The replicas of every shard, shard 0 first: each a list of base URLs. The number of lists
//! # is the shard count.
//! shards = [
//!   ["http://hbidx-0:8080", "http://hbidx-1:8080"],
//!   ["http://hbidx-2:8080", "http://hbidx-3:8080"],
//! ]
//! shard = 0          # this instance's shard (--shard, HBIDX_SHARD)
//! replica = 0        # its place in that shard's list (--replica, HBIDX_REPLICA)
//! timeout_ms = 2000  # one call to another shard, before its next replica is tried
//!
//! # Shard boundaries per table, in HBase's printable form: shards - 1 keys. By default the
//! # table's own pre-split points, grouped into runs of regions.
//! [cluster.boundaries]
//! user = ["5", "a"]
//! ```
//!
//! Shards are rowkey ranges rather than hash buckets so that a shard is a run of HBase regions
//! (scans for reindex and verify stay range scans) and a page of lookup hits is the shards'
//! pages in shard order.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, StoreConfig, TableConfig};
use crate::codec::printable;
use crate::split::{parse_split_list, validate_splits};

/// Shard calls wait this long when `timeout_ms` doesn't say.
pub const DEFAULT_SHARD_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCluster {
    shards: Option<Vec<Vec<String>>>,
    shard: Option<i64>,
    replica: Option<i64>,
    timeout_ms: Option<i64>,
    #[serde(default)]
    boundaries: BTreeMap<String, Vec<String>>,
}

/// A validated `[cluster]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Base URLs of every shard's replicas (`http://host:port`, no trailing slash), shard 0
    /// first.
    pub shards: Vec<Vec<String>>,
    /// This instance's shard and its place among that shard's replicas: from the config or
    /// set by [`ClusterConfig::with_identity`] from the command line.
    pub shard: Option<usize>,
    pub replica: Option<usize>,
    /// One call to a shard replica.
    pub timeout: Duration,
    /// Per table (by name): the `shards - 1` rowkeys where shards 1.. start.
    pub boundaries: BTreeMap<String, Vec<Vec<u8>>>,
}

/// The rowkeys of one shard of one table: `start <= rowkey < stop` (`stop` `None`: to the end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    pub start: Vec<u8>,
    pub stop: Option<Vec<u8>>,
}

impl KeyRange {
    pub fn contains(&self, rowkey: &[u8]) -> bool {
        rowkey >= self.start.as_slice() && self.stop.as_deref().is_none_or(|stop| rowkey < stop)
    }

    /// Whether the range holds any rowkey after `cursor` (a lookup's cursor is the last rowkey
    /// of the previous page).
    pub fn has_keys_after(&self, cursor: &[u8]) -> bool {
        self.stop.as_deref().is_none_or(|stop| cursor < stop)
    }
}

impl ClusterConfig {
    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    /// The shard holding `rowkey` of `table` (shard 0 for a table the cluster doesn't know).
    pub fn shard_of(&self, table: &str, rowkey: &[u8]) -> usize {
        self.boundaries.get(table).map_or(0, |bounds| {
            bounds.partition_point(|bound| bound.as_slice() <= rowkey)
        })
    }

    /// The rowkeys of `shard` in `table`.
    pub fn range(&self, table: &str, shard: usize) -> KeyRange {
        let bounds = self.boundaries.get(table).map(Vec::as_slice).unwrap_or(&[]);
        KeyRange {
            start: shard
                .checked_sub(1)
                .and_then(|before| bounds.get(before))
                .cloned()
                .unwrap_or_default(),
            stop: bounds.get(shard).cloned(),
        }
    }

    /// This instance's range of `table`, once its shard is known.
    pub fn own_range(&self, table: &str) -> Option<KeyRange> {
        self.shard.map(|shard| self.range(table, shard))
    }

    /// Sets this instance's shard and replica from the command line (each overrides the
    /// config's), and checks that both are set and name a replica of the layout.
    pub fn with_identity(
        mut self,
        shard: Option<usize>,
        replica: Option<usize>,
    ) -> Result<Self, ConfigError> {
        self.shard = shard.or(self.shard);
        self.replica = replica.or(self.replica);
        let shard = self.shard.ok_or_else(|| {
            ConfigError::invalid(
                "cluster.shard",
                "this instance's shard is not set: give `shard` in [cluster], --shard or HBIDX_SHARD",
            )
        })?;
        let replicas = self.shards.get(shard).ok_or_else(|| {
            ConfigError::invalid(
                "cluster.shard",
                format!(
                    "shard {shard} does not exist: [cluster] shards lists {}",
                    self.shards.len()
                ),
            )
        })?;
        let replica = self.replica.unwrap_or(0);
        if replica >= replicas.len() {
            return Err(ConfigError::invalid(
                "cluster.replica",
                format!(
                    "replica {replica} does not exist: shard {shard} lists {}",
                    replicas.len()
                ),
            ));
        }
        self.replica = Some(replica);
        Ok(self)
    }

    /// This instance's own base URL, once its identity is set.
    pub fn own_url(&self) -> Option<&str> {
        let replicas = self.shards.get(self.shard?)?;
        replicas.get(self.replica?).map(String::as_str)
    }

    pub(crate) fn validate(
        raw: RawCluster,
        tables: &[TableConfig],
        store: &StoreConfig,
    ) -> Result<Self, ConfigError> {
        let invalid =
            |key: &str, reason: String| ConfigError::invalid(format!("cluster.{key}"), reason);
        if matches!(store, StoreConfig::Embedded(_)) {
            return Err(ConfigError::invalid(
                "cluster",
                "sharding needs the rows in HBase ([store] kind = \"hbase\"): a fan-out node \
                 reads every shard's rows from the one store, and the embedded store is this \
                 instance's own",
            ));
        }
        let shards = raw
            .shards
            .ok_or_else(|| invalid("shards", "is required: the replicas of every shard".into()))?;
        if shards.is_empty() || shards.len() > 1024 {
            return Err(invalid(
                "shards",
                format!("{} shards is not within 1..=1024", shards.len()),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        let mut cleaned = Vec::with_capacity(shards.len());
        for (shard, replicas) in shards.into_iter().enumerate() {
            if replicas.is_empty() {
                return Err(invalid(
                    &format!("shards[{shard}]"),
                    "lists no replica".into(),
                ));
            }
            let mut urls = Vec::with_capacity(replicas.len());
            for (replica, url) in replicas.into_iter().enumerate() {
                let key = format!("shards[{shard}][{replica}]");
                let url = url.trim_end_matches('/').to_string();
                let host = url.strip_prefix("http://").unwrap_or_default();
                if host.is_empty() || host.contains('/') {
                    return Err(invalid(
                        &key,
                        format!("`{url}` is not a base URL like http://hbidx-0:8080"),
                    ));
                }
                if !seen.insert(url.clone()) {
                    return Err(invalid(&key, format!("`{url}` is listed twice")));
                }
                urls.push(url);
            }
            cleaned.push(urls);
        }
        let index = |key: &str, value: Option<i64>| match value {
            None => Ok(None),
            Some(n @ 0..=1023) => Ok(Some(n as usize)),
            Some(n) => Err(invalid(key, format!("{n} is not within 0..=1023"))),
        };
        let shard = index("shard", raw.shard)?;
        let replica = index("replica", raw.replica)?;
        let timeout = match raw.timeout_ms {
            None => DEFAULT_SHARD_TIMEOUT,
            Some(ms @ 1..=600_000) => Duration::from_millis(ms as u64),
            Some(ms) => {
                return Err(invalid(
                    "timeout_ms",
                    format!("{ms} is not within 1..=600000"),
                ));
            }
        };
        for name in raw.boundaries.keys() {
            if !tables.iter().any(|table| &table.name == name) {
                return Err(invalid(
                    &format!("boundaries.{name}"),
                    "no table has this name".into(),
                ));
            }
        }
        let mut boundaries = BTreeMap::new();
        for table in tables {
            let key = format!("boundaries.{}", table.name);
            let bounds = match raw.boundaries.get(&table.name) {
                Some(keys) => {
                    let bounds =
                        parse_split_list(keys).map_err(|err| invalid(&key, err.to_string()))?;
                    if bounds.len() + 1 != cleaned.len() {
                        return Err(invalid(
                            &key,
                            format!(
                                "{} shards need {} boundaries, got {}",
                                cleaned.len(),
                                cleaned.len() - 1,
                                bounds.len()
                            ),
                        ));
                    }
                    bounds
                }
                None => default_boundaries(table, cleaned.len())
                    .map_err(|reason| invalid(&key, reason))?,
            };
            validate_splits(&bounds).map_err(|err| invalid(&key, err.to_string()))?;
            boundaries.insert(table.name.clone(), bounds);
        }
        let config = ClusterConfig {
            shards: cleaned,
            shard,
            replica,
            timeout,
            boundaries,
        };
        if let Some(shard) = shard
            && shard >= config.shards.len()
        {
            return Err(invalid(
                "shard",
                format!(
                    "shard {shard} does not exist: shards lists {}",
                    config.shards.len()
                ),
            ));
        }
        Ok(config)
    }

    /// The layout in one line per table, for logs and `hbidx schema check`.
    pub fn describe(&self, table: &str) -> String {
        let bounds = self.boundaries.get(table).map(Vec::as_slice).unwrap_or(&[]);
        let keys: Vec<String> = bounds.iter().map(|key| printable(key)).collect();
        format!(
            "{} shards, boundaries [{}]",
            self.shards.len(),
            keys.join(", ")
        )
    }
}

/// Shard boundaries from the table's pre-split points: regions grouped into `shards` runs of
/// (nearly) equal length, so each shard is whole regions.
fn default_boundaries(table: &TableConfig, shards: usize) -> Result<Vec<Vec<u8>>, String> {
    if shards == 1 {
        return Ok(Vec::new());
    }
    let splits = match &table.splits {
        None => {
            return Err(format!(
                "table \"{}\" has no [tables.splits] to take shard boundaries from; give \
                 {} boundaries here",
                table.name,
                shards - 1
            ));
        }
        Some(splits) => table.split_keys(None, None).map_err(|err| {
            format!(
                "the table's splits (algo = \"{}\") can't give shard boundaries here ({err}); \
                 give {} boundaries here",
                splits.algo(),
                shards - 1
            )
        })?,
    };
    let regions = splits.len() + 1;
    if regions < shards {
        return Err(format!(
            "table \"{}\" is pre-split into {regions} regions, fewer than {shards} shards; \
             give {} boundaries here or split it further",
            table.name,
            shards - 1
        ));
    }
    // Shard i starts at region i * regions / shards; region r starts at splits[r - 1].
    Ok((1..shards)
        .map(|i| splits[i * regions / shards - 1].clone())
        .collect())
}
