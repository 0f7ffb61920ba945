//! The indexer thread's loop: poll, apply, commit, report, compact when idle. Each step is a
//! method on [`IndexerLoop`], which carries what one step leaves for the next; when to commit
//! and compact is decided by the pure [`CommitSchedule`].

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hbidx_schema::model::{ChangeEvent, Mutation};
use tokio::sync::watch;

use crate::checkpoint::Checkpoint;
use crate::index::TableIndexWriter;
use crate::source::Source;

use super::report::{IndexerMetrics, refresh_index_stats, update_partitions};
use super::schedule::CommitSchedule;
use super::{CommitPolicy, IndexerStats};

/// The wait after the first failed poll or apply; it doubles with each failure in a row.
const INITIAL_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// One table's indexer loop and the state it carries from one step to the next.
pub(super) struct IndexerLoop<'a> {
    writer: &'a mut TableIndexWriter,
    source: &'a mut dyn Source,
    policy: &'a CommitPolicy,
    stats: &'a IndexerStats,
    stop: &'a AtomicBool,
    publish: &'a watch::Sender<Checkpoint>,
    metrics: Option<&'a IndexerMetrics>,
    table: String,
    source_name: String,
    /// The reader generation `stats` were last read from. Commits refresh them; so does any
    /// other reload (an idle compaction or a merge finishing on tantivy's threads), noticed by
    /// the generation check at each report.
    stats_generation: u64,
    schedule: CommitSchedule,
    backoff: Duration,
    /// The ticket of the last repair queue entry applied, published at the next commit, and the
    /// entries applied since the last commit: a rollback drops them from the index, so they are
    /// applied again after it (a write waiting for its ticket must not be told it is indexed).
    applied_ticket: u64,
    uncommitted_repairs: Vec<Mutation>,
}

impl<'a> IndexerLoop<'a> {
    pub(super) fn new(
        writer: &'a mut TableIndexWriter,
        source: &'a mut dyn Source,
        policy: &'a CommitPolicy,
        stats: &'a IndexerStats,
        stop: &'a AtomicBool,
        publish: &'a watch::Sender<Checkpoint>,
        metrics: Option<&'a IndexerMetrics>,
    ) -> Self {
        let table = writer.table().name.clone();
        // The counts of the index as opened, before anything is applied.
        let stats_generation = refresh_index_stats(writer, stats, metrics);
        let source_name = source.name().to_string();
        Self {
            writer,
            source,
            policy,
            stats,
            stop,
            publish,
            metrics,
            table,
            source_name,
            stats_generation,
            schedule: CommitSchedule::new(Instant::now()),
            backoff: INITIAL_BACKOFF,
            applied_ticket: 0,
            uncommitted_repairs: Vec::new(),
        }
    }

    /// Runs until `stop` is set, then returns after a final commit of whatever is pending.
    pub(super) fn run(mut self) {
        loop {
            let stopping = self.stop.load(Ordering::SeqCst);
            if !stopping {
                if self.poll().is_break() {
                    continue;
                }
                self.apply_repairs();
            }
            self.commit_if_due(stopping);
            self.report_if_due();
            if self.schedule.finished(stopping) {
                return;
            }
            self.compact_if_idle();
        }
    }

    /// Polls the source and applies what it returned. Breaks when an apply failed and the
    /// index was rolled back: the loop starts over from the last commit.
    fn poll(&mut self) -> ControlFlow<()> {
        let wait = self.schedule.poll_wait(self.policy, Instant::now());
        match self.source.poll(self.policy.poll_batch, wait) {
            Ok(events) => {
                self.backoff = INITIAL_BACKOFF;
                self.schedule.polled(self.policy, events.len());
                self.apply_events(&events)?;
                if !events.is_empty() {
                    self.schedule.changed(Instant::now());
                }
            }
            Err(err) => {
                self.count_error();
                tracing::warn!(table = %self.table, error = %err, "source poll failed; backing off");
                self.back_off();
            }
        }
        ControlFlow::Continue(())
    }

