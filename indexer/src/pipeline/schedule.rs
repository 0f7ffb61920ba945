//! When the indexer loop commits, reports and compacts, as a pure state machine: the loop reads
//! the clock and does the IO, this only decides. That keeps every branch of the [`CommitPolicy`]
//! testable without a source, an index or a wait.

use std::time::{Duration, Instant};

use super::CommitPolicy;

/// How long a poll may block while nothing is waiting to be committed.
const IDLE_POLL_WAIT: Duration = Duration::from_millis(200);

/// How soon a compaction tantivy refused (its merge policy was merging one of the segments) is
/// tried again, quiet table permitting.
pub(super) const COMPACTION_RETRY: Duration = Duration::from_secs(10);

/// How often the partitions' lag and the index counts are refreshed between commits.
const REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// The timing state of one indexer loop. Every method that needs the time takes it as `now`.
#[derive(Debug, Clone)]
pub(super) struct CommitSchedule {
    /// Changes (events or repairs) were applied since the last commit.
    pending: bool,
    /// When the oldest uncommitted change was applied.
    first_uncommitted: Option<Instant>,
    /// The last poll came back full, so the source is behind.
    behind: bool,
    /// When the partitions were last reported; `None` reports at the next step.
    reported_at: Option<Instant>,
    /// When the table last changed. It starts as the loop's start, so an index opened with
    /// several segments is compacted once it has been idle, like any other.
    changed_at: Instant,
    /// The earliest time of the next compaction: the minimum interval after the last one that
    /// started, or [`COMPACTION_RETRY`] after one tantivy refused.
    next_compaction: Option<Instant>,
    /// A compaction was tried since the last change (whether or not one started).
    compacted_since_change: bool,
}

impl CommitSchedule {
    pub(super) fn new(now: Instant) -> Self {
        Self {
            pending: false,
            first_uncommitted: None,
            behind: false,
            reported_at: None,
            changed_at: now,
            next_compaction: None,
            compacted_since_change: false,
        }
    }

    /// How long changes may wait for their commit: longer while the source is behind, since
    /// small commits during a catch-up cost indexing time and make nothing usefully sooner.
    fn delay(&self, policy: &CommitPolicy) -> Duration {
        if self.behind {
            policy.catch_up_delay
        } else {
            policy.max_delay
        }
    }

    /// How long the next poll may block: until the pending changes are due, or a fixed idle
    /// wait when nothing is pending.
    pub(super) fn poll_wait(&self, policy: &CommitPolicy, now: Instant) -> Duration {
        match self.first_uncommitted {
            Some(since) => self
                .delay(policy)
                .saturating_sub(now.saturating_duration_since(since)),
            None => IDLE_POLL_WAIT,
        }
    }

    /// A poll returned `events` events; a full batch means the source is behind.
    pub(super) fn polled(&mut self, policy: &CommitPolicy, events: usize) {
        self.behind = events >= policy.poll_batch;
    }

    /// Changes were applied at `now`: they need a commit, and the table is no longer idle.
    pub(super) fn changed(&mut self, now: Instant) {
        self.pending = true;
        self.first_uncommitted.get_or_insert(now);
        self.changed_at = now;
        self.compacted_since_change = false;
    }

    /// The index was rolled back to its last commit. Repairs applied again after it
    /// (`reapplied`) are pending from `now`; otherwise nothing is.
    pub(super) fn rolled_back(&mut self, reapplied: bool, now: Instant) {
        self.pending = reapplied;
        self.first_uncommitted = reapplied.then_some(now);
    }

    /// Whether to commit now: something is pending and either it has waited its delay, the
    /// writer holds `max_docs` uncommitted operations, or the loop is stopping.
    pub(super) fn commit_due(
        &self,
        policy: &CommitPolicy,
        uncommitted_ops: usize,
        stopping: bool,
        now: Instant,
    ) -> bool {
        let delay = self.delay(policy);
        let due = self
            .first_uncommitted
            .is_some_and(|since| now.saturating_duration_since(since) >= delay)
            || uncommitted_ops >= policy.max_docs;
        self.pending && (due || stopping)
    }

