//! Phase 7: everything closed, then timed from reopening the data dir to the first lookup
//! answered over HTTP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hbidx_indexer::CommitPolicy;
use hbidx_schema::config::HbidxConfig;

use super::http::{BenchServer, api_client};
use crate::bench::Row;
use crate::report::UniformSample;

/// Shuts the indexers down (their indexes committed) and waits until nothing else holds the
/// store, then drops it: reopening the data dir afterwards is a real restart.
pub(super) async fn close(
    instance: hbidx_serve::Instance,
    runtime_table: hbidx_query::TableRuntime,
) -> Result<()> {
    drop(runtime_table);
    let store = instance.embedded()?.clone();
    instance.shutdown_indexers().await?;
    let closing = Instant::now();
    while Arc::strong_count(&store) > 1 {
        anyhow::ensure!(
            closing.elapsed() < Duration::from_secs(60),
            "the row store is still open after the shutdown ({} references): cannot time a restart",
            Arc::strong_count(&store) - 1
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(store);
    Ok(())
}

/// Reopens the data dir as `serve` does and times it until a lookup by a sampled phone is
/// answered with its row over HTTP. Returns the instance and its server, still running.
#[allow(clippy::too_many_arguments)]
pub(super) async fn restart(
    config: &HbidxConfig,
    data_dir: &std::path::Path,
    policy: &CommitPolicy,
    security: &hbidx_query::auth::SecurityConfig,
    http_threads: &hbidx_serve::HttpThreads,
    table: &hbidx_schema::config::TableConfig,
    api_key: &str,
    sample: &UniformSample,
) -> Result<(hbidx_serve::Instance, BenchServer, Row)> {
    let started = Instant::now();
    let opened = hbidx_serve::open_rows(config, data_dir)?;
    let store_secs = started.elapsed().as_secs_f64();
    let instance = hbidx_serve::open_with_rows(
        config,
        data_dir,
        policy,
        hbidx_query::auth::Auth::new(security),
        opened,
    )?;
    let index_secs = started.elapsed().as_secs_f64() - store_secs;
    let server = BenchServer::start(instance.state.clone(), http_threads.clone()).await?;
    let client = api_client(api_key)?;
    let phone = sample
        .phones
        .last()
        .context("no phone to look up after the restart")?;
    let url = format!(
        "http://{}/v1/tables/{}/rows?phone={phone}",
        server.addr, table.name
    );
    loop {
        let answer = client.get(&url).send().await;
        if let Ok(response) = answer
            && response.status().is_success()
        {
            let body: serde_json::Value = response.json().await?;
            if body["count"].as_u64().unwrap_or(0) > 0 {
                break;
            }
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(600),
            "no lookup answered within 10 minutes of the restart"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = started.elapsed().as_secs_f64();
    let row = Row::new(
        "restart: reopen the data dir → first lookup served",
        format!(
            "{secs:.2}s (store {store_secs:.2}s, indexes and indexers {index_secs:.2}s, the rest HTTP start and the lookup)"
        ),
    )
    .value(secs, "s");
    Ok((instance, server, row))
}
