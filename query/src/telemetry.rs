//! Prometheus metrics: the catalogue of every `hbidx_*` metric, the recorder setup, the HTTP
//! middleware that times requests, and `GET /metrics`.
//!
//! Metrics are recorded where the work happens, through the `metrics` facade: the HTTP layer
//! and lookups here, the indexer thread in `hbidx-indexer` (`pipeline/`, `kafka.rs`), store
//! calls in `hbidx_store::MeteredStore`. Without an installed recorder (unit tests that build
//! the router directly) every macro is a no-op and `/metrics` answers 404.
//!
//! Labels are bounded on purpose: a route is its `MatchedPath` template
//! (`/v1/tables/{table}/rows`, never the raw URI with keys in it), a lookup is labelled by the
//! field's kind and match mode, an index by its table, lag by source partition. A value looked
//! up, a natural key or a rowkey never becomes a label: they would create a series per person
//! and put personal data into the monitoring system.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

use crate::{ApiError, AppState, SharedState};

/// What kind of Prometheus metric an entry of [`CATALOGUE`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// One exported metric: its name, kind, labels and meaning. The metrics reference
/// (docs/reference/metrics.md, rendered by [`metrics_reference_markdown`]) and the `# HELP`
/// lines come from here.
#[derive(Debug, Clone, Copy)]
pub struct MetricDoc {
    pub name: &'static str,
    pub kind: MetricKind,
    pub labels: &'static str,
    pub help: &'static str,
}

const fn doc(
    name: &'static str,
    kind: MetricKind,
    labels: &'static str,
    help: &'static str,
) -> MetricDoc {
    MetricDoc {
        name,
        kind,
        labels,
        help,
    }
}

use MetricKind::{Counter, Gauge, Histogram};