    /// A commit succeeded: nothing is pending, and the next step reports the new checkpoint.
    pub(super) fn committed(&mut self) {
        self.pending = false;
        self.first_uncommitted = None;
        self.reported_at = None;
    }

    /// Whether the partitions are due to be reported at `now`.
    pub(super) fn report_due(&self, now: Instant) -> bool {
        self.reported_at
            .is_none_or(|at| now.saturating_duration_since(at) >= REPORT_INTERVAL)
    }

    pub(super) fn reported(&mut self, now: Instant) {
        self.reported_at = Some(now);
    }

    /// Whether a stopping loop may return: only once nothing is left to commit.
    pub(super) fn finished(&self, stopping: bool) -> bool {
        stopping && !self.pending
    }

    /// Whether to try compacting the index at `now`: compaction is on, nothing is pending, the
    /// table has been quiet for the idle time, it was not tried since the last change, and the
    /// last compaction that started is at least the minimum interval ago (or the retry time
    /// after a refused one has come).
    pub(super) fn compact_due(&self, policy: &CommitPolicy, now: Instant) -> bool {
        policy.compact_when_idle.is_some_and(|idle| {
            !self.pending
                && !self.compacted_since_change
                && now.saturating_duration_since(self.changed_at) >= idle
                && self.next_compaction.is_none_or(|at| now >= at)
        })
    }

    /// A compaction was tried; it is not tried again until the table changes.
    pub(super) fn compaction_tried(&mut self) {
        self.compacted_since_change = true;
    }

    /// A compaction started at `now`, which the minimum interval counts from. A merge is
    /// capped ([`crate::WriterOptions::merge_max_docs`]), so a bulk load's segments can take
    /// several: the next is tried after the minimum interval without waiting for a change, until
    /// one finds nothing to merge.
    pub(super) fn compaction_started(&mut self, policy: &CommitPolicy, now: Instant) {
        self.next_compaction = Some(now + policy.compact_min_interval);
        self.compacted_since_change = false;
    }

