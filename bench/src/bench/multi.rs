//! Phase 5b: lookups that match many rows. Their cost is bounded by `[server]
//! max_lookup_matches` (a broader one is refused with a 400 naming its field), not by the table,
//! and they run off the HTTP threads: these rows check both at each size, and that `/healthz`
//! keeps its latency while such lookups keep the workers busy.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::Row;
use super::lookups::{Scheduling, WrkLoad, run_wrk};
use crate::report::UniformSample;

/// Calls of each multi-match lookup, one after another.
const CALLS: usize = 40;

/// `/healthz` requests during the flood, 10 ms apart.
const HEALTH_PROBES: usize = 200;

/// 张 and 张伟: the most frequent surname of the generated people, and a full name the
/// generator gives many of them.
const ZHANG: &str = "%E5%BC%A0";
const ZHANG_WEI: &str = "%E5%BC%A0%E4%BC%9F";

/// The multi-match rows, then the `/healthz` row under a flood of one-character prefixes.
pub(super) async fn multi_match_lookups(
    base: &str,
    path: &str,
    api_key: &str,
    sample: &UniformSample,
    data_dir: &std::path::Path,
    http_workers: usize,
    report: &mut Vec<Row>,
) -> Result<()> {
    let client = super::http::api_client(api_key)?;
    // Each phone-tail call asks for another sampled phone's last 4 digits, so no call is
    // answered from what the one before it brought into a cache.
    let tails: Vec<String> = sample
        .phones
        .iter()
        .step_by((sample.phones.len() / CALLS).max(1))
        .take(CALLS)
        .map(|phone| format!("phone_suffix={}", &phone[phone.len().saturating_sub(4)..]))
        .collect();
    let fixed = |query: String| vec![query; CALLS];
    let lookups = [
        (
            "multi-match lookup: name prefix 张, limit 20",
            fixed(format!("name={ZHANG}&match=prefix")),
        ),
        (
            "multi-match lookup: name pinyin prefix zhang, limit 20",
            fixed("name=zhang&match=pinyin_prefix".to_string()),
        ),
        (
            "multi-match lookup: common name 张伟, limit 20",
            fixed(format!("name={ZHANG_WEI}")),
        ),
        ("multi-match lookup: phone tail (4 digits), limit 20", tails),
    ];
    for (label, queries) in lookups {
        let mut millis = Vec::with_capacity(CALLS);
        let (mut answered, mut refused, mut rows) = (0usize, 0usize, 0u64);
        for query in &queries {
            let url = format!("{base}{path}?{query}&limit=20&index_only=true");
            let started = Instant::now();
            let response = client.get(&url).send().await?;
            let status = response.status();
            let body: serde_json::Value = response.json().await?;
            millis.push(started.elapsed().as_secs_f64() * 1e3);
            match status.as_u16() {
                200 => {
                    answered += 1;
                    rows += body["count"].as_u64().unwrap_or(0);
                }
                400 => refused += 1,
                other => anyhow::bail!("{label}: HTTP {other}: {body}"),
            }
        }
        let detail = format!(
            "client time of {CALLS} calls, index_only; {answered} answered ({rows} rows), {refused} refused as broader than max_lookup_matches"
        );
        report.push(Row::latencies(label, &mut millis, &detail).metric(
            format!("{label}, refused"),
            refused as f64,
            "calls",
        ));
    }
    report.push(health_under_flood(base, path, api_key, data_dir, http_workers).await?);
    Ok(())
}

/// `/healthz`'s latency, one probe every 10 ms, while wrk keeps 8 connections busy with
/// one-character name prefixes: the liveness probe of a node serving broad lookups.
async fn health_under_flood(
    base: &str,
    path: &str,
    api_key: &str,
    data_dir: &std::path::Path,
    http_workers: usize,
) -> Result<Row> {
    let script = data_dir.join("prefix.lua");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&script)?);
    writeln!(out, "wrk.headers[\"Authorization\"] = \"Bearer {api_key}\"")?;
    writeln!(
        out,
        "local r = wrk.format(\"GET\", \"{path}?name={ZHANG}&match=prefix&limit=20&index_only=true\")\nrequest = function() return r end"
    )?;
    out.into_inner()?.sync_all()?;
    let load = WrkLoad {
        threads: 1,
        connections: 8,
        seconds: 4,
    };
    let url = base.to_string();
    let flood = tokio::spawn(async move {
        run_wrk(
            "name prefix 张 flood",
            url,
            &script,
            load,
            http_workers,
            Scheduling::Normal,
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A client of its own, without the key: liveness probes carry none.
    let prober = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?;
    let mut millis = Vec::with_capacity(HEALTH_PROBES);
    for _ in 0..HEALTH_PROBES {
        let started = Instant::now();
        let status = prober.get(format!("{base}/healthz")).send().await?.status();
        millis.push(started.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(status.is_success(), "/healthz answered {status}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let flood = flood.await??;
    Ok(Row::latencies(
        "/healthz while 8 connections send name prefix 张 lookups",
        &mut millis,
        &format!(
            "{HEALTH_PROBES} probes 10 ms apart; the flood: {}",
            flood.text
        ),
    ))
}
