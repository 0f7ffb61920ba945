//! The Kafka source (rdkafka) and the dead-letter file. The write-through publisher is in
//! [`crate::publisher`].
//!
//! Positions: the source of truth is the checkpoint in the tantivy commit payload, one entry per
//! partition under the source name `kafka:<topic>`. Kafka's committed offsets are only a hint
//! written after each index commit, so that ordinary lag tools (kafka-consumer-groups) work; they
//! are never read back. On assignment every partition is positioned explicitly: just after its
//! checkpoint, or, with no checkpoint in this index, at the configured start (earliest by
//! default) — never at another index's committed offset.
//!
//! Replica model: each hbidx instance consumes with its own group (`hbidx-<instance>-<table>`),
//! so it gets every partition. Without `[cluster]` it builds a full index. With it, the instance
//! indexes one shard, a rowkey range ([`KafkaSource::with_own_range`]), and still reads every
//! partition: HBase replication partitions the topic by its own rules, not by our shards. Other
//! shards' events are skipped like dead letters are, as position-only events, so the
//! checkpoint moves past them and exactly-once is unchanged. A Kafka Proxy event is skipped
//! from its rowkey alone ([`proxy_rowkey`]: a walk over the datum, no decode); an hbidx JSON
//! event's rowkey may have to be computed from its natural key by the table's codec, so it is
//! decoded first and skipped after.
//!
//! Everything here blocks and runs on the table's indexer thread (polling, on its prefetch
//! thread).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hbidx_schema::config::{KeyRange, TableConfig};
use hbidx_schema::model::{ChangeEvent, Mutation};
use hbidx_store::{lock, now_ms};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::checkpoint::Checkpoint;
use crate::error::{IndexerError, Result};
use crate::formats::{Decoded, EventFormat, ProxyDecoded, decode_json, decode_proxy, proxy_rowkey};
use crate::source::{CommitBarrier, PartitionReport, Source};

pub use hbidx_schema::config::{KafkaSourceConfig, StartPolicy};

/// librdkafka's settings for a client of `source`: its brokers and its pass-through properties.
pub(crate) fn client_config(source: &KafkaSourceConfig) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &source.brokers);
    for (key, value) in &source.properties {
        config.set(key, value);
    }
    config
}

/// [`client_config`] for a consumer: with the prefetch queue bounded. (A producer warns about
/// the consumer-only property, so it is not in the common part.)
pub(crate) fn consumer_config(source: &KafkaSourceConfig) -> ClientConfig {
    let mut config = client_config(source);
    if let Some(kbytes) = source.prefetch_kbytes
        && !source.properties.contains_key("queued.max.messages.kbytes")
    {
        config.set("queued.max.messages.kbytes", kbytes.to_string());
    }
    config
}

pub(crate) fn kafka_error(source_name: &str, err: impl std::fmt::Display) -> IndexerError {
    IndexerError::Source {
        source_name: source_name.to_string(),
        reason: err.to_string(),
    }
}

/// Where the source is in each partition.
struct Positions {
    start: StartPolicy,
    /// Last offset handed to the indexer, per partition.
    returned: Mutex<BTreeMap<i32, i64>>,
    /// Last offset covered by an index commit, per partition (the Kafka commit hint).
    committed: Mutex<BTreeMap<i32, i64>>,
}

fn watermark_client(config: &KafkaSourceConfig, name: &str) -> Result<BaseConsumer> {
    client_config(config)
        .set("group.id", "hbidx-watermarks")
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|err| kafka_error(name, err))
}

fn commit_list(topic: &str, positions: &BTreeMap<i32, i64>) -> Option<TopicPartitionList> {
    if positions.is_empty() {
        return None;
    }
    let mut tpl = TopicPartitionList::new();
    for (partition, offset) in positions {
        // Kafka's convention: the committed offset is the next one to read.
        tpl.add_partition_offset(topic, *partition, Offset::Offset(offset + 1))
            .ok()?;
    }
    Some(tpl)
}

/// Undecodable messages, appended as JSON lines to `<dir>/<table>.jsonl` with the reason,
/// topic, partition and offset, and the raw payload in base64. Replaying after a crash may
/// append a message twice (at-least-once), never lose one.
///
/// The payloads are the producer's bytes, personal data and blind fields' plaintext included:
/// the files are created readable by hbidx's user only (0600, in a 0700 directory). Anyone who
/// can produce to the topic can send undecodable messages, so the files are capped at
/// `max_bytes` (`[[sources]] dead_letter_max_mb`): at half of it the current file is renamed to
/// `<table>.1.jsonl` (replacing the one before, whose records are counted in
/// `hbidx_dead_letters_dropped_total`) and a new one is started.
pub struct DeadLetterFile {
    path: PathBuf,
    table: String,
    max_bytes: u64,
    file: Option<File>,
    /// Bytes in the current file.
    len: u64,
    /// What [`DeadLetterFile::barrier`] syncs, shared with the indexer thread.
    unsynced: Arc<Mutex<Unsynced>>,
}

