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
//! [`HotspotReport`]) from the live rowkeys in the index, on a blocking thread, when the index
//! changed since the last report.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{Html, IntoResponse, Response};
use hbidx_indexer::LiveRowkeys;
use hbidx_schema::codec::printable;
use hbidx_schema::config::{SplitConfig, TableConfig};
use hbidx_schema::split::{HotspotReport, RegionMap, hex_string_split};
use serde::Serialize;

use crate::{AppState, SharedState, TableRuntime};

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
/// Regions assumed for a table without `[tables.splits]`, as `hbidx hotspot` does.
const DEFAULT_REGIONS: u32 = 10;

/// Routes that only observe the service. They are left out of the QPS so that an open
/// dashboard (or a Prometheus scrape) doesn't show up as traffic.
const OBSERVER_ROUTES: &[&str] = &["/metrics", "/dashboard", "/v1/ops/summary"];
/// Routes whose latency is the lookup latency.
const LOOKUP_ROUTES: &[&str] = &[
    "/v1/tables/{table}/rows",
    "/v1/tables/{table}/rows:batch-lookup",
];

/// One sample of the Prometheus exposition: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the Prometheus text exposition format (what `PrometheusHandle::render` writes).
/// Comment lines are skipped; a malformed line is skipped too rather than failing the whole
/// sample (the text is ours, but a dashboard must never take the service down).
pub fn parse_exposition(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    let mut labels = Vec::new();
    let mut rest = &line[name_end..];
    if let Some(mut body) = rest.strip_prefix('{') {
        // `key="value"` pairs separated by commas; values escape backslash, quote and newline.
        loop {
            body = body.trim_start_matches([',', ' ']);
            if let Some(after) = body.strip_prefix('}') {
                rest = after;
                break;
            }
            let eq = body.find('=')?;
            let key = body[..eq].trim().to_string();
            let quoted = body[eq + 1..].strip_prefix('"')?;
            let mut value = String::new();
            let mut end = None;
            let mut chars = quoted.char_indices();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    other => value.push(other),
                }
            }
            body = &quoted[end? + 1..];
            labels.push((key, value));
        }
    }
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        other => other.parse().ok(),
    }
}

/// The samples of one scrape, looked up by metric name.
#[derive(Debug, Default)]
struct Snapshot {
    by_name: HashMap<String, Vec<Sample>>,
}

impl Snapshot {
    fn new(samples: Vec<Sample>) -> Self {
        let mut by_name: HashMap<String, Vec<Sample>> = HashMap::new();
        for sample in samples {
            by_name.entry(sample.name.clone()).or_default().push(sample);
        }
        Self { by_name }
    }

    fn samples(&self, name: &str) -> &[Sample] {
        self.by_name.get(name).map_or(&[], Vec::as_slice)
    }

    /// Sums a metric's samples per group (see [`group_key`]), keeping only those `keep`
    /// accepts.
    fn sum_by(
        &self,
        name: &str,
        label: &str,
        keep: impl Fn(&Sample) -> bool,
    ) -> BTreeMap<String, f64> {
        let mut sums = BTreeMap::new();
        for sample in self.samples(name).iter().filter(|s| keep(s)) {
            *sums.entry(group_key(sample, label)).or_insert(0.0) += sample.value;
        }
        sums
    }

    /// A histogram's cumulative bucket counts by `le`, summed over the samples `keep` accepts,
    /// grouped by `label` ("" for one group).
    fn buckets_by(
        &self,
        name: &str,
        label: &str,
        keep: impl Fn(&Sample) -> bool,
    ) -> BTreeMap<String, Vec<(f64, f64)>> {
        let mut groups: BTreeMap<String, BTreeMap<u64, (f64, f64)>> = BTreeMap::new();
        for sample in self
            .samples(&format!("{name}_bucket"))
            .iter()
            .filter(|s| keep(s))
        {
            let Some(le) = sample.label("le").and_then(parse_value) else {
                continue;
            };
            let group = group_key(sample, label);
            // Keyed by the bound's bits: bounds are positive, so bit order is numeric order.
            let entry = groups
                .entry(group)
                .or_default()
                .entry(le.to_bits())
                .or_insert((le, 0.0));
            entry.1 += sample.value;
        }
        groups
            .into_iter()
            .map(|(group, buckets)| (group, buckets.into_values().collect()))
            .collect()
    }
}

