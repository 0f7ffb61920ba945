//! `hbidx`: the secondary-index sidecar for Apache HBase.
//!
//! Every subcommand takes `--config FILE` (default: the example `user` table built into the
//! binary, the same as `deploy/config/hbidx.toml`). Errors print one line naming the problem and
//! exit with code 2.

mod admin_client;
mod config_file;
mod keys;
mod logging;
mod schema_tools;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

// Indexing allocates many small, short-lived strings (terms, documents, row states) on three
// threads at once; glibc malloc spent a fifth of the indexing CPU on them, mimalloc far less.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "hbidx",
    version,
    about = "Secondary indexes for Apache HBase: find rows by phone, idcard or name",
    long_about = "hbidx keeps tantivy indexes of field value -> rowkey next to an HBase table, so \
rows whose rowkey is hashed or salted (e.g. substr(md5(uid),0,6)+uid, which spreads writes over \
regions) can still be found by phone, PRC idcard or name. A lookup resolves values to rowkeys in \
the index, then multi-gets the rows from the store.\n\nStart with `hbidx demo`."
)]
struct Cli {
    /// Table config (TOML). Defaults to the built-in example (`deploy/config/hbidx.toml`).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log filter, e.g. `info` or `hbidx=debug` (env: RUST_LOG).
    #[arg(
        long,
        global = true,
        default_value = "info,lsm_tree=warn,fjall=warn,tantivy=warn",
        env = "RUST_LOG"
    )]
    log: String,
    /// Log format: text lines or JSON objects. Phone and idcard numbers are masked either way.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "HBIDX_LOG_FORMAT"
    )]
    log_format: logging::LogFormat,
    /// With `[cluster]`: this instance's shard [default: `[cluster] shard`].
    #[arg(long, global = true, value_name = "N", env = "HBIDX_SHARD")]
    shard: Option<usize>,
    /// With `[cluster]`: this instance's place among its shard's replicas [default:
    /// `[cluster] replica`, else 0].
    #[arg(long, global = true, value_name = "N", env = "HBIDX_REPLICA")]
    replica: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate table configs.
    Schema {
        #[command(subcommand)]
        command: SchemaCommand,
    },
    /// Print the rowkey a natural key maps to, in hex and in HBase's printable form.
    ///
    /// The rowkey design (hash prefix, salt, modulo, ring, reversal, reverse timestamp) comes from
    /// the table config. With a random salt the rowkey can't be rebuilt from the key, so every
    /// candidate is printed: that is why such tables need the index.
    Rowkey { table: String, key: String },
    /// Print pre-split points for a table (what `create ... SPLITS => [...]` takes).
    ///
    /// hex/uniform/decimal reproduce HBase's RegionSplitter (HexStringSplit, UniformSplit,
    /// DecimalStringSplit); codec splits at the rowkey design's bucket boundaries; sampled sorts
    /// a key sample and takes every k-th key.
    Splits {
        table: String,
        /// Number of regions (split points = regions - 1).
        #[arg(long)]
        regions: Option<u32>,
        #[arg(long, value_enum)]
        algo: Option<schema_tools::SplitAlgoArg>,
        /// For --algo sampled: natural keys, one per line (default: 100k generated sequential uids).
        #[arg(long, value_name = "FILE")]
        sample: Option<PathBuf>,
    },
    /// Print the HBase shell `create` statement for a table, with families and SPLITS.
    Ddl { table: String },
    /// Show how a key sample spreads over the table's regions: a table and a bar chart.
    ///
    /// Sequential keys under a plain rowkey all land in one region (a hotspot); a hashed or
    /// salted design spreads them. Compare with --pattern sequential and a config whose rowkey
    /// has no prefix.
    Hotspot {
        table: String,
        /// Natural keys, one per line.
        #[arg(long, value_name = "FILE", conflicts_with = "generate")]
        sample: Option<PathBuf>,
        /// Generate this many keys instead of reading a sample.
        #[arg(long, value_name = "N")]
        generate: Option<usize>,
        #[arg(long, value_enum, default_value = "sequential")]
        pattern: schema_tools::Pattern,
        /// Number of regions (default: the table's configured splits, else 10).
        #[arg(long)]
        regions: Option<u32>,
    },
    /// Run hbidx for real: the embedded store, indexers and the REST service.
    ///
    /// Every route but /healthz, /readyz, /dashboard and /openapi.json needs an API key
    /// (`Authorization: Bearer KEY`): configure [[security.keys]] or pass --api-key. Without
    /// any key it refuses to start.
    Serve {
        /// REST address [default: `[server] listen`, else 127.0.0.1:8080].
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        #[arg(long, default_value = "data/hbidx")]
        data_dir: PathBuf,
        #[command(flatten)]
        api_key: ApiKeyArg,
        /// Also serve the HBase Thrift1 API over the embedded store on ADDR (happybase and other
        /// HBase Thrift clients work against it) [default: `[server] thrift_listen`, else off].
        #[arg(long, value_name = "ADDR")]
        thrift_listen: Option<SocketAddr>,
    },
    /// Try hbidx on one machine: generate people, index them and serve lookups.
    ///
    /// Creates the data dir, loads a realistic data set (Chinese and Latin names, valid mobile
    /// numbers and idcards) through the store's change feed into the index, prints curl
    /// commands that work, and serves. Re-running on the same data dir reuses it.
    Demo {
        /// REST address [default: `[server] listen`, else 127.0.0.1:8080].
        #[arg(long, value_name = "ADDR")]
        listen: Option<SocketAddr>,
        #[arg(long, default_value = "data/demo")]
        data_dir: PathBuf,
        #[arg(long, default_value_t = 100_000)]
        rows: usize,
        /// Load and index, print the summary, then exit instead of serving.
        #[arg(long)]
        no_serve: bool,
        #[command(flatten)]
        api_key: ApiKeyArg,
        /// Also serve the HBase Thrift1 API over the embedded store on ADDR [default:
        /// `[server] thrift_listen`, else off].
        #[arg(long, value_name = "ADDR")]
        thrift_listen: Option<SocketAddr>,
    },
    /// Measure indexing throughput, event→searchable latency, lookup latency, size and RSS.
    ///
    /// Only in a build with `--features bench` (scripts/bench.sh builds one).
    #[cfg(feature = "bench")]
    Bench(hbidx_bench::bench::BenchArgs),
    /// Rebuild a table's index and swap it in while lookups go on.
    ///
    /// --from-store scans the whole table (embedded or HBase); --from-kafka replays the table's
    /// topic from the earliest offset. Either builds a shadow index, checks it, and swaps it in
    /// atomically. With --server the job runs inside that server (which owns the data dir);
    /// without it, on --data-dir directly, which no server may hold. Progress is drawn either
    /// way.
    Reindex {
        table: String,
        /// Scan the table in the row store.
        #[arg(long, conflicts_with = "from_kafka")]
        from_store: bool,
        /// Replay the table's Kafka topic from the earliest offset.
        #[arg(long)]
        from_kafka: bool,
        /// The running hbidx server that owns the table's data dir.
        #[arg(long)]
        server: Option<String>,
        /// Work offline on this data dir (when no --server is given).
        #[arg(long, default_value = "data/hbidx")]
        data_dir: PathBuf,
        #[command(flatten)]
        api_key: ApiKeyArg,
    },
    /// Compare a table's index with its rows both ways and print a drift report: rows missing
    /// from the index, ghosts in the index, value mismatches, with counts and example rowkeys.
    ///
    /// Runs inside --server if given, else offline on --data-dir. Exits 1 when drift remains.
    Verify {
        table: String,
        /// Check this many sampled rows each way instead of everything.
        #[arg(long, conflicts_with = "full")]
        sample: Option<usize>,
        /// Check every row (the default).
        #[arg(long)]
        full: bool,
        /// Fix what is found (the repairs go through the table's indexer).
        #[arg(long)]
        repair: bool,
        #[arg(long)]
        server: Option<String>,
        #[arg(long, default_value = "data/hbidx")]
        data_dir: PathBuf,
        #[command(flatten)]
        api_key: ApiKeyArg,
    },
    /// Make API keys for `[[security.keys]]`.
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
}

