//! Reindexing inside the serving process (`POST /v1/tables/{table}/reindex`), from the table's
//! Kafka topic or from a scan of the table itself, while writes go on.
//!
//! 1. **Build.** A shadow index is built in `index/<table>.reindex/`. Lookups and the live
//!    indexer carry on meanwhile.
//!    - `{"from": "kafka"}`: a second indexer replays the table's topic from the earliest offset
//!      (no consumer group) until its checkpoint covers the high watermarks taken when the job
//!      started.
//!    - `{"from": "store"}`: the shadow starts from the live index's committed checkpoint, then
//!      every row of the table is scanned (indexed columns only) and merged in; with
//!      `[cluster]`, every row of this instance's shard, a range scan. Rows reflect at
//!      least every event up to that checkpoint (a change-feed event is written with its row;
//!      Kafka events reach the store before the index commits), so when the new live indexer
//!      resumes from the checkpoint, nothing is lost, and events it re-applies merge
//!      idempotently. The shadow's live row count must equal the rows scanned, or the job fails
//!      and nothing is swapped.
//! 2. **Swap.** The live indexer stops (final commit); what it took from the repair queue during
//!    the build goes into the shadow too (below); the shadow replaces the live index durably
//!    (`index_dirs.rs`); every searcher of the table adopts it in one step, and a new live
//!    indexer resumes the source from the shadow's own checkpoint (so the events that arrived
//!    during the build are indexed too).
//!
//! # Writes during the build
//!
//! Every write acknowledged during the job must be in the new index, with no repair run by
//! hand. Two things would otherwise lose some ([`Keep`]):
//!
//! - **The change feed's trims.** The live indexer trims the feed up to each checkpoint it
//!   commits, so by the swap the events after the shadow's start checkpoint would be gone, and
//!   the rows they changed after the scan passed them with them. The job holds the feed
//!   ([`hbidx_store::FeedHold`]) instead of having the shadow replay what the live indexer
//!   applied: the feed is already the durable, ordered log of exactly those events, the new
//!   live indexer already resumes from the start checkpoint, and a hold costs only the events
//!   written during one job, kept on disk a little longer. Kafka keeps its events by retention.
//! - **The repair queue.** Writes to HBase through this instance, and repairs, reach the live
//!   index through the repair queue, which no source replays (with no topic there is no
//!   source at all). The job records what the queue accepts from the start of the build, and
//!   applies it to the shadow once the live indexer has stopped, before the swap. Each is a
//!   merge by cell timestamp, so one the scan already saw changes nothing.
//!
//! Lookups never stop: until the adopt they read the old index (its files stay mapped), after
//! it the new one. A crash at any point of the swap leaves one whole index
//! (`index_dirs::recover` at the next start).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use hbidx_indexer::{
    CHANGE_FEED, Checkpoint, IndexerHandle, IndexerStats, TableIndexWriter, WriterOptions,
};
use hbidx_indexer::{DeadLetterFile, KafkaSource, ReplayTargets};
use hbidx_query::Reindexer;
use hbidx_query::SharedState;

use crate::index_dirs::{self, shadow_dir};
use crate::server::{Indexers, Wiring};

/// What a reindex keeps from being let go while its shadow is built: the change feed's events
/// (a hold on trims) and a record of the repair queue (see the module docs). Dropped, both end.
struct Keep {
    hold: Option<hbidx_store::FeedHold>,
    stats: Arc<IndexerStats>,
}

impl Keep {
    fn start(wiring: &Wiring, stats: Arc<IndexerStats>, table: &str) -> Result<Keep> {
        stats.repairs.record();
        let hold = match &wiring.embedded {
            Some(store) if wiring.kafka_for(table).is_none() => Some(
                store
                    .hold_feed(table)
                    .with_context(|| format!("holding the change feed of {table}"))?,
            ),
            _ => None,
        };
        Ok(Keep { hold, stats })
    }
}

impl Drop for Keep {
    fn drop(&mut self) {
        // A job that failed before its swap: stop recording.
        drop(self.stats.repairs.take_recorded());
    }
}

