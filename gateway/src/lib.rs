//! An HBase-compatible Thrift1 gateway over the [`EmbeddedStore`]: HBase's own `Hbase` service
//! (the IDL HBase's `ThriftServer` serves on port 9090), so existing HBase Thrift clients such
//! as happybase, and hbidx's own Thrift `RowStore`, work against the embedded default.
//!
//! # What it serves
//!
//! - Tables: `getTableNames(WithIsTableEnabled)`, `createTable`, `getColumnDescriptors`,
//!   `isTableEnabled`, `enableTable`, `disableTable`, `deleteTable`, `getTableRegions`,
//!   `compact`/`majorCompact` (accepted no-ops: fjall compacts on its own).
//! - Reads: `get`, `getVer(Ts)`, `getRow(WithColumns)(Ts)`, `getRows(WithColumns)(Ts)`. Missing
//!   rows are left out of `getRow*`/`getRows*` answers, as HBase does.
//! - Writes: `mutateRow(s)(Ts)`, `deleteAll(Ts)`, `deleteAllRow(Ts)`, through
//!   [`EmbeddedStore::mutate_sync`], so they land in the change feed and get indexed like any
//!   other write. Without a timestamp the server's clock (ms) is used, one value per call.
//! - Scanners: `scannerOpen(WithStop|WithPrefix|WithScan)(Ts)`, `scannerGet(List)`,
//!   `scannerClose`.
//! - Error messages start with the name of the exception HBase's Java server would have thrown
//!   (`TableNotFoundException: …`, `NoSuchColumnFamilyException: …`), since that is what HBase
//!   clients, hbidx's own `HbaseStore` included, look for in an `IOError`.
//! - Everything else (`atomicIncrement`, `increment(Rows)`, `append`, `checkAndPut`,
//!   `getRegionInfo`, `grant`, `revoke`) answers an `IOError` naming the method.
//! - [`HbaseApi::V1`] answers like HBase 1.x's server instead: the methods HBase 2.0 added
//!   ([`HBASE_2_ONLY`](hbidx_store::HBASE_2_ONLY)) are a `TApplicationException` "Invalid method
//!   name", so a client can be checked against a 1.x cluster without one.
//!
//! # HBase semantics kept, and where the store differs
//!
//! - Tables from the hbidx config are served under their HBase name (`ns:table`, or `table` in
//!   the default namespace), with their configured families and split keys (the regions of
//!   `getTableRegions`). They can't be deleted or disabled here. When one is fed from Kafka,
//!   writes are refused: the topic is the log of that table, and a write that bypassed it would
//!   never reach the index or the other replicas.
//! - Tables made with `createTable` are rows only (no index) and survive restarts (the store's
//!   table registry). As in HBase, a table must be disabled before `deleteTable`.
//! - The store keeps one version per cell (`VERSIONS => 1`). `*Ts` reads return cells older than
//!   the timestamp (HBase's time range `[0, ts)`), so a cell whose latest version is newer is
//!   absent rather than answered with an older version; `getVer` returns at most one cell.
//! - Columns: `family:qualifier`; in reads and deletes a bare `family` (or `family:`, as
//!   happybase documents it) means the whole family. Qualifiers must be UTF-8. An unknown family
//!   is an error, as HBase's `NoSuchColumnFamilyException`.
//! - `TScan.filterString` is not supported (an `IOError`), nor reversed scans. `TScan.batchSize`
//!   cuts rows into partial rows as HBase's `Scan.setBatching` does.
//!
//! # Scanners
//!
//! Open scanners live in a map with an idle lease (HBase's default, 60 s): a scanner not called
//! for longer is dropped at the next scanner call, and using it then is an `IllegalArgument`. The
//! number of open scanners is capped so that clients that never close them can't grow the map
//! without bound. A scanner reads the store lazily in `caching`-sized batches; it is not a
//! snapshot (neither is an HBase scan across regions).
//!
//! # Connections and threads
//!
//! The server is thrift 0.17's `TServer`: one worker thread per open connection, for the
//! connection's whole life. A connection beyond the worker count waits, without an answer,
//! until another closes, so [`GatewayOptions::workers`] must cover every client's connection
//! pool (happybase's `ConnectionPool(size=N)` holds N). Handlers call the store's sync methods
//! directly; they run on those worker threads, never on the async runtime.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hbase_thrift::hbase::{
    AlreadyExists, BatchMutation, ColumnDescriptor, HbaseSyncHandler, HbaseSyncProcessor, IOError,
    IllegalArgument, Mutation as TMutation, ScannerID, TAccessControlEntity, TAppend, TCell,
    TColumn, TIncrement, TRegionInfo, TRowResult, TScan, TThriftServerType,
};
use hbidx_schema::config::{FamilyConfig, TableConfig, Ttl};
use hbidx_schema::model::{CellOp, Mutation};
use thrift::protocol::{
    TBinaryInputProtocolFactory, TBinaryOutputProtocolFactory, TCompactInputProtocolFactory,
    TCompactOutputProtocolFactory, TInputProtocolFactory, TOutputProtocolFactory,
};
use thrift::server::TServer;
use thrift::transport::{
    TBufferedReadTransportFactory, TBufferedWriteTransportFactory, TFramedReadTransportFactory,
    TFramedWriteTransportFactory, TReadTransportFactory, TWriteTransportFactory,
};

use crate::args::NullableArgsFactory;
pub use hbidx_schema::config::{HbaseApi, ThriftProtocol, ThriftTransport};
use hbidx_store::{
    Cell, EmbeddedStore, Result, Row, ScanRequest, StoreError, TableInfo, TableOrigin,
};

mod args;

/// Worker threads by default: one per open connection (see the module docs).
pub const DEFAULT_WORKERS: usize = hbidx_schema::config::DEFAULT_THRIFT_WORKERS;
/// HBase's default scanner lease (`hbase.client.scanner.timeout.period`).
pub const DEFAULT_SCANNER_LEASE: Duration = Duration::from_secs(60);
/// Open scanners allowed at once by default.
pub const DEFAULT_MAX_SCANNERS: usize = 1000;
/// Rows a scanner reads from the store per batch when the client doesn't say (`TScan.caching`).
const DEFAULT_CACHING: usize = 100;
/// Upper bound of one store read of a scanner, and of the rows one `scannerGetList` answers
/// (clients call again until they get an empty list, so a shorter answer is allowed).
const MAX_ROWS_PER_CALL: usize = 10_000;
/// How long `serve` waits for the server thread to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How to run the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayOptions {
    /// Where to listen. Port 0 picks a free port; [`GatewayServer::local_addr`] tells which.
    pub listen: SocketAddr,
    pub transport: ThriftTransport,
    pub protocol: ThriftProtocol,
    /// Worker threads: the number of connections served at once (see the module docs).
    pub workers: usize,
    /// A scanner not called for this long is dropped.
    pub scanner_lease: Duration,
    /// Open scanners allowed at once; opening one more is an `IOError`.
    pub max_scanners: usize,
    /// The HBase release to answer like.
    pub api: HbaseApi,
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

/// A running gateway. The server thread runs until the process exits: thrift 0.17's `TServer`
/// has no shutdown.
#[derive(Debug)]
pub struct GatewayServer {
    local_addr: SocketAddr,
}

impl GatewayServer {
    /// The address the gateway accepts connections on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
}

