//! [`HbaseStore`]: the [`RowStore`] over a real HBase cluster's Thrift1 server (`hbase thrift
//! start`), through the `hbase-thrift` crate's generated sync client.
//!
//! - **Never blocks the runtime.** Every call runs on tokio's blocking pool with a pooled
//!   connection. A semaphore with `pool_size` permits bounds the calls in flight, so a slow HBase
//!   can't pile up blocking threads; the permit is released only when the blocking work really
//!   ends. The pool itself is a stack of idle connections: a checkout with none idle connects
//!   right there, so a refused connection is an error at once. (r2d2 instead waits out its
//!   `connection_timeout` while retrying in the background, which defeats failing fast.)
//! - **Deadlines.** Sockets carry read/write timeouts, and the whole call (retries included) is
//!   bounded by `timeout`, so a lookup answers within it even when HBase hangs.
//! - **Retries** (backon, exponential with jitter) only for transport errors: refused, reset,
//!   timed out. An HBase `IOError` is an answer and is never retried here (the Thrift server's own
//!   HBase client has already retried region moves). Writes are safe to retry because every
//!   mutation carries explicit cell timestamps: applying one twice changes nothing.
//! - **Circuit breaker** ([`Breaker`]): after consecutive transport failures calls fail at once
//!   with [`StoreError::Unavailable`] (HTTP 503), and one trial call per `breaker_open` period
//!   finds out when HBase is back. Nothing needs a restart.
//! - **`getRows*` drops missing rows and is not positional**: results are matched by
//!   `TRowResult.row`.
//! - **Only calls HBase 1.x serves too**, through [`crate::thrift1`]'s narrowed client.
//! - **Health** ([`RowStore::health`]): `isTableEnabled` per configured table, with a short
//!   deadline and no retries: up, present and enabled in one call.
//! - Mutations with several cell timestamps become one `mutateRowsTs` per timestamp (Thrift1 has
//!   one timestamp per call), so they are atomic per timestamp, not as a whole; row deletes use
//!   `deleteAllRowTs`. hbidx's own writes use one timestamp per mutation.

use std::collections::{BTreeMap, HashMap};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use backon::{ExponentialBuilder, Retryable};
use hbase_thrift::hbase::{
    BatchMutation, HbaseSyncClient, IOError, IllegalArgument, Mutation as TMutation, TRowResult,
    TScan,
};
use hbidx_schema::model::{CellOp, Mutation};
use thrift::protocol::{
    TBinaryInputProtocol, TBinaryOutputProtocol, TCompactInputProtocol, TCompactOutputProtocol,
    TInputProtocol, TOutputProtocol,
};
use thrift::transport::{
    TBufferedReadTransport, TBufferedWriteTransport, TFramedReadTransport, TFramedWriteTransport,
    TIoChannel, TTcpChannel,
};
use tokio::sync::Semaphore;

use crate::api::{Cell, Row, RowStore, ScanBatch, ScanRequest, WriteReceipt};
use crate::breaker::{Breaker, BreakerState};
use crate::config::{HbaseConfig, ThriftProtocol, ThriftTransport};
use crate::embedded::prefix_successor;
use crate::error::{Result, StoreError};
use crate::thrift1::Thrift1Client as Client;

/// The deadline of a health check: short, since it only has to tell up from down, and a
/// readiness probe should not wait out a lookup's `timeout`.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);

/// A pooled Thrift connection. `broken` is set after a transport or protocol error: the stream
/// may hold half a response, so it is dropped instead of being handed out again.
pub struct Connection {
    client: Client,
    broken: bool,
}

struct Manager {
    config: HbaseConfig,
    idle: std::sync::Mutex<Vec<Connection>>,
}

