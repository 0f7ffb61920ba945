//! Phase 5: lookups by phone over HTTP with wrk, under each scheduling of the load generator,
//! and writing and summarising wrk's runs.

use std::io::Write;
use std::process::Command;

use anyhow::Result;

use super::BenchArgs;
use super::http::BenchServer;
use crate::bench::Row;
use crate::report::WrkSummary;

/// Phase 5: `script`'s lookups against the server at `addr` (with `http_threads`), normally
/// scheduled and under `SCHED_BATCH`; then against one HTTP thread over the same state, and
/// against one pinned to a CPU that wrk stays off.
pub(super) async fn wrk_lookups(
    args: &BenchArgs,
    state: &hbidx_query::SharedState,
    http_threads: &hbidx_serve::HttpThreads,
    (script, floor_script, floor_answer): (&std::path::Path, &std::path::Path, serde_json::Value),
    addr: std::net::SocketAddr,
    report: &mut Vec<Row>,
) -> Result<()> {
    for class in [Scheduling::Normal, Scheduling::Batch] {
        report.push(
            run_wrk(
                class.label(false),
                format!("http://{addr}"),
                script,
                WrkLoad::of(args),
                http_threads.count,
                class,
            )
            .await?,
        );
    }
    // The HTTP floor, right after the lookups it bounds: the same threads, wrk, key and
    // request shapes, the answer a fixed one from memory.
    let lookups = report.iter().rev().nth(1).and_then(Row::first_value);
    let floor = BenchServer::start_floor(state.clone(), http_threads.clone(), floor_answer).await?;
    let floor_row = run_wrk(
        "HTTP floor: the same stack answering a fixed row from memory",
        format!("http://{}", floor.addr),
        floor_script,
        WrkLoad::of(args),
        http_threads.count,
        Scheduling::Normal,
    )
    .await?;
    floor.stop().await?;
    let ratio = lookups
        .zip(floor_row.first_value())
        .map_or(f64::NAN, |(lookups, floor)| lookups / floor);
    report.push(
        floor_row
            .with_note(format!("; lookups by phone ÷ floor = {ratio:.2}"))
            .also("lookups ÷ floor", ratio, "×"),
    );
    if http_threads.count > 1 {
        // The same lookups against a second server over the same state with one HTTP
        // thread: on a 2-core machine wrk then keeps the other core and no thread
        // time-slices with another, so the latency tail is the server's own; with a thread
        // per core, wrk's threads and the server's share both cores and wrk's own
        // scheduling delays show up in its p99.
        let one = BenchServer::start(state.clone(), hbidx_serve::HttpThreads::unpinned(1)).await?;
        for class in [Scheduling::Normal, Scheduling::Batch] {
            report.push(
                run_wrk(
                    class.label(true),
                    format!("http://{}", one.addr),
                    script,
                    WrkLoad::of(args),
                    1,
                    class,
                )
                .await?,
            );
        }
        one.stop().await?;
    }
    // One HTTP thread pinned to a CPU and wrk kept off it: the client no longer shares
    // the server's core, as a client on another machine wouldn't (`[server] http_cpus`).
    // Without a CPU to spare for wrk, not measured.
    if let Some((server_cpu, client_cpus)) = split_cpus() {
        let pinned = BenchServer::start(
            state.clone(),
            hbidx_serve::HttpThreads::pinned(1, vec![server_cpu]),
        )
        .await?;
        let class = Scheduling::OffCpus(client_cpus);
        report.push(
            run_wrk(
                class.label(true),
                format!("http://{}", pinned.addr),
                script,
                WrkLoad::of(args),
                1,
                class,
            )
            .await?,
        );
        pinned.stop().await?;
    }
    Ok(())
}

/// wrk's threads, connections and seconds.
#[derive(Clone, Copy)]
pub(super) struct WrkLoad {
    pub threads: u32,
    pub connections: u32,
    pub seconds: u64,
}

impl WrkLoad {
    /// The load `--wrk-threads`, `--connections` and `--lookup-seconds` ask for.
    pub(super) fn of(args: &BenchArgs) -> Self {
        Self {
            threads: args.wrk_threads,
            connections: args.connections,
            seconds: args.lookup_seconds,
        }
    }
}

/// How the load generator is scheduled. On a 2-core box it shares the cores with the server,
/// and a normally scheduled client preempts the server whenever a response wakes it: hbidx's
/// few event-loop threads then pay a context switch every couple of requests, while a server
/// with a process per connection (PostgreSQL) barely notices. A remote client, the real case,
/// takes nothing from the server's cores. `SCHED_BATCH` (chrt --batch 0; no privileges needed)
/// keeps the client from preempting on wakeup, so it runs when the server waits or at the
/// tick: the closest a co-located client gets to a remote one. scripts/bench.sh runs pgbench
/// both ways too and reports both ratios.
#[derive(Clone, PartialEq, Eq)]
pub(super) enum Scheduling {
    Normal,
    Batch,
    /// Normally scheduled, but only on these CPUs (`taskset -c`, util-linux), none of them the
    /// server's.
    OffCpus(String),
}

