//! `[store]`: which row store serves the tables.
//!
//! ```toml
//! [store]
//! kind = "hbase"               # or "embedded" (the default)
//! thrift = "127.0.0.1:9090"    # the HBase Thrift1 server (hbase thrift start)
//! # pool_size = 16             # connections, and the most calls in flight at once
//! # connect_timeout_ms = 1000
//! # timeout_ms = 2000          # per call, retries included: a lookup never waits longer
//! # retries = 2                # extra attempts for transport errors only
//! # transport = "buffered"     # or "framed" (hbase.regionserver.thrift.framed)
//! # protocol = "binary"        # or "compact" (hbase.regionserver.thrift.compact)
//! # breaker_failures = 5       # consecutive transport failures that open the breaker
//! # breaker_open_ms = 5000     # how long it stays open before one trial call
//! # scan_caching = 1000        # rows per scanner page of a reindex --from-store
//! ```
//!
//! ```toml
//! [store]
//! kind = "embedded"
//! # durability = "sync_wal"    # or "fsync_wal": when a write is acknowledged (see Durability)
//! ```

use std::time::Duration;

use serde::Deserialize;

use super::ConfigError;

type Result<T> = std::result::Result<T, ConfigError>;

/// The validated `[store]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// Rows in the embedded fjall store inside the data dir.
    Embedded(EmbeddedConfig),
    /// Rows in a real HBase cluster, reached through its Thrift1 server.
    Hbase(HbaseConfig),
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self::Embedded(EmbeddedConfig::default())
    }
}

/// The embedded store's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EmbeddedConfig {
    pub durability: Durability,
}

/// When the embedded store acknowledges a write, named after HBase's `Durability` levels.
/// Either way the index never commits past what the store has synced: a power cut can lose
/// acknowledged writes under `SyncWal`, never leave the index ahead of the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// The write is in the journal and handed to the OS (HBase's `SYNC_WAL`, an hflush): it
    /// survives hbidx being killed, not an OS crash or a power cut. Writes covered by an index
    /// commit (`?wait=indexed` answered) are synced by then and survive both.
    #[default]
    SyncWal,
    /// The journal is fsynced before each write is acknowledged (HBase's `FSYNC_WAL`, an
    /// hsync): every acknowledged write survives a power cut, at an fsync per write request.
    FsyncWal,
}

impl Durability {
    /// As in the config file.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SyncWal => "sync_wal",
            Self::FsyncWal => "fsync_wal",
        }
    }
}

/// Framing of the Thrift1 connection; must match the server's setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThriftTransport {
    Buffered,
    Framed,
}

/// Wire encoding of the Thrift1 connection; must match the server's setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThriftProtocol {
    Binary,
    Compact,
}

/// `buffered` or `framed`, as in the config files (the gateway's `[server] thrift_transport`).
impl std::str::FromStr for ThriftTransport {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "buffered" => Ok(Self::Buffered),
            "framed" => Ok(Self::Framed),
            other => Err(format!(
                "thrift transport `{other}` is not one of buffered, framed"
            )),
        }
    }
}

/// `binary` or `compact`, as in the config files (the gateway's `[server] thrift_protocol`).
impl std::str::FromStr for ThriftProtocol {
    type Err = String;

    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "binary" => Ok(Self::Binary),
            "compact" => Ok(Self::Compact),
            other => Err(format!(
                "thrift protocol `{other}` is not one of binary, compact"
            )),
        }
    }
}

/// Rows per scanner page of a store scan. A page is one Thrift call (open, fetch, close): a
/// thousand rows keep the per-call overhead to about 1% of the rows' own transfer.
pub const DEFAULT_SCAN_CACHING: u32 = 1000;

/// How to reach an HBase Thrift1 server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HbaseConfig {
    /// `host:port` of the Thrift1 server.
    pub thrift: String,
    pub pool_size: u32,
    pub connect_timeout: Duration,
    /// The whole budget of one store call, retries included.
    pub timeout: Duration,
    pub retries: u32,
    pub transport: ThriftTransport,
    pub protocol: ThriftProtocol,
    pub breaker_failures: u32,
    pub breaker_open: Duration,
    /// Rows per scanner page when `reindex --from-store` scans HBase (HBase's
    /// `hbase.client.scanner.caching`): one page is one call, so it must come back within
    /// `timeout`.
    pub scan_caching: u32,
}

