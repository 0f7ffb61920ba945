//! A source polled one batch ahead on its own thread.
//!
//! The indexer thread is the bottleneck of a Kafka-fed table: per event, done in line, it would
//! poll and decode the message, apply it to the embedded store, and only then merge it into the
//! index. [`Prefetch`] moves the first half (everything the wrapped source does in `poll`) to a second
//! thread, so decoding and the store write of batch n+1 overlap with the index work of batch n.
//! The channel between them holds at most [`DEPTH`] batches, so memory stays bounded and a slow
//! index back-pressures the source.
//!
//! Exactly-once is unchanged: the index still commits only events it has applied, with their
//! checkpoint. What runs ahead is the wrapped source's own side effect (the store write), which
//! was already allowed to run ahead of the index (a crash replays it, and cell timestamps make
//! the replay harmless). The wrapped source's [`Source::commit_barrier`] is handed to the indexer
//! thread as it is and still runs before every index commit, so the store is durable by then.
//!
//! A [`Source::seek`] (at start, and after a rollback) bumps an epoch: batches polled before it
//! are dropped when they arrive, so nothing from the old position is applied after the seek.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, SendTimeoutError, Sender, bounded};
use hbidx_schema::model::ChangeEvent;

use crate::checkpoint::Checkpoint;
use crate::error::{IndexerError, Result};
use crate::source::{CommitBarrier, PartitionReport, Source, Waker};

/// Batches polled ahead of the indexer. Two keep the polling thread busy while the indexer
/// works on one; more would only hold more memory.
pub const DEPTH: usize = 2;

/// The timeout of the polling thread's `poll`s of the wrapped source. It bounds how long a seek
/// or a shutdown waits. It is not a latency: a Kafka poll returns as soon as it has taken what
/// is buffered. It must be long enough for a full batch while catching up (4096 decoded and
/// stored events take ~15 ms): the indexer commits rarely only while batches come back full.
const POLL_WAIT: Duration = Duration::from_millis(100);

/// How often the wrapped source's report (Kafka watermarks) is refreshed.
const REPORT_EVERY: Duration = Duration::from_secs(1);

type Batch = (u64, Result<Vec<ChangeEvent>>);

enum Command {
    Seek {
        checkpoint: Checkpoint,
        epoch: u64,
        done: Sender<Result<()>>,
    },
    Committed(Checkpoint),
}

/// Wraps a source so that its `poll` runs on a thread of its own, one batch ahead.
pub struct Prefetch {
    name: String,
    epoch: u64,
    batches: Receiver<Batch>,
    commands: Option<Sender<Command>>,
    /// The `max` of the indexer's last poll, used by the polling thread for its next one.
    max: Arc<AtomicUsize>,
    reports: Arc<Mutex<Vec<PartitionReport>>>,
    barrier: Option<CommitBarrier>,
    /// See [`Source::waker`]: a pending wake-up ends the indexer's wait for a batch.
    wake: Sender<()>,
    woken: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl Prefetch {
    pub fn new<S: Source>(inner: S) -> Result<Self> {
        let name = inner.name().to_string();
        let barrier = inner.commit_barrier();
        let (batch_tx, batches) = bounded(DEPTH);
        let (commands, command_rx) = crossbeam_channel::unbounded();
        let max = Arc::new(AtomicUsize::new(1024));
        let reports = Arc::new(Mutex::new(Vec::new()));
        let mut poller = Poller {
            inner,
            epoch: 0,
            position: Position::Unset,
            batches: batch_tx,
            commands: command_rx,
            max: max.clone(),
            reports: reports.clone(),
            reported_at: None,
        };
        let thread = std::thread::Builder::new()
            .name(format!("prefetch-{name}"))
            .spawn(move || poller.run())
            .map_err(|err| IndexerError::Source {
                source_name: name.clone(),
                reason: format!("cannot start the polling thread: {err}"),
            })?;
        let (wake, woken) = bounded(1);
        Ok(Self {
            name,
            epoch: 0,
            batches,
            commands: Some(commands),
            max,
            reports,
            barrier,
            wake,
            woken,
            thread: Some(thread),
        })
    }

    /// Sends a command and waits for its answer (after the polling thread's current poll).
    fn ask(&self, command: impl FnOnce(Sender<Result<()>>) -> Command) -> Result<()> {
        let (done, answer) = bounded(1);
        let sent = self
            .commands
            .as_ref()
            .is_some_and(|commands| commands.send(command(done)).is_ok());
        if !sent {
            return Err(self.gone());
        }
        answer.recv().unwrap_or_else(|_| Err(self.gone()))
    }

    fn gone(&self) -> IndexerError {
        IndexerError::Source {
            source_name: self.name.clone(),
            reason: "the polling thread has stopped".to_string(),
        }
    }
}

impl Source for Prefetch {
    fn name(&self) -> &str {
        &self.name
    }