/// Every metric hbidx exports. The `hbidx_thrift_*` series and the breaker gauge come from the
/// HBase store (store/src/hbase/, breaker.rs).
pub const CATALOGUE: &[MetricDoc] = &[
    doc(
        "hbidx_build_info",
        Gauge,
        "version",
        "Always 1; the running hbidx version.",
    ),
    doc(
        "hbidx_http_requests_total",
        Counter,
        "route, method, status",
        "HTTP requests answered, by route template (`unmatched` for no route), method (`other` for one the API doesn't serve) and status class (2xx, 4xx, 5xx).",
    ),
    doc(
        "hbidx_http_request_duration_seconds",
        Histogram,
        "route, method, status",
        "Time from request to response head, by route template and status class.",
    ),
    doc(
        "hbidx_auth_refusals_limited_total",
        Counter,
        "",
        "Requests without a valid key answered 429 instead of 401: their address is over `[security] refused_rate_limit`. Not audited one by one.",
    ),
    doc(
        "hbidx_connections_refused_total",
        Counter,
        "reason",
        "Connections closed at accept: `per_client` (the address holds `[server] max_connections_per_client` already).",
    ),
    doc(
        "hbidx_dead_letters_dropped_total",
        Counter,
        "table",
        "Dead-letter records dropped to keep a table's files within `[[sources]] dead_letter_max_mb` (the oldest file's, at rotation).",
    ),
    doc(
        "hbidx_lookups_total",
        Counter,
        "table, kind, match",
        "Lookup conditions evaluated, by field kind (phone, idcard, name, keyword) and match \
         mode (exact, prefix, partial, pinyin, pinyin_prefix, suffix); a batch counts each value.",
    ),
    doc(
        "hbidx_lookup_hits",
        Histogram,
        "table",
        "Rows returned per lookup (per value in a batch), after the re-check.",
    ),
    doc(
        "hbidx_lookup_dropped_stale_total",
        Counter,
        "table",
        "Read repair: index hits dropped because the fetched row no longer matched or existed.",
    ),
    doc(
        "hbidx_read_repairs_total",
        Counter,
        "table",
        "Read repair: index entries found to drift from the store after a dropped hit, queued \
         for the indexer to fix.",
    ),
    doc(
        "hbidx_writes_total",
        Counter,
        "table, op",
        "Write-through requests accepted (op = put, delete).",
    ),
    doc(
        "hbidx_indexer_events_total",
        Counter,
        "table",
        "Change events applied to the index (the indexing rate is its rate()).",
    ),
    doc(
        "hbidx_indexer_commits_total",
        Counter,
        "table",
        "Index commits.",
    ),
    doc(
        "hbidx_indexer_commit_duration_seconds",
        Histogram,
        "table",
        "Index commit latency, including the store fsync before it and the reader reload.",
    ),
    doc(
        "hbidx_indexer_errors_total",
        Counter,
        "table",
        "Indexer failures: source polls, applies and commits that failed and were retried.",
    ),
    doc(
        "hbidx_indexer_invalid_values_total",
        Counter,
        "table",
        "Indexed column values that failed normalisation (the row is indexed on its other \
         fields).",
    ),
    doc(
        "hbidx_indexer_foreign_skipped_total",
        Counter,
        "table",
        "With [cluster]: events and repairs for rows of other shards, skipped (another shard \
         indexes them).",
    ),
    doc(
        "hbidx_index_rows",
        Gauge,
        "table",
        "Live rows in the committed index.",
    ),
    doc(
        "hbidx_index_docs",
        Gauge,
        "table",
        "Documents in the committed index, including deleted rows' tombstone documents.",
    ),
    doc(
        "hbidx_index_segments",
        Gauge,
        "table",
        "tantivy segments in the committed index.",
    ),
    doc(
        "hbidx_index_merge_max_docs",
        Gauge,
        "table",
        "The most documents the table's segment merges write at once (its live writer's and a reindex's together, so also the biggest merge): the table's share of `[memory] index_merges_mb` over the ~24 bytes a merge holds per document. A table of more rows than this keeps several segments of about this size.",
    ),
    doc(
        "hbidx_index_bytes",
        Gauge,
        "table",
        "Size of the committed index on disk.",
    ),
    doc(
        "hbidx_source_lag_events",
        Gauge,
        "table, source, partition",
        "Events written to the source partition and not yet covered by an index commit.",
    ),
    doc(
        "hbidx_source_event_time_lag_seconds",
        Gauge,
        "table, source, partition",
        "Now minus the event time of the last event read, while there is lag; 0 when caught up. From Kafka the event time is the message's timestamp (when its producer, hbidx or the HBase Kafka Proxy, sent it), not the HBase cell's.",
    ),
    doc(
        "hbidx_source_checkpoint_offset",
        Gauge,
        "table, source, partition",
        "Offset of the last event covered by an index commit.",
    ),
    doc(
        "hbidx_dead_letters_total",
        Counter,
        "table, source",
        "Undecodable events written to the dead-letter file.",
    ),
    doc(
        "hbidx_index_rebuilt_total",
        Counter,
        "table, reason",
        "Indexes rebuilt from the embedded store at start because they could not resume from their checkpoint (`feed_mismatch`: the checkpoint is ahead of the store's change feed, or behind what the feed has trimmed). The store is the truth; the error log line says which. Alert on any increase.",
    ),
    doc(
        "hbidx_source_retention_lost_events_total",
        Counter,
        "table, source",
        "Events the topic's retention deleted before this index read them (offsets resumed above the checkpoint, below the partition's oldest offset): their writes are missing from the index until `verify --full --repair`. Alert on any increase.",
    ),
    doc(
        "hbidx_store_call_duration_seconds",
        Histogram,
        "store, op",
        "Row store call latency (op = get_rows, scan, mutate), failed calls included.",
    ),
    doc(
        "hbidx_store_errors_total",
        Counter,
        "store, op, kind",
        "Row store calls that failed, by error kind (storage, unavailable, corrupt, …).",
    ),
    doc(
        "hbidx_thrift_call_seconds",
        Histogram,
        "op, status",
        "HBase Thrift1 calls including their retries, by Thrift operation and outcome (ok, \
         error).",
    ),
    doc(
        "hbidx_thrift_errors_total",
        Counter,
        "op, kind",
        "Failed HBase Thrift1 attempts: transport (retried) or rejected (HBase answered with an \
         error).",
    ),
    doc(
        "hbidx_rowkey_cache_bytes",
        Gauge,
        "table",
        "Weight of the decoded rowkeys a table's searcher caches (bounded by its budget).",
    ),
    doc(
        "hbidx_rowkey_cache_entries",
        Gauge,
        "table",
        "Cached chunks of 64 decoded rowkeys.",
    ),
    doc(
        "hbidx_rowkey_cache_hits_total",
        Counter,
        "table",
        "Rowkeys of lookup results found already decoded in the cache.",
    ),
    doc(
        "hbidx_rowkey_cache_misses_total",
        Counter,
        "table",
        "Rowkeys of lookup results whose chunk had to be decoded from the index (a hit ratio \
         that stays low means the cache budget is below the working set).",
    ),
    doc(
        "hbidx_memory_budget_bytes",
        Gauge,
        "part",
        "Each part's share of the `[memory]` budget (index_writers, store_cache, \
         store_memtables, row_cache, rowkey_cache, source_buffers, index_merges).",
    ),
    doc(
        "hbidx_memory_used_bytes",
        Gauge,
        "part",
        "What each part of the `[memory]` budget holds now (index_writers: the heap the open \
         writers may fill; index_merges: ~24 bytes a document being merged; source_buffers \
         is bounded by librdkafka, not reported).",
    ),
    doc(
        "hbidx_store_breaker_state",
        Gauge,
        "store",
        "Circuit breaker of a remote store: 0 closed, 1 half-open, 2 open.",
    ),
    doc(
        "hbidx_shard_calls_total",
        Counter,
        "shard, outcome",
        "Calls to other shards' replicas for lookups of a sharded tier (outcome ok or error; \
         an error moves on to the shard's next replica).",
    ),
    doc(
        "hbidx_shard_call_seconds",
        Histogram,
        "shard",
        "Time of one call to another shard's replica.",
    ),
    doc(
        "hbidx_cluster_replicas_ready",
        Gauge,
        "shard",
        "Replicas of each shard this instance counts ready (probed every second; a failed \
         call marks one not ready at once).",
    ),
];

