//! `hbidx bench`: the numbers in docs/benchmarks.md (which says what each row measures).
//!
//! Benchmarks, not timed tests: nothing here asserts, it measures and prints. The people are
//! generated as they are written (no vector of the whole data set: the process measured is
//! the server), keeping only a uniform sample of their phones for the lookups. Phases:
//! 1. load N people into the embedded store, opened within the `[memory]` budget as `serve`
//!    opens it (the change feed fills up; timed separately);
//! 2. reopen the store (fjall replays its journal; timed on its own row), then start the
//!    indexer on the full feed and time until it has committed everything (events/s through
//!    the change feed into tantivy);
//! 3. with the indexer idle, write single rows at a fixed rate and record how long each took to
//!    become searchable (the published index checkpoint covers its offset): p50/p99;
//! 4. index and store bytes per row, and the CPU of the ops page's region report sample;
//! 5. HTTP lookups by phone at fixed concurrency with `wrk` (Debian package) against the real
//!    service on loopback, keys spread evenly over the whole table, after one warm-up pass
//!    over the sampled phones (timed on its own row): throughput and p50/p99;
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
//! With `--kafka`, the Kafka part (`crate::kafka`) runs between phase 7's close and its reopen
//! (after phase 2 with `--indexing-only`), with the first store closed: phase 8's gateway keeps
//! that store open until the process exits, and the Kafka rows measure their own instance.
//!
//! The process's RSS (anonymous and file-backed) is sampled all along: a row per phase with
//! the figure at its end and the peak during it.

use std::path::PathBuf;

use anyhow::{Context, Result};
use hbidx_demo::{PersonColumns, demo_table};
use hbidx_indexer::CommitPolicy;
use hbidx_schema::config::HbidxConfig;
use serde_json::json;

pub(crate) use crate::report::Row;
use crate::report::RssMonitor;

mod bulk;
mod http;
mod indexing;
mod lookups;
mod measure;
mod multi;
mod restart;
mod thrift;

pub(crate) use indexing::people_batches;
pub(crate) use measure::{commit_summary, percentile, process_cpu_seconds};

use bulk::{batch_lookups, scan_reindex, updates, verify_full, warm_up};
use http::{BenchServer, api_client};
use indexing::{index_size_row, store_size_row};
use lookups::write_wrk_script;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Rows to load and index.
    #[arg(long, default_value_t = 200_000)]
    rows: usize,
    /// Single-row writes for the event→searchable latency.
    #[arg(long, default_value_t = 1000)]
    latency_writes: usize,
    /// Seconds of the steady trickle of writes after the load (50 rows/s; 0 skips it; at most
    /// a day).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    trickle_seconds: u64,
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

