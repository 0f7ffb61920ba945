//! `[server]`: where `hbidx serve` and `hbidx demo` listen, and how many threads serve.
//!
//! ```toml
//! [server]
//! listen = "127.0.0.1:8080"          # REST API (--listen)
//! workers = 2                        # threads serving the REST API; default one per CPU
//! http_cpus = [0, 1]                 # pin HTTP thread i to CPU http_cpus[i % len]; default unpinned
//! thrift_listen = "127.0.0.1:9090"   # HBase Thrift1 gateway (--thrift-listen); off when unset
//! thrift_allow_remote = false        # true to let thrift_listen be other than loopback
//! thrift_idle_timeout_ms = 60000     # a gateway connection silent this long is closed
//! thrift_workers = 64                # connections served at once (one thread each)
//! thrift_transport = "buffered"      # or "framed"
//! thrift_protocol = "binary"         # or "compact"
//! thrift_hbase_version = 2           # 1: answer like HBase 1.x's Thrift server
//! thrift_max_container_len = 100000  # elements one list, set or map of a request may claim
//! max_connections = 4096             # REST connections open at once; more wait to be accepted
//! max_connections_per_client = 1024  # of those, from one client address; more are closed
//! header_timeout_ms = 5000           # a request's head must arrive within this (idle too)
//! body_timeout_ms = 30000            # a request's body must arrive within this
//! max_lookup_matches = 20000         # matches one lookup may walk; more: 400
//! max_batch_matches = 100000         # matches one batch lookup may walk, all values together
//! ```

use std::net::SocketAddr;

use serde::Deserialize;

use super::{ConfigError, ThriftProtocol, ThriftTransport};

/// The REST API's address when neither `--listen` nor `[server] listen` says.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    8080,
));

/// Thrift gateway connections served at once when `thrift_workers` doesn't say.
pub const DEFAULT_THRIFT_WORKERS: usize = 64;

/// How long a gateway connection may send nothing (between calls or within one) before it is
/// closed, when `thrift_idle_timeout_ms` doesn't say: HBase's own Thrift server's
/// `hbase.thrift.server.socket.read.timeout`. Each connection holds a worker thread, so idle
/// ones would otherwise hold every worker.
pub const DEFAULT_THRIFT_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Why a gateway address other than loopback needs `thrift_allow_remote = true`.
pub const THRIFT_REMOTE_REFUSED: &str = "is not a loopback address, and the Thrift gateway has no \
     authentication (HBase Thrift clients know no key scheme): anyone who reaches it reads and \
     writes the rows. Bind it to 127.0.0.1, or set [server] thrift_allow_remote = true for a \
     private network you trust";

/// Elements one list, set or map of a Thrift request may claim when
/// `thrift_max_container_len` doesn't say: far above what an HBase client batches into one call
/// (happybase's batches are thousands of cells), far below what could exhaust memory.
pub const DEFAULT_THRIFT_MAX_CONTAINER_LEN: usize = 100_000;

/// REST connections open at once when `max_connections` doesn't say: far above what a
/// sidecar's clients pool, far below the file descriptors a process gets.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// REST connections one client address may hold open when `max_connections_per_client`
/// doesn't say: a quarter of the default total, so no one address (a slowloris, a runaway
/// pool) can take every connection and the probes' with them. An ingress or a proxy in front
/// is one address: raise it there.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 1024;

/// How long a REST request's head may take to arrive when `header_timeout_ms` doesn't say,
/// counted for a kept-alive connection from the previous answer (so also how long it may sit
/// idle, as Node.js's 5 s keep-alive default): a real client sends a head in one packet; a
/// slowloris holding connections by trickling bytes loses each within seconds.
pub const DEFAULT_HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a REST request's body may take to arrive when `body_timeout_ms` doesn't say:
/// generous for a batch of a thousand values on a slow link, finite for a client that trickles
/// bytes to hold a connection.
pub const DEFAULT_REQUEST_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Matches one lookup may walk when `max_lookup_matches` doesn't say: a surname prefix, in
/// characters or pinyin, over a table of a few hundred thousand people. Rows are not stored in
/// rowkey order, so a lookup's first page costs every match it has: this many cost from a few
/// tenths of a millisecond (one common value's postings) to ~10 ms (a prefix over mostly
/// distinct names, a dictionary step each) of one worker. A lookup that matches more is refused
/// with a 400 asking for a narrower value or another condition, as a search box asks for more
/// letters.
pub const DEFAULT_MAX_LOOKUP_MATCHES: usize = 20_000;

