//! The indexer thread's loop: poll, apply, commit, report, compact when idle.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::checkpoint::Checkpoint;
use crate::index::TableIndexWriter;
use crate::source::Source;

use super::report::{IndexerMetrics, refresh_index_stats, update_partitions};
use super::{CommitPolicy, IndexerStats, now_ms};

pub(super) fn run(
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
