//! Kafka helpers for the end-to-end tests: a real broker (tansu, started by `.ci/run`) at
//! `HBIDX_TEST_KAFKA` (default 127.0.0.1:9092), topics created through the admin API, and
//! producers.
//!
//! tansu's in-memory storage loses messages when a fetch starts in the middle of a produced
//! batch (REFERENCE.md). Tests that restart or seek produce with one message per batch
//! ([`Producer::exact`]); tests that consume once from the start may batch ([`Producer::fast`]).

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};

pub fn brokers() -> String {
    std::env::var("HBIDX_TEST_KAFKA").unwrap_or_else(|_| "127.0.0.1:9092".to_string())
}

/// A topic name no other test (or earlier run against the same broker) uses.
pub fn unique_topic(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// Creates a topic on the test broker; the broker doesn't auto-create them.
pub fn create_topic(name: &str, partitions: i32) {
    create_topic_on(&brokers(), name, partitions)
}

/// Creates a topic on the broker at `brokers`.
pub fn create_topic_on(brokers: &str, name: &str, partitions: i32) {
    create_topic_with(brokers, name, partitions, &[])
}

/// Creates a topic on the broker at `brokers` with topic configs (`retention.ms` …).
pub fn create_topic_with(brokers: &str, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("admin client");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let results = runtime
        .block_on(admin.create_topics(
            &[configs.iter().fold(
                NewTopic::new(name, partitions, TopicReplication::Fixed(1)),
                |topic, (key, value)| topic.set(key, value),
            )],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        ))
        .unwrap_or_else(|err| {
            panic!("create topic {name} (is the broker at {brokers} running?): {err}")
        });
    for result in results {
        result.unwrap_or_else(|(topic, err)| panic!("create topic {topic}: {err}"));
    }
}

pub struct Producer {
    inner: BaseProducer,
    topic: String,
}

impl Producer {
    /// One message per produced batch: exact resume and lag on tansu.
    pub fn exact(topic: &str) -> Self {
        Self::with(topic, &[("batch.num.messages", "1"), ("linger.ms", "0")])
    }

    /// Normal batching, for data consumed once from the start.
    pub fn fast(topic: &str) -> Self {
        Self::with(topic, &[("linger.ms", "5")])
    }

    fn with(topic: &str, settings: &[(&str, &str)]) -> Self {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", brokers())
            .set("queue.buffering.max.messages", "1000000")
            .set("acks", "all");
        for (key, value) in settings {
            config.set(*key, *value);
        }
        Self {
            inner: config.create().expect("producer"),
            topic: topic.to_string(),
        }
    }

    /// Queues one message keyed by `key` (so one row's events stay in order in one partition).
    pub fn send(&self, key: &[u8], payload: &[u8]) {
        loop {
            match self
                .inner
                .send(BaseRecord::to(&self.topic).key(key).payload(payload))
            {
                Ok(()) => return,
                Err((err, _)) => {
                    // Queue full: let deliveries drain, then retry.
                    if err.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
                    {
                        self.inner.poll(Duration::from_millis(10));
                    } else {
                        panic!("produce: {err}");
                    }
                }
            }
            self.inner.poll(Duration::ZERO);
        }
    }

    /// Waits until every queued message is acknowledged.
    pub fn flush(&self) {
        self.inner
            .flush(Duration::from_secs(120))
            .expect("all messages acknowledged");
    }
}

/// A config file with the example `user` table (plus `extra_tables` copies of it under other
/// names) and the given `[[sources]]` text.
pub fn write_config(
    dir: &std::path::Path,
    extra_tables: &[&str],
    sources: &str,
) -> std::path::PathBuf {
    let example = include_str!("../../deploy/config/hbidx.toml");
    let mut text = example.to_string();
    for name in extra_tables {
        // The example's table section, renamed.
        text.push('\n');
        text.push_str(&example.replace("name = \"user\"", &format!("name = \"{name}\"")));
    }
    text.push('\n');
    text.push_str(sources);
    let path = dir.join("hbidx.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub fn json_source(topic: &str, table: &str, format: &str) -> String {
    format!(
        "[[sources]]\nkind = \"kafka\"\nbrokers = \"{}\"\ntopic = \"{topic}\"\nformat = \"{format}\"\ntable = \"{table}\"\n",
        brokers()
    )
}