pub struct TableReindexer {
    pub wiring: Arc<Wiring>,
    pub indexers: Indexers,
}

impl Reindexer for TableReindexer {
    fn check(&self, table: &str, from: &str) -> Result<(), String> {
        match from {
            "store" => Ok(()),
            "kafka" if self.wiring.kafka_for(table).is_none() => Err(format!(
                "table \"{table}\" has no Kafka source ([[sources]]) to replay"
            )),
            "kafka" => Ok(()),
            other => Err(format!("cannot reindex from \"{other}\" (store or kafka)")),
        }
    }

    fn start(&self, state: SharedState, table: String, from: String, job: u64) {
        let wiring = self.wiring.clone();
        let indexers = self.indexers.clone();
        // On the main runtime, not the HTTP thread that took the request: a reindex runs for
        // minutes and must neither slow that thread's requests nor stall behind them.
        let spawner = state.clone();
        spawner.spawn_background(async move {
            let result = if from == "store" {
                run_store(&state, &wiring, &indexers, &table, job).await
            } else {
                run(&state, &wiring, &indexers, &table, job).await
            };
            if let Err(err) = &result {
                tracing::error!(table = %table, job, error = %format!("{err:#}"), "reindex failed");
            } else {
                tracing::info!(table = %table, job, "reindex done");
            }
            state
                .jobs
                .finish(job, result.map_err(|err| format!("{err:#}")));
        });
    }
}

/// Events the checkpoint covers towards the targets, and the total to cover.
fn progress(source: &str, targets: &ReplayTargets, checkpoint: &Checkpoint) -> (u64, u64, bool) {
    let mut done = 0u64;
    let mut total = 0u64;
    let mut complete = true;
    for (partition, high) in targets {
        let high = (*high).max(0) as u64;
        let next = checkpoint
            .position(source, *partition)
            .map_or(0, |offset| (offset + 1).max(0) as u64);
        total += high;
        done += next.min(high);
        complete &= next >= high;
    }
    (done, total, complete)
}

async fn run(
    state: &SharedState,
    wiring: &Arc<Wiring>,
    indexers: &Indexers,
    table_name: &str,
    job: u64,
) -> Result<()> {
    let runtime = table_runtime(state, table_name)?;
    let table = runtime.config.clone();
    let kafka = wiring
        .kafka_for(table_name)
        .ok_or_else(|| anyhow!("table {table_name} has no Kafka source"))?
        .clone();
    let live_dir = wiring.index_dir(table_name);
    let shadow = shadow_dir(&live_dir);
    let keep = Keep::start(wiring, runtime.stats.clone(), table_name)?;

    // 1. Replay into the shadow.
    state.jobs.update(job, |j| j.phase = "replaying".into());
    let (shadow_handle, targets) = {
        let shadow = shadow.clone();
        let table = table.clone();
        let kafka = kafka.clone();
        let dead_letters = DeadLetterFile::new(
            &wiring.data_dir.join("deadletters"),
            &format!("{table_name}.reindex"),
            kafka.dead_letter_max_bytes,
        );
        let policy = wiring.policy.clone();
        let options = wiring.writer_options.clone();
        let own_range = wiring.own_range(table_name);
        tokio::task::spawn_blocking(move || -> Result<(IndexerHandle, ReplayTargets)> {
            if shadow.exists() {
                std::fs::remove_dir_all(&shadow)
                    .with_context(|| format!("removing an old {}", shadow.display()))?;
            }
            let (writer, _searcher) =
                hbidx_indexer::open_table_index(&shadow, table.clone(), &options)?;
            let (source, targets) = KafkaSource::replay(kafka, table, dead_letters)?;
            let source = source.with_own_range(own_range);
            let source = hbidx_indexer::Prefetch::new(source)?;
            let handle = hbidx_indexer::spawn_shadow(writer, Box::new(source), policy)?;
            Ok((handle, targets))
        })
        .await??
    };
    let source_name = kafka.source_name();
    let mut indexed = shadow_handle.indexed.clone();
    let mut last_progress = (0u64, Instant::now());
    loop {
        let (done, total, complete) = progress(&source_name, &targets, &indexed.borrow());
        state.jobs.update(job, |j| {
            j.done = done;
            j.total = total;
        });
        if complete {
            break;
        }
        if done > last_progress.0 {
            last_progress = (done, Instant::now());
        } else if last_progress.1.elapsed() > Duration::from_secs(300) {
            let shadow_handle = shadow_handle;
            tokio::task::spawn_blocking(move || shadow_handle.shutdown()).await?;
            return Err(anyhow!(
                "the replay made no progress for 5 minutes ({done} of {total} events)"
            ));
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), indexed.changed()).await;
    }

    // 2. Swap.
    let options = wiring.writer_options.clone();
    let shadow_done = move || {
        shadow_handle.shutdown();
        Ok(hbidx_indexer::open_table_index(&shadow, table, &options)?.0)
    };
    swap(state, wiring, indexers, table_name, job, shadow_done, keep).await
}