/// Dead letters written since the last sync: the current file (a second handle on it) when it
/// has unsynced lines, and the directory when a file was created or renamed in it.
#[derive(Debug, Default)]
struct Unsynced {
    file: Option<File>,
    dir: Option<PathBuf>,
}

impl DeadLetterFile {
    pub fn new(dir: &Path, table: &str, max_bytes: u64) -> Self {
        Self {
            path: dir.join(format!("{table}.jsonl")),
            table: table.to_string(),
            max_bytes,
            file: None,
            len: 0,
            unsynced: Arc::default(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes every dead letter written so far durable: the source's commit barrier, so that no
    /// index commit moves the checkpoint past an event whose dead letter a power cut could
    /// still take. A no-op when nothing was written since the last call.
    pub fn barrier(&self) -> impl Fn() -> std::io::Result<()> + Send + Sync + 'static {
        let unsynced = self.unsynced.clone();
        move || {
            let mut unsynced = lock(&unsynced);
            if let Some(file) = &unsynced.file {
                file.sync_data()?;
            }
            if let Some(dir) = &unsynced.dir {
                File::open(dir)?.sync_all()?;
            }
            *unsynced = Unsynced::default();
            Ok(())
        }
    }

    /// Where the current file goes when it is full.
    pub fn rotated_path(&self) -> PathBuf {
        self.path.with_extension("1.jsonl")
    }

    fn open(&mut self) -> std::io::Result<()> {
        if let Some(dir) = self.path.parent() {
            create_private_dir(dir)?;
        }
        let mut options = OpenOptions::new();
        options.create(true).append(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(&self.path)?;
        // The mode given above applies only to a file this creates: one left by an older
        // version, or restored from a backup, is made private too.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        self.len = file.metadata()?.len();
        let mut unsynced = lock(&self.unsynced);
        unsynced.file = None;
        unsynced.dir = self.path.parent().map(Path::to_path_buf);
        drop(unsynced);
        self.file = Some(file);
        Ok(())
    }

    /// Renames the current file over the rotated one; counts the records that drops.
    fn rotate(&mut self) -> std::io::Result<()> {
        self.file = None;
        let rotated = self.rotated_path();
        let dropped = count_lines(&rotated).unwrap_or(0);
        std::fs::rename(&self.path, &rotated)?;
        if dropped > 0 {
            metrics::counter!("hbidx_dead_letters_dropped_total", "table" => self.table.clone())
                .increment(dropped);
            tracing::warn!(table = %self.table, dropped, max_bytes = self.max_bytes, "dead-letter files at their cap: the oldest records were dropped");
        }
        self.open()
    }

    fn write(&mut self, record: &serde_json::Value) -> std::io::Result<()> {
        if self.file.is_none() {
            self.open()?;
        }
        let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
        line.push(b'\n');
        if self.len > 0 && self.len + line.len() as u64 > self.max_bytes / 2 {
            self.rotate()?;
        }
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        file.write_all(&line)?;
        file.flush()?;
        self.len += line.len() as u64;
        let mut unsynced = lock(&self.unsynced);
        if unsynced.file.is_none() {
            unsynced.file = Some(file.try_clone()?);
        }
        Ok(())
    }
}

/// Creates `dir` (and its parents) readable by this user only, where this creates it.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    // Durably: a dead letter synced into a directory whose name a power cut takes is lost.
    hbidx_store::durable::create_dir_all(dir, Some(0o700))?;
    // As for the files: an existing directory is made private too.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Lines in the file at `path` (0 when there is none).
fn count_lines(path: &Path) -> std::io::Result<u64> {
    use std::io::Read;
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(err),
    };
    let mut buf = vec![0u8; 64 * 1024];
    let mut lines = 0u64;
    loop {
        let read = file.read(&mut buf)?;
        if read == 0 {
            return Ok(lines);
        }
        lines += buf[..read].iter().filter(|&&b| b == b'\n').count() as u64;
    }
}

/// Per-partition counters the source keeps for the status endpoint.
#[derive(Debug, Default, Clone)]
struct PartitionCounters {
    dead_letters: u64,
    retention_lost: u64,
    /// The partition's oldest offset as last read for [`KafkaSource::check_retention_gap`], and
    /// when: re-read at most once a second.
    low_watermark: Option<(Instant, i64)>,
    other_table: u64,
    foreign_skipped: u64,
    last_event_ms: Option<i64>,
    high_watermark: Option<i64>,
}

fn dead_letter_counter(table: &str, source: &str) -> metrics::Counter {
    metrics::counter!(
        "hbidx_dead_letters_total",
        "table" => table.to_string(),
        "source" => source.to_string(),
    )
}

pub struct KafkaSource {
    name: String,
    config: KafkaSourceConfig,
    table: Arc<TableConfig>,
    consumer: BaseConsumer,
    /// A second connection, only for watermark queries: on the consumer's own connection they
    /// queue behind the long-polling fetch and time out.
    watermarks: BaseConsumer,
    positions: Arc<Positions>,
    dead_letters: DeadLetterFile,
    counters: BTreeMap<i32, PartitionCounters>,
    watermarks_at: Option<Instant>,
    /// The payload being decoded, copied out of the message so the consumer is free again;
    /// kept between messages so the copy needs no allocation.
    scratch: Vec<u8>,
    /// A reindex replay: partitions assigned directly from the beginning, no consumer group,
    /// no offset hints.
    replay: bool,
    /// With `[cluster]`: the rowkeys of this instance's shard; events for other rows are
    /// skipped. `None`: every row.
    own_range: Option<KeyRange>,
    /// `hbidx_indexer_foreign_skipped_total` (live sources of a shard only), and the skips of
    /// the current poll not yet added to it: one update per poll, not one per event.
    foreign_counter: Option<metrics::Counter>,
    foreign_in_poll: u64,
    /// When the topic's partitions were last looked up (`discover_partitions`).
    discovered_at: Option<Instant>,
    /// The topic was looked up and had no partitions (said once, until it has some).
    said_no_partitions: bool,
}

/// How often a live source looks for partitions added to its topic.
const DISCOVER_EVERY: Duration = Duration::from_secs(10);

/// Per partition, the high watermark a replay must reach (offset of the next message).
pub type ReplayTargets = BTreeMap<i32, i64>;

impl KafkaSource {
    /// A source that replays the whole topic from the earliest offset, for building a shadow
    /// index (`hbidx reindex --from-kafka`). Returns it with the high watermarks at the start:
    /// once the index covers them, the shadow has caught up with the topic as it was then.
    pub fn replay(
        config: KafkaSourceConfig,
        table: Arc<TableConfig>,
        dead_letters: DeadLetterFile,
    ) -> Result<(Self, ReplayTargets)> {
        let name = config.source_name();
        let positions = Arc::new(Positions {
            start: StartPolicy::Earliest,
            returned: Mutex::new(BTreeMap::new()),
            committed: Mutex::new(BTreeMap::new()),
        });
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let mut client = consumer_config(&config);
        client
            .set(
                "group.id",
                format!("hbidx-reindex-{}-{nanos}", config.table),
            )
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false");
        let consumer: BaseConsumer = client.create().map_err(|err| kafka_error(&name, err))?;
        let timeout = Duration::from_secs(10);
        let metadata = consumer
            .fetch_metadata(Some(&config.topic), timeout)
            .map_err(|err| kafka_error(&name, err))?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|t| t.name() == config.topic)
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        if partitions.is_empty() {
            return Err(kafka_error(
                &name,
                "the topic has no partitions (does it exist?)",
            ));
        }
        let mut targets = ReplayTargets::new();
        let mut assignment = TopicPartitionList::new();
        for partition in partitions {
            let (_, high) = consumer
                .fetch_watermarks(&config.topic, partition, timeout)
                .map_err(|err| kafka_error(&name, err))?;
            targets.insert(partition, high);
            assignment
                .add_partition_offset(&config.topic, partition, Offset::Beginning)
                .map_err(|err| kafka_error(&name, err))?;
        }
        consumer
            .assign(&assignment)
            .map_err(|err| kafka_error(&name, err))?;
        let source = Self::assemble(name, config, table, consumer, positions, dead_letters, true)?;
        Ok((source, targets))
    }

    /// Creates the consumer. Nothing is assigned or fetched until the first poll.
    pub fn new(
        config: KafkaSourceConfig,
        table: Arc<TableConfig>,
        group_id: &str,
        dead_letters: DeadLetterFile,
    ) -> Result<Self> {
        let name = config.source_name();
        let positions = Arc::new(Positions {
            start: config.start,
            returned: Mutex::new(BTreeMap::new()),
            committed: Mutex::new(BTreeMap::new()),
        });
        let mut client = consumer_config(&config);
        client
            // The group only names where the offset hints for lag tools go: partitions are
            // assigned by hand (`discover_partitions`), since every instance reads every
            // partition from its own index checkpoint anyway. No group membership means no
            // rebalance, no session to time out and no coordinator to wait for after a crash
            // or a broker restart.
            .set("group.id", group_id)
            // How long a fetch waits for new data. A broker answers early when data arrives,
            // but not every Kafka-protocol broker does (tansu waits the full time), and this
            // bound is what an idle table's produce→searchable latency pays on top of the
            // commit interval.
            .set("fetch.wait.max.ms", "50")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false")
            .set(
                "auto.offset.reset",
                match config.start {
                    StartPolicy::Earliest => "earliest",
                    StartPolicy::Latest => "latest",
                },
            );
        let consumer: BaseConsumer = client.create().map_err(|err| kafka_error(&name, err))?;
        Self::assemble(
            name,
            config,
            table,
            consumer,
            positions,
            dead_letters,
            false,
        )
    }

    fn assemble(
        name: String,
        config: KafkaSourceConfig,
        table: Arc<TableConfig>,
        consumer: BaseConsumer,
        positions: Arc<Positions>,
        dead_letters: DeadLetterFile,
        replay: bool,
    ) -> Result<Self> {
        let watermarks = watermark_client(&config, &name)?;
        if !replay {
            // Exported at 0 from the start, so `rate()` and "no dead letters" both work before
            // the first one.
            dead_letter_counter(&config.table, &name).increment(0);
            metrics::counter!(
                "hbidx_source_retention_lost_events_total",
                "table" => config.table.clone(),
                "source" => name.clone(),
            )
            .increment(0);
        }
        Ok(Self {
            name,
            config,
            table,
            consumer,
            watermarks,
            positions,
            dead_letters,
            counters: BTreeMap::new(),
            watermarks_at: None,
            scratch: Vec::new(),
            replay,
            own_range: None,
            foreign_counter: None,
            foreign_in_poll: 0,
            discovered_at: None,
            said_no_partitions: false,
        })
    }

    /// Assigns the topic's partitions that aren't assigned yet, each after this index's
    /// position in it (or at `start`). Looked up at once while none is known (a broker still
    /// down at start), then every [`DISCOVER_EVERY`] for partitions added to the topic. A
    /// replay was assigned every partition when it was made.
    fn discover_partitions(&mut self) {
        if self.replay {
            return;
        }
        let assigned = match self.consumer.assignment() {
            Ok(list) => list,
            Err(err) => {
                tracing::warn!(source = %self.name, error = %err, "cannot read the assignment");
                return;
            }
        };
        let assigned: Vec<i32> = assigned
            .elements_for_topic(&self.config.topic)
            .iter()
            .map(|e| e.partition())
            .collect();
        let every = if assigned.is_empty() {
            Duration::from_secs(1)
        } else {
            DISCOVER_EVERY
        };
        if self.discovered_at.is_some_and(|at| at.elapsed() < every) {
            return;
        }
        self.discovered_at = Some(Instant::now());
        // On the watermark connection: the consumer's own queues behind its fetches.
        let metadata = match self
            .watermarks
            .fetch_metadata(Some(&self.config.topic), Duration::from_secs(1))
        {
            Ok(metadata) => metadata,
            Err(err) => {
                if assigned.is_empty() {
                    tracing::warn!(source = %self.name, error = %err, "cannot list the topic's partitions yet; retrying");
                }
                return;
            }
        };
        let returned = lock(&self.positions.returned).clone();
        let mut added = TopicPartitionList::new();
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|t| t.name() == self.config.topic)
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        if partitions.is_empty() && assigned.is_empty() && !self.said_no_partitions {
            // Once: an operator who started hbidx before creating the topic sees why nothing
            // is indexed yet; the lookup is repeated every second.
            self.said_no_partitions = true;
            tracing::warn!(source = %self.name, topic = %self.config.topic, "the topic has no partitions yet (does it exist?); looking again every second");
        }
        for partition in partitions.into_iter().filter(|p| !assigned.contains(p)) {
            let offset = match returned.get(&partition) {
                Some(offset) => Offset::Offset(offset + 1),
                None => match self.positions.start {
                    StartPolicy::Earliest => Offset::Beginning,
                    StartPolicy::Latest => Offset::End,
                },
            };
            if let Err(err) = added.add_partition_offset(&self.config.topic, partition, offset) {
                tracing::error!(source = %self.name, partition, error = %err, "cannot position a partition");
            }
        }
        if added.count() == 0 {
            return;
        }
        match self.consumer.incremental_assign(&added) {
            Ok(()) => {
                tracing::info!(source = %self.name, partitions = added.count(), "partitions assigned")
            }
            Err(err) => {
                tracing::error!(source = %self.name, error = %err, "assign failed; retrying")
            }
        }
    }