/// The group a sample belongs to: "" for `labels = ""` (one group), else the values of the
/// comma-separated `labels`, joined with `/` (`"store,op"` → `embedded/get_rows`).
fn group_key(sample: &Sample, labels: &str) -> String {
    if labels.is_empty() {
        return String::new();
    }
    labels
        .split(',')
        .map(|label| sample.label(label).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("/")
}

/// Prometheus' `histogram_quantile` over cumulative `(le, count)` buckets sorted by `le`:
/// linear interpolation inside the bucket holding the rank; the `+Inf` bucket answers with the
/// highest finite bound. `None` without observations.
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last().map(|&(_, count)| count)?;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut lower = 0.0;
    let mut below = 0.0;
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let in_bucket = count - below;
            if in_bucket <= 0.0 {
                return Some(le);
            }
            return Some(lower + (le - lower) * (rank - below) / in_bucket);
        }
        lower = le;
        below = count;
    }
    Some(lower)
}

/// `now - then` per bucket (a bucket missing from `then` counted from 0).
fn bucket_delta(now: &[(f64, f64)], then: Option<&Vec<(f64, f64)>>) -> Vec<(f64, f64)> {
    now.iter()
        .map(|&(le, count)| {
            let before = then
                .and_then(|b| b.iter().find(|(l, _)| *l == le))
                .map_or(0.0, |&(_, c)| c);
            (le, (count - before).max(0.0))
        })
        .collect()
}

fn route_in(sample: &Sample, routes: &[&str]) -> bool {
    sample.label("route").is_some_and(|r| routes.contains(&r))
}

/// One point of every series: `name → value`. Series names are `family` or
/// `family:subject` (`indexing_rate:user`, `lag:user/kafka:events/0`,
/// `store_p99_ms:embedded/get_rows`);
/// the page groups by family.
fn derive(now: &Snapshot, then: &Snapshot, seconds: f64) -> BTreeMap<String, f64> {
    let mut point = BTreeMap::new();
    let rate = |name: &str, label: &str, keep: &dyn Fn(&Sample) -> bool| {
        let before = then.sum_by(name, label, keep);
        now.sum_by(name, label, keep)
            .into_iter()
            .map(|(group, value)| {
                let delta = value - before.get(&group).copied().unwrap_or(0.0);
                (group, delta.max(0.0) / seconds)
            })
            .collect::<BTreeMap<_, _>>()
    };
    let quantiles = |name: &str, label: &str, keep: &dyn Fn(&Sample) -> bool| {
        let before = then.buckets_by(name, label, keep);
        now.buckets_by(name, label, keep)
            .into_iter()
            .filter_map(|(group, buckets)| {
                let delta = bucket_delta(&buckets, before.get(&group));
                let p50 = histogram_quantile(0.5, &delta)?;
                let p99 = histogram_quantile(0.99, &delta)?;
                Some((group, (p50 * 1000.0, p99 * 1000.0)))
            })
            .collect::<BTreeMap<_, _>>()
    };

    // Requests.
    let not_observer = |s: &Sample| !route_in(s, OBSERVER_ROUTES);
    let requests = "hbidx_http_requests_total";
    point.insert(
        "qps".into(),
        rate(requests, "", &not_observer).values().sum(),
    );
    point.insert(
        "lookup_qps".into(),
        rate(requests, "", &|s| route_in(s, LOOKUP_ROUTES))
            .values()
            .sum(),
    );
    point.insert(
        "errors_per_s".into(),
        rate(requests, "", &|s| {
            not_observer(s) && s.label("status") == Some("5xx")
        })
        .values()
        .sum(),
    );
    if let Some((p50, p99)) = quantiles("hbidx_http_request_duration_seconds", "", &|s| {
        route_in(s, LOOKUP_ROUTES)
    })
    .remove("")
    {
        point.insert("lookup_p50_ms".into(), p50);
        point.insert("lookup_p99_ms".into(), p99);
    }

    // Indexing, per table. Every indexed table has the events counter from its first sample.
    let all = |_: &Sample| true;
    let indexed = rate("hbidx_indexer_events_total", "table", &all);
    for (table, per_second) in &indexed {
        point.insert(format!("indexing_rate:{table}"), *per_second);
    }
    for (table, (_, p99)) in quantiles("hbidx_indexer_commit_duration_seconds", "table", &all) {
        point.insert(format!("commit_p99_ms:{table}"), p99);
    }
    for (family, metric) in [
        ("index_bytes", "hbidx_index_bytes"),
        ("index_docs", "hbidx_index_docs"),
    ] {
        for (table, value) in now.sum_by(metric, "table", all) {
            point.insert(format!("{family}:{table}"), value);
        }
    }
    let dead_letters = now.sum_by("hbidx_dead_letters_total", "table", all);
    for table in indexed.keys().chain(dead_letters.keys()) {
        // A table whose source has no dead-letter path (the change feed) has none: 0.
        let value = dead_letters.get(table).copied().unwrap_or(0.0);
        point.insert(format!("dead_letters:{table}"), value);
    }
    for sample in now.samples("hbidx_source_lag_events") {
        let (Some(table), Some(source), Some(partition)) = (
            sample.label("table"),
            sample.label("source"),
            sample.label("partition"),
        ) else {
            continue;
        };
        point.insert(format!("lag:{table}/{source}/{partition}"), sample.value);
    }

    // The store.
    let calls = "hbidx_store_call_duration_seconds_count";
    for (store, per_second) in rate(calls, "store", &all) {
        point.insert(format!("store_calls_per_s:{store}"), per_second);
        point.insert(format!("store_errors_per_s:{store}"), 0.0);
    }
    for (store, per_second) in rate("hbidx_store_errors_total", "store", &all) {
        point.insert(format!("store_errors_per_s:{store}"), per_second);
    }
    // Per operation: a multi-get and a batch write of the same store differ by design.
    for (store_op, (_, p99)) in quantiles("hbidx_store_call_duration_seconds", "store,op", &all) {
        point.insert(format!("store_p99_ms:{store_op}"), p99);
    }
    for (store, state) in now.sum_by("hbidx_store_breaker_state", "store", all) {
        point.insert(format!("breaker:{store}"), state);
    }
    point
}

