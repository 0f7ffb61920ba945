//! The one wall clock for timestamps.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the epoch: what HBase stamps a cell with when the client gives no
/// timestamp. Every default cell timestamp (write-through, the Thrift gateway) and every
/// timestamp hbidx reports (jobs, lag, dead letters) comes from here, so they agree. A clock
/// before 1970 reads as 0.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