    /// Offsets jumped from `last` to `next` in `partition`. Offsets have gaps of their own
    /// (transaction markers, compacted topics), so a gap alone says nothing; a gap that starts
    /// below the partition's oldest offset does: retention deleted events this index never
    /// read (hbidx was stopped, or behind, for longer than the topic keeps events), and the
    /// consumer resumed at the oldest one left. Their writes reach the index by no path, so
    /// say so loudly and count them: `verify --full --repair` brings the rows back in line.
    /// Checked on the watermark connection only when offsets jump, and at most once a second
    /// per partition: a transactional producer leaves a gap (its commit marker) after every
    /// transaction, and those must not cost a broker round trip each. Between two reads the
    /// last one stands; the oldest offset only grows, so a stale one can only undercount.
    fn check_retention_gap(&mut self, partition: i32, last: i64, next: i64) {
        let cached = self
            .counters
            .get(&partition)
            .and_then(|c| c.low_watermark)
            .filter(|(at, _)| at.elapsed() < Duration::from_secs(1));
        let low = match cached {
            Some((_, low)) => low,
            None => match self.watermarks.fetch_watermarks(
                &self.config.topic,
                partition,
                Duration::from_secs(2),
            ) {
                Ok((low, _)) => {
                    self.counters.entry(partition).or_default().low_watermark =
                        Some((Instant::now(), low));
                    low
                }
                Err(err) => {
                    tracing::warn!(source = %self.name, partition, error = %err, "offsets jumped; cannot read the partition's oldest offset to tell whether retention deleted unread events");
                    return;
                }
            },
        };
        let lost_until = low.min(next);
        if lost_until <= last + 1 {
            return;
        }
        let lost = (lost_until - last - 1) as u64;
        self.counters.entry(partition).or_default().retention_lost += lost;
        metrics::counter!(
            "hbidx_source_retention_lost_events_total",
            "table" => self.config.table.clone(),
            "source" => self.name.clone(),
        )
        .increment(lost);
        tracing::error!(
            source = %self.name,
            table = %self.config.table,
            partition,
            first_lost_offset = last + 1,
            last_lost_offset = lost_until - 1,
            events = lost,
            "the topic's retention deleted events this index had not read; their writes are missing from the index until `hbidx verify {} --full --repair` (or a reindex from the store)",
            self.config.table
        );
    }