/// Starts the gateway on a background thread and returns once it accepts connections.
///
/// `TServer::listen` binds by itself, blocks forever and doesn't report its address, so the
/// address is bound here first (to report a taken port as an error, and to resolve port 0),
/// released, and handed to `listen`; then this waits until a connection succeeds.
pub fn serve(
    store: Arc<EmbeddedStore>,
    configured: Vec<ConfiguredTable>,
    options: GatewayOptions,
) -> Result<GatewayServer> {
    if options.workers == 0 {
        return Err(StoreError::InvalidRequest {
            reason: "the thrift gateway needs at least one worker".to_owned(),
        });
    }
    let bind_error = |source: std::io::Error| StoreError::GatewayBind {
        addr: options.listen,
        source,
    };
    let probe = std::net::TcpListener::bind(options.listen).map_err(bind_error)?;
    let local_addr = probe.local_addr().map_err(bind_error)?;
    drop(probe);

    let gateway = Gateway::new(store, configured, &options, local_addr);
    let (failed_tx, failed_rx) = std::sync::mpsc::channel();
    let workers = options.workers;
    let spawn = |run: Box<dyn FnOnce() -> thrift::Result<()> + Send>| {
        std::thread::Builder::new()
            .name("thrift-gateway".to_owned())
            .spawn(move || {
                // `listen` only returns with an error.
                if let Err(error) = run() {
                    tracing::error!(%error, "thrift gateway stopped");
                    let _ = failed_tx.send(error.to_string());
                }
            })
            .map_err(|error| StoreError::Storage(Box::new(error)))
    };
    let processor = HbaseSyncProcessor::new(gateway);
    match (options.transport, options.protocol) {
        (ThriftTransport::Buffered, ThriftProtocol::Binary) => spawn(listener(
            processor,
            TBufferedReadTransportFactory::new(),
            NullableArgsFactory(TBinaryInputProtocolFactory::new()),
            TBufferedWriteTransportFactory::new(),
            TBinaryOutputProtocolFactory::new(),
            workers,
            local_addr,
        ))?,
        (ThriftTransport::Buffered, ThriftProtocol::Compact) => spawn(listener(
            processor,
            TBufferedReadTransportFactory::new(),
            NullableArgsFactory(TCompactInputProtocolFactory::new()),
            TBufferedWriteTransportFactory::new(),
            TCompactOutputProtocolFactory::new(),
            workers,
            local_addr,
        ))?,
        (ThriftTransport::Framed, ThriftProtocol::Binary) => spawn(listener(
            processor,
            TFramedReadTransportFactory::new(),
            NullableArgsFactory(TBinaryInputProtocolFactory::new()),
            TFramedWriteTransportFactory::new(),
            TBinaryOutputProtocolFactory::new(),
            workers,
            local_addr,
        ))?,
        (ThriftTransport::Framed, ThriftProtocol::Compact) => spawn(listener(
            processor,
            TFramedReadTransportFactory::new(),
            NullableArgsFactory(TCompactInputProtocolFactory::new()),
            TFramedWriteTransportFactory::new(),
            TCompactOutputProtocolFactory::new(),
            workers,
            local_addr,
        ))?,
    };

    // The probe connection is served like any other: its worker sees end-of-file and returns.
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(reason) = failed_rx.try_recv() {
            return Err(bind_error(std::io::Error::other(reason)));
        }
        if TcpStream::connect_timeout(&local_addr, Duration::from_millis(200)).is_ok() {
            break;
        }
        if Instant::now() > deadline {
            return Err(bind_error(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the thrift server did not start accepting connections",
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    tracing::info!(addr = %local_addr, transport = ?options.transport, protocol = ?options.protocol, workers, "thrift gateway listening");
    Ok(GatewayServer { local_addr })
}

/// The body of the server thread for one transport/protocol combination.
fn listener<RTF, IPF, WTF, OPF>(
    processor: HbaseSyncProcessor<Gateway>,
    read_transport: RTF,
    input_protocol: IPF,
    write_transport: WTF,
    output_protocol: OPF,
    workers: usize,
    addr: SocketAddr,
) -> Box<dyn FnOnce() -> thrift::Result<()> + Send>
where
    RTF: TReadTransportFactory + Send + 'static,
    IPF: TInputProtocolFactory + Send + 'static,
    WTF: TWriteTransportFactory + Send + 'static,
    OPF: TOutputProtocolFactory + Send + 'static,
{
    Box::new(move || {
        let mut server = TServer::new(
            read_transport,
            input_protocol,
            write_transport,
            output_protocol,
            processor,
            workers,
        );
        server.listen(addr)
    })
}

/// A failed call, as the Thrift exception the client gets.
#[derive(Debug)]
enum Failure {
    Io(String),
    IllegalArgument(String),
    AlreadyExists(String),
}

type Answer<T> = std::result::Result<T, Failure>;

impl Failure {
    /// The error for methods whose IDL declares only `IOError`.
    fn io_only(self) -> thrift::Error {
        match self {
            Failure::Io(message)
            | Failure::IllegalArgument(message)
            | Failure::AlreadyExists(message) => io_error(message),
        }
    }

    /// The error for methods that declare `IllegalArgument` too (mutations, scanner calls).
    fn with_illegal_argument(self) -> thrift::Error {
        match self {
            Failure::IllegalArgument(message) => {
                thrift::Error::User(Box::new(IllegalArgument::new(message)))
            }
            other => other.io_only(),
        }
    }

    /// The error for `createTable`, which declares all three.
    fn with_already_exists(self) -> thrift::Error {
        match self {
            Failure::AlreadyExists(message) => {
                thrift::Error::User(Box::new(AlreadyExists::new(message)))
            }
            other => other.with_illegal_argument(),
        }
    }
}

fn io_error(message: String) -> thrift::Error {
    thrift::Error::User(Box::new(IOError::new(message, false)))
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::UnknownTable(table) => Failure::Io(format!(
                "TableNotFoundException: table `{table}` does not exist"
            )),
            StoreError::TableExists(table) => Failure::AlreadyExists(format!(
                "TableExistsException: table `{table}` already exists"
            )),
            error @ (StoreError::InvalidMutation { .. } | StoreError::InvalidRequest { .. }) => {
                Failure::IllegalArgument(error.to_string())
            }
            error @ StoreError::ConfiguredTable(_) => Failure::Io(error.to_string()),
            error => {
                // Storage trouble: the client gets the message (no row data in it: corrupt keys
                // are hashed), the log gets it too.
                tracing::warn!(%error, "thrift gateway: store error");
                Failure::Io(error.to_string())
            }
        }
    }
}

/// What HBase 1.x's Java server (`TBaseProcessor`) answers for a method it doesn't have.
fn invalid_method(method: &str) -> thrift::Error {
    thrift::Error::Application(thrift::ApplicationError::new(
        thrift::ApplicationErrorKind::UnknownMethod,
        format!("Invalid method name: '{method}'"),
    ))
}

fn unsupported(method: &str) -> thrift::Error {
    io_error(format!(
        "{method} is not supported by the hbidx Thrift gateway (embedded store)"
    ))
}

/// The server's clock, as HBase stamps writes that come without a timestamp.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

/// A column of a request: a whole family or one column.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ColumnSpec {
    Family(String),
    Column(String),
}

impl ColumnSpec {
    /// `family`, `family:` (the whole family, as happybase documents) or `family:qualifier`.
    fn parse(column: &[u8]) -> Answer<ColumnSpec> {
        let text = std::str::from_utf8(column).map_err(|_| {
            Failure::IllegalArgument(format!(
                "column `{}` is not UTF-8; the embedded store keeps qualifiers as text",
                column.escape_ascii()
            ))
        })?;
        match text.split_once(':') {
            None => Self::family(text),
            Some((family, "")) => Self::family(family),
            Some(("", _)) => Err(Failure::IllegalArgument(format!(
                "column `{text}` has an empty family"
            ))),
            Some(_) => Ok(ColumnSpec::Column(text.to_owned())),
        }
    }

    fn family(family: &str) -> Answer<ColumnSpec> {
        if family.is_empty() {
            return Err(Failure::IllegalArgument("empty column name".to_owned()));
        }
        Ok(ColumnSpec::Family(family.to_owned()))
    }

    fn family_name(&self) -> &str {
        match self {
            ColumnSpec::Family(family) => family,
            ColumnSpec::Column(column) => {
                column.split_once(':').map_or(column.as_str(), |(f, _)| f)
            }
        }
    }