/// The metrics table of docs/reference/metrics.md, one row per [`CATALOGUE`] entry, so the
/// reference can't drift from what `/metrics` exports (a unit test compares the two).
#[cfg(test)]
fn metrics_reference_markdown() -> String {
    let mut out = String::from("| metric | type | labels | meaning |\n|---|---|---|---|\n");
    for metric in CATALOGUE {
        // A `|` would end the cell early; no text has one today, but the table must stay a table.
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            metric.name,
            metric.kind.as_str(),
            metric.labels,
            metric.help.replace('|', "\\|")
        ));
    }
    out
}

/// Latency buckets (seconds) for every `*_seconds` histogram: 100 µs (an in-memory lookup)
/// up to 10 s (a commit stalled on a slow disk). Buckets, not summaries, so Prometheus can
/// aggregate across instances and `histogram_quantile` works.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Buckets for `hbidx_lookup_hits` (rows per lookup; the page limit is 1000).
pub const HITS_BUCKETS: &[f64] = &[
    0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
];

/// The recorder hbidx uses, not installed: histograms as buckets, HELP text from the
/// catalogue once a recorder is installed ([`describe`]).
pub fn prometheus_builder() -> Result<PrometheusBuilder, BuildError> {
    PrometheusBuilder::new()
        .set_buckets(SECONDS_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full("hbidx_lookup_hits".into()), HITS_BUCKETS)
}

/// Installs the process-wide recorder (once, in the binary) and returns the handle that
/// `/metrics` and the dashboard read.
pub fn install_recorder() -> Result<PrometheusHandle, BuildError> {
    let handle = prometheus_builder()?.install_recorder()?;
    describe();
    Ok(handle)
}