impl Manager {
    fn open_stream(&self) -> std::io::Result<TcpStream> {
        let mut last = None;
        for addr in self.config.thrift.to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, self.config.connect_timeout) {
                Ok(stream) => return Ok(stream),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "address resolved to nothing")
        }))
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        // Pushing and popping leave the stack consistent, so a poisoned lock is still usable.
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An idle connection, or a new one. Called only while holding a permit, so there are never
    /// more than `pool_size` connections.
    fn checkout(&self) -> thrift::Result<Connection> {
        if let Some(conn) = self.idle().pop() {
            return Ok(conn);
        }
        self.connect()
    }

    /// Returns a healthy connection to the stack. A broken one is dropped (closing it), and so
    /// is every idle one: a transport failure usually means the server restarted or went away,
    /// and each stale connection would otherwise cost a failed call (and a breaker strike).
    fn checkin(&self, conn: Connection) {
        if conn.broken {
            self.idle().clear();
        } else {
            self.idle().push(conn);
        }
    }

    fn connect(&self) -> thrift::Result<Connection> {
        let stream = self.open_stream()?;
        stream.set_nodelay(true)?;
        // A per-operation socket deadline: a hung server turns into a timeout error on this
        // blocking thread instead of holding it forever.
        stream.set_read_timeout(Some(self.config.timeout))?;
        stream.set_write_timeout(Some(self.config.timeout))?;
        let (read, write) = TTcpChannel::with_stream(stream).split()?;
        let input: Box<dyn TInputProtocol + Send> =
            match (self.config.transport, self.config.protocol) {
                (ThriftTransport::Buffered, ThriftProtocol::Binary) => Box::new(
                    TBinaryInputProtocol::new(TBufferedReadTransport::new(read), true),
                ),
                (ThriftTransport::Framed, ThriftProtocol::Binary) => Box::new(
                    TBinaryInputProtocol::new(TFramedReadTransport::new(read), true),
                ),
                (ThriftTransport::Buffered, ThriftProtocol::Compact) => Box::new(
                    TCompactInputProtocol::new(TBufferedReadTransport::new(read)),
                ),
                (ThriftTransport::Framed, ThriftProtocol::Compact) => {
                    Box::new(TCompactInputProtocol::new(TFramedReadTransport::new(read)))
                }
            };
        let output: Box<dyn TOutputProtocol + Send> =
            match (self.config.transport, self.config.protocol) {
                (ThriftTransport::Buffered, ThriftProtocol::Binary) => Box::new(
                    TBinaryOutputProtocol::new(TBufferedWriteTransport::new(write), true),
                ),
                (ThriftTransport::Framed, ThriftProtocol::Binary) => Box::new(
                    TBinaryOutputProtocol::new(TFramedWriteTransport::new(write), true),
                ),
                (ThriftTransport::Buffered, ThriftProtocol::Compact) => Box::new(
                    TCompactOutputProtocol::new(TBufferedWriteTransport::new(write)),
                ),
                (ThriftTransport::Framed, ThriftProtocol::Compact) => Box::new(
                    TCompactOutputProtocol::new(TFramedWriteTransport::new(write)),
                ),
            };
        Ok(Connection {
            client: Client::new(HbaseSyncClient::new(input, output)),
            broken: false,
        })
    }
}

/// One failed attempt, classified.
#[derive(Debug)]
struct Failure {
    error: StoreError,
    /// A transport problem: retry, and count it against the breaker.
    transient: bool,
}

/// See the module docs.
pub struct HbaseStore {
    config: HbaseConfig,
    pool: Arc<Manager>,
    permits: Arc<Semaphore>,
    breaker: Arc<Breaker>,
    /// hbidx table name -> HBase table name (`ns:name`, or `name` in the default namespace).
    tables: HashMap<String, String>,
    names: Vec<String>,
}

impl std::fmt::Debug for HbaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HbaseStore")
            .field("thrift", &self.config.thrift)
            .field("tables", &self.names)
            .finish()
    }
}

impl HbaseStore {
    /// A store for `tables` (pairs of hbidx name and HBase name). Does no IO: connections are
    /// made on first use, so hbidx starts even while HBase is down and heals when it comes up.
    pub fn new(config: HbaseConfig, tables: &[(String, String)]) -> Self {
        let pool = Arc::new(Manager {
            config: config.clone(),
            idle: std::sync::Mutex::new(Vec::new()),
        });
        let breaker = Arc::new(Breaker::new(
            "hbase",
            config.breaker_failures,
            config.breaker_open,
        ));
        Self {
            permits: Arc::new(Semaphore::new(config.pool_size as usize)),
            pool,
            breaker,
            tables: tables.iter().cloned().collect(),
            names: tables.iter().map(|(name, _)| name.clone()).collect(),
            config,
        }
    }

    /// The Thrift server address.
    pub fn address(&self) -> &str {
        &self.config.thrift
    }

    /// The circuit breaker's state.
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    fn hbase_table(&self, table: &str) -> Result<String> {
        self.tables
            .get(table)
            .cloned()
            .ok_or_else(|| StoreError::UnknownTable(table.to_owned()))
    }

