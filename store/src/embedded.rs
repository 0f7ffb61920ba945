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
//! plus the keyspace `hbidx.meta` with the format marker and, per table, the highest trimmed
//! feed offset (so that trimming the whole feed never lets sequence numbers restart).
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
use std::collections::hash_map::Entry;
use std::ops::Bound;
use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use fjall::{Database, Keyspace, KeyspaceCreateOptions, OwnedWriteBatch, PersistMode};
use hbidx_schema::model::{ChangeEvent, Mutation};
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

/// How to open an [`EmbeddedStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedStoreOptions {
    /// `fsync` the journal on every `mutate` (survives power loss). Off: each write is flushed to
    /// the OS only, which survives a killed process but not an OS crash.
    pub sync: bool,
    /// Block cache capacity in bytes, shared by all tables. Fjall recommends 20–25% of memory,
    /// or more when the data set fits in memory.
    pub cache_bytes: u64,
}

impl Default for EmbeddedStoreOptions {
    fn default() -> Self {
        Self {
            sync: false,
            cache_bytes: 256 * 1024 * 1024,
        }
    }
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

    fn current(&self) -> i64 {
        *self.watch.borrow()
    }

    fn publish(&self, offset: i64) {
        *lock(&self.committed) = offset;
        self.advanced.notify_all();
        self.watch.send_replace(offset);
    }
}

struct Table {
    name: String,
    rows: Keyspace,
    feed: Keyspace,
    clock: FeedClock,
}

/// State owned by the single writer.
struct Writer {
    /// Next feed sequence number, by table index.
    next_seq: Vec<u64>,
}

/// The embedded store. See the [module docs](self) for layout, durability and blocking behaviour.
///
/// Keeps only the latest version of each cell (HBase `VERSIONS => 1`).
pub struct EmbeddedStore {
    db: Database,
    meta: Keyspace,
    tables: Vec<Table>,
    writer: Mutex<Writer>,
    /// Serializes trims, so the persisted trim floor only ever grows.
    trimmer: Mutex<()>,
    persist_mode: PersistMode,
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

/// The smallest key greater than every key starting with `prefix`, if any.
fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let last_incrementable = prefix.iter().rposition(|&byte| byte != u8::MAX)?;
    let mut successor = prefix[..=last_incrementable].to_vec();
    successor[last_incrementable] += 1;
    Some(successor)
}