    /// The store's projection entry: a bare family or `family:qualifier`.
    fn projection(&self) -> String {
        match self {
            ColumnSpec::Family(family) | ColumnSpec::Column(family) => family.clone(),
        }
    }
}

/// A table a call names, resolved.
struct Target {
    /// The name in the embedded store.
    store_name: String,
    /// The name HBase clients use.
    thrift_name: String,
    info: TableInfo,
    configured: Option<Arc<ConfiguredTable>>,
}

impl Target {
    fn check_enabled(&self) -> Answer<()> {
        if self.info.enabled {
            Ok(())
        } else {
            Err(Failure::Io(format!(
                "TableNotEnabledException: table `{}` is disabled; enable it first",
                self.thrift_name
            )))
        }
    }

    fn check_writable(&self) -> Answer<()> {
        self.check_enabled()?;
        if let Some(topic) = self
            .configured
            .as_ref()
            .and_then(|table| table.kafka_topic.as_deref())
        {
            return Err(Failure::Io(format!(
                "table `{}` is fed from Kafka topic `{topic}`: write to the topic instead (it is \
                 the table's log; a write here would reach neither the index nor the other replicas)",
                self.thrift_name
            )));
        }
        Ok(())
    }

    fn check_family(&self, family: &str) -> Answer<()> {
        match &self.info.families {
            Some(families) if !families.iter().any(|known| known == family) => {
                Err(Failure::Io(format!(
                    "NoSuchColumnFamilyException: column family `{family}` does not exist in table `{}` \
                     (families: {})",
                    self.thrift_name,
                    families.join(", ")
                )))
            }
            _ => Ok(()),
        }
    }

    /// The store projection of a read's column list (`None`: every column).
    fn projection(&self, columns: &[Vec<u8>]) -> Answer<Option<Vec<String>>> {
        if columns.is_empty() {
            return Ok(None);
        }
        let mut projection = Vec::with_capacity(columns.len());
        for column in columns {
            let spec = ColumnSpec::parse(column)?;
            self.check_family(spec.family_name())?;
            projection.push(spec.projection());
        }
        Ok(Some(projection))
    }

    /// Turns Thrift mutations of one row into cell operations at `ts`: deletes first, then puts,
    /// as HBase's Thrift server applies them.
    fn ops(&self, mutations: Vec<TMutation>, ts: i64) -> Answer<Vec<CellOp>> {
        let mut deletes = Vec::new();
        let mut puts = Vec::new();
        for mutation in mutations {
            let column = mutation
                .column
                .ok_or_else(|| Failure::IllegalArgument("a mutation has no column".to_owned()))?;
            let spec = ColumnSpec::parse(&column)?;
            self.check_family(spec.family_name())?;
            if mutation.is_delete.unwrap_or(false) {
                deletes.push(match spec {
                    ColumnSpec::Family(family) => CellOp::DeleteFamily { family, ts },
                    ColumnSpec::Column(column) => CellOp::DeleteCell { column, ts },
                });
                continue;
            }
            let ColumnSpec::Column(column) = spec else {
                return Err(Failure::IllegalArgument(format!(
                    "put to `{}` has no qualifier: write to `family:qualifier`",
                    column.escape_ascii()
                )));
            };
            let value = mutation.value.ok_or_else(|| {
                Failure::IllegalArgument(format!("put to `{column}` has no value"))
            })?;
            puts.push(CellOp::Put { column, ts, value });
        }
        deletes.append(&mut puts);
        Ok(deletes)
    }
}

/// One open scanner.
struct Scanner {
    table: String,
    /// The next store read; `start` moves on after each.
    request: ScanRequest,
    exhausted: bool,
    filter: ResultShape,
    /// Rows read from the store and not yet handed out.
    buffered: VecDeque<TRowResult>,
    last_used: Instant,
}

/// How rows are turned into `TRowResult`s.
#[derive(Debug, Clone, Copy, Default)]
struct ResultShape {
    /// Only cells with a timestamp below this (HBase's time range `[0, ts)`).
    before_ts: Option<i64>,
    /// Fill `sortedColumns` instead of `columns` (`TScan.sortColumns`).
    sorted: bool,
    /// Cut rows into partial rows of this many cells (`TScan.batchSize`).
    cells_per_result: Option<usize>,
}

impl ResultShape {
    fn with_ts(before_ts: Option<i64>) -> Self {
        Self {
            before_ts,
            ..Self::default()
        }
    }

    fn cells<'a>(&self, row: &'a Row) -> impl Iterator<Item = (&'a String, &'a Cell)> {
        let before_ts = self.before_ts;
        row.cells
            .iter()
            .filter(move |(_, cell)| before_ts.is_none_or(|ts| cell.ts < ts))
    }

    /// The results of one row: none when no cell is left, several with `cells_per_result`.
    fn results(&self, row: Row, out: &mut impl Extend<TRowResult>) {
        let cells: Vec<(&String, &Cell)> = self.cells(&row).collect();
        if cells.is_empty() {
            return;
        }
        let chunk = self.cells_per_result.unwrap_or(cells.len()).max(1);
        out.extend(cells.chunks(chunk).map(|cells| {
            let tcell = |cell: &Cell| TCell::new(cell.value.clone(), cell.ts);
            if self.sorted {
                let sorted = cells
                    .iter()
                    .map(|(name, cell)| TColumn::new(name.as_bytes().to_vec(), tcell(cell)))
                    .collect::<Vec<_>>();
                TRowResult::new(row.rowkey.clone(), None, sorted)
            } else {
                let columns = cells
                    .iter()
                    .map(|(name, cell)| (name.as_bytes().to_vec(), tcell(cell)))
                    .collect::<BTreeMap<_, _>>();
                TRowResult::new(row.rowkey.clone(), columns, None)
            }
        }));
    }
}

struct ScannerMap {
    open: HashMap<ScannerID, Arc<Mutex<Scanner>>>,
    /// The next id to hand out; ids are positive, as HBase's.
    next_id: ScannerID,
}

/// Whether a scanner's lease ran out. A scanner that is locked is in a call right now, so alive.
fn expired(scanner: &Mutex<Scanner>, lease: Duration) -> bool {
    match scanner.try_lock() {
        Ok(scanner) => scanner.last_used.elapsed() > lease,
        Err(std::sync::TryLockError::Poisoned(poisoned)) => {
            poisoned.into_inner().last_used.elapsed() > lease
        }
        Err(std::sync::TryLockError::WouldBlock) => false,
    }
}

/// Locks a mutex, ignoring poisoning: a scanner whose call panicked is still consistent enough
/// to be closed.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The `HbaseSyncHandler` over the embedded store. See the [module docs](self).
pub struct Gateway {
    store: Arc<EmbeddedStore>,
    /// Configured tables by every name a client may use for them (`ns:name` and bare `name`).
    by_thrift_name: HashMap<String, Arc<ConfiguredTable>>,
    /// Configured tables by store name.
    by_store_name: HashMap<String, Arc<ConfiguredTable>>,
    scanners: Mutex<ScannerMap>,
    scanner_lease: Duration,
    max_scanners: usize,
    /// Where clients reach this server, for `getTableRegions`.
    address: SocketAddr,
    api: HbaseApi,
}

impl Gateway {
    /// A handler for `HbaseSyncProcessor`; [`serve`] builds and runs one.
    pub fn new(
        store: Arc<EmbeddedStore>,
        configured: Vec<ConfiguredTable>,
        options: &GatewayOptions,
        address: SocketAddr,
    ) -> Self {
        let mut by_thrift_name = HashMap::new();
        let mut by_store_name = HashMap::new();
        for table in configured {
            let table = Arc::new(table);
            by_thrift_name.insert(table.config.full_name(), table.clone());
            by_thrift_name.insert(table.config.name.clone(), table.clone());
            by_store_name.insert(table.config.name.clone(), table);
        }
        Self {
            store,
            by_thrift_name,
            by_store_name,
            scanners: Mutex::new(ScannerMap {
                open: HashMap::new(),
                next_id: 1,
            }),
            scanner_lease: options.scanner_lease,
            max_scanners: options.max_scanners,
            address,
            api: options.api,
        }
    }

