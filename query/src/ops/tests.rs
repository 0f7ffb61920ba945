use super::*;

fn samples(text: &str) -> Vec<Sample> {
    parse_exposition(text)
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