/// Stops the live indexer, applies what it took from the repair queue during the build to the
/// shadow, replaces the live index with the shadow durably, has every searcher adopt the new
/// index and starts the new live indexer on the shadow's checkpoint. `finish_shadow` runs first,
/// on a blocking thread: it returns the shadow's writer with everything of the build
/// committed. `keep` ends once the new live indexer runs.
async fn swap(
    state: &SharedState,
    wiring: &Arc<Wiring>,
    indexers: &Indexers,
    table_name: &str,
    job: u64,
    finish_shadow: impl FnOnce() -> Result<TableIndexWriter> + Send + 'static,
    keep: Keep,
) -> Result<()> {
    let runtime = table_runtime(state, table_name)?;
    let table = runtime.config.clone();
    let live_dir = wiring.index_dir(table_name);
    state.jobs.update(job, |j| j.phase = "swapping".into());
    let live = indexers
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(table_name)
        .ok_or_else(|| anyhow!("table {table_name} has no live indexer"))?;
    let wiring = wiring.clone();
    let name = table_name.to_string();
    // The indexer that runs on the table afterwards (the new one, or the old one resumed when
    // the swap failed before the new index moved in), and the swap's error.
    let (handle, result) = tokio::task::spawn_blocking(move || {
        let (publish, stats) = live.channel();
        let shadow = finish_shadow();
        live.shutdown();
        // Every mutation the live indexer took from the queue was recorded when accepted; the
        // ones accepted from now on stay queued for the new live indexer.
        let recorded = stats.repairs.take_recorded();
        let moved_in = std::cell::Cell::new(false);
        let replaced = shadow.and_then(|mut writer| {
            if recorded.overflowed > 0 {
                return Err(anyhow!(
                    "{} writes and repairs reached the live index during the reindex, more than the {} a reindex keeps; the live index is unchanged: run the reindex again when writes are fewer",
                    recorded.mutations.len() as u64 + recorded.overflowed,
                    hbidx_indexer::RECORDING_CAPACITY
                ));
            }
            for mutation in &recorded.mutations {
                writer.apply_repair(mutation)?;
            }
            writer.commit()?;
            writer.finish()?;
            tracing::info!(table = %name, mutations = recorded.mutations.len(), "applied the writes and repairs taken during the reindex to the new index");
            index_dirs::swap(&live_dir, |step| {
                moved_in.set(step >= index_dirs::SwapStep::MovedIn);
                true
            })
        });
        if replaced.is_err() && !moved_in.get() {
            // The live index is whole: its indexer resumes on it.
            let _ = std::fs::remove_dir_all(shadow_dir(&live_dir));
        }
        let restarted = (|| -> Result<IndexerHandle> {
            let (writer, searcher) =
                hbidx_indexer::open_table_index(&live_dir, table.clone(), &wiring.writer_options)?;
            runtime.searcher.adopt(&searcher);
            let source = wiring.live_source(&table)?;
            Ok(hbidx_indexer::spawn_with(
                writer,
                source,
                wiring.policy.clone(),
                publish,
                stats,
            )?)
        })();
        match (restarted, replaced) {
            (Ok(handle), replaced) => (Some(handle), replaced),
            (Err(err), Ok(())) => (None, Err(err)),
            (Err(err), Err(first)) => (None, Err(first.context(format!("{err:#}")))),
        }
    })
    .await?;
    drop(keep);
    match handle {
        Some(handle) => {
            indexers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(table_name.to_string(), handle);
            result.context("the swap failed; the table's indexer resumed on the old index")
        }
        // No live indexer runs at this point; a restart of the process recovers the
        // directories (index_dirs::recover) and resumes indexing.
        None => Err(result
            .err()
            .unwrap_or_else(|| anyhow!("no live indexer"))
            .context("swap failed; restart hbidx to recover the index directory")),
    }
}