/// A table's rowkeys over its regions, as the page draws it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct HotspotView {
    /// Where the regions come from (`codec, 10 regions`, `configured hex`, …).
    pub splits: String,
    pub regions: Vec<RegionView>,
    /// Live rows of the table.
    pub total: u64,
    /// Rowkeys the report was computed from: `total`, or a sample of [`HOTSPOT_SAMPLE`] when the
    /// table is bigger (then each region's `rows` is an estimate).
    pub sampled: u64,
    pub cv: Option<f64>,
    pub max_mean_ratio: Option<f64>,
    pub computed_ms: u64,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RegionView {
    /// HBase's printable form of the region's start key ("" = the start of the table).
    pub start: String,
    pub end: String,
    pub rows: u64,
}

/// The regions of a table: its `[tables.splits]`, or, like `hbidx hotspot`, the design's
/// codec buckets (HexStringSplit without a hash prefix) over 10 regions. Reads a splits file:
/// call it from a blocking thread.
fn region_map(table: &TableConfig, rowkeys: &[Vec<u8>]) -> Result<(RegionMap, String), String> {
    let keys = match &table.splits {
        Some(SplitConfig::File { path }) => {
            let text = std::fs::read_to_string(path)
                .map_err(|err| format!("cannot read the splits file {path}: {err}"))?;
            table.split_keys(Some(&text), None)
        }
        // Sampled splits are quantiles of a sample; the live rowkeys are the best sample.
        Some(SplitConfig::Sampled { .. }) => table.split_keys(None, Some(rowkeys.to_vec())),
        Some(_) => table.split_keys(None, None),
        None => Ok(match table.rowkey.codec_splits(DEFAULT_REGIONS) {
            Some(keys) => keys,
            None => hex_string_split(DEFAULT_REGIONS).map_err(|err| err.to_string())?,
        }),
    }
    .map_err(|err| err.to_string())?;
    let described = match &table.splits {
        Some(splits) => format!("configured {}", splits.algo()),
        None if table.rowkey.codec_splits(DEFAULT_REGIONS).is_some() => {
            "codec buckets (no [tables.splits])".to_string()
        }
        None => "HexStringSplit (no [tables.splits])".to_string(),
    };
    let map = RegionMap::new(keys).map_err(|err| err.to_string())?;
    let described = format!("{described}, {} regions", map.region_count());
    Ok((map, described))
}

