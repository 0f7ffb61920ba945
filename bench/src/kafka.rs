//! The Kafka part of `hbidx bench --kafka BROKERS` (a real broker, e.g. tansu on loopback).
//!
//! 1. produce the people as hbidx JSON events to a fresh 4-partition topic (normal batching),
//!    generated and encoded as they are sent: what the broker takes in;
//! 2. consume the topic with a bare rdkafka consumer that does nothing with the messages: what
//!    the broker can hand out, the ceiling for any consumer on this machine;
//! 3. `serve`'s wiring with the topic as the table's source, timed from the first indexed event
//!    to the last: Kafka → decode → embedded store → tantivy, events/s;
//! 4. with the indexer idle, write-through style single events (publish, broker ack, consume,
//!    index, commit): produce→searchable p50/p99.
//!
//! The broker's own CPU time is read from /proc for a process named `tansu`, when there is one.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use hbidx_demo::{PersonColumns, demo_table};
use hbidx_indexer::CommitPolicy;
use hbidx_schema::config::{EventFormat, HbidxConfig, KafkaSourceConfig, StartPolicy};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use crate::bench::Row;
use crate::report::RssMonitor;
use hbidx_store::now_ms;

const PARTITIONS: i32 = 4;
/// Produced events awaiting their broker ack, at most.
const IN_FLIGHT: usize = 200_000;

/// CPU seconds (user + system) of the first process called `tansu`.
/// ", broker CPU 0.04s" for the CPU the broker used since `before`, or nothing.
fn broker_cpu_since(before: Option<f64>) -> String {
    broker_cpu_seconds()
        .zip(before)
        .map(|(after, before)| format!(", broker CPU {:.2}s", after - before))
        .unwrap_or_default()
}

/// Waits for the oldest produced event's broker ack.
async fn await_delivery(
    deliveries: &mut std::collections::VecDeque<rdkafka::producer::DeliveryFuture>,
) -> Result<()> {
    if let Some(delivery) = deliveries.pop_front() {
        delivery
            .await
            .context("producer dropped")?
            .map_err(|(err, _)| err)?;
    }
    Ok(())
}

fn broker_cpu_seconds() -> Option<f64> {
    let ticks = 100.0; // USER_HZ on Linux
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim() == "tansu" {
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let after_name = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = after_name.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            return Some((utime + stime) / ticks);
        }
    }
    None
}