fn table_runtime(state: &SharedState, table_name: &str) -> Result<hbidx_query::TableRuntime> {
    state
        .tables
        .get(table_name)
        .cloned()
        .ok_or_else(|| anyhow!("unknown table {table_name}"))
}

/// Rows per batch of the start-up rebuild's scan and of the deletes copied into a shadow.
const SCAN_BATCH: usize = hbidx_schema::config::DEFAULT_SCAN_CACHING as usize;

async fn run_store(
    state: &SharedState,
    wiring: &Arc<Wiring>,
    indexers: &Indexers,
    table_name: &str,
    job: u64,
) -> Result<()> {
    let runtime = table_runtime(state, table_name)?;
    let table = runtime.config.clone();
    let shadow = shadow_dir(&wiring.index_dir(table_name));
    let keep = Keep::start(wiring, runtime.stats.clone(), table_name)?;
    // Taken before the first row is read: see the module docs. Events at or below the feed's
    // floor are gone from it, and their rows are what the scan reads; the ones above are all
    // still there, and the hold keeps them until the new live indexer has taken over.
    let mut start_checkpoint = runtime.indexed.borrow().clone();
    if let Some(hold) = &keep.hold {
        let floor = hold.floor();
        if start_checkpoint.position(CHANGE_FEED, 0).unwrap_or(0) < floor {
            start_checkpoint.advance(CHANGE_FEED, 0, floor);
        }
    }
    let estimate = runtime.searcher.stats().rows;
    state.jobs.update(job, |j| {
        j.phase = "scanning".into();
        j.total = estimate;
    });
    let columns = hbidx_indexer::kept_columns(&table);
    let own_range = wiring.own_range(table_name);
    let rows = wiring.rows.clone();
    let options = wiring.writer_options.clone();
    let jobs_state = state.clone();
    let handle = tokio::runtime::Handle::current();
    let table_for_scan = table.clone();
    let name = table_name.to_string();
    let live_searcher = runtime.searcher.clone();
    let own = own_range.clone();
    let scan_rows = wiring.scan_rows;
    let writer = tokio::task::spawn_blocking(move || -> Result<TableIndexWriter> {
        if shadow.exists() {
            std::fs::remove_dir_all(&shadow)
                .with_context(|| format!("removing an old {}", shadow.display()))?;
        }
        let (mut writer, searcher) = hbidx_indexer::open_table_index(
            &shadow,
            table_for_scan.clone(),
            &options,
        )?;
        writer.seed_checkpoint(start_checkpoint);
        // A shard scans its own range only: the other shards' rows are theirs to index (and
        // the count check below compares rows scanned with rows indexed).
        let (start, stop) = own_range.map_or((Vec::new(), None), |range| (range.start, range.stop));
        let mut request = hbidx_store::ScanRequest {
            start,
            stop,
            columns: Some(columns),
            batch: scan_rows,
            ..Default::default()
        };
        let mut scanned = 0u64;
        // One batch ahead: the next batch is read from the store while this one is indexed, so
        // a scan over Thrift (HBase answering in tens of µs a row) and the indexing (about
        // ten) overlap instead of adding up. At most two batches are in memory.
        let scan = |request: hbidx_store::ScanRequest| {
            let (rows, name) = (rows.clone(), name.clone());
            handle.spawn(async move { rows.scan(&name, &request).await })
        };
        let mut next = Some(scan(request.clone()));
        let (mut waited, mut indexing, mut pages) = (Duration::ZERO, Duration::ZERO, 0u64);
        while let Some(pending) = next.take() {
            // This is a blocking thread, not a runtime worker, so waiting on the async store
            // here is allowed.
            let wait_started = Instant::now();
            let batch = handle
                .block_on(pending)
                .context("the scan task")?
                .with_context(|| format!("scanning table {name}"))?;
            waited += wait_started.elapsed();
            pages += 1;
            if let Some(start) = batch.next_start {
                request.start = start;
                next = Some(scan(request.clone()));
            }
            let index_started = Instant::now();
            for row in batch.rows {
                writer.apply_scanned(&row_as_puts(&name, row))?;
                scanned += 1;
            }
            // A commit is the only point where the writer waits for tantivy's indexing threads:
            // without one, documents queue for them without bound (up to 10,000 batches of
            // 1024) while the scan outruns them, gigabytes at 10M rows.
            if writer.uncommitted_ops() >= REBUILD_COMMIT_ROWS {
                writer.commit()?;
            }
            indexing += index_started.elapsed();
            jobs_state.jobs.update(job, |j| {
                j.done = scanned;
                j.total = j.total.max(scanned);
            });
        }
        // What bounds a rebuild: time spent waiting for the store's next batch (the store or
        // the network is the limit; a larger scan batch or a faster store helps) against time
        // spent indexing (this process's CPU is the limit).
        tracing::info!(
            table = %name,
            rows = scanned,
            pages,
            store_wait_ms = waited.as_millis() as u64,
            indexing_ms = indexing.as_millis() as u64,
            "scanned the store"
        );
        jobs_state.jobs.update(job, |j| j.phase = "checking".into());
        writer.commit()?;
        let indexed = searcher.stats().rows;
        if indexed != scanned {
            return Err(anyhow!(
                "count check failed: scanned {scanned} rows with indexed values but the new index has {indexed}; the live index is unchanged"
            ));
        }
        // A scan shows only what HBase doesn't mask: a row deleted at ts 200 is simply absent.
        // When the new live indexer replays the topic from the start checkpoint, a late put
        // at ts 150 (masked in HBase by that delete) would bring the row back as a ghost. The
        // live index remembers the deletes (tombstones in its row states), so they go into the
        // new index too: whatever HBase masks, they mask. After the count check, since a delete
        // that came after the scan read its row lowers the count rightly.
        let mut copied = 0u64;
        live_searcher.each_delete(|rowkey, state| {
            if own.as_ref().is_some_and(|range| !range.contains(&rowkey)) {
                return Ok(());
            }
            if let Some(ops) = deletes_of(&state) {
                writer.apply_repair(&hbidx_schema::model::Mutation {
                    table: name.clone(),
                    rowkey,
                    ops,
                })?;
                copied += 1;
            }
            Ok(())
        })?;
        writer.commit()?;
        tracing::info!(table = %name, rows = copied, "copied the live index's deletes into the new index");
        jobs_state.jobs.update(job, |j| j.total = scanned);
        Ok(writer)
    })
    .await??;
    swap(
        state,
        wiring,
        indexers,
        table_name,
        job,
        move || Ok(writer),
        keep,
    )
    .await
}