/// `--api-key` / `HBIDX_API_KEY`, the same flag on every command that takes one.
#[derive(clap::Args)]
struct ApiKeyArg {
    /// An API key. `serve` and `demo` accept it with the lookup, write and admin scopes beside
    /// the config's [[security.keys]] (audit id "cli"; only the form `hbidx keys new` prints:
    /// "hbidx_" and 43 base64url characters; without it the demo makes one and prints it). `reindex` and `verify` send it to
    /// --server, which needs the admin scope; offline runs need none.
    #[arg(
        long = "api-key",
        env = "HBIDX_API_KEY",
        hide_env_values = true,
        value_name = "KEY"
    )]
    key: Option<String>,
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Print a fresh random key (give it to the client) and its config entry (hash only).
    New {
        /// The key's id in audit lines and error messages, e.g. the client's name.
        #[arg(long, default_value = "app")]
        id: String,
        /// Scopes of the key; repeat or comma-separate (lookup, write, admin, cluster).
        #[arg(
            long = "scope",
            value_enum,
            value_delimiter = ',',
            default_value = "lookup"
        )]
        scopes: Vec<keys::ScopeArg>,
    },
    /// Print the SHA-256 (hex) of a key, as `sha256 =` in the config takes it. Reads the key
    /// from stdin when not given, so it stays out of shell history.
    Hash { key: Option<String> },
}

