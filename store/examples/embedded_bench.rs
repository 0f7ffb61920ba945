//! A quick single-threaded measurement of the embedded store's write and read paths.
//!
//! ```text
//! cargo run --release -p hbidx-store --example embedded_bench [ROWS [GET_CALLS]]
//! ```
//!
//! Loads ROWS rows (default 100 000) the way the demo does, in `mutate` calls of 1000 mutations,
//! then times `get_rows` with 4 random rowkeys per call (the query path's shape), a paged scan,
//! and reading the whole change feed. Set `SYNC=1` to fsync every `mutate`.

use std::time::Instant;

use hbidx_schema::model::{CellOp, Mutation};
use hbidx_store::{EmbeddedStore, EmbeddedStoreOptions, ScanRequest};

const TABLE: &str = "demo:person";

fn rowkey(n: u64) -> Vec<u8> {
    format!("{:04x}|{n:010}", n.wrapping_mul(0x9E37_79B9) % 0x1_0000).into_bytes()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rows: u64 = std::env::args()
        .nth(1)
        .map(|arg| arg.parse())
        .transpose()?
        .unwrap_or(100_000);
    let dir = tempfile::tempdir()?;
    let options = EmbeddedStoreOptions {
        sync: std::env::var_os("SYNC").is_some(),
        ..EmbeddedStoreOptions::default()
    };
    let store = EmbeddedStore::open_with_options(dir.path(), &[TABLE.to_owned()], options.clone())?;

    // Load: one row = 3 cells, about 60 bytes of values.
    let started = Instant::now();
    for first in (0..rows).step_by(1000) {
        let batch = (first..(first + 1000).min(rows))
            .map(|n| Mutation {
                table: TABLE.to_owned(),
                rowkey: rowkey(n),
                ops: vec![
                    CellOp::Put {
                        column: "info:phone".to_owned(),
                        ts: 1,
                        value: format!("138{n:08}").into_bytes(),
                    },
                    CellOp::Put {
                        column: "info:idcard".to_owned(),
                        ts: 1,
                        value: format!("11010519491231{n:04}").into_bytes(),
                    },
                    CellOp::Put {
                        column: "info:name".to_owned(),
                        ts: 1,
                        value: format!("name-{n}").into_bytes(),
                    },
                ],
            })
            .collect();
        store.mutate_sync(batch)?;
    }
    let elapsed = started.elapsed();
    println!(
        "load: {rows} rows in {:.2?} = {:.0} rows/s (batches of 1000, sync: {})",
        elapsed,
        rows as f64 / elapsed.as_secs_f64(),
        options.sync
    );

    // Write-through shape: one single-cell mutation per call, updating existing rows.
    let singles = 20_000u64;
    let started = Instant::now();
    for n in 0..singles {
        store.mutate_sync(vec![Mutation {
            table: TABLE.to_owned(),
            rowkey: rowkey(n % rows),
            ops: vec![CellOp::Put {
                column: "info:name".to_owned(),
                ts: 2,
                value: format!("renamed-{n}").into_bytes(),
            }],
        }])?;
    }
    let elapsed = started.elapsed();
    println!(
        "single-mutation calls: {:.2} µs/call",
        elapsed.as_secs_f64() * 1e6 / singles as f64
    );

    // Point reads: 4 random existing rows per call.
    let calls: u64 = std::env::args()
        .nth(2)
        .map(|arg| arg.parse())
        .transpose()?
        .unwrap_or(200_000);
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next_row = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        rowkey(state % rows)
    };
    let started = Instant::now();
    let mut found = 0usize;
    for _ in 0..calls {
        let keys = [next_row(), next_row(), next_row(), next_row()];
        found += store
            .get_rows_sync(TABLE, &keys, None)?
            .iter()
            .flatten()
            .count();
    }
    let elapsed = started.elapsed();
    assert_eq!(found as u64, calls * 4);
    println!(
        "get_rows: {calls} calls x 4 rows in {:.2?} = {:.2} µs/row, {:.0} calls/s",
        elapsed,
        elapsed.as_secs_f64() * 1e6 / (calls * 4) as f64,
        calls as f64 / elapsed.as_secs_f64()
    );

    // Baseline: raw fjall point reads of the same keys and value sizes, no decoding.
    let raw_dir = tempfile::tempdir()?;
    let raw_db = fjall::Database::builder(raw_dir.path()).open()?;
    let raw = raw_db.keyspace("raw", fjall::KeyspaceCreateOptions::default)?;
    for first in (0..rows).step_by(1000) {
        let mut batch = raw_db.batch();
        for n in first..(first + 1000).min(rows) {
            batch.insert(&raw, rowkey(n), vec![7u8; 90]);
        }
        batch.commit()?;
    }
    let started = Instant::now();
    let mut found = 0usize;
    for _ in 0..calls {
        for key in [next_row(), next_row(), next_row(), next_row()] {
            found += usize::from(raw.get(&key)?.is_some());
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(found as u64, calls * 4);
    println!(
        "raw fjall get (baseline): {:.2} µs/row",
        elapsed.as_secs_f64() * 1e6 / (calls * 4) as f64
    );

    // A paged full scan.
    let started = Instant::now();
    let mut request = ScanRequest {
        batch: 1000,
        ..ScanRequest::default()
    };
    let mut scanned = 0usize;
    loop {
        let batch = store.scan_sync(TABLE, &request)?;
        scanned += batch.rows.len();
        let Some(next) = batch.next_start else { break };
        request.start = next;
    }
    println!("scan: {scanned} rows in {:.2?}", started.elapsed());

    let started = Instant::now();
    let mut after = 0;
    let mut events = 0usize;
    loop {
        let batch = store.read_feed(TABLE, after, 10_000)?;
        let Some(last) = batch.last() else { break };
        after = last.offset;
        events += batch.len();
    }
    println!("read_feed: {events} events in {:.2?}", started.elapsed());
    Ok(())
}
