//! `[server]`: where `hbidx serve` and `hbidx demo` listen. The schema crate keeps the section
//! raw; it is parsed here, next to the flags that override it.
//!
//! ```toml
//! [server]
//! listen = "127.0.0.1:8080"          # REST API (--listen)
//! workers = 2                        # threads serving the REST API; default one per CPU
//! http_cpus = [0, 1]                 # pin HTTP thread i to CPU http_cpus[i % len]; default unpinned
//! thrift_listen = "127.0.0.1:9090"   # HBase Thrift1 gateway (--thrift-listen); off when unset
//! thrift_workers = 64                # connections served at once (one thread each)
//! thrift_transport = "buffered"      # or "framed"
//! thrift_protocol = "binary"         # or "compact"
//! thrift_hbase_version = 2           # 1: answer like HBase 1.x's Thrift server
//! rowkey_cache_mb = 64               # per table; overrides [memory]'s rowkey cache split
//! ```

use std::net::SocketAddr;

use anyhow::{Context, Result, bail};
use hbidx_gateway::{DEFAULT_WORKERS, GatewayOptions, HbaseApi, ThriftProtocol, ThriftTransport};
use hbidx_schema::config::Config;
use serde::Deserialize;

/// The REST API's address when neither `--listen` nor `[server] listen` says.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<String>,
    workers: Option<i64>,
    http_cpus: Option<Vec<i64>>,
    thrift_listen: Option<String>,
    thrift_workers: Option<i64>,
    thrift_transport: Option<String>,
    thrift_protocol: Option<String>,
    thrift_hbase_version: Option<i64>,
    rowkey_cache_mb: Option<i64>,
}

/// `[server]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    pub listen: Option<SocketAddr>,
    /// HTTP threads serving the REST API, each with its own connections (`http.rs`); `None`:
    /// one per CPU. A sidecar shares its machine with a RegionServer: capping it keeps lookups
    /// from taking cores HBase needs, and on a small box it keeps request latency tight (fewer
    /// runnable threads than cores means no time-slicing between them).
    pub workers: Option<usize>,
    /// CPUs the HTTP threads are pinned to, thread `i` to `http_cpus[i % len]`; empty: not
    /// pinned. With `workers` unset, one thread per listed CPU. See `http::HttpThreads` for why.
    pub http_cpus: Vec<usize>,
    pub thrift_listen: Option<SocketAddr>,
    pub thrift_workers: usize,
    pub thrift_transport: ThriftTransport,
    pub thrift_protocol: ThriftProtocol,
    /// The HBase release the gateway answers like: 1.x refuses the methods 2.0 added, so a
    /// client (hbidx's own HBase store included) can be checked against a 1.x cluster.
    pub thrift_api: HbaseApi,
    /// Budget of each table searcher's rowkey cache (`WriterOptions::rowkey_cache_bytes`),
    /// when set here; otherwise each table gets its share of `[memory] rowkey_cache_mb`. Its
    /// hit ratio is on `/metrics` (`hbidx_rowkey_cache_*`): when misses keep pace with hits,
    /// the working set is bigger than the budget.
    pub rowkey_cache_bytes: Option<u64>,
}

fn address(key: &str, text: &str) -> Result<SocketAddr> {
    text.parse()
        .with_context(|| format!("server.{key}: `{text}` is not an address like 127.0.0.1:9090"))
}

impl ServerConfig {
    /// The REST API's HTTP threads: `workers`, else one per listed `http_cpus`, else one per
    /// CPU; pinned as `http_cpus` says.
    pub fn http_threads(&self) -> crate::http::HttpThreads {
        let count = self.workers.unwrap_or_else(|| {
            if self.http_cpus.is_empty() {
                crate::http::default_threads()
            } else {
                self.http_cpus.len()
            }
        });
        crate::http::HttpThreads {
            count,
            cpus: self.http_cpus.clone(),
        }
    }