#[derive(Subcommand)]
enum SchemaCommand {
    /// Parse and validate a config file; print its tables.
    Check { file: PathBuf },
}

fn main() {
    disable_transparent_huge_pages();
    private_files();
    let matches = Cli::command().get_matches();
    #[cfg_attr(not(feature = "bench"), allow(unused_mut))]
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
    #[cfg(feature = "bench")]
    if matches!(cli.command, Command::Bench(_))
        && matches.value_source("log") == Some(clap::parser::ValueSource::DefaultValue)
    {
        // wrk sends tens of thousands of lookups a second; one audit line each would bury the
        // report. `--log` or RUST_LOG brings them back (and measures their cost).
        cli.log.push_str(",audit=warn");
    }
    let log = logging::init(&cli.log, cli.log_format);
    let result = run(cli);
    // What the log writer still holds goes out before the process ends (`exit` runs no
    // destructors), and before the error line, so that the two keep their order.
    drop(log);
    match result {
        Ok(()) => {}
        Err(err) if err.is::<DriftRemains>() => std::process::exit(1),
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::exit(2);
        }
    }
}

/// `hbidx verify` found drift it didn't repair: exit code 1 (the report says what), unlike an
/// error (2).
#[derive(Debug)]
struct DriftRemains;

impl std::fmt::Display for DriftRemains {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("drift remains")
    }
}

impl std::error::Error for DriftRemains {}

/// Transparent huge pages off for this process (`prctl(PR_SET_THP_DISABLE)`; see
/// docs/design/memory.md). mimalloc asks for huge pages on its arenas and gives freed memory
/// back to the kernel in pieces a second later (v3's purge delay); indexing frees and
/// reallocates its buffers at every commit, so with huge pages the kernel zeroes a fresh 2 MiB
/// page again and again (`clear_page_erms` high in the indexing profile). With 4 KiB pages only
/// the pages touched are zeroed, roughly a quarter less CPU per indexed event. Best effort: a
/// kernel without the prctl leaves the default.
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(err) = rustix::thread::disable_transparent_huge_pages(true) {
        // Logging is not set up yet, and this only costs speed.
        eprintln!("warning: could not turn transparent huge pages off: {err}");
    }
}

