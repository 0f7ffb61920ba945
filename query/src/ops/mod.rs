//! The ops view: `GET /dashboard` (a self-contained page) and `GET /v1/ops/summary` (its data).
//!
//! A sampler task reads this process's own Prometheus exposition every
//! [`SAMPLE_INTERVAL`] and turns it into points: request and indexing rates, p50/p99 latencies
//! over a rolling [`WINDOW`], lag per partition, index sizes, dead letters, store health. So the
//! dashboard shows exactly the numbers Prometheus scrapes (one set of instrumentation, and the
//! HBase Thrift store's breaker gauge appears without code here), and the page only draws:
//! rates and percentiles are computed server-side, and the last [`HISTORY`] points are kept so
//! a freshly opened page has history at once.
//!
//! Every few samples it also rebuilds each table's region report (the schema crate's
//! [`HotspotReport`](hbidx_schema::split::HotspotReport)) from the live rowkeys in the index, on
//! a blocking thread, when the index changed since the last report.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use serde::Serialize;

use crate::{AppState, SharedState};

mod exposition;
mod hotspot;
mod series;
#[cfg(test)]
mod tests;

#[cfg(test)]
use exposition::histogram_quantile;
pub use exposition::{Sample, parse_exposition};
pub use hotspot::HotspotView;

use hotspot::compute_hotspot;
use series::History;

/// How often the sampler reads the metrics (and the page refreshes).
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(2);
/// Rates and percentiles are computed over this much time, so one slow second doesn't make
/// the chart jump and an idle second doesn't drop it to zero.
pub const WINDOW: Duration = Duration::from_secs(10);
/// Points kept for the charts: 5 minutes at the sample interval.
pub const HISTORY: usize = 150;
/// Region reports are rebuilt at most this often (it walks the table's live postings).
pub const HOTSPOT_INTERVAL: Duration = Duration::from_secs(10);
/// A region report reads at most this many rowkeys; bigger tables are sampled evenly, and the
/// counts per region are scaled to the live row count. Reading every rowkey grew with the
/// table: ~0.13 s of CPU per 100k rows (~1.3 µs a rowkey) and every rowkey held in memory,
/// every 10 s while the table is written to (~8% of the CPU of a demo taking 100 writes/s).
pub const HOTSPOT_SAMPLE: usize = 100_000;

/// The dashboard's memory: recent scrapes, derived points, region reports.
#[derive(Default)]
pub struct Ops {
    history: Mutex<History>,
    hotspots: Mutex<BTreeMap<String, HotspotView>>,
    /// Per table, the commit count the current region report was built at.
    hotspot_commits: Mutex<HashMap<String, u64>>,
}

/// Reads the metrics once and records a point. No-op without a recorder.
pub fn sample(state: &AppState) {
    let Some(handle) = &state.metrics else {
        return;
    };
    crate::telemetry::export_index_metrics(state);
    // Drains histogram samples into their buckets (there is no exporter task doing it).
    handle.run_upkeep();
    let samples = parse_exposition(&handle.render());
    state
        .ops
        .record(hbidx_store::now_ms().unsigned_abs(), samples);
}

/// Rebuilds the region reports of tables whose index changed since their last report.
async fn refresh_hotspots(state: &SharedState) {
    for (name, runtime) in &state.tables {
        let commits = runtime.stats.commits.load(Ordering::Relaxed);
        let known = state
            .ops
            .hotspot_commits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .copied();
        if known == Some(commits) {
            continue;
        }
        let runtime = runtime.clone();
        let outcome = tokio::task::spawn_blocking(move || compute_hotspot(&runtime)).await;
        match outcome {
            Ok(Ok(view)) => {
                state
                    .ops
                    .hotspots
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.clone(), view);
            }
            Ok(Err(reason)) => {
                tracing::warn!(table = %name, reason, "region report failed");
            }
            Err(err) => tracing::error!(table = %name, error = %err, "region report task failed"),
        }
        // Recorded even after a failure, so a broken splits file is reported once per change
        // rather than every few seconds.
        state
            .ops
            .hotspot_commits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), commits);
    }
}

/// Starts the sampler: a point every [`SAMPLE_INTERVAL`], region reports every
/// [`HOTSPOT_INTERVAL`]. It stops when the state is dropped.
pub fn spawn_sampler(state: &SharedState) -> tokio::task::JoinHandle<()> {
    let weak: Weak<AppState> = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(SAMPLE_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let every = (HOTSPOT_INTERVAL.as_millis() / SAMPLE_INTERVAL.as_millis()).max(1) as u64;
        let mut tick: u64 = 0;
        loop {
            ticker.tick().await;
            let Some(state) = weak.upgrade() else {
                return;
            };
            sample(&state);
            if tick.is_multiple_of(every) {
                refresh_hotspots(&state).await;
            }
            tick += 1;
        }
    })
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct TableSummary {
    name: String,
    rowkey: String,
    rows: u64,
    docs: u64,
    segments: u64,
    index_bytes: u64,
    events: u64,
    commits: u64,
    last_commit_ms: u64,
    dead_letters: u64,
    partitions: Vec<hbidx_indexer::PartitionStatus>,
    /// The table's rows per region, once the first report is built.
    hotspot: Option<HotspotView>,
}