/// Matches one batch lookup may walk, its values together, when `max_batch_matches` doesn't
/// say: five broad lookups' worth. Without it a batch of 1000 values, each within its own
/// bound, could take seconds.
pub const DEFAULT_MAX_BATCH_MATCHES: usize = 100_000;

/// Why `[server] rowkey_cache_mb` is refused: the rowkey cache is a part of `[memory]`, whose
/// `rowkey_cache_mb` is the total for all tables. A per-table size under the same name in
/// `[server]` would give one key two meanings.
const SERVER_ROWKEY_CACHE_MB: &str = "is not a [server] key; set [memory] rowkey_cache_mb \
     instead (the total for all tables, split evenly between them, not a size per table)";

/// Which HBase release's Thrift1 server the gateway answers like.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HbaseApi {
    /// HBase 1.x: no `getThriftServerType`, `getClusterId`, `getTableNamesWithIsTableEnabled`,
    /// `grant`, `revoke` ("Invalid method name", as its server answers).
    V1,
    /// HBase 2.x: the whole IDL hbase-thrift is generated from.
    #[default]
    V2,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    listen: Option<String>,
    workers: Option<i64>,
    http_cpus: Option<Vec<i64>>,
    thrift_listen: Option<String>,
    thrift_allow_remote: Option<bool>,
    thrift_idle_timeout_ms: Option<i64>,
    thrift_workers: Option<i64>,
    thrift_transport: Option<String>,
    thrift_protocol: Option<String>,
    thrift_hbase_version: Option<i64>,
    thrift_max_container_len: Option<i64>,
    /// Read only to refuse it with a better message than "unknown field", naming the
    /// `[memory]` key to set instead.
    rowkey_cache_mb: Option<toml::Value>,
    max_connections: Option<i64>,
    max_connections_per_client: Option<i64>,
    header_timeout_ms: Option<i64>,
    body_timeout_ms: Option<i64>,
    max_lookup_matches: Option<i64>,
    max_batch_matches: Option<i64>,
}

/// `[server]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    pub listen: Option<SocketAddr>,
    /// HTTP threads serving the REST API, each with its own connections; `None`: one per CPU.
    /// A sidecar shares its machine with a RegionServer: capping it keeps lookups from taking
    /// cores HBase needs, and on a small box it keeps request latency tight (fewer runnable
    /// threads than cores means no time-slicing between them).
    pub workers: Option<usize>,
    /// CPUs the HTTP threads are pinned to, thread `i` to `http_cpus[i % len]`; empty: not
    /// pinned. With `workers` unset, one thread per listed CPU.
    pub http_cpus: Vec<usize>,
    pub thrift_listen: Option<SocketAddr>,
    /// Whether the gateway may listen on an address other than loopback (`thrift_listen` or
    /// `--thrift-listen`); without it such an address is refused.
    pub thrift_allow_remote: bool,
    /// A gateway connection that sends nothing this long is closed.
    pub thrift_idle_timeout: std::time::Duration,
    pub thrift_workers: usize,
    pub thrift_transport: ThriftTransport,
    pub thrift_protocol: ThriftProtocol,
    /// The HBase release the gateway answers like: 1.x refuses the methods 2.0 added, so a
    /// client (hbidx's own HBase store included) can be checked against a 1.x cluster.
    pub thrift_api: HbaseApi,
    /// Elements one list, set or map of a gateway request may claim; a request claiming more
    /// is refused before anything is allocated for it.
    pub thrift_max_container_len: usize,
    /// REST connections served at once; the next is accepted when one closes, so a crowd of
    /// idle or slow clients queues in the listen backlog instead of taking memory and threads.
    pub max_connections: usize,
    /// Of those, connections one client address may hold; more from it are closed as they
    /// are accepted (IPv6: per /64).
    pub max_connections_per_client: usize,
    /// A request's head must arrive within this, counted from when the server starts reading it
    /// (for a kept-alive connection, from the previous answer): a client that trickles it, or
    /// sits idle, is disconnected.
    pub header_timeout: std::time::Duration,
    /// A request's body must arrive within this once its handler reads it; later: 408.
    pub body_timeout: std::time::Duration,
    /// Matches one lookup may walk; a lookup that matches more is refused (400 naming its
    /// narrowest field). Bounds a lookup's CPU whatever the table's size.
    pub max_lookup_matches: usize,
    /// Matches one batch lookup may walk, its values together (each also within
    /// `max_lookup_matches`); the value that overdraws it is refused by name.
    pub max_batch_matches: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: None,
            workers: None,
            http_cpus: Vec::new(),
            thrift_listen: None,
            thrift_allow_remote: false,
            thrift_idle_timeout: DEFAULT_THRIFT_IDLE_TIMEOUT,
            thrift_workers: DEFAULT_THRIFT_WORKERS,
            thrift_transport: ThriftTransport::Buffered,
            thrift_protocol: ThriftProtocol::Binary,
            thrift_api: HbaseApi::V2,
            thrift_max_container_len: DEFAULT_THRIFT_MAX_CONTAINER_LEN,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_client: DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_REQUEST_READ_TIMEOUT,
            max_lookup_matches: DEFAULT_MAX_LOOKUP_MATCHES,
            max_batch_matches: DEFAULT_MAX_BATCH_MATCHES,
        }
    }
}

