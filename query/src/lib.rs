//! `hbidx-query`: the REST service. [`app`] builds the router from an [`AppState`], so tests can
//! drive it without a socket and `hbidx serve` / `hbidx demo` serve it over TCP.
//!
//! A lookup resolves field values to rowkeys through the table's tantivy index, multi-gets the
//! rows from the [`RowStore`](hbidx_store::RowStore), and re-checks every fetched row against the
//! lookup before answering (an index entry whose row changed or vanished is dropped and counted).
//!
//! Ops: [`telemetry`] (Prometheus metrics, `GET /metrics`) and [`ops`] (`GET /dashboard` and
//! the `GET /v1/ops/summary` it draws).

pub mod auth;
mod error;
mod extract;
pub mod jobs;
mod lookup;
pub mod ops;
mod repair;
pub mod telemetry;
pub mod verify;
mod write;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::middleware;
use axum::routing::{get, post};
use hbidx_indexer::{Checkpoint, IndexerStats, TableSearcher};
use hbidx_schema::config::TableConfig;
use hbidx_store::RowStore;
use tokio::sync::watch;

pub use error::ApiError;

/// Everything the service needs about one table.
#[derive(Clone)]
pub struct TableRuntime {
    pub config: Arc<TableConfig>,
    pub searcher: TableSearcher,
    /// The checkpoint of the table's last index commit; `?wait=indexed` waits on it.
    pub indexed: watch::Receiver<Checkpoint>,
    pub stats: Arc<IndexerStats>,
    /// Set when the table is fed from Kafka: write-through publishes its writes to the topic
    /// (so every replica sees them) instead of writing the store directly.
    pub publisher: Option<hbidx_indexer::publisher::KafkaPublisher>,
}

/// Request limits. Defaults are generous for people and tight enough for a sidecar.
#[derive(Debug, Clone)]
pub struct Limits {
    pub default_page: usize,
    pub max_page: usize,
    pub max_batch_values: usize,
    pub max_body_bytes: usize,
    pub index_wait: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            default_page: 20,
            max_page: 1000,
            max_batch_values: 1000,
            max_body_bytes: 1 << 20,
            index_wait: std::time::Duration::from_secs(10),
        }
    }
}

/// Counters kept by the service itself.
#[derive(Debug, Default)]
pub struct QueryCounters {
    pub lookups: AtomicU64,
    pub rows_returned: AtomicU64,
    /// Index hits whose row no longer matched the lookup (or no longer existed).
    pub stale_dropped: AtomicU64,
    pub writes: AtomicU64,
    /// Repairs handed to an indexer after a stale hit (`repair.rs`).
    pub read_repairs: AtomicU64,
    /// Stale hits not repaired because too many repairs were running.
    pub repairs_skipped: AtomicU64,
}

pub struct AppState {
    pub tables: HashMap<String, TableRuntime>,
    pub store: Arc<dyn RowStore>,
    pub limits: Limits,
    pub counters: QueryCounters,
    pub jobs: jobs::Jobs,
    /// Runs `POST /v1/tables/{table}/reindex`; `None` where the process can't.
    pub reindexer: Option<Arc<dyn jobs::Reindexer>>,
    /// Whether store writes return a change-feed offset (the embedded store) that
    /// `?wait=indexed` can wait for. False with HBase.
    pub store_has_feed: bool,
    /// Bounds the read-repair tasks running at once.
    pub(crate) repair_permits: Arc<tokio::sync::Semaphore>,
    /// The API keys every route but the health checks requires. Empty by default: a state
    /// built without [`AppState::with_auth`] refuses every authenticated route.
    pub auth: auth::Auth,
    /// The installed Prometheus recorder, read by `/metrics` and the dashboard sampler; `None`
    /// when the process has none (the recorder is process-global, so only the binary installs
    /// it).
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// The dashboard's recent points and region reports.
    pub ops: ops::Ops,
    /// Metric handles the per-request path reuses.
    pub metric_handles: telemetry::MetricHandles,
}

impl AppState {
    pub fn new(store: Arc<dyn RowStore>, tables: Vec<TableRuntime>) -> Self {
        Self {
            tables: tables
                .into_iter()
                .map(|table| (table.config.name.clone(), table))
                .collect(),
            store,
            limits: Limits::default(),
            counters: QueryCounters::default(),
            jobs: jobs::Jobs::default(),
            reindexer: None,
            store_has_feed: true,
            repair_permits: repair::permits(),
            auth: auth::Auth::default(),
            metrics: None,
            ops: ops::Ops::default(),
            metric_handles: telemetry::MetricHandles::default(),
        }
    }

    pub fn with_auth(mut self, auth: auth::Auth) -> Self {
        self.auth = auth;
        self
    }

    pub fn with_metrics(mut self, handle: metrics_exporter_prometheus::PrometheusHandle) -> Self {
        self.metrics = Some(handle);
        self
    }

    pub fn with_reindexer(mut self, reindexer: Arc<dyn jobs::Reindexer>) -> Self {
        self.reindexer = Some(reindexer);
        self
    }

    pub fn table(&self, name: &str) -> Result<&TableRuntime, ApiError> {
        self.tables.get(name).ok_or_else(|| ApiError::NotFound {
            what: format!("table \"{name}\""),
        })
    }
}

pub type SharedState = Arc<AppState>;

