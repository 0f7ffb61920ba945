//! The dashboard's series: each scrape turned into one point of rates and percentiles over the
//! rolling window, and the bounded history of points the page draws.

use std::collections::{BTreeMap, VecDeque};

use super::exposition::{Sample, Snapshot, bucket_delta, histogram_quantile};
use super::{HISTORY, Ops, WINDOW};

/// Routes that only observe the service. They are left out of the QPS so that an open
/// dashboard (or a Prometheus scrape) doesn't show up as traffic.
const OBSERVER_ROUTES: &[&str] = &["/metrics", "/dashboard", "/v1/ops/summary"];
/// Routes whose latency is the lookup latency.
const LOOKUP_ROUTES: &[&str] = &[
    "/v1/tables/{table}/rows",
    "/v1/tables/{table}/rows:batch-lookup",
];

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

struct Point {
    t_ms: u64,
    values: BTreeMap<String, f64>,
}

#[derive(Default)]
pub(super) struct History {
    /// The last few scrapes, for windowed rates: `(unix ms, snapshot)`.
    snapshots: VecDeque<(u64, Snapshot)>,
    points: VecDeque<Point>,
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
    pub(super) fn series(&self) -> (Vec<u64>, BTreeMap<String, Vec<Option<f64>>>) {
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