/// Rows a scan applies between two commits: bounds the documents queued for tantivy's indexing
/// threads and, should rows come out of order, the writer's in-memory row states (a scan in
/// rowkey order into an empty index keeps none: `TableIndexWriter::apply_scanned`). The scan
/// outruns the indexing threads, so most of a commit's rows wait in that queue: tens of MB at
/// this size, ~100 MB more of peak RSS at 200k. The price is more, smaller first segments for
/// the shadow's merges: no measurable scan time at 1M rows; at 10M a fifth to a quarter slower
/// (24k-26k against 32k-34k rows/s at 200k, in separate runs).
const REBUILD_COMMIT_ROWS: usize = 50_000;

/// Rebuilds, at start, a table's index from the embedded store's rows: one built for another
/// schema (the table's fields changed, or an older hbidx wrote another document layout), or one
/// that can't resume from its checkpoint (`server::feed_mismatch`). It is a store reindex with
/// no live indexer to stop yet: the shadow starts at `checkpoint`, every row with indexed
/// values is merged in, the count check gates the swap, and the live indexer then resumes its
/// source from that checkpoint (events after it are re-applied, idempotently). A crash
/// part-way leaves a shadow without `READY`, which the next start removes before rebuilding
/// again; a crash during the swap is finished by `index_dirs::recover`.
pub fn rebuild_from_store(
    index_dir: &Path,
    table: &Arc<hbidx_schema::config::TableConfig>,
    store: &hbidx_store::EmbeddedStore,
    options: &WriterOptions,
    checkpoint: Checkpoint,
) -> Result<()> {
    let shadow = shadow_dir(index_dir);
    if shadow.exists() {
        std::fs::remove_dir_all(&shadow)
            .with_context(|| format!("removing an old {}", shadow.display()))?;
    }
    let started = Instant::now();
    let (mut writer, searcher) = hbidx_indexer::open_table_index(&shadow, table.clone(), options)?;
    writer.seed_checkpoint(checkpoint);
    let mut request = hbidx_store::ScanRequest {
        columns: Some(hbidx_indexer::kept_columns(table)),
        batch: SCAN_BATCH,
        ..Default::default()
    };
    let mut scanned = 0u64;
    loop {
        let batch = store
            .scan_sync(&table.name, &request)
            .with_context(|| format!("scanning table {}", table.name))?;
        for row in batch.rows {
            writer.apply_scanned(&row_as_puts(&table.name, row))?;
            scanned += 1;
        }
        if writer.uncommitted_ops() >= REBUILD_COMMIT_ROWS {
            writer.commit()?;
        }
        match batch.next_start {
            Some(next) => request.start = next,
            None => break,
        }
    }
    writer.commit()?;
    let indexed = searcher.stats().rows;
    writer.finish()?;
    drop(searcher);
    if indexed != scanned {
        return Err(anyhow!(
            "count check failed: scanned {scanned} rows with indexed values but the rebuilt index has {indexed}; the old index is left in place"
        ));
    }
    index_dirs::swap(index_dir, |_| true)?;
    tracing::info!(table = %table.name, rows = scanned, ms = started.elapsed().as_millis() as u64, "rebuilt the index from the store");
    Ok(())
}

