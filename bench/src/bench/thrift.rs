//! Phase 8: the lookups again with the rows read over HBase Thrift1 (the gateway over this
//! store, read through `HbaseStore`), and with `--covered` the covered columns' lookups.

use anyhow::Result;
use hbidx_schema::config::HbidxConfig;
use serde_json::json;

use super::BenchArgs;
use super::bulk::{batch_lookups, scan_reindex};
use super::http::BenchServer;
use super::lookups::{Scheduling, WrkLoad, run_wrk, write_wrk_script};
use crate::bench::Row;
use crate::report::UniformSample;

/// Phase 8: the gateway serves this store, and a second service reads it through HbaseStore
/// (index → rowkeys → getRowsWithColumns), exactly as against an HBase Thrift server; wrk and
/// batch lookups against that service.
#[allow(clippy::too_many_arguments)]
pub(super) async fn thrift_lookups(
    args: &BenchArgs,
    config: &HbidxConfig,
    table: &hbidx_schema::config::TableConfig,
    instance: &hbidx_serve::Instance,
    security: &hbidx_query::auth::SecurityConfig,
    http_threads: &hbidx_serve::HttpThreads,
    client: &reqwest::Client,
    api_key: &str,
    sample: &UniformSample,
    data_dir: &std::path::Path,
    report: &mut Vec<Row>,
) -> Result<()> {
    let script = data_dir.join("phones.lua");
    let gateway = hbidx_serve::start_gateway(
        instance,
        config,
        hbidx_gateway::GatewayOptions::new("127.0.0.1:0".parse()?),
    )?;
    let mut thrift = hbidx_store::HbaseConfig::new(gateway.local_addr().to_string());
    thrift.pool_size = 32;
    let hbase = hbidx_store::HbaseStore::new(thrift, &[(table.name.clone(), table.full_name())]);
    let tables: Vec<hbidx_query::TableRuntime> = instance.state.tables.values().cloned().collect();
    let thrift_state = std::sync::Arc::new(
        hbidx_query::AppState::new(std::sync::Arc::new(hbase), tables)
            .with_auth(hbidx_query::auth::Auth::new(security)),
    );
    let thrift_server = BenchServer::start(thrift_state, http_threads.clone()).await?;
    let thrift_addr = thrift_server.addr;
    if args.lookup_seconds > 0 {
        // After the updates: the sample follows the rows' new phones.
        write_wrk_script(
            &script,
            &format!("/v1/tables/{}/rows", table.name),
            api_key,
            sample.phones.iter().map(String::as_str),
            "",
        )?;
        report.push(
            run_wrk(
                "lookup by phone, rows over Thrift1 (wrk)",
                format!("http://{thrift_addr}"),
                &script,
                WrkLoad::of(args),
                http_threads.count,
                Scheduling::Normal,
            )
            .await?,
        );
    }
    let mut thrift_rows = Vec::new();
    batch_lookups(
        client,
        &format!("http://{thrift_addr}"),
        &table.name,
        sample,
        &json!({}),
        &mut thrift_rows,
    )
    .await?;
    report.extend(
        thrift_rows
            .into_iter()
            .map(|row| relabel(row, "batch lookup, 1000 phones, rows over Thrift1")),
    );
    if !table.covered.is_empty() {
        covered_lookups(
            args,
            table,
            instance,
            client,
            api_key,
            sample,
            data_dir,
            thrift_addr,
            http_threads.count,
            report,
        )
        .await?;
    }
    thrift_server.stop().await?;
    thrift_reindex(
        config,
        table,
        security,
        http_threads,
        client,
        &gateway,
        data_dir,
        report,
    )
    .await?;
    Ok(())
}

/// A reindex by table scan with the rows over Thrift1: a second instance, `[store] kind =
/// "hbase"` on the gateway, rebuilds its index of the table from a scan through `HbaseStore`,
/// as `reindex --from-store` does beside an HBase cluster. What bounds it (the scan or the
/// indexing) is in the instance's log line "scanned the store".
#[allow(clippy::too_many_arguments)]
async fn thrift_reindex(
    config: &HbidxConfig,
    table: &hbidx_schema::config::TableConfig,
    security: &hbidx_query::auth::SecurityConfig,
    http_threads: &hbidx_serve::HttpThreads,
    client: &reqwest::Client,
    gateway: &hbidx_gateway::GatewayServer,
    data_dir: &std::path::Path,
    report: &mut Vec<Row>,
) -> Result<()> {
    let mut over_thrift = config.clone();
    over_thrift.store = hbidx_store::StoreConfig::Hbase(hbidx_store::HbaseConfig::new(
        gateway.local_addr().to_string(),
    ));
    over_thrift.sources.clear();
    let dir = data_dir.join("over-thrift");
    let instance = hbidx_serve::open(
        &over_thrift,
        &dir,
        &hbidx_indexer::CommitPolicy::default(),
        hbidx_query::auth::Auth::new(security),
    )?;
    let server = BenchServer::start(instance.state.clone(), http_threads.clone()).await?;
    let base = format!("http://{}", server.addr);
    let mut rows = Vec::new();
    scan_reindex(client, &base, &table.name, &mut rows).await?;
    report.extend(
        rows.into_iter()
            .map(|row| relabel(row, "reindex by table scan, rows over Thrift1")),
    );
    server.stop().await?;
    drop(instance);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}

