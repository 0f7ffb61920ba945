//! The embedded row store: HBase's data model on fjall, an LSM-tree engine like HBase's own, with
//! a change feed written atomically with every row write.
//!
//! # On-disk layout
//!
//! One fjall database per data directory, holding per table `T`:
//!
//! - keyspace `rows.<esc(T)>`: key = raw rowkey bytes, value = the row state (format byte +
//!   postcard; see [`crate::row_state`]). One key per row, so a multi-get is one point read per
//!   row and a scan is a plain range scan.
//! - keyspace `feed.<esc(T)>`: key = big-endian `u64` sequence number (1, 2, 3, …, in commit
//!   order), value = the postcard-encoded [`Mutation`] exactly as it was submitted.
//! - keyspace `vers.<esc(T)>`, only for a table with a family that keeps more than one version
//!   (`VERSIONS`): key = raw rowkey bytes, value = the row's versions older than the newest
//!   (format byte + postcard; see `versions.rs`, which says why they live apart).
//!
//! plus the keyspace `hbidx.meta` with the format marker, per table the highest trimmed feed
//! offset (so that trimming the whole feed never lets sequence numbers restart), and the registry
//! of tables created at run time (`table/<name>` → format byte + postcard [`TableRecord`]).
//!
//! # Tables
//!
//! Tables come from two places. The ones passed to [`EmbeddedStore::open_tables`] (the hbidx
//! config) are *configured*: they have a change feed, because an indexer consumes it. Tables made
//! with [`EmbeddedStore::create_table`] (the HBase Thrift gateway's `createTable`) are *created*:
//! they are remembered in the meta keyspace so they come back after a restart, can be disabled
//! and deleted again, and have rows only: no indexer reads them, so a feed would only grow. When
//! a name is both (a created table later added to the config), the config wins while it names
//! the table.
//!
//! The registry is a map behind a read-write lock. Reads take the read lock for one hash lookup
//! and an `Arc` clone; only create and delete take the write lock.
//!
//! `esc` keeps ASCII letters, digits, `.` and `-` and writes every other byte as `_XX` (hex):
//! `ns:users` → `ns_3Ausers`. Since `_` itself is escaped, the mapping is injective.
//!
//! # Writes and the change feed
//!
//! [`EmbeddedStore::mutate_sync`] validates the whole call first, then, under one writer mutex,
//! reads the current state of each row, applies the operations, and commits one fjall write batch
//! holding the new row states *and* one feed event per mutation. Sequence allocation and commit
//! sit under the same mutex, so feed order is commit order and a reader that has seen offset `n`
//! has seen everything before it. Since the batch is atomic, a row write never exists without its
//! event (nor an event without its row write), crash or not.
//!
//! Feed events include operations that turned out to be no-ops (older than the stored cell, or
//! masked): consumers apply the same timestamp rules and get the same answer.
//!
//! # Durability
//!
//! Every batch commit writes the batch to fjall's journal and flushes it to the OS
//! (`PersistMode::Buffer`, fjall's default for batches), so a committed write survives the process
//! being killed (`kill -9`) but not an OS crash or power loss. With
//! [`EmbeddedStoreOptions::sync`] each commit also `fsync`s the journal (`PersistMode::SyncAll`),
//! which survives power loss at the cost of one fsync per `mutate` call (batch your writes).
//! Dropping the store fsyncs the journal.
//!
//! # A failed write halts writes
//!
//! fjall refuses every write after one failed to reach its journal (a full volume, an IO error):
//! it can't know how much of that batch is on disk. The store remembers the first such failure
//! and from then on refuses writes itself with the same cause ([`StoreError::StorageFull`] for a
//! full volume, else [`StoreError::WritesHalted`]), and [`RowStore::health`] reports it, so
//! readiness fails. Reads go on working. Only a restart clears it: journal recovery then drops
//! the torn batch, and writes resume once the volume has space. Nothing acknowledged is lost: a
//! write is acknowledged only after its batch reached the journal.
//!
//! # Blocking
//!
//! Reads are point reads or short range scans, microseconds when the blocks are cached, and writes
//! with the buffered journal cost a few microseconds per row, so the async [`RowStore`] methods run
//! them inline instead of paying for `spawn_blocking`. With `sync: true` a `mutate` blocks for an
//! fsync (around a millisecond or more): callers on a small runtime should wrap it in
//! `spawn_blocking` or call [`EmbeddedStore::mutate_sync`] from a blocking thread.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use async_trait::async_trait;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use hbidx_schema::model::Mutation;

