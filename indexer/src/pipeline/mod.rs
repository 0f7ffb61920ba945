//! The per-table indexer loop: poll the source, apply, commit by size or time, publish.
//!
//! It runs on its own OS thread because everything it does blocks: source polling, tantivy
//! commits (which fsync) and reader reloads. The async side only ever sees the published
//! [`Checkpoint`] through a `watch` channel, which is how `?wait=indexed` gives read-your-writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::watch;

use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::index::TableIndexWriter;
use crate::source::Source;

mod indexer_loop;
mod report;
mod schedule;

pub(crate) use report::foreign_skipped_counter;

/// When to commit. The defaults make an event searchable within ~50-100 ms of reaching the
/// indexer while still batching bulk loads into large commits.
#[derive(Debug, Clone)]
pub struct CommitPolicy {
    /// Commit once this many documents changed…
    pub max_docs: usize,
    /// …or this long after the first uncommitted change…
    pub max_delay: Duration,
    /// …or, while the source is behind (the last poll came back full), this long. Every commit
    /// writes a segment and feeds the merger; during a catch-up, small commits would make
    /// nothing searchable sooner in a useful way but would cost most of the indexing time.
    pub catch_up_delay: Duration,
    /// Events taken from the source per poll.
    pub poll_batch: usize,
    /// When the table has had no events for this long, merge its recent segments
    /// ([`TableIndexWriter::compact`] with [`CompactionScope::Recent`](crate::index::CompactionScope::Recent): the small segments made
    /// since the bigger ones, never a big one for a few changes); `None` leaves merging to
    /// tantivy's merge policy alone.
    /// Every lookup probes every segment, and tantivy's log merge policy leaves up to ~8
    /// segments per size level, so a read-mostly index answers faster once compacted (a phone
    /// lookup on 100k rows: ~7% less CPU going from 4 segments to 1). This is HBase's major
    /// compaction, done when the table is quiet instead of on a timer.
    pub compact_when_idle: Option<Duration>,
    /// …at most this often, each merge within the writer's merge cap
    /// ([`WriterOptions::merge_max_docs`](crate::WriterOptions::merge_max_docs)). A quiet table
    /// keeps a few segments, each several times the ones after it or about the cap, so lookups
    /// probe few.
    pub compact_min_interval: Duration,
}

impl Default for CommitPolicy {
    fn default() -> Self {
        Self {
            max_docs: 200_000,
            max_delay: Duration::from_millis(50),
            catch_up_delay: Duration::from_secs(1),
            poll_batch: 4096,
            compact_when_idle: Some(Duration::from_secs(3)),
            compact_min_interval: Duration::from_secs(300),
        }
    }
}

/// One partition of a table's source, as the status endpoint shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct PartitionStatus {
    pub source: String,
    pub partition: i32,
    /// Offset of the last event covered by an index commit.
    pub checkpoint: Option<i64>,
    pub high_watermark: Option<i64>,
    /// Events written to the partition and not yet committed to the index.
    pub lag: Option<i64>,
    /// How far behind, in event time, the index is: now minus the timestamp of the last event
    /// read, while there is lag; 0 when caught up.
    pub event_time_lag_ms: Option<i64>,
    pub dead_letters: u64,
    pub other_table: u64,
    /// Events for rows outside this instance's shard (`[cluster]`), skipped: another shard
    /// indexes them.
    pub foreign_skipped: u64,
    /// Events the topic's retention deleted before this index read them, since this process
    /// started: the index misses their writes until `verify --full --repair` (or a reindex
    /// from the store) brings them in.
    pub retention_lost: u64,
}

/// Counters of one table's indexer, read by the status endpoint and the metrics exporter.
#[derive(Debug, Default)]
pub struct IndexerStats {
    pub partitions: std::sync::Mutex<Vec<PartitionStatus>>,
    pub events: AtomicU64,
    pub commits: AtomicU64,
    pub invalid_values: AtomicU64,
    pub errors: AtomicU64,
    /// Mutations for rows outside this instance's shard that reached the writer and were not
    /// indexed: repairs, this instance's own writes, events of a source that doesn't filter.
    /// Kafka sources skip other shards' events themselves and count them per partition
    /// ([`PartitionStatus::foreign_skipped`]).
    pub foreign_skipped: AtomicU64,
    /// Milliseconds since the epoch of the last commit (0 = none yet).
    pub last_commit_ms: AtomicU64,
    pub last_commit_micros: AtomicU64,
    /// Repairs for the live indexer (read repair, `verify --repair`). It lives here because
    /// these stats are what a table's successive indexers share across a reindex swap.
    pub repairs: crate::repair_queue::RepairQueue,
    /// The committed index as of the last commit (see [`IndexStats`](crate::index::IndexStats)),
    /// refreshed by the indexer thread so readers never walk segments on the async runtime.
    pub rows: AtomicU64,
    pub docs: AtomicU64,
    pub segments: AtomicU64,
    pub index_bytes: AtomicU64,
    /// The index volume is full: the last commit (or apply) failed for lack of space, so
    /// indexing is paused, retried with backoff, until a commit succeeds again.
    pub storage_full: std::sync::atomic::AtomicBool,
    /// Applies and commits that failed for lack of space, ever: a write waiting to be indexed
    /// sees from it that an attempt since it was stored failed too.
    pub storage_full_failures: AtomicU64,
    /// An idle compaction started by this table's indexer is merging (refreshed by the indexer
    /// thread at each step): `hbidx bench` waits for it before measuring.
    pub compacting: std::sync::atomic::AtomicBool,
}

