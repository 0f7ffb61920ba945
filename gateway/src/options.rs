//! How to run the gateway: [`GatewayOptions`], the HBase release to answer like, the tables
//! from the hbidx config, and the defaults.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hbidx_schema::config::{HbaseApi, TableConfig, ThriftProtocol, ThriftTransport};

/// Worker threads by default: one per open connection (see the crate docs).
pub const DEFAULT_WORKERS: usize = hbidx_schema::config::DEFAULT_THRIFT_WORKERS;
/// Bytes one string or binary of a request may claim by default: HBase refuses cells over
/// 10 MB (`hbase.client.keyvalue.maxsize`), so 64 MiB never refuses a call HBase would take.
pub const DEFAULT_MAX_STRING_LEN: usize = 64 << 20;
/// HBase's default scanner lease (`hbase.client.scanner.timeout.period`).
pub const DEFAULT_SCANNER_LEASE: Duration = Duration::from_secs(60);
/// Open scanners allowed at once by default.
pub const DEFAULT_MAX_SCANNERS: usize = 1000;

/// How to run the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayOptions {
    /// Where to listen. Port 0 picks a free port;
    /// [`GatewayServer::local_addr`](crate::GatewayServer::local_addr) tells which.
    pub listen: SocketAddr,
    pub transport: ThriftTransport,
    pub protocol: ThriftProtocol,
    /// Worker threads: the number of connections served at once (see the crate docs).
    pub workers: usize,
    /// A scanner not called for this long is dropped.
    pub scanner_lease: Duration,
    /// Open scanners allowed at once; opening one more is an `IOError`.
    pub max_scanners: usize,
    /// The HBase release to answer like.
    pub api: HbaseApi,
    /// Elements one list, set or map of a request may claim (hbidx_store::thrift_limits).
    pub max_container_len: usize,
    /// Bytes one string or binary of a request may claim (hbidx_store::thrift_limits).
    pub max_string_len: usize,
    /// Whether `listen` may be other than loopback (`[server] thrift_allow_remote`): the
    /// gateway has no authentication.
    pub allow_remote: bool,
    /// A connection that sends nothing this long (between calls or within one) is closed,
    /// freeing its worker.
    pub idle_timeout: Duration,
}

impl GatewayOptions {
    /// The defaults (buffered, binary: HBase's and happybase's; 64 workers, 60 s lease) on
    /// `listen`.
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            transport: ThriftTransport::Buffered,
            protocol: ThriftProtocol::Binary,
            workers: DEFAULT_WORKERS,
            scanner_lease: DEFAULT_SCANNER_LEASE,
            max_scanners: DEFAULT_MAX_SCANNERS,
            api: HbaseApi::default(),
            max_container_len: hbidx_schema::config::DEFAULT_THRIFT_MAX_CONTAINER_LEN,
            max_string_len: DEFAULT_MAX_STRING_LEN,
            allow_remote: false,
            idle_timeout: hbidx_schema::config::DEFAULT_THRIFT_IDLE_TIMEOUT,
        }
    }
}

/// A table from the hbidx config, as the gateway serves it.
#[derive(Debug, Clone)]
pub struct ConfiguredTable {
    pub config: Arc<TableConfig>,
    /// The table's split keys (its regions in `getTableRegions`); empty for one region.
    pub split_keys: Vec<Vec<u8>>,
    /// The Kafka topic feeding the table, if any: gateway writes to it are refused.
    pub kafka_topic: Option<String>,
}