/// `GET /v1/ops/summary`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct OpsSummary {
    version: &'static str,
    now_ms: u64,
    /// Whether this process records metrics (the series are empty without).
    metrics_enabled: bool,
    interval_seconds: u64,
    window_seconds: u64,
    /// Sample times, ms since the epoch.
    t: Vec<u64>,
    /// Series name → one value per sample time (null where there was none).
    series: BTreeMap<String, Vec<Option<f64>>>,
    tables: Vec<TableSummary>,
    /// The `[memory]` budget's parts: use against budget.
    memory: Vec<crate::telemetry::MemoryUse>,
    /// On a sharded tier: this instance's shard and, per shard, the replicas it counts ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<ClusterSummary>,
}

/// The dashboard's view of a sharded tier (labels are shard ids, never URLs).
#[derive(Serialize, utoipa::ToSchema)]
pub struct ClusterSummary {
    shard: usize,
    replica: usize,
    /// Per shard, in order: (replicas ready, replicas).
    shards: Vec<(usize, usize)>,
}

/// Everything the dashboard draws: recent rates and latencies, lag, index sizes, region reports.
#[utoipa::path(
    get,
    path = "/v1/ops/summary",
    tag = "ops",
    security(("api_key" = ["admin"])),
    responses((status = 200, description = "The dashboard's data", body = OpsSummary))
)]
pub async fn summary(State(state): State<SharedState>) -> Json<OpsSummary> {
    let (t, series) = state.ops.series();
    let hotspots = state
        .ops
        .hotspots
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let mut tables: Vec<TableSummary> = state
        .tables
        .values()
        .map(|runtime| {
            let stats = &runtime.stats;
            let partitions = stats
                .partitions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            TableSummary {
                name: runtime.config.name.clone(),
                rowkey: runtime.config.rowkey.describe(),
                rows: stats.rows.load(Ordering::Relaxed),
                docs: stats.docs.load(Ordering::Relaxed),
                segments: stats.segments.load(Ordering::Relaxed),
                index_bytes: stats.index_bytes.load(Ordering::Relaxed),
                events: stats.events.load(Ordering::Relaxed),
                commits: stats.commits.load(Ordering::Relaxed),
                last_commit_ms: stats.last_commit_ms.load(Ordering::Relaxed),
                dead_letters: partitions.iter().map(|p| p.dead_letters).sum(),
                partitions,
                hotspot: hotspots.get(&runtime.config.name).cloned(),
            }
        })
        .collect();
    tables.sort_by(|a, b| a.name.cmp(&b.name));
    Json(OpsSummary {
        version: env!("CARGO_PKG_VERSION"),
        now_ms: hbidx_store::now_ms().unsigned_abs(),
        metrics_enabled: state.metrics.is_some(),
        interval_seconds: SAMPLE_INTERVAL.as_secs(),
        window_seconds: WINDOW.as_secs(),
        t,
        series,
        tables,
        memory: state
            .memory
            .as_ref()
            .map(|probe| probe())
            .unwrap_or_default(),
        cluster: state.peers.as_ref().map(|peers| {
            let (shard, replica) = peers.own();
            ClusterSummary {
                shard,
                replica,
                shards: (0..peers.shard_count())
                    .map(|shard| {
                        let replicas = peers.replicas(shard);
                        let ready = replicas.iter().filter(|(_, ready, _)| *ready).count();
                        (ready, replicas.len())
                    })
                    .collect(),
            }
        }),
    })
}

/// The page, with its stylesheet and script inlined: one public response, nothing fetched from
/// anywhere else (no CDN, and only `/dashboard` needs to be reachable without a key).
static PAGE: LazyLock<String> = LazyLock::new(|| {
    include_str!("../dashboard/page.html")
        .replace("/*STYLE*/", include_str!("../dashboard/dashboard.css"))
        .replace("/*SCRIPT*/", include_str!("../dashboard/dashboard.js"))
});

/// The dashboard page. Public: it holds no data, and reads its API key from the URL fragment
/// (`/dashboard#key=…`) for its own requests to `/v1/ops/summary`.
#[utoipa::path(
    get,
    path = "/dashboard",
    tag = "ops",
    responses((status = 200, description = "A self-contained HTML page", body = String, content_type = "text/html"))
)]
pub async fn dashboard() -> Response {
    (
        [
            // The page reads its API key from the URL fragment; never let it be cached by a
            // shared proxy, and never send the URL on as a referrer.
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        Html(PAGE.as_str()),
    )
        .into_response()
}
