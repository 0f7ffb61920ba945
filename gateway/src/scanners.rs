//! Scanner leases: the map of open scanners, their expiry and cap, and reading the store in
//! `caching`-sized batches as clients call for rows, forwards or (`TScan.reversed`) backwards.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hbase_thrift::hbase::{ScannerID, TRowResult, TScan};
use hbidx_store::{ScanRequest, lock};

use crate::error::{Answer, Failure};
use crate::filter::ScanFilter;
use crate::handler::Gateway;
use crate::reads::{ResultShape, VersionedRead};

/// Rows a scanner reads from the store per batch when the client doesn't say (`TScan.caching`).
const DEFAULT_CACHING: usize = 100;
/// Upper bound of one store read of a scanner, and of the rows one `scannerGetList` answers
/// (clients call again until they get an empty list, so a shorter answer is allowed).
const MAX_ROWS_PER_CALL: usize = 10_000;

/// One open scanner.
struct Scanner {
    /// The table, the scan's columns, and which families keep older versions.
    read: VersionedRead,
    /// The next store read; `start` moves on after each.
    request: ScanRequest,
    /// HBase's reversed scan: descending rowkeys from `start` (inclusive) down to `stop`.
    reversed: bool,
    exhausted: bool,
    filter: ResultShape,
    /// `TScan.filterString`, run on whole rows before `filter` cuts them into results.
    row_filter: Option<ScanFilter>,
    /// Rows read from the store and not yet handed out.
    buffered: VecDeque<TRowResult>,
    last_used: Instant,
}

/// The open scanners by id.
pub(crate) struct ScannerMap {
    open: HashMap<ScannerID, Arc<Mutex<Scanner>>>,
    /// The next id to hand out; ids are positive, as HBase's.
    next_id: ScannerID,
}

impl ScannerMap {
    /// No scanner open; ids start at 1.
    pub(crate) fn new() -> Self {
        Self {
            open: HashMap::new(),
            next_id: 1,
        }
    }
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

impl Gateway {
    /// A scanner for the `scannerOpen*` calls that take no `TScan`: the default caching and
    /// result shape, with only the cells older than `before_ts` when given.
    pub(crate) fn open_range(
        &self,
        table: &[u8],
        request: ScanRequest,
        columns: &[Vec<u8>],
        before_ts: Option<i64>,
    ) -> Answer<ScannerID> {
        let shape = ResultShape::with_ts(before_ts);
        let walk = Walk {
            caching: DEFAULT_CACHING,
            row_filter: None,
            reversed: false,
        };
        self.open_scanner(table, request, columns, shape, walk)
    }

    fn open_scanner(
        &self,
        table: &[u8],
        mut request: ScanRequest,
        columns: &[Vec<u8>],
        shape: ResultShape,
        walk: Walk,
    ) -> Answer<ScannerID> {
        let Walk {
            caching,
            row_filter,
            reversed,
        } = walk;
        let target = self.readable(table)?;
        request.columns = target.projection(columns)?;
        request.batch = caching.clamp(1, MAX_ROWS_PER_CALL);
        let scanner = Scanner {
            read: VersionedRead {
                store_name: target.store_name,
                versions: target.info.versions,
                projection: request.columns.clone(),
            },
            request,
            reversed,
            exhausted: false,
            filter: shape,
            row_filter,
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

    pub(crate) fn scanner_next(&self, id: ScannerID, rows: i32) -> Answer<Vec<TRowResult>> {
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
            let batch = if scanner.reversed {
                self.store
                    .scan_reversed_sync(&scanner.read.store_name, &scanner.request)?
            } else {
                self.store
                    .scan_sync(&scanner.read.store_name, &scanner.request)?
            };
            let shape = scanner.filter;
            let scanner = &mut *scanner;
            for row in batch.rows {
                let row = self.as_of(&scanner.read, row, shape.before_ts)?;
                let row = match &mut scanner.row_filter {
                    Some(row_filter) => match row_filter.apply(row, shape.before_ts) {
                        Some(row) => row,
                        None => continue,
                    },
                    None => row,
                };
                shape.results(row, &mut scanner.buffered);
            }
            match batch.next_start {
                Some(next) => scanner.request.start = next,
                None => scanner.exhausted = true,
            }
            if scanner.row_filter.as_ref().is_some_and(ScanFilter::is_done) {
                scanner.exhausted = true;
            }
        }
        Ok(out)
    }

    pub(crate) fn close_scanner(&self, id: ScannerID) -> Answer<()> {
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

pub(crate) fn scan_request(
    start: Vec<u8>,
    stop: Option<Vec<u8>>,
    prefix: Option<Vec<u8>>,
) -> ScanRequest {
    ScanRequest {
        start,
        // An empty stop row means "to the end" in HBase.
        stop: stop.filter(|stop| !stop.is_empty()),
        prefix,
        columns: None,
        batch: DEFAULT_CACHING,
    }
}

pub(crate) fn open_with_scan(gateway: &Gateway, table: &[u8], scan: TScan) -> Answer<ScannerID> {
    let row_filter = scan
        .filter_string
        .as_deref()
        .map(ScanFilter::parse)
        .transpose()?
        .map(|filter| filter.reversed(scan.reversed.unwrap_or(false)));
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
    // Reversed, HBase reads `startRow` as the largest row (inclusive) and `stopRow` as the
    // smaller bound (exclusive); the store's reversed scan takes them so.
    let request = scan_request(scan.start_row.unwrap_or_default(), scan.stop_row, None);
    gateway.open_scanner(
        table,
        request,
        &scan.columns.unwrap_or_default(),
        shape,
        Walk {
            caching,
            row_filter,
            reversed: scan.reversed.unwrap_or(false),
        },
    )
}

/// How a scanner walks its range: rows per store read, the filter, the direction.
struct Walk {
    caching: usize,
    row_filter: Option<ScanFilter>,
    reversed: bool,
}