    /// Parses `[server]` of `config`; no IO.
    pub fn from_config(config: &Config) -> Result<Self> {
        let raw: RawServer = match &config.raw_server {
            Some(value) => value
                .clone()
                .try_into()
                .map_err(|error: toml::de::Error| anyhow::anyhow!("server: {}", error.message()))?,
            None => RawServer::default(),
        };
        let listen = raw
            .listen
            .as_deref()
            .map(|text| address("listen", text))
            .transpose()?;
        let thrift_listen = raw
            .thrift_listen
            .as_deref()
            .map(|text| address("thrift_listen", text))
            .transpose()?;
        let workers = match raw.workers {
            None => None,
            Some(workers @ 1..=1024) => Some(workers as usize),
            Some(workers) => bail!("server.workers: {workers} is not within 1..=1024"),
        };
        let mut http_cpus = Vec::new();
        for cpu in raw.http_cpus.unwrap_or_default() {
            // 1024: what a Linux affinity mask (CPU_SETSIZE) can name. Whether the CPU exists
            // is checked when the thread is pinned, at start.
            let cpu = match cpu {
                0..=1023 => cpu as usize,
                _ => bail!("server.http_cpus: {cpu} is not a CPU number within 0..=1023"),
            };
            if http_cpus.contains(&cpu) {
                bail!("server.http_cpus: CPU {cpu} is listed twice");
            }
            http_cpus.push(cpu);
        }
        let thrift_workers = match raw.thrift_workers {
            None => DEFAULT_WORKERS,
            Some(workers @ 1..=4096) => workers as usize,
            Some(workers) => bail!("server.thrift_workers: {workers} is not within 1..=4096"),
        };
        let thrift_transport = match raw.thrift_transport.as_deref() {
            None => ThriftTransport::Buffered,
            Some(text) => text
                .parse()
                .map_err(|error: String| anyhow::anyhow!("server.thrift_transport: {error}"))?,
        };
        let thrift_protocol = match raw.thrift_protocol.as_deref() {
            None => ThriftProtocol::Binary,
            Some(text) => text
                .parse()
                .map_err(|error: String| anyhow::anyhow!("server.thrift_protocol: {error}"))?,
        };
        let thrift_api = match raw.thrift_hbase_version {
            None | Some(2) => HbaseApi::V2,
            Some(1) => HbaseApi::V1,
            Some(other) => bail!("server.thrift_hbase_version: {other} is not 1 or 2"),
        };
        let rowkey_cache_bytes = match raw.rowkey_cache_mb {
            None => None,
            Some(mb @ 1..=65536) => Some((mb as u64) << 20),
            Some(mb) => bail!("server.rowkey_cache_mb: {mb} is not within 1..=65536"),
        };
        Ok(Self {
            listen,
            workers,
            http_cpus,
            rowkey_cache_bytes,
            thrift_listen,
            thrift_workers,
            thrift_transport,
            thrift_protocol,
            thrift_api,
        })
    }

