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
//! - Read-modify-writes: `atomicIncrement`, `increment`, `incrementRows` (8-byte big-endian
//!   counters; a value of another size is an `IOError`, as in HBase), `append`, `checkAndPut`,
//!   each atomic per row ([`EmbeddedStore::mutate_row_with`] holds the store's writer while it
//!   reads the row and writes the result) and each through the change feed.
//! - Scanners: `scannerOpen(WithStop|WithPrefix|WithScan)(Ts)`, `scannerGet(List)`,
//!   `scannerClose`; `TScan.reversed` scans from `startRow` (inclusive) down to `stopRow`
//!   (exclusive), as HBase's reversed scans.
//! - Error messages start with the name of the exception HBase's Java server would have thrown
//!   (`TableNotFoundException: …`, `NoSuchColumnFamilyException: …`), since that is what HBase
//!   clients, hbidx's own `HbaseStore` included, look for in an `IOError`.
//! - Everything else (`getRegionInfo`, `grant`, `revoke`) answers an `IOError` naming the method.
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
//! - Versions: a family keeps its `VERSIONS` per cell (`createTable`'s
//!   `ColumnDescriptor.maxVersions`, 3 when a client leaves it out as in HBase's IDL; for tables
//!   from the config, `[[tables.families]] versions`, default 1). `*Ts` reads answer the newest
//!   version older than the timestamp (HBase's time range `[0, ts)`), `getVer(Ts)` up to
//!   `numVersions` versions, newest first; a put with an older timestamp lands as an older
//!   version, and a delete at a timestamp masks every version at or below it (HBase's
//!   `deleteColumns`, what its Thrift server uses). Versions beyond `VERSIONS` are dropped when
//!   written; HBase drops them at flush or compaction, so before that a time-range read on HBase
//!   can see one more. Lookups and the index always see the newest version.
//! - Columns, as HBase's `KeyValue.parseColumn` reads them: `family:qualifier`; `family:` is the
//!   column with the empty qualifier, in puts, reads and deletes; in reads and deletes a bare
//!   `family` means the whole family (`atomicIncrement` takes it as `family:`, as HBase does).
//!   Qualifiers must be UTF-8. An unknown family is an error, as HBase's
//!   `NoSuchColumnFamilyException`. A put to a bare `family` is an `IllegalArgument` (HBase
//!   logs it and drops it).
//! - `TScan.filterString` takes HBase's filter language (`ParseFilter`'s syntax and filters,
//!   evaluated as an HBase 1.x region server does; see the `filter` module); a string that
//!   doesn't parse is an `IOError` naming the byte offset. `TScan.reversed` scans from its start
//!   row down. `TScan.batchSize` cuts rows, once filtered, into partial rows as HBase's
//!   `Scan.setBatching` does.
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
//! The server (server.rs, thrift 0.17's `TServer` loop with a socket timeout it can't set):
//! one worker thread per open connection, for the connection's whole life or until it sends
//! nothing for [`GatewayOptions::idle_timeout`] (`[server] thrift_idle_timeout_ms`, 60 s by
//! default like HBase's `hbase.thrift.server.socket.read.timeout`). Connections have Nagle off:
//! thrift's framed transport writes a reply in two pieces, and the second would wait for the
//! client's delayed ACK. A connection beyond the worker count waits,
//! without an answer, in the listen backlog until a worker is free, so
//! [`GatewayOptions::workers`] must cover every client's connection
//! pool (happybase's `ConnectionPool(size=N)` holds N). Handlers call the store's sync methods
//! directly; they run on those worker threads, never on the async runtime.
//!
//! [`EmbeddedStore`]: hbidx_store::EmbeddedStore
//! [`EmbeddedStore::mutate_sync`]: hbidx_store::EmbeddedStore::mutate_sync
//! [`EmbeddedStore::mutate_row_with`]: hbidx_store::EmbeddedStore::mutate_row_with

mod admin;
mod args;
mod atomic;
mod error;
mod filter;
mod handler;
mod options;
mod parse;
mod reads;
mod scanners;
mod server;
mod target;
mod writes;

pub use handler::Gateway;
pub use hbidx_schema::config::{HbaseApi, ThriftProtocol, ThriftTransport};
pub use options::{
    ConfiguredTable, DEFAULT_MAX_SCANNERS, DEFAULT_MAX_STRING_LEN, DEFAULT_SCANNER_LEASE,
    DEFAULT_WORKERS, GatewayOptions,
};
pub use server::{GatewayServer, serve};

#[cfg(test)]
mod fuzz_tests;
#[doc(hidden)]
pub mod fuzzing;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_hbase_semantics;