/// `http_threads`: the benchmarked server's HTTP threads (`--server-workers`, else
/// `[server] workers`, else one per CPU).
pub async fn run(
    config: HbidxConfig,
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
        indexing::export_csv(path, args.rows)?;
    }
    let rss = RssMonitor::start();

    // Phase 1: fill the store and its change feed with no indexer running.
    let mut sample =
        indexing::load_store(&args, &config, &data_dir, &table, &columns, &mut report)?;
    report.push(rss.phase("store load"));

    // Phase 2: index the whole feed.
    let (api_key, security) = http::bench_key()?;
    // Compactions 10 s apart instead of 5 minutes, so that the trickle (phase 4b) sees one
    // after each burst.
    let policy = CommitPolicy {
        compact_min_interval: std::time::Duration::from_secs(10),
        ..CommitPolicy::default()
    };
    let instance = indexing::index_feed(
        &args,
        &config,
        &data_dir,
        &policy,
        &security,
        &table,
        &mut report,
    )
    .await?;
    report.extend(rss.phase_with_budget("indexing (change feed)", instance.state.memory.as_ref()));

    if args.indexing_only {
        if let Some(indexed) = instance.state.tables.get(&table.name) {
            let stats = indexed.searcher.sizes();
            report.push(index_size_row(&stats, String::new()));
            report.push(indexing::region_report_sample(indexed).await?);
        }
        report.push(store_size_row(&data_dir, rows));
        instance.shutdown_indexers().await?;
        kafka_part(&config, &args, &data_dir, &rss, &mut report).await?;
        return finish(&args, &data_dir, report);
    }

    // Phase 3: event → searchable latency at a steady write rate.
    let runtime_table = instance
        .state
        .tables
        .get(&table.name)
        .context("table missing")?
        .clone();
    report.push(
        indexing::searchable_latency(&args, &instance, &runtime_table, &table, &columns).await?,
    );

    // Phase 4: size, once the indexer's idle compaction (`CommitPolicy::compact_when_idle`)
    // has merged the segments: the lookups below measure a read-mostly index in its steady
    // state, not the segments a bulk load happens to leave behind.
    indexing::sizes(&runtime_table, &policy, &data_dir, rows, &mut report).await;
    report.push(
        indexing::trickle(&args, &instance, &runtime_table, &policy, &table, &columns).await?,
    );
    if args.trickle_seconds > 0 {
        report.push(
            indexing::steady_trickle(&args, &instance, &runtime_table, &table, &columns).await?,
        );
    }

    // Phase 5: HTTP lookups with wrk, against the service as `serve` runs it: with the
    // dashboard sampler, which is also what drains the metrics' histogram samples into their
    // buckets every 2 s. Without it every lookup's samples pile up for the whole run (three
    // histograms a request): on the order of 100 MB more RSS by the end of the lookups.
    let sampler = hbidx_query::spawn_sampler(&instance.state);
    let server = BenchServer::start(instance.state.clone(), http_threads.clone()).await?;
    let addr = server.addr;
    let base = format!("http://{addr}");
    let client = api_client(&api_key)?;
    let script = data_dir.join("phones.lua");
    if args.lookup_seconds > 0 {
        write_wrk_script(
            &script,
            &format!("/v1/tables/{}/rows", table.name),
            &api_key,
            sample.phones.iter().map(String::as_str),
            "",
        )?;
        // The HTTP floor answers every request with a real answer of the first phone.
        let floor_script = data_dir.join("floor.lua");
        write_wrk_script(
            &floor_script,
            &format!("/bench/floor/{}/rows", table.name),
            &api_key,
            sample.phones.iter().map(String::as_str),
            "",
        )?;
        let first = sample.phones.first().context("no sampled phone")?;
        let floor_answer: serde_json::Value = api_client(&api_key)?
            .get(format!(
                "http://{addr}/v1/tables/{}/rows?phone={first}",
                table.name
            ))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        report.push(warm_up(&client, &base, &table.name, &sample).await?);
        lookups::wrk_lookups(
            &args,
            &instance.state,
            &http_threads,
            (&script, &floor_script, floor_answer),
            addr,
            &mut report,
        )
        .await?;
        multi::multi_match_lookups(
            &base,
            &format!("/v1/tables/{}/rows", table.name),
            &api_key,
            &sample,
            &data_dir,
            http_threads.count,
            &mut report,
        )
        .await?;
    }

    // Phase 6: batch lookups of 1000 phones in one call, a reindex by table scan, a full
    // verify, and updates of a tenth of the rows.
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
        instance.state.memory.as_ref(),
    ));
    scan_reindex(&client, &base, &table.name, &mut report).await?;
    report.extend(rss.phase_with_budget("reindex by table scan", instance.state.memory.as_ref()));
    // The reindex leaves tens of fresh segments whose merge runs for a core-minute and more at
    // 10M rows (a second at 100k): a full verify beside it shares the CPU with it and walks
    // every segment for each page. It is measured once they are merged, like the lookups.
    let waited = std::time::Instant::now();
    indexing::settled(&runtime_table).await;
    verify_full(&client, &base, &table.name, waited.elapsed(), &mut report).await?;
    report.extend(rss.phase_with_budget("verify --full", instance.state.memory.as_ref()));
    report.push(updates(&instance, &table, &mut sample, rows).await?);
    report.extend(rss.phase_with_budget("updates", instance.state.memory.as_ref()));

    // Phase 7: a restart. Everything is closed (the indexes committed, the store synced and
    // dropped), then timed from reopening the data dir to the first lookup answered over HTTP.
    drop(client);
    server.stop().await?;
    sampler.abort();
    let _ = sampler.await;
    restart::close(instance, runtime_table).await?;
    // The Kafka part runs here, with the first store closed: from phase 8 on the Thrift
    // gateway's thread keeps that store open until the process exits (thrift's server has no
    // shutdown), and the Kafka part's memory rows would carry it.
    kafka_part(&config, &args, &data_dir, &rss, &mut report).await?;
    let (instance, server, restart_row) = restart::restart(
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
    report.extend(rss.phase_with_budget("restart", instance.state.memory.as_ref()));
    let sampler = hbidx_query::spawn_sampler(&instance.state);
    let client = api_client(&api_key)?;
    server.stop().await?;

    // Phase 8: the same lookups with the rows read over HBase Thrift1: the gateway serves this
    // store, and a second service reads it through HbaseStore (index → rowkeys →
    // getRowsWithColumns), exactly as against an HBase Thrift server.
    if !args.no_thrift {
        thrift::thrift_lookups(
            &args,
            &config,
            &table,
            &instance,
            &security,
            &http_threads,
            &client,
            &api_key,
            &sample,
            &data_dir,
            &mut report,
        )
        .await?;
        report.extend(rss.phase_with_budget("Thrift1 lookups", instance.state.memory.as_ref()));
    }
    sampler.abort();

    report.push(measure::rss_row());
    instance.shutdown_indexers().await?;
    finish(&args, &data_dir, report)
}

/// The Kafka part, with --kafka: its own data dir and instance, the bench's first one closed.
async fn kafka_part(
    config: &HbidxConfig,
    args: &BenchArgs,
    data_dir: &std::path::Path,
    rss: &RssMonitor,
    report: &mut Vec<Row>,
) -> Result<()> {
    match &args.kafka {
        Some(brokers) => crate::kafka::run(config, args.rows, brokers, data_dir, rss, report).await,
        None => Ok(()),
    }
}

/// Clean-up and the report: the table on stdout and, with `--json`, the file.
fn finish(args: &BenchArgs, data_dir: &std::path::Path, report: Vec<Row>) -> Result<()> {
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

fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("hbidx-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