    /// Runs `f` on a pooled connection on the blocking pool, with retries, the breaker and the
    /// overall deadline.
    async fn call<T, F>(&self, op: &'static str, f: F) -> Result<T>
    where
        F: Fn(&mut Client) -> thrift::Result<T> + Send + Sync + 'static,
        T: Send + 'static,
    {
        self.call_within(op, self.config.timeout, self.config.retries, f)
            .await
    }

    /// [`HbaseStore::call`] with its own deadline and retry count.
    async fn call_within<T, F>(
        &self,
        op: &'static str,
        timeout: Duration,
        retries: u32,
        f: F,
    ) -> Result<T>
    where
        F: Fn(&mut Client) -> thrift::Result<T> + Send + Sync + 'static,
        T: Send + 'static,
    {
        let started = Instant::now();
        let f = Arc::new(f);
        let attempt = || {
            let f = f.clone();
            async move { self.attempt(op, f).await }
        };
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(20))
            .with_max_delay(Duration::from_millis(500))
            .with_max_times(retries as usize)
            .with_jitter();
        let retried = attempt
            .retry(backoff)
            .when(|failure: &Failure| failure.transient)
            .notify(|failure: &Failure, wait: Duration| {
                tracing::debug!(op, error = %failure.error, wait_ms = wait.as_millis() as u64, "retrying HBase call");
            });
        let outcome = match tokio::time::timeout(timeout, retried).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(failure)) => Err(failure.error),
            Err(_) => Err(StoreError::Unavailable(format!(
                "HBase Thrift server {} did not answer {op} within {} ms",
                self.config.thrift,
                timeout.as_millis()
            ))),
        };
        let status = if outcome.is_ok() { "ok" } else { "error" };
        metrics::histogram!("hbidx_thrift_call_seconds", "op" => op, "status" => status)
            .record(started.elapsed().as_secs_f64());
        outcome
    }

    async fn attempt<T, F>(&self, op: &'static str, f: Arc<F>) -> std::result::Result<T, Failure>
    where
        F: Fn(&mut Client) -> thrift::Result<T> + Send + Sync + 'static,
        T: Send + 'static,
    {
        if let Err(refused) = self.breaker.admit() {
            return Err(Failure {
                error: StoreError::Unavailable(format!(
                    "HBase Thrift server {} is unreachable (circuit breaker open; next attempt in {} ms)",
                    self.config.thrift,
                    refused.retry_in.as_millis()
                )),
                transient: false,
            });
        }
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Failure {
                error: StoreError::Unavailable("store is shutting down".to_owned()),
                transient: false,
            })?;
        let pool = self.pool.clone();
        let breaker = self.breaker.clone();
        let address = self.config.thrift.clone();
        let joined = tokio::task::spawn_blocking(move || {
            // Held until the blocking work ends, even if the caller stopped waiting.
            let _permit = permit;
            let mut conn = match pool.checkout() {
                Ok(conn) => conn,
                Err(err) => {
                    breaker.failure();
                    return Err(Failure {
                        error: StoreError::Unavailable(format!(
                            "can't connect to HBase Thrift server {address}: {err}"
                        )),
                        transient: true,
                    });
                }
            };
            let outcome = match f(&mut conn.client) {
                Ok(value) => {
                    breaker.success();
                    Ok(value)
                }
                Err(err) => {
                    let failure = classify(&address, err);
                    if failure.transient {
                        conn.broken = true;
                        breaker.failure();
                    } else {
                        breaker.success();
                    }
                    Err(failure)
                }
            };
            pool.checkin(conn);
            outcome
        })
        .await;
        let result = joined.unwrap_or_else(|join| {
            Err(Failure {
                error: StoreError::Storage(Box::new(join)),
                transient: false,
            })
        });
        if let Err(failure) = &result {
            let kind = if failure.transient {
                "transport"
            } else {
                "rejected"
            };
            metrics::counter!("hbidx_thrift_errors_total", "op" => op, "kind" => kind).increment(1);
        }
        result
    }
}