    /// The REST address: the flag, else `[server] listen`, else the default.
    pub fn listen(&self, flag: Option<SocketAddr>) -> SocketAddr {
        flag.or(self.listen).unwrap_or_else(|| {
            DEFAULT_LISTEN
                .parse()
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8080)))
        })
    }

    /// The gateway's options when it is switched on, by the flag or `[server] thrift_listen`
    /// (the flag wins).
    pub fn gateway(&self, flag: Option<SocketAddr>) -> Option<GatewayOptions> {
        let listen = flag.or(self.thrift_listen)?;
        Some(GatewayOptions {
            transport: self.thrift_transport,
            protocol: self.thrift_protocol,
            workers: self.thrift_workers,
            api: self.thrift_api,
            ..GatewayOptions::new(listen)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(server: &str) -> Result<ServerConfig> {
        let text = format!("{}\n[server]\n{server}\n", hbidx_schema::EXAMPLE_CONFIG);
        ServerConfig::from_config(&hbidx_schema::parse_config(&text)?)
    }

    #[test]
    fn flags_override_the_config_and_the_gateway_is_off_by_default() {
        let config = parse("listen = \"127.0.0.1:9000\"").unwrap();
        assert_eq!(config.listen(None), "127.0.0.1:9000".parse().unwrap());
        assert_eq!(
            config.listen(Some("127.0.0.1:1".parse().unwrap())),
            "127.0.0.1:1".parse().unwrap()
        );
        assert_eq!(config.gateway(None), None);
        let gateway = config
            .gateway(Some("127.0.0.1:9090".parse().unwrap()))
            .unwrap();
        assert_eq!(gateway.workers, DEFAULT_WORKERS);
        assert_eq!(gateway.transport, ThriftTransport::Buffered);
        assert_eq!(gateway.protocol, ThriftProtocol::Binary);
    }

    #[test]
    fn thrift_keys_are_read_and_checked() {
        let config = parse(
            "thrift_listen = \"127.0.0.1:9091\"\nthrift_workers = 8\nthrift_transport = \"framed\"\nthrift_protocol = \"compact\"\nthrift_hbase_version = 1",
        )
        .unwrap();
        let gateway = config.gateway(None).unwrap();
        assert_eq!(gateway.listen, "127.0.0.1:9091".parse().unwrap());
        assert_eq!(gateway.workers, 8);
        assert_eq!(gateway.transport, ThriftTransport::Framed);
        assert_eq!(gateway.protocol, ThriftProtocol::Compact);
        assert_eq!(gateway.api, HbaseApi::V1);
        let error = parse("thrift_hbase_version = 3").unwrap_err().to_string();
        assert!(error.contains("server.thrift_hbase_version"), "{error}");

        let error = parse("thrift_listen = \"nowhere\"")
            .unwrap_err()
            .to_string();
        assert!(error.contains("server.thrift_listen"), "{error}");
        let pinned = parse("http_cpus = [1, 0]").unwrap().http_threads();
        assert_eq!((pinned.count, pinned.cpus), (2, vec![1, 0]));
        let pinned = parse("workers = 4\nhttp_cpus = [0]")
            .unwrap()
            .http_threads();
        assert_eq!((pinned.count, pinned.cpus), (4, vec![0]));
        assert!(parse("").unwrap().http_threads().cpus.is_empty());
        let error = parse("http_cpus = [0, 0]").unwrap_err().to_string();
        assert!(
            error.contains("server.http_cpus: CPU 0 is listed twice"),
            "{error}"
        );
        let error = parse("http_cpus = [-1]").unwrap_err().to_string();
        assert!(error.contains("server.http_cpus: -1"), "{error}");
        let error = parse("workers = 0").unwrap_err().to_string();
        assert!(error.contains("server.workers"), "{error}");
        assert_eq!(parse("workers = 3").unwrap().workers, Some(3));
        let error = parse("thrift_workers = 0").unwrap_err().to_string();
        assert!(error.contains("server.thrift_workers"), "{error}");
        let error = parse("thrift_protocol = \"json\"").unwrap_err().to_string();
        assert!(error.contains("binary, compact"), "{error}");
        let error = parse("thrift_lisen = \"127.0.0.1:1\"")
            .unwrap_err()
            .to_string();
        assert!(error.contains("thrift_lisen"), "{error}");
    }

    /// `[server] rowkey_cache_mb` is checked, and it is the budget the served tables' searchers
    /// get (through `server::open`), over `[memory]`'s split.
    #[test]
    fn rowkey_cache_budget_reaches_the_searchers() {
        assert_eq!(parse("").unwrap().rowkey_cache_bytes, None);
        for bad in ["rowkey_cache_mb = 0", "rowkey_cache_mb = 100000"] {
            let error = parse(bad).unwrap_err().to_string();
            assert!(error.contains("server.rowkey_cache_mb"), "{error}");
        }
        let text = format!(
            "{}\n[server]\nrowkey_cache_mb = 3\n",
            hbidx_schema::EXAMPLE_CONFIG
        );
        let config = hbidx_schema::parse_config(&text).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let runtime = crate::server::open(
            &config,
            dir.path(),
            &Default::default(),
            hbidx_query::auth::Auth::default(),
        )
        .unwrap();
        for table in runtime.state.tables.values() {
            assert_eq!(table.searcher.rowkey_cache_stats().budget, 3 << 20);
        }
    }
}
