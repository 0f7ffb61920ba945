//! Phase 6: batch lookups, a reindex by table scan, a full verify, and updates of a tenth of
//! the rows.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hbidx_demo::people::PeopleGen;
use hbidx_demo::{DEMO_SEED, PersonColumns};
use hbidx_indexer::CHANGE_FEED;
use serde_json::json;

use super::BATCH;
use super::measure::{cpu_per_event, percentile, process_cpu_seconds};
use crate::bench::Row;
use crate::report::UniformSample;
use hbidx_store::now_ms;

/// One row in this many gets new values in the updates phase.
const UPDATE_EVERY: u64 = 10;

/// Batch lookups of 1000 phones a call, with `extra` merged into each request body; each
/// call's phones spread over the whole table.
pub(super) async fn batch_lookups(
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
        let started = Instant::now();
        found += batch_call(client, base, table, sample.batch(call, 1000), extra).await?;
        millis.push(started.elapsed().as_secs_f64() * 1e3);
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

/// One batch lookup of `phones`, with `extra` merged into the request body: the rows found.
async fn batch_call(
    client: &reqwest::Client,
    base: &str,
    table: &str,
    phones: Vec<&str>,
    extra: &serde_json::Value,
) -> Result<u64> {
    let mut request = json!({"field": "phone", "values": phones});
    if let (Some(request), Some(extra)) = (request.as_object_mut(), extra.as_object()) {
        request.extend(extra.clone());
    }
    let body: serde_json::Value = client
        .post(format!("{base}/v1/tables/{table}/rows:batch-lookup"))
        .json(&request)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(body["count"].as_u64().unwrap_or(0))
}

/// Before the timed lookups: every sampled phone once, 1000 a call, so that wrk measures a
/// node whose page cache holds the rows it is asked for, as a node in service does, rather
/// than the first reads of a store far bigger than its block cache whose pages the kernel
/// may have evicted since the load. This row is that first pass: its time and what it read
/// from disk (`read_bytes` of /proc/self/io).
pub(super) async fn warm_up(
    client: &reqwest::Client,
    base: &str,
    table: &str,
    sample: &UniformSample,
) -> Result<Row> {
    let calls = sample.phones.len().div_ceil(1000).max(1);
    let read_before = super::measure::io_bytes("read_bytes");
    let started = Instant::now();
    let mut found = 0u64;
    for call in 0..calls {
        found += batch_call(client, base, table, sample.batch(call, 1000), &json!({})).await?;
    }
    let secs = started.elapsed().as_secs_f64();
    let read_mb = super::measure::io_bytes("read_bytes")
        .zip(read_before)
        .map_or(f64::NAN, |(after, before)| {
            after.saturating_sub(before) as f64 / 1e6
        });
    let rate = sample.phones.len() as f64 / secs;
    Ok(Row::new(
        "lookup warm-up: each sampled phone once, 1000 a call",
        format!(
            "{} phones in {secs:.1}s ({rate:.0} phones/s, {found} rows found), {read_mb:.0} MB read from disk",
            sample.phones.len()
        ),
    )
    .value(rate, "phones/s")
    .also("read from disk", read_mb, "MB"))
}

/// `POST reindex {"from": "store"}` and wait for the swap: rows scanned per second.
pub(super) async fn scan_reindex(
    client: &reqwest::Client,
    base: &str,
    table: &str,
    report: &mut Vec<Row>,
) -> Result<()> {
    let (job, secs) = run_job(client, base, table, "reindex", json!({"from": "store"})).await?;
    let rows = job["done"].as_u64().unwrap_or(0);
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

/// `POST verify {"full": true}` (what `hbidx verify --full` runs) and wait for its report:
/// rows checked per second.
pub(super) async fn verify_full(
    client: &reqwest::Client,
    base: &str,
    table: &str,
    settled: std::time::Duration,
    report: &mut Vec<Row>,
) -> Result<()> {
    let (job, secs) = run_job(client, base, table, "verify", json!({"full": true})).await?;
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
                "{rate:.0} rows/s ({index_rows} index rows and {store_rows} store rows in {secs:.2}s; drift {drift}; after {:.1}s for the reindex's merges)",
                settled.as_secs_f64()
            ),
        )
        .value(rate, "rows/s"),
    );
    Ok(())
}

/// Starts the job `POST …/{table}/{action}` with `body` and waits for it: its last status and
/// the seconds it took.
async fn run_job(
    client: &reqwest::Client,
    base: &str,
    table: &str,
    action: &str,
    body: serde_json::Value,
) -> Result<(serde_json::Value, f64)> {
    let started = Instant::now();
    let job: serde_json::Value = client
        .post(format!("{base}/v1/tables/{table}/{action}"))
        .json(&body)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let job = wait_job(client, base, &job).await?;
    Ok((job, started.elapsed().as_secs_f64()))
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

/// Updates: every [`UPDATE_EVERY`]th row gets a new phone and name (the same uids, so the same
/// rowkeys), written in batches while the indexer runs, timed from the first write until the
/// index covers the last. The indexer reads each row's previous state to drop its old terms.
/// The CPU per event leaves out the writing thread's own (generation and store writes).
pub(super) async fn updates(
    instance: &hbidx_serve::Instance,
    table: &hbidx_schema::config::TableConfig,
    sample: &mut UniformSample,
    rows: u64,
) -> Result<Row> {
    let store = instance.embedded()?.clone();
    let runtime_table = instance
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
            let uid = hbidx_demo::people::uid_of(i);
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
