//! The repair queue: mutations for a table's live indexer that come from outside its source
//! (repairs of drift, this instance's writes to HBase), with the tickets `?wait=indexed` waits
//! on.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use hbidx_schema::model::Mutation;

/// Mutations waiting for a table's live indexer that move no source position: repairs, and
/// the writes this instance made to HBase (read-your-writes). Shared by every indexer the
/// table gets over its life (a reindex swap starts a new one), like the checkpoint channel.
/// Bounded: both are best effort (the next lookup or verify finds drift again; a write's
/// replicated event or the next verify brings it in), so when the indexer is far behind, new
/// ones are dropped and counted rather than growing memory.
///
/// Each accepted mutation gets a ticket, counting up from 1 in queue order; the indexer
/// publishes the highest ticket covered by an index commit ([`RepairQueue::committed_tickets`]),
/// which is what a write with `?wait=indexed` waits for.
pub struct RepairQueue {
    pending: Mutex<Pending>,
    /// The live indexer's source's waker, called when something is queued so that the
    /// indexer takes it at once rather than after its current poll.
    waker: Mutex<Option<crate::source::Waker>>,
    capacity: usize,
    /// Repairs accepted.
    pub queued: AtomicU64,
    /// Repairs refused because the queue was full.
    pub dropped: AtomicU64,
    /// Repairs applied by the indexer.
    pub applied: AtomicU64,
    /// The ticket of the last mutation covered by an index commit.
    committed_ticket: tokio::sync::watch::Sender<u64>,
    /// A copy of every accepted mutation while a reindex records them ([`RepairQueue::record`]).
    recording: Mutex<Option<Recorded>>,
}

/// What a reindex recorded: the mutations the live indexer took from this queue while the
/// shadow index was built, which the shadow must also have before it replaces the live index.
#[derive(Debug, Default)]
pub struct Recorded {
    pub mutations: Vec<Mutation>,
    /// Accepted past [`RECORDING_CAPACITY`] and not kept: the reindex can't be exact.
    pub overflowed: u64,
}

/// Mutations one recording keeps: a few hundred MB at most, for a reindex during which this
/// instance took a million writes or repairs.
pub const RECORDING_CAPACITY: usize = 1_000_000;

impl std::fmt::Debug for RepairQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepairQueue")
            .field("pending", &self.len())
            .field("capacity", &self.capacity)
            .field("queued", &self.queued)
            .field("dropped", &self.dropped)
            .field("applied", &self.applied)
            .field("committed_ticket", &*self.committed_ticket.borrow())
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Pending {
    mutations: Vec<Mutation>,
    /// The ticket of the last mutation accepted.
    last_ticket: u64,
}

impl Default for RepairQueue {
    fn default() -> Self {
        Self::with_capacity(100_000)
    }
}

