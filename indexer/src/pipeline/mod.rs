//! The per-table indexer loop: poll the source, apply, commit by size or time, publish.
//!
//! It runs on its own OS thread because everything it does blocks: source polling, tantivy
//! commits (which fsync) and reader reloads. The async side only ever sees the published
//! [`Checkpoint`] through a `watch` channel, which is how `?wait=indexed` gives read-your-writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::checkpoint::Checkpoint;
use crate::error::Result;
use crate::index::TableIndexWriter;
use crate::source::Source;

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
    /// When the table has had no events for this long, merge its segments into one
    /// ([`TableIndexWriter::compact`]); `None` leaves merging to tantivy's merge policy alone.
    /// Every lookup probes every segment, and tantivy's log merge policy leaves up to ~8
    /// segments per size level, so a read-mostly index answers faster once compacted (a phone
    /// lookup on 100k rows: ~7% less CPU going from 4 segments to 1). This is HBase's major
    /// compaction, done when the table is quiet instead of on a timer.
    pub compact_when_idle: Option<Duration>,
    /// …at most this often, since a compaction rewrites the whole index…
    pub compact_min_interval: Duration,
    /// …and only while the index has at most this many documents (~3 GB at ~130 bytes a row);
    /// bigger indexes stay with the merge policy's incremental merges. Below it, a quiet table
    /// of any size ends up in one segment, so a lookup costs the same at 10M rows as at 100k
    /// instead of probing the twenty-odd segments a log merge policy leaves.
    pub compact_max_docs: u64,
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
            compact_max_docs: 25_000_000,
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
}

/// Counters of one table's indexer, read by the status endpoint and the metrics exporter.
#[derive(Debug, Default)]
pub struct IndexerStats {
    pub partitions: std::sync::Mutex<Vec<PartitionStatus>>,
    pub events: AtomicU64,
    pub commits: AtomicU64,
    pub invalid_values: AtomicU64,
    pub errors: AtomicU64,
    /// Milliseconds since the epoch of the last commit (0 = none yet).
    pub last_commit_ms: AtomicU64,
    pub last_commit_micros: AtomicU64,
    /// Repairs for the live indexer (read repair, `verify --repair`). It lives here because
    /// these stats are what a table's successive indexers share across a reindex swap.
    pub repairs: crate::repair::RepairQueue,
    /// The committed index as of the last commit (see [`IndexStats`](crate::index::IndexStats)),
    /// refreshed by the indexer thread so readers never walk segments on the async runtime.
    pub rows: AtomicU64,
    pub docs: AtomicU64,
    pub segments: AtomicU64,
    pub index_bytes: AtomicU64,
}

/// The indexer's Prometheus metrics, registered once per thread (a handle update is an atomic
/// add; looking a metric up by name and labels on every poll would hash the key each time).
///
/// Only live indexers export: a reindex's shadow indexer replays the whole topic under the same
/// table name, and counting its events and gauges would make the live table look like it was
/// indexing (and shrinking) while it was not.
struct IndexerMetrics {
    table: String,
    events: metrics::Counter,
    commits: metrics::Counter,
    commit_seconds: metrics::Histogram,
    errors: metrics::Counter,
    invalid_values: metrics::Counter,
    rows: metrics::Gauge,
    docs: metrics::Gauge,
    segments: metrics::Gauge,
    bytes: metrics::Gauge,
}

impl IndexerMetrics {
    fn new(table: &str) -> Self {
        let label = || [("table", table.to_string())];
        Self {
            table: table.to_string(),
            events: metrics::counter!("hbidx_indexer_events_total", &label()),
            commits: metrics::counter!("hbidx_indexer_commits_total", &label()),
            commit_seconds: metrics::histogram!("hbidx_indexer_commit_duration_seconds", &label()),
            errors: metrics::counter!("hbidx_indexer_errors_total", &label()),
            invalid_values: metrics::counter!("hbidx_indexer_invalid_values_total", &label()),
            rows: metrics::gauge!("hbidx_index_rows", &label()),
            docs: metrics::gauge!("hbidx_index_docs", &label()),
            segments: metrics::gauge!("hbidx_index_segments", &label()),
            bytes: metrics::gauge!("hbidx_index_bytes", &label()),
        }
    }

