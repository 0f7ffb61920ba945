//! The admin commands' HTTP client: `reindex` and `verify` start a job on a server (the one
//! given with `--server`, or one the CLI runs in-process on the data dir) with an admin key,
//! follow it with a progress bar and print its outcome.

use anyhow::{Context, Result, anyhow, bail};

/// A client that sends `Authorization: Bearer <api_key>` (marked sensitive, so it never shows
/// in reqwest's debug output) on every request.
fn http_client(api_key: &str) -> Result<reqwest::blocking::Client> {
    let mut authorization = reqwest::header::HeaderValue::from_str(&format!("Bearer {api_key}"))
        .map_err(|_| anyhow!("--api-key: an API key must be printable ASCII"))?;
    authorization.set_sensitive(true);
    Ok(reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .default_headers(reqwest::header::HeaderMap::from_iter([(
            reqwest::header::AUTHORIZATION,
            authorization,
        )]))
        .build()?)
}

/// Starts a job with `POST {server}{path}` and returns its id.
fn start_job(
    client: &reqwest::blocking::Client,
    server: &str,
    path: &str,
    body: serde_json::Value,
) -> Result<u64> {
    let response = client
        .post(format!("{server}{path}"))
        .json(&body)
        .send()
        .with_context(|| format!("cannot reach the hbidx server at {server}"))?;
    let status = response.status();
    let body: serde_json::Value = response.json().unwrap_or_default();
    if !status.is_success() {
        bail!(
            "the server refused the job ({status}): {}",
            body["error"]["message"]
                .as_str()
                .unwrap_or("no reason given")
        );
    }
    body["id"]
        .as_u64()
        .ok_or_else(|| anyhow!("the server answered without a job id: {body}"))
}

/// Follows job `id` until it ends, drawing its progress; returns its final status.
fn follow_job(
    client: &reqwest::blocking::Client,
    server: &str,
    id: u64,
    unit: &str,
) -> Result<serde_json::Value> {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{msg:10}} [{{bar:40}}] {{pos}}/{{len}} {unit} ({{per_sec}}, eta {{eta}})"
        ))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    loop {
        let job: serde_json::Value = client
            .get(format!("{server}/v1/jobs/{id}"))
            .send()
            .and_then(|r| r.json())
            .with_context(|| format!("following job {id}"))?;
        bar.set_length(job["total"].as_u64().unwrap_or(0));
        bar.set_position(job["done"].as_u64().unwrap_or(0));
        bar.set_message(job["phase"].as_str().unwrap_or("").to_string());
        match job["state"].as_str() {
            Some("succeeded") => {
                bar.finish_with_message("done");
                return Ok(job);
            }
            Some("failed") => {
                bar.abandon_with_message("failed");
                bail!(
                    "job {id} failed: {}",
                    job["error"].as_str().unwrap_or("no reason given")
                );
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    }
}

/// `hbidx reindex`: starts the job on `server` (with an admin key) and follows it.
pub fn reindex(server: &str, api_key: &str, table: &str, from: &str) -> Result<()> {
    let server = server.trim_end_matches('/');
    let client = http_client(api_key)?;
    let id = start_job(
        &client,
        server,
        &format!("/v1/tables/{table}/reindex"),
        serde_json::json!({ "from": from }),
    )?;
    let unit = if from == "store" { "rows" } else { "events" };
    let job = follow_job(&client, server, id, unit)?;
    println!(
        "reindexed table {table} from {from}: {} {unit}, shadow checked and swapped in (job {id})",
        job["done"]
    );
    if let Some(range) = describe_range(&job["range"]) {
        println!("  {range}");
    }
    Ok(())
}

/// A job's `range` (`[cluster]`: the shard it covered) in one line; `None` on a single instance.
fn describe_range(range: &serde_json::Value) -> Option<String> {
    let shard = range["shard"].as_u64()?;
    let start = match range["start"].as_str() {
        Some(key) if !key.is_empty() => format!("\"{key}\""),
        _ => "the table's start".to_string(),
    };
    let stop = match range["stop"].as_str() {
        Some(key) => format!("up to \"{key}\" (exclusive)"),
        None => "to the table's end".to_string(),
    };
    Some(format!(
        "shard {shard} of {}: rowkeys from {start} {stop}",
        range["shards"]
    ))
}

/// `hbidx verify`: runs the check on `server`, prints the drift report, returns the drift left
/// (after repairs, when asked for).
pub fn verify(
    server: &str,
    api_key: &str,
    table: &str,
    sample: Option<usize>,
    repair: bool,
) -> Result<u64> {
    let server = server.trim_end_matches('/');
    let client = http_client(api_key)?;
    let body = match sample {
        Some(n) => serde_json::json!({ "sample": n, "repair": repair }),
        None => serde_json::json!({ "full": true, "repair": repair }),
    };
    let id = start_job(&client, server, &format!("/v1/tables/{table}/verify"), body)?;
    let job = follow_job(&client, server, id, "rows")?;
    let report = &job["report"];
    println!(
        "drift report for table {table} ({} check, job {id})",
        report["mode"].as_str().unwrap_or("?")
    );
    if let Some(range) = describe_range(&job["range"]) {
        println!("  {range}");
    }
    println!(
        "  index rows checked: {}   store rows checked: {}",
        report["index_rows_checked"], report["store_rows_checked"]
    );
    let outside = report["outside_range"].as_u64().unwrap_or(0);
    if outside > 0 {
        println!(
            "  index rows outside this shard (not checked; reindex --from-store drops them): {outside}"
        );
    }
    let mut drift = 0;
    for (key, label) in [
        ("missing", "missing from the index"),
        ("ghosts", "ghosts in the index"),
        ("mismatches", "value mismatches"),
    ] {
        let count = report[key]["count"].as_u64().unwrap_or(0);
        drift += count;
        println!("  {label:24} {count}");
        if let Some(examples) = report[key]["examples"].as_array() {
            for example in examples {
                println!("      {}", example.as_str().unwrap_or_default());
            }
        }
    }
    let unfixable = report["unfixable"].as_u64().unwrap_or(0);
    if unfixable > 0 {
        println!("  not repairable by merge (index newer than store): {unfixable}");
    }
    if repair {
        let repaired = report["repaired"].as_u64().unwrap_or(0);
        println!("  repaired: {repaired}");
        drift = drift.saturating_sub(repaired);
    }
    Ok(drift)
}
