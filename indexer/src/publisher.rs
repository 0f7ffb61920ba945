//! The write-through publisher: `PUT`/`DELETE` on a Kafka-fed table send the mutation to the
//! table's topic as a JSON event and answer once the broker has acknowledged it.
//!
//! rdkafka hands delivery reports out only when the producer is polled. rust-rdkafka's
//! `FutureProducer` polls from a thread that never stops, 100 ms at a time, and each of those
//! polls ends in a busy loop: librdkafka returns up to a millisecond before the deadline, and the
//! rest is polled as 0 ms again and again. That was ~1 ms of CPU in every 100 ms per Kafka table
//! of a server nobody writes to (measured: 8 scheduler ticks in 10 s). Here a [`BaseProducer`]
//! is polled by a thread of our own that polls only while a send awaits its report, and
//! otherwise sleeps on a condition variable, waking once a second to hand out whatever
//! librdkafka queued meanwhile (its log lines, errors).

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hbidx_schema::config::TableConfig;
use hbidx_schema::model::Mutation;
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, ProducerContext};
use tokio::sync::oneshot;

use crate::error::Result;
use crate::kafka::{KafkaSourceConfig, kafka_error};

/// How long a send waits for room in librdkafka's local queue before it fails (what
/// `FutureProducer::send` was given).
const QUEUE_TIMEOUT: Duration = Duration::from_secs(30);
/// While sends are in flight, each poll waits at most this long for their reports.
const BUSY_POLL: Duration = Duration::from_millis(100);
/// While idle, the polling thread still hands out queued events this often.
const IDLE_POLL: Duration = Duration::from_secs(1);

/// Publishes write-through mutations as JSON events to a table's topic. Keyed by rowkey, so
/// every write of a row lands in one partition, in order. Clones share one producer.
#[derive(Clone)]
pub struct KafkaPublisher {
    inner: Arc<Inner>,
}

struct Inner {
    producer: Arc<BaseProducer<PublishContext>>,
    shared: Arc<Shared>,
    topic: String,
    source_name: String,
    table: Arc<TableConfig>,
}

/// Where a published event landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub source_name: String,
    pub partition: i32,
    pub offset: i64,
}

/// What a delivery report says: `(partition, offset)`, or why the message was not delivered.
type Delivery = std::result::Result<(i32, i64), KafkaError>;

/// Completes each send's oneshot from its delivery report, on the polling thread.
struct PublishContext {
    shared: Arc<Shared>,
}

impl ClientContext for PublishContext {}

impl ProducerContext for PublishContext {
    type DeliveryOpaque = Box<oneshot::Sender<Delivery>>;

    fn delivery(&self, result: &DeliveryResult<'_>, reply: Self::DeliveryOpaque) {
        let delivery = match result {
            Ok(message) => Ok((message.partition(), message.offset())),
            Err((err, _)) => Err(err.clone()),
        };
        // The caller may have gone (its request was cancelled); the report is still counted.
        let _ = reply.send(delivery);
        self.shared.finished();
    }
}

/// The polling thread's state: how many sends await their report, and whether the publisher
/// is gone.
#[derive(Default)]
struct Shared {
    state: Mutex<PollState>,
    wake: Condvar,
}

#[derive(Default)]
struct PollState {
    in_flight: usize,
    stopping: bool,
    /// The polling thread is asleep on the condition variable (what the tests synchronise on).
    waiting: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, PollState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn started(&self) {
        self.lock().in_flight += 1;
        self.wake.notify_one();
    }

    fn finished(&self) {
        let mut state = self.lock();
        state.in_flight = state.in_flight.saturating_sub(1);
    }

    fn stop(&self) {
        self.lock().stopping = true;
        self.wake.notify_one();
    }

    /// Blocks until there is something to poll for, and says how long to poll; `None` once
    /// the publisher is gone and every report has been handed out.
    fn next_poll(&self) -> Option<Duration> {
        let mut state = self.lock();
        if state.in_flight == 0 && !state.stopping {
            state.waiting = true;
            state = self
                .wake
                .wait_timeout_while(state, IDLE_POLL, |s| s.in_flight == 0 && !s.stopping)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
            state.waiting = false;
        }
        if state.stopping && state.in_flight == 0 {
            return None;
        }
        Some(if state.in_flight > 0 {
            BUSY_POLL
        } else {
            Duration::ZERO
        })
    }
}