impl ServerConfig {
    /// The REST address: the flag, else `[server] listen`, else the default.
    pub fn listen(&self, flag: Option<SocketAddr>) -> SocketAddr {
        flag.or(self.listen).unwrap_or(DEFAULT_LISTEN)
    }

    /// Validates `[server]`; no IO (whether a CPU exists is checked when a thread is pinned).
    pub(crate) fn validate(raw: RawServer) -> Result<Self, ConfigError> {
        let invalid =
            |key: &str, reason: String| ConfigError::invalid(format!("server.{key}"), reason);
        let address = |key: &str, text: &str| {
            text.parse::<SocketAddr>().map_err(|_| {
                invalid(
                    key,
                    format!("`{text}` is not an address like 127.0.0.1:9090"),
                )
            })
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
        let thrift_allow_remote = raw.thrift_allow_remote.unwrap_or(false);
        if let Some(addr) = thrift_listen
            && !addr.ip().is_loopback()
            && !thrift_allow_remote
        {
            return Err(invalid(
                "thrift_listen",
                format!("{addr} {THRIFT_REMOTE_REFUSED}"),
            ));
        }
        let thrift_idle_timeout = match raw.thrift_idle_timeout_ms {
            None => DEFAULT_THRIFT_IDLE_TIMEOUT,
            Some(ms @ 1..=86_400_000) => std::time::Duration::from_millis(ms as u64),
            Some(ms) => {
                return Err(invalid(
                    "thrift_idle_timeout_ms",
                    format!("{ms} is not within 1..=86400000"),
                ));
            }
        };
        let workers = match raw.workers {
            None => None,
            Some(workers @ 1..=1024) => Some(workers as usize),
            Some(workers) => {
                return Err(invalid(
                    "workers",
                    format!("{workers} is not within 1..=1024"),
                ));
            }
        };
        let mut http_cpus = Vec::new();
        for cpu in raw.http_cpus.unwrap_or_default() {
            // 1024: what a Linux affinity mask (CPU_SETSIZE) can name.
            let cpu = match cpu {
                0..=1023 => cpu as usize,
                _ => {
                    return Err(invalid(
                        "http_cpus",
                        format!("{cpu} is not a CPU number within 0..=1023"),
                    ));
                }
            };
            if http_cpus.contains(&cpu) {
                return Err(invalid("http_cpus", format!("CPU {cpu} is listed twice")));
            }
            http_cpus.push(cpu);
        }
        let thrift_workers = match raw.thrift_workers {
            None => DEFAULT_THRIFT_WORKERS,
            Some(workers @ 1..=4096) => workers as usize,
            Some(workers) => {
                return Err(invalid(
                    "thrift_workers",
                    format!("{workers} is not within 1..=4096"),
                ));
            }
        };
        let thrift_transport = match raw.thrift_transport.as_deref() {
            None => ThriftTransport::Buffered,
            Some(text) => text
                .parse()
                .map_err(|reason: String| invalid("thrift_transport", reason))?,
        };
        let thrift_protocol = match raw.thrift_protocol.as_deref() {
            None => ThriftProtocol::Binary,
            Some(text) => text
                .parse()
                .map_err(|reason: String| invalid("thrift_protocol", reason))?,
        };
        let thrift_api = match raw.thrift_hbase_version {
            None | Some(2) => HbaseApi::V2,
            Some(1) => HbaseApi::V1,
            Some(other) => {
                return Err(invalid(
                    "thrift_hbase_version",
                    format!("{other} is not 1 or 2"),
                ));
            }
        };
        let thrift_max_container_len = match raw.thrift_max_container_len {
            None => DEFAULT_THRIFT_MAX_CONTAINER_LEN,
            Some(len @ 1..=100_000_000) => len as usize,
            Some(len) => {
                return Err(invalid(
                    "thrift_max_container_len",
                    format!("{len} is not within 1..=100000000"),
                ));
            }
        };
        if raw.rowkey_cache_mb.is_some() {
            return Err(invalid(
                "rowkey_cache_mb",
                SERVER_ROWKEY_CACHE_MB.to_owned(),
            ));
        }
        let max_connections = match raw.max_connections {
            None => DEFAULT_MAX_CONNECTIONS,
            Some(n @ 1..=1_000_000) => n as usize,
            Some(n) => {
                return Err(invalid(
                    "max_connections",
                    format!("{n} is not within 1..=1000000"),
                ));
            }
        };
        let max_connections_per_client = match raw.max_connections_per_client {
            None => DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
            Some(n @ 1..=1_000_000) => n as usize,
            Some(n) => {
                return Err(invalid(
                    "max_connections_per_client",
                    format!("{n} is not within 1..=1000000"),
                ));
            }
        };
        let max_lookup_matches = match raw.max_lookup_matches {
            None => DEFAULT_MAX_LOOKUP_MATCHES,
            Some(n @ 1..=100_000_000) => n as usize,
            Some(n) => {
                return Err(invalid(
                    "max_lookup_matches",
                    format!("{n} is not within 1..=100000000"),
                ));
            }
        };
        let max_batch_matches = match raw.max_batch_matches {
            None => DEFAULT_MAX_BATCH_MATCHES,
            Some(n @ 1..=1_000_000_000) => n as usize,
            Some(n) => {
                return Err(invalid(
                    "max_batch_matches",
                    format!("{n} is not within 1..=1000000000"),
                ));
            }
        };
        let timeout = |key: &str, value: Option<i64>, default| match value {
            None => Ok(default),
            Some(ms @ 1..=3_600_000) => Ok(std::time::Duration::from_millis(ms as u64)),
            Some(ms) => Err(invalid(key, format!("{ms} is not within 1..=3600000"))),
        };
        let header_timeout = timeout(
            "header_timeout_ms",
            raw.header_timeout_ms,
            DEFAULT_HEADER_TIMEOUT,
        )?;
        let body_timeout = timeout(
            "body_timeout_ms",
            raw.body_timeout_ms,
            DEFAULT_REQUEST_READ_TIMEOUT,
        )?;
        Ok(Self {
            listen,
            workers,
            http_cpus,
            thrift_listen,
            thrift_allow_remote,
            thrift_idle_timeout,
            thrift_workers,
            thrift_transport,
            thrift_protocol,
            thrift_api,
            thrift_max_container_len,
            max_connections,
            max_connections_per_client,
            header_timeout,
            body_timeout,
            max_lookup_matches,
            max_batch_matches,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(server: &str) -> Result<ServerConfig, ConfigError> {
        let text = format!("{}\n[server]\n{server}\n", crate::EXAMPLE_CONFIG);
        crate::config::parse_config(&text).map(|config| config.server)
    }

    #[test]
    fn flags_override_the_config() {
        let config = parse("listen = \"127.0.0.1:9000\"").unwrap();
        assert_eq!(config.listen(None), "127.0.0.1:9000".parse().unwrap());
        assert_eq!(
            config.listen(Some("127.0.0.1:1".parse().unwrap())),
            "127.0.0.1:1".parse().unwrap()
        );
        assert_eq!(parse("").unwrap().listen(None), DEFAULT_LISTEN);
        assert_eq!(parse("").unwrap(), ServerConfig::default());
    }

    #[test]
    fn keys_are_read_and_checked() {
        let config = parse(
            "thrift_listen = \"127.0.0.1:9091\"\nthrift_workers = 8\nthrift_transport = \"framed\"\nthrift_protocol = \"compact\"\nthrift_hbase_version = 1\nworkers = 3\nhttp_cpus = [1, 0]",
        )
        .unwrap();
        assert_eq!(
            config.thrift_listen,
            Some("127.0.0.1:9091".parse().unwrap())
        );
        assert_eq!(config.thrift_workers, 8);
        assert_eq!(config.thrift_transport, ThriftTransport::Framed);
        assert_eq!(config.thrift_protocol, ThriftProtocol::Compact);
        assert_eq!(config.thrift_api, HbaseApi::V1);
        assert_eq!(config.workers, Some(3));
        assert_eq!(config.http_cpus, [1, 0]);
        for (text, expected) in [
            ("thrift_hbase_version = 3", "server.thrift_hbase_version: 3"),
            (
                "thrift_listen = \"nowhere\"",
                "server.thrift_listen: `nowhere`",
            ),
            (
                "http_cpus = [0, 0]",
                "server.http_cpus: CPU 0 is listed twice",
            ),
            ("http_cpus = [-1]", "server.http_cpus: -1"),
            ("workers = 0", "server.workers: 0"),
            ("thrift_workers = 0", "server.thrift_workers: 0"),
            (
                "thrift_protocol = \"json\"",
                "server.thrift_protocol: thrift protocol `json` is not one of binary, compact",
            ),
            (
                "thrift_lisen = \"127.0.0.1:1\"",
                "server.thrift_lisen: unknown field",
            ),
            (
                "thrift_max_container_len = -1",
                "server.thrift_max_container_len: -1",
            ),
            ("max_connections = 0", "server.max_connections: 0"),
            ("header_timeout_ms = 0", "server.header_timeout_ms: 0"),
            ("body_timeout_ms = -5", "server.body_timeout_ms: -5"),
            ("max_lookup_matches = 0", "server.max_lookup_matches: 0"),
            ("max_batch_matches = -1", "server.max_batch_matches: -1"),
            (
                "max_connections_per_client = 0",
                "server.max_connections_per_client: 0",
            ),
            (
                "thrift_listen = \"0.0.0.0:9090\"",
                "server.thrift_listen: 0.0.0.0:9090 is not a loopback address",
            ),
            (
                "thrift_idle_timeout_ms = 0",
                "server.thrift_idle_timeout_ms: 0",
            ),
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
        // A remote gateway is an explicit choice.
        let remote = parse("thrift_listen = \"0.0.0.0:9090\"\nthrift_allow_remote = true").unwrap();
        assert!(remote.thrift_allow_remote);
        // The defaults: a slowloris loses a connection within seconds.
        let defaults = parse("").unwrap();
        assert_eq!(defaults.header_timeout, std::time::Duration::from_secs(5));
        assert_eq!(defaults.max_connections_per_client, 1024);
        assert_eq!(
            defaults.thrift_idle_timeout,
            std::time::Duration::from_secs(60)
        );
        let limits =
            parse("max_connections = 7\nheader_timeout_ms = 250\nbody_timeout_ms = 500").unwrap();
        assert_eq!(limits.max_connections, 7);
        assert_eq!(limits.header_timeout, std::time::Duration::from_millis(250));
        assert_eq!(limits.body_timeout, std::time::Duration::from_millis(500));
        assert_eq!(defaults.max_lookup_matches, DEFAULT_MAX_LOOKUP_MATCHES);
        assert_eq!(
            parse("max_lookup_matches = 250")
                .unwrap()
                .max_lookup_matches,
            250
        );
    }

    /// `rowkey_cache_mb` in `[server]` (a size per table) is refused, whatever its value, with
    /// the `[memory]` key to set instead (the total).
    #[test]
    fn a_server_rowkey_cache_is_refused_naming_the_memory_key() {
        for value in ["64", "0", "\"64\""] {
            let error = parse(&format!("rowkey_cache_mb = {value}"))
                .unwrap_err()
                .to_string();
            assert_eq!(
                error,
                "server.rowkey_cache_mb: is not a [server] key; set [memory] rowkey_cache_mb \
                 instead (the total for all tables, split evenly between them, not a size per \
                 table)",
                "{value}"
            );
        }
        let memory = format!(
            "{}\n[memory]\nrowkey_cache_mb = 64\n",
            crate::EXAMPLE_CONFIG
        );
        assert!(crate::config::parse_config(&memory).is_ok());
    }
}