/// Handle on a running indexer thread.
pub struct IndexerHandle {
    pub table: String,
    pub stats: Arc<IndexerStats>,
    pub indexed: watch::Receiver<Checkpoint>,
    publish: Arc<watch::Sender<Checkpoint>>,
    stop: Arc<AtomicBool>,
    /// Set before `stop` when the process is exiting: the thread then leaves merges running.
    exiting: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl IndexerHandle {
    /// The checkpoint channel and counters, for a successor on the same table
    /// ([`spawn_with`]) after a reindex swapped the index.
    pub fn channel(&self) -> (Arc<watch::Sender<Checkpoint>>, Arc<IndexerStats>) {
        (self.publish.clone(), self.stats.clone())
    }

    /// Stops the loop after a final commit and waits for it, and for the index's merges: the
    /// index directory may be moved or reopened next (a reindex swap, a restart in-process).
    pub fn shutdown(mut self) {
        self.join();
    }

    /// Stops the loop after a final commit and waits for it, but not for merges still
    /// running: the process is about to exit. A merge at 10M rows takes about a minute, more
    /// than an orchestrator's grace period (Kubernetes: 30 s) before its SIGKILL; the final
    /// commit already holds every event, and a merge cut short leaves only unreferenced files,
    /// which the next start's first commit garbage-collects, as after kill -9.
    pub fn shutdown_for_exit(mut self) {
        self.exiting.store(true, Ordering::SeqCst);
        self.join();
    }

    fn join(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!(table = %self.table, "indexer thread panicked");
        }
    }
}

impl Drop for IndexerHandle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Starts the live indexer thread of one table (it exports Prometheus metrics).
pub fn spawn(
    writer: TableIndexWriter,
    source: Box<dyn Source>,
    policy: CommitPolicy,
) -> Result<IndexerHandle> {
    start_fresh(writer, source, policy, true)
}

/// Starts an indexer that builds a shadow index (a reindex replay). It keeps its own counters
/// but exports no metrics: they would be attributed to the live table of the same name.
pub fn spawn_shadow(
    writer: TableIndexWriter,
    source: Box<dyn Source>,
    policy: CommitPolicy,
) -> Result<IndexerHandle> {
    start_fresh(writer, source, policy, false)
}

/// An indexer with its own checkpoint channel and counters.
fn start_fresh(
    writer: TableIndexWriter,
    source: Box<dyn Source>,
    policy: CommitPolicy,
    export_metrics: bool,
) -> Result<IndexerHandle> {
    let (publish, _) = watch::channel(writer.checkpoint().clone());
    let stats = Arc::new(IndexerStats::default());
    start(
        writer,
        source,
        policy,
        Arc::new(publish),
        stats,
        export_metrics,
    )
}

/// Starts the indexer thread of one table, publishing on an existing channel with existing
/// counters: whoever waits on the table's checkpoint (`?wait=indexed`) keeps working across a
/// reindex swap.
pub fn spawn_with(
    writer: TableIndexWriter,
    source: Box<dyn Source>,
    policy: CommitPolicy,
    publish: Arc<watch::Sender<Checkpoint>>,
    stats: Arc<IndexerStats>,
) -> Result<IndexerHandle> {
    start(writer, source, policy, publish, stats, true)
}

fn start(
    mut writer: TableIndexWriter,
    mut source: Box<dyn Source>,
    policy: CommitPolicy,
    publish: Arc<watch::Sender<Checkpoint>>,
    stats: Arc<IndexerStats>,
    export_metrics: bool,
) -> Result<IndexerHandle> {
    source.seek(writer.checkpoint())?;
    // Queued repairs and writes wake this indexer's poll (a successor after a reindex swap
    // replaces the waker).
    stats.repairs.set_waker(source.waker());
    let table = writer.table().name.clone();
    let sharded = writer.own_range().is_some();
    publish.send_replace(writer.checkpoint().clone());
    let indexed = publish.subscribe();
    let stop = Arc::new(AtomicBool::new(false));
    let exiting = Arc::new(AtomicBool::new(false));
    let thread = {
        let stats = stats.clone();
        let stop = stop.clone();
        let exiting = exiting.clone();
        let table_for_thread = table.clone();
        let publish = publish.clone();
        std::thread::Builder::new()
            .name(format!("indexer-{table}"))
            .spawn(move || {
                let metrics =
                    export_metrics.then(|| report::IndexerMetrics::new(&table_for_thread, sharded));
                indexer_loop::IndexerLoop::new(
                    &mut writer,
                    source.as_mut(),
                    &policy,
                    &stats,
                    &stop,
                    &publish,
                    metrics.as_ref(),
                )
                .run();
                if exiting.load(Ordering::SeqCst) {
                    if writer.compacting() {
                        tracing::info!(table = %table_for_thread, "leaving the running compaction to the next start");
                    }
                    // Dropping the writer stops its merges from being committed (tantivy's
                    // segment updater is killed); the process exit ends their threads.
                    drop(writer);
                } else if let Err(err) = writer.finish() {
                    tracing::warn!(table = %table_for_thread, error = %err, "waiting for index merges failed");
                }
            })
            .map_err(|err| crate::IndexerError::Source {
                source_name: table.clone(),
                reason: format!("cannot start indexer thread: {err}"),
            })?
    };
    Ok(IndexerHandle {
        table,
        stats,
        indexed,
        publish,
        stop,
        exiting,
        thread: Some(thread),
    })
}