fn poll_loop(producer: Arc<BaseProducer<PublishContext>>, shared: Arc<Shared>) {
    while let Some(wait) = shared.next_poll() {
        producer.poll(wait);
    }
    // The last reference to the producer usually goes here: its drop flushes (nothing is
    // left in flight by now) and closes the connections.
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Not joined: the thread ends on its own once in-flight reports are in, and joining
        // could block an async caller for a poll's length.
        self.shared.stop();
    }
}

impl KafkaPublisher {
    pub fn new(config: &KafkaSourceConfig, table: Arc<TableConfig>) -> Result<Self> {
        let name = config.source_name();
        let shared = Arc::new(Shared::default());
        let producer: BaseProducer<PublishContext> = crate::kafka::client_config(config)
            // Acknowledged means replicated: the API answers only after this.
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "1")
            .create_with_context(PublishContext {
                shared: shared.clone(),
            })
            .map_err(|err| kafka_error(&name, err))?;
        let producer = Arc::new(producer);
        std::thread::Builder::new()
            .name(format!("hbidx-publish-{}", table.name))
            .spawn({
                let producer = producer.clone();
                let shared = shared.clone();
                move || poll_loop(producer, shared)
            })
            .map_err(|err| kafka_error(&name, format!("starting the polling thread: {err}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                producer,
                shared,
                topic: config.topic.clone(),
                source_name: name,
                table,
            }),
        })
    }

    /// Sends one mutation and waits for the broker's acknowledgement.
    pub async fn publish(&self, mutation: &Mutation) -> Result<Published> {
        let inner = &self.inner;
        let payload = crate::formats::encode_json(&inner.table, mutation);
        let (reply, delivered) = oneshot::channel();
        let mut record = BaseRecord::with_opaque_to(&inner.topic, Box::new(reply))
            .key(&mutation.rowkey)
            .payload(&payload);
        let deadline = Instant::now() + QUEUE_TIMEOUT;
        loop {
            // Counted before the send: its report may be handed out before `send` returns.
            inner.shared.started();
            match inner.producer.send(record) {
                Ok(()) => break,
                Err((err, returned)) => {
                    inner.shared.finished();
                    let queue_full = err.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull);
                    if !queue_full || Instant::now() >= deadline {
                        return Err(kafka_error(&inner.source_name, err));
                    }
                    record = returned;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        let (partition, offset) = delivered
            .await
            .map_err(|_| kafka_error(&inner.source_name, "the producer went away"))?
            .map_err(|err| kafka_error(&inner.source_name, err))?;
        Ok(Published {
            source_name: inner.source_name.clone(),
            partition,
            offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poller_sleeps_while_idle_polls_while_sends_are_in_flight_and_stops() {
        let shared = Arc::new(Shared::default());
        // Idle: one zero-length poll per IDLE_POLL, not a busy wait.
        let started = Instant::now();
        assert_eq!(shared.next_poll(), Some(Duration::ZERO));
        assert!(started.elapsed() >= IDLE_POLL - Duration::from_millis(50));
        // A send in flight wakes the thread at once and keeps it polling.
        let waker = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                // Only once the poller is asleep: a send that came first would not prove it
                // is woken.
                while !shared.lock().waiting {
                    std::thread::yield_now();
                }
                shared.started();
            })
        };
        let started = Instant::now();
        assert_eq!(shared.next_poll(), Some(BUSY_POLL));
        assert!(started.elapsed() < IDLE_POLL / 2, "{:?}", started.elapsed());
        waker.join().unwrap();
        assert_eq!(shared.next_poll(), Some(BUSY_POLL));
        // Stopping with a report outstanding keeps polling until it is in.
        shared.stop();
        assert_eq!(shared.next_poll(), Some(BUSY_POLL));
        shared.finished();
        assert_eq!(shared.next_poll(), None);
    }
}
