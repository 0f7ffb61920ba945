//! Background jobs (reindexing, verifying) and their HTTP API:
//! `POST /v1/tables/{table}/reindex` `{"from": "kafka" | "store"}` → 202 with the job,
//! `POST /v1/tables/{table}/verify` (see `verify.rs`) → 202, and `GET /v1/jobs/{id}` for
//! progress and, for verify, the drift report. The work itself is done by a [`Reindexer`] that the
//! binary provides, because only it knows how the table's sources and directories are wired.

use hbidx_store::now_ms;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::extract::ApiJson;
use crate::{ApiError, SharedState};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Running,
    Succeeded,
    Failed,
}

/// What `GET /v1/jobs/{id}` returns.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobStatus {
    pub id: u64,
    /// `reindex` or `verify`.
    pub kind: &'static str,
    pub table: String,
    /// What the job reads: `store` or `kafka`.
    pub from: String,
    pub state: JobState,
    /// `replaying` / `scanning`, `checking`, `swapping`, `done` (reindex); `index`, `store`,
    /// `repairing`, `done` (verify).
    pub phase: String,
    /// Events replayed or rows scanned so far, out of `total` (the topic's size, or the index's
    /// row count as an estimate of the table's, when the job started).
    pub done: u64,
    pub total: u64,
    pub error: Option<String>,
    /// With `[cluster]`: the rowkeys the job covers, this instance's shard of the table (a
    /// reindex rebuilds and a verify checks only those). Absent on a single instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<ShardRange>,
    /// The job's result, for jobs that have one (verify: the drift report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<crate::verify::DriftReport>,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
}

/// One shard's rowkeys of a table, as jobs report them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ShardRange {
    /// This instance's shard, of `shards`.
    pub shard: usize,
    pub shards: usize,
    /// First rowkey (inclusive), in HBase's printable form; empty: the table's start.
    pub start: String,
    /// Rowkey the shard ends before; `None`: the table's end.
    pub stop: Option<String>,
}

impl ShardRange {
    /// This instance's range of `table`, when it is one shard of a cluster.
    pub fn of(state: &crate::AppState, table: &str) -> Option<Self> {
        let cluster = state.cluster.as_ref()?;
        let range = cluster.own_range(table)?;
        Some(Self {
            shard: cluster.shard?,
            shards: cluster.shard_count(),
            start: hbidx_schema::codec::printable(&range.start),
            stop: range.stop.as_deref().map(hbidx_schema::codec::printable),
        })
    }
}

/// Every job of this process (kept until restart; they are few).
#[derive(Default)]
pub struct Jobs {
    next: AtomicU64,
    jobs: Mutex<BTreeMap<u64, JobStatus>>,
}