    /// Per-partition gauges. Partitions are a small, fixed set per source (a topic's partition
    /// count), so they are safe as labels.
    fn partitions(&self, partitions: &[PartitionStatus]) {
        for p in partitions {
            let labels = [
                ("table", self.table.clone()),
                ("source", p.source.clone()),
                ("partition", p.partition.to_string()),
            ];
            if let Some(lag) = p.lag {
                metrics::gauge!("hbidx_source_lag_events", &labels).set(lag as f64);
            }
            if let Some(ms) = p.event_time_lag_ms {
                metrics::gauge!("hbidx_source_event_time_lag_seconds", &labels)
                    .set(ms as f64 / 1000.0);
            }
            if let Some(offset) = p.checkpoint {
                metrics::gauge!("hbidx_source_checkpoint_offset", &labels).set(offset as f64);
            }
        }
    }
}

/// Reads the committed index's counts into `stats` (and the gauges), on the indexer thread.
/// Returns the reader generation they were read from.
fn refresh_index_stats(
    writer: &TableIndexWriter,
    stats: &IndexerStats,
    metrics: Option<&IndexerMetrics>,
) -> u64 {
    let index = writer.stats();
    stats.rows.store(index.rows, Ordering::Relaxed);
    stats.docs.store(index.docs, Ordering::Relaxed);
    stats
        .segments
        .store(index.segments as u64, Ordering::Relaxed);
    stats.index_bytes.store(index.bytes, Ordering::Relaxed);
    if let Some(m) = metrics {
        m.rows.set(index.rows as f64);
        m.docs.set(index.docs as f64);
        m.segments.set(index.segments as f64);
        m.bytes.set(index.bytes as f64);
    }
    index.generation
}