impl RepairQueue {
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            pending: Mutex::new(Pending::default()),
            waker: Mutex::new(None),
            capacity,
            queued: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            committed_ticket: tokio::sync::watch::Sender::new(0),
            recording: Mutex::new(None),
        }
    }

    /// Starts keeping a copy of every mutation accepted from now on, until
    /// [`RepairQueue::take_recorded`]. A reindex from the store records while it scans: its
    /// shadow doesn't see what the live indexer applies from this queue meanwhile (writes to
    /// HBase through this instance, repairs), and no source can replay those.
    pub fn record(&self) {
        *self
            .recording
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Recorded::default());
    }

    /// Stops recording and returns what was recorded (empty when nothing recorded).
    pub fn take_recorded(&self) -> Recorded {
        self.recording
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .unwrap_or_default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues a repair; false (and counted) when the queue is full. Never blocks for long: safe
    /// to call from async code.
    pub fn push(&self, repair: Mutation) -> bool {
        self.submit(repair).is_some()
    }

    /// Queues a mutation and returns its ticket; `None` (and counted) when the queue is full.
    /// Never blocks for long: safe to call from async code.
    pub fn submit(&self, mutation: Mutation) -> Option<u64> {
        let mut pending = self.lock();
        if pending.mutations.len() >= self.capacity {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        {
            // Under the queue's lock: a mutation accepted is recorded before the indexer can
            // take it, so a recording stopped after the indexer stopped holds all it applied.
            let mut recording = self
                .recording
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(recorded) = recording.as_mut() {
                if recorded.mutations.len() < RECORDING_CAPACITY {
                    recorded.mutations.push(mutation.clone());
                } else {
                    recorded.overflowed += 1;
                }
            }
        }
        pending.mutations.push(mutation);
        pending.last_ticket += 1;
        let ticket = pending.last_ticket;
        drop(pending);
        self.queued.fetch_add(1, Ordering::Relaxed);
        let waker = self
            .waker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if let Some(wake) = waker {
            wake();
        }
        Some(ticket)
    }

    /// Set by each indexer that starts taking from this queue; `None` clears it.
    pub fn set_waker(&self, waker: Option<crate::source::Waker>) {
        *self
            .waker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = waker;
    }

    /// Everything queued so far, oldest first, and the ticket of the last one.
    pub fn drain(&self) -> (Vec<Mutation>, u64) {
        let mut pending = self.lock();
        (std::mem::take(&mut pending.mutations), pending.last_ticket)
    }

    /// Called by the indexer after an index commit covered every mutation up to `ticket`.
    pub fn mark_committed(&self, ticket: u64) {
        self.committed_ticket.send_if_modified(|committed| {
            let newer = ticket > *committed;
            if newer {
                *committed = ticket;
            }
            newer
        });
    }

    /// The highest ticket covered by an index commit, to wait on.
    pub fn committed_tickets(&self) -> tokio::sync::watch::Receiver<u64> {
        self.committed_ticket.subscribe()
    }

    pub fn len(&self) -> usize {
        self.lock().mutations.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use hbidx_schema::model::CellOp;

    use super::*;

    #[test]
    fn queue_is_bounded() {
        let queue = RepairQueue::with_capacity(1);
        let m = Mutation {
            table: "user".into(),
            rowkey: b"k".to_vec(),
            ops: vec![CellOp::DeleteRow { ts: 1 }],
        };
        assert!(queue.push(m.clone()));
        assert!(!queue.push(m.clone()));
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 1);
        assert_eq!(queue.drain(), (vec![m.clone()], 1));
        assert!(queue.is_empty());
        // A queued mutation wakes the live indexer's source.
        let wakes = std::sync::Arc::new(AtomicU64::new(0));
        let counter = wakes.clone();
        queue.set_waker(Some(std::sync::Arc::new(move || {
            counter.fetch_add(1, Ordering::Relaxed);
        })));
        // Tickets go on counting after a drain; commits publish them.
        assert_eq!(queue.submit(m), Some(2));
        let committed = queue.committed_tickets();
        queue.mark_committed(2);
        queue.mark_committed(1);
        assert_eq!(*committed.borrow(), 2);
        assert_eq!(wakes.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_recording_keeps_what_was_accepted_while_it_ran() {
        let queue = RepairQueue::with_capacity(2);
        let m = |ts| Mutation {
            table: "user".into(),
            rowkey: b"k".to_vec(),
            ops: vec![CellOp::DeleteRow { ts }],
        };
        assert!(queue.push(m(1)));
        queue.record();
        assert!(queue.push(m(2)));
        assert!(!queue.push(m(3)), "the queue is full");
        let (drained, _) = queue.drain();
        assert_eq!(drained, vec![m(1), m(2)]);
        assert!(queue.push(m(4)));
        let recorded = queue.take_recorded();
        assert_eq!(recorded.mutations, vec![m(2), m(4)]);
        assert_eq!(recorded.overflowed, 0);
        assert!(queue.push(m(5)));
        assert!(queue.take_recorded().mutations.is_empty());
    }
}