impl HbaseConfig {
    /// Defaults for a Thrift1 server at `thrift`.
    pub fn new(thrift: impl Into<String>) -> Self {
        Self {
            thrift: thrift.into(),
            pool_size: 16,
            connect_timeout: Duration::from_millis(1000),
            timeout: Duration::from_millis(2000),
            retries: 2,
            transport: ThriftTransport::Buffered,
            protocol: ThriftProtocol::Binary,
            breaker_failures: 5,
            breaker_open: Duration::from_millis(5000),
            scan_caching: DEFAULT_SCAN_CACHING,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    kind: Option<String>,
    thrift: Option<String>,
    pool_size: Option<i64>,
    connect_timeout_ms: Option<i64>,
    timeout_ms: Option<i64>,
    retries: Option<i64>,
    transport: Option<String>,
    protocol: Option<String>,
    breaker_failures: Option<i64>,
    breaker_open_ms: Option<i64>,
    scan_caching: Option<i64>,
    durability: Option<String>,
}

fn invalid(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::invalid(format!("store.{key}"), reason)
}

fn bounded(value: Option<i64>, key: &str, min: i64, max: i64, default: u64) -> Result<u64> {
    match value {
        None => Ok(default),
        Some(v) if (min..=max).contains(&v) => Ok(v as u64),
        Some(v) => Err(invalid(key, format!("{v} is out of range ({min}..={max})"))),
    }
}

impl StoreConfig {
    /// Validates `[store]` (absent = embedded). Never touches the network.
    pub(crate) fn validate(raw: Option<RawStore>) -> Result<Self> {
        let Some(raw) = raw else {
            return Ok(Self::default());
        };
        let kind = raw.kind.as_deref().unwrap_or("embedded");
        match kind {
            "embedded" => {
                let stray = [
                    ("thrift", raw.thrift.is_some()),
                    ("pool_size", raw.pool_size.is_some()),
                    ("transport", raw.transport.is_some()),
                    ("protocol", raw.protocol.is_some()),
                    ("scan_caching", raw.scan_caching.is_some()),
                ];
                if let Some((key, _)) = stray.iter().find(|(_, set)| *set) {
                    return Err(invalid(key, "only applies to kind = \"hbase\""));
                }
                let durability = match raw.durability.as_deref() {
                    None | Some("sync_wal") => Durability::SyncWal,
                    Some("fsync_wal") => Durability::FsyncWal,
                    Some(other) => {
                        return Err(invalid(
                            "durability",
                            format!("\"{other}\" is unknown (sync_wal or fsync_wal)"),
                        ));
                    }
                };
                Ok(Self::Embedded(EmbeddedConfig { durability }))
            }
            "hbase" => {
                if raw.durability.is_some() {
                    return Err(invalid(
                        "durability",
                        "only applies to kind = \"embedded\" (HBase's own WAL settings decide)",
                    ));
                }
                let thrift = raw.thrift.filter(|t| !t.trim().is_empty()).ok_or_else(|| {
                    invalid(
                        "thrift",
                        "is required for kind = \"hbase\" (host:port of the HBase Thrift1 server)",
                    )
                })?;
                validate_host_port(&thrift)?;
                let mut config = HbaseConfig::new(thrift);
                config.pool_size = bounded(raw.pool_size, "pool_size", 1, 1024, 16)? as u32;
                config.connect_timeout = Duration::from_millis(bounded(
                    raw.connect_timeout_ms,
                    "connect_timeout_ms",
                    1,
                    600_000,
                    1000,
                )?);
                config.timeout =
                    Duration::from_millis(bounded(raw.timeout_ms, "timeout_ms", 1, 600_000, 2000)?);
                config.retries = bounded(raw.retries, "retries", 0, 10, 2)? as u32;
                config.breaker_failures =
                    bounded(raw.breaker_failures, "breaker_failures", 1, 10_000, 5)? as u32;
                config.breaker_open = Duration::from_millis(bounded(
                    raw.breaker_open_ms,
                    "breaker_open_ms",
                    1,
                    3_600_000,
                    5000,
                )?);
                config.scan_caching = bounded(
                    raw.scan_caching,
                    "scan_caching",
                    1,
                    100_000,
                    u64::from(DEFAULT_SCAN_CACHING),
                )? as u32;
                config.transport = match raw.transport.as_deref() {
                    None | Some("buffered") => ThriftTransport::Buffered,
                    Some("framed") => ThriftTransport::Framed,
                    Some(other) => {
                        return Err(invalid(
                            "transport",
                            format!("\"{other}\" is unknown (buffered or framed)"),
                        ));
                    }
                };
                config.protocol = match raw.protocol.as_deref() {
                    None | Some("binary") => ThriftProtocol::Binary,
                    Some("compact") => ThriftProtocol::Compact,
                    Some(other) => {
                        return Err(invalid(
                            "protocol",
                            format!("\"{other}\" is unknown (binary or compact)"),
                        ));
                    }
                };
                Ok(Self::Hbase(config))
            }
            other => Err(invalid(
                "kind",
                format!("\"{other}\" is unknown (embedded or hbase)"),
            )),
        }
    }
}

/// `host:port` with a non-empty host and a numeric port; resolving the host is left to connect
/// time so that validation does no IO.
fn validate_host_port(address: &str) -> Result<()> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| invalid("thrift", format!("\"{address}\" is not host:port")))?;
    if host.trim_matches(['[', ']']).is_empty() {
        return Err(invalid("thrift", format!("\"{address}\" has no host")));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(invalid(
            "thrift",
            format!("\"{address}\" has no valid port (1..=65535)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<StoreConfig> {
        crate::config::parse_config(text).map(|config| config.store)
    }

    #[test]
    fn absent_and_embedded() {
        assert_eq!(parse("").unwrap(), StoreConfig::default());
        assert_eq!(
            parse("[store]\nkind = \"embedded\"").unwrap(),
            StoreConfig::Embedded(EmbeddedConfig {
                durability: Durability::SyncWal
            })
        );
    }

    #[test]
    fn durability_is_named_and_embedded_only() {
        assert_eq!(
            parse("[store]\ndurability = \"fsync_wal\"").unwrap(),
            StoreConfig::Embedded(EmbeddedConfig {
                durability: Durability::FsyncWal
            })
        );
        for text in [
            "[store]\ndurability = \"fsync\"",
            "[store]\nkind = \"hbase\"\nthrift = \"h:9090\"\ndurability = \"fsync_wal\"",
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains("store.durability"), "{text}: {error}");
        }
    }

    #[test]
    fn scan_caching_is_bounded_and_hbase_only() {
        let StoreConfig::Hbase(hbase) =
            parse("[store]\nkind = \"hbase\"\nthrift = \"h:9090\"\nscan_caching = 5000").unwrap()
        else {
            panic!("hbase expected")
        };
        assert_eq!(hbase.scan_caching, 5000);
        let StoreConfig::Hbase(default) =
            parse("[store]\nkind = \"hbase\"\nthrift = \"h:9090\"").unwrap()
        else {
            panic!("hbase expected")
        };
        assert_eq!(default.scan_caching, DEFAULT_SCAN_CACHING);
        for text in [
            "[store]\nkind = \"hbase\"\nthrift = \"h:9090\"\nscan_caching = 0",
            "[store]\nkind = \"hbase\"\nthrift = \"h:9090\"\nscan_caching = 100001",
            "[store]\nkind = \"embedded\"\nscan_caching = 100",
        ] {
            let error = parse(text).unwrap_err().to_string();
            assert!(error.contains("store.scan_caching"), "{text}: {error}");
        }
    }

    #[test]
    fn hbase_keys() {
        let config = parse(
            "[store]\nkind = \"hbase\"\nthrift = \"hbase-thrift:9090\"\npool_size = 4\ntimeout_ms = 300\ntransport = \"framed\"\nprotocol = \"compact\"",
        )
        .unwrap();
        let StoreConfig::Hbase(hbase) = config else {
            panic!("hbase expected")
        };
        assert_eq!(hbase.thrift, "hbase-thrift:9090");
        assert_eq!(hbase.pool_size, 4);
        assert_eq!(hbase.timeout, Duration::from_millis(300));
        assert_eq!(hbase.transport, ThriftTransport::Framed);
        assert_eq!(hbase.protocol, ThriftProtocol::Compact);
        assert_eq!(hbase.retries, 2);
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            ("[store]\nkind = \"hbase\"", "store.thrift: is required"),
            (
                "[store]\nkind = \"hbase\"\nthrift = \"nohost\"",
                "store.thrift: \"nohost\" is not host:port",
            ),
            (
                "[store]\nkind = \"hbase\"\nthrift = \"h:99999\"",
                "no valid port",
            ),
            (
                "[store]\nkind = \"hbase\"\nthrift = \"h:1\"\npool_size = 0",
                "store.pool_size: 0 is out of range",
            ),
            (
                "[store]\nkind = \"hbase\"\nthrift = \"h:1\"\ntransport = \"zmq\"",
                "store.transport",
            ),
            ("[store]\nkind = \"redis\"", "store.kind: \"redis\""),
            (
                "[store]\nkind = \"hbase\"\nthrfit = \"h:1\"",
                "store.thrfit",
            ),
            (
                "[store]\nkind = \"embedded\"\nthrift = \"h:1\"",
                "store.thrift: only applies",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }
}
