//! The change feed: the per-table clock of the last committed offset, and reading, waiting on
//! and trimming the events that every write to a configured table commits with its rows.

use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use hbidx_schema::model::ChangeEvent;
use tokio::sync::watch;

use crate::error::{Result, StoreError, escape_key};

use super::{EmbeddedStore, TRIMMED_KEY_PREFIX, lock};

/// The latest committed feed offset of one table, observable both from async code (a watch
/// channel) and from plain threads (a condvar).
pub(super) struct FeedClock {
    committed: Mutex<i64>,
    advanced: Condvar,
    watch: watch::Sender<i64>,
    /// Threads blocked in [`EmbeddedStore::wait_for_offset_after`], changed under `committed`.
    waiters: std::sync::atomic::AtomicUsize,
}

impl FeedClock {
    pub(super) fn new(committed: i64) -> Self {
        Self {
            committed: Mutex::new(committed),
            advanced: Condvar::new(),
            watch: watch::Sender::new(committed),
            waiters: std::sync::atomic::AtomicUsize::new(0),
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

    pub(super) fn publish(&self, offset: i64) {
        // The watch first, so that async subscribers are never behind a thread that was woken.
        self.watch.send_replace(offset);
        *lock(&self.committed) = offset;
        self.advanced.notify_all();
    }
}

/// Keeps a table's change feed from being trimmed past an offset while it lives: what a reindex
/// from the store takes before its scan, so that the events written during the scan are still
/// in the feed when the new index resumes from its start checkpoint (the live indexer goes on
/// committing and trimming meanwhile). Dropped, the next trim catches up.
pub struct FeedHold {
    table: std::sync::Arc<super::Table>,
    id: u64,
    floor: i64,
}

impl FeedHold {
    /// The trim floor when the hold was taken: every event above it was still in the feed
    /// then, and stays there until [`FeedHold::raise`] moves the hold.
    pub fn floor(&self) -> i64 {
        self.floor
    }

    /// Lets trims go up to `offset` (never lower than the hold already allows).
    pub fn raise(&self, offset: i64) {
        if let Some(held) = lock(&self.table.holds).get_mut(&self.id) {
            *held = (*held).max(offset);
        }
    }
}

impl Drop for FeedHold {
    fn drop(&mut self) {
        lock(&self.table.holds).remove(&self.id);
    }
}

impl std::fmt::Debug for FeedHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FeedHold")
            .field("table", &self.table.name)
            .field("floor", &self.floor)
            .finish_non_exhaustive()
    }
}

pub(super) fn decode_seq(table: &str, key: &[u8]) -> Result<u64> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| StoreError::Corrupt {
        table: table.to_owned(),
        key: escape_key(key),
        reason: format!("feed key of {} bytes, expected 8", key.len()),
    })?;
    Ok(u64::from_be_bytes(bytes))
}

pub(super) fn offset_of(seq: u64) -> i64 {
    // Sequence numbers count commits from 1; they can't get anywhere near 2^63.
    i64::try_from(seq).unwrap_or(i64::MAX)
}

pub(super) fn trimmed_key(table: &str) -> Vec<u8> {
    [TRIMMED_KEY_PREFIX, table.as_bytes()].concat()
}

impl EmbeddedStore {
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
        let waiters = &table.clock.waiters;
        waiters.fetch_add(1, Ordering::SeqCst);
        let (committed, _) = table
            .clock
            .advanced
            .wait_timeout_while(committed, timeout, |committed| *committed <= after)
            .unwrap_or_else(PoisonError::into_inner);
        waiters.fetch_sub(1, Ordering::SeqCst);
        *committed
    }

    /// How many threads are blocked in [`Self::wait_for_offset_after`] on `table`. A thread
    /// counted here has checked the offset under the clock's lock, so any commit from now on
    /// wakes it.
    pub fn feed_waiters(&self, table: &str) -> usize {
        self.find_table(table)
            .map_or(0, |table| table.clock.waiters.load(Ordering::SeqCst))
    }

    /// Stops trims of `table`'s feed at its current floor until the hold is raised or dropped.
    /// Taken under the trim lock, so no trim is half-way: [`FeedHold::floor`] is exact.
    pub fn hold_feed(&self, table: &str) -> Result<FeedHold> {
        static NEXT_HOLD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let table = self.table(table)?;
        let _trimming = lock(&self.trimmer);
        let floor = match self.meta.get(trimmed_key(&table.name))? {
            Some(value) => offset_of(decode_seq("<meta>", &value)?),
            None => 0,
        };
        let id = NEXT_HOLD.fetch_add(1, Ordering::Relaxed);
        lock(&table.holds).insert(id, floor);
        Ok(FeedHold { table, id, floor })
    }

    /// The highest trimmed offset of `table`'s feed: events at or below it are gone. 0 for a
    /// feed never trimmed and for unknown tables.
    pub fn feed_floor(&self, table: &str) -> Result<i64> {
        let Some(table) = self.find_table(table) else {
            return Ok(0);
        };
        Ok(match self.meta.get(trimmed_key(&table.name))? {
            Some(value) => offset_of(decode_seq("<meta>", &value)?),
            None => 0,
        })
    }

    /// Deletes the change events of `table` with offset `<= upto_offset` (clamped to the last
    /// committed offset and to every [`FeedHold`]), returning how many offsets were trimmed (gaps left by failed commits
    /// included). Call it once consumers have durably checkpointed past `upto_offset`. Offsets
    /// never restart, even when the whole feed is trimmed.
    pub fn trim_feed(&self, table: &str, upto_offset: i64) -> Result<u64> {
        let table = self.table(table)?;
        let Some(feed) = &table.feed else {
            return Ok(0);
        };
        let _trimming = lock(&self.trimmer);
        self.check_writable()?;
        let held = lock(&table.holds).values().copied().min();
        let upto = upto_offset
            .min(table.clock.current())
            .min(held.unwrap_or(i64::MAX));
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
        batch.commit().map_err(|error| self.write_failed(error))?;
        tracing::debug!(table = %table.name, upto, deleted, "trimmed change feed");
        Ok(deleted)
    }
}
