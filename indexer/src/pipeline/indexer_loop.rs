//! The indexer thread's loop: poll, apply, commit, report, compact when idle. Each step is a
//! method on [`IndexerLoop`], which carries what one step leaves for the next; when to commit
//! and compact is decided by the pure [`CommitSchedule`].

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hbidx_schema::model::{ChangeEvent, Mutation};
use tokio::sync::watch;

use crate::checkpoint::Checkpoint;
use crate::index::{Compaction, CompactionScope, TableIndexWriter};
use crate::source::Source;

use super::report::{IndexerMetrics, refresh_index_stats, update_partitions};
use super::schedule::CommitSchedule;
use super::{CommitPolicy, IndexerStats};

/// The wait after the first failed poll, apply or commit; it doubles with each failure in a
/// row.
const INITIAL_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// While the index volume stays full, how often the log says so again.
const STILL_FULL_LOG_INTERVAL: Duration = Duration::from_secs(60);

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
    /// The writer's count of refused compactions when the last compaction started; `None`
    /// once its outcome is known (or before any).
    compaction_skips: Option<u64>,
    /// The wait after a failed poll; a successful poll resets it.
    poll_backoff: Duration,
    /// The wait after a failed apply or commit (each rolls back); only a successful commit
    /// resets it, so a full volume is retried at most every [`MAX_BACKOFF`].
    index_backoff: Duration,
    /// The ticket of the last repair queue entry applied, published at the next commit, and the
    /// entries applied since the last commit: a rollback drops them from the index, so they are
    /// applied again after it (a write waiting for its ticket must not be told it is indexed).
    applied_ticket: u64,
    uncommitted_repairs: Vec<Mutation>,
    /// Since when the index volume has been full, the failures since, and when the log last
    /// said so (see [`IndexerLoop::failed`]).
    full: Option<FullVolume>,
}

/// A run of failures for lack of space on the index volume.
struct FullVolume {
    since: Instant,
    failures: u64,
    logged_at: Instant,
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
            compaction_skips: None,
            poll_backoff: INITIAL_BACKOFF,
            index_backoff: INITIAL_BACKOFF,
            applied_ticket: 0,
            uncommitted_repairs: Vec::new(),
            full: None,
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
                // While the volume is full, repairs (this instance's own writes to HBase among
                // them) stay in their bounded queue instead of piling up here, replayed after
                // every failed commit. One batch is still taken when none is pending, so that a
                // commit tries the volume again.
                if self.full.is_none() || self.uncommitted_repairs.is_empty() {
                    self.apply_repairs();
                }
            }
            if !self.commit_if_due(stopping) && stopping {
                // The final commit failed (a full volume): the source still holds what it
                // covered and replays it at the next start; repairs (writes to HBase) come back
                // through replication or verify.
                tracing::warn!(table = %self.table, "stopping without the final index commit; the source replays it at the next start");
                return;
            }
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
                self.poll_backoff = INITIAL_BACKOFF;
                self.schedule.polled(self.policy, events.len());
                self.apply_events(&events)?;
                if !events.is_empty() {
                    self.schedule.changed(Instant::now());
                }
            }
            Err(err) => {
                self.count_error();
                tracing::warn!(table = %self.table, error = %err, "source poll failed; backing off");
                back_off(&mut self.poll_backoff);
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
                    self.failed("apply", &err);
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
        back_off(&mut self.index_backoff);
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

    /// Commits if one is due; false when that commit failed.
    fn commit_if_due(&mut self, stopping: bool) -> bool {
        let uncommitted_ops = self.writer.uncommitted_ops();
        if self
            .schedule
            .commit_due(self.policy, uncommitted_ops, stopping, Instant::now())
        {
            return self.commit();
        }
        true
    }

    /// Commits the index once the source's barrier passed, then publishes the checkpoint. A
    /// failed commit rolls back to the last one: tantivy's writer may have lost an indexing
    /// thread to the failure (a segment that didn't fit), and a later commit on it would
    /// publish a checkpoint past documents that never reached a segment. The rollback builds a
    /// fresh writer and the source replays everything since the last commit.
    fn commit(&mut self) -> bool {
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
                self.index_backoff = INITIAL_BACKOFF;
                if let Some(full) = self.full.take() {
                    self.stats.storage_full.store(false, Ordering::Relaxed);
                    tracing::info!(
                        table = %self.table,
                        paused_secs = full.since.elapsed().as_secs(),
                        failed_attempts = full.failures,
                        "the index volume has space again: indexing resumed"
                    );
                }
                true
            }
            Err(err) => {
                self.failed("commit", &err);
                self.roll_back();
                false
            }
        }
    }

    /// Counts a failed apply or commit and logs it. Failures for lack of space pause indexing
    /// until a commit succeeds: the first is logged as such, the ones after it only once a
    /// minute, since the loop retries every few seconds for as long as the volume stays full.
    fn failed(&mut self, step: &'static str, err: &crate::IndexerError) {
        self.count_error();
        let now = Instant::now();
        // A writer that lost a thread to a full volume fails every later call with a generic
        // error; it belongs to the same episode.
        if err.is_storage_full() || self.full.is_some() {
            self.stats
                .storage_full_failures
                .fetch_add(1, Ordering::Relaxed);
            match &mut self.full {
                None => {
                    self.stats.storage_full.store(true, Ordering::Relaxed);
                    self.full = Some(FullVolume {
                        since: now,
                        failures: 1,
                        logged_at: now,
                    });
                    tracing::error!(table = %self.table, step, error = %err, "the index volume is full: indexing paused, nothing is dropped; it retries every few seconds and resumes once space is freed");
                }
                Some(full) => {
                    full.failures += 1;
                    if now.duration_since(full.logged_at) >= STILL_FULL_LOG_INTERVAL {
                        full.logged_at = now;
                        tracing::warn!(
                            table = %self.table,
                            paused_secs = full.since.elapsed().as_secs(),
                            failed_attempts = full.failures,
                            error = %err,
                            "the index volume is still full: indexing stays paused"
                        );
                    }
                }
            }
            return;
        }
        match step {
            "apply" => {
                tracing::error!(table = %self.table, error = %err, "apply failed; restarting from the last commit")
            }
            _ => {
                tracing::error!(table = %self.table, error = %err, "index commit failed; rolling back to the last commit and retrying")
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
        self.stats
            .compacting
            .store(self.writer.compacting(), Ordering::Relaxed);
        // The last compaction's merge refused since it started: tried again soon.
        if let Some(before) = self.compaction_skips
            && self.writer.compactions_skipped() > before
        {
            self.compaction_skips = None;
            self.schedule.compaction_refused(Instant::now());
        }
        // One compaction at a time: the next round waits for this one's merge to end.
        if self.writer.compacting() || !self.schedule.compact_due(self.policy, Instant::now()) {
            return;
        }
        self.schedule.compaction_tried();
        let max_docs = self.writer.merge_max_docs();
        match self.writer.compact(max_docs, CompactionScope::Recent) {
            Ok(Compaction::Started) => {
                self.compaction_skips = Some(self.writer.compactions_skipped());
                self.schedule
                    .compaction_started(self.policy, Instant::now());
            }
            Ok(Compaction::NothingToMerge) => {}
            // The table's other merges (a size level's, a reindex's) fill its merge budget.
            Ok(Compaction::Busy) => self.schedule.compaction_refused(Instant::now()),
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
}

/// Sleeps for `backoff`, then doubles it up to [`MAX_BACKOFF`].
fn back_off(backoff: &mut Duration) {
    std::thread::sleep(*backoff);
    *backoff = (*backoff * 2).min(MAX_BACKOFF);
}
