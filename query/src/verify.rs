//! Drift checking: `POST /v1/tables/{table}/verify` and `hbidx verify`.
//!
//! Both ways:
//! - **index → store**: live index rows (all, or a random sample) are multi-got from the store
//!   with the indexed columns: a row the store no longer has is a *ghost*, a row whose indexed
//!   values differ is a *mismatch*;
//! - **store → index**: the table is scanned (all, or a sample run of consecutive rows starting
//!   at a sampled rowkey) and each row is looked up in the index: a row with indexed values the
//!   index lacks is *missing*.
//!
//! With `repair`, every drift's repair mutation goes to the table's live indexer (see
//! `hbidx_indexer::repair`), and the job waits until they are applied and committed.
//!
//! With `[cluster]` an instance checks its own shard: the store side scans only the shard's
//! rowkey range (the job's `range`), and index rows outside it (left from before the table was
//! sharded; the writer no longer touches them) are counted as `outside_range`, not as ghosts:
//! a repair could not remove them, `reindex --from-store` does.
//!
//! The comparison reads the index's committed state, so a write made in the last few tens of
//! milliseconds can show as drift; rerun to confirm. The report's example rowkeys go to the
//! caller (an admin), never to the log.

use std::collections::{HashSet, VecDeque};
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use hbidx_indexer::{Drift, DriftKind, diff_row, kept_columns};
use hbidx_store::{RowState, ScanRequest};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::extract::ApiJson;
use crate::jobs::JobStatus;
use crate::{ApiError, SharedState, TableRuntime};

/// Example rowkeys kept per drift kind.
const EXAMPLES: usize = 10;
/// Rows per multi-get or scan batch.
const BATCH: usize = 1000;

#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyRequest {
    /// Compare this many sampled rows each way instead of everything.
    #[schema(minimum = 1)]
    pub sample: Option<usize>,
    /// Compare everything (the default when `sample` is absent).
    #[serde(default)]
    pub full: bool,
    /// Repair what is found.
    #[serde(default)]
    pub repair: bool,
}

impl crate::extract::BodyShape for VerifyRequest {}

/// One kind of drift: how many rows, and a few of them.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct Found {
    pub count: u64,
    /// Printable rowkeys (HBase's escaping), at most ten.
    pub examples: Vec<String>,
}

impl Found {
    fn add(&mut self, rowkey: &[u8]) {
        self.count += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(hbidx_schema::codec::printable(rowkey));
        }
    }
}

/// The drift report.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct DriftReport {
    /// `full` or `sample`.
    pub mode: &'static str,
    pub index_rows_checked: u64,
    pub store_rows_checked: u64,
    /// In the store, not in the index.
    pub missing: Found,
    /// In the index, not in the store.
    pub ghosts: Found,
    /// In both, with different indexed values.
    pub mismatches: Found,
    /// Drift the merge rules can't repair (the index holds a newer timestamp than the store).
    pub unfixable: u64,
    /// Repairs applied (with `repair`).
    pub repaired: u64,
    /// With `[cluster]`: index rows outside this instance's shard, not checked (see the module
    /// docs).
    pub outside_range: u64,
}

impl DriftReport {
    fn record(&mut self, drift: &Drift) {
        let rowkey = &drift.repair.rowkey;
        match drift.kind {
            DriftKind::Missing => self.missing.add(rowkey),
            DriftKind::Ghost => self.ghosts.add(rowkey),
            DriftKind::Mismatch => self.mismatches.add(rowkey),
        }
        if !drift.fixable {
            self.unfixable += 1;
        }
    }

    pub fn drift(&self) -> u64 {
        self.missing.count + self.ghosts.count + self.mismatches.count
    }
}