use crate::api::{Row, RowStore, ScanBatch, ScanRequest, WriteReceipt};
use crate::error::{Result, StoreError, escape_key, is_storage_full};
use crate::row_cache::RowCache;

mod feed;
mod registry;
mod rows;
#[cfg(test)]
mod tests;
mod versions;

pub(crate) use crate::sync::lock;
pub(crate) use rows::prefix_successor;

pub use feed::FeedHold;
use feed::{FeedClock, decode_seq, offset_of, trimmed_key};
use registry::{Registry, TableRecord, validate_table_name};

/// The keyspace holding the store's own metadata.
const META_KEYSPACE: &str = "hbidx.meta";
/// Meta key of the on-disk format marker.
const FORMAT_KEY: &[u8] = b"format";
/// The on-disk layout version this code reads and writes.
const LAYOUT_VERSION: u8 = 1;
/// Meta key prefix of a table's highest trimmed feed offset; the table name follows.
const TRIMMED_KEY_PREFIX: &[u8] = b"feed_trimmed/";
/// fjall's limit on keyspace name length.
const MAX_KEYSPACE_NAME: usize = 255;
/// Meta key prefix of a created table's [`TableRecord`]; the table name follows.
const TABLE_KEY_PREFIX: &[u8] = b"table/";
/// The first byte of a stored [`TableRecord`] without versions (still read).
const TABLE_RECORD_V1: u8 = 1;
/// The first byte of a stored [`TableRecord`]; bump when the record changes.
const TABLE_RECORD_V2: u8 = 2;

/// A table to serve, as [`EmbeddedStore::open_tables`] takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    /// The table name; anything non-empty that fits fjall's keyspace names once escaped.
    pub name: String,
    /// The table's column families, or `None` when the caller doesn't declare them. The store
    /// keeps them for callers that check writes against them (the Thrift gateway); it doesn't
    /// check them itself, because a Kafka-fed table must take whatever its topic carries.
    pub families: Option<Vec<String>>,
    /// The families that keep more than one version per cell, and how many (HBase's
    /// `VERSIONS`); every other family keeps one.
    pub versions: BTreeMap<String, u32>,
}

impl TableSpec {
    /// A table without declared families.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            families: None,
            versions: BTreeMap::new(),
        }
    }
}

/// Where a table of the store comes from; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableOrigin {
    /// Passed to `open` (the hbidx config): has a change feed, can't be deleted or disabled here.
    Configured,
    /// Made with [`EmbeddedStore::create_table`]: rows only, persisted in the store's registry.
    Created,
}

/// What the store knows about one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    pub name: String,
    /// Declared column families (`None`: not declared, any family is accepted).
    pub families: Option<Vec<String>>,
    /// The families that keep more than one version per cell, and how many; every other
    /// family keeps one.
    pub versions: BTreeMap<String, u32>,
    pub origin: TableOrigin,
    /// HBase's enabled flag. Configured tables are always enabled; the store only keeps the flag,
    /// callers decide what a disabled table refuses.
    pub enabled: bool,
}