    /// Refuses a method HBase 2.0 added when answering like 1.x.
    fn since_hbase_2(&self, method: &str) -> thrift::Result<()> {
        match self.api {
            HbaseApi::V1 => Err(invalid_method(method)),
            HbaseApi::V2 => Ok(()),
        }
    }

    /// The name clients see for a table of the store.
    fn thrift_name(&self, info: &TableInfo) -> String {
        match (info.origin, self.by_store_name.get(&info.name)) {
            (TableOrigin::Configured, Some(table)) => table.config.full_name(),
            _ => info.name.clone(),
        }
    }

    fn target(&self, name: &[u8]) -> Answer<Target> {
        let name = std::str::from_utf8(name).map_err(|_| {
            Failure::Io(format!("table name `{}` is not UTF-8", name.escape_ascii()))
        })?;
        // HBase prints tables of the default namespace without it.
        let name = name.strip_prefix("default:").unwrap_or(name);
        let configured = self.by_thrift_name.get(name).cloned();
        let store_name = configured
            .as_ref()
            .map_or_else(|| name.to_owned(), |table| table.config.name.clone());
        let info = self
            .store
            .table_info(&store_name)
            .map_err(|error| match error {
                StoreError::UnknownTable(_) => Failure::Io(format!(
                    "TableNotFoundException: table `{name}` does not exist"
                )),
                other => Failure::from(other),
            })?;
        let thrift_name = self.thrift_name(&info);
        Ok(Target {
            store_name,
            thrift_name,
            info,
            configured,
        })
    }

    fn readable(&self, name: &[u8]) -> Answer<Target> {
        let target = self.target(name)?;
        target.check_enabled()?;
        Ok(target)
    }

    fn read_rows(
        &self,
        table: &[u8],
        rows: Vec<Vec<u8>>,
        columns: &[Vec<u8>],
        before_ts: Option<i64>,
    ) -> Answer<Vec<TRowResult>> {
        let target = self.readable(table)?;
        let projection = target.projection(columns)?;
        let found = self
            .store
            .get_rows_sync(&target.store_name, &rows, projection.as_deref())?;
        let shape = ResultShape::with_ts(before_ts);
        let mut results = Vec::with_capacity(found.len());
        // Missing rows are left out, as HBase's Thrift server does.
        for row in found.into_iter().flatten() {
            shape.results(row, &mut results);
        }
        Ok(results)
    }

    fn read_cells(
        &self,
        table: &[u8],
        row: Vec<u8>,
        column: &[u8],
        before_ts: Option<i64>,
        versions: Option<i32>,
    ) -> Answer<Vec<TCell>> {
        if versions.is_some_and(|versions| versions < 1) {
            return Err(Failure::IllegalArgument(
                "numVersions must be at least 1".to_owned(),
            ));
        }
        let results = self.read_rows(table, vec![row], &[column.to_vec()], before_ts)?;
        Ok(results
            .into_iter()
            .flat_map(|result| result.columns.unwrap_or_default().into_values())
            .collect())
    }

    fn write(
        &self,
        table: &[u8],
        rows: Vec<(Vec<u8>, Vec<TMutation>)>,
        ts: Option<i64>,
    ) -> Answer<()> {
        let ts = match ts {
            Some(ts) if ts < 0 => {
                return Err(Failure::IllegalArgument(format!(
                    "timestamp {ts} is negative"
                )));
            }
            Some(ts) => ts,
            None => now_ms(),
        };
        let target = self.target(table)?;
        target.check_writable()?;
        let mut mutations = Vec::with_capacity(rows.len());
        for (rowkey, row_mutations) in rows {
            let ops = target.ops(row_mutations, ts)?;
            // HBase skips empty puts and deletes.
            if ops.is_empty() {
                continue;
            }
            mutations.push(Mutation {
                table: target.store_name.clone(),
                rowkey,
                ops,
            });
        }
        self.store.mutate_sync(mutations)?;
        Ok(())
    }

    fn delete_all(&self, table: &[u8], row: Vec<u8>, column: &[u8], ts: Option<i64>) -> Answer<()> {
        let mutation = TMutation::new(true, column.to_vec(), None, true);
        self.write(table, vec![(row, vec![mutation])], ts)
    }

    fn delete_row(&self, table: &[u8], row: Vec<u8>, ts: Option<i64>) -> Answer<()> {
        let ts = ts.unwrap_or_else(now_ms);
        if ts < 0 {
            return Err(Failure::IllegalArgument(format!(
                "timestamp {ts} is negative"
            )));
        }
        let target = self.target(table)?;
        target.check_writable()?;
        self.store.mutate_sync(vec![Mutation {
            table: target.store_name,
            rowkey: row,
            ops: vec![CellOp::DeleteRow { ts }],
        }])?;
        Ok(())
    }

    fn table_names(&self) -> Vec<(String, bool)> {
        let mut names: Vec<(String, bool)> = self
            .store
            .table_infos()
            .iter()
            .map(|info| (self.thrift_name(info), info.enabled))
            .collect();
        names.sort();
        names
    }

    fn create_table(&self, name: &[u8], families: Vec<ColumnDescriptor>) -> Answer<()> {
        let name = std::str::from_utf8(name)
            .map_err(|_| Failure::IllegalArgument("table name is not UTF-8".to_owned()))?;
        let name = name.strip_prefix("default:").unwrap_or(name);
        validate_hbase_table_name(name)?;
        if self.by_thrift_name.contains_key(name) {
            return Err(Failure::AlreadyExists(format!(
                "TableExistsException: table `{name}` already exists (it comes from the hbidx config)"
            )));
        }
        let mut names = Vec::with_capacity(families.len());
        for descriptor in families {
            let family = descriptor.name.ok_or_else(|| {
                Failure::IllegalArgument("a column descriptor has no name".to_owned())
            })?;
            match ColumnSpec::parse(&family)? {
                ColumnSpec::Family(family) => names.push(family),
                ColumnSpec::Column(column) => {
                    return Err(Failure::IllegalArgument(format!(
                        "column family name `{column}` must end with `:` and have no qualifier"
                    )));
                }
            }
        }
        self.store.create_table(name, &names)?;
        Ok(())
    }

    fn column_descriptors(&self, table: &[u8]) -> Answer<BTreeMap<Vec<u8>, ColumnDescriptor>> {
        let target = self.target(table)?;
        let families = target.info.families.clone().unwrap_or_default();
        let configured = target.configured.as_ref();
        Ok(families
            .into_iter()
            .map(|family| {
                let config = configured.and_then(|table| table.config.family(&family));
                let descriptor = column_descriptor(&family, config);
                (format!("{family}:").into_bytes(), descriptor)
            })
            .collect())
    }

