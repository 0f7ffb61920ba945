//! `hbidx-query`: the REST service. [`app`] builds the router from an [`AppState`], so tests can
//! drive it without a socket and `hbidx serve` / `hbidx demo` serve it over TCP.
//!
//! A lookup resolves field values to rowkeys through the table's tantivy index, multi-gets the
//! rows from the [`RowStore`](hbidx_store::RowStore), and re-checks every fetched row against the
//! lookup before answering (an index entry whose row changed or vanished is dropped and counted).
//!
//! Ops: telemetry.rs (Prometheus metrics, `GET /metrics`: [`install_recorder`], the metric
//! [`CATALOGUE`], [`MemoryProbe`]) and ops/ (`GET /dashboard`, whose page is in dashboard/, and
//! the `GET /v1/ops/summary` it draws: [`spawn_sampler`]).
//!
//! The modules are private; [`auth`] is public as a whole (keys, scopes, the middleware), and
//! the rest of the API is what lib.rs re-exports: [`app`], [`AppState`], [`TableRuntime`],
//! [`ApiError`], [`Reindexer`], [`spawn_checker`], and the items above.

pub mod auth;
mod by_key;
mod cluster;
mod error;
mod extract;
mod index_wait;
mod index_work;
mod internal;
mod jobs;
mod lookup;
pub use lookup::{CursorKeySource, CursorSeal};
mod openapi;
mod ops;
mod read_repair;
mod readiness;
mod telemetry;
mod verify;
mod write;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use hbidx_indexer::{Checkpoint, IndexerStats, TableSearcher};
use hbidx_schema::config::TableConfig;
use hbidx_store::RowStore;
use tokio::sync::watch;
use utoipa::OpenApi;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

pub use cluster::{Peers, spawn_prober};
pub use error::{ApiError, ErrorResponse};
pub use jobs::Reindexer;
pub use ops::{HOTSPOT_SAMPLE, Sample, parse_exposition, sample, spawn_sampler};
pub use readiness::spawn_checker;
pub use telemetry::{CATALOGUE, MemoryProbe, MemoryUse, install_recorder, prometheus_builder};

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
    pub publisher: Option<hbidx_indexer::KafkaPublisher>,
}