/// `POST /v1/tables/{table}/verify` → 202 with the job; the report appears in
/// `GET /v1/jobs/{id}` when it is done.
#[utoipa::path(
    post,
    path = "/v1/tables/{table}/verify",
    tag = "jobs",
    params(("table" = String, Path, description = "Table name")),
    request_body = VerifyRequest,
    security(("api_key" = ["admin"])),
    responses(
        (status = 202, description = "Started; the drift report appears at /v1/jobs/{id}", body = crate::jobs::JobStatus),
        (status = 400, description = "The request is wrong; `field` names what", body = crate::ErrorResponse),
        (status = 404, description = "No such table", body = crate::ErrorResponse),
        (status = 409, description = "A job is already running on the table", body = crate::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = crate::ErrorResponse),
    )
)]
pub async fn start_verify(
    State(state): State<SharedState>,
    Path(table): Path<String>,
    ApiJson(request): ApiJson<VerifyRequest>,
) -> Result<(StatusCode, Json<JobStatus>), ApiError> {
    let runtime = state.table(&table)?;
    let table = runtime.config.name.clone();
    if request.full && request.sample.is_some() {
        return Err(ApiError::bad_request(
            "sample",
            "give either sample or full, not both",
        ));
    }
    if request.sample == Some(0) {
        return Err(ApiError::bad_request("sample", "must be at least 1"));
    }
    let job = state
        .jobs
        .create(
            "verify",
            &table,
            "store",
            crate::jobs::ShardRange::of(&state, &table),
        )
        .map_err(|running| {
            ApiError::Conflict(format!(
                "job {running} is already running on table \"{table}\""
            ))
        })?;
    let id = job.id;
    let task_state = state.clone();
    state.spawn_background(async move {
        let result = run(&task_state, &table, &request, id).await;
        match result {
            Ok(report) => {
                task_state.jobs.update(id, |job| job.report = Some(report));
                task_state.jobs.finish(id, Ok(()));
            }
            Err(err) => task_state.jobs.finish(id, Err(err.to_string())),
        }
    });
    Ok((StatusCode::ACCEPTED, Json(job)))
}

/// Runs a verification, reporting progress on job `job`. Used by the HTTP job and by the
/// offline `hbidx verify`.
pub async fn run(
    state: &SharedState,
    table: &str,
    request: &VerifyRequest,
    job: u64,
) -> Result<DriftReport, ApiError> {
    let runtime = state.table(table)?;
    if request.sample.is_none() {
        return run_full(state, runtime, table, request.repair, job).await;
    }
    let columns = kept_columns(&runtime.config);
    let mut report = DriftReport {
        mode: if request.sample.is_some() {
            "sample"
        } else {
            "full"
        },
        ..DriftReport::default()
    };
    let mut repairs = Vec::new();

    // Index → store.
    state.jobs.update(job, |j| j.phase = "index".into());
    let searcher = runtime.searcher.clone();
    let sample = request.sample;
    let own_range = state.own_range(table);
    let mut index_rows: Vec<(Vec<u8>, RowState)> =
        tokio::task::spawn_blocking(move || match sample {
            Some(n) => searcher.sample_rows(n, rand::random()),
            None => searcher.all_rows(),
        })
        .await
        .map_err(|err| ApiError::Internal(format!("index read failed: {err}")))??;
    if let Some(range) = &own_range {
        let before = index_rows.len();
        index_rows.retain(|(rowkey, _)| range.contains(rowkey));
        report.outside_range = (before - index_rows.len()) as u64;
    }
    state.jobs.update(job, |j| {
        j.total = index_rows.len() as u64;
    });
    let checked: HashSet<Vec<u8>> = index_rows.iter().map(|(k, _)| k.clone()).collect();
    for chunk in index_rows.chunks(BATCH) {
        let keys: Vec<Vec<u8>> = chunk.iter().map(|(k, _)| k.clone()).collect();
        let rows = state.store.get_rows(table, &keys, Some(&columns)).await?;
        for ((rowkey, indexed), row) in chunk.iter().zip(rows) {
            if let Some(drift) = diff_row(&runtime.config, rowkey, Some(indexed), row.as_ref()) {
                report.record(&drift);
                repairs.push(drift);
            }
        }
        report.index_rows_checked += chunk.len() as u64;
        let done = report.index_rows_checked;
        state.jobs.update(job, |j| j.done = done);
    }

    // Store → index.
    state.jobs.update(job, |j| j.phase = "store".into());
    // The shard's range, or the whole table.
    let (range_start, range_stop) = own_range.map_or((Vec::new(), None), |r| (r.start, r.stop));
    let (mut start, limit) = match request.sample {
        // A run of consecutive rows from a sampled rowkey: rows the index is missing sit
        // between rows it has.
        Some(n) => (
            index_rows
                .first()
                .map(|(k, _)| k.clone())
                .unwrap_or_else(|| range_start.clone()),
            n as u64,
        ),
        None => (range_start.clone(), u64::MAX),
    };
    let mut wrapped = start == range_start;
    loop {
        let want = BATCH.min((limit - report.store_rows_checked) as usize);
        if want == 0 {
            break;
        }
        let batch = state
            .store
            .scan(
                table,
                &ScanRequest {
                    start: start.clone(),
                    stop: range_stop.clone(),
                    columns: Some(columns.clone()),
                    batch: want,
                    ..ScanRequest::default()
                },
            )
            .await?;
        report.store_rows_checked += batch.rows.len() as u64;
        let unchecked: Vec<_> = batch
            .rows
            .into_iter()
            .filter(|row| !checked.contains(&row.rowkey))
            .collect();
        // One committed-state read per row (term probe + stored doc): a full scan does
        // millions, so they run off the async runtime, a batch at a time.
        let searcher = runtime.searcher.clone();
        let table_config = runtime.config.clone();
        let drifts = tokio::task::spawn_blocking(move || {
            let mut drifts = Vec::new();
            for row in &unchecked {
                let indexed = searcher.committed_state(&row.rowkey)?;
                if let Some(drift) =
                    diff_row(&table_config, &row.rowkey, indexed.as_ref(), Some(row))
                {
                    drifts.push(drift);
                }
            }
            Ok::<_, hbidx_indexer::IndexerError>(drifts)
        })
        .await
        .map_err(|err| ApiError::Internal(format!("index read failed: {err}")))??;
        for drift in drifts {
            report.record(&drift);
            repairs.push(drift);
        }
        match batch.next_start {
            Some(next) => start = next,
            // A sample that hit the end of the table (the shard) goes on from its start, once.
            None if !wrapped => {
                wrapped = true;
                start = range_start.clone();
            }
            None => break,
        }
    }

    if request.repair && !repairs.is_empty() {
        state.jobs.update(job, |j| j.phase = "repairing".into());
        report.repaired = apply_repairs(runtime, repairs).await?;
    }
    Ok(report)
}