/// Sorts a Thrift error into retryable transport trouble and answers from the server.
fn classify(address: &str, err: thrift::Error) -> Failure {
    match err {
        thrift::Error::Transport(transport) => Failure {
            error: StoreError::Unavailable(format!("HBase Thrift server {address}: {transport}")),
            transient: true,
        },
        // A protocol error means the stream is out of step (or speaks another protocol): the
        // connection is dropped and a fresh one may well work.
        thrift::Error::Protocol(protocol) => Failure {
            error: StoreError::Unavailable(format!(
                "HBase Thrift server {address}: protocol error: {protocol} (check store.transport and store.protocol)"
            )),
            transient: true,
        },
        thrift::Error::Application(app) => Failure {
            error: StoreError::Rejected(app.message),
            transient: false,
        },
        thrift::Error::User(user) => {
            let message = if let Some(io) = user.downcast_ref::<IOError>() {
                io.message.clone().unwrap_or_else(|| "IOError".to_owned())
            } else if let Some(arg) = user.downcast_ref::<IllegalArgument>() {
                format!(
                    "illegal argument: {}",
                    arg.message.clone().unwrap_or_default()
                )
            } else {
                user.to_string()
            };
            Failure {
                error: StoreError::Rejected(message),
                transient: false,
            }
        }
    }
}

/// Turns an HBase "table not found" answer into [`StoreError::TableMissing`].
fn table_missing(table: &str, hbase_table: &str, err: StoreError) -> StoreError {
    match err {
        StoreError::Rejected(message)
            if message.contains("TableNotFoundException")
                || message.contains("table not found") =>
        {
            StoreError::TableMissing {
                table: table.to_owned(),
                store_table: hbase_table.to_owned(),
            }
        }
        other => other,
    }
}

fn to_row(result: TRowResult) -> Option<Row> {
    let rowkey = result.row?;
    let cells: BTreeMap<String, Cell> = result
        .columns
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(column, cell)| {
            let value = cell.value?;
            // hbidx names columns as UTF-8 `family:qualifier`; a binary qualifier is shown
            // lossily rather than dropping the cell.
            let column = String::from_utf8(column)
                .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned());
            Some((
                column,
                Cell {
                    value,
                    ts: cell.timestamp.unwrap_or(0),
                },
            ))
        })
        .collect();
    (!cells.is_empty()).then_some(Row { rowkey, cells })
}

/// The most rows asked for in one `getRowsWithColumns` (HBase's own multi-get batches further).
const MULTI_GET_CHUNK: usize = 1000;

#[async_trait]
impl RowStore for HbaseStore {
    async fn get_rows(
        &self,
        table: &str,
        rowkeys: &[Vec<u8>],
        columns: Option<&[String]>,
    ) -> Result<Vec<Option<Row>>> {
        let hbase_table = self.hbase_table(table)?;
        let columns: Vec<Vec<u8>> = columns
            .unwrap_or_default()
            .iter()
            .map(|c| c.as_bytes().to_vec())
            .collect();
        let mut found: HashMap<Vec<u8>, Row> = HashMap::with_capacity(rowkeys.len());
        for chunk in rowkeys.chunks(MULTI_GET_CHUNK) {
            let rows: Vec<Vec<u8>> = chunk.iter().filter(|k| !k.is_empty()).cloned().collect();
            if rows.is_empty() {
                continue;
            }
            let name = hbase_table.clone().into_bytes();
            let columns = columns.clone();
            let results = self
                .call("get_rows_with_columns", move |client| {
                    client.get_rows_with_columns(name.clone(), rows.clone(), columns.clone())
                })
                .await
                .map_err(|err| table_missing(table, &hbase_table, err))?;
            // Not positional, and missing rows are left out: match on the row.
            for row in results.into_iter().filter_map(to_row) {
                found.insert(row.rowkey.clone(), row);
            }
        }
        Ok(rowkeys.iter().map(|key| found.get(key).cloned()).collect())
    }