/// Request limits. Defaults are generous for people and tight enough for a sidecar.
#[derive(Debug, Clone)]
pub struct Limits {
    pub default_page: usize,
    pub max_page: usize,
    pub max_batch_values: usize,
    /// Rows one batch lookup may return in all: `values × limit_per_value` at most this, so a
    /// batch's cost is bounded as a whole and not only per value.
    pub max_batch_rows: usize,
    /// Matches one lookup may walk (`[server] max_lookup_matches`): what bounds a lookup's CPU
    /// whatever the size of the table.
    pub max_lookup_matches: usize,
    /// Matches one batch lookup may walk, its values together (`[server] max_batch_matches`).
    pub max_batch_matches: usize,
    pub max_body_bytes: usize,
    pub index_wait: std::time::Duration,
    /// A request body must arrive within this (`[server] body_timeout_ms`).
    pub body_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            default_page: 20,
            max_page: 1000,
            max_batch_values: 1000,
            max_batch_rows: 20_000,
            max_lookup_matches: hbidx_schema::config::DEFAULT_MAX_LOOKUP_MATCHES,
            max_batch_matches: hbidx_schema::config::DEFAULT_MAX_BATCH_MATCHES,
            max_body_bytes: 1 << 20,
            index_wait: std::time::Duration::from_secs(10),
            body_timeout: hbidx_schema::config::DEFAULT_REQUEST_READ_TIMEOUT,
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
    /// Repairs handed to an indexer after a stale hit (`read_repair.rs`).
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
    /// `?wait=indexed` can wait for. False with HBase, whose writes are applied to the index
    /// here through the table's repair queue instead.
    pub store_has_feed: bool,
    /// The row store's name in readiness reasons (`embedded`, `hbase`).
    pub store_name: &'static str,
    /// The row store's last health check, which `/readyz` answers from.
    pub readiness: readiness::Readiness,
    /// Slots of index work run off the HTTP runtimes (`index_work`).
    pub(crate) index_permits: Arc<tokio::sync::Semaphore>,
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
    /// `GET /openapi.json`, rendered for this server's tables and limits at the first request.
    pub(crate) openapi: std::sync::OnceLock<String>,
    /// What each part of the `[memory]` budget holds now; `None` where nothing was wired in.
    pub memory: Option<telemetry::MemoryProbe>,
    /// `[cluster]` with this instance's identity set: it indexes one shard's rowkey range of
    /// every table. `None` for a single instance indexing every row.
    pub cluster: Option<Arc<hbidx_schema::config::ClusterConfig>>,
    /// The other instances of the tier, which lookups fan out to (set with `cluster`).
    pub peers: Option<Arc<cluster::Peers>>,
    /// Seals and opens paging cursors; a key of its own unless [`AppState::with_cursors`].
    pub cursors: lookup::CursorSeal,
    /// The runtime jobs (verify) and background read repairs run on: the process's main
    /// runtime, so their work between awaits never holds an HTTP thread; `None`: the runtime of
    /// the request that starts them.
    pub background: Option<tokio::runtime::Handle>,
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
            store_name: "embedded",
            readiness: readiness::Readiness::default(),
            index_permits: index_work::permits(),
            repair_permits: read_repair::permits(),
            auth: auth::Auth::default(),
            metrics: None,
            ops: ops::Ops::default(),
            metric_handles: telemetry::MetricHandles::default(),
            openapi: std::sync::OnceLock::new(),
            memory: None,
            cluster: None,
            peers: None,
            cursors: lookup::CursorSeal::random(),
            background: None,
        }
    }

    /// Reports the `[memory]` budget's parts on `/metrics` and the dashboard.
    pub fn with_memory(mut self, probe: telemetry::MemoryProbe) -> Self {
        self.memory = Some(probe);
        self
    }

    /// Makes this instance one shard replica of `cluster` (its identity set), calling the
    /// other instances with `peer_key` (a key with the `cluster` scope).
    pub fn with_cluster(
        mut self,
        cluster: hbidx_schema::config::ClusterConfig,
        peer_key: Option<String>,
    ) -> Result<Self, ApiError> {
        let cluster = Arc::new(cluster);
        self.peers = Some(Arc::new(cluster::Peers::new(cluster.clone(), peer_key)?));
        self.cluster = Some(cluster);
        Ok(self)
    }

    /// The rowkeys of `table` this instance indexes: `None` for all of them.
    pub fn own_range(&self, table: &str) -> Option<hbidx_schema::config::KeyRange> {
        self.cluster.as_ref()?.own_range(table)
    }

    /// Seals paging cursors with `cursors`, shared with the instances a client may page
    /// through.
    pub fn with_cursors(mut self, cursors: lookup::CursorSeal) -> Self {
        self.cursors = cursors;
        self
    }

    /// Runs jobs and background repairs on `runtime` ([`AppState::background`]).
    pub fn with_background(mut self, runtime: tokio::runtime::Handle) -> Self {
        self.background = Some(runtime);
        self
    }

    /// Spawns `task` on the background runtime, or the current one without it. Work a
    /// request starts that outlives it (jobs, repairs) goes here, not on the HTTP thread that
    /// took the request.
    pub fn spawn_background<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.background {
            Some(runtime) => runtime.spawn(task),
            None => tokio::spawn(task),
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
    app_with(state, Router::new())
}

/// [`app`] with `extra` routes served behind the same front (authentication, the HTTP metrics):
/// `hbidx bench`'s HTTP floor, a fixed answer from memory through the same stack.
pub fn app_with(state: SharedState, extra: Router<SharedState>) -> Router {
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
    let (router, _) = routes(state.limits.max_body_bytes).split_for_parts();
    router
        .merge(extra)
        // Every route and the fallback (so an unknown path still needs a key); it sees the
        // route's `MatchedPath`, since `Router::layer` wraps each route after matching.
        .layer(middleware::from_fn_with_state(state.clone(), front))
        .with_state(state)
}