    fn seek(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        self.epoch += 1;
        let epoch = self.epoch;
        self.ask(|done| Command::Seek {
            checkpoint: checkpoint.clone(),
            epoch,
            done,
        })
    }

    fn poll(&mut self, max: usize, timeout: Duration) -> Result<Vec<ChangeEvent>> {
        self.max.store(max.max(1), Ordering::Relaxed);
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            crossbeam_channel::select! {
                recv(self.batches) -> batch => match batch {
                    // Polled before the last seek: from the old position, so never applied.
                    Ok((epoch, _)) if epoch != self.epoch => continue,
                    Ok((_, batch)) => return batch,
                    Err(_) => return Err(self.gone()),
                },
                // Woken: the indexer has other work queued; a batch waits for the next poll.
                recv(self.woken) -> _ => return Ok(Vec::new()),
                default(left) => return Ok(Vec::new()),
            }
        }
    }

    fn committed(&mut self, checkpoint: &Checkpoint) {
        if let Some(commands) = &self.commands {
            let _ = commands.send(Command::Committed(checkpoint.clone()));
        }
    }

    fn commit_barrier(&self) -> Option<CommitBarrier> {
        self.barrier.clone()
    }

    fn waker(&self) -> Option<Waker> {
        let wake = self.wake.clone();
        Some(Arc::new(move || {
            // Full means a wake-up is already pending.
            let _pending = wake.try_send(());
        }))
    }

    fn report(&mut self) -> Vec<PartitionReport> {
        self.reports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        // Closing the command channel (and the batch receiver) stops the thread after its
        // current poll.
        self.commands = None;
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!(source = %self.name, "polling thread panicked");
        }
    }
}

/// The polling thread's side.
struct Poller<S: Source> {
    inner: S,
    epoch: u64,
    /// No poll before a seek succeeded: before the first one the source has no position, and
    /// after a failed one polling would read from the wrong place (after a rollback, past
    /// events the index no longer has).
    position: Position,
    batches: Sender<Batch>,
    commands: Receiver<Command>,
    max: Arc<AtomicUsize>,
    reports: Arc<Mutex<Vec<PartitionReport>>>,
    reported_at: Option<Instant>,
}

enum Position {
    Unset,
    Ok,
    /// The last seek failed; it is retried (with backoff) before anything is polled.
    Failed(Checkpoint),
}

/// What handling the pending commands asks of the polling loop.
enum Next {
    Go,
    /// A seek happened: a batch in hand is from the old position.
    Reseeked,
    Stop,
}