    /// Indexes only the rows of `range` (this instance's shard of the table, `[cluster]`);
    /// `None` keeps every row. Events for other rows move the checkpoint and nothing else.
    pub fn with_own_range(mut self, range: Option<KeyRange>) -> Self {
        // Like dead letters, a replay's skips were counted by the live consumer already.
        self.foreign_counter = match (&range, self.replay) {
            (Some(_), false) => {
                let counter = crate::pipeline::foreign_skipped_counter(&self.config.table);
                counter.increment(0);
                Some(counter)
            }
            _ => None,
        };
        self.own_range = range;
        self
    }

    /// Whether `rowkey` belongs to another shard.
    fn is_foreign(&self, rowkey: &[u8]) -> bool {
        self.own_range
            .as_ref()
            .is_some_and(|range| !range.contains(rowkey))
    }

    fn skip_foreign(&mut self, partition: i32, offset: i64, out: &mut Vec<ChangeEvent>) {
        self.counters.entry(partition).or_default().foreign_skipped += 1;
        self.foreign_in_poll += 1;
        out.push(self.skip_event(partition, offset));
    }

    fn dead_letter(&mut self, partition: i32, offset: i64, payload: Option<&[u8]>, reason: &str) {
        self.counters.entry(partition).or_default().dead_letters += 1;
        // A replay (reindex) meets the same bad messages again; they were counted the first
        // time, so only the live consumer counts.
        if !self.replay {
            dead_letter_counter(&self.config.table, &self.name).increment(1);
        }
        // The reason names what is wrong without quoting values, so it may be logged; the
        // payload (which may hold personal data) goes only to the dead-letter file.
        tracing::warn!(source = %self.name, partition, offset, reason, "event sent to dead letters");
        let record = serde_json::json!({
            "at_ms": now_ms(),
            "source": self.name,
            "topic": self.config.topic,
            "table": self.config.table,
            "partition": partition,
            "offset": offset,
            "reason": reason,
            "payload_b64": payload.map(|p| B64.encode(p)),
        });
        if let Err(err) = self.dead_letters.write(&record) {
            tracing::error!(source = %self.name, path = %self.dead_letters.path().display(), error = %err, "cannot write the dead-letter file");
        }
    }

