//! What a shard pays for an event of another shard's row, against what indexing it costs: one
//! run, the measures side by side (compare the ratios; the machine is noisy).
//!
//! ```text
//! cargo run --release -p hbidx-indexer --example shard_skip [ROWS]
//! ```
//!
//! ROWS rows (default 100 000) of the example `user` table, each as three HBase Kafka Proxy
//! messages (one per cell: phone, name, idcard) and as one hbidx JSON event with the three
//! cells, the way the Kafka source sees them. Per message (per event for JSON), best of three
//! rounds:
//! - **skip via peek**: [`proxy_rowkey`] and the range check, which is all a shard does with a
//!   Proxy message of another shard before handing on its position;
//! - **skip, position applied**: the same plus the position-only event the writer applies (the
//!   checkpoint moves past the message);
//! - **full decode**: [`decode_proxy`] / [`decode_json`] (+ the range check for JSON, which has
//!   to decode before it knows the rowkey);
//! - **decode + index**: decode, then the writer applies it (a Proxy row's consecutive cells
//!   merged into one mutation, as the source does) and commits at the end, into a fresh index.

use std::sync::Arc;
use std::time::Instant;

use hbidx_indexer::{
    Decoded, ProxyDecoded, WriterOptions, decode_json, decode_proxy, encode_json, encode_proxy,
    open_table_index, proxy_rowkey,
};
use hbidx_schema::config::{KeyRange, TableConfig};
use hbidx_schema::model::{CellOp, Mutation};

const ROUNDS: usize = 3;

fn cells(i: usize) -> Vec<CellOp> {
    let first17 = format!("110101199{:01}0101{:03}", i % 10, i % 1000);
    let idcard = hbidx_schema::normalize::idcard_check_digit(&first17)
        .map(|check| format!("{first17}{check}"))
        .unwrap_or(first17);
    [
        ("info:phone", format!("138{:08}", i)),
        (
            "info:name",
            format!("张{}", ["伟", "芳", "小贤", "娜"][i % 4]),
        ),
        ("info:idcard", idcard),
    ]
    .into_iter()
    .map(|(column, value)| CellOp::Put {
        column: column.into(),
        ts: 1_700_000_000_000,
        value: value.into_bytes(),
    })
    .collect()
}