/// Builds a table's region report from the live rowkeys of its committed index. Blocking.
fn compute_hotspot(runtime: &TableRuntime) -> Result<HotspotView, String> {
    let sample = runtime
        .searcher
        .live_rowkeys_sample(HOTSPOT_SAMPLE)
        .map_err(|err| err.to_string())?;
    let (map, splits) = region_map(&runtime.config, &sample.rowkeys)?;
    Ok(hotspot_view(&map, splits, &sample))
}

/// The report over `sample`'s rowkeys, with each region's count scaled to the live rows (cv
/// and max/mean don't depend on the scale).
fn hotspot_view(map: &RegionMap, splits: String, sample: &LiveRowkeys) -> HotspotView {
    let report = HotspotReport::compute(map, sample.rowkeys.iter());
    let scale = sample.live as f64 / report.total.max(1) as f64;
    let regions = report
        .regions
        .iter()
        .zip(&report.counts)
        .map(|(region, rows)| RegionView {
            start: printable(&region.start),
            end: printable(&region.end),
            rows: (*rows as f64 * scale).round() as u64,
        })
        .collect();
    HotspotView {
        splits,
        regions,
        total: sample.live,
        sampled: report.total,
        cv: report.cv,
        max_mean_ratio: report.max_mean_ratio,
        computed_ms: now_ms(),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

struct Point {
    t_ms: u64,
    values: BTreeMap<String, f64>,
}

#[derive(Default)]
struct History {
    /// The last few scrapes, for windowed rates: `(unix ms, snapshot)`.
    snapshots: VecDeque<(u64, Snapshot)>,
    points: VecDeque<Point>,
}

/// The dashboard's memory: recent scrapes, derived points, region reports.
#[derive(Default)]
pub struct Ops {
    history: Mutex<History>,
    hotspots: Mutex<BTreeMap<String, HotspotView>>,
    /// Per table, the commit count the current region report was built at.
    hotspot_commits: Mutex<HashMap<String, u64>>,
}

impl Ops {
    /// Adds one scrape taken at `t_ms` and derives a point against the scrape about one
    /// [`WINDOW`] older (the oldest kept while the history is shorter).
    pub fn record(&self, t_ms: u64, samples: Vec<Sample>) {
        let mut guard = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let history = &mut *guard;
        let snapshot = Snapshot::new(samples);
        let window_ms = WINDOW.as_millis() as u64;
        let derived = history
            .snapshots
            .iter()
            .find(|(at, _)| t_ms.saturating_sub(*at) <= window_ms && *at < t_ms)
            .map(|(then_ms, then)| derive(&snapshot, then, (t_ms - then_ms) as f64 / 1000.0));
        if let Some(values) = derived {
            history.points.push_back(Point { t_ms, values });
            while history.points.len() > HISTORY {
                history.points.pop_front();
            }
        }
        history.snapshots.push_back((t_ms, snapshot));
        while history
            .snapshots
            .front()
            .is_some_and(|(at, _)| t_ms.saturating_sub(*at) > window_ms)
        {
            history.snapshots.pop_front();
        }
    }

    /// The kept points as aligned arrays: `t` (unix ms) and one array per series, `null`
    /// where a series had no value at that point (e.g. no lookups in the window).
    fn series(&self) -> (Vec<u64>, BTreeMap<String, Vec<Option<f64>>>) {
        let history = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let t: Vec<u64> = history.points.iter().map(|p| p.t_ms).collect();
        let mut series: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
        for (i, point) in history.points.iter().enumerate() {
            for (name, value) in &point.values {
                let column = series
                    .entry(name.clone())
                    .or_insert_with(|| vec![None; t.len()]);
                column[i] = value.is_finite().then_some(*value);
            }
        }
        (t, series)
    }
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
    state.ops.record(now_ms(), samples);
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
        now_ms: now_ms(),
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
    })
}