    fn regions(&self, table: &[u8]) -> Answer<Vec<TRegionInfo>> {
        let target = self.target(table)?;
        let splits: &[Vec<u8>] = target
            .configured
            .as_ref()
            .map_or(&[], |table| &table.split_keys);
        let mut bounds: Vec<&[u8]> = Vec::with_capacity(splits.len() + 2);
        bounds.push(b"");
        bounds.extend(splits.iter().map(Vec::as_slice));
        bounds.push(b"");
        let host = self.address.ip().to_string().into_bytes();
        let port = i32::from(self.address.port());
        Ok(bounds
            .windows(2)
            .enumerate()
            .map(|(index, bounds)| {
                let id = i64::try_from(index).unwrap_or(i64::MAX);
                // HBase's region name: `table,startKey,regionId.encodedName.`, the encoded name
                // being a hash of the rest.
                let mut name = format!("{},", target.thrift_name).into_bytes();
                name.extend_from_slice(bounds[0]);
                name.extend_from_slice(format!(",{id}").as_bytes());
                let encoded = format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&name));
                name.extend_from_slice(format!(".{encoded}.").as_bytes());
                TRegionInfo::new(
                    bounds[0].to_vec(),
                    bounds[1].to_vec(),
                    id,
                    name,
                    1i8,
                    host.clone(),
                    port,
                )
            })
            .collect())
    }

    fn set_enabled(&self, table: &[u8], enabled: bool) -> Answer<()> {
        let target = self.target(table)?;
        if target.info.enabled == enabled {
            return Ok(());
        }
        self.store.set_table_enabled(&target.store_name, enabled)?;
        Ok(())
    }

    fn delete_table(&self, table: &[u8]) -> Answer<()> {
        let target = self.target(table)?;
        if target.info.origin == TableOrigin::Configured {
            return Err(StoreError::ConfiguredTable(target.thrift_name).into());
        }
        if target.info.enabled {
            return Err(Failure::Io(format!(
                "TableNotDisabledException: table `{}` is enabled; disable it first (HBase deletes \
                 only disabled tables)",
                target.thrift_name
            )));
        }
        self.store.delete_table(&target.store_name)?;
        Ok(())
    }

    fn open_scanner(
        &self,
        table: &[u8],
        mut request: ScanRequest,
        columns: &[Vec<u8>],
        shape: ResultShape,
        caching: usize,
    ) -> Answer<ScannerID> {
        let target = self.readable(table)?;
        request.columns = target.projection(columns)?;
        request.batch = caching.clamp(1, MAX_ROWS_PER_CALL);
        let scanner = Scanner {
            table: target.store_name,
            request,
            exhausted: false,
            filter: shape,
            buffered: VecDeque::new(),
            last_used: Instant::now(),
        };
        let mut scanners = lock(&self.scanners);
        let lease = self.scanner_lease;
        scanners.open.retain(|_, scanner| !expired(scanner, lease));
        if scanners.open.len() >= self.max_scanners {
            return Err(Failure::Io(format!(
                "too many open scanners ({}); close scanners when done (scannerClose)",
                scanners.open.len()
            )));
        }
        // Terminates: fewer than `max_scanners` (< 2^31) ids are taken.
        let id = loop {
            let id = scanners.next_id;
            scanners.next_id = id.checked_add(1).unwrap_or(1);
            if !scanners.open.contains_key(&id) {
                break id;
            }
        };
        scanners.open.insert(id, Arc::new(Mutex::new(scanner)));
        Ok(id)
    }

    fn scanner(&self, id: ScannerID) -> Answer<Arc<Mutex<Scanner>>> {
        let missing = || {
            Failure::IllegalArgument(format!(
                "scanner {id} does not exist: never opened, closed, or idle for more than {} s",
                self.scanner_lease.as_secs()
            ))
        };
        let mut scanners = lock(&self.scanners);
        let scanner = scanners.open.get(&id).cloned().ok_or_else(missing)?;
        if expired(&scanner, self.scanner_lease) {
            scanners.open.remove(&id);
            return Err(missing());
        }
        Ok(scanner)
    }

    fn scanner_next(&self, id: ScannerID, rows: i32) -> Answer<Vec<TRowResult>> {
        let wanted = usize::try_from(rows)
            .map_err(|_| Failure::IllegalArgument(format!("nbRows {rows} is negative")))?
            .min(MAX_ROWS_PER_CALL);
        let scanner = self.scanner(id)?;
        let mut scanner = lock(&scanner);
        scanner.last_used = Instant::now();
        let mut out = Vec::with_capacity(wanted.min(scanner.request.batch));
        while out.len() < wanted {
            if let Some(result) = scanner.buffered.pop_front() {
                out.push(result);
                continue;
            }
            if scanner.exhausted {
                break;
            }
            let batch = self.store.scan_sync(&scanner.table, &scanner.request)?;
            let shape = scanner.filter;
            for row in batch.rows {
                shape.results(row, &mut scanner.buffered);
            }
            match batch.next_start {
                Some(next) => scanner.request.start = next,
                None => scanner.exhausted = true,
            }
        }
        Ok(out)
    }

    fn close_scanner(&self, id: ScannerID) -> Answer<()> {
        match lock(&self.scanners).open.remove(&id) {
            Some(_) => Ok(()),
            None => Err(Failure::IllegalArgument(format!(
                "scanner {id} does not exist: never opened, closed, or idle for more than {} s",
                self.scanner_lease.as_secs()
            ))),
        }
    }

    /// The number of open scanners (expired ones included until the next scanner call).
    pub fn open_scanners(&self) -> usize {
        lock(&self.scanners).open.len()
    }
}

/// HBase's table name rules (`TableName.isLegalFullyQualifiedTableName`): an optional
/// `namespace:` of letters, digits and `_`, then a qualifier of letters, digits, `_`, `-` and
/// `.` that doesn't start with `.` or `-`.
fn validate_hbase_table_name(name: &str) -> Answer<()> {
    let invalid = |reason: &str| {
        Err(Failure::IllegalArgument(format!(
            "table name `{}` is not a valid HBase table name: {reason}",
            name.escape_debug()
        )))
    };
    let (namespace, qualifier) = match name.split_once(':') {
        Some((namespace, qualifier)) => (Some(namespace), qualifier),
        None => (None, name),
    };
    if let Some(namespace) = namespace {
        if namespace.is_empty()
            || !namespace
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
        {
            return invalid("the namespace may hold only letters, digits and `_`");
        }
        if namespace == "hbase" {
            return invalid("the `hbase` namespace is reserved");
        }
    }
    if qualifier.is_empty() {
        return invalid("it is empty");
    }
    if qualifier.starts_with(['.', '-']) {
        return invalid("it must not start with `.` or `-`");
    }
    if !qualifier
        .bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-' | b'.'))
    {
        return invalid("it may hold only letters, digits, `_`, `-` and `.`");
    }
    Ok(())
}

/// A family as `getColumnDescriptors` reports it: the configured HBase options where the config
/// has them, HBase's defaults otherwise; `maxVersions` is what the store keeps (1).
fn column_descriptor(family: &str, config: Option<&FamilyConfig>) -> ColumnDescriptor {
    let compression = config
        .and_then(|family| family.compression)
        .map_or("NONE", |compression| compression.as_str());
    let bloom_filter = config
        .and_then(|family| family.bloomfilter)
        .map_or("NONE", |bloom| bloom.as_str());
    let ttl = match config.and_then(|family| family.ttl) {
        Some(Ttl::Seconds(seconds)) => i32::try_from(seconds).unwrap_or(i32::MAX),
        Some(Ttl::Forever) | None => i32::MAX,
    };
    ColumnDescriptor::new(
        format!("{family}:").into_bytes(),
        1i32,
        compression.to_owned(),
        false,
        bloom_filter.to_owned(),
        0i32,
        0i32,
        true,
        ttl,
    )
}

fn scan_request(start: Vec<u8>, stop: Option<Vec<u8>>, prefix: Option<Vec<u8>>) -> ScanRequest {
    ScanRequest {
        start,
        // An empty stop row means "to the end" in HBase.
        stop: stop.filter(|stop| !stop.is_empty()),
        prefix,
        columns: None,
        batch: DEFAULT_CACHING,
    }
}

type Attributes = BTreeMap<Vec<u8>, Vec<u8>>;

impl HbaseSyncHandler for Gateway {
    fn handle_enable_table(&self, table_name: Vec<u8>) -> thrift::Result<()> {
        self.set_enabled(&table_name, true)
            .map_err(Failure::io_only)
    }

    fn handle_disable_table(&self, table_name: Vec<u8>) -> thrift::Result<()> {
        self.set_enabled(&table_name, false)
            .map_err(Failure::io_only)
    }