    fn skip_event(&self, partition: i32, offset: i64) -> ChangeEvent {
        ChangeEvent {
            partition,
            offset,
            mutation: Mutation {
                table: self.table.name.clone(),
                rowkey: Vec::new(),
                ops: Vec::new(),
            },
        }
    }

    /// Turns one message into an event (or a skip marker) and appends it to `out`.
    fn take_message(
        &mut self,
        partition: i32,
        offset: i64,
        timestamp: Option<i64>,
        payload: Option<&[u8]>,
        out: &mut Vec<ChangeEvent>,
    ) {
        let counters = self.counters.entry(partition).or_default();
        counters.last_event_ms = timestamp.or(counters.last_event_ms);
        let Some(payload) = payload.filter(|p| !p.is_empty()) else {
            self.dead_letter(partition, offset, None, "empty message (no payload)");
            out.push(self.skip_event(partition, offset));
            return;
        };
        match self.config.format {
            // The rowkey may come from the natural key through the table's codec (an md5
            // prefix, a salt …): only the decode knows it.
            EventFormat::Json => match decode_json(&self.table, payload, timestamp) {
                Ok(Decoded::Mutation(mutation)) if self.is_foreign(&mutation.rowkey) => {
                    self.skip_foreign(partition, offset, out);
                }
                Ok(Decoded::Mutation(mutation)) => out.push(ChangeEvent {
                    partition,
                    offset,
                    mutation,
                }),
                Ok(Decoded::OtherTable(_)) => {
                    self.counters.entry(partition).or_default().other_table += 1;
                    out.push(self.skip_event(partition, offset));
                }
                Err(err) => {
                    self.dead_letter(partition, offset, Some(payload), &err.0);
                    out.push(self.skip_event(partition, offset));
                }
            },
            // Another shard's event is skipped on its peeked rowkey, before any decode. Only a
            // well-formed event of this table is skipped that way; anything else takes the
            // decode, which counts another table's event or dead-letters a malformed one.
            EventFormat::HbaseKafkaProxy
                if self.own_range.is_some()
                    && proxy_rowkey(&self.table, payload)
                        .is_some_and(|rowkey| self.is_foreign(rowkey)) =>
            {
                self.skip_foreign(partition, offset, out);
            }
            EventFormat::HbaseKafkaProxy => match decode_proxy(&self.table, payload) {
                Ok(ProxyDecoded::Cell(cell)) => {
                    // The proxy sends one message per cell; consecutive cells of one row in a
                    // partition become one mutation, so the row's document is rebuilt once.
                    if let Some(last) = out.last_mut()
                        && last.partition == partition
                        && !last.mutation.ops.is_empty()
                        && last.mutation.rowkey == cell.rowkey
                    {
                        last.mutation.ops.push(cell.op);
                        last.offset = offset;
                    } else {
                        out.push(ChangeEvent {
                            partition,
                            offset,
                            mutation: Mutation {
                                table: self.table.name.clone(),
                                rowkey: cell.rowkey,
                                ops: vec![cell.op],
                            },
                        });
                    }
                }
                Ok(ProxyDecoded::OtherTable(_)) => {
                    self.counters.entry(partition).or_default().other_table += 1;
                    out.push(self.skip_event(partition, offset));
                }
                Err(err) => {
                    self.dead_letter(partition, offset, Some(payload), &err.0);
                    out.push(self.skip_event(partition, offset));
                }
            },
        }
    }
}