/// `POST rows:batch-lookup` with 1000 existing phones per call, sequentially: per-call latency.
/// Phase 7 with `--covered`: lookups by phone asking for the name and the covered columns,
/// answered from the index, beside the same requests with `consistency=store` (rows over
/// Thrift1), single and batched; and the covered columns' share of the index.
#[allow(clippy::too_many_arguments)]
async fn covered_lookups(
    args: &BenchArgs,
    table: &hbidx_schema::config::TableConfig,
    instance: &hbidx_serve::Instance,
    client: &reqwest::Client,
    api_key: &str,
    sample: &UniformSample,
    data_dir: &std::path::Path,
    thrift_addr: std::net::SocketAddr,
    http_threads: usize,
    report: &mut Vec<Row>,
) -> Result<()> {
    let name_column = table
        .fields_of_kind(hbidx_schema::config::FieldKind::Name)
        .next()
        .map(|field| field.column.clone());
    let columns: Vec<String> = name_column
        .into_iter()
        .chain(table.covered.iter().cloned())
        .collect();
    let projection = format!("&columns={}", columns.join(","));
    let phones = || sample.phones.iter().map(String::as_str);
    if args.lookup_seconds > 0 {
        for (label, suffix, file) in [
            (
                "lookup by phone, covered columns, from the index (wrk)",
                projection.clone(),
                "covered.lua",
            ),
            (
                "the same columns, consistency=store: over Thrift1 (wrk)",
                format!("{projection}&consistency=store"),
                "covered-store.lua",
            ),
        ] {
            let script = data_dir.join(file);
            write_wrk_script(
                &script,
                &format!("/v1/tables/{}/rows", table.name),
                api_key,
                phones(),
                &suffix,
            )?;
            report.push(
                run_wrk(
                    label,
                    format!("http://{thrift_addr}"),
                    &script,
                    WrkLoad::of(args),
                    http_threads,
                    Scheduling::Normal,
                )
                .await?,
            );
        }
    }
    for (label, extra) in [
        (
            "batch lookup, 1000 phones, covered columns from the index",
            json!({"columns": columns}),
        ),
        (
            "the same, consistency=store: over Thrift1",
            json!({"columns": columns, "consistency": "store"}),
        ),
    ] {
        let mut rows = Vec::new();
        batch_lookups(
            client,
            &format!("http://{thrift_addr}"),
            &table.name,
            sample,
            &extra,
            &mut rows,
        )
        .await?;
        report.extend(rows.into_iter().map(|row| relabel(row, label)));
    }
    if let Some(indexed) = instance.state.tables.get(&table.name) {
        let searcher = indexed.searcher.clone();
        let sizes = tokio::task::spawn_blocking(move || searcher.covered_sizes(10_000)).await??;
        let rows = indexed
            .stats
            .rows
            .load(std::sync::atomic::Ordering::Relaxed)
            .max(1);
        for size in sizes {
            let per_row = size.bytes as f64 / rows as f64;
            report.push(
                Row::new(
                    "covered column in the index",
                    format!(
                        "{}: {per_row:.1} bytes/row before compression ({:.1} MB over {rows} rows, from {} sampled)",
                        size.column,
                        size.bytes as f64 / 1e6,
                        size.sampled
                    ),
                )
                .metric(
                    format!("covered column {} in the index", size.column),
                    per_row,
                    "bytes/row",
                ),
            );
        }
    }
    Ok(())
}

/// The same row under another label (its numbers' measures follow).
fn relabel(row: Row, label: &str) -> Row {
    let Row {
        label: old,
        text,
        metrics,
    } = row;
    let mut row = Row::new(label, text);
    for metric in metrics {
        let measure = metric.measure.replacen(&old, label, 1);
        row = row.metric(measure, metric.value, metric.unit);
    }
    row
}