/// How to open an [`EmbeddedStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedStoreOptions {
    /// `fsync` the journal on every `mutate` (survives power loss). Off: each write is flushed to
    /// the OS only, which survives a killed process but not an OS crash.
    pub sync: bool,
    /// Block cache capacity in bytes, shared by all tables. Fjall recommends 20–25% of memory,
    /// or more when the data set fits in memory.
    pub cache_bytes: u64,
    /// Budget of each table's cache of recently read rows (`row_cache.rs`), in front of the
    /// block cache and the memtable.
    pub row_cache_bytes: u64,
    /// Budget of all memtables together (every table's rows and feed keyspaces). A write that
    /// finds them over it seals the memtables of the tables it wrote, which fjall then flushes
    /// in the background: bulk loads write smaller tables more often instead of holding more
    /// in RAM. Keyspaces created from now on also get their share as their own memtable limit.
    pub memtable_bytes: u64,
}

impl Default for EmbeddedStoreOptions {
    fn default() -> Self {
        Self {
            sync: false,
            cache_bytes: 256 * 1024 * 1024,
            row_cache_bytes: crate::row_cache::DEFAULT_ROW_CACHE_BYTES,
            // fjall's own default for one keyspace, times the three of one table.
            memtable_bytes: 3 * 64 * 1024 * 1024,
        }
    }
}

/// What the store's memory holds now, against the budgets it was opened with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreMemory {
    pub block_cache_bytes: u64,
    pub block_cache_capacity: u64,
    /// Active and sealed (not yet flushed) memtables of every keyspace.
    pub memtable_bytes: u64,
    pub memtable_budget: u64,
    /// Every table's row cache together.
    pub row_cache_bytes: u64,
    pub row_cache_budget: u64,
}

struct Table {
    name: String,
    rows: Keyspace,
    /// `None` for created tables: nothing indexes them, so nothing would ever trim a feed.
    feed: Option<Keyspace>,
    /// Older versions, for a table with a family keeping more than one (`versions.rs`).
    versions: Option<Versions>,
    clock: FeedClock,
    /// Next feed sequence number; only changed under the writer mutex.
    next_seq: AtomicU64,
    families: Option<Vec<String>>,
    origin: TableOrigin,
    enabled: AtomicBool,
    /// Recently read rows; every committed row write invalidates its key.
    cache: RowCache,
    /// Offsets the feed must keep events after, one per live [`FeedHold`] (by hold id): a
    /// trim stops at the lowest. Changed under the store's trimmer mutex when added.
    holds: Mutex<BTreeMap<u64, i64>>,
}

/// A table's older versions and how many each family keeps.
struct Versions {
    keyspace: Keyspace,
    keep: versions::Keep,
}

impl Table {
    /// Every keyspace of the table.
    fn keyspaces(&self) -> impl Iterator<Item = &Keyspace> {
        std::iter::once(&self.rows)
            .chain(self.feed.as_ref())
            .chain(self.versions.as_ref().map(|versions| &versions.keyspace))
    }

    fn keep(&self) -> versions::Keep {
        self.versions
            .as_ref()
            .map(|versions| versions.keep.clone())
            .unwrap_or_default()
    }

    fn info(&self) -> TableInfo {
        TableInfo {
            name: self.name.clone(),
            families: self.families.clone(),
            versions: self.keep(),
            origin: self.origin,
            enabled: self.enabled.load(Ordering::Acquire),
        }
    }
}

/// The embedded store. See the [module docs](self) for layout, durability and blocking behaviour.
///
/// Keeps the latest version of each cell, and older ones for the families a table says keep
/// more (HBase's `VERSIONS`).
pub struct EmbeddedStore {
    db: Database,
    meta: Keyspace,
    tables: RwLock<Registry>,
    /// The single writer: row writes, sequence allocation, and table creation and deletion.
    writer: Mutex<()>,
    /// Serializes trims, so the persisted trim floor only ever grows.
    trimmer: Mutex<()>,
    /// Each table's budgets (tables created later get them too).
    budget: TableBudget,
    /// All memtables together ([`EmbeddedStoreOptions::memtable_bytes`]).
    memtable_bytes: u64,
    persist_mode: PersistMode,
    /// The first write fjall failed; set, every later write is refused (see the module docs).
    halted: OnceLock<Halt>,
}

/// Why the store takes no more writes.
#[derive(Debug)]
struct Halt {
    storage_full: bool,
    /// The failed write's IO error as the OS worded it, or fjall's error.
    cause: String,
}