    fn handle_is_table_enabled(&self, table_name: Vec<u8>) -> thrift::Result<bool> {
        self.target(&table_name)
            .map(|target| target.info.enabled)
            .map_err(Failure::io_only)
    }

    fn handle_compact(&self, table_name_or_region_name: Vec<u8>) -> thrift::Result<()> {
        compact(self, &table_name_or_region_name)
    }

    fn handle_major_compact(&self, table_name_or_region_name: Vec<u8>) -> thrift::Result<()> {
        compact(self, &table_name_or_region_name)
    }

    fn handle_get_table_names(&self) -> thrift::Result<Vec<Vec<u8>>> {
        Ok(self
            .table_names()
            .into_iter()
            .map(|(name, _)| name.into_bytes())
            .collect())
    }

    fn handle_get_table_names_with_is_table_enabled(
        &self,
    ) -> thrift::Result<BTreeMap<Vec<u8>, bool>> {
        self.since_hbase_2("getTableNamesWithIsTableEnabled")?;
        Ok(self
            .table_names()
            .into_iter()
            .map(|(name, enabled)| (name.into_bytes(), enabled))
            .collect())
    }

    fn handle_get_column_descriptors(
        &self,
        table_name: Vec<u8>,
    ) -> thrift::Result<BTreeMap<Vec<u8>, ColumnDescriptor>> {
        self.column_descriptors(&table_name)
            .map_err(Failure::io_only)
    }

    fn handle_get_table_regions(&self, table_name: Vec<u8>) -> thrift::Result<Vec<TRegionInfo>> {
        self.regions(&table_name).map_err(Failure::io_only)
    }

    fn handle_create_table(
        &self,
        table_name: Vec<u8>,
        column_families: Vec<ColumnDescriptor>,
    ) -> thrift::Result<()> {
        self.create_table(&table_name, column_families)
            .map_err(Failure::with_already_exists)
    }

    fn handle_delete_table(&self, table_name: Vec<u8>) -> thrift::Result<()> {
        self.delete_table(&table_name).map_err(Failure::io_only)
    }

    fn handle_get(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        column: Vec<u8>,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TCell>> {
        self.read_cells(&table_name, row, &column, None, None)
            .map_err(Failure::io_only)
    }

    fn handle_get_ver(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        column: Vec<u8>,
        num_versions: i32,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TCell>> {
        self.read_cells(&table_name, row, &column, None, Some(num_versions))
            .map_err(Failure::io_only)
    }

    fn handle_get_ver_ts(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        column: Vec<u8>,
        timestamp: i64,
        num_versions: i32,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TCell>> {
        self.read_cells(
            &table_name,
            row,
            &column,
            Some(timestamp),
            Some(num_versions),
        )
        .map_err(Failure::io_only)
    }

    fn handle_get_row(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, vec![row], &[], None)
            .map_err(Failure::io_only)
    }

    fn handle_get_row_with_columns(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        columns: Vec<Vec<u8>>,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, vec![row], &columns, None)
            .map_err(Failure::io_only)
    }

    fn handle_get_row_ts(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, vec![row], &[], Some(timestamp))
            .map_err(Failure::io_only)
    }