/// Handle on a running indexer thread.
pub struct IndexerHandle {
    pub table: String,
    pub stats: Arc<IndexerStats>,
    pub indexed: watch::Receiver<Checkpoint>,
    publish: Arc<watch::Sender<Checkpoint>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl IndexerHandle {
    /// The checkpoint channel and counters, for a successor on the same table
    /// ([`spawn_with`]) after a reindex swapped the index.
    pub fn channel(&self) -> (Arc<watch::Sender<Checkpoint>>, Arc<IndexerStats>) {
        (self.publish.clone(), self.stats.clone())
    }

    /// Stops the loop after a final commit and waits for it.
    pub fn shutdown(mut self) {
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

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Starts the live indexer thread of one table (it exports Prometheus metrics).
pub fn spawn(
    writer: TableIndexWriter,
    source: Box<dyn Source>,
    policy: CommitPolicy,
) -> Result<IndexerHandle> {
    let (publish, _) = watch::channel(writer.checkpoint().clone());
    start(
        writer,
        source,
        policy,
        Arc::new(publish),
        Arc::new(IndexerStats::default()),
        true,
    )
}

/// Starts an indexer that builds a shadow index (a reindex replay). It keeps its own counters
/// but exports no metrics: they would be attributed to the live table of the same name.
pub fn spawn_shadow(
    writer: TableIndexWriter,
    source: Box<dyn Source>,
    policy: CommitPolicy,
) -> Result<IndexerHandle> {
    let (publish, _) = watch::channel(writer.checkpoint().clone());
    start(
        writer,
        source,
        policy,
        Arc::new(publish),
        Arc::new(IndexerStats::default()),
        false,
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
    publish.send_replace(writer.checkpoint().clone());
    let indexed = publish.subscribe();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stats = stats.clone();
        let stop = stop.clone();
        let table_for_thread = table.clone();
        let publish = publish.clone();
        std::thread::Builder::new()
            .name(format!("indexer-{table}"))
            .spawn(move || {
                let metrics = export_metrics.then(|| IndexerMetrics::new(&table_for_thread));
                run(
                    &mut writer,
                    source.as_mut(),
                    &policy,
                    &stats,
                    &stop,
                    &publish,
                    metrics.as_ref(),
                );
                if let Err(err) = writer.finish() {
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
        thread: Some(thread),
    })
}

fn run(
    writer: &mut TableIndexWriter,
    source: &mut dyn Source,
    policy: &CommitPolicy,
    stats: &IndexerStats,
    stop: &AtomicBool,
    publish: &watch::Sender<Checkpoint>,
    metrics: Option<&IndexerMetrics>,
) {
    let table = writer.table().name.clone();
    // The counts of the index as opened, before anything is applied. Commits refresh them;
    // so does any other reload (an idle compaction or a merge finishing on tantivy's threads),
    // noticed by the generation check at each report tick.
    let mut stats_generation = refresh_index_stats(writer, stats, metrics);
    let source_name = source.name().to_string();
    let mut first_uncommitted: Option<Instant> = None;
    let mut pending_checkpoint = false;
    let mut behind = false;
    let mut reported_at: Option<Instant> = None;
    let mut backoff = Duration::from_millis(50);
    // Idle compaction: when the table last changed, and when it was last compacted. An index
    // opened with several segments is compacted once it has been idle, like any other.
    let mut changed_at = Instant::now();
    let mut compacted_at: Option<Instant> = None;
    let mut compacted_since_change = false;
    // The ticket of the last repair queue entry applied, published at the next commit, and the
    // entries applied since the last commit: a rollback drops them from the index, so they are
    // applied again after it (a write waiting for its ticket must not be told it is indexed).
    let mut applied_ticket = 0u64;
    let mut uncommitted_repairs: Vec<hbidx_schema::model::Mutation> = Vec::new();
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        let delay = if behind {
            policy.catch_up_delay
        } else {
            policy.max_delay
        };
        let wait = match first_uncommitted {
            Some(since) => delay.saturating_sub(since.elapsed()),
            None => Duration::from_millis(200),
        };
        if !stopping {
            match source.poll(policy.poll_batch, wait) {
                Ok(events) => {
                    backoff = Duration::from_millis(50);
                    behind = events.len() >= policy.poll_batch;
                    let mut applied = 0u64;
                    let mut failed = false;
                    for event in &events {
                        match writer.apply(
                            &event.mutation,
                            &source_name,
                            event.partition,
                            event.offset,
                        ) {
                            Ok(outcome) => {
                                applied += 1;
                                if outcome.invalid_values > 0 {
                                    stats.invalid_values.fetch_add(
                                        u64::from(outcome.invalid_values),
                                        Ordering::Relaxed,
                                    );
                                    if let Some(m) = metrics {
                                        m.invalid_values
                                            .increment(u64::from(outcome.invalid_values));
                                    }
                                }
                            }
                            Err(err) => {
                                // An index error (IO, a dead writer) is not the event's fault:
                                // stop applying and retry from the last checkpoint.
                                stats.errors.fetch_add(1, Ordering::Relaxed);
                                if let Some(m) = metrics {
                                    m.errors.increment(1);
                                }
                                tracing::error!(table = %table, error = %err, "apply failed; restarting from the last commit");
                                failed = true;
                                break;
                            }
                        }
                    }
                    stats.events.fetch_add(applied, Ordering::Relaxed);
                    if let Some(m) = metrics {
                        m.events.increment(applied);
                    }
                    if failed {
                        let rewound = writer.rollback().and_then(|cp| source.seek(&cp));
                        if let Err(err) = rewound {
                            tracing::error!(table = %table, error = %err, "rollback failed");
                        }
                        pending_checkpoint = false;
                        first_uncommitted = None;
                        for repair in &uncommitted_repairs {
                            if let Err(err) = writer.apply_repair(repair) {
                                tracing::error!(table = %table, error = %err, "repair failed");
                            }
                        }
                        if !uncommitted_repairs.is_empty() {
                            pending_checkpoint = true;
                            first_uncommitted = Some(Instant::now());
                        }
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                        continue;
                    }
                    if !events.is_empty() {
                        pending_checkpoint = true;
                        first_uncommitted.get_or_insert_with(Instant::now);
                        changed_at = Instant::now();
                        compacted_since_change = false;
                    }
                }
                Err(err) => {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    if let Some(m) = metrics {
                        m.errors.increment(1);
                    }
                    tracing::warn!(table = %table, error = %err, "source poll failed; backing off");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
        if !stopping {
            let (repairs, upto) = stats.repairs.drain();
            if !repairs.is_empty() {
                applied_ticket = upto;
                uncommitted_repairs.extend(repairs.iter().cloned());
                let mut applied = 0u64;
                for repair in &repairs {
                    match writer.apply_repair(repair) {
                        Ok(_) => applied += 1,
                        Err(err) => {
                            stats.errors.fetch_add(1, Ordering::Relaxed);
                            tracing::error!(table = %table, error = %err, "repair failed");
                        }
                    }
                }
                stats.repairs.applied.fetch_add(applied, Ordering::Relaxed);
                if applied > 0 {
                    pending_checkpoint = true;
                    first_uncommitted.get_or_insert_with(Instant::now);
                    changed_at = Instant::now();
                    compacted_since_change = false;
                }
            }
        }
        let delay = if behind {
            policy.catch_up_delay
        } else {
            policy.max_delay
        };
        let due = first_uncommitted.is_some_and(|since| since.elapsed() >= delay)
            || writer.uncommitted_ops() >= policy.max_docs;
        if pending_checkpoint && (due || stopping) {
            let started = Instant::now();
            let barrier = source.commit_barrier();
            match barrier
                .map_or(Ok(()), |barrier| barrier())
                .and_then(|()| writer.commit())
            {
                Ok(checkpoint) => {
                    let took = started.elapsed();
                    stats.commits.fetch_add(1, Ordering::Relaxed);
                    stats.last_commit_ms.store(now_ms(), Ordering::Relaxed);
                    stats
                        .last_commit_micros
                        .store(took.as_micros() as u64, Ordering::Relaxed);
                    if let Some(m) = metrics {
                        m.commits.increment(1);
                        m.commit_seconds.record(took.as_secs_f64());
                    }
                    // Before publishing, so whoever sees the checkpoint also sees the counts
                    // that include it (the status endpoint's `rows` next to its `lag`).
                    stats_generation = refresh_index_stats(writer, stats, metrics);
                    source.committed(&checkpoint);
                    publish.send_replace(checkpoint);
                    stats.repairs.mark_committed(applied_ticket);
                    uncommitted_repairs.clear();
                    pending_checkpoint = false;
                    first_uncommitted = None;
                    reported_at = None;
                }
                Err(err) => {
                    stats.errors.fetch_add(1, Ordering::Relaxed);
                    if let Some(m) = metrics {
                        m.errors.increment(1);
                    }
                    tracing::error!(table = %table, error = %err, "index commit failed; will retry");
                    std::thread::sleep(backoff);
                }
            }
        }
        if reported_at.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
            reported_at = Some(Instant::now());
            let committed = publish.borrow().clone();
            update_partitions(stats, &source_name, &committed, source.report(), metrics);
            if writer.reader_generation() != stats_generation {
                stats_generation = refresh_index_stats(writer, stats, metrics);
            }
        }
        if stopping && !pending_checkpoint {
            return;
        }
        if let Some(idle) = policy.compact_when_idle
            && !pending_checkpoint
            && !compacted_since_change
            && changed_at.elapsed() >= idle
            && compacted_at.is_none_or(|at| at.elapsed() >= policy.compact_min_interval)
        {
            compacted_since_change = true;
            match writer.compact(policy.compact_max_docs) {
                Ok(true) => compacted_at = Some(Instant::now()),
                Ok(false) => {}
                Err(err) => tracing::warn!(table = %table, error = %err, "compaction not started"),
            }
        }
    }
}

fn update_partitions(
    stats: &IndexerStats,
    source_name: &str,
    committed: &Checkpoint,
    reports: Vec<crate::source::PartitionReport>,
    metrics: Option<&IndexerMetrics>,
) {
    let now = now_ms() as i64;
    let mut partitions: Vec<PartitionStatus> = reports
        .into_iter()
        .map(|report| {
            let checkpoint = committed.position(source_name, report.partition);
            let next = checkpoint.map_or(0, |offset| offset + 1);
            let lag = report.high_watermark.map(|high| (high - next).max(0));
            let event_time_lag_ms = match (lag, report.last_event_ms) {
                (Some(0), _) => Some(0),
                (_, Some(at)) => Some((now - at).max(0)),
                _ => None,
            };
            PartitionStatus {
                source: source_name.to_string(),
                partition: report.partition,
                checkpoint,
                high_watermark: report.high_watermark,
                lag,
                event_time_lag_ms,
                dead_letters: report.dead_letters,
                other_table: report.other_table,
            }
        })
        .collect();
    // Partitions with a checkpoint but nothing reported yet (not assigned at the moment).
    for (partition, offset) in committed.partitions(source_name) {
        if !partitions.iter().any(|p| p.partition == partition) {
            partitions.push(PartitionStatus {
                source: source_name.to_string(),
                partition,
                checkpoint: Some(offset),
                ..PartitionStatus::default()
            });
        }
    }
    partitions.sort_by_key(|p| p.partition);
    if let Some(m) = metrics {
        m.partitions(&partitions);
    }
    *stats
        .partitions
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = partitions;
}