impl Halt {
    fn error(&self) -> StoreError {
        let cause = self.cause.clone();
        if self.storage_full {
            StoreError::StorageFull { cause }
        } else {
            StoreError::WritesHalted { cause }
        }
    }
}

/// The innermost IO error of `error`'s chain, worded by the OS, else `error` itself.
fn io_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return io.to_string();
        }
        next = error.source();
    }
    error.to_string()
}

/// What one table may hold in memory.
#[derive(Debug, Clone, Copy)]
struct TableBudget {
    row_cache_bytes: u64,
    /// The memtable limit of each keyspace created for the table.
    keyspace_memtable_bytes: u64,
}

/// Escapes a table name into the keyspace-name alphabet; see the module docs.
fn escape_table_name(table: &str) -> String {
    let mut escaped = String::with_capacity(table.len());
    for byte in table.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'.' || byte == b'-' {
            escaped.push(char::from(byte));
        } else {
            escaped.push_str(&format!("_{byte:02X}"));
        }
    }
    escaped
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in `dir` with default options, serving `tables`
    /// (without declared families) plus the tables created in it before.
    ///
    /// Tables not yet in the directory are created empty. Table names may contain anything but
    /// must be non-empty and short enough for fjall (about 120 bytes of escaped name).
    pub fn open(dir: &Path, tables: &[String]) -> Result<Self> {
        Self::open_with_options(dir, tables, EmbeddedStoreOptions::default())
    }

    /// [`EmbeddedStore::open`] with options.
    pub fn open_with_options(
        dir: &Path,
        tables: &[String],
        options: EmbeddedStoreOptions,
    ) -> Result<Self> {
        let specs: Vec<TableSpec> = tables.iter().map(TableSpec::named).collect();
        Self::open_tables(dir, &specs, options)
    }

    /// Opens (creating if needed) the store in `dir`, serving the configured `tables` and every
    /// table created in it before (see the module docs).
    ///
    /// Only one process may open a directory at a time. Opening replays fjall's journal, which
    /// can take seconds after a large unflushed load.
    pub fn open_tables(
        dir: &Path,
        tables: &[TableSpec],
        options: EmbeddedStoreOptions,
    ) -> Result<Self> {
        let mut specs: Vec<&TableSpec> = Vec::with_capacity(tables.len());
        for spec in tables {
            validate_table_name(&spec.name)?;
            if !specs.iter().any(|seen| seen.name == spec.name) {
                specs.push(spec);
            }
        }

        let db = Database::builder(dir)
            .cache_size(options.cache_bytes)
            .open()?;
        // A table has two keyspaces (rows, change feed); the meta keyspace is tiny.
        let keyspaces = 2 * specs.len().max(1) as u64;
        let budget = TableBudget {
            row_cache_bytes: options.row_cache_bytes,
            // fjall seals a memtable at its limit and flushes it while the next one fills, so
            // a keyspace holds up to about two of them: the sealed one, or once flushed the
            // same one kept alive by fjall's version history until any keyspace rotates, which
            // `write_buffer_size` (the budget's gauge) no longer counts.
            keyspace_memtable_bytes: (options.memtable_bytes / keyspaces / 2).max(1 << 20),
        };
        let meta = db.keyspace(META_KEYSPACE, KeyspaceCreateOptions::default)?;
        match meta.get(FORMAT_KEY)? {
            Some(version) if *version == [LAYOUT_VERSION] => {}
            Some(version) => {
                return Err(StoreError::Corrupt {
                    table: "<meta>".to_owned(),
                    key: escape_key(FORMAT_KEY),
                    reason: format!(
                        "data directory has layout version {}, this build reads {LAYOUT_VERSION}",
                        escape_key(&version)
                    ),
                });
            }
            None => meta.insert(FORMAT_KEY, [LAYOUT_VERSION])?,
        }

        let mut registry = Registry::default();
        for spec in specs {
            let table = Self::open_table(&db, &meta, spec, TableOrigin::Configured, true, budget)?;
            registry.insert(Arc::new(table));
        }
        for guard in meta.prefix(TABLE_KEY_PREFIX) {
            let (key, value) = guard.into_inner()?;
            let name = std::str::from_utf8(&key[TABLE_KEY_PREFIX.len()..]).map_err(|_| {
                StoreError::Corrupt {
                    table: "<meta>".to_owned(),
                    key: escape_key(&key),
                    reason: "table name is not UTF-8".to_owned(),
                }
            })?;
            if registry.by_name.contains_key(name) {
                tracing::info!(table = %name, "a created table is named in the config; serving it as configured");
                continue;
            }
            let record = TableRecord::decode(name, &value)?;
            let spec = TableSpec {
                name: name.to_owned(),
                families: Some(record.families),
                versions: record.versions,
            };
            let table = Self::open_table(
                &db,
                &meta,
                &spec,
                TableOrigin::Created,
                record.enabled,
                budget,
            )?;
            registry.insert(Arc::new(table));
        }

        Ok(Self {
            db,
            meta,
            tables: RwLock::new(registry),
            writer: Mutex::new(()),
            trimmer: Mutex::new(()),
            budget,
            memtable_bytes: options.memtable_bytes,
            persist_mode: if options.sync {
                PersistMode::SyncAll
            } else {
                PersistMode::Buffer
            },
            halted: OnceLock::new(),
        })
    }

    /// Whether a failed write halted the store (see the module docs): it takes no writes and
    /// syncs nothing more until it is reopened.
    pub fn writes_halted(&self) -> bool {
        self.halted.get().is_some()
    }

    /// Refuses a write once an earlier one failed (see the module docs).
    fn check_writable(&self) -> Result<()> {
        match self.halted.get() {
            Some(halt) => Err(halt.error()),
            None => Ok(()),
        }
    }

    /// The error of a failed fjall write. fjall takes no writes after it, so the store stops
    /// taking them too, saying why, once in the log and in every refusal after.
    fn write_failed(&self, error: fjall::Error) -> StoreError {
        self.halted
            .get_or_init(|| {
                let halt = Halt {
                    storage_full: is_storage_full(&error),
                    cause: io_cause(&error),
                };
                if halt.storage_full {
                    tracing::error!(cause = %halt.cause, "the data volume is full: the row store takes no more writes; free space on it and restart hbidx (reads go on)");
                } else {
                    tracing::error!(error = %error, "a row store write failed: the store takes no more writes until hbidx is restarted (reads go on)");
                }
                halt
            })
            .error()
    }

    /// Opens (creating if needed) the keyspaces of one table.
    fn open_table(
        db: &Database,
        meta: &Keyspace,
        spec: &TableSpec,
        origin: TableOrigin,
        enabled: bool,
        budget: TableBudget,
    ) -> Result<Table> {
        let name = spec.name.as_str();
        let families = spec.families.clone();
        let keep = &spec.versions;
        let escaped = escape_table_name(name);
        // Only read when a keyspace is created: fjall keeps the limit it was created with.
        let options =
            || KeyspaceCreateOptions::default().max_memtable_size(budget.keyspace_memtable_bytes);
        let rows = db.keyspace(&format!("rows.{escaped}"), options)?;
        let keep: versions::Keep = keep
            .iter()
            .filter(|(_, versions)| **versions > 1)
            .map(|(family, versions)| (family.clone(), *versions))
            .collect();
        let versions_name = format!("vers.{escaped}");
        let versions = if keep.is_empty() {
            // Versions kept while a family said so would come back, unmasked by the deletes
            // since, if it said so again: they go when no family keeps more than one.
            if db.keyspace_exists(&versions_name) {
                let stale = db.keyspace(&versions_name, options)?;
                db.delete_keyspace(stale)?;
                tracing::info!(table = %name, "dropped older versions: no family keeps them now");
            }
            None
        } else {
            Some(Versions {
                keyspace: db.keyspace(&versions_name, options)?,
                keep,
            })
        };
        let (feed, last) = match origin {
            TableOrigin::Configured => {
                let feed = db.keyspace(&format!("feed.{escaped}"), options)?;
                let trimmed = match meta.get(trimmed_key(name))? {
                    Some(value) => decode_seq("<meta>", &value)?,
                    None => 0,
                };
                // Only above the trimmed floor: below it every event is a tombstone until
                // fjall compacts them away, and walking back over them from the end (what
                // `last_key_value` does on a fully trimmed feed) took seconds per 10M rows at
                // every start.
                let above_floor = match trimmed.checked_add(1) {
                    Some(first) => feed.range(first.to_be_bytes()..).next_back(),
                    None => None,
                };
                let last_in_feed = match above_floor {
                    Some(guard) => decode_seq(name, &guard.key()?)?,
                    None => 0,
                };
                (Some(feed), last_in_feed.max(trimmed))
            }
            TableOrigin::Created => (None, 0),
        };
        tracing::debug!(table = %name, last_offset = last, ?origin, "opened table");
        Ok(Table {
            name: name.to_owned(),
            rows,
            feed,
            versions,
            clock: FeedClock::new(offset_of(last)),
            next_seq: AtomicU64::new(last + 1),
            families,
            origin,
            enabled: AtomicBool::new(enabled),
            cache: RowCache::new(budget.row_cache_bytes),
            holds: Mutex::new(BTreeMap::new()),
        })
    }

    fn registry(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        // Poisoning: no registry update can panic half-way (see `lock`).
        self.tables.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn registry_mut(&self) -> std::sync::RwLockWriteGuard<'_, Registry> {
        self.tables.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn table(&self, name: &str) -> Result<Arc<Table>> {
        self.find_table(name)
            .ok_or_else(|| StoreError::UnknownTable(name.to_owned()))
    }

    fn find_table(&self, name: &str) -> Option<Arc<Table>> {
        self.registry().by_name.get(name).cloned()
    }

    /// What the block cache, the memtables and the row caches hold now, and their budgets.
    pub fn memory(&self) -> StoreMemory {
        let registry = self.registry();
        let tables = registry.by_name.len() as u64;
        StoreMemory {
            block_cache_bytes: self.db.cache_size(),
            block_cache_capacity: self.db.cache_capacity(),
            memtable_bytes: self.db.write_buffer_size(),
            memtable_budget: self.memtable_bytes,
            row_cache_bytes: registry
                .by_name
                .values()
                .map(|table| table.cache.stats().bytes)
                .sum(),
            row_cache_budget: self.budget.row_cache_bytes * tables,
        }
    }

    fn corrupt_row(table: &Table, key: &[u8], reason: String) -> StoreError {
        StoreError::Corrupt {
            table: table.name.clone(),
            // A hash, not the rowkey: some designs build rowkeys from phone numbers, and this
            // error ends up in logs.
            key: format!("#{:016x}", xxhash_rust::xxh3::xxh3_64(key)),
            reason,
        }
    }
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("EmbeddedStore")
            .field("tables", &self.tables())
            .field("persist_mode", &self.persist_mode)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl RowStore for EmbeddedStore {
    async fn get_rows(
        &self,
        table: &str,
        rowkeys: &[Vec<u8>],
        columns: Option<&[String]>,
    ) -> Result<Vec<Option<Row>>> {
        self.get_rows_sync(table, rowkeys, columns)
    }

    async fn scan(&self, table: &str, request: &ScanRequest) -> Result<ScanBatch> {
        self.scan_sync(table, request)
    }

    async fn mutate(&self, mutations: Vec<Mutation>) -> Result<WriteReceipt> {
        self.mutate_sync(mutations)
    }

    /// Unhealthy once a failed write halted writes: only a restart brings them back.
    async fn health(&self) -> Result<()> {
        self.check_writable()
    }

    fn tables(&self) -> Vec<String> {
        self.registry()
            .order
            .iter()
            .map(|table| table.name.clone())
            .collect()
    }
}
