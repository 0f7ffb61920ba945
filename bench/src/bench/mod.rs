//! `hbidx bench`: the numbers in docs/benchmarks.md (which says what each row measures).
//!
//! Benchmarks, not timed tests: nothing here asserts, it measures and prints. The people are
//! generated as they are written (no vector of the whole data set: the process measured is
//! the server), keeping only a uniform sample of their phones for the lookups. Phases:
//! 1. load N people into the embedded store (the change feed fills up; timed separately);
//! 2. reopen the store (fjall replays its journal; timed on its own row), then start the
//!    indexer on the full feed and time until it has committed everything (events/s through
//!    the change feed into tantivy);
//! 3. with the indexer idle, write single rows at a fixed rate and record how long each took to
//!    become searchable (the published index checkpoint covers its offset): p50/p99;
//! 4. index and store bytes per row;
//! 5. HTTP lookups by phone at fixed concurrency with `wrk` (Debian package) against the real
//!    service on loopback, keys spread evenly over the whole table: throughput and p50/p99;
//! 6. batch lookups of 1000 phones per call, a reindex by table scan (rows/s), a full verify
//!    (rows/s), and updates: a tenth of the rows get a new phone and name (events/s through
//!    the change feed, the indexer reading each row's previous state);
//! 7. a restart: everything closed, then the time from reopening the data dir to the first
//!    lookup served;
//! 8. unless `--no-thrift`, lookups and batch lookups again with the rows read over HBase
//!    Thrift1 (the gateway over this store, read through HbaseStore); with `--covered`, also
//!    lookups asking only for indexed and covered columns, answered from the index, beside the
//!    same ones read over Thrift1 (`consistency=store`), and what the covered columns add to
//!    the index.
//!
//! The process's RSS (anonymous and file-backed) is sampled all along: a row per phase with
//! the figure at its end and the peak during it.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hbidx_indexer::{CHANGE_FEED, CommitPolicy};
use hbidx_schema::config::Config;
use serde_json::json;

use crate::demo::{DEMO_SEED, PersonColumns, demo_table, now_ms};
use crate::people::{PeopleGen, Person};
pub(crate) use crate::report::Row;
use crate::report::{RssMonitor, UniformSample, WrkSummary};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Rows to load and index.
    #[arg(long, default_value_t = 200_000)]
    rows: usize,
    /// Single-row writes for the event→searchable latency.
    #[arg(long, default_value_t = 1000)]
    latency_writes: usize,
    /// Seconds of HTTP lookup load (0 skips it).
    #[arg(long, default_value_t = 10)]
    lookup_seconds: u64,
    /// Concurrent HTTP connections for the lookup load.
    #[arg(long, default_value_t = 64)]
    connections: u32,
    /// HTTP threads of the benchmarked server (default: `[server] workers`, else one per
    /// CPU).
    #[arg(long)]
    pub server_workers: Option<usize>,
    /// wrk threads.
    #[arg(long, default_value_t = 2)]
    wrk_threads: u32,
    /// Work directory (default: a fresh temporary directory, removed afterwards).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Also write the generated people as CSV (uid,name,phone,idcard,city) for comparisons.
    #[arg(long)]
    export_csv: Option<PathBuf>,
    /// Also measure Kafka → index with the broker at this address (e.g. 127.0.0.1:9092):
    /// produce rate, bare consume rate, indexing throughput, produce→searchable latency.
    #[arg(long)]
    kafka: Option<String>,
    /// Stop after indexing (and the Kafka part, with --kafka): no latency, lookup, reindex or
    /// Thrift phases, so a profiler attached to the run sees indexing only.
    #[arg(long)]
    indexing_only: bool,
    /// Skip the lookups with the rows read over HBase Thrift1 (shorter runs on big tables).
    #[arg(long, conflicts_with = "covered")]
    no_thrift: bool,
    /// Columns to cover in the benchmarked table (its `covered` list, e.g. `info:city`), and
    /// measure lookups that ask for them with the name: from the index, and over Thrift1.
    #[arg(long, value_delimiter = ',')]
    covered: Vec<String>,
    /// Also write the results here as JSON: an array of {"measure", "value", "unit", "text"},
    /// one element per number (scripts/scale.sh lines two runs up by `measure`).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The bench's people are written in batches of this many rows.
const BATCH: usize = 1000;
/// One row in this many gets new values in the updates phase.
const UPDATE_EVERY: u64 = 10;

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// User + system CPU seconds of this process, all threads (Linux `/proc/self/stat`).
pub(crate) fn process_cpu_seconds() -> Option<f64> {
    crate::report::stat_cpu_seconds("/proc/self/stat")
}

fn rss_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|line| line.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// The first `rows` people of the bench's seed, in batches, generated on a thread of their own
/// a few batches ahead of the consumer (and stopping when it goes away).
pub(crate) fn people_batches(rows: usize) -> std::sync::mpsc::IntoIter<Vec<Person>> {
    let (tx, rx) = std::sync::mpsc::sync_channel(4);
    std::thread::Builder::new()
        .name("bench-people".into())
        .spawn(move || {
            let mut people = PeopleGen::new(DEMO_SEED).take(rows);
            loop {
                let batch: Vec<Person> = people.by_ref().take(BATCH).collect();
                if batch.is_empty() || tx.send(batch).is_err() {
                    break;
                }
            }
        })
        .expect("spawning the people generator");
    rx.into_iter()
}