impl Jobs {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, JobStatus>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a running job for `table` over `range` (see [`JobStatus::range`]), unless one
    /// is already running for the table.
    pub fn create(
        &self,
        kind: &'static str,
        table: &str,
        from: &str,
        range: Option<ShardRange>,
    ) -> Result<JobStatus, u64> {
        let mut jobs = self.lock();
        if let Some(running) = jobs
            .values()
            .find(|j| j.table == table && j.state == JobState::Running)
        {
            return Err(running.id);
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let job = JobStatus {
            id,
            kind,
            table: table.to_string(),
            from: from.to_string(),
            state: JobState::Running,
            phase: "starting".into(),
            done: 0,
            total: 0,
            error: None,
            range,
            report: None,
            started_ms: now_ms(),
            finished_ms: None,
        };
        jobs.insert(id, job.clone());
        Ok(job)
    }

    pub fn update(&self, id: u64, change: impl FnOnce(&mut JobStatus)) {
        if let Some(job) = self.lock().get_mut(&id) {
            change(job);
        }
    }

    pub fn finish(&self, id: u64, result: Result<(), String>) {
        self.update(id, |job| {
            job.finished_ms = Some(now_ms());
            match result {
                Ok(()) => {
                    job.state = JobState::Succeeded;
                    job.phase = "done".into();
                }
                Err(reason) => {
                    job.state = JobState::Failed;
                    job.error = Some(reason);
                }
            }
        });
    }

    pub fn get(&self, id: u64) -> Option<JobStatus> {
        self.lock().get(&id).cloned()
    }
}

/// Runs reindex jobs. `start` must return quickly and do the work in the background, reporting
/// through `state.jobs`.
pub trait Reindexer: Send + Sync {
    /// Whether `table` can be rebuilt from `from` (`"kafka"` or `"store"`); the reason if not.
    fn check(&self, table: &str, from: &str) -> Result<(), String>;
    fn start(&self, state: SharedState, table: String, from: String, job: u64);
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReindexRequest {
    /// `store` (scan the table) or `kafka` (replay the topic).
    #[schema(value_type = ReindexFrom)]
    pub from: String,
}

impl crate::extract::BodyShape for ReindexRequest {}

#[derive(Debug, ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum ReindexFrom {
    Store,
    Kafka,
}

/// Rebuilds a table's index in the background from the store or the Kafka topic, then swaps it
/// in; lookups keep being answered from the old index meanwhile.
#[utoipa::path(
    post,
    path = "/v1/tables/{table}/reindex",
    tag = "jobs",
    params(("table" = String, Path, description = "Table name")),
    request_body = ReindexRequest,
    security(("api_key" = ["admin"])),
    responses(
        (status = 202, description = "Started; follow it at /v1/jobs/{id}", body = JobStatus),
        (status = 400, description = "The request is wrong, or the table can't be rebuilt from there", body = crate::ErrorResponse),
        (status = 404, description = "No such table", body = crate::ErrorResponse),
        (status = 409, description = "A job is already running on the table", body = crate::ErrorResponse),
        (status = 413, description = "The body is over the size limit", body = crate::ErrorResponse),
    )
)]
pub async fn start_reindex(
    State(state): State<SharedState>,
    Path(table): Path<String>,
    ApiJson(request): ApiJson<ReindexRequest>,
) -> Result<(StatusCode, Json<JobStatus>), ApiError> {
    let runtime = state.table(&table)?;
    let table = runtime.config.name.clone();
    if request.from != "kafka" && request.from != "store" {
        return Err(ApiError::bad_request(
            "from",
            "must be \"store\" (scan the table) or \"kafka\" (replay the topic)",
        ));
    }
    let reindexer = state
        .reindexer
        .clone()
        .ok_or_else(|| ApiError::bad_request("from", "this server cannot reindex"))?;
    reindexer
        .check(&table, &request.from)
        .map_err(|reason| ApiError::bad_request("from", reason))?;
    let job = state
        .jobs
        .create(
            "reindex",
            &table,
            &request.from,
            ShardRange::of(&state, &table),
        )
        .map_err(|running| {
            ApiError::Conflict(format!(
                "job {running} is already running on table \"{table}\""
            ))
        })?;
    reindexer.start(state.clone(), table, request.from, job.id);
    Ok((StatusCode::ACCEPTED, Json(job)))
}

/// A job's progress and, when done, its result.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(("id" = u64, Path, description = "Job id")),
    security(("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The job", body = JobStatus),
        (status = 400, description = "Not a job id", body = crate::ErrorResponse),
        (status = 404, description = "No such job", body = crate::ErrorResponse),
    )
)]
pub async fn get_job(
    State(state): State<SharedState>,
    Path(id): Path<String>,
) -> Result<Json<JobStatus>, ApiError> {
    let id: u64 = id
        .parse()
        .map_err(|_| ApiError::bad_request("id", "a job id is a positive integer"))?;
    state
        .jobs
        .get(id)
        .map(Json)
        .ok_or_else(|| ApiError::NotFound {
            what: format!("job {id}"),
        })
}