/// The deletes a row state remembers, as operations (`None` when it remembers none).
fn deletes_of(state: &hbidx_store::RowState) -> Option<Vec<hbidx_schema::model::CellOp>> {
    use hbidx_schema::model::CellOp;
    let mut ops: Vec<CellOp> = state
        .row_tombstone
        .map(|ts| CellOp::DeleteRow { ts })
        .into_iter()
        .collect();
    ops.extend(
        state
            .family_tombstones
            .iter()
            .map(|(family, ts)| CellOp::DeleteFamily {
                family: family.clone(),
                ts: *ts,
            }),
    );
    ops.extend(
        state
            .cells
            .iter()
            .filter(|(_, cell)| cell.value.is_none())
            .map(|(column, cell)| CellOp::DeleteCell {
                column: column.clone(),
                ts: cell.ts,
            }),
    );
    (!ops.is_empty()).then_some(ops)
}

/// A scanned row as the mutation that indexes it: one put per visible cell, at the cell's own
/// timestamp (so a newer event already in the index still wins).
fn row_as_puts(table: &str, row: hbidx_store::Row) -> hbidx_schema::model::Mutation {
    let ops = row
        .cells
        .into_iter()
        .map(|(column, cell)| hbidx_schema::model::CellOp::Put {
            column,
            ts: cell.ts,
            value: cell.value,
        })
        .collect();
    hbidx_schema::model::Mutation {
        table: table.to_owned(),
        rowkey: row.rowkey,
        ops,
    }
}
