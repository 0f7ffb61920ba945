//! The config file: TOML text → raw serde structs → one validation → the typed [`HbidxConfig`]
//! every crate is handed. This module is the only place a config is parsed.
//!
//! Parsing is two steps, as in Quickwit's `quickwit-config`: serde reads the whole file into raw
//! structs that reject unknown sections and keys (`deny_unknown_fields` at every level, so a
//! typo such as `compresion` is an error rather than a silently ignored setting), then
//! validation checks every value and builds the typed structs. Raw structs keep almost every
//! value optional and numbers as `i64`, so that validation, not serde, reports missing and
//! out-of-range values with the path of the key (`store.pool_size`, `tables[0].fields[1]`).
//! Nothing here does IO: the CLI reads files and passes text, including a splits file.
//!
//! | section | typed as | module |
//! |---|---|---|
//! | `[[tables]]` | [`TableConfig`] | `table.rs`, validated in `validate_table.rs` |
//! | `[store]` | [`StoreConfig`] | `store.rs` |
//! | `[[sources]]` | [`KafkaSourceConfig`] | `sources.rs` |
//! | `[server]` | [`ServerConfig`] | `server.rs` |
//! | `[security]` | [`SecurityConfig`] | `security.rs` |
//! | `[memory]` | [`MemoryBudget`] | `memory.rs` |
//! | `[cluster]` | [`ClusterConfig`] | `cluster.rs` |
//!
//! ```toml
//! [[tables]]
//! name = "user"
//!
//! [[tables.families]]
//! name = "info"
//! compression = "SNAPPY"
//!
//! [tables.rowkey]
//! parts = [ { kind = "hash_prefix", algo = "md5", width = 6 }, { kind = "key" } ]
//!
//! [[tables.fields]]
//! name = "phone"
//! kind = "phone"
//! column = "info:phone"
//!
//! [tables.splits]
//! algo = "codec"
//! regions = 10
//! ```

mod cluster;
mod error;
mod memory;
mod security;
mod server;
mod sources;
mod store;
mod table;
mod validate_table;

use std::collections::HashSet;

use serde::Deserialize;

pub use cluster::{ClusterConfig, DEFAULT_SHARD_TIMEOUT, KeyRange};
pub use error::ConfigError;
pub(crate) use error::TableError;
pub use memory::{DEFAULT_BUDGET_MB, MIN_WRITER_THREAD_BYTES, MemoryBudget, MemoryPart};
use memory::{RawMemory, validate_memory};
pub use security::{
    DEFAULT_REFUSED_RATE_LIMIT, KEY_PREFIX, KeyConfig, RateLimit, Scope, SecurityConfig,
    check_plaintext_key, hash_key,
};
pub use server::{
    DEFAULT_HEADER_TIMEOUT, DEFAULT_LISTEN, DEFAULT_MAX_BATCH_MATCHES, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_CLIENT, DEFAULT_MAX_LOOKUP_MATCHES, DEFAULT_REQUEST_READ_TIMEOUT,
    DEFAULT_THRIFT_IDLE_TIMEOUT, DEFAULT_THRIFT_MAX_CONTAINER_LEN, DEFAULT_THRIFT_WORKERS,
    HbaseApi, ServerConfig, THRIFT_REMOTE_REFUSED,
};
pub use sources::{DEFAULT_DEAD_LETTER_MAX_MB, EventFormat, KafkaSourceConfig, StartPolicy};
pub use store::{
    DEFAULT_SCAN_CACHING, Durability, EmbeddedConfig, HbaseConfig, StoreConfig, ThriftProtocol,
    ThriftTransport,
};
pub use table::{
    BloomFilter, Compression, DEFAULT_NAMESPACE, DEFAULT_PHONE_SUFFIX_MIN, DataBlockEncoding,
    FamilyConfig, FieldKind, IndexedField, SplitConfig, TableConfig, Ttl,
};

/// A validated config file: every section, checked together.
#[derive(Debug, Clone, PartialEq)]
pub struct HbidxConfig {
    pub tables: Vec<TableConfig>,
    /// `[store]`: where the rows are (the embedded store when absent).
    pub store: StoreConfig,
    /// `[[sources]]`: the Kafka topics feeding tables; a table without one is fed by the
    /// embedded store's change feed.
    pub sources: Vec<KafkaSourceConfig>,
    /// `[server]`: listen addresses and threads; flags override some of it.
    pub server: ServerConfig,
    /// `[security]`: API keys; `--api-key` adds one at start.
    pub security: SecurityConfig,
    /// `[memory]`: the process's memory budget and its split.
    pub memory: MemoryBudget,
    /// `[cluster]`: this instance is one shard replica of a sharded index tier; `None` for
    /// the single-instance default, where every instance indexes every row.
    pub cluster: Option<ClusterConfig>,
}