/// The page, with its stylesheet and script inlined: one public response, nothing fetched from
/// anywhere else (no CDN, and only `/dashboard` needs to be reachable without a key).
static PAGE: LazyLock<String> = LazyLock::new(|| {
    include_str!("dashboard/page.html")
        .replace("/*STYLE*/", include_str!("dashboard/dashboard.css"))
        .replace("/*SCRIPT*/", include_str!("dashboard/dashboard.js"))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(text: &str) -> Vec<Sample> {
        parse_exposition(text)
    }

    #[test]
    fn a_sampled_region_report_scales_its_counts_to_the_live_rows() {
        let map = RegionMap::new(vec![b"m".to_vec()]).unwrap();
        let rowkeys: Vec<Vec<u8>> = vec![b"a".to_vec(), b"b".to_vec(), b"n".to_vec()];
        // All rows read: the counts are the counts.
        let exact = LiveRowkeys {
            rowkeys: rowkeys.clone(),
            live: 3,
        };
        let view = hotspot_view(&map, "test".into(), &exact);
        let rows: Vec<u64> = view.regions.iter().map(|r| r.rows).collect();
        assert_eq!((rows, view.total, view.sampled), (vec![2, 1], 3, 3));
        // Three rows sampled out of 300: each stands for 100.
        let sampled = LiveRowkeys { rowkeys, live: 300 };
        let view = hotspot_view(&map, "test".into(), &sampled);
        let rows: Vec<u64> = view.regions.iter().map(|r| r.rows).collect();
        assert_eq!((rows, view.total, view.sampled), (vec![200, 100], 300, 3));
        // The spread measures are the sample's.
        assert_eq!(view.max_mean_ratio, Some(2.0 / 1.5));
    }

    #[test]
    fn parses_the_exposition_format() {
        let parsed = samples(
            "# HELP hbidx_x help text\n\
             # TYPE hbidx_x counter\n\
             hbidx_x 3\n\
             hbidx_y{route=\"/v1/tables/{table}/rows\",status=\"2xx\"} 12.5\n\
             hbidx_z{a=\"quote \\\" comma, brace } back \\\\ nl \\n\",b=\"2\"} +Inf\n\
             hbidx_broken{a=\"unterminated} 1\n",
        );
        assert_eq!(parsed.len(), 3, "{parsed:?}");
        assert_eq!((parsed[0].name.as_str(), parsed[0].value), ("hbidx_x", 3.0));
        assert_eq!(parsed[1].label("route"), Some("/v1/tables/{table}/rows"));
        assert_eq!(parsed[1].label("status"), Some("2xx"));
        assert_eq!(parsed[1].value, 12.5);
        assert_eq!(
            parsed[2].label("a"),
            Some("quote \" comma, brace } back \\ nl \n")
        );
        assert_eq!(parsed[2].label("b"), Some("2"));
        assert!(parsed[2].value.is_infinite());
    }

    #[test]
    fn quantiles_interpolate_like_prometheus() {
        let buckets = [
            (0.001, 50.0),
            (0.01, 90.0),
            (0.1, 100.0),
            (f64::INFINITY, 100.0),
        ];
        let p50 = histogram_quantile(0.5, &buckets).unwrap();
        assert!((p50 - 0.001).abs() < 1e-12, "{p50}");
        let p90 = histogram_quantile(0.9, &buckets).unwrap();
        assert!((p90 - 0.01).abs() < 1e-12, "{p90}");
        let p99 = histogram_quantile(0.99, &buckets).unwrap();
        assert!((p99 - (0.01 + 0.09 * 9.0 / 10.0)).abs() < 1e-12, "{p99}");
        // Everything beyond the last finite bound: answer that bound.
        assert_eq!(
            histogram_quantile(0.5, &[(0.1, 0.0), (f64::INFINITY, 4.0)]),
            Some(0.1)
        );
        assert_eq!(
            histogram_quantile(0.5, &[(0.1, 0.0), (f64::INFINITY, 0.0)]),
            None
        );
    }

    fn scrape(lookups: u64, scrapes: u64, fast: u64, slow: u64, events: u64, lag: u64) -> String {
        let route = "/v1/tables/{table}/rows";
        let total = fast + slow;
        format!(
            "hbidx_http_requests_total{{route=\"{route}\",method=\"GET\",status=\"2xx\"}} {lookups}\n\
             hbidx_http_requests_total{{route=\"/metrics\",method=\"GET\",status=\"2xx\"}} {scrapes}\n\
             hbidx_http_request_duration_seconds_bucket{{route=\"{route}\",method=\"GET\",status=\"2xx\",le=\"0.001\"}} {fast}\n\
             hbidx_http_request_duration_seconds_bucket{{route=\"{route}\",method=\"GET\",status=\"2xx\",le=\"0.01\"}} {total}\n\
             hbidx_http_request_duration_seconds_bucket{{route=\"{route}\",method=\"GET\",status=\"2xx\",le=\"+Inf\"}} {total}\n\
             hbidx_indexer_events_total{{table=\"user\"}} {events}\n\
             hbidx_source_lag_events{{table=\"user\",source=\"kafka:t\",partition=\"3\"}} {lag}\n\
             hbidx_index_bytes{{table=\"user\"}} 4096\n\
             hbidx_store_call_duration_seconds_count{{store=\"embedded\",op=\"get_rows\"}} {lookups}\n\
             hbidx_store_breaker_state{{store=\"thrift\"}} 2\n"
        )
    }

    #[test]
    fn points_are_rates_and_percentiles_over_the_window() {
        let ops = Ops::default();
        ops.record(1_000, samples(&scrape(0, 0, 0, 0, 0, 9)));
        // One scrape is not a rate yet.
        assert!(ops.series().0.is_empty());
        // 2 s later: 40 lookups (20/s), all fast; scrapes don't count as traffic.
        ops.record(3_000, samples(&scrape(40, 5, 40, 0, 1000, 7)));
        // 12 s after the start the first scrape has left the window: rates are against t=3 s.
        ops.record(13_000, samples(&scrape(140, 9, 90, 50, 1000, 0)));
        let (t, series) = ops.series();
        assert_eq!(t, vec![3_000, 13_000]);
        assert_eq!(series["qps"], vec![Some(20.0), Some(10.0)]);
        assert_eq!(series["lookup_qps"], vec![Some(20.0), Some(10.0)]);
        assert_eq!(series["indexing_rate:user"], vec![Some(500.0), Some(0.0)]);
        assert_eq!(series["lag:user/kafka:t/3"], vec![Some(7.0), Some(0.0)]);
        assert_eq!(series["index_bytes:user"], vec![Some(4096.0), Some(4096.0)]);
        assert_eq!(series["dead_letters:user"], vec![Some(0.0), Some(0.0)]);
        assert_eq!(series["breaker:thrift"], vec![Some(2.0), Some(2.0)]);
        assert_eq!(
            series["store_calls_per_s:embedded"],
            vec![Some(20.0), Some(10.0)]
        );
        // Window 3 s → 13 s: 50 fast, 50 slow requests; p50 at the fast bucket's bound.
        let p50 = series["lookup_p50_ms"][1].unwrap();
        assert!((p50 - 1.0).abs() < 1e-9, "{p50}");
        let p99 = series["lookup_p99_ms"][1].unwrap();
        assert!(p99 > 9.0 && p99 <= 10.0, "{p99}");
    }

    #[test]
    fn history_is_bounded() {
        let ops = Ops::default();
        for i in 0..(HISTORY as u64 + 20) {
            ops.record(i * 2_000, samples(&scrape(i, 0, i, 0, i, 0)));
        }
        let (t, series) = ops.series();
        assert_eq!(t.len(), HISTORY);
        assert!(series.values().all(|values| values.len() == HISTORY));
    }

    #[test]
    fn default_regions_follow_the_rowkey_design() {
        let config =
            hbidx_schema::config::parse_config(include_str!("../../deploy/config/hbidx.toml"))
                .unwrap();
        let table = &config.tables[0];
        let (map, described) = region_map(table, &[]).unwrap();
        assert!(map.region_count() > 1, "{described}");
        assert!(described.contains("regions"), "{described}");
    }
}
