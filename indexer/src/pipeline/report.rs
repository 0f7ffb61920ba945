//! What an indexer shows the outside: the counters the status endpoint reads and the Prometheus
//! metrics. Kept apart from the loop so the loop reads as its steps, not as bookkeeping.

use std::sync::atomic::Ordering;

use crate::checkpoint::Checkpoint;
use crate::index::TableIndexWriter;

use super::{IndexerStats, PartitionStatus};

/// The indexer's Prometheus metrics, registered once per thread (a handle update is an atomic
/// add; looking a metric up by name and labels on every poll would hash the key each time).
///
/// Only live indexers export: a reindex's shadow indexer replays the whole topic under the same
/// table name, and counting its events and gauges would make the live table look like it was
/// indexing (and shrinking) while it was not.
pub(super) struct IndexerMetrics {
    table: String,
    pub(super) events: metrics::Counter,
    pub(super) commits: metrics::Counter,
    pub(super) commit_seconds: metrics::Histogram,
    pub(super) errors: metrics::Counter,
    pub(super) invalid_values: metrics::Counter,
    /// With `[cluster]` only: mutations for other shards' rows that reached the writer. The
    /// Kafka source adds the events it skipped to the same series.
    pub(super) foreign_skipped: Option<metrics::Counter>,
    rows: metrics::Gauge,
    docs: metrics::Gauge,
    segments: metrics::Gauge,
    bytes: metrics::Gauge,
    merge_max_docs: metrics::Gauge,
}

impl IndexerMetrics {
    pub(super) fn new(table: &str, sharded: bool) -> Self {
        let label = || [("table", table.to_string())];
        Self {
            table: table.to_string(),
            events: metrics::counter!("hbidx_indexer_events_total", &label()),
            commits: metrics::counter!("hbidx_indexer_commits_total", &label()),
            commit_seconds: metrics::histogram!("hbidx_indexer_commit_duration_seconds", &label()),
            errors: metrics::counter!("hbidx_indexer_errors_total", &label()),
            invalid_values: metrics::counter!("hbidx_indexer_invalid_values_total", &label()),
            foreign_skipped: sharded.then(|| {
                let counter = foreign_skipped_counter(table);
                // Exported from 0, so `rate()` works before the first skip.
                counter.increment(0);
                counter
            }),
            rows: metrics::gauge!("hbidx_index_rows", &label()),
            docs: metrics::gauge!("hbidx_index_docs", &label()),
            segments: metrics::gauge!("hbidx_index_segments", &label()),
            bytes: metrics::gauge!("hbidx_index_bytes", &label()),
            merge_max_docs: metrics::gauge!("hbidx_index_merge_max_docs", &label()),
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

/// `hbidx_indexer_foreign_skipped_total` of `table`: rows of other shards not indexed here.
pub(crate) fn foreign_skipped_counter(table: &str) -> metrics::Counter {
    metrics::counter!("hbidx_indexer_foreign_skipped_total", "table" => table.to_string())
}

/// Reads the committed index's counts into `stats` (and the gauges), on the indexer thread.
/// Returns the reader generation they were read from.
pub(super) fn refresh_index_stats(
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
        m.merge_max_docs.set(writer.merge_max_docs() as f64);
    }
    index.generation
}

pub(super) fn update_partitions(
    stats: &IndexerStats,
    source_name: &str,
    committed: &Checkpoint,
    reports: Vec<crate::source::PartitionReport>,
    metrics: Option<&IndexerMetrics>,
) {
    let now = hbidx_store::now_ms();
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
                foreign_skipped: report.foreign_skipped,
                retention_lost: report.retention_lost,
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