    fn handle_get_row_with_columns_ts(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        columns: Vec<Vec<u8>>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, vec![row], &columns, Some(timestamp))
            .map_err(Failure::io_only)
    }

    fn handle_get_rows(
        &self,
        table_name: Vec<u8>,
        rows: Vec<Vec<u8>>,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, rows, &[], None)
            .map_err(Failure::io_only)
    }

    fn handle_get_rows_with_columns(
        &self,
        table_name: Vec<u8>,
        rows: Vec<Vec<u8>>,
        columns: Vec<Vec<u8>>,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, rows, &columns, None)
            .map_err(Failure::io_only)
    }

    fn handle_get_rows_ts(
        &self,
        table_name: Vec<u8>,
        rows: Vec<Vec<u8>>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, rows, &[], Some(timestamp))
            .map_err(Failure::io_only)
    }

    fn handle_get_rows_with_columns_ts(
        &self,
        table_name: Vec<u8>,
        rows: Vec<Vec<u8>>,
        columns: Vec<Vec<u8>>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.read_rows(&table_name, rows, &columns, Some(timestamp))
            .map_err(Failure::io_only)
    }

    fn handle_mutate_row(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        mutations: Vec<TMutation>,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        self.write(&table_name, vec![(row, mutations)], None)
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_mutate_row_ts(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        mutations: Vec<TMutation>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        self.write(&table_name, vec![(row, mutations)], Some(timestamp))
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_mutate_rows(
        &self,
        table_name: Vec<u8>,
        row_batches: Vec<BatchMutation>,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        batches(row_batches)
            .and_then(|rows| self.write(&table_name, rows, None))
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_mutate_rows_ts(
        &self,
        table_name: Vec<u8>,
        row_batches: Vec<BatchMutation>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        batches(row_batches)
            .and_then(|rows| self.write(&table_name, rows, Some(timestamp)))
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_atomic_increment(
        &self,
        _table_name: Vec<u8>,
        _row: Vec<u8>,
        _column: Vec<u8>,
        _value: i64,
    ) -> thrift::Result<i64> {
        Err(unsupported("atomicIncrement"))
    }

    fn handle_delete_all(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        column: Vec<u8>,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        self.delete_all(&table_name, row, &column, None)
            .map_err(Failure::io_only)
    }

    fn handle_delete_all_ts(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        column: Vec<u8>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        self.delete_all(&table_name, row, &column, Some(timestamp))
            .map_err(Failure::io_only)
    }

    fn handle_delete_all_row(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        self.delete_row(&table_name, row, None)
            .map_err(Failure::io_only)
    }

    fn handle_increment(&self, _increment: TIncrement) -> thrift::Result<()> {
        Err(unsupported("increment"))
    }

    fn handle_increment_rows(&self, _increments: Vec<TIncrement>) -> thrift::Result<()> {
        Err(unsupported("incrementRows"))
    }

    fn handle_delete_all_row_ts(
        &self,
        table_name: Vec<u8>,
        row: Vec<u8>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<()> {
        self.delete_row(&table_name, row, Some(timestamp))
            .map_err(Failure::io_only)
    }

    fn handle_scanner_open_with_scan(
        &self,
        table_name: Vec<u8>,
        scan: TScan,
        _attributes: Attributes,
    ) -> thrift::Result<ScannerID> {
        open_with_scan(self, &table_name, scan).map_err(Failure::io_only)
    }

    fn handle_scanner_open(
        &self,
        table_name: Vec<u8>,
        start_row: Vec<u8>,
        columns: Vec<Vec<u8>>,
        _attributes: Attributes,
    ) -> thrift::Result<ScannerID> {
        let request = scan_request(start_row, None, None);
        self.open_scanner(
            &table_name,
            request,
            &columns,
            ResultShape::default(),
            DEFAULT_CACHING,
        )
        .map_err(Failure::io_only)
    }

    fn handle_scanner_open_with_stop(
        &self,
        table_name: Vec<u8>,
        start_row: Vec<u8>,
        stop_row: Vec<u8>,
        columns: Vec<Vec<u8>>,
        _attributes: Attributes,
    ) -> thrift::Result<ScannerID> {
        let request = scan_request(start_row, Some(stop_row), None);
        self.open_scanner(
            &table_name,
            request,
            &columns,
            ResultShape::default(),
            DEFAULT_CACHING,
        )
        .map_err(Failure::io_only)
    }

    fn handle_scanner_open_with_prefix(
        &self,
        table_name: Vec<u8>,
        start_and_prefix: Vec<u8>,
        columns: Vec<Vec<u8>>,
        _attributes: Attributes,
    ) -> thrift::Result<ScannerID> {
        let request = scan_request(start_and_prefix.clone(), None, Some(start_and_prefix));
        self.open_scanner(
            &table_name,
            request,
            &columns,
            ResultShape::default(),
            DEFAULT_CACHING,
        )
        .map_err(Failure::io_only)
    }

    fn handle_scanner_open_ts(
        &self,
        table_name: Vec<u8>,
        start_row: Vec<u8>,
        columns: Vec<Vec<u8>>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<ScannerID> {
        let request = scan_request(start_row, None, None);
        let shape = ResultShape::with_ts(Some(timestamp));
        self.open_scanner(&table_name, request, &columns, shape, DEFAULT_CACHING)
            .map_err(Failure::io_only)
    }

    fn handle_scanner_open_with_stop_ts(
        &self,
        table_name: Vec<u8>,
        start_row: Vec<u8>,
        stop_row: Vec<u8>,
        columns: Vec<Vec<u8>>,
        timestamp: i64,
        _attributes: Attributes,
    ) -> thrift::Result<ScannerID> {
        let request = scan_request(start_row, Some(stop_row), None);
        let shape = ResultShape::with_ts(Some(timestamp));
        self.open_scanner(&table_name, request, &columns, shape, DEFAULT_CACHING)
            .map_err(Failure::io_only)
    }

    fn handle_scanner_get(&self, id: ScannerID) -> thrift::Result<Vec<TRowResult>> {
        self.scanner_next(id, 1)
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_scanner_get_list(
        &self,
        id: ScannerID,
        nb_rows: i32,
    ) -> thrift::Result<Vec<TRowResult>> {
        self.scanner_next(id, nb_rows)
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_scanner_close(&self, id: ScannerID) -> thrift::Result<()> {
        self.close_scanner(id)
            .map_err(Failure::with_illegal_argument)
    }

    fn handle_get_region_info(&self, _row: Vec<u8>) -> thrift::Result<TRegionInfo> {
        Err(unsupported("getRegionInfo"))
    }

    fn handle_append(&self, _append: TAppend) -> thrift::Result<Vec<TCell>> {
        Err(unsupported("append"))
    }

    fn handle_check_and_put(
        &self,
        _table_name: Vec<u8>,
        _row: Vec<u8>,
        _column: Vec<u8>,
        _value: Vec<u8>,
        _mput: TMutation,
        _attributes: Attributes,
    ) -> thrift::Result<bool> {
        Err(unsupported("checkAndPut"))
    }

    fn handle_get_thrift_server_type(&self) -> thrift::Result<TThriftServerType> {
        self.since_hbase_2("getThriftServerType")?;
        Ok(TThriftServerType::ONE)
    }

    fn handle_get_cluster_id(&self) -> thrift::Result<String> {
        self.since_hbase_2("getClusterId")?;
        Ok("hbidx-embedded".to_owned())
    }

    fn handle_grant(&self, _info: TAccessControlEntity) -> thrift::Result<bool> {
        self.since_hbase_2("grant")?;
        Err(unsupported("grant"))
    }

    fn handle_revoke(&self, _info: TAccessControlEntity) -> thrift::Result<bool> {
        self.since_hbase_2("revoke")?;
        Err(unsupported("revoke"))
    }
}

/// `compact`/`majorCompact`: accepted for known tables (or their regions) as no-ops, since the
/// embedded store compacts on its own.
fn compact(gateway: &Gateway, table_or_region: &[u8]) -> thrift::Result<()> {
    // A region name is `table,startKey,id.encoded.`: the table is before the first comma.
    let table = table_or_region
        .split(|&byte| byte == b',')
        .next()
        .unwrap_or_default();
    gateway.target(table).map(|_| ()).map_err(Failure::io_only)
}

fn open_with_scan(gateway: &Gateway, table: &[u8], scan: TScan) -> Answer<ScannerID> {
    if scan
        .filter_string
        .as_ref()
        .is_some_and(|filter| !filter.is_empty())
    {
        return Err(Failure::Io(
            "TScan.filterString is not supported by the hbidx Thrift gateway; filter on the client"
                .to_owned(),
        ));
    }
    if scan.reversed.unwrap_or(false) {
        return Err(Failure::Io(
            "reversed scans are not supported by the hbidx Thrift gateway".to_owned(),
        ));
    }
    let caching = match scan.caching {
        Some(caching) if caching > 0 => usize::try_from(caching).unwrap_or(MAX_ROWS_PER_CALL),
        _ => DEFAULT_CACHING,
    };
    let cells_per_result = match scan.batch_size {
        Some(batch) if batch > 0 => usize::try_from(batch).ok(),
        _ => None,
    };
    let shape = ResultShape {
        before_ts: scan.timestamp,
        sorted: scan.sort_columns.unwrap_or(false),
        cells_per_result,
    };
    let request = scan_request(scan.start_row.unwrap_or_default(), scan.stop_row, None);
    gateway.open_scanner(
        table,
        request,
        &scan.columns.unwrap_or_default(),
        shape,
        caching,
    )
}

fn batches(row_batches: Vec<BatchMutation>) -> Answer<Vec<(Vec<u8>, Vec<TMutation>)>> {
    row_batches
        .into_iter()
        .map(|batch| {
            let row = batch
                .row
                .ok_or_else(|| Failure::IllegalArgument("a BatchMutation has no row".to_owned()))?;
            Ok((row, batch.mutations.unwrap_or_default()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hbase_thrift::hbase::{HbaseSyncClient, THbaseSyncClient};
    use hbidx_schema::config::parse_config;
    use thrift::protocol::{TCompactInputProtocol, TCompactOutputProtocol};
    use thrift::transport::{
        ReadHalf, TFramedReadTransport, TFramedWriteTransport, TIoChannel, TTcpChannel, WriteHalf,
    };

    type FramedCompactClient = HbaseSyncClient<
        TCompactInputProtocol<TFramedReadTransport<ReadHalf<TTcpChannel>>>,
        TCompactOutputProtocol<TFramedWriteTransport<WriteHalf<TTcpChannel>>>,
    >;

    const CONFIG: &str = r#"
[[tables]]
name = "people"
namespace = "app"
[[tables.families]]
name = "info"
compression = "LZ4"
[tables.rowkey]
parts = [ { kind = "key" } ]
[[tables.fields]]
name = "phone"
kind = "phone"
column = "info:phone"
[tables.splits]
algo = "explicit"
keys = ["g", "p"]
"#;

    struct Fixture {
        _dir: tempfile::TempDir,
        store: Arc<EmbeddedStore>,
        client: FramedCompactClient,
    }

    fn start(kafka_topic: Option<&str>, lease: Duration, max_scanners: usize) -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = parse_config(CONFIG).expect("config");
        let table = config.tables[0].clone();
        let spec = hbidx_store::TableSpec {
            name: table.name.clone(),
            families: Some(vec!["info".to_owned()]),
        };
        let store = Arc::new(
            EmbeddedStore::open_tables(dir.path(), &[spec], Default::default()).expect("store"),
        );
        let split_keys = table.split_keys(None, None).expect("splits");
        let configured = ConfiguredTable {
            config: Arc::new(table),
            split_keys,
            kafka_topic: kafka_topic.map(str::to_owned),
        };
        let options = GatewayOptions {
            transport: ThriftTransport::Framed,
            protocol: ThriftProtocol::Compact,
            workers: 4,
            scanner_lease: lease,
            max_scanners,
            ..GatewayOptions::new("127.0.0.1:0".parse().expect("addr"))
        };
        let server = serve(store.clone(), vec![configured], options).expect("serves");
        let mut channel = TTcpChannel::new();
        channel.open(server.local_addr()).expect("connects");
        let (read, write) = channel.split().expect("split");
        let client = HbaseSyncClient::new(
            TCompactInputProtocol::new(TFramedReadTransport::new(read)),
            TCompactOutputProtocol::new(TFramedWriteTransport::new(write)),
        );
        Fixture {
            _dir: dir,
            store,
            client,
        }
    }

    fn io_message(error: thrift::Error) -> String {
        match &error {
            thrift::Error::User(user) => match user.downcast_ref::<IOError>() {
                Some(io) => io.message.clone().unwrap_or_default(),
                None => panic!("not an IOError: {error:?}"),
            },
            _ => panic!("not an IOError: {error:?}"),
        }
    }

    fn put(column: &str, value: &str) -> TMutation {
        TMutation::new(
            false,
            column.as_bytes().to_vec(),
            value.as_bytes().to_vec(),
            true,
        )
    }

    fn no_attributes() -> Attributes {
        Attributes::new()
    }

    fn full_scan(batch_size: Option<i32>, sort_columns: bool) -> TScan {
        TScan {
            start_row: None,
            stop_row: None,
            timestamp: None,
            columns: None,
            caching: Some(2),
            filter_string: None,
            batch_size,
            sort_columns: Some(sort_columns),
            reversed: None,
            cache_blocks: None,
        }
    }

    #[test]
    fn framed_compact_serves_configured_tables_under_their_hbase_name() {
        let mut fixture = start(None, DEFAULT_SCANNER_LEASE, 10);
        let client = &mut fixture.client;
        assert_eq!(
            client.get_table_names().expect("names"),
            vec![b"app:people".to_vec()]
        );
        let regions = client
            .get_table_regions(b"app:people".to_vec())
            .expect("regions");
        let bounds: Vec<(Vec<u8>, Vec<u8>)> = regions
            .iter()
            .map(|r| (r.start_key.clone().unwrap(), r.end_key.clone().unwrap()))
            .collect();
        assert_eq!(
            bounds,
            [
                (b"".to_vec(), b"g".to_vec()),
                (b"g".to_vec(), b"p".to_vec()),
                (b"p".to_vec(), b"".to_vec())
            ]
        );
        let descriptors = client
            .get_column_descriptors(b"app:people".to_vec())
            .expect("descriptors");
        let info = &descriptors[&b"info:".to_vec()];
        assert_eq!(info.compression.as_deref(), Some("LZ4"));
        assert_eq!(info.max_versions, Some(1));

        // Writes land in the store under the store's name, with a change-feed event.
        client
            .mutate_row_ts(
                b"app:people".to_vec(),
                b"k1".to_vec(),
                vec![put("info:phone", "13800138000")],
                10,
                no_attributes(),
            )
            .expect("mutate");
        assert_eq!(fixture.store.last_offset("people"), 1);
        let row = client
            .get_row(b"people".to_vec(), b"k1".to_vec(), no_attributes())
            .expect("bare name works too");
        assert_eq!(row.len(), 1);
        let error = client.disable_table(b"app:people".to_vec()).unwrap_err();
        assert!(io_message(error).contains("hbidx config"));
    }

    #[test]
    fn kafka_fed_tables_refuse_writes_and_still_serve_reads() {
        let mut fixture = start(Some("people-events"), DEFAULT_SCANNER_LEASE, 10);
        let error = fixture
            .client
            .mutate_row(
                b"app:people".to_vec(),
                b"k".to_vec(),
                vec![put("info:phone", "1")],
                no_attributes(),
            )
            .unwrap_err();
        let message = io_message(error);
        assert!(message.contains("people-events"), "{message}");
        assert!(message.contains("write to the topic"), "{message}");
        let error = fixture
            .client
            .delete_all_row(b"app:people".to_vec(), b"k".to_vec(), no_attributes())
            .unwrap_err();
        assert!(io_message(error).contains("Kafka"));
        assert_eq!(fixture.store.last_offset("people"), 0);
        assert!(
            fixture
                .client
                .get_row(b"app:people".to_vec(), b"k".to_vec(), no_attributes())
                .expect("reads work")
                .is_empty()
        );
    }

    #[test]
    fn scanners_cut_sort_expire_and_are_capped() {
        let mut fixture = start(None, Duration::from_millis(300), 2);
        let client = &mut fixture.client;
        let batches = (0..3)
            .map(|i| {
                BatchMutation::new(
                    format!("r{i}").into_bytes(),
                    vec![put("info:a", "1"), put("info:b", "2"), put("info:c", "3")],
                )
            })
            .collect();
        client
            .mutate_rows(b"app:people".to_vec(), batches, no_attributes())
            .expect("mutate");

        // batchSize 2 cuts each 3-cell row into results of 2 and 1 cells (partial rows).
        let id = client
            .scanner_open_with_scan(
                b"app:people".to_vec(),
                full_scan(Some(2), true),
                no_attributes(),
            )
            .expect("open");
        let results = client.scanner_get_list(id, 100).expect("list");
        let shape: Vec<(Vec<u8>, usize)> = results
            .iter()
            .map(|r| {
                (
                    r.row.clone().unwrap(),
                    r.sorted_columns.as_ref().map_or(0, Vec::len),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                (b"r0".to_vec(), 2),
                (b"r0".to_vec(), 1),
                (b"r1".to_vec(), 2),
                (b"r1".to_vec(), 1),
                (b"r2".to_vec(), 2),
                (b"r2".to_vec(), 1)
            ]
        );
        assert!(results.iter().all(|r| r.columns.is_none()));

        // The cap: a second open scanner is allowed, a third is not.
        let second = client
            .scanner_open(
                b"app:people".to_vec(),
                Vec::new(),
                Vec::new(),
                no_attributes(),
            )
            .expect("second");
        let error = client
            .scanner_open(
                b"app:people".to_vec(),
                Vec::new(),
                Vec::new(),
                no_attributes(),
            )
            .unwrap_err();
        assert!(io_message(error).contains("too many open scanners"));
        // Idle past the lease: both are gone, and the slots are free again.
        std::thread::sleep(Duration::from_millis(600));
        let error = client.scanner_get(second).unwrap_err();
        assert!(format!("{error:?}").contains("does not exist"), "{error:?}");
        let third = client
            .scanner_open(
                b"app:people".to_vec(),
                Vec::new(),
                Vec::new(),
                no_attributes(),
            )
            .expect("a slot is free after the lease");
        assert_eq!(client.scanner_get(third).expect("get").len(), 1);
        client.scanner_close(third).expect("close");
        assert!(client.scanner_close(third).is_err(), "closing twice");
        assert!(client.scanner_close(id).is_err(), "expired");
    }

    #[test]
    fn a_taken_port_is_an_error_naming_the_address() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = taken.local_addr().expect("addr");
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(EmbeddedStore::open(dir.path(), &[]).expect("store"));
        let error = serve(store, Vec::new(), GatewayOptions::new(addr)).unwrap_err();
        assert!(matches!(error, StoreError::GatewayBind { .. }));
        assert!(error.to_string().contains(&addr.to_string()), "{error}");
    }

    #[test]
    fn columns_parse_like_happybase_and_hbase() {
        assert_eq!(
            ColumnSpec::parse(b"cf").unwrap(),
            ColumnSpec::Family("cf".to_owned())
        );
        assert_eq!(
            ColumnSpec::parse(b"cf:").unwrap(),
            ColumnSpec::Family("cf".to_owned())
        );
        assert_eq!(
            ColumnSpec::parse(b"cf:a:b").unwrap(),
            ColumnSpec::Column("cf:a:b".to_owned())
        );
        assert!(ColumnSpec::parse(b":q").is_err());
        assert!(ColumnSpec::parse(b"").is_err());
        assert!(ColumnSpec::parse(b"cf:\xff").is_err());
        for bad in ["", "a b", ".x", "-x", ":x", "hbase:meta", "n-s:x", "x/y"] {
            assert!(validate_hbase_table_name(bad).is_err(), "{bad}");
        }
        for good in ["t", "ns:t_1", "a.b-c", "default_ns:T9"] {
            assert!(validate_hbase_table_name(good).is_ok(), "{good}");
        }
    }
}