/// "CPU 1.23s = 4.5 µs/event" and the µs per event, from a CPU time in seconds.
fn cpu_per_event(cpu: Option<f64>, events: u64) -> (String, f64) {
    match cpu {
        Some(cpu) => {
            let micros = cpu * 1e6 / events.max(1) as f64;
            (format!(", CPU {cpu:.2}s = {micros:.1} µs/event"), micros)
        }
        None => (String::new(), f64::NAN),
    }
}

/// `http_threads`: the benchmarked server's HTTP threads (`--server-workers`, else
/// `[server] workers`, else one per CPU).
pub async fn run(
    config: Config,
    args: BenchArgs,
    http_threads: hbidx_serve::HttpThreads,
) -> Result<()> {
    let temp;
    let data_dir = match &args.data_dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile_dir()?;
            temp.clone()
        }
    };
    let mut config = config;
    if !args.covered.is_empty() {
        let name = demo_table(&config)?.name.clone();
        for table in config.tables.iter_mut().filter(|t| t.name == name) {
            for column in &args.covered {
                let family = column.split(':').next().unwrap_or_default();
                if table.keeps_column(column)
                    || !table.families.iter().any(|f| f.name == family)
                    || !column.contains(':')
                {
                    anyhow::bail!(
                        "--covered {column}: not a column of a declared family that the table doesn't index already"
                    );
                }
            }
            table.covered = args.covered.clone();
        }
    }
    let table = demo_table(&config)?.clone();
    let columns = PersonColumns::for_table(&table)?;
    let mut report: Vec<Row> = Vec::new();
    let rows = args.rows as u64;
    if let Some(path) = &args.export_csv {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        );
        for p in people_batches(args.rows).flatten() {
            writeln!(
                out,
                "{},{},{},{},{}",
                p.uid, p.name, p.phone, p.idcard, p.city
            )?;
        }
        out.flush()?;
    }
    let rss = RssMonitor::start();

    // Phase 1: fill the store and its change feed with no indexer running.
    let mut sample = UniformSample::new(rows);
    {
        let store = hbidx_store::EmbeddedStore::open(
            &data_dir.join("store"),
            std::slice::from_ref(&table.name),
        )?;
        let ts = now_ms();
        let started = Instant::now();
        let mut i = 0u64;
        for people in people_batches(args.rows) {
            let mut batch = Vec::with_capacity(people.len());
            for person in &people {
                sample.offer(i, &person.phone);
                i += 1;
                batch.push(columns.mutation(&table, person, ts)?);
            }
            store.mutate_sync(batch)?;
        }
        let rate = rows as f64 / started.elapsed().as_secs_f64();
        report.push(
            Row::new(
                "store load (fjall + change feed)",
                format!("{rate:.0} rows/s"),
            )
            .value(rate, "rows/s"),
        );
    }
    report.push(rss.phase("store load"));

    // Phase 2: index the whole feed.
    // wrk calls the API like any client, with a key, so the lookup figures include the
    // authentication cost. Only this key, without a rate limit: the bench measures the service.
    let api_key = hbidx_query::auth::generate_key();
    let mut security = hbidx_query::auth::SecurityConfig::default();
    security
        .add_plaintext_key("bench", &api_key, "bench key")
        .map_err(|err| anyhow::anyhow!("{err}"))?;
    let policy = CommitPolicy::default();
    // Reopening the store replays fjall's journal of the phase 1 load: store recovery, which
    // any restart after a load pays, not indexing. It is timed and reported on its own row, so
    // the indexing row measures the indexer alone, from its start to the commit covering the
    // whole feed (reading the feed, tantivy, commits, feed trims).
    let store_started = Instant::now();
    let store_cpu_before = process_cpu_seconds();
    let opened = hbidx_serve::open_rows(&config, &data_dir)?;
    let reopen_secs = store_started.elapsed().as_secs_f64();
    report.push(
        Row::new(
            "store reopen (fjall journal replay)",
            format!(
                "{reopen_secs:.2}s{}",
                process_cpu_seconds()
                    .zip(store_cpu_before)
                    .map(|(after, before)| format!(", CPU {:.2}s", after - before))
                    .unwrap_or_default()
            ),
        )
        .value(reopen_secs, "s"),
    );
    let started = Instant::now();
    let cpu_before = process_cpu_seconds();
    let runtime = hbidx_serve::open_with_rows(
        &config,
        &data_dir,
        &policy,
        hbidx_query::auth::Auth::new(&security),
        opened,
    )?;
    runtime
        .wait_caught_up(Duration::from_secs(24 * 3600))
        .await?;
    let secs = started.elapsed().as_secs_f64();
    // CPU time next to wall time: on a shared machine the wall figure moves with everything
    // else running, the CPU per event much less.
    let (cpu, micros) = cpu_per_event(
        process_cpu_seconds()
            .zip(cpu_before)
            .map(|(after, before)| after - before),
        rows,
    );
    let commits = runtime
        .state
        .tables
        .get(&table.name)
        .map(|indexed| commit_summary(&indexed.stats))
        .unwrap_or_default();
    let rate = rows as f64 / secs;
    report.push(
        Row::new(
            "indexing throughput (feed → tantivy)",
            format!(
                "{rate:.0} events/s ({} events in {secs:.2}s{cpu}{commits})",
                args.rows
            ),
        )
        .value(rate, "events/s")
        .also("CPU", micros, "µs/event"),
    );
    report.extend(rss.phase_with_budget("indexing (change feed)", runtime.state.memory.as_ref()));

    if args.indexing_only {
        if let Some(indexed) = runtime.state.tables.get(&table.name) {
            let stats = indexed.searcher.sizes();
            report.push(index_size_row(&stats, String::new()));
        }
        report.push(store_size_row(&data_dir, rows));
        runtime.shutdown_indexers().await?;
        return finish(&config, &args, &data_dir, &rss, report).await;
    }

    // Phase 3: event → searchable latency at a steady write rate.
    let runtime_table = runtime
        .state
        .tables
        .get(&table.name)
        .context("table missing")?
        .clone();
    let mut latencies = Vec::with_capacity(args.latency_writes);
    {
        let mut indexed = runtime_table.indexed.clone();
        let extra = PeopleGen::new(DEMO_SEED ^ 0x5eed)
            .skip(args.rows)
            .take(args.latency_writes);
        let mut pending: std::collections::VecDeque<(i64, Instant)> = Default::default();
        let mut ticker = tokio::time::interval(Duration::from_millis(2));
        let mut people = extra.into_iter();
        let mut done_writing = false;
        while !(done_writing && pending.is_empty()) {
            tokio::select! {
                _ = ticker.tick(), if !done_writing => {
                    match people.next() {
                        Some(person) => {
                            let mutation = columns.mutation(&table, &person, now_ms())?;
                            let receipt = runtime.embedded()?.mutate_sync(vec![mutation])?;
                            if let Some((_, offset)) = receipt.last_offset_by_table.first() {
                                pending.push_back((*offset, Instant::now()));
                            }
                        }
                        None => done_writing = true,
                    }
                }
                changed = indexed.changed() => {
                    changed.context("indexer stopped")?;
                    let at = indexed.borrow_and_update().position(CHANGE_FEED, 0).unwrap_or(0);
                    while pending.front().is_some_and(|(offset, _)| *offset <= at) {
                        if let Some((_, written)) = pending.pop_front() {
                            latencies.push(written.elapsed().as_secs_f64() * 1e3);
                        }
                    }
                }
            }
        }
    }
    let detail = format!("{} writes at 500/s", latencies.len());
    report.push(Row::latencies(
        "event → searchable latency",
        &mut latencies,
        &detail,
    ));

    // Phase 4: size, once the indexer's idle compaction (`CommitPolicy::compact_when_idle`)
    // has merged the segments: the lookups below measure a read-mostly index in its steady
    // state, not the segments a bulk load happens to leave behind.
    let waited = Instant::now();
    let mut stats = runtime_table.searcher.sizes();
    if let Some(idle) = policy.compact_when_idle {
        while stats.segments > 1 && waited.elapsed() < idle + Duration::from_secs(600) {
            tokio::time::sleep(Duration::from_millis(100)).await;
            stats = runtime_table.searcher.sizes();
        }
    }
    report.push(index_size_row(
        &stats,
        format!(
            "; waited {:.1}s for the idle compaction",
            waited.elapsed().as_secs_f64()
        ),
    ));
    report.push(store_size_row(&data_dir, rows));

    // Phase 5: HTTP lookups with wrk, against the service as `serve` runs it: with the
    // dashboard sampler, which is also what drains the metrics' histogram samples into their
    // buckets every 2 s. Without it every lookup's samples pile up for the whole run (three
    // histograms a request): on the order of 100 MB more RSS by the end of the lookups.
    let sampler = hbidx_query::ops::spawn_sampler(&runtime.state);
    let server = BenchServer::start(runtime.state.clone(), http_threads.clone()).await?;
    let addr = server.addr;
    let script = data_dir.join("phones.lua");
    if args.lookup_seconds > 0 {
        write_wrk_script(
            &script,
            &table.name,
            &api_key,
            sample.phones.iter().map(String::as_str),
            "",
        )?;
        for class in [Scheduling::Normal, Scheduling::Batch] {
            report.push(
                run_wrk(
                    class.label(false),
                    format!("http://{addr}"),
                    &script,
                    &args,
                    http_threads.count,
                    class,
                )
                .await?,
            );
        }
        if http_threads.count > 1 {
            // The same lookups against a second server over the same state with one HTTP
            // thread: on a 2-core machine wrk then keeps the other core and no thread
            // time-slices with another, so the latency tail is the server's own; with a thread
            // per core, wrk's threads and the server's share both cores and wrk's own
            // scheduling delays show up in its p99.
            let one =
                BenchServer::start(runtime.state.clone(), hbidx_serve::HttpThreads::unpinned(1))
                    .await?;
            for class in [Scheduling::Normal, Scheduling::Batch] {
                report.push(
                    run_wrk(
                        class.label(true),
                        format!("http://{}", one.addr),
                        &script,
                        &args,
                        1,
                        class,
                    )
                    .await?,
                );
            }
            one.stop().await?;
        }
        // One HTTP thread pinned to a CPU and wrk kept off it: the client no longer shares
        // the server's core, as a client on another machine wouldn't (`[server] http_cpus`).
        // Without a CPU to spare for wrk, not measured.
        if let Some((server_cpu, client_cpus)) = split_cpus() {
            let pinned = BenchServer::start(
                runtime.state.clone(),
                hbidx_serve::HttpThreads {
                    count: 1,
                    cpus: vec![server_cpu],
                },
            )
            .await?;
            let class = Scheduling::OffCpus(client_cpus);
            report.push(
                run_wrk(
                    class.label(true),
                    format!("http://{}", pinned.addr),
                    &script,
                    &args,
                    1,
                    class,
                )
                .await?,
            );
            pinned.stop().await?;
        }
    }

    // Phase 6: batch lookups of 1000 phones in one call, a reindex by table scan, a full
    // verify, and updates of a tenth of the rows.
    let base = format!("http://{addr}");
    let client = api_client(&api_key)?;
    batch_lookups(
        &client,
        &base,
        &table.name,
        &sample,
        &json!({}),
        &mut report,
    )
    .await?;
    report.extend(rss.phase_with_budget(
        "latency, compaction and lookups",
        runtime.state.memory.as_ref(),
    ));
    scan_reindex(&client, &base, &table.name, &mut report).await?;
    report.extend(rss.phase_with_budget("reindex by table scan", runtime.state.memory.as_ref()));
    verify_full(&client, &base, &table.name, &mut report).await?;
    report.extend(rss.phase_with_budget("verify --full", runtime.state.memory.as_ref()));
    report.push(updates(&runtime, &table, &mut sample, rows).await?);
    report.extend(rss.phase_with_budget("updates", runtime.state.memory.as_ref()));

    // Phase 7: a restart. Everything is closed (the indexes committed, the store synced and
    // dropped), then timed from reopening the data dir to the first lookup answered over HTTP.
    drop(client);
    server.stop().await?;
    sampler.abort();
    let _ = sampler.await;
    drop(runtime_table);
    let store = runtime.embedded()?.clone();
    runtime.shutdown_indexers().await?;
    let closing = Instant::now();
    while Arc::strong_count(&store) > 1 {
        anyhow::ensure!(
            closing.elapsed() < Duration::from_secs(60),
            "the row store is still open after the shutdown ({} references): cannot time a restart",
            Arc::strong_count(&store) - 1
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(store);
    let (runtime, server, restart_row) = restart(
        &config,
        &data_dir,
        &policy,
        &security,
        &http_threads,
        &table,
        &api_key,
        &sample,
    )
    .await?;
    report.push(restart_row);
    report.extend(rss.phase_with_budget("restart", runtime.state.memory.as_ref()));
    let sampler = hbidx_query::ops::spawn_sampler(&runtime.state);
    let client = api_client(&api_key)?;
    server.stop().await?;

    // Phase 8: the same lookups with the rows read over HBase Thrift1: the gateway serves this
    // store, and a second service reads it through HbaseStore (index → rowkeys →
    // getRowsWithColumns), exactly as against an HBase Thrift server.
    if !args.no_thrift {
        let gateway = hbidx_serve::start_gateway(
            &runtime,
            &config,
            hbidx_gateway::GatewayOptions::new("127.0.0.1:0".parse()?),
        )?;
        let mut thrift = hbidx_store::HbaseConfig::new(gateway.local_addr().to_string());
        thrift.pool_size = 32;
        let hbase =
            hbidx_store::HbaseStore::new(thrift, &[(table.name.clone(), table.full_name())]);
        let tables: Vec<hbidx_query::TableRuntime> =
            runtime.state.tables.values().cloned().collect();
        let thrift_state = std::sync::Arc::new(
            hbidx_query::AppState::new(std::sync::Arc::new(hbase), tables)
                .with_auth(hbidx_query::auth::Auth::new(&security)),
        );
        let thrift_server = BenchServer::start(thrift_state, http_threads.clone()).await?;
        let thrift_addr = thrift_server.addr;
        if args.lookup_seconds > 0 {
            // After the updates: the sample follows the rows' new phones.
            write_wrk_script(
                &script,
                &table.name,
                &api_key,
                sample.phones.iter().map(String::as_str),
                "",
            )?;
            report.push(
                run_wrk(
                    "lookup by phone, rows over Thrift1 (wrk)",
                    format!("http://{thrift_addr}"),
                    &script,
                    &args,
                    http_threads.count,
                    Scheduling::Normal,
                )
                .await?,
            );
        }
        let mut thrift_rows = Vec::new();
        batch_lookups(
            &client,
            &format!("http://{thrift_addr}"),
            &table.name,
            &sample,
            &json!({}),
            &mut thrift_rows,
        )
        .await?;
        report.extend(
            thrift_rows
                .into_iter()
                .map(|row| relabel(row, "batch lookup, 1000 phones, rows over Thrift1")),
        );
        if !table.covered.is_empty() {
            covered_lookups(
                &args,
                &table,
                &runtime,
                &client,
                &api_key,
                &sample,
                &data_dir,
                thrift_addr,
                http_threads.count,
                &mut report,
            )
            .await?;
        }
        thrift_server.stop().await?;
        report.extend(rss.phase_with_budget("Thrift1 lookups", runtime.state.memory.as_ref()));
    }
    sampler.abort();

    let (now, peak) = (
        rss_kib("VmRSS:") as f64 / 1024.0,
        rss_kib("VmHWM:") as f64 / 1024.0,
    );
    report.push(
        Row::new("RSS", format!("{now:.0} MB now, {peak:.0} MB peak"))
            .also("now", now, "MB")
            .also("peak", peak, "MB"),
    );
    runtime.shutdown_indexers().await?;
    finish(&config, &args, &data_dir, &rss, report).await
}

/// The same row under another label (its numbers' measures follow).
fn relabel(row: Row, label: &str) -> Row {
    let Row {
        label: old,
        text,
        metrics,
    } = row;
    let mut row = Row::new(label, text);
    for metric in metrics {
        let measure = metric.measure.replacen(&old, label, 1);
        row = row.metric(measure, metric.value, metric.unit);
    }
    row
}

fn index_size_row(stats: &hbidx_indexer::IndexStats, note: String) -> Row {
    let per_row = stats.bytes as f64 / stats.docs.max(1) as f64;
    Row::new(
        "index size",
        format!(
            "{per_row:.1} bytes/row ({:.1} MB, {} segments{note})",
            stats.bytes as f64 / 1e6,
            stats.segments,
        ),
    )
    .value(per_row, "bytes/row")
}

/// The store's size on disk (fjall's journals, tables and what is left of the change feed).
fn store_size_row(data_dir: &std::path::Path, rows: u64) -> Row {
    let bytes = crate::report::disk_bytes(&data_dir.join("store"));
    let per_row = bytes as f64 / rows.max(1) as f64;
    Row::new(
        "store size on disk",
        format!("{per_row:.1} bytes/row ({:.1} MB)", bytes as f64 / 1e6),
    )
    .value(per_row, "bytes/row")
}

/// Updates: every [`UPDATE_EVERY`]th row gets a new phone and name (the same uids, so the same
/// rowkeys), written in batches while the indexer runs, timed from the first write until the
/// index covers the last. The indexer reads each row's previous state to drop its old terms.
/// The CPU per event leaves out the writing thread's own (generation and store writes).
async fn updates(
    runtime: &hbidx_serve::Runtime,
    table: &hbidx_schema::config::TableConfig,
    sample: &mut UniformSample,
    rows: u64,
) -> Result<Row> {
    let store = runtime.embedded()?.clone();
    let runtime_table = runtime
        .state
        .tables
        .get(&table.name)
        .context("table missing")?
        .clone();
    let writer_table = table.clone();
    let mut writer_sample = std::mem::replace(sample, UniformSample::new(0));
    let started = Instant::now();
    let cpu_before = process_cpu_seconds();
    let writer = tokio::task::spawn_blocking(move || -> Result<_> {
        let thread_cpu_before = crate::report::thread_cpu_seconds();
        let columns = PersonColumns::for_table(&writer_table)?;
        let mut fresh = PeopleGen::new(DEMO_SEED);
        let ts = now_ms();
        let mut batch = Vec::with_capacity(BATCH);
        let (mut count, mut last) = (0u64, 0i64);
        let mut write = |batch: Vec<_>| -> Result<()> {
            let receipt = store.mutate_sync(batch)?;
            if let Some((_, offset)) = receipt.last_offset_by_table.first() {
                last = *offset;
            }
            Ok(())
        };
        for i in (UPDATE_EVERY / 2..rows).step_by(UPDATE_EVERY as usize) {
            // A phone that no loaded person has.
            let (phone, name) = fresh.new_contact(rows + i);
            writer_sample.update(i, &phone);
            let uid = crate::people::uid_of(i);
            batch.push(columns.update(&writer_table, &uid, &phone, &name, ts)?);
            count += 1;
            if batch.len() == BATCH {
                write(std::mem::take(&mut batch))?;
            }
        }
        if !batch.is_empty() {
            write(batch)?;
        }
        let thread_cpu = crate::report::thread_cpu_seconds()
            .zip(thread_cpu_before)
            .map(|(after, before)| after - before);
        Ok((count, last, started.elapsed(), thread_cpu, writer_sample))
    });
    let (count, last, written_in, writer_cpu, writer_sample) = writer.await??;
    *sample = writer_sample;
    let mut indexed = runtime_table.indexed.clone();
    tokio::time::timeout(
        Duration::from_secs(24 * 3600),
        indexed.wait_for(|cp| cp.position(CHANGE_FEED, 0).unwrap_or(0) >= last),
    )
    .await
    .context("the updates were not indexed in time")?
    .context("indexer stopped")?;
    let secs = started.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds()
        .zip(cpu_before)
        .zip(writer_cpu)
        .map(|((after, before), writer)| after - before - writer);
    let (cpu, micros) = cpu_per_event(cpu, count);
    let rate = count as f64 / secs;
    Ok(Row::new(
        "updates: new phone and name for 10% of rows (feed → tantivy)",
        format!(
            "{rate:.0} events/s ({count} updates in {secs:.2}s, written in {:.2}s{cpu} without the writing thread)",
            written_in.as_secs_f64()
        ),
    )
    .value(rate, "events/s")
    .also("CPU", micros, "µs/event"))
}

/// Reopens the data dir as `serve` does and times it until a lookup by a sampled phone is
/// answered with its row over HTTP. Returns the runtime and its server, still running.
#[allow(clippy::too_many_arguments)]
async fn restart(
    config: &Config,
    data_dir: &std::path::Path,
    policy: &CommitPolicy,
    security: &hbidx_query::auth::SecurityConfig,
    http_threads: &hbidx_serve::HttpThreads,
    table: &hbidx_schema::config::TableConfig,
    api_key: &str,
    sample: &UniformSample,
) -> Result<(hbidx_serve::Runtime, BenchServer, Row)> {
    let started = Instant::now();
    let opened = hbidx_serve::open_rows(config, data_dir)?;
    let store_secs = started.elapsed().as_secs_f64();
    let runtime = hbidx_serve::open_with_rows(
        config,
        data_dir,
        policy,
        hbidx_query::auth::Auth::new(security),
        opened,
    )?;
    let index_secs = started.elapsed().as_secs_f64() - store_secs;
    let server = BenchServer::start(runtime.state.clone(), http_threads.clone()).await?;
    let client = api_client(api_key)?;
    let phone = sample
        .phones
        .last()
        .context("no phone to look up after the restart")?;
    let url = format!(
        "http://{}/v1/tables/{}/rows?phone={phone}",
        server.addr, table.name
    );
    loop {
        let answer = client.get(&url).send().await;
        if let Ok(response) = answer
            && response.status().is_success()
        {
            let body: serde_json::Value = response.json().await?;
            if body["count"].as_u64().unwrap_or(0) > 0 {
                break;
            }
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "no lookup answered within 10 minutes of the restart"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let row = Row::new(
        "restart: reopen the data dir → first lookup served",
        format!(
            "{secs:.2}s (store {store_secs:.2}s, indexes and indexers {index_secs:.2}s, the rest HTTP start and the lookup)"
        ),
    )
    .value(secs, "s");
    Ok((runtime, server, row))
}

/// `POST verify {"full": true}` (what `hbidx verify --full` runs) and wait for its report:
/// rows checked per second.
async fn verify_full(
    client: &reqwest::Client,
    base: &str,
    table: &str,
    report: &mut Vec<Row>,
) -> Result<()> {
    let started = Instant::now();
    let job: serde_json::Value = client
        .post(format!("{base}/v1/tables/{table}/verify"))
        .json(&json!({"full": true}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let job = wait_job(client, base, &job).await?;
    let secs = started.elapsed().as_secs_f64();
    let verified = &job["report"];
    let index_rows = verified["index_rows_checked"].as_u64().unwrap_or(0);
    let store_rows = verified["store_rows_checked"].as_u64().unwrap_or(0);
    let drift: u64 = ["missing", "ghosts", "mismatches"]
        .iter()
        .map(|kind| verified[kind]["count"].as_u64().unwrap_or(0))
        .sum();
    let rate = store_rows.max(index_rows) as f64 / secs;
    report.push(
        Row::new(
            "verify --full (index ↔ store, both ways)",
            format!(
                "{rate:.0} rows/s ({index_rows} index rows and {store_rows} store rows in {secs:.2}s; drift {drift})"
            ),
        )
        .value(rate, "rows/s"),
    );
    Ok(())
}

/// Polls the job `job` (a job status as returned when it was started) until it is over: its
/// last status, or an error if it failed.
async fn wait_job(
    client: &reqwest::Client,
    base: &str,
    job: &serde_json::Value,
) -> Result<serde_json::Value> {
    let id = job["id"].as_u64().context("job id")?;
    loop {
        let job: serde_json::Value = client
            .get(format!("{base}/v1/jobs/{id}"))
            .send()
            .await?
            .json()
            .await?;
        match job["state"].as_str() {
            Some("succeeded") => return Ok(job),
            Some("failed") => anyhow::bail!("job {id} failed: {}", job["error"]),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The Kafka part (with --kafka), clean-up and the report: the table on stdout and, with
/// `--json`, the file.
async fn finish(
    config: &Config,
    args: &BenchArgs,
    data_dir: &std::path::Path,
    rss: &RssMonitor,
    mut report: Vec<Row>,
) -> Result<()> {
    if let Some(brokers) = &args.kafka {
        crate::kafka::run(config, args.rows, brokers, data_dir, rss, &mut report).await?;
    }
    if args.data_dir.is_none() {
        let _ = std::fs::remove_dir_all(data_dir);
    }

    println!("\n{}", crate::report::markdown(&report));
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&crate::report::json_rows(&report))?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

struct BenchServer {
    addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl BenchServer {
    async fn start(
        state: hbidx_query::SharedState,
        http_threads: hbidx_serve::HttpThreads,
    ) -> Result<Self> {
        let listener = hbidx_serve::bind("127.0.0.1:0".parse()?).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(hbidx_serve::serve_http(
            listener,
            hbidx_query::app(state),
            http_threads,
            async {
                let _ = stopped.await;
            },
        ));
        Ok(Self { addr, stop, task })
    }

    async fn stop(self) -> Result<()> {
        let _ = self.stop.send(());
        self.task.await?
    }
}

/// How the load generator is scheduled. On a 2-core box it shares the cores with the server,
/// and a normally scheduled client preempts the server whenever a response wakes it: hbidx's
/// few event-loop threads then pay a context switch every couple of requests, while a server
/// with a process per connection (PostgreSQL) barely notices. A remote client, the real case,
/// takes nothing from the server's cores. `SCHED_BATCH` (chrt --batch 0; no privileges needed)
/// keeps the client from preempting on wakeup, so it runs when the server waits or at the
/// tick: the closest a co-located client gets to a remote one. scripts/bench.sh runs pgbench
/// both ways too and reports both ratios.
#[derive(Clone, PartialEq, Eq)]
enum Scheduling {
    Normal,
    Batch,
    /// Normally scheduled, but only on these CPUs (`taskset -c`, util-linux), none of them the
    /// server's.
    OffCpus(String),
}

/// The first CPU this process may use (for the server's pinned HTTP thread) and the rest as a
/// `taskset -c` list (for wrk), when there are at least two.
fn split_cpus() -> Option<(usize, String)> {
    let cpus = hbidx_serve::allowed_cpus();
    let (&server, rest) = cpus.split_first()?;
    let rest: Vec<String> = rest.iter().map(ToString::to_string).collect();
    (!rest.is_empty()).then(|| (server, rest.join(",")))
}

impl Scheduling {
    /// The report row of wrk lookups under this scheduling, against the server with its
    /// configured HTTP threads or with one.
    fn label(&self, one_thread: bool) -> &'static str {
        match (one_thread, self) {
            (false, Self::Normal) => "lookup by phone over HTTP (wrk)",
            (false, Self::Batch) => "lookup by phone over HTTP (wrk, SCHED_BATCH)",
            (true, Self::Normal) => "lookup by phone over HTTP, 1 server thread (wrk)",
            (true, Self::Batch) => "lookup by phone over HTTP, 1 server thread (wrk, SCHED_BATCH)",
            (_, Self::OffCpus(_)) => {
                "lookup by phone over HTTP, 1 server thread pinned, wrk on the other CPUs"
            }
        }
    }
}

/// Runs wrk with the lookup script against `url` (a server with `workers` HTTP threads),
/// scheduled as `scheduling` says, and summarises it.
async fn run_wrk(
    label: &'static str,
    url: String,
    script: &std::path::Path,
    args: &BenchArgs,
    workers: usize,
    scheduling: Scheduling,
) -> Result<Row> {
    let (wrk_threads, connections, seconds) =
        (args.wrk_threads, args.connections, args.lookup_seconds);
    let script = script.display().to_string();
    // scripts/bench.sh reads the client's CPUs from the row, to run pgbench on the same ones.
    let client_cpus = match &scheduling {
        Scheduling::OffCpus(cpus) => format!(", wrk on CPUs {cpus}"),
        _ => String::new(),
    };
    let output = tokio::task::spawn_blocking(move || {
        let mut command = match scheduling {
            Scheduling::Normal => Command::new("wrk"),
            Scheduling::Batch => {
                let mut chrt = Command::new("chrt");
                chrt.args(["--batch", "0", "wrk"]);
                chrt
            }
            Scheduling::OffCpus(cpus) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", cpus.as_str(), "wrk"]);
                taskset
            }
        };
        command
            .args([
                format!("-t{wrk_threads}"),
                format!("-c{connections}"),
                format!("-d{seconds}s"),
                "--latency".into(),
                "-s".into(),
                script,
                url,
            ])
            .output()
    })
    .await?;
    Ok(match output {
        Ok(output) if output.status.success() => {
            let text = String::from_utf8_lossy(&output.stdout);
            let summary = WrkSummary::parse(&text);
            Row::new(
                label,
                describe_wrk(&summary, wrk_threads, connections, workers) + &client_cpus,
            )
            .value(summary.rps.unwrap_or(f64::NAN), "req/s")
            .also("p99", summary.p99_ms.unwrap_or(f64::NAN), "ms")
        }
        Ok(output) => Row::new(
            label,
            format!(
                "wrk failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        ),
        Err(err) => Row::new(
            label,
            format!(
                "not measured: cannot run wrk ({err}); apt-get install wrk (chrt and taskset are util-linux)"
            ),
        ),
    })
}

/// An HTTP client that sends the bench's API key on every request.
fn api_client(api_key: &str) -> Result<reqwest::Client> {
    let mut authorization = reqwest::header::HeaderValue::from_str(&format!("Bearer {api_key}"))?;
    authorization.set_sensitive(true);
    Ok(reqwest::Client::builder()
        .default_headers(reqwest::header::HeaderMap::from_iter([(
            reqwest::header::AUTHORIZATION,
            authorization,
        )]))
        .build()?)
}

/// `POST rows:batch-lookup` with 1000 existing phones per call, sequentially: per-call latency.
/// Phase 7 with `--covered`: lookups by phone asking for the name and the covered columns,
/// answered from the index, beside the same requests with `consistency=store` (rows over
/// Thrift1), single and batched; and the covered columns' share of the index.
#[allow(clippy::too_many_arguments)]
async fn covered_lookups(
    args: &BenchArgs,
    table: &hbidx_schema::config::TableConfig,
    runtime: &hbidx_serve::Runtime,
    client: &reqwest::Client,
    api_key: &str,
    sample: &UniformSample,
    data_dir: &std::path::Path,
    thrift_addr: std::net::SocketAddr,
    http_threads: usize,
    report: &mut Vec<Row>,
) -> Result<()> {
    let name_column = table
        .fields_of_kind(hbidx_schema::config::FieldKind::Name)
        .next()
        .map(|field| field.column.clone());
    let columns: Vec<String> = name_column
        .into_iter()
        .chain(table.covered.iter().cloned())
        .collect();
    let projection = format!("&columns={}", columns.join(","));
    let phones = || sample.phones.iter().map(String::as_str);
    if args.lookup_seconds > 0 {
        for (label, suffix, file) in [
            (
                "lookup by phone, covered columns, from the index (wrk)",
                projection.clone(),
                "covered.lua",
            ),
            (
                "the same columns, consistency=store: over Thrift1 (wrk)",
                format!("{projection}&consistency=store"),
                "covered-store.lua",
            ),
        ] {
            let script = data_dir.join(file);
            write_wrk_script(&script, &table.name, api_key, phones(), &suffix)?;
            report.push(
                run_wrk(
                    label,
                    format!("http://{thrift_addr}"),
                    &script,
                    args,
                    http_threads,
                    Scheduling::Normal,
                )
                .await?,
            );
        }
    }
    for (label, extra) in [
        (
            "batch lookup, 1000 phones, covered columns from the index",
            json!({"columns": columns}),
        ),
        (
            "the same, consistency=store: over Thrift1",
            json!({"columns": columns, "consistency": "store"}),
        ),
    ] {
        let mut rows = Vec::new();
        batch_lookups(
            client,
            &format!("http://{thrift_addr}"),
            &table.name,
            sample,
            &extra,
            &mut rows,
        )
        .await?;
        report.extend(rows.into_iter().map(|row| relabel(row, label)));
    }
    if let Some(indexed) = runtime.state.tables.get(&table.name) {
        let searcher = indexed.searcher.clone();
        let sizes = tokio::task::spawn_blocking(move || searcher.covered_sizes(10_000)).await??;
        let rows = indexed
            .stats
            .rows
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(1);
        for size in sizes {
            let per_row = size.bytes as f64 / rows as f64;
            report.push(
                Row::new(
                    "covered column in the index",
                    format!(
                        "{}: {per_row:.1} bytes/row before compression ({:.1} MB over {rows} rows, from {} sampled)",
                        size.column,
                        size.bytes as f64 / 1e6,
                        size.sampled
                    ),
                )
                .metric(
                    format!("covered column {} in the index", size.column),
                    per_row,
                    "bytes/row",
                ),
            );
        }
    }
    Ok(())
}

/// Batch lookups of 1000 phones a call, with `extra` merged into each request body; each
/// call's phones spread over the whole table.
async fn batch_lookups(
    client: &reqwest::Client,
    base: &str,
    table: &str,
    sample: &UniformSample,
    extra: &serde_json::Value,
    report: &mut Vec<Row>,
) -> Result<()> {
    let calls = (sample.phones.len() / 1000).clamp(1, 50);
    let mut millis = Vec::with_capacity(calls);
    let mut found = 0u64;
    for call in 0..calls {
        let phones = sample.batch(call, 1000);
        let mut request = json!({"field": "phone", "values": phones});
        if let (Some(request), Some(extra)) = (request.as_object_mut(), extra.as_object()) {
            request.extend(extra.clone());
        }
        let started = Instant::now();
        let body: serde_json::Value = client
            .post(format!("{base}/v1/tables/{table}/rows:batch-lookup"))
            .json(&request)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        millis.push(started.elapsed().as_secs_f64() * 1e3);
        found += body["count"].as_u64().unwrap_or(0);
    }
    millis.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&millis, 50.0), percentile(&millis, 99.0));
    report.push(
        Row::new(
            "batch lookup, 1000 phones per call",
            format!(
                "p50 {p50:.1} ms, p99 {p99:.1} ms per call ({calls} calls, {found} rows found)"
            ),
        )
        .also("p50", p50, "ms")
        .also("p99", p99, "ms"),
    );
    Ok(())
}

/// `POST reindex {"from": "store"}` and wait for the swap: rows scanned per second.
async fn scan_reindex(
    client: &reqwest::Client,
    base: &str,
    table: &str,
    report: &mut Vec<Row>,
) -> Result<()> {
    let started = Instant::now();
    let job: serde_json::Value = client
        .post(format!("{base}/v1/tables/{table}/reindex"))
        .json(&serde_json::json!({"from": "store"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let job = wait_job(client, base, &job).await?;
    let rows = job["done"].as_u64().unwrap_or(0);
    let secs = started.elapsed().as_secs_f64();
    let rate = rows as f64 / secs;
    report.push(
        Row::new(
            "reindex by table scan (shadow + swap)",
            format!("{rate:.0} rows/s ({rows} rows in {secs:.2}s)"),
        )
        .value(rate, "rows/s"),
    );
    Ok(())
}

fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("hbidx-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn write_wrk_script<'a>(
    path: &std::path::Path,
    table: &str,
    api_key: &str,
    phones: impl Iterator<Item = &'a str>,
    query_suffix: &str,
) -> Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    // wrk.format uses wrk.headers when a request doesn't pass its own.
    writeln!(out, "wrk.headers[\"Authorization\"] = \"Bearer {api_key}\"")?;
    writeln!(out, "local phones = {{")?;
    for phone in phones {
        writeln!(out, "\"{phone}\",")?;
    }
    writeln!(out, "}}")?;
    writeln!(
        out,
        r#"-- Requests are formatted once, up front: formatting one per call costs wrk about 1 µs of
-- CPU per request, taken from the same two cores the server runs on.
local requests = {{}}
for k, phone in ipairs(phones) do
  requests[k] = wrk.format("GET", "/v1/tables/{table}/rows?phone=" .. phone .. "{query_suffix}")
end
local n = #requests
local i = 0
request = function()
  i = i + 1
  return requests[(i % n) + 1]
end"#
    )?;
    out.flush()?;
    Ok(())
}

/// The human cell of a wrk run.
fn describe_wrk(summary: &WrkSummary, threads: u32, connections: u32, workers: usize) -> String {
    let errors: String = summary.errors.iter().map(|e| format!("; {e}")).collect();
    // The server's threads matter as much as wrk's on a small machine: say how many.
    format!(
        "{} req/s, p50 {}, p99 {} (wrk -t{threads} -c{connections}; {workers} server HTTP threads){errors}",
        summary.rps_text, summary.p50, summary.p99
    )
}

/// ", N commits, the last taking M ms": how much of an indexing run the final commit's
/// segment build (serial per indexing thread, and nothing else to overlap with) took.
pub(crate) fn commit_summary(stats: &hbidx_indexer::IndexerStats) -> String {
    use std::sync::atomic::Ordering::Relaxed;
    format!(
        ", {} commits, the last taking {:.0} ms",
        stats.commits.load(Relaxed),
        stats.last_commit_micros.load(Relaxed) as f64 / 1e3
    )
}