/// The first CPU this process may use (for the server's pinned HTTP thread) and the rest as a
/// `taskset -c` list (for wrk), when there are at least two.
fn split_cpus() -> Option<(usize, String)> {
    let cpus = hbidx_serve::allowed_cpus();
    let (&server, rest) = cpus.split_first()?;
    let rest: Vec<String> = rest.iter().map(ToString::to_string).collect();
    (!rest.is_empty()).then(|| (server, rest.join(",")))
}

impl Scheduling {
    /// The report row of wrk lookups under this scheduling, against the server with its
    /// configured HTTP threads or with one.
    fn label(&self, one_thread: bool) -> &'static str {
        match (one_thread, self) {
            (false, Self::Normal) => "lookup by phone over HTTP (wrk)",
            (false, Self::Batch) => "lookup by phone over HTTP (wrk, SCHED_BATCH)",
            (true, Self::Normal) => "lookup by phone over HTTP, 1 server thread (wrk)",
            (true, Self::Batch) => "lookup by phone over HTTP, 1 server thread (wrk, SCHED_BATCH)",
            (_, Self::OffCpus(_)) => {
                "lookup by phone over HTTP, 1 server thread pinned, wrk on the other CPUs"
            }
        }
    }
}

/// Runs wrk with the lookup script against `url` (a server with `workers` HTTP threads),
/// scheduled as `scheduling` says, and summarises it.
pub(super) async fn run_wrk(
    label: &'static str,
    url: String,
    script: &std::path::Path,
    load: WrkLoad,
    workers: usize,
    scheduling: Scheduling,
) -> Result<Row> {
    let WrkLoad {
        threads: wrk_threads,
        connections,
        seconds,
    } = load;
    let script = script.display().to_string();
    // scripts/bench.sh reads the client's CPUs from the row, to run pgbench on the same ones.
    let client_cpus = match &scheduling {
        Scheduling::OffCpus(cpus) => format!(", wrk on CPUs {cpus}"),
        _ => String::new(),
    };
    let output = tokio::task::spawn_blocking(move || {
        let mut command = match scheduling {
            Scheduling::Normal => Command::new("wrk"),
            Scheduling::Batch => {
                let mut chrt = Command::new("chrt");
                chrt.args(["--batch", "0", "wrk"]);
                chrt
            }
            Scheduling::OffCpus(cpus) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", cpus.as_str(), "wrk"]);
                taskset
            }
        };
        command
            .args([
                format!("-t{wrk_threads}"),
                format!("-c{connections}"),
                format!("-d{seconds}s"),
                "--latency".into(),
                "-s".into(),
                script,
                url,
            ])
            .output()
    })
    .await?;
    Ok(match output {
        Ok(output) if output.status.success() => {
            let text = String::from_utf8_lossy(&output.stdout);
            let summary = WrkSummary::parse(&text);
            Row::new(
                label,
                describe_wrk(&summary, wrk_threads, connections, workers) + &client_cpus,
            )
            .value(summary.rps.unwrap_or(f64::NAN), "req/s")
            .also("p99", summary.p99_ms.unwrap_or(f64::NAN), "ms")
        }
        Ok(output) => Row::new(
            label,
            format!(
                "wrk failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        ),
        Err(err) => Row::new(
            label,
            format!(
                "not measured: cannot run wrk ({err}); apt-get install wrk (chrt and taskset are util-linux)"
            ),
        ),
    })
}

/// A wrk script of lookups by phone at `route` (`/v1/tables/{table}/rows`), cycling through
/// `phones`, each with `query_suffix` appended.
pub(super) fn write_wrk_script<'a>(
    path: &std::path::Path,
    route: &str,
    api_key: &str,
    phones: impl Iterator<Item = &'a str>,
    query_suffix: &str,
) -> Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    // wrk.format uses wrk.headers when a request doesn't pass its own.
    writeln!(out, "wrk.headers[\"Authorization\"] = \"Bearer {api_key}\"")?;
    writeln!(out, "local phones = {{")?;
    for phone in phones {
        writeln!(out, "\"{phone}\",")?;
    }
    writeln!(out, "}}")?;
    writeln!(
        out,
        r#"-- Requests are formatted once, up front: formatting one per call costs wrk about 1 µs of
-- CPU per request, taken from the same two cores the server runs on.
local requests = {{}}
for k, phone in ipairs(phones) do
  requests[k] = wrk.format("GET", "{route}?phone=" .. phone .. "{query_suffix}")
end
local n = #requests
local i = 0
request = function()
  i = i + 1
  return requests[(i % n) + 1]
end"#
    )?;
    out.flush()?;
    Ok(())
}

/// The human cell of a wrk run.
fn describe_wrk(summary: &WrkSummary, threads: u32, connections: u32, workers: usize) -> String {
    let errors: String = summary.errors.iter().map(|e| format!("; {e}")).collect();
    // The server's threads matter as much as wrk's on a small machine: say how many.
    format!(
        "{} req/s, p50 {}, p99 {} (wrk -t{threads} -c{connections}; {workers} server HTTP threads){errors}",
        summary.rps_text, summary.p50, summary.p99
    )
}