impl HbidxConfig {
    /// The table called `name`, either its bare name or its full `ns:name`.
    pub fn table(&self, name: &str) -> Option<&TableConfig> {
        self.tables
            .iter()
            .find(|table| table.name == name || table.full_name() == name)
    }

    /// `table.field` of every blind field, for messages.
    pub fn blind_fields(&self) -> Vec<String> {
        self.tables
            .iter()
            .flat_map(|table| {
                table
                    .fields
                    .iter()
                    .filter(|field| field.blind)
                    .map(move |field| format!("{}.{}", table.name, field.name))
            })
            .collect()
    }

    /// Gives every blind field its key. The key is read by the caller (`HBIDX_BLIND_KEY` or
    /// `[security] blind_key_file`): the builder does no IO.
    pub fn set_blind_key(&mut self, key: &crate::BlindKey) {
        for field in self.tables.iter_mut().flat_map(|table| &mut table.fields) {
            if field.blind {
                field.blind_key = Some(key.clone());
            }
        }
    }

    /// The Kafka source feeding `table`, if one does.
    pub fn source_for(&self, table: &str) -> Option<&KafkaSourceConfig> {
        self.sources.iter().find(|source| source.table == table)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    tables: Vec<validate_table::RawTable>,
    store: Option<store::RawStore>,
    #[serde(default)]
    sources: Vec<sources::RawSource>,
    #[serde(default)]
    server: server::RawServer,
    #[serde(default)]
    security: security::RawSecurity,
    #[serde(default)]
    memory: RawMemory,
    cluster: Option<cluster::RawCluster>,
    /// Read only to refuse it with a better message than "unknown field": earlier configs
    /// carried an `[indexer]` section that nothing read.
    indexer: Option<toml::Value>,
}

/// Parses and validates a config file's text: the one builder every command goes through.
pub fn parse_config(toml_text: &str) -> Result<HbidxConfig, ConfigError> {
    let deserializer =
        toml::Deserializer::parse(toml_text).map_err(|err| toml_error(toml_text, "", &err))?;
    let raw: RawConfig = serde_path_to_error::deserialize(deserializer).map_err(|err| {
        let path = err.path().to_string();
        toml_error(toml_text, &path, err.inner())
    })?;
    if raw.indexer.is_some() {
        return Err(ConfigError::invalid(
            "indexer",
            "hbidx has no [indexer] settings (the commit policy is built in); remove the section",
        ));
    }
    let mut tables = Vec::with_capacity(raw.tables.len());
    let mut seen = HashSet::new();
    for (index, raw_table) in raw.tables.into_iter().enumerate() {
        let table = validate_table::validate_table(raw_table).map_err(|err| err.at(index))?;
        if !seen.insert(table.full_name()) {
            return Err(TableError::Table {
                table: table.full_name(),
                reason: "is declared more than once".into(),
            }
            .at(index));
        }
        tables.push(table);
    }
    let store = StoreConfig::validate(raw.store)?;
    let sources = sources::validate_sources(raw.sources, &tables)?;
    let server = ServerConfig::validate(raw.server)?;
    let security = SecurityConfig::validate(raw.security)?;
    let memory = validate_memory(raw.memory, tables.len())?;
    let cluster = raw
        .cluster
        .map(|raw| ClusterConfig::validate(raw, &tables, &store))
        .transpose()?;
    Ok(HbidxConfig {
        tables,
        store,
        sources,
        server,
        security,
        memory,
        cluster,
    })
}

/// A parse or shape error: with the path of the key when serde got that far (`.` is serde's
/// path of the document itself), and the line and column in the text.
fn toml_error(text: &str, path: &str, err: &toml::de::Error) -> ConfigError {
    let location = err
        .span()
        .map(|span| {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before
                .rsplit('\n')
                .next()
                .map_or(0, |last| last.chars().count())
                + 1;
            format!(" at line {line}, column {column}")
        })
        .unwrap_or_default();
    let message = err.message().trim().to_owned();
    if path.is_empty() || path == "." {
        ConfigError::Toml { location, message }
    } else {
        ConfigError::invalid(path, format!("{message}{location}"))
    }
}

#[cfg(test)]
mod tests;