/// Registers the HELP text of every catalogued metric and the build info gauge with the
/// current recorder.
pub fn describe() {
    for metric in CATALOGUE {
        match metric.kind {
            MetricKind::Counter => metrics::describe_counter!(metric.name, metric.help),
            MetricKind::Gauge => metrics::describe_gauge!(metric.name, metric.help),
            MetricKind::Histogram => metrics::describe_histogram!(metric.name, metric.help),
        }
    }
    metrics::gauge!("hbidx_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}

/// The status class label: a fixed set, unlike the status code space.
fn status_class(status: StatusCode) -> &'static str {
    match status.as_u16() / 100 {
        1 => "1xx",
        2 => "2xx",
        3 => "3xx",
        4 => "4xx",
        _ => "5xx",
    }
}

/// Metric handles by label values. The `metrics` macros look a series up in the recorder's
/// registry on every call (hash the whole key, allocate its labels); at tens of thousands of
/// lookups a second that was several percent of a lookup's CPU. The hot path keeps the handles
/// here instead. Label sets are few and fixed (routes, tables, field kinds), and the cache
/// stops growing at [`HandleCache::MAX`] anyway: past it, handles are made per call as before.
pub struct HandleCache<K, H> {
    entries: std::sync::RwLock<Vec<(K, H)>>,
}

impl<K, H> Default for HandleCache<K, H> {
    fn default() -> Self {
        Self {
            entries: std::sync::RwLock::new(Vec::new()),
        }
    }
}

impl<K, H: Clone> HandleCache<K, H> {
    const MAX: usize = 256;

    /// The handle whose key satisfies `is_key`, else `make()`'s, cached. A linear scan: the
    /// sets are small, and comparing a few short keys beats hashing one.
    pub fn get(&self, is_key: impl Fn(&K) -> bool, make: impl FnOnce() -> (K, H)) -> H {
        {
            let entries = self
                .entries
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some((_, handle)) = entries.iter().find(|(key, _)| is_key(key)) {
                return handle.clone();
            }
        }
        let (key, handle) = make();
        let mut entries = self
            .entries
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if entries.len() < Self::MAX && !entries.iter().any(|(k, _)| is_key(k)) {
            entries.push((key, handle.clone()));
        }
        handle
    }
}

/// The hot-path metric handles of one [`crate::AppState`] (bound to the recorder that was
/// current when each was first used, like the macros they replace).
#[derive(Default)]
pub struct MetricHandles {
    /// `hbidx_http_requests_total` and `hbidx_http_request_duration_seconds` by route template,
    /// method and status class.
    http: HandleCache<(String, &'static str, &'static str), (metrics::Counter, metrics::Histogram)>,
    /// `hbidx_lookups_total` by table, field kind and match mode.
    pub(crate) lookups: HandleCache<(String, &'static str, &'static str), metrics::Counter>,
    /// `hbidx_lookup_hits` by table.
    pub(crate) hits: HandleCache<String, metrics::Histogram>,
}

/// The `method` label: the methods the API serves, and `other` for anything else. A client,
/// even one without a key, chooses the method string, so labelling by it would let anyone
/// create a new time series (and memory, and scrape size) per request.
pub(crate) fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Counts and times one HTTP request by its route pattern (`unmatched` for a path no route
/// has), method and status class. Called by [`crate::front`] once the response is built.
pub fn record_http(
    state: &AppState,
    route: Option<&MatchedPath>,
    method: &Method,
    status: StatusCode,
    started: Instant,
) {
    let route = route.map_or("unmatched", |path| path.as_str());
    let status = status_class(status);
    let method = method_label(method);
    let (requests, duration) = state.metric_handles.http.get(
        |(r, m, s)| r == route && *m == method && *s == status,
        || {
            let labels = [
                ("route", route.to_string()),
                ("method", method.to_string()),
                ("status", status.to_string()),
            ];
            let handles = (
                metrics::counter!("hbidx_http_requests_total", &labels),
                metrics::histogram!("hbidx_http_request_duration_seconds", &labels),
            );
            ((route.to_string(), method, status), handles)
        },
    );
    requests.increment(1);
    duration.record(started.elapsed().as_secs_f64());
}

/// One part of the `[memory]` budget as the process uses it now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct MemoryUse {
    /// `index_writers`, `store_cache`, `store_memtables`, `row_cache`, `rowkey_cache`,
    /// `source_buffers`, `index_merges`.
    pub part: String,
    /// Bytes held now; absent where the owner doesn't count them (librdkafka's prefetch queues,
    /// which it bounds itself; tantivy's merges, bounded by the merge cap).
    pub used_bytes: Option<u64>,
    pub budget_bytes: u64,
}

/// Reads the budget's parts (the binary wires the store and the indexes in). Cheap: atomics
/// and cache counters, no walk of the data.
pub type MemoryProbe = Arc<dyn Fn() -> Vec<MemoryUse> + Send + Sync>;

/// Copies what the indexes and the memory budget count themselves (each table's rowkey cache,
/// each budget part) into the recorder. It is read, not recorded per lookup, so it is refreshed where the metrics are
/// read: at every `/metrics` scrape and every dashboard sample.
pub fn export_index_metrics(state: &AppState) {
    for (name, table) in &state.tables {
        let cache = table.searcher.rowkey_cache_stats();
        let label = [("table", name.clone())];
        metrics::gauge!("hbidx_rowkey_cache_bytes", &label).set(cache.bytes as f64);
        metrics::gauge!("hbidx_rowkey_cache_entries", &label).set(cache.entries as f64);
        metrics::counter!("hbidx_rowkey_cache_hits_total", &label).absolute(cache.hits);
        metrics::counter!("hbidx_rowkey_cache_misses_total", &label).absolute(cache.misses);
    }
    if let Some(probe) = &state.memory {
        for part in probe() {
            let label = [("part", part.part)];
            metrics::gauge!("hbidx_memory_budget_bytes", &label).set(part.budget_bytes as f64);
            if let Some(used) = part.used_bytes {
                metrics::gauge!("hbidx_memory_used_bytes", &label).set(used as f64);
            }
        }
    }
}

/// `GET /metrics`: the Prometheus text exposition of everything recorded in this process.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "ops",
    security(("api_key" = ["admin"])),
    responses(
        (status = 200, description = "Prometheus text format 0.0.4", body = String, content_type = "text/plain"),
        (status = 404, description = "This process has no metrics recorder", body = crate::ErrorResponse),
    )
)]
pub async fn metrics_text(State(state): State<SharedState>) -> Result<Response, ApiError> {
    let handle = state.metrics.as_ref().ok_or_else(|| ApiError::NotFound {
        what: "metrics (no recorder is installed in this process)".into(),
    })?;
    // Rendering formats a few hundred series from in-memory atomics: microseconds, so it runs
    // inline like a lookup.
    export_index_metrics(&state);
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_names_are_unique_and_prefixed() {
        let mut names: Vec<&str> = CATALOGUE.iter().map(|m| m.name).collect();
        assert!(names.iter().all(|n| n.starts_with("hbidx_")), "{names:?}");
        let before = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), before, "duplicate metric names");
        for metric in CATALOGUE {
            match metric.kind {
                MetricKind::Counter => assert!(metric.name.ends_with("_total"), "{}", metric.name),
                _ => assert!(!metric.name.ends_with("_total"), "{}", metric.name),
            }
        }
    }

    /// docs/reference/metrics.md holds the rendered table between its marker comments. When it
    /// differs, the test fails, or rewrites the file with `HBIDX_UPDATE_DOCS=1`.
    #[test]
    fn metrics_reference_matches_the_catalogue() {
        const BEGIN: &str = "<!-- metrics:begin -->\n";
        const END: &str = "<!-- metrics:end -->";
        let manifest_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let path = manifest_dir
            .parent()
            .unwrap_or(manifest_dir)
            .join("docs/reference/metrics.md");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
        let start = text.find(BEGIN).map(|at| at + BEGIN.len());
        let end = text.find(END);
        let (Some(start), Some(end)) = (start, end) else {
            panic!(
                "{} lacks the {BEGIN:?} … {END:?} markers around the metrics table",
                path.display()
            );
        };
        assert!(start <= end, "{}: markers out of order", path.display());
        let rendered = metrics_reference_markdown();
        if text[start..end] == rendered {
            return;
        }
        if std::env::var("HBIDX_UPDATE_DOCS").as_deref() == Ok("1") {
            let updated = format!("{}{rendered}{}", &text[..start], &text[end..]);
            std::fs::write(&path, updated)
                .unwrap_or_else(|err| panic!("writing {}: {err}", path.display()));
            return;
        }
        panic!(
            "the metrics table in {} differs from telemetry::CATALOGUE; rewrite it with \
             `HBIDX_UPDATE_DOCS=1 cargo test -p hbidx-query --lib telemetry` and commit the file",
            path.display()
        );
    }

    #[test]
    fn status_classes() {
        assert_eq!(status_class(StatusCode::OK), "2xx");
        assert_eq!(status_class(StatusCode::NOT_FOUND), "4xx");
        assert_eq!(status_class(StatusCode::GATEWAY_TIMEOUT), "5xx");
    }
}