/// Every route, each registered with its OpenAPI operation (`openapi::document` is built from
/// the same list).
pub(crate) fn routes(max_body_bytes: usize) -> OpenApiRouter<SharedState> {
    // Only on the routes that read a body: a layer over the whole router would cost every
    // request (lookups included) a boxed service and future. A new route that reads a body
    // must get it too, or it falls back to axum's 2 MB default.
    let body_limit = DefaultBodyLimit::max(max_body_bytes);
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(health))
        .routes(routes!(ready))
        .routes(routes!(openapi::serve))
        .routes(routes!(list_tables))
        .routes(routes!(lookup::get_rows))
        .routes(routes!(lookup::post_rows).layer(body_limit))
        .routes(routes!(lookup::batch_lookup).layer(body_limit))
        .routes(routes!(by_key::get_row, write::delete_row))
        .routes(routes!(write::put_row).layer(body_limit))
        .routes(routes!(by_key::rowkey))
        .routes(routes!(jobs::start_reindex).layer(body_limit))
        .routes(routes!(verify::start_verify).layer(body_limit))
        .routes(routes!(jobs::get_job))
        .routes(routes!(indexer_status))
        .routes(routes!(ops::summary))
        .routes(routes!(telemetry::metrics_text))
        .routes(routes!(ops::dashboard))
        .routes(routes!(cluster::cluster_status))
        .routes(routes!(internal::hits).layer(body_limit))
        .routes(routes!(internal::batch_hits).layer(body_limit))
        .routes(routes!(internal::apply).layer(body_limit))
        .routes(routes!(internal::repair).layer(body_limit))
        .routes(routes!(internal::shard_status))
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

/// Liveness: the process serves HTTP.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    responses((status = 200, description = "The process is up", body = String, content_type = "text/plain"))
)]
async fn health() -> &'static str {
    "ok"
}

/// Readiness: the row store serves every table (HBase: reachable, each table present and
/// enabled), as its last health check found; checked every 2 s.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    responses(
        (status = 200, description = "Ready to serve lookups", body = String, content_type = "text/plain"),
        (status = 503, description = "Not ready (`not_ready`): the row store can't be reached, or a table is missing or disabled in it; the message names the store and the table", body = ErrorResponse),
    )
)]
async fn ready(
    axum::extract::State(state): axum::extract::State<SharedState>,
) -> Result<&'static str, ApiError> {
    // The index is always readable once opened: readiness is the store's.
    readiness::ready(&state).await?;
    Ok("ready")
}

/// `GET /v1/tables`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct TablesResponse {
    pub tables: Vec<TableInfo>,
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct TableInfo {
    pub name: String,
    /// The HBase namespace (`default` unless configured).
    pub namespace: String,
    /// The rowkey design, e.g. `substr(md5(uid),0,6) + uid`.
    pub rowkey: String,
    pub fields: Vec<FieldInfo>,
}

/// An indexed field: a lookup parameter of the table.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct FieldInfo {
    pub name: String,
    /// `phone`, `idcard`, `name` or `keyword`.
    pub kind: &'static str,
    /// The `family:qualifier` it indexes.
    pub column: String,
}

/// The configured tables and their lookup fields. Any valid key may list them.
#[utoipa::path(
    get,
    path = "/v1/tables",
    tag = "tables",
    security(("api_key" = [])),
    responses((status = 200, description = "The tables this server indexes", body = TablesResponse))
)]
async fn list_tables(
    axum::extract::State(state): axum::extract::State<SharedState>,
) -> axum::Json<TablesResponse> {
    let mut tables: Vec<_> = state
        .tables
        .values()
        .map(|table| TableInfo {
            name: table.config.name.clone(),
            namespace: table.config.namespace.clone(),
            rowkey: table.config.rowkey.describe(),
            fields: table
                .config
                .fields
                .iter()
                .map(|f| FieldInfo {
                    name: f.name.clone(),
                    kind: f.kind.as_str(),
                    column: f.column.clone(),
                })
                .collect(),
        })
        .collect();
    tables.sort_by(|a, b| a.name.cmp(&b.name));
    axum::Json(TablesResponse { tables })
}

/// `GET /v1/indexer/status`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct IndexerStatusResponse {
    /// Table name → its indexer's state.
    pub tables: std::collections::BTreeMap<String, TableIndexerStatus>,
    /// Lookup requests served (a batch counts once).
    pub lookups: u64,
    /// Index hits dropped because the row no longer matched or existed.
    pub stale_dropped: u64,
    pub read_repairs: u64,
    pub repairs_skipped: u64,
}