/// A full verification: the index's live rows and a scan of the store, both in rowkey order,
/// walked side by side a batch at a time (a merge join), so memory stays at a few batches
/// whatever the table's size. A rowkey on both sides is compared; one only in the index is a
/// ghost; one only in the store is checked against the index's committed state, which also
/// knows rows whose document only remembers tombstones.
async fn run_full(
    state: &SharedState,
    runtime: &TableRuntime,
    table: &str,
    repair: bool,
    job: u64,
) -> Result<DriftReport, ApiError> {
    let columns = kept_columns(&runtime.config);
    let config = runtime.config.clone();
    let mut report = DriftReport {
        mode: "full",
        ..DriftReport::default()
    };
    let mut repairs = Vec::new();
    let mut record = |report: &mut DriftReport, drift: Option<Drift>| {
        if let Some(drift) = drift {
            report.record(&drift);
            repairs.push(drift);
        }
    };
    let rows = runtime
        .stats
        .rows
        .load(std::sync::atomic::Ordering::Relaxed);
    state.jobs.update(job, |j| {
        j.phase = "index and store".into();
        j.total = rows;
    });

    let mut index: VecDeque<(Vec<u8>, RowState)> = VecDeque::new();
    let mut index_cursor: Option<Vec<u8>> = None;
    let mut index_done = false;
    let own_range = state.own_range(table);
    let mut store: VecDeque<hbidx_store::Row> = VecDeque::new();
    let (mut store_start, store_stop) = own_range
        .clone()
        .map_or((Vec::new(), None), |range| (range.start, range.stop));
    let mut store_done = false;
    // Store rows the index has no live values for, probed a batch at a time.
    let mut store_only: Vec<hbidx_store::Row> = Vec::new();
    loop {
        if index.is_empty() && !index_done {
            let searcher = runtime.searcher.clone();
            let after = index_cursor.take();
            let (rows, cursor) =
                tokio::task::spawn_blocking(move || searcher.rows_after(after.as_deref(), BATCH))
                    .await
                    .map_err(|err| ApiError::Internal(format!("index read failed: {err}")))??;
            for (rowkey, indexed) in rows {
                match &own_range {
                    Some(range) if !range.contains(&rowkey) => report.outside_range += 1,
                    _ => index.push_back((rowkey, indexed)),
                }
            }
            index_done = cursor.is_none();
            index_cursor = cursor;
            // A batch of tombstone-only documents comes back empty with a cursor: read on.
            if index.is_empty() && !index_done {
                continue;
            }
        }
        if store.is_empty() && !store_done {
            let batch = state
                .store
                .scan(
                    table,
                    &ScanRequest {
                        start: store_start.clone(),
                        stop: store_stop.clone(),
                        columns: Some(columns.clone()),
                        batch: BATCH,
                        ..ScanRequest::default()
                    },
                )
                .await?;
            report.store_rows_checked += batch.rows.len() as u64;
            store.extend(batch.rows);
            match batch.next_start {
                Some(next) => store_start = next,
                None => store_done = true,
            }
        }
        let order = match (index.front(), store.front()) {
            (None, None) => break,
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some((key, _)), Some(row)) => key.cmp(&row.rowkey),
        };
        match order {
            std::cmp::Ordering::Equal => {
                if let (Some((rowkey, indexed)), Some(row)) = (index.pop_front(), store.pop_front())
                {
                    report.index_rows_checked += 1;
                    record(
                        &mut report,
                        diff_row(&config, &rowkey, Some(&indexed), Some(&row)),
                    );
                }
            }
            std::cmp::Ordering::Less => {
                if let Some((rowkey, indexed)) = index.pop_front() {
                    report.index_rows_checked += 1;
                    record(
                        &mut report,
                        diff_row(&config, &rowkey, Some(&indexed), None),
                    );
                }
            }
            std::cmp::Ordering::Greater => {
                if let Some(row) = store.pop_front() {
                    store_only.push(row);
                }
            }
        }
        let finished = index.is_empty() && index_done && store.is_empty() && store_done;
        if store_only.len() >= BATCH || (finished && !store_only.is_empty()) {
            let unchecked = std::mem::take(&mut store_only);
            let searcher = runtime.searcher.clone();
            let table_config = config.clone();
            let drifts = tokio::task::spawn_blocking(move || {
                let mut drifts = Vec::new();
                for row in &unchecked {
                    let indexed = searcher.committed_state(&row.rowkey)?;
                    drifts.extend(diff_row(
                        &table_config,
                        &row.rowkey,
                        indexed.as_ref(),
                        Some(row),
                    ));
                }
                Ok::<_, hbidx_indexer::IndexerError>(drifts)
            })
            .await
            .map_err(|err| ApiError::Internal(format!("index read failed: {err}")))??;
            for drift in drifts {
                record(&mut report, Some(drift));
            }
        }
        if report.index_rows_checked.is_multiple_of(BATCH as u64) {
            let done = report.index_rows_checked;
            state.jobs.update(job, |j| {
                j.done = done;
                j.total = j.total.max(done);
            });
        }
    }
    let done = report.index_rows_checked;
    state.jobs.update(job, |j| {
        j.done = done;
        j.total = done;
    });
    if repair && !repairs.is_empty() {
        state.jobs.update(job, |j| j.phase = "repairing".into());
        report.repaired = apply_repairs(runtime, repairs).await?;
    }
    Ok(report)
}

/// Hands repairs to the live indexer and waits until it has applied them and committed.
async fn apply_repairs(runtime: &TableRuntime, repairs: Vec<Drift>) -> Result<u64, ApiError> {
    let queue = &runtime.stats.repairs;
    let mut pushed = 0u64;
    let mut last_ticket = None;
    for drift in repairs {
        // Repairs the merge can't win would change nothing; don't queue them.
        if !drift.fixable {
            continue;
        }
        if let Some(ticket) = queue.submit(drift.repair) {
            pushed += 1;
            last_ticket = Some(ticket);
        }
    }
    let Some(last_ticket) = last_ticket else {
        return Ok(0);
    };
    // Applied and committed (durable and searchable): tickets count in queue order, so the
    // commit covering the last one covers them all, whatever else (read repairs, writes to
    // HBase) was queued in between.
    let mut committed = queue.committed_tickets();
    match tokio::time::timeout(
        Duration::from_secs(120),
        committed.wait_for(|at| *at >= last_ticket),
    )
    .await
    {
        Ok(Ok(_)) => Ok(pushed),
        _ => Err(ApiError::Internal(
            "the table's indexer did not apply and commit the repairs within 2 minutes".into(),
        )),
    }
}