impl<S: Source> Poller<S> {
    fn run(&mut self) {
        let mut backoff = Duration::from_millis(50);
        loop {
            if let Next::Stop = self.handle_pending() {
                return;
            }
            match &self.position {
                Position::Ok => {}
                Position::Unset => match self.commands.recv() {
                    Ok(command) => {
                        self.handle(command);
                        continue;
                    }
                    Err(_) => return,
                },
                Position::Failed(checkpoint) => {
                    match self.commands.recv_timeout(backoff) {
                        Ok(command) => {
                            self.handle(command);
                        }
                        Err(RecvTimeoutError::Timeout) => {
                            let checkpoint = checkpoint.clone();
                            match self.inner.seek(&checkpoint) {
                                Ok(()) => self.position = Position::Ok,
                                Err(err) => {
                                    tracing::warn!(source = %self.inner.name(), error = %err, "seek failed again; retrying");
                                }
                            }
                        }
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            }
            let polled = self.inner.poll(self.max.load(Ordering::Relaxed), POLL_WAIT);
            // A batch's counters (dead letters, skips, event times) go into the report before the
            // indexer can commit the batch, so a status whose checkpoint covers an event also
            // counts it. The wrapped source limits its own costly part (watermark fetches).
            self.refresh_report(matches!(&polled, Ok(events) if !events.is_empty()));
            let failed = polled.is_err();
            if matches!(&polled, Ok(events) if events.is_empty()) {
                continue;
            }
            if let Next::Stop = self.hand_over((self.epoch, polled)) {
                return;
            }
            if failed {
                // The wrapped source keeps what it could not finish (a failed store write is
                // stashed and retried); wait before asking again, still answering commands.
                match self.commands.recv_timeout(backoff) {
                    Ok(command) => {
                        self.handle(command);
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => return,
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            } else {
                backoff = Duration::from_millis(50);
            }
        }
    }

    /// Waits until the indexer takes the batch, answering commands meanwhile (a seek must not
    /// wait for the indexer to take a batch from the old position).
    fn hand_over(&mut self, mut batch: Batch) -> Next {
        loop {
            match self.batches.send_timeout(batch, POLL_WAIT) {
                Ok(()) => return Next::Go,
                Err(SendTimeoutError::Disconnected(_)) => return Next::Stop,
                Err(SendTimeoutError::Timeout(back)) => {
                    batch = back;
                    match self.handle_pending() {
                        Next::Go => {}
                        // The batch is from before the seek: drop it.
                        Next::Reseeked => return Next::Go,
                        Next::Stop => return Next::Stop,
                    }
                }
            }
        }
    }

    fn handle_pending(&mut self) -> Next {
        let mut next = Next::Go;
        loop {
            match self.commands.try_recv() {
                Ok(command) => {
                    if self.handle(command) {
                        next = Next::Reseeked;
                    }
                }
                Err(crossbeam_channel::TryRecvError::Empty) => return next,
                Err(crossbeam_channel::TryRecvError::Disconnected) => return Next::Stop,
            }
        }
    }

    /// Runs one command; true if it was a seek.
    fn handle(&mut self, command: Command) -> bool {
        match command {
            Command::Seek {
                checkpoint,
                epoch,
                done,
            } => {
                let result = self.inner.seek(&checkpoint);
                self.position = match result {
                    Ok(()) => Position::Ok,
                    Err(_) => Position::Failed(checkpoint),
                };
                self.epoch = epoch;
                let _ = done.send(result);
                true
            }
            Command::Committed(checkpoint) => {
                self.inner.committed(&checkpoint);
                false
            }
        }
    }

    /// Takes the wrapped source's report when `now` or once [`REPORT_EVERY`].
    fn refresh_report(&mut self, now: bool) {
        if now
            || self
                .reported_at
                .is_none_or(|at| at.elapsed() >= REPORT_EVERY)
        {
            self.reported_at = Some(Instant::now());
            let report = self.inner.report();
            *self.reports.lock().unwrap_or_else(PoisonError::into_inner) = report;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use hbidx_schema::model::Mutation;

    use super::*;

    /// An endless log: event n has offset n. Counts what the wrapper forwards to it.
    struct Log {
        next: i64,
        committed: Arc<Mutex<Vec<i64>>>,
        barriers: Arc<AtomicU64>,
        /// Seeks that fail before one succeeds (a broker that is down for a while).
        failing_seeks: u64,
    }

    impl Source for Log {
        fn name(&self) -> &str {
            "log"
        }
        fn seek(&mut self, checkpoint: &Checkpoint) -> Result<()> {
            if self.failing_seeks > 0 {
                self.failing_seeks -= 1;
                // Where a failed seek leaves the source: somewhere else.
                self.next = 1_000_000;
                return Err(IndexerError::Source {
                    source_name: "log".into(),
                    reason: "broker down".into(),
                });
            }
            self.next = checkpoint.position("log", 0).map_or(0, |at| at + 1);
            Ok(())
        }
        fn poll(&mut self, max: usize, _timeout: Duration) -> Result<Vec<ChangeEvent>> {
            let batch = (self.next..self.next + max as i64)
                .map(|offset| ChangeEvent {
                    partition: 0,
                    offset,
                    mutation: Mutation {
                        table: "t".into(),
                        rowkey: offset.to_be_bytes().to_vec(),
                        ops: Vec::new(),
                    },
                })
                .collect();
            self.next += max as i64;
            Ok(batch)
        }
        fn committed(&mut self, checkpoint: &Checkpoint) {
            if let Some(at) = checkpoint.position("log", 0) {
                self.committed.lock().unwrap().push(at);
            }
        }
        /// The high watermark is the next offset it will hand out.
        fn report(&mut self) -> Vec<PartitionReport> {
            vec![PartitionReport {
                partition: 0,
                high_watermark: Some(self.next),
                ..PartitionReport::default()
            }]
        }
        fn commit_barrier(&self) -> Option<CommitBarrier> {
            let barriers = self.barriers.clone();
            Some(Arc::new(move || {
                barriers.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }))
        }
    }

    fn at(offset: i64) -> Checkpoint {
        let mut checkpoint = Checkpoint::default();
        checkpoint.advance("log", 0, offset);
        checkpoint
    }

    fn offsets(events: &[ChangeEvent]) -> Vec<i64> {
        events.iter().map(|event| event.offset).collect()
    }

    /// A status whose checkpoint covers a batch must count the batch too (its dead letters,
    /// its position): the report is refreshed with every batch, not only once a second.
    #[test]
    fn the_report_covers_every_batch_handed_over() {
        let mut source = Prefetch::new(Log {
            next: 0,
            committed: Arc::new(Mutex::new(Vec::new())),
            barriers: Arc::new(AtomicU64::new(0)),
            failing_seeks: 0,
        })
        .unwrap();
        source.seek(&at(9)).unwrap();
        for _ in 0..5 {
            let batch = source.poll(4, Duration::from_secs(5)).unwrap();
            let last = batch.last().expect("a batch").offset;
            let report = source.report();
            assert!(
                report[0].high_watermark >= Some(last + 1),
                "batch up to {last}, report {report:?}"
            );
        }
    }

    #[test]
    fn batches_follow_the_log_and_a_seek_drops_what_was_polled_ahead() {
        let committed = Arc::new(Mutex::new(Vec::new()));
        let barriers = Arc::new(AtomicU64::new(0));
        let mut source = Prefetch::new(Log {
            next: 0,
            committed: committed.clone(),
            barriers: barriers.clone(),
            failing_seeks: 0,
        })
        .unwrap();
        source.seek(&at(9)).unwrap();
        let wait = Duration::from_secs(5);
        // (The first batches may be polled before the indexer's `max` is known.)
        let first = offsets(&source.poll(4, wait).unwrap());
        assert_eq!(first.first(), Some(&10));
        assert!(first.windows(2).all(|pair| pair[1] == pair[0] + 1));
        let next = source.poll(4, wait).unwrap();
        assert_eq!(
            next.first().map(|event| event.offset),
            first.last().map(|last| last + 1)
        );
        // The polling thread is ahead by now (the channel is full); a rollback to 11 must
        // continue at 12, never with a batch polled before the seek.
        std::thread::sleep(Duration::from_millis(50));
        source.seek(&at(11)).unwrap();
        let after = source.poll(4, wait).unwrap();
        assert_eq!(after.first().map(|event| event.offset), Some(12));
        let more = source.poll(4, wait).unwrap();
        assert_eq!(
            more.first().map(|event| event.offset),
            after.last().map(|event| event.offset + 1),
            "batches after the seek are contiguous"
        );
        // The barrier is the wrapped source's own, run on the caller's thread.
        let barrier = source
            .commit_barrier()
            .expect("the wrapped source has a barrier");
        barrier().unwrap();
        assert_eq!(barriers.load(Ordering::SeqCst), 1);
        // `committed` reaches the wrapped source (on the polling thread, after its poll).
        source.committed(&at(15));
        let deadline = Instant::now() + wait;
        while committed.lock().unwrap().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(*committed.lock().unwrap(), vec![15]);
        // Dropping the wrapper stops and joins the polling thread (the test would hang if not).
        drop(source);
    }

    #[test]
    fn a_failed_seek_is_retried_before_anything_is_polled() {
        let mut source = Prefetch::new(Log {
            next: 0,
            committed: Arc::new(Mutex::new(Vec::new())),
            barriers: Arc::new(AtomicU64::new(0)),
            failing_seeks: 2,
        })
        .unwrap();
        // The caller hears about the failure (the pipeline logs it) …
        assert!(source.seek(&at(41)).is_err());
        // … and the polling thread keeps retrying that seek (it fails once more, then
        // succeeds) instead of polling from wherever the failed seek left the source, or
        // stalling until the next seek.
        let batch = source.poll(4, Duration::from_secs(10)).unwrap();
        assert_eq!(batch.first().map(|event| event.offset), Some(42));
    }
}