#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct TableIndexerStatus {
    /// `"{source}/{partition}"` → offset of the last event covered by an index commit.
    pub checkpoint: std::collections::BTreeMap<String, i64>,
    pub events: u64,
    pub commits: u64,
    pub invalid_values: u64,
    pub errors: u64,
    /// Milliseconds since the epoch of the last commit (0: none yet).
    pub last_commit_ms: u64,
    /// The index volume is full: the last commit failed for lack of space, and indexing is
    /// paused (retried every few seconds) until space is freed.
    pub storage_full: bool,
    pub partitions: Vec<hbidx_indexer::PartitionStatus>,
    pub dead_letters: u64,
    /// With `[cluster]`: events and repairs for other shards' rows, not indexed here.
    pub foreign_skipped: u64,
    /// Events the topic's retention deleted before this index read them, since start: their
    /// writes are missing until `verify --full --repair`.
    pub retention_lost: u64,
    /// Live rows in the committed index.
    pub rows: u64,
    pub docs: u64,
    pub segments: u64,
    pub index_bytes: u64,
    /// What each covered column takes in the index, estimated from a sample of the live rows.
    pub covered: Vec<hbidx_indexer::CoveredSize>,
}

/// Live rows read to estimate the size of the covered columns (exact below that).
const COVERED_SAMPLE: usize = 2_000;

/// Each table's indexer: checkpoints, counters, lag per partition, index size.
#[utoipa::path(
    get,
    path = "/v1/indexer/status",
    tag = "ops",
    security(("api_key" = ["admin"])),
    responses((status = 200, description = "Indexer state per table", body = IndexerStatusResponse))
)]
async fn indexer_status(
    axum::extract::State(state): axum::extract::State<SharedState>,
) -> axum::Json<IndexerStatusResponse> {
    // Reading row states is blocking work (stored documents, one walk of the live postings).
    let searchers: Vec<(String, hbidx_indexer::TableSearcher)> = state
        .tables
        .iter()
        .filter(|(_, table)| !table.config.covered.is_empty())
        .map(|(name, table)| (name.clone(), table.searcher.clone()))
        .collect();
    let mut covered: std::collections::HashMap<String, Vec<hbidx_indexer::CoveredSize>> =
        tokio::task::spawn_blocking(move || {
            searchers
                .into_iter()
                .filter_map(
                    |(name, searcher)| match searcher.covered_sizes(COVERED_SAMPLE) {
                        Ok(sizes) => Some((name, sizes)),
                        Err(err) => {
                            tracing::warn!(table = %name, error = %err, "covered column sizes");
                            None
                        }
                    },
                )
                .collect()
        })
        .await
        .unwrap_or_default();
    let tables = state
        .tables
        .iter()
        .map(|(name, table)| {
            // Index counts come from the indexer thread (refreshed at each commit): walking
            // segments here would block the runtime.
            let stats = &table.stats;
            let partitions = stats
                .partitions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let status = TableIndexerStatus {
                checkpoint: table.indexed.borrow().positions.clone(),
                events: stats.events.load(Ordering::Relaxed),
                commits: stats.commits.load(Ordering::Relaxed),
                invalid_values: stats.invalid_values.load(Ordering::Relaxed),
                errors: stats.errors.load(Ordering::Relaxed),
                last_commit_ms: stats.last_commit_ms.load(Ordering::Relaxed),
                storage_full: stats.storage_full.load(Ordering::Relaxed),
                dead_letters: partitions.iter().map(|p| p.dead_letters).sum(),
                foreign_skipped: stats.foreign_skipped.load(Ordering::Relaxed)
                    + partitions.iter().map(|p| p.foreign_skipped).sum::<u64>(),
                retention_lost: partitions.iter().map(|p| p.retention_lost).sum(),
                partitions,
                rows: stats.rows.load(Ordering::Relaxed),
                docs: stats.docs.load(Ordering::Relaxed),
                segments: stats.segments.load(Ordering::Relaxed),
                index_bytes: stats.index_bytes.load(Ordering::Relaxed),
                covered: covered.remove(name).unwrap_or_default(),
            };
            (name.clone(), status)
        })
        .collect();
    let counters = &state.counters;
    axum::Json(IndexerStatusResponse {
        tables,
        lookups: counters.lookups.load(Ordering::Relaxed),
        stale_dropped: counters.stale_dropped.load(Ordering::Relaxed),
        read_repairs: counters.read_repairs.load(Ordering::Relaxed),
        repairs_skipped: counters.repairs_skipped.load(Ordering::Relaxed),
    })
}
