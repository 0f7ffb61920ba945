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
//! # Blocking
//!
//! Reads are point reads or short range scans, microseconds when the blocks are cached, and writes
//! with the buffered journal cost a few microseconds per row, so the async [`RowStore`] methods run
//! them inline instead of paying for `spawn_blocking`. With `sync: true` a `mutate` blocks for an
//! fsync (around a millisecond or more): callers on a small runtime should wrap it in
//! `spawn_blocking` or call [`EmbeddedStore::mutate_sync`] from a blocking thread.

use std::collections::HashMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode};
use hbidx_schema::model::{CellOp, ChangeEvent, Mutation};

use crate::row_cache::{RowCache, RowCacheStats};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::api::{Row, RowStore, ScanBatch, ScanRequest, WriteReceipt};
use crate::error::{Result, StoreError, escape_key};
use crate::row_state::{MAX_ROWKEY_LEN, Projection, RowState, RowView, validate_mutation};

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
/// The first byte of a stored [`TableRecord`]; bump when the record changes.
const TABLE_RECORD_V1: u8 = 1;

/// A table to serve, as [`EmbeddedStore::open_tables`] takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    /// The table name; anything non-empty that fits fjall's keyspace names once escaped.
    pub name: String,
    /// The table's column families, or `None` when the caller doesn't declare them. The store
    /// keeps them for callers that check writes against them (the Thrift gateway); it doesn't
    /// check them itself, because a Kafka-fed table must take whatever its topic carries.
    pub families: Option<Vec<String>>,
}

impl TableSpec {
    /// A table without declared families.
    pub fn named(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            families: None,
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
    pub origin: TableOrigin,
    /// HBase's enabled flag. Configured tables are always enabled; the store only keeps the flag,
    /// callers decide what a disabled table refuses.
    pub enabled: bool,
}

/// A created table as persisted in the meta keyspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct TableRecord {
    families: Vec<String>,
    enabled: bool,
}

impl TableRecord {
    fn encode(&self) -> Result<Vec<u8>> {
        postcard::to_extend(self, vec![TABLE_RECORD_V1])
            .map_err(|error| StoreError::Storage(Box::new(error)))
    }

    fn decode(name: &str, bytes: &[u8]) -> Result<Self> {
        let corrupt = |reason: String| StoreError::Corrupt {
            table: "<meta>".to_owned(),
            key: escape_key(&table_key(name)),
            reason,
        };
        match bytes.split_first() {
            Some((&TABLE_RECORD_V1, rest)) => postcard::from_bytes(rest)
                .map_err(|error| corrupt(format!("table record: {error}"))),
            Some((version, _)) => Err(corrupt(format!(
                "table record version {version}, this build reads {TABLE_RECORD_V1}"
            ))),
            None => Err(corrupt("empty table record".to_owned())),
        }
    }
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

/// The latest committed feed offset of one table, observable both from async code (a watch
/// channel) and from plain threads (a condvar).
struct FeedClock {
    committed: Mutex<i64>,
    advanced: Condvar,
    watch: watch::Sender<i64>,
}

impl FeedClock {
    fn new(committed: i64) -> Self {
        Self {
            committed: Mutex::new(committed),
            advanced: Condvar::new(),
            watch: watch::Sender::new(committed),
        }
    }

    /// The offset the condvar waiters see. Reading the watch instead made a feed reader spin:
    /// woken (or not waiting, since the mutex already said "advanced") between `publish`'s
    /// mutex update and its watch update, it found no new events through the watch's older
    /// offset, and waited again on a condition that was already true, until the writer got the
    /// CPU back to finish publishing. With the writer preempted by the very reader it woke,
    /// that was milliseconds of spinning per write: a third of the indexer thread's CPU at 100
    /// writes/s.
    fn current(&self) -> i64 {
        *lock(&self.committed)
    }

    fn publish(&self, offset: i64) {
        // The watch first, so that async subscribers are never behind a thread that was woken.
        self.watch.send_replace(offset);
        *lock(&self.committed) = offset;
        self.advanced.notify_all();
    }
}

struct Table {
    name: String,
    rows: Keyspace,
    /// `None` for created tables: nothing indexes them, so nothing would ever trim a feed.
    feed: Option<Keyspace>,
    clock: FeedClock,
    /// Next feed sequence number; only changed under the writer mutex.
    next_seq: AtomicU64,
    families: Option<Vec<String>>,
    origin: TableOrigin,
    enabled: AtomicBool,
    /// Recently read rows; every committed row write invalidates its key.
    cache: RowCache,
}

impl Table {
    fn info(&self) -> TableInfo {
        TableInfo {
            name: self.name.clone(),
            families: self.families.clone(),
            origin: self.origin,
            enabled: self.enabled.load(Ordering::Acquire),
        }
    }
}

/// The tables being served, in the order they were opened or created.
#[derive(Default)]
struct Registry {
    by_name: HashMap<String, Arc<Table>>,
    order: Vec<Arc<Table>>,
}

impl Registry {
    fn insert(&mut self, table: Arc<Table>) {
        self.by_name.insert(table.name.clone(), table.clone());
        self.order.push(table);
    }