    /// Applies polled events in order, stopping at the first failure, which rolls back.
    fn apply_events(&mut self, events: &[ChangeEvent]) -> ControlFlow<()> {
        let mut applied = 0u64;
        let mut foreign = 0u64;
        let mut failed = false;
        for event in events {
            match self.writer.apply(
                &event.mutation,
                &self.source_name,
                event.partition,
                event.offset,
            ) {
                Ok(outcome) => {
                    applied += 1;
                    foreign += u64::from(outcome.foreign);
                    if outcome.invalid_values > 0 {
                        self.stats
                            .invalid_values
                            .fetch_add(u64::from(outcome.invalid_values), Ordering::Relaxed);
                        if let Some(m) = self.metrics {
                            m.invalid_values
                                .increment(u64::from(outcome.invalid_values));
                        }
                    }
                }
                Err(err) => {
                    // An index error (IO, a dead writer) is not the event's fault: stop
                    // applying and retry from the last checkpoint.
                    self.count_error();
                    tracing::error!(table = %self.table, error = %err, "apply failed; restarting from the last commit");
                    failed = true;
                    break;
                }
            }
        }
        self.stats.events.fetch_add(applied, Ordering::Relaxed);
        if let Some(m) = self.metrics {
            m.events.increment(applied);
        }
        self.count_foreign(foreign);
        if failed {
            self.roll_back();
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    /// Drops everything since the last commit and seeks the source back to it, then applies the
    /// repairs since that commit again: the queue handed them out already, so nothing else will.
    fn roll_back(&mut self) {
        let rewound = self
            .writer
            .rollback()
            .and_then(|checkpoint| self.source.seek(&checkpoint));
        if let Err(err) = rewound {
            tracing::error!(table = %self.table, error = %err, "rollback failed");
        }
        for repair in &self.uncommitted_repairs {
            if let Err(err) = self.writer.apply_repair(repair) {
                tracing::error!(table = %self.table, error = %err, "repair failed");
            }
        }
        self.schedule
            .rolled_back(!self.uncommitted_repairs.is_empty(), Instant::now());
        self.back_off();
    }

    /// Applies the repairs queued since the last step (read repair, `verify --repair`).
    fn apply_repairs(&mut self) {
        let (repairs, upto) = self.stats.repairs.drain();
        if repairs.is_empty() {
            return;
        }
        self.applied_ticket = upto;
        self.uncommitted_repairs.extend(repairs.iter().cloned());
        let mut applied = 0u64;
        let mut foreign = 0u64;
        for repair in &repairs {
            match self.writer.apply_repair(repair) {
                Ok(outcome) => {
                    applied += 1;
                    foreign += u64::from(outcome.foreign);
                }
                Err(err) => {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::error!(table = %self.table, error = %err, "repair failed");
                }
            }
        }
        self.stats
            .repairs
            .applied
            .fetch_add(applied, Ordering::Relaxed);
        self.count_foreign(foreign);
        if applied > 0 {
            self.schedule.changed(Instant::now());
        }
    }

    fn commit_if_due(&mut self, stopping: bool) {
        let uncommitted_ops = self.writer.uncommitted_ops();
        if self
            .schedule
            .commit_due(self.policy, uncommitted_ops, stopping, Instant::now())
        {
            self.commit();
        }
    }

    /// Commits the index once the source's barrier passed, then publishes the checkpoint. A
    /// failed commit keeps everything pending and is retried at the next step.
    fn commit(&mut self) {
        let started = Instant::now();
        let barrier = self.source.commit_barrier();
        match barrier
            .map_or(Ok(()), |barrier| barrier())
            .and_then(|()| self.writer.commit())
        {
            Ok(checkpoint) => {
                let took = started.elapsed();
                self.stats.commits.fetch_add(1, Ordering::Relaxed);
                self.stats
                    .last_commit_ms
                    .store(hbidx_store::now_ms().unsigned_abs(), Ordering::Relaxed);
                self.stats
                    .last_commit_micros
                    .store(took.as_micros() as u64, Ordering::Relaxed);
                if let Some(m) = self.metrics {
                    m.commits.increment(1);
                    m.commit_seconds.record(took.as_secs_f64());
                }
                // Before publishing, so whoever sees the checkpoint also sees the counts that
                // include it (the status endpoint's `rows` next to its `lag`).
                self.stats_generation = refresh_index_stats(self.writer, self.stats, self.metrics);
                self.source.committed(&checkpoint);
                self.publish.send_replace(checkpoint);
                self.stats.repairs.mark_committed(self.applied_ticket);
                self.uncommitted_repairs.clear();
                self.schedule.committed();
            }
            Err(err) => {
                self.count_error();
                tracing::error!(table = %self.table, error = %err, "index commit failed; will retry");
                std::thread::sleep(self.backoff);
            }
        }
    }

    /// Refreshes the partitions' lag and, if the index was reloaded since, its counts.
    fn report_if_due(&mut self) {
        let now = Instant::now();
        if !self.schedule.report_due(now) {
            return;
        }
        self.schedule.reported(now);
        let committed = self.publish.borrow().clone();
        update_partitions(
            self.stats,
            &self.source_name,
            &committed,
            self.source.report(),
            self.metrics,
        );
        if self.writer.reader_generation() != self.stats_generation {
            self.stats_generation = refresh_index_stats(self.writer, self.stats, self.metrics);
        }
    }

    fn compact_if_idle(&mut self) {
        if !self.schedule.compact_due(self.policy, Instant::now()) {
            return;
        }
        self.schedule.compaction_tried();
        match self.writer.compact(self.policy.compact_max_docs) {
            Ok(true) => self.schedule.compaction_started(Instant::now()),
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(table = %self.table, error = %err, "compaction not started")
            }
        }
    }

    /// Counts a failed poll, apply or commit in the stats and the metrics.
    fn count_error(&self) {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        if let Some(m) = self.metrics {
            m.errors.increment(1);
        }
    }

    /// Counts mutations the writer skipped as another shard's rows.
    fn count_foreign(&self, foreign: u64) {
        if foreign == 0 {
            return;
        }
        self.stats
            .foreign_skipped
            .fetch_add(foreign, Ordering::Relaxed);
        if let Some(counter) = self.metrics.and_then(|m| m.foreign_skipped.as_ref()) {
            counter.increment(foreign);
        }
    }

    fn back_off(&mut self) {
        std::thread::sleep(self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }
}