    async fn scan(&self, table: &str, request: &ScanRequest) -> Result<ScanBatch> {
        let hbase_table = self.hbase_table(table)?;
        if request.batch == 0 {
            return Err(StoreError::InvalidRequest {
                reason: "scan batch size must be at least 1".to_owned(),
            });
        }
        let mut lower = request.start.clone();
        let mut upper = request.stop.clone();
        if let Some(prefix) = &request.prefix {
            if lower < *prefix {
                lower = prefix.clone();
            }
            if let Some(end) = prefix_successor(prefix) {
                upper = Some(match upper {
                    Some(stop) if stop < end => stop,
                    _ => end,
                });
            }
        }
        if upper.as_ref().is_some_and(|upper| *upper <= lower) {
            return Ok(ScanBatch::default());
        }
        // One extra row tells whether the scan is complete, as in the embedded store.
        let want = request.batch + 1;
        let caching = i32::try_from(want).unwrap_or(i32::MAX);
        let scan = TScan {
            start_row: Some(lower),
            stop_row: upper,
            timestamp: None,
            columns: request
                .columns
                .as_ref()
                .map(|cols| cols.iter().map(|c| c.as_bytes().to_vec()).collect()),
            caching: Some(caching),
            filter_string: None,
            // No batch size: it would split wide rows into partial rows.
            batch_size: None,
            sort_columns: None,
            reversed: None,
            // A hint for HBase 2.x (a full-table scan shouldn't churn the block cache); 1.x
            // doesn't know the field and skips it. Nothing depends on it being honoured.
            cache_blocks: Some(false),
        };
        let name = hbase_table.clone().into_bytes();
        let mut rows: Vec<Row> = self
            .call("scan", move |client| {
                let id = client.scanner_open_with_scan(name.clone(), scan.clone())?;
                let mut rows = Vec::new();
                let result = (|| {
                    while rows.len() < want {
                        let left = i32::try_from(want - rows.len()).unwrap_or(i32::MAX);
                        let got = client.scanner_get_list(id, left)?;
                        if got.is_empty() {
                            break;
                        }
                        rows.extend(got.into_iter().filter_map(to_row));
                    }
                    Ok(())
                })();
                // Always close: an open scanner holds a lease and memory on the region server.
                let closed = client.scanner_close(id);
                result.and(closed).map(|()| rows)
            })
            .await
            .map_err(|err| table_missing(table, &hbase_table, err))?;
        let next_start = (rows.len() > request.batch).then(|| rows[request.batch].rowkey.clone());
        rows.truncate(request.batch);
        Ok(ScanBatch { rows, next_start })
    }

    async fn mutate(&self, mutations: Vec<Mutation>) -> Result<WriteReceipt> {
        // Validate everything before the first call, so a bad batch writes nothing.
        for mutation in &mutations {
            self.hbase_table(&mutation.table)?;
            if mutation.rowkey.is_empty() {
                return Err(StoreError::InvalidMutation {
                    reason: "empty rowkey".to_owned(),
                });
            }
            if mutation.ops.is_empty() {
                return Err(StoreError::InvalidMutation {
                    reason: "mutation without operations".to_owned(),
                });
            }
        }
        // (table, ts) -> row batches for one mutateRowsTs; row deletes separately.
        let mut batches: BTreeMap<(String, i64), Vec<BatchMutation>> = BTreeMap::new();
        let mut row_deletes: Vec<(String, Vec<u8>, i64)> = Vec::new();
        for mutation in mutations {
            let mut by_ts: BTreeMap<i64, Vec<TMutation>> = BTreeMap::new();
            for op in mutation.ops {
                let (ts, thrift_op) = match op {
                    CellOp::Put { column, ts, value } => {
                        (ts, TMutation::new(false, column.into_bytes(), value, true))
                    }
                    // Thrift1 turns a delete of `f:q` at ts into Delete.addColumns (all versions
                    // <= ts), and of `f` into addFamily: the same semantics as the model.
                    CellOp::DeleteCell { column, ts } => {
                        (ts, TMutation::new(true, column.into_bytes(), None, true))
                    }
                    CellOp::DeleteFamily { family, ts } => {
                        (ts, TMutation::new(true, family.into_bytes(), None, true))
                    }
                    CellOp::DeleteRow { ts } => {
                        row_deletes.push((mutation.table.clone(), mutation.rowkey.clone(), ts));
                        continue;
                    }
                };
                by_ts.entry(ts).or_default().push(thrift_op);
            }
            for (ts, ops) in by_ts {
                batches
                    .entry((mutation.table.clone(), ts))
                    .or_default()
                    .push(BatchMutation::new(mutation.rowkey.clone(), ops));
            }
        }
        // Row deletes first: a mutation that deletes a row and puts into it at a later
        // timestamp must end with the put visible.
        for (table, rowkey, ts) in row_deletes {
            let hbase_table = self.hbase_table(&table)?;
            let name = hbase_table.clone().into_bytes();
            self.call("delete_all_row_ts", move |client| {
                client.delete_all_row_ts(name.clone(), rowkey.clone(), ts)
            })
            .await
            .map_err(|err| table_missing(&table, &hbase_table, err))?;
        }
        for ((table, ts), rows) in batches {
            let hbase_table = self.hbase_table(&table)?;
            let name = hbase_table.clone().into_bytes();
            self.call("mutate_rows_ts", move |client| {
                client.mutate_rows_ts(name.clone(), rows.clone(), ts)
            })
            .await
            .map_err(|err| table_missing(&table, &hbase_table, err))?;
        }
        // No change feed: HBase replication (through Kafka) is the feed.
        Ok(WriteReceipt::default())
    }