fn trimmed_key(table: &str) -> Vec<u8> {
    [TRIMMED_KEY_PREFIX, table.as_bytes()].concat()
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in `dir` with default options, serving `tables`.
    ///
    /// Tables not yet in the directory are created empty. Table names may contain anything but
    /// must be non-empty and short enough for fjall (about 120 bytes of escaped name).
    pub fn open(dir: &Path, tables: &[String]) -> Result<Self> {
        Self::open_with_options(dir, tables, EmbeddedStoreOptions::default())
    }

    /// Opens (creating if needed) the store in `dir`, serving `tables`.
    ///
    /// Only one process may open a directory at a time. Opening replays fjall's journal, which
    /// can take seconds after a large unflushed load.
    pub fn open_with_options(
        dir: &Path,
        tables: &[String],
        options: EmbeddedStoreOptions,
    ) -> Result<Self> {
        let mut names: Vec<&String> = Vec::with_capacity(tables.len());
        for name in tables {
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
            if !names.contains(&name) {
                names.push(name);
            }
        }

        let db = Database::builder(dir)
            .cache_size(options.cache_bytes)
            .open()?;
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

        let mut opened = Vec::with_capacity(names.len());
        let mut next_seq = Vec::with_capacity(names.len());
        for name in names {
            let escaped = escape_table_name(name);
            let rows = db.keyspace(&format!("rows.{escaped}"), KeyspaceCreateOptions::default)?;
            let feed = db.keyspace(&format!("feed.{escaped}"), KeyspaceCreateOptions::default)?;
            let last_in_feed = match feed.last_key_value() {
                Some(guard) => decode_seq(name, &guard.key()?)?,
                None => 0,
            };
            let trimmed = match meta.get(trimmed_key(name))? {
                Some(value) => decode_seq("<meta>", &value)?,
                None => 0,
            };
            let last = last_in_feed.max(trimmed);
            tracing::debug!(table = %name, last_offset = last, "opened table");
            next_seq.push(last + 1);
            opened.push(Table {
                name: name.clone(),
                rows,
                feed,
                clock: FeedClock::new(offset_of(last)),
            });
        }

        Ok(Self {
            db,
            meta,
            tables: opened,
            writer: Mutex::new(Writer { next_seq }),
            trimmer: Mutex::new(()),
            persist_mode: if options.sync {
                PersistMode::SyncAll
            } else {
                PersistMode::Buffer
            },
        })
    }

    fn table_index(&self, name: &str) -> Result<usize> {
        // Linear: stores serve a handful of tables, and this beats hashing the name.
        self.tables
            .iter()
            .position(|table| table.name == name)
            .ok_or_else(|| StoreError::UnknownTable(name.to_owned()))
    }

    fn table(&self, name: &str) -> Result<&Table> {
        self.table_index(name).map(|index| &self.tables[index])
    }

    fn find_table(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|table| table.name == name)
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
        let table = self.table(table)?;
        let projection = Projection::new(columns);
        let mut rows = Vec::with_capacity(rowkeys.len());
        for rowkey in rowkeys {
            // Keys that no write could have stored (fjall rejects an empty key).
            if rowkey.is_empty() || rowkey.len() > MAX_ROWKEY_LEN {
                rows.push(None);
                continue;
            }
            let Some(bytes) = table.rows.get(rowkey)? else {
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
        let table = self.table(table)?;
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
        let mut table_indexes = Vec::with_capacity(mutations.len());
        for mutation in &mutations {
            table_indexes.push(self.table_index(&mutation.table)?);
            validate_mutation(mutation)?;
        }

        let mut writer = lock(&self.writer);
        let mut next_seq = writer.next_seq.clone();
        let mut batch = OwnedWriteBatch::with_capacity(self.db.clone(), 2 * mutations.len())
            .durability(Some(self.persist_mode));
        // The new state of every touched row, keyed by (table, rowkey), so that several mutations
        // of one row in a call build on each other and the batch writes each row once.
        let mut pending: HashMap<(usize, Vec<u8>), (RowState, bool)> =
            HashMap::with_capacity(mutations.len());

        for (mutation, table_index) in mutations.into_iter().zip(table_indexes) {
            let table = &self.tables[table_index];
            if with_feed {
                let seq = next_seq[table_index];
                next_seq[table_index] += 1;
                let event = postcard::to_allocvec(&mutation)
                    .map_err(|error| StoreError::Storage(Box::new(error)))?;
                batch.insert(&table.feed, seq.to_be_bytes(), event);
            }

            let Mutation { rowkey, ops, .. } = mutation;
            let (state, changed) = match pending.entry((table_index, rowkey)) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) => {
                    let rowkey = &entry.key().1;
                    let state = match table.rows.get(rowkey)? {
                        Some(bytes) => RowState::decode(&bytes)
                            .map_err(|reason| Self::corrupt_row(table, rowkey, reason))?,
                        None => RowState::default(),
                    };
                    entry.insert((state, false))
                }
            };
            for op in ops {
                *changed |= state.apply(op);
            }
        }

        for ((table_index, rowkey), (state, changed)) in pending {
            if changed {
                batch.insert(&self.tables[table_index].rows, rowkey, state.encode());
            }
        }

        // Reserve the sequence numbers before committing: if the commit fails they become a gap,
        // which readers skip; reusing them could overwrite events of a later commit.
        let first_seq = std::mem::replace(&mut writer.next_seq, next_seq);
        batch.commit()?;

        let mut receipt = WriteReceipt::default();
        for (index, table) in self.tables.iter().enumerate() {
            let next = writer.next_seq[index];
            if next != first_seq[index] {
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
        let table = self.table(table)?;
        let committed = table.clock.current();
        if max == 0 || after_offset >= committed {
            return Ok(Vec::new());
        }
        let first = u64::try_from(after_offset.max(0)).unwrap_or(0) + 1;
        let last = u64::try_from(committed).unwrap_or(0);
        let capacity = max.min(usize::try_from(last - first + 1).unwrap_or(max));
        let mut events = Vec::with_capacity(capacity);
        for guard in table
            .feed
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
    /// committed offset), returning how many were deleted. Call it once consumers have durably
    /// checkpointed past `upto_offset`. Offsets never restart, even when the whole feed is trimmed.
    pub fn trim_feed(&self, table: &str, upto_offset: i64) -> Result<u64> {
        let table = self.table(table)?;
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

        let mut batch = self.db.batch().durability(Some(self.persist_mode));
        let mut deleted = 0u64;
        for guard in table.feed.range(..=upto.to_be_bytes()) {
            batch.remove(&table.feed, guard.key()?);
            deleted += 1;
        }
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
        let table = self.table(table)?;
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
        self.tables.iter().map(|table| table.name.clone()).collect()
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