    /// The compaction that started was refused by tantivy (noticed at `now`): try again after
    /// [`COMPACTION_RETRY`] without waiting for a change, so a refused attempt after a load
    /// doesn't leave the index in many segments for as long as the table stays quiet.
    pub(super) fn compaction_refused(&mut self, now: Instant) {
        self.compacted_since_change = false;
        self.next_compaction = Some(now + COMPACTION_RETRY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn policy() -> CommitPolicy {
        CommitPolicy {
            max_docs: 100,
            max_delay: ms(50),
            catch_up_delay: ms(1_000),
            poll_batch: 10,
            compact_when_idle: Some(ms(3_000)),
            compact_min_interval: ms(300_000),
        }
    }

    #[test]
    fn nothing_pending_never_commits() {
        let policy = policy();
        let t0 = Instant::now();
        let schedule = CommitSchedule::new(t0);
        let later = t0 + ms(10_000);
        assert!(!schedule.commit_due(&policy, 0, false, later));
        // Neither the doc cap nor stopping commits when nothing is pending.
        assert!(!schedule.commit_due(&policy, policy.max_docs, false, later));
        assert!(!schedule.commit_due(&policy, 0, true, later));
        assert_eq!(schedule.poll_wait(&policy, later), IDLE_POLL_WAIT);
    }

    #[test]
    fn live_changes_commit_after_max_delay() {
        let policy = policy();
        let t0 = Instant::now();
        let mut schedule = CommitSchedule::new(t0);
        schedule.polled(&policy, 3);
        schedule.changed(t0);
        assert_eq!(schedule.poll_wait(&policy, t0), ms(50));
        assert_eq!(schedule.poll_wait(&policy, t0 + ms(20)), ms(30));
        assert!(!schedule.commit_due(&policy, 3, false, t0 + ms(49)));
        assert!(schedule.commit_due(&policy, 3, false, t0 + ms(50)));
        // Overdue: the poll does not block at all.
        assert_eq!(schedule.poll_wait(&policy, t0 + ms(80)), Duration::ZERO);
    }

    #[test]
    fn the_delay_counts_from_the_first_uncommitted_change() {
        let policy = policy();
        let t0 = Instant::now();
        let mut schedule = CommitSchedule::new(t0);
        schedule.changed(t0);
        schedule.changed(t0 + ms(40));
        assert!(schedule.commit_due(&policy, 2, false, t0 + ms(50)));
    }

    #[test]
    fn catching_up_commits_after_catch_up_delay() {
        let policy = policy();
        let t0 = Instant::now();
        let mut schedule = CommitSchedule::new(t0);
        schedule.polled(&policy, policy.poll_batch);
        schedule.changed(t0);
        assert_eq!(schedule.poll_wait(&policy, t0 + ms(200)), ms(800));
        assert!(!schedule.commit_due(&policy, 10, false, t0 + ms(50)));
        assert!(!schedule.commit_due(&policy, 10, false, t0 + ms(999)));
        assert!(schedule.commit_due(&policy, 10, false, t0 + ms(1_000)));
        // A short poll means caught up: back to the live delay.
        schedule.polled(&policy, policy.poll_batch - 1);
        assert!(schedule.commit_due(&policy, 10, false, t0 + ms(50)));
    }

    #[test]
    fn the_doc_cap_commits_before_the_delay() {
        let policy = policy();
        let t0 = Instant::now();
        let mut schedule = CommitSchedule::new(t0);
        schedule.polled(&policy, policy.poll_batch);
        schedule.changed(t0);
        assert!(!schedule.commit_due(&policy, policy.max_docs - 1, false, t0));
        assert!(schedule.commit_due(&policy, policy.max_docs, false, t0));
    }

    #[test]
    fn stopping_commits_whatever_is_pending_then_finishes() {
        let policy = policy();
        let t0 = Instant::now();
        let mut schedule = CommitSchedule::new(t0);
        assert!(schedule.finished(true));
        assert!(!schedule.finished(false));
        schedule.changed(t0);
        assert!(schedule.commit_due(&policy, 1, true, t0));
        assert!(!schedule.finished(true));
        schedule.committed();
        assert!(!schedule.commit_due(&policy, 0, true, t0));
        assert!(schedule.finished(true));
    }

    #[test]
    fn a_commit_clears_pending_changes() {
        let policy = policy();
        let t0 = Instant::now();
        let mut schedule = CommitSchedule::new(t0);
        schedule.changed(t0);
        schedule.committed();
        assert!(!schedule.commit_due(&policy, 0, false, t0 + ms(60)));
        assert_eq!(schedule.poll_wait(&policy, t0 + ms(60)), IDLE_POLL_WAIT);
    }

    #[test]
    fn a_rollback_drops_pending_changes_unless_repairs_were_reapplied() {
        let policy = policy();
        let t0 = Instant::now();
        let mut schedule = CommitSchedule::new(t0);
        schedule.changed(t0);
        schedule.rolled_back(false, t0 + ms(60));
        assert!(!schedule.commit_due(&policy, 0, true, t0 + ms(60)));
        assert_eq!(schedule.poll_wait(&policy, t0 + ms(60)), IDLE_POLL_WAIT);

        schedule.changed(t0);
        // Reapplied repairs are pending again, timed from the rollback.
        schedule.rolled_back(true, t0 + ms(60));
        assert!(!schedule.commit_due(&policy, 1, false, t0 + ms(100)));
        assert!(schedule.commit_due(&policy, 1, false, t0 + ms(110)));
    }

    #[test]
    fn reports_once_a_second_and_right_after_a_commit() {
        let t0 = Instant::now();
        let mut schedule = CommitSchedule::new(t0);
        assert!(schedule.report_due(t0));
        schedule.reported(t0);
        assert!(!schedule.report_due(t0 + ms(999)));
        assert!(schedule.report_due(t0 + ms(1_000)));
        schedule.reported(t0 + ms(1_000));
        schedule.changed(t0 + ms(1_100));
        schedule.committed();
        assert!(schedule.report_due(t0 + ms(1_200)));
    }

    #[test]
    fn no_compaction_when_it_is_off() {
        let policy = CommitPolicy {
            compact_when_idle: None,
            ..policy()
        };
        let t0 = Instant::now();
        let schedule = CommitSchedule::new(t0);
        assert!(!schedule.compact_due(&policy, t0 + ms(1_000_000)));
    }

    #[test]
    fn compacts_once_the_table_has_been_idle() {
        let policy = policy();
        let t0 = Instant::now();
        let mut schedule = CommitSchedule::new(t0);
        // An index that just opened counts as changed when the loop started.
        assert!(!schedule.compact_due(&policy, t0 + ms(2_999)));
        assert!(schedule.compact_due(&policy, t0 + ms(3_000)));
        schedule.changed(t0 + ms(2_000));
        assert!(!schedule.compact_due(&policy, t0 + ms(4_999)));
        // Not while a change waits for its commit, however long the table was quiet.
        assert!(!schedule.compact_due(&policy, t0 + ms(5_000)));
        schedule.committed();
        assert!(schedule.compact_due(&policy, t0 + ms(5_000)));
    }

    #[test]
    fn compaction_is_tried_once_per_quiet_period() {
        let policy = policy();
        let t0 = Instant::now();
        let mut schedule = CommitSchedule::new(t0);
        schedule.compaction_tried();
        // Nothing started (too few segments, too many docs): not again until a change...
        assert!(!schedule.compact_due(&policy, t0 + ms(10_000)));
        schedule.changed(t0 + ms(10_000));
        schedule.committed();
        // ...after which the next quiet period tries again, with no minimum interval to wait.
        assert!(schedule.compact_due(&policy, t0 + ms(13_000)));
    }

    #[test]
    fn compactions_that_started_are_spaced_by_the_minimum_interval() {
        let policy = policy();
        let t0 = Instant::now();
        let mut schedule = CommitSchedule::new(t0);
        let started = t0 + ms(3_000);
        schedule.compaction_tried();
        schedule.compaction_started(&policy, started);
        schedule.changed(started + ms(1_000));
        schedule.committed();
        let quiet = started + ms(4_000);
        assert!(!schedule.compact_due(&policy, quiet));
        assert!(!schedule.compact_due(&policy, started + ms(299_999)));
        assert!(schedule.compact_due(&policy, started + policy.compact_min_interval));
    }

    #[test]
    fn a_compaction_that_started_is_followed_by_another_try_until_one_finds_nothing() {
        let policy = policy();
        let t0 = Instant::now();
        let mut schedule = CommitSchedule::new(t0);
        let first = t0 + ms(3_000);
        assert!(schedule.compact_due(&policy, first));
        schedule.compaction_tried();
        schedule.compaction_started(&policy, first);
        // No change since: the next capped merge is tried once the interval has passed...
        assert!(!schedule.compact_due(&policy, first + ms(1_000)));
        let second = first + policy.compact_min_interval;
        assert!(schedule.compact_due(&policy, second));
        // ...and a try that starts nothing ends the rounds until the table changes.
        schedule.compaction_tried();
        assert!(!schedule.compact_due(&policy, second + policy.compact_min_interval));
    }

    #[test]
    fn a_refused_compaction_is_tried_again_without_a_change() {
        let policy = policy();
        let t0 = Instant::now();
        let mut schedule = CommitSchedule::new(t0);
        let started = t0 + ms(3_000);
        schedule.compaction_tried();
        schedule.compaction_started(&policy, started);
        assert!(!schedule.compact_due(&policy, started + ms(1_000)));
        // Refused: not before the retry time, then again, with no change in between.
        let refused = started + ms(500);
        schedule.compaction_refused(refused);
        assert!(!schedule.compact_due(&policy, refused + COMPACTION_RETRY - ms(1)));
        assert!(schedule.compact_due(&policy, refused + COMPACTION_RETRY));
    }
}
