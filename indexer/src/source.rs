//! Sources of change events, and the embedded change feed source.
//!
//! A source is polled from the table's indexer thread, never from async code: polling may block
//! (waiting for the feed, or inside rdkafka). Exactly-once works like this: the indexer applies a
//! batch of events, commits the index with the checkpoint as payload, and only then tells the
//! source ([`Source::committed`]) so it can drop what it no longer needs (trim the feed, commit
//! Kafka offsets as a hint). On start the indexer reads the checkpoint back from the index and
//! [`Source::seek`]s the source to it; whatever the source kept beyond the checkpoint is replayed.

use std::sync::Arc;
use std::time::Duration;

use hbidx_schema::model::ChangeEvent;
use hbidx_store::EmbeddedStore;

use crate::checkpoint::Checkpoint;
use crate::error::{IndexerError, Result};

/// See [`Source::commit_barrier`]. A function rather than a `&mut self` method so that the
/// indexer thread can call it while the source itself is polled on another thread
/// ([`crate::prefetch`]).
pub type CommitBarrier = Arc<dyn Fn() -> Result<()> + Send + Sync>;

/// See [`Source::waker`]. Cheap and non-blocking: it may be called from async code.
pub type Waker = Arc<dyn Fn() + Send + Sync>;

pub trait Source: Send + 'static {
    /// The name under which this source's partitions appear in the checkpoint.
    fn name(&self) -> &str;
    /// Position the source just after the checkpoint's offsets.
    fn seek(&mut self, checkpoint: &Checkpoint) -> Result<()>;
    /// Up to `max` events, waiting at most `timeout` when none are ready.
    fn poll(&mut self, max: usize, timeout: Duration) -> Result<Vec<ChangeEvent>>;
    /// The checkpoint is durable in the index.
    fn committed(&mut self, checkpoint: &Checkpoint);
    /// What must run just before the index commits what was polled: whatever the source did
    /// with the events besides handing them over (applying them to the embedded store) must be
    /// durable by then. `None`: nothing to do.
    fn commit_barrier(&self) -> Option<CommitBarrier> {
        None
    }
    /// Something that makes a `poll` waiting for events return at once, called when work that
    /// doesn't come from the source is queued for the indexer (a repair, or a write this
    /// instance made to HBase that `?wait=indexed` waits on). `None`: polls return within their
    /// timeout anyway, which is short.
    fn waker(&self) -> Option<Waker> {
        None
    }
    /// Per-partition positions and counters for the status endpoint. May do a little blocking
    /// IO (Kafka watermarks); the pipeline calls it about once a second.
    fn report(&mut self) -> Vec<PartitionReport> {
        Vec::new()
    }
}

/// What a source knows about one of its partitions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionReport {
    pub partition: i32,
    /// Offset of the next event to be written (Kafka's high watermark).
    pub high_watermark: Option<i64>,
    /// Event time (Kafka message timestamp) of the last event handed to the indexer.
    pub last_event_ms: Option<i64>,
    pub dead_letters: u64,
    /// Valid events for another table on the same topic, skipped.
    pub other_table: u64,
    /// Events for rows of another shard (`[cluster]`), skipped.
    pub foreign_skipped: u64,
    /// Events the topic's retention deleted before this index read them (see
    /// `KafkaSource::poll`): they reached the index by no path.
    pub retention_lost: u64,
}

/// Wraps a log source (Kafka) for a table kept in the embedded store: every polled mutation is
/// applied to the store's rows before it reaches the index. Kafka is the log, fjall the table,
/// tantivy the index. A replay after a crash re-applies mutations the store may already have,
/// which is harmless: cell timestamps decide.
pub struct ApplyToStore<S: Source> {
    inner: S,
    store: Arc<EmbeddedStore>,
    /// Events polled but not yet applied because the store write failed; retried first.
    stash: Option<Vec<ChangeEvent>>,
}

impl<S: Source> ApplyToStore<S> {
    pub fn new(inner: S, store: Arc<EmbeddedStore>) -> Self {
        Self {
            inner,
            store,
            stash: None,
        }
    }
}

impl<S: Source> Source for ApplyToStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn seek(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        self.stash = None;
        self.inner.seek(checkpoint)
    }

    fn poll(&mut self, max: usize, timeout: Duration) -> Result<Vec<ChangeEvent>> {
        let events = match self.stash.take() {
            Some(events) => events,
            None => self.inner.poll(max, timeout)?,
        };
        let mutations: Vec<_> = events
            .iter()
            .filter(|event| !event.mutation.ops.is_empty())
            .map(|event| event.mutation.clone())
            .collect();
        if let Err(err) = self.store.apply_replicated(mutations) {
            self.stash = Some(events);
            return Err(IndexerError::Source {
                source_name: self.inner.name().to_string(),
                reason: format!("applying to the embedded store: {err}"),
            });
        }
        Ok(events)
    }

    fn committed(&mut self, checkpoint: &Checkpoint) {
        self.inner.committed(checkpoint);
    }

    fn commit_barrier(&self) -> Option<CommitBarrier> {
        let store = self.store.clone();
        let name = self.inner.name().to_string();
        let inner = self.inner.commit_barrier();
        Some(Arc::new(move || {
            store.sync_to_disk().map_err(|err| IndexerError::Source {
                source_name: name.clone(),
                reason: format!("syncing the embedded store: {err}"),
            })?;
            inner.as_ref().map_or(Ok(()), |barrier| barrier())
        }))
    }

    fn waker(&self) -> Option<Waker> {
        self.inner.waker()
    }

    fn report(&mut self) -> Vec<PartitionReport> {
        self.inner.report()
    }
}