/// `rows`: the bench's people (its seed's first `rows`), generated again here.
pub async fn run(
    config: &HbidxConfig,
    rows: usize,
    brokers: &str,
    data_dir: &Path,
    rss: &RssMonitor,
    report: &mut Vec<Row>,
) -> Result<()> {
    let table = demo_table(config)?.clone();
    let columns = PersonColumns::for_table(&table)?;
    let topic = format!("hbidx-bench-{}", now_ms());
    let n = rows;

    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    for result in admin
        .create_topics(
            &[NewTopic::new(
                &topic,
                PARTITIONS,
                TopicReplication::Fixed(1),
            )],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .with_context(|| format!("creating topic {topic} on {brokers}"))?
    {
        result.map_err(|(topic, err)| anyhow::anyhow!("creating topic {topic}: {err}"))?;
    }

    // 1. Produce.
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        // Big batches: tansu hands out about one produced batch per partition per fetch, so
        // small batches would make the consume side measure fetch round trips.
        .set("linger.ms", "100")
        .set("batch.num.messages", "100000")
        .set("batch.size", "16000000")
        .set("queue.buffering.max.messages", "1000000")
        .create()?;
    let ts = now_ms();
    let cpu_before_produce = broker_cpu_seconds();
    let started = Instant::now();
    // Acks are awaited oldest first once IN_FLIGHT are pending, so that neither the futures
    // nor rdkafka's queue grow with the table.
    let mut deliveries = std::collections::VecDeque::with_capacity(IN_FLIGHT);
    for people in crate::bench::people_batches(rows) {
        for person in &people {
            let mutation = columns.mutation(&table, person, ts)?;
            let payload = hbidx_indexer::encode_json(&table, &mutation);
            loop {
                if deliveries.len() >= IN_FLIGHT {
                    await_delivery(&mut deliveries).await?;
                }
                match producer.send_result(
                    FutureRecord::to(&topic)
                        .key(&mutation.rowkey)
                        .payload(&payload),
                ) {
                    Ok(future) => {
                        deliveries.push_back(future);
                        break;
                    }
                    Err((
                        rdkafka::error::KafkaError::MessageProduction(
                            rdkafka::types::RDKafkaErrorCode::QueueFull,
                        ),
                        _,
                    )) if !deliveries.is_empty() => await_delivery(&mut deliveries).await?,
                    Err((err, _)) => bail!("produce: {err}"),
                }
            }
        }
    }
    while !deliveries.is_empty() {
        await_delivery(&mut deliveries).await?;
    }
    let produce_secs = started.elapsed().as_secs_f64();
    let produce_cpu = broker_cpu_since(cpu_before_produce);
    // An idle rdkafka producer's polling thread still spins ~1 ms in every 100 ms (rdkafka
    // polls the sub-millisecond rest of its wait as 0 ms): not part of what is measured next.
    drop(producer);
    let rate = n as f64 / produce_secs;
    report.push(
        Row::new(
            "kafka: produce (broker ingest, linger 100 ms)",
            format!(
                "{rate:.0} events/s ({n} events generated, encoded and sent in {produce_secs:.2}s){produce_cpu}"
            ),
        )
        .value(rate, "events/s"),
    );

    // 2. Bare consume: the broker's ceiling.
    let topic_for_consume = topic.clone();
    let brokers_owned = brokers.to_string();
    let cpu_before = broker_cpu_seconds();
    let (consume_secs, consumed) = tokio::task::spawn_blocking(move || -> Result<(f64, usize)> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &brokers_owned)
            .set("group.id", "hbidx-bench-bare")
            .set("enable.auto.commit", "false")
            // tansu answers a fetch only when fetch.wait.max.ms is over (see kafka.rs).
            .set("fetch.wait.max.ms", "50")
            .create()?;
        let mut assignment = TopicPartitionList::new();
        for partition in 0..PARTITIONS {
            assignment.add_partition_offset(&topic_for_consume, partition, Offset::Beginning)?;
        }
        consumer.assign(&assignment)?;
        let started = Instant::now();
        let mut count = 0;
        while count < n && started.elapsed() < Duration::from_secs(600) {
            if let Some(message) = consumer.poll(Duration::from_millis(100)) {
                message?;
                count += 1;
            }
        }
        Ok((started.elapsed().as_secs_f64(), count))
    })
    .await??;
    let consume_cpu = broker_cpu_since(cpu_before);
    let rate = consumed as f64 / consume_secs;
    report.push(
        Row::new(
            "kafka: bare consume (no decode, no index)",
            format!("{rate:.0} events/s ({consumed} events in {consume_secs:.2}s){consume_cpu}"),
        )
        .value(rate, "events/s"),
    );

    // 3. Index from Kafka with serve's wiring.
    let mut kafka_config = config.clone();
    kafka_config.sources = vec![KafkaSourceConfig {
        brokers: brokers.to_owned(),
        topic: topic.clone(),
        format: EventFormat::Json,
        table: table.name.clone(),
        group_id: None,
        start: StartPolicy::Earliest,
        properties: Default::default(),
        prefetch_kbytes: None,
        dead_letter_max_bytes: hbidx_schema::config::DEFAULT_DEAD_LETTER_MAX_MB << 20,
    }];
    let kafka_dir = data_dir.join("kafka");
    // Nothing is served over HTTP here, so no API keys.
    let instance = hbidx_serve::open(
        &kafka_config,
        &kafka_dir,
        &CommitPolicy::default(),
        hbidx_query::auth::Auth::default(),
    )?;
    let runtime_table = instance
        .state
        .tables
        .get(&table.name)
        .context("table missing")?
        .clone();
    let source_name = format!("kafka:{topic}");
    let covered = |checkpoint: &hbidx_indexer::Checkpoint| -> usize {
        (0..PARTITIONS)
            .filter_map(|p| checkpoint.position(&source_name, p))
            .map(|offset| (offset + 1) as usize)
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(1800);
    // Timed from the first indexed event, so the consumer group join is not counted.
    let (first_at, first_events) = loop {
        let events = runtime_table
            .stats
            .events
            .load(std::sync::atomic::Ordering::Relaxed);
        if events > 0 {
            break (Instant::now(), events as usize);
        }
        if Instant::now() > deadline {
            bail!("the Kafka indexer never started");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let cpu_before = broker_cpu_seconds();
    let own_cpu_before = crate::bench::process_cpu_seconds();
    let mut indexed = runtime_table.indexed.clone();
    while covered(&indexed.borrow_and_update()) < n {
        if Instant::now() > deadline {
            bail!("Kafka indexing did not finish");
        }
        let _ = tokio::time::timeout(Duration::from_millis(100), indexed.changed()).await;
    }
    let index_secs = first_at.elapsed().as_secs_f64();
    let index_cpu = broker_cpu_since(cpu_before);
    let indexed_events = n - first_events.min(n);
    let own_cpu = crate::bench::process_cpu_seconds()
        .zip(own_cpu_before)
        .map(|(after, before)| after - before);
    let micros = own_cpu.map_or(f64::NAN, |cpu| cpu * 1e6 / indexed_events.max(1) as f64);
    let own_cpu = own_cpu
        .map(|cpu| format!(", CPU {cpu:.2}s = {micros:.1} µs/event"))
        .unwrap_or_default();
    let commits = crate::bench::commit_summary(&runtime_table.stats);
    let rate = indexed_events as f64 / index_secs;
    report.push(
        Row::new(
            "kafka → index throughput (decode, store, tantivy)",
            format!(
                "{rate:.0} events/s ({indexed_events} events in {index_secs:.2}s{own_cpu}{commits}){index_cpu}"
            ),
        )
        .value(rate, "events/s")
        .also("CPU", micros, "µs/event"),
    );
    report.extend(rss.phase_with_budget("kafka → index", instance.state.memory.as_ref()));

    // 4. Produce → searchable, one write at a time through the write-through publisher.
    let publisher = runtime_table
        .publisher
        .clone()
        .context("the Kafka table has no publisher")?;
    let mut latencies = Vec::new();
    for person in
        hbidx_demo::people::PeopleGen::starting_at(hbidx_demo::DEMO_SEED ^ 0xbe7c, n as u64)
            .take(200)
    {
        let mutation = columns.mutation(&table, &person, now_ms())?;
        let started = Instant::now();
        let published = publisher.publish(&mutation).await?;
        let mut indexed = runtime_table.indexed.clone();
        tokio::time::timeout(
            Duration::from_secs(30),
            indexed.wait_for(|cp| {
                cp.position(&published.source_name, published.partition)
                    .is_some_and(|at| at >= published.offset)
            }),
        )
        .await
        .context("a produced event did not become searchable")??;
        latencies.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let detail = format!("{} sequential writes, broker ack included", latencies.len());
    report.push(Row::latencies(
        "kafka produce → searchable latency",
        &mut latencies,
        &detail,
    ));
    instance.shutdown_indexers().await?;
    Ok(())
}