    fn remove(&mut self, name: &str) -> Option<Arc<Table>> {
        let table = self.by_name.remove(name)?;
        self.order.retain(|other| !Arc::ptr_eq(other, &table));
        Some(table)
    }
}

/// The embedded store. See the [module docs](self) for layout, durability and blocking behaviour.
///
/// Keeps only the latest version of each cell (HBase `VERSIONS => 1`).
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
}

/// What one table may hold in memory.
#[derive(Debug, Clone, Copy)]
struct TableBudget {
    row_cache_bytes: u64,
    /// The memtable limit of each keyspace created for the table.
    keyspace_memtable_bytes: u64,
}

/// Locks a mutex, ignoring poisoning: every critical section in this module leaves its state
/// consistent at each point a panic could occur.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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

fn decode_seq(table: &str, key: &[u8]) -> Result<u64> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| StoreError::Corrupt {
        table: table.to_owned(),
        key: escape_key(key),
        reason: format!("feed key of {} bytes, expected 8", key.len()),
    })?;
    Ok(u64::from_be_bytes(bytes))
}

fn offset_of(seq: u64) -> i64 {
    // Sequence numbers count commits from 1; they can't get anywhere near 2^63.
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// The smallest key greater than every key starting with `prefix`, if any. Shared with the
/// HBase store, which turns a prefix scan into a start/stop range the same way.
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let last_incrementable = prefix.iter().rposition(|&byte| byte != u8::MAX)?;
    let mut successor = prefix[..=last_incrementable].to_vec();
    successor[last_incrementable] += 1;
    Some(successor)
}

fn trimmed_key(table: &str) -> Vec<u8> {
    [TRIMMED_KEY_PREFIX, table.as_bytes()].concat()
}

fn table_key(table: &str) -> Vec<u8> {
    [TABLE_KEY_PREFIX, table.as_bytes()].concat()
}

