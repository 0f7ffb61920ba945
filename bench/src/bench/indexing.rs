//! Phases 1 to 4b: loading the people into the store, indexing its change feed, the event →
//! searchable latency, the index and store sizes, and a trickle of writes.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hbidx_demo::people::{PeopleGen, Person};
use hbidx_demo::{DEMO_SEED, PersonColumns};
use hbidx_indexer::{CHANGE_FEED, CommitPolicy, IndexStats};
use hbidx_schema::config::{HbidxConfig, TableConfig};

use super::measure::{commit_summary, cpu_per_event, io_bytes, process_cpu_seconds};
use super::{BATCH, BenchArgs};
use crate::bench::Row;
use crate::report::UniformSample;
use hbidx_store::now_ms;

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

/// Writes the first `rows` people as CSV (uid,name,phone,idcard,city).
pub(super) fn export_csv(path: &std::path::Path, rows: usize) -> Result<()> {
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    for p in people_batches(rows).flatten() {
        writeln!(
            out,
            "{},{},{},{},{}",
            p.uid, p.name, p.phone, p.idcard, p.city
        )?;
    }
    out.flush()?;
    Ok(())
}

/// Phase 1: the people written into the store (and its change feed) with no indexer running.
/// Returns the sample of their phones that the lookups use.
pub(super) fn load_store(
    args: &BenchArgs,
    config: &HbidxConfig,
    data_dir: &std::path::Path,
    table: &TableConfig,
    columns: &PersonColumns,
    report: &mut Vec<Row>,
) -> Result<UniformSample> {
    let rows = args.rows as u64;
    let mut sample = UniformSample::new(rows);
    // Opened as `hbidx serve` opens it: with the `[memory]` budget's block cache and memtables
    // (fjall keeps a keyspace's memtable limit from its creation, here), so that this phase's
    // memory rows measure the budget the later phases run under.
    let opened = hbidx_serve::open_rows(config, data_dir)?;
    let store = opened
        .embedded()
        .context("the bench writes its people into the embedded store")?;
    let ts = now_ms();
    let started = Instant::now();
    let mut i = 0u64;
    for people in people_batches(args.rows) {
        let mut batch = Vec::with_capacity(people.len());
        for person in &people {
            sample.offer(i, &person.phone);
            i += 1;
            batch.push(columns.mutation(table, person, ts)?);
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
    Ok(sample)
}

/// Phase 2: the store reopened, then the indexer started on the full feed and timed until it
/// has committed everything. Returns the instance, indexer idle.
pub(super) async fn index_feed(
    args: &BenchArgs,
    config: &HbidxConfig,
    data_dir: &std::path::Path,
    policy: &CommitPolicy,
    security: &hbidx_query::auth::SecurityConfig,
    table: &TableConfig,
    report: &mut Vec<Row>,
) -> Result<hbidx_serve::Instance> {
    let rows = args.rows as u64;
    // Reopening the store replays fjall's journal of the phase 1 load: store recovery, which
    // any restart after a load pays, not indexing. It is timed and reported on its own row, so
    // the indexing row measures the indexer alone, from its start to the commit covering the
    // whole feed (reading the feed, tantivy, commits, feed trims).
    let store_started = Instant::now();
    let store_cpu_before = process_cpu_seconds();
    let opened = hbidx_serve::open_rows(config, data_dir)?;
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
    let instance = hbidx_serve::open_with_rows(
        config,
        data_dir,
        policy,
        hbidx_query::auth::Auth::new(security),
        opened,
    )?;
    instance
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
    let commits = instance
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
    Ok(instance)
}

/// Phase 3: single rows written at a fixed rate with the indexer idle, each timed until it is
/// searchable (the published index checkpoint covers its offset).
pub(super) async fn searchable_latency(
    args: &BenchArgs,
    instance: &hbidx_serve::Instance,
    runtime_table: &hbidx_query::TableRuntime,
    table: &TableConfig,
    columns: &PersonColumns,
) -> Result<Row> {
    let people =
        PeopleGen::starting_at(DEMO_SEED ^ 0x5eed, args.rows as u64).take(args.latency_writes);
    let mut latencies = write_steadily(
        instance,
        runtime_table,
        table,
        columns,
        people,
        Duration::from_millis(2),
    )
    .await?;
    let detail = format!("{} writes at 500/s", latencies.len());
    Ok(Row::latencies(
        "event → searchable latency",
        &mut latencies,
        &detail,
    ))
}

/// Writes `people` one row at a time, one every `every`, and returns how long each took
/// (ms) from its write until it was searchable: the published index checkpoint covers its
/// change-feed offset.
async fn write_steadily(
    instance: &hbidx_serve::Instance,
    runtime_table: &hbidx_query::TableRuntime,
    table: &TableConfig,
    columns: &PersonColumns,
    mut people: impl Iterator<Item = Person>,
    every: Duration,
) -> Result<Vec<f64>> {
    let mut latencies = Vec::new();
    let mut indexed = runtime_table.indexed.clone();
    let mut pending: std::collections::VecDeque<(i64, Instant)> = Default::default();
    let mut ticker = tokio::time::interval(every);
    let mut done_writing = false;
    while !(done_writing && pending.is_empty()) {
        tokio::select! {
            _ = ticker.tick(), if !done_writing => {
                match people.next() {
                    Some(person) => {
                        let mutation = columns.mutation(table, &person, now_ms())?;
                        let receipt = instance.embedded()?.mutate_sync(vec![mutation])?;
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
    Ok(latencies)
}

/// Phase 4: the index size once the idle compaction (`CommitPolicy::compact_when_idle`) has
/// merged what it merges — the segments stay the same for a while after the idle time — and
/// the store's.
pub(super) async fn sizes(
    runtime_table: &hbidx_query::TableRuntime,
    policy: &CommitPolicy,
    data_dir: &std::path::Path,
    rows: u64,
    report: &mut Vec<Row>,
) {
    let waited = Instant::now();
    let stats = match policy.compact_when_idle {
        Some(_) => settled(runtime_table).await,
        None => runtime_table.searcher.sizes(),
    };
    report.push(index_size_row(
        &stats,
        format!(
            "; waited {:.1}s for the idle compaction",
            waited.elapsed().as_secs_f64()
        ),
    ));
    report.push(store_size_row(data_dir, rows));
    match region_report_sample(runtime_table).await {
        Ok(row) => report.push(row),
        Err(err) => tracing::warn!(error = %err, "region report sample"),
    }
}

/// The ops page's region report reads a sample of the live rowkeys every 10 s while the table
/// changes ([`hbidx_query::HOTSPOT_SAMPLE`]): the CPU of one read must not grow with the table.
/// The least of five reads: the first one also faults the `_rk` column's pages in, and merges
/// running beside it move the others by tens of percent.
pub(super) async fn region_report_sample(runtime_table: &hbidx_query::TableRuntime) -> Result<Row> {
    let searcher = runtime_table.searcher.clone();
    let (cpu, rowkeys) = tokio::task::spawn_blocking(move || -> Result<_> {
        let mut cpu = Vec::new();
        let mut rowkeys = 0;
        for _ in 0..5 {
            let before = crate::report::thread_cpu_seconds();
            rowkeys = searcher
                .live_rowkeys_sample(hbidx_query::HOTSPOT_SAMPLE)?
                .rowkeys
                .len();
            if let Some((after, before)) = crate::report::thread_cpu_seconds().zip(before) {
                cpu.push((after - before) * 1000.0);
            }
        }
        Ok((cpu, rowkeys))
    })
    .await??;
    let least = cpu.iter().copied().reduce(f64::min).unwrap_or(f64::NAN);
    Ok(Row::new(
        "region report: live rowkeys sampled (ops page)",
        format!("{rowkeys} rowkeys in {least:.1} ms of CPU (the least of 5 reads)"),
    )
    .value(least, "ms"))
}

/// The longest [`settled`] waits for the index's merges.
const SETTLE_LIMIT: Duration = Duration::from_secs(600);

/// The index's sizes once the idle compaction has nothing left to merge and none is merging:
/// down to one segment, or to the few it keeps apart. At most [`SETTLE_LIMIT`], with a warning
/// when it runs out.
pub(super) async fn settled(runtime_table: &hbidx_query::TableRuntime) -> IndexStats {
    let started = Instant::now();
    let busy = || {
        runtime_table
            .stats
            .compacting
            .load(std::sync::atomic::Ordering::Relaxed)
            || runtime_table.searcher.compaction_pending()
    };
    while busy() {
        if started.elapsed() >= SETTLE_LIMIT {
            // The rows measured next then run beside a merge: say so, not only in their text.
            tracing::warn!(
                waited_s = started.elapsed().as_secs(),
                "the index's merges are still running; the next rows are measured beside them"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    runtime_table.searcher.sizes()
}

/// The process's CPU time and bytes written to storage from a starting point on: what index
/// maintenance costs per written row, background merges and the store's work included.
struct Spent {
    cpu: Option<f64>,
    written: Option<u64>,
}

impl Spent {
    fn start() -> Self {
        Self {
            cpu: process_cpu_seconds(),
            written: io_bytes("write_bytes"),
        }
    }

    /// KiB written per event, the CPU text of a row and CPU µs per event, since `start`.
    fn per_event(&self, events: u64) -> (f64, String, f64) {
        let cpu = process_cpu_seconds()
            .zip(self.cpu)
            .map(|(after, before)| after - before);
        let (cpu_text, micros) = cpu_per_event(cpu, events);
        let kib = io_bytes("write_bytes")
            .zip(self.written)
            .map_or(f64::NAN, |(after, before)| {
                after.saturating_sub(before) as f64 / events.max(1) as f64 / 1024.0
            });
        (kib, cpu_text, micros)
    }
}

/// The rows of each of phase 4b's bursts, and how many bursts.
const TRICKLE_BURST: usize = 100;
const TRICKLE_BURSTS: usize = 5;

/// Phase 4b: a trickle, a quiet table's normal life: bursts of `TRICKLE_BURST` new rows at
/// 200/s, each followed by a quiet spell that ends in the idle compaction (the bench's policy
/// lets them run 10 s apart). What the process spends on it per written row — CPU, and bytes
/// written to disk (store, feed, index, merges) — is the cost of index maintenance in steady
/// state, which must not grow with the table.
pub(super) async fn trickle(
    args: &BenchArgs,
    instance: &hbidx_serve::Instance,
    runtime_table: &hbidx_query::TableRuntime,
    policy: &CommitPolicy,
    table: &TableConfig,
    columns: &PersonColumns,
) -> Result<Row> {
    let idle = policy.compact_when_idle.unwrap_or(Duration::from_secs(3));
    let mut people =
        PeopleGen::starting_at(DEMO_SEED ^ 0x7e1c, (args.rows + args.latency_writes) as u64)
            .take(TRICKLE_BURST * TRICKLE_BURSTS);
    let spent = Spent::start();
    let started = Instant::now();
    let mut ticker = tokio::time::interval(Duration::from_millis(5));
    for _ in 0..TRICKLE_BURSTS {
        for person in people.by_ref().take(TRICKLE_BURST) {
            ticker.tick().await;
            let mutation = columns.mutation(table, &person, now_ms())?;
            instance.embedded()?.mutate_sync(vec![mutation])?;
        }
        // The quiet spell, until the compaction it starts has finished.
        tokio::time::sleep(idle).await;
        settled(runtime_table).await;
    }
    let (per_event, cpu_text, micros) = spent.per_event((TRICKLE_BURST * TRICKLE_BURSTS) as u64);
    let stats = runtime_table.searcher.sizes();
    Ok(Row::new(
        "trickle (bursts, idle compaction after each)",
        format!(
            "{TRICKLE_BURSTS} bursts of {TRICKLE_BURST} rows in {:.1}s: {per_event:.1} KiB written/row{cpu_text}, {} segments after",
            started.elapsed().as_secs_f64(),
            stats.segments
        ),
    )
    .value(per_event, "KiB/row")
    .also("CPU", micros, "µs/row"))
}

/// Phase 4c: a steady trickle, a busy table's normal life: one new row every 20 ms (50/s) for
/// `--trickle-seconds`, never quiet long enough for the idle compaction, so only the merge
/// policy's own merges run. Per written row: the process's CPU and bytes written to disk, and
/// how long each row took to become searchable. None of it may grow with the table.
pub(super) async fn steady_trickle(
    args: &BenchArgs,
    instance: &hbidx_serve::Instance,
    runtime_table: &hbidx_query::TableRuntime,
    table: &TableConfig,
    columns: &PersonColumns,
) -> Result<Row> {
    const EVERY: Duration = Duration::from_millis(20);
    let writes = (args.trickle_seconds * 1000 / EVERY.as_millis() as u64) as usize;
    let people = PeopleGen::starting_at(
        DEMO_SEED ^ 0x57ea,
        (args.rows + args.latency_writes + TRICKLE_BURST * TRICKLE_BURSTS) as u64,
    )
    .take(writes);
    let spent = Spent::start();
    let segments_before = runtime_table.searcher.sizes().segments;
    let mut latencies =
        write_steadily(instance, runtime_table, table, columns, people, EVERY).await?;
    let events = latencies.len() as u64;
    let (per_event, cpu_text, micros) = spent.per_event(events);
    latencies.sort_by(f64::total_cmp);
    let p99 = super::percentile(&latencies, 99.0);
    Ok(Row::new(
        "steady trickle (50 writes/s, never idle)",
        format!(
            "{events} rows in {}s: {per_event:.1} KiB written/row{cpu_text}, searchable p99 {p99:.1} ms, segments {segments_before} → {}",
            args.trickle_seconds,
            runtime_table.searcher.sizes().segments
        ),
    )
    .value(per_event, "KiB/row")
    .also("CPU", micros, "µs/row")
    .also("searchable p99", p99, "ms"))
}

pub(super) fn index_size_row(stats: &hbidx_indexer::IndexStats, note: String) -> Row {
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
pub(super) fn store_size_row(data_dir: &std::path::Path, rows: u64) -> Row {
    let bytes = crate::report::disk_bytes(&data_dir.join("store"));
    let per_row = bytes as f64 / rows.max(1) as f64;
    Row::new(
        "store size on disk",
        format!("{per_row:.1} bytes/row ({:.1} MB)", bytes as f64 / 1e6),
    )
    .value(per_row, "bytes/row")
}