impl Source for KafkaSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn seek(&mut self, checkpoint: &Checkpoint) -> Result<()> {
        let positions = checkpoint.partitions(&self.name);
        *lock(&self.positions.returned) = positions.clone();
        *lock(&self.positions.committed) = positions.clone();
        // Partitions already assigned are moved now; later assignments read `returned`.
        let assigned = self
            .consumer
            .assignment()
            .map_err(|err| kafka_error(&self.name, err))?;
        for element in assigned.elements_for_topic(&self.config.topic) {
            let partition = element.partition();
            let offset = match positions.get(&partition) {
                Some(offset) => Offset::Offset(offset + 1),
                // A replay was assigned at the beginning already.
                None if self.replay => continue,
                None => match self.config.start {
                    StartPolicy::Earliest => Offset::Beginning,
                    StartPolicy::Latest => Offset::End,
                },
            };
            self.consumer
                .seek(
                    &self.config.topic,
                    partition,
                    offset,
                    Duration::from_secs(10),
                )
                .map_err(|err| kafka_error(&self.name, err))?;
        }
        Ok(())
    }

    fn poll(&mut self, max: usize, timeout: Duration) -> Result<Vec<ChangeEvent>> {
        self.discover_partitions();
        let deadline = Instant::now() + timeout;
        let mut out: Vec<ChangeEvent> = Vec::new();
        let mut taken = 0usize;
        while out.len() < max {
            // Wait only for the first message; after that take what is already buffered.
            // Whole milliseconds, rounded up: rdkafka hands librdkafka the wait in whole
            // milliseconds rounded down, then polls again with the rest, and a rest under 1 ms
            // becomes a 0 ms poll in a loop (~1 ms of spinning each poll: ~1% of a core idle).
            let wait = if out.is_empty() {
                let left = deadline.saturating_duration_since(Instant::now());
                Duration::from_millis(left.as_micros().div_ceil(1000) as u64)
            } else {
                Duration::ZERO
            };
            let message = match self.consumer.poll(wait) {
                None => break,
                Some(Ok(message)) => message,
                Some(Err(err)) => {
                    if out.is_empty() {
                        return Err(kafka_error(&self.name, err));
                    }
                    tracing::warn!(source = %self.name, error = %err, "kafka poll error");
                    break;
                }
            };
            if message.topic() != self.config.topic {
                continue;
            }
            let partition = message.partition();
            let offset = message.offset();
            let previous = {
                let mut returned = lock(&self.positions.returned);
                // A message at or below what was already handed over is a redelivery (after a
                // seek); the index has it, so drop it.
                if returned.get(&partition).is_some_and(|last| offset <= *last) {
                    continue;
                }
                returned.insert(partition, offset)
            };
            let gap_after = previous.filter(|last| offset > last + 1 && !self.replay);
            let timestamp = message.timestamp().to_millis();
            let mut payload = std::mem::take(&mut self.scratch);
            payload.clear();
            let has_payload = message.payload().is_some_and(|bytes| {
                payload.extend_from_slice(bytes);
                true
            });
            drop(message);
            if let Some(last) = gap_after {
                self.check_retention_gap(partition, last, offset);
            }
            self.take_message(
                partition,
                offset,
                timestamp,
                has_payload.then_some(payload.as_slice()),
                &mut out,
            );
            self.scratch = payload;
            // The clock is read every 64 messages: a read per message was ~1% of the CPU of a
            // catch-up on this VM's clock source.
            taken += 1;
            if taken.is_multiple_of(64) && Instant::now() >= deadline && !out.is_empty() {
                break;
            }
        }
        if self.foreign_in_poll > 0 {
            if let Some(counter) = &self.foreign_counter {
                counter.increment(self.foreign_in_poll);
            }
            self.foreign_in_poll = 0;
        }
        Ok(out)
    }

    fn committed(&mut self, checkpoint: &Checkpoint) {
        if self.replay {
            return;
        }
        let mut committed = lock(&self.positions.committed);
        committed.extend(checkpoint.partitions(&self.name));
        if let Some(hint) = commit_list(&self.config.topic, &committed)
            && let Err(err) = self.consumer.commit(&hint, CommitMode::Async)
        {
            tracing::debug!(source = %self.name, error = %err, "offset hint commit failed");
        }
    }

    /// Dead letters are synced before each index commit: the commit moves the checkpoint
    /// past their events, which are then never read again.
    fn commit_barrier(&self) -> Option<CommitBarrier> {
        let sync = self.dead_letters.barrier();
        let name = self.name.clone();
        Some(Arc::new(move || {
            sync().map_err(|err| IndexerError::Source {
                source_name: name.clone(),
                reason: format!("syncing the dead-letter file: {err}"),
            })
        }))
    }

    fn report(&mut self) -> Vec<PartitionReport> {
        let due = self
            .watermarks_at
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
        if due {
            self.watermarks_at = Some(Instant::now());
            if let Ok(assigned) = self.consumer.assignment() {
                for element in assigned.elements_for_topic(&self.config.topic) {
                    let partition = element.partition();
                    if let Ok((_, high)) = self.watermarks.fetch_watermarks(
                        &self.config.topic,
                        partition,
                        Duration::from_secs(2),
                    ) {
                        self.counters.entry(partition).or_default().high_watermark = Some(high);
                    }
                }
            }
        }
        self.counters
            .iter()
            .map(|(partition, c)| PartitionReport {
                partition: *partition,
                high_watermark: c.high_watermark,
                last_event_ms: c.last_event_ms,
                dead_letters: c.dead_letters,
                other_table: c.other_table,
                foreign_skipped: c.foreign_skipped,
                retention_lost: c.retention_lost,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use hbidx_schema::model::CellOp;

    use super::*;
    use crate::formats::{encode_json, encode_proxy};

    fn table() -> Arc<TableConfig> {
        let config = hbidx_schema::parse_config(hbidx_schema::EXAMPLE_CONFIG).unwrap();
        Arc::new(config.table("user").unwrap().clone())
    }

    /// A source whose consumer is never polled (creating one does not connect), fed messages
    /// by hand through `take_message`.
    fn source(format: EventFormat, dir: &Path, range: Option<KeyRange>) -> KafkaSource {
        let config = KafkaSourceConfig {
            brokers: "127.0.0.1:1".into(),
            topic: "t".into(),
            format,
            table: "user".into(),
            group_id: None,
            start: StartPolicy::Earliest,
            properties: BTreeMap::new(),
            prefetch_kbytes: None,
            dead_letter_max_bytes: 1 << 20,
        };
        KafkaSource::new(
            config,
            table(),
            "g",
            DeadLetterFile::new(dir, "user", 1 << 20),
        )
        .unwrap()
        .with_own_range(range)
    }

    fn put(rowkey: &[u8]) -> Mutation {
        Mutation {
            table: "user".into(),
            rowkey: rowkey.to_vec(),
            ops: vec![CellOp::Put {
                column: "info:phone".into(),
                ts: 1,
                value: b"13800138000".to_vec(),
            }],
        }
    }

    /// Rowkeys of the example table on either side of `boundary`.
    fn keys_around(boundary: &[u8]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let table = table();
        (0..40)
            .map(|i| table.rowkey.encode(&format!("u{i}")).unwrap())
            .partition(|rowkey| rowkey.as_slice() < boundary)
    }

    fn counters(source: &KafkaSource) -> PartitionReport {
        let c = source.counters.get(&0).cloned().unwrap_or_default();
        PartitionReport {
            partition: 0,
            dead_letters: c.dead_letters,
            other_table: c.other_table,
            foreign_skipped: c.foreign_skipped,
            ..PartitionReport::default()
        }
    }

    /// Both formats: another shard's rows become position-only events (the checkpoint moves
    /// past them), this shard's rows are handed over, and a garbled message is still a dead
    /// letter, not a skip.
    #[test]
    fn a_shard_skips_other_shards_rows_and_still_dead_letters_garbage() {
        let boundary = b"8".to_vec();
        let range = KeyRange {
            start: Vec::new(),
            stop: Some(boundary.clone()),
        };
        let (own, foreign) = keys_around(&boundary);
        assert!(!own.is_empty() && !foreign.is_empty());
        let table = table();
        for format in [EventFormat::HbaseKafkaProxy, EventFormat::Json] {
            let dir = tempfile::tempdir().unwrap();
            let mut source = source(format, dir.path(), Some(range.clone()));
            let encode = |rowkey: &[u8]| match format {
                EventFormat::Json => encode_json(&table, &put(rowkey)),
                EventFormat::HbaseKafkaProxy => {
                    encode_proxy("user", rowkey, &put(rowkey).ops[0]).unwrap()
                }
            };
            let mut messages: Vec<Vec<u8>> = own
                .iter()
                .zip(&foreign)
                .flat_map(|(a, b)| [encode(a), encode(b)])
                .collect();
            // A foreign row's event cut short: it can't be peeked, so it is a dead letter.
            let cut = encode(&foreign[0]);
            messages.push(cut[..cut.len() - 3].to_vec());
            let mut out = Vec::new();
            for (offset, payload) in messages.iter().enumerate() {
                source.take_message(0, offset as i64, Some(1), Some(payload), &mut out);
            }
            assert_eq!(
                out.len(),
                messages.len(),
                "{format:?}: one event per message"
            );
            let offsets: Vec<i64> = out.iter().map(|e| e.offset).collect();
            assert_eq!(offsets, (0..messages.len() as i64).collect::<Vec<_>>());
            let handed: Vec<&[u8]> = out
                .iter()
                .filter(|e| !e.mutation.ops.is_empty())
                .map(|e| e.mutation.rowkey.as_slice())
                .collect();
            let pairs = own.len().min(foreign.len());
            let expected: Vec<&[u8]> = own[..pairs].iter().map(Vec::as_slice).collect();
            assert_eq!(handed, expected, "{format:?}: only this shard's rows");
            let report = counters(&source);
            assert_eq!(report.foreign_skipped, pairs as u64, "{format:?}");
            assert_eq!(report.dead_letters, 1, "{format:?}");
            assert_eq!(source.foreign_in_poll, pairs as u64);
        }
    }

    /// Another table's event keeps counting as `other_table` with a shard, whatever its rowkey;
    /// without a shard every row is handed over.
    #[test]
    fn other_tables_and_unsharded_sources_are_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let range = KeyRange {
            start: b"8".to_vec(),
            stop: None,
        };
        let mut sharded = source(EventFormat::HbaseKafkaProxy, dir.path(), Some(range));
        let other = encode_proxy("orders", b"0000", &put(b"0000").ops[0]).unwrap();
        let mut out = Vec::new();
        sharded.take_message(0, 0, None, Some(&other), &mut out);
        let report = counters(&sharded);
        assert_eq!((report.other_table, report.foreign_skipped), (1, 0));

        let mut all = source(EventFormat::HbaseKafkaProxy, dir.path(), None);
        let mine = encode_proxy("user", b"0000", &put(b"0000").ops[0]).unwrap();
        let mut out = Vec::new();
        all.take_message(0, 0, None, Some(&mine), &mut out);
        assert_eq!(out[0].mutation.rowkey, b"0000");
        assert_eq!(counters(&all).foreign_skipped, 0);
    }
}