    /// One `isTableEnabled` per configured table, each within [`HEALTH_TIMEOUT`] and without
    /// retries: it answers for reachability, presence (an `IOError` naming
    /// `TableNotFoundException`) and state at once, and both HBase 1.x and 2.x serve it. The
    /// breaker applies: while it is open the check fails at once, and a successful check is
    /// what closes it when HBase is back.
    async fn health(&self) -> Result<()> {
        let mut tables: Vec<(&String, &String)> = self.tables.iter().collect();
        tables.sort();
        for (table, hbase_table) in tables {
            let name = hbase_table.clone().into_bytes();
            let enabled = self
                .call_within(
                    "is_table_enabled",
                    HEALTH_TIMEOUT.min(self.config.timeout),
                    0,
                    move |client| client.is_table_enabled(name.clone()),
                )
                .await
                .map_err(|err| match table_missing(table, hbase_table, err) {
                    StoreError::Unavailable(reason) => {
                        StoreError::Unavailable(format!("checking table `{table}`: {reason}"))
                    }
                    other => other,
                })?;
            if !enabled {
                return Err(StoreError::TableDisabled {
                    table: table.clone(),
                    store_table: hbase_table.clone(),
                });
            }
        }
        Ok(())
    }

    fn tables(&self) -> Vec<String> {
        self.names.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_not_found_becomes_table_missing() {
        let err = table_missing(
            "user",
            "ns:user",
            StoreError::Rejected("org.apache.hadoop.hbase.TableNotFoundException: ns:user".into()),
        );
        let text = err.to_string();
        assert!(
            text.contains("`user`") && text.contains("ddl user"),
            "{text}"
        );
    }

    /// Every `RowStore` method against a gateway answering like HBase 1.2: a call 1.x doesn't
    /// serve would fail here with "Invalid method name".
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_store_works_against_hbase_1_and_checks_health() {
        use crate::gateway::{ConfiguredTable, GatewayOptions, HbaseApi};
        use hbase_thrift::hbase::{ColumnDescriptor, THbaseSyncClient};

        let dir = tempfile::tempdir().unwrap();
        let config = hbidx_schema::config::parse_config(
            r#"
[[tables]]
name = "user"
[[tables.families]]
name = "info"
[tables.rowkey]
parts = [ { kind = "key" } ]
[[tables.fields]]
name = "phone"
kind = "phone"
column = "info:phone"
"#,
        )
        .unwrap();
        let table = config.tables[0].clone();
        let spec = crate::TableSpec {
            name: "user".into(),
            families: Some(vec!["info".into()]),
        };
        let embedded = Arc::new(
            crate::EmbeddedStore::open_tables(dir.path(), &[spec], Default::default()).unwrap(),
        );
        let options = GatewayOptions {
            api: HbaseApi::V1,
            ..GatewayOptions::new("127.0.0.1:0".parse().unwrap())
        };
        let configured = ConfiguredTable {
            config: Arc::new(table),
            split_keys: Vec::new(),
            kafka_topic: None,
        };
        let gateway = crate::gateway::serve(embedded, vec![configured], options).unwrap();
        let address = gateway.local_addr().to_string();
        let store = HbaseStore::new(
            HbaseConfig::new(address.clone()),
            &[("user".into(), "user".into())],
        );

        store.health().await.unwrap();
        let put = |rowkey: &str, phone: &str, ts| Mutation {
            table: "user".into(),
            rowkey: rowkey.as_bytes().to_vec(),
            ops: vec![CellOp::Put {
                column: "info:phone".into(),
                ts,
                value: phone.as_bytes().to_vec(),
            }],
        };
        store
            .mutate(vec![put("a", "13800138000", 5), put("b", "13900139000", 6)])
            .await
            .unwrap();
        store
            .mutate(vec![Mutation {
                table: "user".into(),
                rowkey: b"b".to_vec(),
                ops: vec![CellOp::DeleteRow { ts: 7 }],
            }])
            .await
            .unwrap();
        let rows = store
            .get_rows("user", &[b"a".to_vec(), b"b".to_vec()], None)
            .await
            .unwrap();
        assert_eq!(rows[0].as_ref().unwrap().cells["info:phone"].ts, 5);
        assert!(rows[1].is_none());
        let batch = store
            .scan(
                "user",
                &ScanRequest {
                    columns: Some(vec!["info:phone".into()]),
                    batch: 10,
                    ..ScanRequest::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(batch.rows.len(), 1);

        // The stand-in really answers like 1.x.
        let raw = std::net::TcpStream::connect(&address).unwrap();
        let (read, write) = thrift::transport::TTcpChannel::with_stream(raw)
            .split()
            .unwrap();
        let mut client = HbaseSyncClient::new(
            TBinaryInputProtocol::new(TBufferedReadTransport::new(read), true),
            TBinaryOutputProtocol::new(TBufferedWriteTransport::new(write), true),
        );
        let entity = || {
            hbase_thrift::hbase::TAccessControlEntity::new(
                "u".to_owned(),
                hbase_thrift::hbase::TPermissionScope::TABLE,
                "R".to_owned(),
                b"user".to_vec(),
                None,
            )
        };
        let answers = [
            (
                "getThriftServerType",
                client.get_thrift_server_type().map(drop),
            ),
            ("getClusterId", client.get_cluster_id().map(drop)),
            (
                "getTableNamesWithIsTableEnabled",
                client.get_table_names_with_is_table_enabled().map(drop),
            ),
            ("grant", client.grant(entity()).map(drop)),
            ("revoke", client.revoke(entity()).map(drop)),
        ];
        let checked: Vec<&str> = answers.iter().map(|(method, _)| *method).collect();
        assert_eq!(checked, crate::HBASE_2_ONLY, "every method HBase 1.x lacks");
        for (method, answer) in answers {
            match answer {
                Err(thrift::Error::Application(err)) => {
                    assert_eq!(err.kind, thrift::ApplicationErrorKind::UnknownMethod);
                    assert_eq!(err.message, format!("Invalid method name: '{method}'"));
                }
                other => panic!("{method}: {other:?}"),
            }
        }

        // A table that is missing, and one that is disabled.
        let missing = HbaseStore::new(
            HbaseConfig::new(address.clone()),
            &[
                ("user".into(), "user".into()),
                ("gone".into(), "gone".into()),
            ],
        );
        let err = missing.health().await.unwrap_err();
        assert!(
            matches!(&err, StoreError::TableMissing { table, .. } if table == "gone"),
            "{err}"
        );
        client
            .create_table(
                b"side".to_vec(),
                vec![ColumnDescriptor {
                    name: Some(b"f:".to_vec()),
                    ..ColumnDescriptor::default()
                }],
            )
            .unwrap();
        client.disable_table(b"side".to_vec()).unwrap();
        let disabled =
            HbaseStore::new(HbaseConfig::new(address), &[("side".into(), "side".into())]);
        let err = disabled.health().await.unwrap_err();
        assert!(
            matches!(&err, StoreError::TableDisabled { table, .. } if table == "side"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn unreachable_server_fails_fast_then_the_breaker_opens() {
        // A port nobody listens on: connection refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut config = HbaseConfig::new(format!("127.0.0.1:{port}"));
        config.breaker_failures = 2;
        config.retries = 1;
        config.timeout = Duration::from_millis(1500);
        let store = HbaseStore::new(config, &[("user".into(), "user".into())]);
        let started = Instant::now();
        let err = store
            .get_rows("user", &[b"k".to_vec()], None)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
        assert!(started.elapsed() < Duration::from_millis(1500));
        assert_eq!(store.breaker_state(), BreakerState::Open);
        let started = Instant::now();
        let err = store
            .get_rows("user", &[b"k".to_vec()], None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("circuit breaker open"), "{err}");
        assert!(started.elapsed() < Duration::from_millis(50));
        // The health check says so too, naming the table.
        let err = store.health().await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
        assert!(err.to_string().contains("checking table `user`"), "{err}");
    }
}
