//! [`HbaseStore`]: the [`RowStore`](crate::RowStore) over a real HBase cluster's Thrift1 server
//! (`hbase thrift start`), through the `hbase-thrift` crate's generated sync client.
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
//! - **Health** ([`RowStore::health`](crate::RowStore::health)): `isTableEnabled` per
//!   configured table, with a short deadline and no retries: up, present and enabled in one call.
//! - Mutations with several cell timestamps become one `mutateRowsTs` per timestamp (Thrift1 has
//!   one timestamp per call), so they are atomic per timestamp, not as a whole; row deletes use
//!   `deleteAllRowTs`. hbidx's own writes use one timestamp per mutation.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::breaker::{Breaker, BreakerState};
use crate::error::{Result, StoreError};
use hbidx_schema::config::HbaseConfig;

mod call;
mod pool;
mod row_store;
#[cfg(test)]
mod tests;

use pool::Manager;

/// The deadline of a health check: short, since it only has to tell up from down, and a
/// readiness probe should not wait out a lookup's `timeout`.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);

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
        let pool = Arc::new(Manager::new(config.clone()));
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
}