/// The embedded store's change feed for one table (partition 0, offset = feed sequence number).
pub struct ChangeFeedSource {
    store: Arc<EmbeddedStore>,
    table: String,
    after: i64,
}

pub const CHANGE_FEED: &str = "changefeed";

impl ChangeFeedSource {
    pub fn new(store: Arc<EmbeddedStore>, table: impl Into<String>) -> Self {
        Self {
            store,
            table: table.into(),
            after: 0,
        }
    }
}

impl Source for ChangeFeedSource {
    fn name(&self) -> &str {
        CHANGE_FEED
    }

    fn seek(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        self.after = checkpoint.position(CHANGE_FEED, 0).unwrap_or(0);
        // A start checks this before the indexer runs and rebuilds the index (hbidx-serve's
        // `feed_mismatch`); here it would mean a bug in whatever resumed the index.
        let floor = self
            .store
            .feed_floor(&self.table)
            .map_err(|err| IndexerError::Source {
                source_name: format!("{CHANGE_FEED}:{}", self.table),
                reason: err.to_string(),
            })?;
        if self.after < floor {
            tracing::error!(table = %self.table, checkpoint = self.after, floor, "the change feed was trimmed past the index's checkpoint: the events between are not in this index; rebuild it (`reindex --from-store`)");
        }
        Ok(())
    }

    fn poll(&mut self, max: usize, timeout: Duration) -> Result<Vec<ChangeEvent>> {
        let read = |after| {
            self.store
                .read_feed(&self.table, after, max)
                .map_err(|err| IndexerError::Source {
                    source_name: format!("{CHANGE_FEED}:{}", self.table),
                    reason: err.to_string(),
                })
        };
        let mut events = read(self.after)?;
        if events.is_empty() {
            self.store
                .wait_for_offset_after(&self.table, self.after, timeout);
            events = read(self.after)?;
        }
        if let Some(last) = events.last() {
            self.after = last.offset;
        }
        Ok(events)
    }

    /// The store's journal is fsynced before each index commit: without it, after a power cut
    /// the index's checkpoint could be ahead of what the store kept, new writes would get
    /// offsets the index believes it has applied, and the index could hold rows the store
    /// lost. One fsync per commit (at most 20 a second at the live commit delay), not per write.
    fn commit_barrier(&self) -> Option<CommitBarrier> {
        let store = self.store.clone();
        let name = format!("{CHANGE_FEED}:{}", self.table);
        Some(Arc::new(move || match store.sync_to_disk() {
            Ok(()) => Ok(()),
            // A failed write (a full volume) halted the store: fjall syncs nothing more until a
            // restart, and the events about to be committed reached the journal before the
            // failure. Holding the index back would stall it until that restart for nothing;
            // should a power cut then take journal entries the index has, the next start finds
            // the index ahead of the store and rebuilds it (hbidx-serve's `feed_mismatch`).
            Err(_) if store.writes_halted() => Ok(()),
            Err(err) => Err(IndexerError::Source {
                source_name: name.clone(),
                reason: format!("syncing the embedded store: {err}"),
            }),
        }))
    }

    fn report(&mut self) -> Vec<PartitionReport> {
        vec![PartitionReport {
            partition: 0,
            high_watermark: Some(self.store.last_offset(&self.table) + 1),
            ..PartitionReport::default()
        }]
    }

    fn committed(&mut self, checkpoint: &Checkpoint) {
        if let Some(upto) = checkpoint.position(CHANGE_FEED, 0) {
            // The feed is only needed until the index has durably covered it.
            if let Err(err) = self.store.trim_feed(&self.table, upto) {
                tracing::warn!(table = %self.table, error = %err, "change feed trim failed; will retry after the next commit");
            }
        }
    }
}

/// A source with no events: the live source of a table whose rows are in HBase and which has no
/// Kafka topic. Its index changes only by reindex (`--from-store`), repairs and this instance's
/// own writes, which still need a running indexer to apply them. Its [`Source::waker`] ends a
/// poll at once, so a queued write is applied without waiting out the poll.
#[derive(Debug)]
pub struct IdleSource {
    wake: crossbeam_channel::Sender<()>,
    woken: crossbeam_channel::Receiver<()>,
}

impl Default for IdleSource {
    fn default() -> Self {
        // One pending wake-up is enough: it makes the next poll return.
        let (wake, woken) = crossbeam_channel::bounded(1);
        Self { wake, woken }
    }
}

/// The name [`IdleSource`] gives its (never used) checkpoint entries.
pub const IDLE: &str = "none";

impl Source for IdleSource {
    fn name(&self) -> &str {
        IDLE
    }

    fn seek(&mut self, _checkpoint: &Checkpoint) -> Result<()> {
        Ok(())
    }

    fn poll(&mut self, _max: usize, timeout: Duration) -> Result<Vec<ChangeEvent>> {
        // Bounded so the pipeline still sees a stop request promptly; a timeout and a wake-up
        // end the same way.
        let _woken = self
            .woken
            .recv_timeout(timeout.min(Duration::from_millis(100)));
        Ok(Vec::new())
    }

    fn committed(&mut self, _checkpoint: &Checkpoint) {}

    fn waker(&self) -> Option<Waker> {
        let wake = self.wake.clone();
        Some(Arc::new(move || {
            // Full means a wake-up is already pending.
            let _pending = wake.try_send(());
        }))
    }
}