/// Best of `ROUNDS` runs of `f`, in ns per item.
fn best(items: usize, mut f: impl FnMut() -> usize) -> f64 {
    (0..ROUNDS)
        .map(|_| {
            let started = Instant::now();
            let checked = f();
            assert!(checked > 0);
            started.elapsed().as_nanos() as f64 / items as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rows: usize = std::env::args()
        .nth(1)
        .map(|arg| arg.parse())
        .transpose()?
        .unwrap_or(100_000);
    // Two shards at the example table's default boundary (its 10 pre-split regions halved).
    let text = format!(
        "{}\n[store]\nkind = \"hbase\"\nthrift = \"127.0.0.1:9090\"\n[cluster]\nshards = [[\"http://a:1\"], [\"http://b:1\"]]\n",
        hbidx_schema::EXAMPLE_CONFIG
    );
    let config = hbidx_schema::parse_config(&text)?;
    let table: Arc<TableConfig> = Arc::new(config.table("user").ok_or("no user table")?.clone());
    let cluster = config.cluster.clone().ok_or("no [cluster]")?;
    let range: KeyRange = cluster.range("user", 0);

    let mutations: Vec<Mutation> = (0..rows)
        .map(|i| -> Result<Mutation, Box<dyn std::error::Error>> {
            Ok(Mutation {
                table: "user".into(),
                rowkey: table.rowkey.encode(&format!("u{i}"))?,
                ops: cells(i),
            })
        })
        .collect::<Result<_, _>>()?;
    let proxy: Vec<Vec<u8>> = mutations
        .iter()
        .flat_map(|m| m.ops.iter().map(|op| encode_proxy("user", &m.rowkey, op)))
        .collect::<Result<_, _>>()?;
    let json: Vec<Vec<u8>> = mutations.iter().map(|m| encode_json(&table, m)).collect();
    let foreign = mutations
        .iter()
        .filter(|m| !range.contains(&m.rowkey))
        .count();
    println!(
        "{rows} rows, {} Proxy messages, {} JSON events; {foreign} rows of the other shard",
        proxy.len(),
        json.len()
    );

    let peek = best(proxy.len(), || {
        proxy
            .iter()
            .filter(|payload| proxy_rowkey(&table, payload).is_some_and(|k| !range.contains(k)))
            .count()
    });
    let dir = tempfile::tempdir()?;
    let skip_applied = {
        let (mut writer, _) = open_table_index(
            &dir.path().join("skip"),
            table.clone(),
            &WriterOptions::default(),
        )?;
        let mut offset = 0i64;
        best(proxy.len(), || {
            let mut skipped = 0;
            for payload in &proxy {
                if proxy_rowkey(&table, payload).is_some_and(|k| !range.contains(k)) {
                    let marker = Mutation {
                        table: table.name.clone(),
                        rowkey: Vec::new(),
                        ops: Vec::new(),
                    };
                    offset += 1;
                    if writer.apply(&marker, "kafka:t", 0, offset).is_ok() {
                        skipped += 1;
                    }
                }
            }
            skipped
        })
    };
    let proxy_decode = best(proxy.len(), || {
        proxy
            .iter()
            .filter(|payload| matches!(decode_proxy(&table, payload), Ok(ProxyDecoded::Cell(_))))
            .count()
    });
    let json_skip = best(json.len(), || {
        json.iter()
            .filter(|payload| match decode_json(&table, payload, None) {
                Ok(Decoded::Mutation(m)) => !range.contains(&m.rowkey),
                _ => false,
            })
            .count()
    });
    let mut round = 0;
    let mut index = |format: &str| -> Result<f64, Box<dyn std::error::Error>> {
        let mut results = Vec::new();
        for _ in 0..ROUNDS {
            round += 1;
            let (mut writer, _) = open_table_index(
                &dir.path().join(format!("{format}-{round}")),
                table.clone(),
                &WriterOptions::default(),
            )?;
            let started = Instant::now();
            let messages = if format == "proxy" {
                let mut pending: Option<Mutation> = None;
                for (offset, payload) in proxy.iter().enumerate() {
                    let Ok(ProxyDecoded::Cell(cell)) = decode_proxy(&table, payload) else {
                        return Err("undecodable".into());
                    };
                    match &mut pending {
                        Some(m) if m.rowkey == cell.rowkey => m.ops.push(cell.op),
                        _ => {
                            if let Some(m) = pending.take() {
                                writer.apply(&m, "kafka:t", 0, offset as i64)?;
                            }
                            pending = Some(Mutation {
                                table: table.name.clone(),
                                rowkey: cell.rowkey,
                                ops: vec![cell.op],
                            });
                        }
                    }
                }
                if let Some(m) = pending {
                    writer.apply(&m, "kafka:t", 0, proxy.len() as i64)?;
                }
                proxy.len()
            } else {
                for (offset, payload) in json.iter().enumerate() {
                    let Ok(Decoded::Mutation(m)) = decode_json(&table, payload, None) else {
                        return Err("undecodable".into());
                    };
                    writer.apply(&m, "kafka:t", 0, offset as i64)?;
                }
                json.len()
            };
            writer.commit()?;
            results.push(started.elapsed().as_nanos() as f64 / messages as f64);
            writer.finish()?;
        }
        Ok(results.into_iter().fold(f64::INFINITY, f64::min))
    };
    let proxy_index = index("proxy")?;
    let json_index = index("json")?;

    println!(
        "| format | per | skip via peek | skip, position applied | full decode | decode + index |"
    );
    println!("|---|---|---|---|---|---|");
    println!(
        "| HBase Kafka Proxy (Avro) | message (one cell) | {peek:.0} ns | {skip_applied:.0} ns | {proxy_decode:.0} ns | {proxy_index:.0} ns |"
    );
    println!(
        "| hbidx JSON | event (three cells) | — | — | {json_skip:.0} ns (the skip) | {json_index:.0} ns |"
    );
    Ok(())
}