pub fn app(state: SharedState) -> Router {
    // Only on the routes that read a body: a layer over the whole router would cost every
    // request (lookups included) a boxed service and future. A new route that reads a body
    // must get it too, or it falls back to axum's 2 MB default.
    let body_limit = DefaultBodyLimit::max(state.limits.max_body_bytes);
    // Counters that may stay at 0 for a long time are exported at 0 from the start, so
    // `rate()` works and dashboards show "none" rather than "no data".
    for table in state.tables.keys() {
        for name in [
            "hbidx_lookup_dropped_stale_total",
            "hbidx_read_repairs_total",
        ] {
            metrics::counter!(name, "table" => table.clone()).increment(0);
        }
    }
    Router::new()
        .route("/healthz", get(health))
        .route("/readyz", get(ready))
        .route("/v1/tables", get(list_tables))
        .route("/v1/tables/{table}/rows", get(lookup::get_rows))
        .route(
            "/v1/tables/{table}/rows:batch-lookup",
            post(lookup::batch_lookup).layer(body_limit),
        )
        .route(
            "/v1/tables/{table}/rows/{key}",
            get(write::get_row)
                .put(write::put_row.layer(body_limit))
                .delete(write::delete_row),
        )
        .route("/v1/tables/{table}/rowkey", get(write::rowkey))
        .route(
            "/v1/tables/{table}/reindex",
            post(jobs::start_reindex).layer(body_limit),
        )
        .route(
            "/v1/tables/{table}/verify",
            post(verify::start_verify).layer(body_limit),
        )
        .route("/v1/jobs/{id}", get(jobs::get_job))
        .route("/v1/indexer/status", get(indexer_status))
        .route("/v1/ops/summary", get(ops::summary))
        .route("/metrics", get(telemetry::metrics_text))
        .route("/dashboard", get(ops::dashboard))
        // Every route and the fallback (so an unknown path still needs a key); it sees the
        // route's `MatchedPath`, since `Router::layer` wraps each route after matching.
        .layer(middleware::from_fn_with_state(state.clone(), front))
        .with_state(state)
}

/// The one middleware in front of every request: the key check, then the handler, with the
/// request counted and timed around both, so refused requests (401, 403, 429) are counted too.
/// Requests are labelled by their route pattern, never the raw path, which can hold a
/// looked-up value. One layer rather than one per concern: each `from_fn` layer costs a boxed
/// service clone and a boxed future per request, measurable on a lookup of a few µs.
async fn front(
    axum::extract::State(state): axum::extract::State<SharedState>,
    mut request: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let started = std::time::Instant::now();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .cloned();
    let method = request.method().clone();
    let response = match auth::authorize(
        &state,
        &mut request,
        route.as_ref().map(axum::extract::MatchedPath::as_str),
    ) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    };
    telemetry::record_http(&state, route.as_ref(), &method, response.status(), started);
    response
}

async fn health() -> &'static str {
    "ok"
}

async fn ready(
    axum::extract::State(state): axum::extract::State<SharedState>,
) -> Result<&'static str, ApiError> {
    // Ready when the store answers; the index is always readable once opened.
    for name in state.tables.keys() {
        state.store.get_rows(name, &[], None).await?;
    }
    Ok("ready")
}

async fn list_tables(
    axum::extract::State(state): axum::extract::State<SharedState>,
) -> axum::Json<serde_json::Value> {
    let mut tables: Vec<_> = state
        .tables
        .values()
        .map(|table| {
            let fields: Vec<_> = table
                .config
                .fields
                .iter()
                .map(|f| serde_json::json!({"name": f.name, "kind": f.kind.as_str(), "column": f.column}))
                .collect();
            serde_json::json!({
                "name": table.config.name,
                "namespace": table.config.namespace,
                "rowkey": table.config.rowkey.describe(),
                "fields": fields,
            })
        })
        .collect();
    tables.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    axum::Json(serde_json::json!({ "tables": tables }))
}

async fn indexer_status(
    axum::extract::State(state): axum::extract::State<SharedState>,
) -> axum::Json<serde_json::Value> {
    let mut tables = serde_json::Map::new();
    for (name, table) in &state.tables {
        // Index counts come from the indexer thread (refreshed at each commit): walking
        // segments here would block the runtime.
        let stats = &table.stats;
        let checkpoint = table.indexed.borrow().clone();
        tables.insert(
            name.clone(),
            serde_json::json!({
                "checkpoint": checkpoint.positions,
                "events": stats.events.load(Ordering::Relaxed),
                "commits": stats.commits.load(Ordering::Relaxed),
                "invalid_values": stats.invalid_values.load(Ordering::Relaxed),
                "errors": stats.errors.load(Ordering::Relaxed),
                "last_commit_ms": stats.last_commit_ms.load(Ordering::Relaxed),
                "partitions": *stats.partitions.lock().unwrap_or_else(|p| p.into_inner()),
                "dead_letters": stats.partitions.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|p| p.dead_letters).sum::<u64>(),
                "rows": stats.rows.load(Ordering::Relaxed),
                "docs": stats.docs.load(Ordering::Relaxed),
                "segments": stats.segments.load(Ordering::Relaxed),
                "index_bytes": stats.index_bytes.load(Ordering::Relaxed),
            }),
        );
    }
    axum::Json(serde_json::json!({
        "tables": tables,
        "lookups": state.counters.lookups.load(Ordering::Relaxed),
        "stale_dropped": state.counters.stale_dropped.load(Ordering::Relaxed),
        "read_repairs": state.counters.read_repairs.load(Ordering::Relaxed),
        "repairs_skipped": state.counters.repairs_skipped.load(Ordering::Relaxed),
    }))
}