/// Checks a table name against what the keyspace names can hold.
fn validate_table_name(name: &str) -> Result<()> {
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
            // a keyspace holds up to about two of them.
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
            let table = Self::open_table(
                &db,
                &meta,
                &spec.name,
                spec.families.clone(),
                TableOrigin::Configured,
                true,
                budget,
            )?;
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
            let table = Self::open_table(
                &db,
                &meta,
                name,
                Some(record.families),
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
        })
    }

    /// Opens (creating if needed) the keyspaces of one table.
    fn open_table(
        db: &Database,
        meta: &Keyspace,
        name: &str,
        families: Option<Vec<String>>,
        origin: TableOrigin,
        enabled: bool,
        budget: TableBudget,
    ) -> Result<Table> {
        let escaped = escape_table_name(name);
        // Only read when a keyspace is created: fjall keeps the limit it was created with.
        let options =
            || KeyspaceCreateOptions::default().max_memtable_size(budget.keyspace_memtable_bytes);
        let rows = db.keyspace(&format!("rows.{escaped}"), options)?;
        let (feed, last) = match origin {
            TableOrigin::Configured => {
                let feed = db.keyspace(&format!("feed.{escaped}"), options)?;
                let last_in_feed = match feed.last_key_value() {
                    Some(guard) => decode_seq(name, &guard.key()?)?,
                    None => 0,
                };
                let trimmed = match meta.get(trimmed_key(name))? {
                    Some(value) => decode_seq("<meta>", &value)?,
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
            clock: FeedClock::new(offset_of(last)),
            next_seq: AtomicU64::new(last + 1),
            families,
            origin,
            enabled: AtomicBool::new(enabled),
            cache: RowCache::new(budget.row_cache_bytes),
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

    /// Seals the memtables of `tables` (those just written) when all memtables together are
    /// over their budget. fjall's own limit is per keyspace and fixed when the keyspace is
    /// created, so this is what holds a data dir created with other limits, or a process with
    /// many tables, to the budget. Sealed memtables are flushed by fjall's background workers,
    /// and fjall slows writers down when flushes fall behind: over budget means slower writes.
    ///
    /// A keyspace that still has a sealed memtable waiting for its flush is left alone: what is
    /// over the budget then is the flush backlog, and sealing the small active memtable again
    /// at every write would only make tiny tables (and fjall stalls writers at four sealed
    /// memtables).
    fn keep_memtables_in_budget(&self, tables: &[Arc<Table>]) {
        if self.db.write_buffer_size() <= self.memtable_bytes {
            return;
        }
        for table in tables {
            for keyspace in std::iter::once(&table.rows).chain(table.feed.as_ref()) {
                if keyspace.sealed_memtable_count() > 0 {
                    continue;
                }
                if let Err(err) = keyspace.rotate_memtable() {
                    tracing::warn!(table = %table.name, error = %err, "sealing a memtable failed");
                }
            }
        }
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

    /// Hits, misses and size of `table`'s row cache.
    pub fn row_cache_stats(&self, table: &str) -> Result<RowCacheStats> {
        self.table(table).map(|table| table.cache.stats())
    }

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

    /// Creates an empty table with `families`, enabled, rows only (no change feed), and
    /// remembers it across restarts.
    ///
    /// Errors: [`StoreError::TableExists`] when a table of that name is served,
    /// [`StoreError::InvalidRequest`] for an unusable name or family list.
    pub fn create_table(&self, name: &str, families: &[String]) -> Result<TableInfo> {
        validate_table_name(name)?;
        validate_families(name, families)?;
        let _writing = lock(&self.writer);
        if self.find_table(name).is_some() {
            return Err(StoreError::TableExists(name.to_owned()));
        }
        // Keyspaces first, then the record: a crash in between leaves empty keyspaces that a
        // later create of the same name simply reuses.
        let table = Self::open_table(
            &self.db,
            &self.meta,
            name,
            Some(families.to_vec()),
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
        self.write_record(name, families, true)?;
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
        let table = self.created_table(name)?;
        // Unregister first so no new read starts on it; running reads keep their `Arc` and
        // fjall keeps the files until the last handle is gone. The rows go before the record:
        // a crash in between brings the table back empty, never leaves rows without a table.
        self.registry_mut().remove(name);
        self.db.delete_keyspace(table.rows.clone())?;
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        batch.remove(&self.meta, table_key(name));
        batch.commit()?;
        tracing::info!(table = %name, "deleted table");
        Ok(())
    }

    /// Sets HBase's enabled flag of a created table (persisted). Configured tables are always
    /// enabled: [`StoreError::ConfiguredTable`].
    pub fn set_table_enabled(&self, name: &str, enabled: bool) -> Result<()> {
        let _writing = lock(&self.writer);
        let table = self.created_table(name)?;
        let families = table.families.clone().unwrap_or_default();
        self.write_record(name, &families, enabled)?;
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

    fn write_record(&self, name: &str, families: &[String], enabled: bool) -> Result<()> {
        let record = TableRecord {
            families: families.to_vec(),
            enabled,
        };
        // Rare and small: always fsync, so a table the client saw created survives power loss.
        let mut batch = self.db.batch().durability(Some(PersistMode::SyncAll));
        batch.insert(&self.meta, table_key(name), record.encode()?);
        batch.commit()?;
        Ok(())
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

    /// [`RowStore::get_rows`], callable from any thread.
    pub fn get_rows_sync(
        &self,
        table: &str,
        rowkeys: &[Vec<u8>],
        columns: Option<&[String]>,
    ) -> Result<Vec<Option<Row>>> {
        let table = &*self.table(table)?;
        let projection = Projection::new(columns);
        let mut rows = Vec::with_capacity(rowkeys.len());
        for rowkey in rowkeys {
            // Keys that no write could have stored (fjall rejects an empty key).
            if rowkey.is_empty() || rowkey.len() > MAX_ROWKEY_LEN {
                rows.push(None);
                continue;
            }
            let Some(bytes) = table.cache.get_or_read(rowkey, || table.rows.get(rowkey))? else {
                rows.push(None);
                continue;
            };
            let view = RowView::decode(&bytes)
                .map_err(|reason| Self::corrupt_row(table, rowkey, reason))?;
            let cells = view.visible_cells(projection);
            rows.push((!cells.is_empty()).then(|| Row {
                rowkey: rowkey.clone(),
                cells,
            }));
        }
        Ok(rows)
    }

    /// [`RowStore::scan`], callable from any thread.
    pub fn scan_sync(&self, table: &str, request: &ScanRequest) -> Result<ScanBatch> {
        let table = &*self.table(table)?;
        if request.batch == 0 {
            return Err(StoreError::InvalidRequest {
                reason: "scan batch size must be at least 1".to_owned(),
            });
        }
        let projection = Projection::new(request.columns.as_deref());

        let mut lower: &[u8] = &request.start;
        let mut upper: Option<&[u8]> = request.stop.as_deref();
        let prefix_end;
        if let Some(prefix) = request.prefix.as_deref() {
            lower = lower.max(prefix);
            prefix_end = prefix_successor(prefix);
            if let Some(prefix_end) = prefix_end.as_deref() {
                upper = Some(upper.map_or(prefix_end, |stop| stop.min(prefix_end)));
            }
        }
        if upper.is_some_and(|upper| upper <= lower) {
            return Ok(ScanBatch::default());
        }
        let upper = upper.map_or(Bound::Unbounded, Bound::Excluded);

        let mut batch = ScanBatch::default();
        for guard in table
            .rows
            .range::<&[u8], _>((Bound::Included(lower), upper))
        {
            let (key, value) = guard.into_inner()?;
            let view =
                RowView::decode(&value).map_err(|reason| Self::corrupt_row(table, &key, reason))?;
            if batch.rows.len() == request.batch {
                // Look ahead to the next row that would be returned, so `next_start` is `None`
                // exactly when the scan is complete.
                if view.has_visible_cell(projection) {
                    batch.next_start = Some(key.to_vec());
                    break;
                }
                continue;
            }
            let cells = view.visible_cells(projection);
            if !cells.is_empty() {
                batch.rows.push(Row {
                    rowkey: key.to_vec(),
                    cells,
                });
            }
        }
        Ok(batch)
    }

    /// [`RowStore::mutate`], callable from any thread. The whole call is one fjall write batch.
    pub fn mutate_sync(&self, mutations: Vec<Mutation>) -> Result<WriteReceipt> {
        self.mutate_inner(mutations, true)
    }

    /// Applies mutations that already come from a durable log (a Kafka topic) to the rows only,
    /// without change-feed events: the log is the feed, and its consumer indexes them itself.
    /// Replaying a mutation is harmless because cell timestamps decide (see `RowState`).
    pub fn apply_replicated(&self, mutations: Vec<Mutation>) -> Result<()> {
        self.mutate_inner(mutations, false).map(|_| ())
    }

    fn mutate_inner(&self, mutations: Vec<Mutation>, with_feed: bool) -> Result<WriteReceipt> {
        if mutations.is_empty() {
            return Ok(WriteReceipt::default());
        }
        // The distinct tables of the call, and each mutation's slot among them.
        let mut touched: Vec<Arc<Table>> = Vec::new();
        let mut slots = Vec::with_capacity(mutations.len());
        for mutation in &mutations {
            let slot = match touched
                .iter()
                .position(|table| table.name == mutation.table)
            {
                Some(slot) => slot,
                None => {
                    touched.push(self.table(&mutation.table)?);
                    touched.len() - 1
                }
            };
            slots.push(slot);
            validate_mutation(mutation)?;
        }

        let writer = lock(&self.writer);
        // Tables are only deleted under the writer mutex: one still registered now stays so
        // until this batch is committed.
        {
            let registry = self.registry();
            for table in &touched {
                if !registry
                    .by_name
                    .get(&table.name)
                    .is_some_and(|current| Arc::ptr_eq(current, table))
                {
                    return Err(StoreError::UnknownTable(table.name.clone()));
                }
            }
        }
        let first_seq: Vec<u64> = touched
            .iter()
            .map(|table| table.next_seq.load(Ordering::Relaxed))
            .collect();
        let mut next_seq = first_seq.clone();
        let mut batch = OwnedWriteBatch::with_capacity(self.db.clone(), 2 * mutations.len())
            .durability(Some(self.persist_mode));
        // Each mutation's row, as (table slot, rowkey, ops), in call order.
        let mut rows: Vec<(usize, Vec<u8>, Vec<CellOp>)> = Vec::with_capacity(mutations.len());
        for (mutation, slot) in mutations.into_iter().zip(slots) {
            let table = &*touched[slot];
            if with_feed && let Some(feed) = &table.feed {
                let seq = next_seq[slot];
                next_seq[slot] += 1;
                let event = postcard::to_allocvec(&mutation)
                    .map_err(|error| StoreError::Storage(Box::new(error)))?;
                batch.insert(feed, seq.to_be_bytes(), event);
            }
            let Mutation { rowkey, ops, .. } = mutation;
            rows.push((slot, rowkey, ops));
        }
        // Rows are read, merged and written in key order. Rowkeys are usually hashed, so in call
        // order every read (and every insert of the batch into the memtable) descends the
        // memtable's skiplist to an unrelated place, a cache miss per level; in key order
        // neighbouring descents share their upper levels. The sort is stable, so several
        // mutations of one row still apply in call order, building on each other, and the
        // batch writes each row once.
        rows.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut written = Vec::new();
        let mut rows = rows.into_iter().peekable();
        while let Some((slot, rowkey, ops)) = rows.next() {
            let table = &*touched[slot];
            let mut state = match table.rows.get(&rowkey)? {
                Some(bytes) => RowState::decode(&bytes)
                    .map_err(|reason| Self::corrupt_row(table, &rowkey, reason))?,
                None => RowState::default(),
            };
            let mut changed = false;
            for op in ops {
                changed |= state.apply(op);
            }
            while let Some((_, _, ops)) =
                rows.next_if(|(next_slot, next_key, _)| *next_slot == slot && *next_key == rowkey)
            {
                for op in ops {
                    changed |= state.apply(op);
                }
            }
            if changed {
                written.push((slot, rowkey.clone()));
                batch.insert(&table.rows, rowkey, state.encode());
            }
        }

        // Reserve the sequence numbers before committing: if the commit fails they become a gap,
        // which readers skip; reusing them could overwrite events of a later commit.
        for (table, next) in touched.iter().zip(&next_seq) {
            table.next_seq.store(*next, Ordering::Relaxed);
        }
        batch.commit()?;
        // Now that the rows are visible, no read from before the commit may stay cached.
        for (slot, rowkey) in &written {
            touched[*slot].cache.invalidate(rowkey);
        }
        self.keep_memtables_in_budget(&touched);

        let mut receipt = WriteReceipt::default();
        for ((table, first), next) in touched.iter().zip(first_seq).zip(next_seq) {
            if next != first {
                let last = offset_of(next - 1);
                table.clock.publish(last);
                receipt
                    .last_offset_by_table
                    .push((table.name.clone(), last));
            }
        }
        drop(writer);
        receipt.last_offset_by_table.sort_unstable();
        Ok(receipt)
    }

    /// Change events of `table` with offset `> after_offset`, oldest first, at most `max`.
    ///
    /// The change feed is partition 0; an event's offset is its sequence number. Only committed
    /// events are returned, so a reader never sees an event whose row write could still fail.
    pub fn read_feed(
        &self,
        table: &str,
        after_offset: i64,
        max: usize,
    ) -> Result<Vec<ChangeEvent>> {
        let table = &*self.table(table)?;
        let Some(feed) = &table.feed else {
            // A created table: rows only.
            return Ok(Vec::new());
        };
        let committed = table.clock.current();
        if max == 0 || after_offset >= committed {
            return Ok(Vec::new());
        }
        let first = u64::try_from(after_offset.max(0)).unwrap_or(0) + 1;
        let last = u64::try_from(committed).unwrap_or(0);
        let capacity = max.min(usize::try_from(last - first + 1).unwrap_or(max));
        let mut events = Vec::with_capacity(capacity);
        for guard in feed
            .range(first.to_be_bytes()..=last.to_be_bytes())
            .take(max)
        {
            let (key, value) = guard.into_inner()?;
            let seq = decode_seq(&table.name, &key)?;
            let mutation = postcard::from_bytes(&value)
                .map_err(|error| Self::corrupt_row(table, &key, format!("feed event: {error}")))?;
            events.push(ChangeEvent {
                partition: 0,
                offset: offset_of(seq),
                mutation,
            });
        }
        Ok(events)
    }

    /// The offset of the last committed change event of `table`; 0 when nothing was ever
    /// written. Unknown tables have no events, so 0 as well.
    pub fn last_offset(&self, table: &str) -> i64 {
        self.find_table(table)
            .map_or(0, |table| table.clock.current())
    }

    /// Watches the last committed offset of `table`; the value changes after each commit that
    /// touched the table. Works without a tokio runtime (`borrow`, `has_changed`).
    ///
    /// For an unknown table the channel is already closed (`has_changed` and `changed` return an
    /// error) and holds 0.
    pub fn subscribe(&self, table: &str) -> watch::Receiver<i64> {
        match self.find_table(table) {
            Some(table) => table.clock.watch.subscribe(),
            None => watch::channel(0).1,
        }
    }

    /// Blocks the calling thread until the last committed offset of `table` exceeds `after`, or
    /// `timeout` passes; returns the last committed offset either way. For use on plain threads,
    /// not inside async code. Returns 0 at once for unknown tables.
    pub fn wait_for_offset_after(&self, table: &str, after: i64, timeout: Duration) -> i64 {
        let Some(table) = self.find_table(table) else {
            return 0;
        };
        let committed = lock(&table.clock.committed);
        let (committed, _) = table
            .clock
            .advanced
            .wait_timeout_while(committed, timeout, |committed| *committed <= after)
            .unwrap_or_else(PoisonError::into_inner);
        *committed
    }

    /// Deletes the change events of `table` with offset `<= upto_offset` (clamped to the last
    /// committed offset), returning how many offsets were trimmed (gaps left by failed commits
    /// included). Call it once consumers have durably checkpointed past `upto_offset`. Offsets
    /// never restart, even when the whole feed is trimmed.
    pub fn trim_feed(&self, table: &str, upto_offset: i64) -> Result<u64> {
        let table = self.table(table)?;
        let Some(feed) = &table.feed else {
            return Ok(0);
        };
        let _trimming = lock(&self.trimmer);
        let upto = upto_offset.min(table.clock.current());
        let Ok(upto) = u64::try_from(upto) else {
            return Ok(0);
        };
        let floor_key = trimmed_key(&table.name);
        let floor = match self.meta.get(&floor_key)? {
            Some(value) => decode_seq("<meta>", &value)?,
            None => 0,
        };
        if upto <= floor {
            return Ok(0);
        }

        // Everything at or below the floor is gone already, and sequence numbers are allocated
        // one by one, so the events to delete are exactly the keys `floor + 1 ..= upto`: they
        // are removed by key, without reading them back through a range scan (which cost as
        // much as the deletes). A sequence number lost to a failed commit is a gap; its
        // tombstone deletes nothing.
        let mut batch = self.db.batch().durability(Some(self.persist_mode));
        for seq in floor + 1..=upto {
            batch.remove(feed, seq.to_be_bytes());
        }
        let deleted = upto - floor;
        batch.insert(&self.meta, floor_key, upto.to_be_bytes());
        batch.commit()?;
        tracing::debug!(table = %table.name, upto, deleted, "trimmed change feed");
        Ok(deleted)
    }

    /// An O(1) estimate of the number of stored rows of `table` (including fully deleted rows
    /// whose tombstones are kept; drifts with overwrites until compaction).
    pub fn row_count_estimate(&self, table: &str) -> Result<u64> {
        let table = self.table(table)?;
        Ok(u64::try_from(table.rows.approximate_len()).unwrap_or(u64::MAX))
    }

    /// The exact number of rows of `table` with at least one visible cell. Scans the table.
    pub fn count_rows(&self, table: &str) -> Result<u64> {
        let table = &*self.table(table)?;
        let everything = Projection::new(None);
        let mut count = 0;
        for guard in table.rows.iter() {
            let (key, value) = guard.into_inner()?;
            let view =
                RowView::decode(&value).map_err(|reason| Self::corrupt_row(table, &key, reason))?;
            if view.has_visible_cell(everything) {
                count += 1;
            }
        }
        Ok(count)
    }

    /// Fsyncs the journal, making every committed write survive power loss. Dropping the store
    /// does this too.
    pub fn sync_to_disk(&self) -> Result<()> {
        self.db.persist(PersistMode::SyncAll)?;
        Ok(())
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

    fn tables(&self) -> Vec<String> {
        self.registry()
            .order
            .iter()
            .map(|table| table.name.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hbidx_schema::model::CellOp;

    fn open(dir: &Path) -> EmbeddedStore {
        EmbeddedStore::open(dir, &["t".to_owned(), "ns:other".to_owned()]).expect("opens")
    }

    fn put(table: &str, rowkey: &str, column: &str, ts: i64, value: &str) -> Mutation {
        Mutation {
            table: table.to_owned(),
            rowkey: rowkey.as_bytes().to_vec(),
            ops: vec![CellOp::Put {
                column: column.to_owned(),
                ts,
                value: value.as_bytes().to_vec(),
            }],
        }
    }

    /// Both threads on one CPU: there a reader woken by a write's publish runs before the writer
    /// has finished publishing, which is how the indexer came to spin (see `FeedClock::current`).
    fn pin_to_first_cpu() {
        let allowed = rustix::thread::sched_getaffinity(None).expect("reads the CPU set");
        let first = (0..rustix::thread::CpuSet::MAX_CPU)
            .find(|&cpu| allowed.is_set(cpu))
            .expect("some CPU is allowed");
        let mut cpus = rustix::thread::CpuSet::new();
        cpus.set(first);
        rustix::thread::sched_setaffinity(None, &cpus).expect("pins the thread");
    }

    #[test]
    fn a_feed_reader_told_the_feed_advanced_finds_the_new_events() {
        const WRITES: i64 = 2000;
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(open(dir.path()));
        let reader_store = store.clone();
        let reader = std::thread::spawn(move || {
            pin_to_first_cpu();
            let (mut after, mut empty_reads) = (0, 0);
            while after < WRITES {
                let committed =
                    reader_store.wait_for_offset_after("t", after, Duration::from_secs(10));
                assert!(committed > after, "no write for 10 s at offset {after}");
                let events = reader_store.read_feed("t", after, 100).expect("reads");
                match events.last() {
                    Some(last) => after = last.offset,
                    None => empty_reads += 1,
                }
            }
            empty_reads
        });
        pin_to_first_cpu();
        for n in 0..WRITES {
            let key = format!("r{n}");
            store
                .mutate_sync(vec![put("t", &key, "f:q", 1, "v")])
                .expect("writes");
        }
        assert_eq!(
            reader.join().expect("reader"),
            0,
            "every wait that said the feed advanced was followed by a read that found events"
        );
    }

    #[test]
    fn table_names_escape_injectively() {
        assert_eq!(escape_table_name("ns:users"), "ns_3Ausers");
        assert_eq!(escape_table_name("a_b.c-d"), "a_5Fb.c-d");
        assert_ne!(escape_table_name("a:b"), escape_table_name("a_3Ab"));
        assert_eq!(escape_table_name("用"), "_E7_94_A8");
    }

    #[test]
    fn prefix_successor_skips_trailing_max_bytes() {
        assert_eq!(prefix_successor(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_successor(&[1, 0xFF, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_successor(&[0xFF]), None);
        assert_eq!(prefix_successor(b""), None);
    }

    #[test]
    fn invalid_table_names_are_rejected_at_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = EmbeddedStore::open(dir.path(), &[String::new()]);
        assert!(matches!(empty, Err(StoreError::InvalidRequest { .. })));
        let long = EmbeddedStore::open(dir.path(), &[":".repeat(100)]);
        assert!(matches!(long, Err(StoreError::InvalidRequest { .. })));
    }

    #[test]
    fn a_call_with_one_bad_mutation_writes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path());
        let mut bad = put("t", "r2", "i:a", 1, "v");
        bad.ops.push(CellOp::DeleteCell {
            column: "nocolon".to_owned(),
            ts: 1,
        });
        let result = store.mutate_sync(vec![put("t", "r1", "i:a", 1, "v"), bad]);
        assert!(matches!(result, Err(StoreError::InvalidMutation { .. })));
        let unknown = store.mutate_sync(vec![
            put("t", "r1", "i:a", 1, "v"),
            put("x", "r", "i:a", 1, "v"),
        ]);
        assert!(matches!(unknown, Err(StoreError::UnknownTable(name)) if name == "x"));
        assert_eq!(store.last_offset("t"), 0);
        assert_eq!(store.count_rows("t").expect("count"), 0);
    }

    #[test]
    fn receipt_names_each_touched_table_with_its_last_offset() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path());
        let receipt = store
            .mutate_sync(vec![
                put("t", "a", "i:x", 1, "1"),
                put("ns:other", "a", "i:x", 1, "1"),
                put("t", "b", "i:x", 1, "1"),
            ])
            .expect("mutate");
        assert_eq!(
            receipt.last_offset_by_table,
            [("ns:other".to_owned(), 1), ("t".to_owned(), 2)]
        );
        assert!(
            store
                .mutate_sync(Vec::new())
                .expect("empty")
                .last_offset_by_table
                .is_empty()
        );
    }

    #[test]
    fn several_mutations_of_one_row_in_a_call_build_on_each_other() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path());
        store
            .mutate_sync(vec![
                put("t", "r", "i:a", 5, "first"),
                put("t", "r", "i:b", 5, "b"),
                Mutation {
                    table: "t".to_owned(),
                    rowkey: b"r".to_vec(),
                    ops: vec![CellOp::DeleteCell {
                        column: "i:b".to_owned(),
                        ts: 6,
                    }],
                },
                put("t", "r", "i:a", 4, "older, ignored"),
            ])
            .expect("mutate");
        let rows = store
            .get_rows_sync("t", &[b"r".to_vec()], None)
            .expect("get");
        let row = rows[0].as_ref().expect("row exists");
        assert_eq!(row.cells.len(), 1);
        assert_eq!(row.cells["i:a"].value, b"first");
        assert_eq!(store.read_feed("t", 0, 100).expect("feed").len(), 4);
    }

    #[test]
    fn rows_interleaved_in_a_call_keep_their_own_call_order() {
        // Rows are merged in key order (see mutate_inner); each row's mutations must still apply
        // in call order. At equal timestamps the later put wins, so the order is observable.
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path());
        let keys = ["r9", "r1", "r5", "r0", "r7"];
        let mut mutations = Vec::new();
        for round in 0..50 {
            for key in keys {
                mutations.push(put("t", key, "i:a", 5, &format!("{key}-{round}")));
            }
        }
        mutations.push(put("t", "r5", "i:b", 7, "only b"));
        store.mutate_sync(mutations).expect("mutate");
        let rowkeys: Vec<Vec<u8>> = keys.iter().map(|key| key.as_bytes().to_vec()).collect();
        let rows = store.get_rows_sync("t", &rowkeys, None).expect("get");
        for (key, row) in keys.iter().zip(&rows) {
            let row = row.as_ref().expect("row exists");
            assert_eq!(
                row.cells["i:a"].value,
                format!("{key}-49").into_bytes(),
                "{key}"
            );
        }
        assert_eq!(rows[2].as_ref().expect("r5").cells["i:b"].value, b"only b");
        assert_eq!(store.read_feed("t", 0, 1000).expect("feed").len(), 251);
    }

    #[test]
    fn created_tables_survive_reopen_have_no_feed_and_can_be_deleted() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let store = open(dir.path());
            let families = ["cf".to_owned(), "x".to_owned()];
            let info = store.create_table("made", &families).expect("create");
            assert_eq!(info.origin, TableOrigin::Created);
            assert!(matches!(
                store.create_table("made", &families),
                Err(StoreError::TableExists(name)) if name == "made"
            ));
            assert!(matches!(
                store.create_table("t", &families),
                Err(StoreError::TableExists(_))
            ));
            let receipt = store
                .mutate_sync(vec![
                    put("made", "r", "cf:a", 1, "v"),
                    put("t", "r", "i:a", 1, "v"),
                ])
                .expect("mutate");
            // Rows only: no feed event, no offset for the created table.
            assert_eq!(receipt.last_offset_by_table, [("t".to_owned(), 1)]);
            assert!(store.read_feed("made", 0, 10).expect("feed").is_empty());
            assert_eq!(store.trim_feed("made", 10).expect("trim"), 0);
            store.set_table_enabled("made", false).expect("disable");
            assert!(matches!(
                store.set_table_enabled("t", false),
                Err(StoreError::ConfiguredTable(_))
            ));
            assert!(matches!(
                store.delete_table("t"),
                Err(StoreError::ConfiguredTable(_))
            ));
        }
        let store = open(dir.path());
        assert_eq!(store.tables(), ["t", "ns:other", "made"]);
        let made = store.table_info("made").expect("info");
        assert_eq!(
            made,
            TableInfo {
                name: "made".to_owned(),
                families: Some(vec!["cf".to_owned(), "x".to_owned()]),
                origin: TableOrigin::Created,
                enabled: false,
            }
        );
        let rows = store
            .get_rows_sync("made", &[b"r".to_vec()], None)
            .expect("get");
        assert_eq!(rows[0].as_ref().expect("row").cells["cf:a"].value, b"v");

        store.delete_table("made").expect("delete");
        assert!(matches!(
            store.get_rows_sync("made", &[b"r".to_vec()], None),
            Err(StoreError::UnknownTable(_))
        ));
        assert!(matches!(
            store.mutate_sync(vec![put("made", "r", "cf:a", 2, "v")]),
            Err(StoreError::UnknownTable(_))
        ));
        // Created again under the same name: empty.
        store
            .create_table("made", &["cf".to_owned()])
            .expect("create again");
        assert_eq!(store.count_rows("made").expect("count"), 0);
        drop(store);
        let store = open(dir.path());
        assert_eq!(
            store.table_info("made").expect("info").families,
            Some(vec!["cf".to_owned()])
        );
    }

    #[test]
    fn create_table_checks_names_and_families_and_never_adopts_old_rows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path());
        for families in [
            vec![],
            vec!["a:b".to_owned()],
            vec!["a".to_owned(), "a".to_owned()],
        ] {
            assert!(matches!(
                store.create_table("x", &families),
                Err(StoreError::InvalidRequest { .. })
            ));
        }
        assert!(matches!(
            store.create_table("", &["cf".to_owned()]),
            Err(StoreError::InvalidRequest { .. })
        ));
        store
            .mutate_sync(vec![put("t", "r", "i:a", 1, "v")])
            .expect("mutate");
        drop(store);
        // `t` is no longer configured; its rows stay on disk and are not taken over.
        let store = EmbeddedStore::open(dir.path(), &[]).expect("opens");
        let error = store.create_table("t", &["i".to_owned()]).unwrap_err();
        assert!(error.to_string().contains("earlier config"), "{error}");
    }

    #[test]
    fn unknown_tables_have_an_empty_closed_feed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path());
        assert_eq!(store.last_offset("nope"), 0);
        assert!(store.subscribe("nope").has_changed().is_err());
        assert_eq!(
            store.wait_for_offset_after("nope", 0, Duration::from_secs(5)),
            0
        );
        assert!(matches!(
            store.read_feed("nope", 0, 1),
            Err(StoreError::UnknownTable(_))
        ));
    }
}