/// Everything this process creates is its user's alone: the data dir holds the rows and the
/// index in plaintext (phones, idcards), the dead letters the producers' raw bytes. With the
/// usual umask 022, the store's files were readable by every local user (0644, in 0755
/// directories). A umask rather than a mode at each create: fjall and tantivy create their
/// files themselves.
fn private_files() {
    #[cfg(unix)]
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let config_text = config_file::read_config_text(cli.config.as_deref())?;
    let identity = (cli.shard, cli.replica);
    match cli.command {
        Command::Schema {
            command: SchemaCommand::Check { file },
        } => schema_tools::schema_check(&file),
        Command::Rowkey { table, key } => schema_tools::rowkey(&config_text, &table, &key),
        Command::Splits {
            table,
            regions,
            algo,
            sample,
        } => schema_tools::splits(&config_text, &table, regions, algo, sample.as_deref()),
        Command::Ddl { table } => schema_tools::ddl(&config_text, &table),
        Command::Hotspot {
            table,
            sample,
            generate,
            pattern,
            regions,
        } => schema_tools::hotspot(
            &config_text,
            &table,
            sample.as_deref(),
            generate,
            pattern,
            regions,
        ),
        Command::Serve {
            listen,
            data_dir,
            api_key,
            thrift_listen,
        } => {
            let config = config_file::parse_instance(&config_text, identity)?;
            let auth = hbidx_serve::serve_auth(&config, api_key.key.as_deref())?;
            let http_threads = hbidx_serve::HttpThreads::from_config(&config.server);
            tokio_runtime()?.block_on(async move {
                let instance = hbidx_serve::open(&config, &data_dir, &Default::default(), auth)?;
                if let Some(gateway) = hbidx_serve::gateway_options(&config.server, thrift_listen) {
                    hbidx_serve::start_gateway(&instance, &config, gateway)?;
                }
                let listener = hbidx_serve::bind(config.server.listen(listen)).await?;
                let bound = listener.local_addr()?;
                let http = instance.start_http(listener, &http_threads).await?;
                tracing::info!(
                    listen = %bound,
                    data_dir = %data_dir.display(),
                    http_threads = http_threads.count,
                    http_cpus = ?http_threads.cpus,
                    "serving"
                );
                // Tests and scripts read this line to find an ephemeral port.
                eprintln!("listening on http://{bound}");
                instance.serve(http).await
            })
        }
        Command::Demo {
            listen,
            data_dir,
            rows,
            no_serve,
            api_key,
            thrift_listen,
        } => {
            let config = config_file::parse_instance(&config_text, identity)?;
            let serving = hbidx_demo::Serving {
                listen: config.server.listen(listen),
                gateway: hbidx_serve::gateway_options(&config.server, thrift_listen),
                http_threads: hbidx_serve::HttpThreads::from_config(&config.server),
            };
            tokio_runtime()?.block_on(hbidx_demo::run(
                config,
                serving,
                data_dir,
                rows,
                no_serve,
                api_key.key,
            ))
        }
        #[cfg(feature = "bench")]
        Command::Bench(args) => {
            let config = config_file::parse_instance(&config_text, identity)?;
            let mut http_threads = hbidx_serve::HttpThreads::from_config(&config.server);
            if let Some(count) = args.server_workers {
                http_threads.count = count;
            }
            tokio_runtime()?.block_on(hbidx_bench::bench::run(config, args, http_threads))
        }
        Command::Reindex {
            table,
            from_store,
            from_kafka,
            server,
            data_dir,
            api_key,
        } => {
            let from = match (from_store, from_kafka) {
                (true, _) => "store",
                (_, true) => "kafka",
                _ => anyhow::bail!("say where to rebuild from: --from-store or --from-kafka"),
            };
            with_server(
                &config_text,
                identity,
                server,
                api_key.key,
                &data_dir,
                |url, key| admin_client::reindex(url, key, &table, from),
            )
        }
        Command::Verify {
            table,
            sample,
            full: _,
            repair,
            server,
            data_dir,
            api_key,
        } => {
            let drift = with_server(
                &config_text,
                identity,
                server,
                api_key.key,
                &data_dir,
                |url, key| admin_client::verify(url, key, &table, sample, repair),
            )?;
            if drift > 0 {
                return Err(DriftRemains.into());
            }
            Ok(())
        }
        Command::Keys {
            command: KeysCommand::New { id, scopes },
        } => keys::new_key(&id, &scopes),
        Command::Keys {
            command: KeysCommand::Hash { key },
        } => keys::hash(key),
    }
}

/// Runs `f(url, api_key)` against `server` with the caller's admin key, or, without a server,
/// against an in-process server on the data dir (same code path, same API), stopped cleanly
/// afterwards. The in-process server accepts only a key made up for this run and listens on
/// loopback only while the command runs.
fn with_server<T>(
    config_text: &str,
    identity: (Option<usize>, Option<usize>),
    server: Option<String>,
    api_key: Option<String>,
    data_dir: &std::path::Path,
    f: impl FnOnce(&str, &str) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    if let Some(server) = server {
        let api_key = api_key.context(
            "--server needs an API key with the admin scope: --api-key KEY or HBIDX_API_KEY",
        )?;
        return f(&server, &api_key);
    }
    let config = config_file::parse_instance(config_text, identity)?;
    let run_key = hbidx_query::auth::generate_key();
    let mut security = hbidx_query::auth::SecurityConfig::default();
    security
        .add_plaintext_key("offline", &run_key, "run key")
        .map_err(|err| anyhow::anyhow!("{err}"))?;
    let auth = hbidx_query::auth::Auth::new(&security);
    let rt = tokio_runtime()?;
    let (instance, url) = rt.block_on(async {
        let instance = hbidx_serve::open(&config, data_dir, &Default::default(), auth)
            .with_context(|| {
                format!(
                    "opening {} (is a server running on it? then use --server)",
                    data_dir.display()
                )
            })?;
        let listener = hbidx_serve::bind(([127, 0, 0, 1], 0).into()).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let app = hbidx_query::app(instance.state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        anyhow::Ok((instance, url))
    })?;
    let result = f(&url, &run_key);
    rt.block_on(instance.shutdown_indexers())?;
    result
}

/// The process's async runtime: start-up, the control plane (indexer waits, jobs, the dashboard
/// sampler) and the CLI's clients. Serving commands answer HTTP on threads of their own
/// (`http.rs`).
fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}
