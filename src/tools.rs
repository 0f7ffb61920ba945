//! The schema tools: `schema check`, `rowkey`, `splits`, `ddl`, `hotspot`. Thin wrappers over
//! the schema crate; all IO (reading config and sample files) happens here, not there.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use hbidx_schema::codec::printable;
use hbidx_schema::config::{HbidxConfig, StoreConfig, TableConfig};
use hbidx_schema::split::{self, HotspotReport, RegionMap};

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum SplitAlgoArg {
    /// HBase HexStringSplit: 8 hex chars, 00000000..ffffffff.
    Hex,
    /// HBase UniformSplit: 8 raw bytes, 0x00.. to 0xff...
    Uniform,
    /// HBase DecimalStringSplit: 8 decimal chars, 00000000..99999999.
    Decimal,
    /// Bucket boundaries of the table's rowkey design (salt, modulo, ring, hash prefix).
    Codec,
    /// Sort a key sample and take every k-th rowkey.
    Sampled,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Pattern {
    /// u00000001, u00000002, …: what auto-increment ids and timestamps look like.
    Sequential,
    /// Uniformly random ids.
    Random,
}

pub fn read_config_text(path: Option<&Path>) -> Result<String> {
    match path {
        None => Ok(hbidx_schema::EXAMPLE_CONFIG.to_string()),
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config {}", path.display())),
    }
}

pub fn parse(text: &str) -> Result<HbidxConfig> {
    hbidx_schema::config::parse_config(text).map_err(|err| anyhow!("invalid config: {err}"))
}

fn table<'a>(config: &'a HbidxConfig, name: &str) -> Result<&'a TableConfig> {
    config.table(name).ok_or_else(|| {
        let known: Vec<_> = config.tables.iter().map(|t| t.name.as_str()).collect();
        anyhow!(
            "unknown table \"{name}\"; the config has: {}",
            known.join(", ")
        )
    })
}

/// The config of a running instance: with `[cluster]`, its shard and replica from the command
/// line (or the config) checked against the layout.
pub fn parse_instance(text: &str, identity: (Option<usize>, Option<usize>)) -> Result<HbidxConfig> {
    let mut config = parse(text)?;
    if let Some(cluster) = config.cluster.take() {
        let cluster = cluster
            .with_identity(identity.0, identity.1)
            .map_err(|err| anyhow!("invalid config: {err}"))?;
        config.cluster = Some(cluster);
    }
    hbidx_serve::arm_blind_fields(&mut config)?;
    Ok(config)
}

pub fn schema_check(file: &Path) -> Result<()> {
    let text = read_config_text(Some(file))?;
    // The same builder `serve` runs: every section is checked, not only the tables.
    let config = hbidx_schema::config::parse_config(&text)
        .map_err(|err| anyhow!("{}: {err}", file.display()))?;
    println!(
        "{}: ok, {} table(s), {} Kafka source(s), {} API key(s)",
        file.display(),
        config.tables.len(),
        config.sources.len(),
        config.security.keys.len()
    );
    match &config.store {
        StoreConfig::Embedded => println!("  store: embedded"),
        StoreConfig::Hbase(hbase) => {
            println!("  store: hbase (Thrift1 at {})", hbase.thrift)
        }
    }
    if let Some(cluster) = &config.cluster {
        for table in &config.tables {
            println!(
                "  cluster: {}: {}",
                table.name,
                cluster.describe(&table.name)
            );
        }
    }
    for source in &config.sources {
        println!(
            "  source: {} ({}) from {} -> table {}",
            source.topic,
            source.format.as_str(),
            source.brokers,
            source.table
        );
    }
    for table in &config.tables {
        let fields: Vec<_> = table
            .fields
            .iter()
            .map(|f| format!("{} ({} @ {})", f.name, f.kind.as_str(), f.column))
            .collect();
        println!(
            "  {}: rowkey = {}; fields: {}",
            table.full_name(),
            table.rowkey.describe(),
            fields.join(", ")
        );
    }
    Ok(())
}

pub fn rowkey(config_text: &str, table_name: &str, key: &str) -> Result<()> {
    let config = parse(config_text)?;
    let table = table(&config, table_name)?;
    let codec = &table.rowkey;
    println!("design:    {}", codec.describe());
    if codec.is_deterministic() {
        let rowkey = codec.encode(key).map_err(|err| anyhow!("{err}"))?;
        println!("hex:       {}", hex::encode(&rowkey));
        println!("printable: {}", printable(&rowkey));
    } else {
        println!(
            "random salt: the rowkey can't be rebuilt from the key; the index is the only way to find the row. candidates:"
        );
        for rowkey in codec
            .candidate_rowkeys(key)
            .map_err(|err| anyhow!("{err}"))?
        {
            println!("  {}  {}", hex::encode(&rowkey), printable(&rowkey));
        }
    }
    Ok(())
}

fn sequential_keys(n: usize) -> impl Iterator<Item = String> {
    (1..=n).map(|i| format!("u{i:08}"))
}

fn random_keys(n: usize) -> impl Iterator<Item = String> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    (0..n).map(move |_| format!("u{:08}", rng.random_range(0..100_000_000u32)))
}

fn read_keys(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read sample {}", path.display()))?;
    let keys: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if keys.is_empty() {
        bail!("sample {} has no keys", path.display());
    }
    Ok(keys)
}

fn encode_all(table: &TableConfig, keys: impl Iterator<Item = String>) -> Result<Vec<Vec<u8>>> {
    let mut rng = rand::rng();
    keys.map(|key| {
        table
            .rowkey
            .encode_random(&key, &mut rng)
            .map_err(|err| anyhow!("{err}"))
    })
    .collect()
}

fn compute_splits(
    table: &TableConfig,
    regions: u32,
    algo: SplitAlgoArg,
    sample: Option<&Path>,
) -> Result<Vec<Vec<u8>>> {
    let splits = match algo {
        SplitAlgoArg::Hex => split::hex_string_split(regions)?,
        SplitAlgoArg::Uniform => split::uniform_split(regions)?,
        SplitAlgoArg::Decimal => split::decimal_string_split(regions)?,
        SplitAlgoArg::Codec => table.rowkey.codec_splits(regions).ok_or_else(|| {
            anyhow!(
                "table \"{}\": the rowkey design {} has no buckets to split on; use --algo hex, uniform, decimal or sampled",
                table.name,
                table.rowkey.describe()
            )
        })?,
        SplitAlgoArg::Sampled => {
            let rowkeys = match sample {
                Some(path) => encode_all(table, read_keys(path)?.into_iter())?,
                None => encode_all(table, sequential_keys(100_000))?,
            };
            split::sampled_splits(rowkeys, regions)
        }
    };
    Ok(splits)
}

/// The splits asked for on the command line, else the table's `[tables.splits]`, else codec
/// buckets when the design has them, else HexStringSplit; 10 regions unless told otherwise.
fn table_splits(
    table: &TableConfig,
    regions: Option<u32>,
    algo: Option<SplitAlgoArg>,
    sample: Option<&Path>,
) -> Result<Vec<Vec<u8>>> {
    use hbidx_schema::config::SplitConfig;
    let configured = table.splits.as_ref();
    if algo.is_none() && regions.is_none() {
        match configured {
            Some(SplitConfig::File { path }) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read SPLITS_FILE {path}"))?;
                return Ok(table.split_keys(Some(&text), None)?);
            }
            Some(SplitConfig::Explicit { .. }) => return Ok(table.split_keys(None, None)?),
            _ => {}
        }
    }
    let regions = regions
        .or_else(|| configured.and_then(SplitConfig::regions))
        .unwrap_or(10);
    let algo = match (algo, configured) {
        (Some(algo), _) => algo,
        (None, Some(SplitConfig::Hex { .. })) => SplitAlgoArg::Hex,
        (None, Some(SplitConfig::Uniform { .. })) => SplitAlgoArg::Uniform,
        (None, Some(SplitConfig::Decimal { .. })) => SplitAlgoArg::Decimal,
        (None, Some(SplitConfig::Codec { .. })) => SplitAlgoArg::Codec,
        (None, Some(SplitConfig::Sampled { .. })) => SplitAlgoArg::Sampled,
        (None, _) if table.rowkey.codec_splits(regions).is_some() => SplitAlgoArg::Codec,
        (None, _) => SplitAlgoArg::Hex,
    };
    compute_splits(table, regions, algo, sample)
}

pub fn splits(
    config_text: &str,
    table_name: &str,
    regions: Option<u32>,
    algo: Option<SplitAlgoArg>,
    sample: Option<&Path>,
) -> Result<()> {
    let config = parse(config_text)?;
    let table = table(&config, table_name)?;
    for split in table_splits(table, regions, algo, sample)? {
        println!("{}", printable(&split));
    }
    Ok(())
}

pub fn ddl(config_text: &str, table_name: &str) -> Result<()> {
    let config = parse(config_text)?;
    let table = table(&config, table_name)?;
    let splits = table_splits(table, None, None, None)?;
    println!("{}", hbidx_schema::ddl::create_statement(table, &splits));
    Ok(())
}

pub fn hotspot(
    config_text: &str,
    table_name: &str,
    sample: Option<&Path>,
    generate: Option<usize>,
    pattern: Pattern,
    regions: Option<u32>,
) -> Result<()> {
    let config = parse(config_text)?;
    let table = table(&config, table_name)?;
    let keys: Vec<String> = match (sample, generate) {
        (Some(path), _) => read_keys(path)?,
        (None, Some(n)) if n > 0 => match pattern {
            Pattern::Sequential => sequential_keys(n).collect(),
            Pattern::Random => random_keys(n).collect(),
        },
        (None, Some(_)) => bail!("--generate needs a positive number of keys"),
        (None, None) => bail!("give --sample FILE or --generate N"),
    };
    let map = RegionMap::new(table_splits(table, regions, None, None)?)?;
    let designed = encode_all(table, keys.iter().cloned())?;
    let plain: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
    let with_design = HotspotReport::compute(&map, designed.iter());
    let without = HotspotReport::compute(&map, plain.iter());
    println!(
        "table \"{}\", {} keys ({:?}), {} regions\n",
        table.name,
        keys.len(),
        pattern,
        map.region_count()
    );
    println!(
        "rowkey = {}:\n{}",
        table.rowkey.describe(),
        with_design.render(40)
    );
    println!(
        "rowkey = key (no prefix), for comparison:\n{}",
        without.render(40)
    );
    Ok(())
}

/// A client that sends `Authorization: Bearer <api_key>` (marked sensitive, so it never shows
/// in reqwest's debug output) on every request.
fn http_client(api_key: &str) -> Result<reqwest::blocking::Client> {
    let mut authorization = reqwest::header::HeaderValue::from_str(&format!("Bearer {api_key}"))
        .map_err(|_| anyhow!("--api-key: an API key must be printable ASCII"))?;
    authorization.set_sensitive(true);
    Ok(reqwest::blocking::Client::builder()
        .timeout(std::time::Duration::from_secs(30))
        .default_headers(reqwest::header::HeaderMap::from_iter([(
            reqwest::header::AUTHORIZATION,
            authorization,
        )]))
        .build()?)
}

/// Starts a job with `POST {server}{path}` and returns its id.
fn start_job(
    client: &reqwest::blocking::Client,
    server: &str,
    path: &str,
    body: serde_json::Value,
) -> Result<u64> {
    use anyhow::{anyhow, bail};
    let response = client
        .post(format!("{server}{path}"))
        .json(&body)
        .send()
        .with_context(|| format!("cannot reach the hbidx server at {server}"))?;
    let status = response.status();
    let body: serde_json::Value = response.json().unwrap_or_default();
    if !status.is_success() {
        bail!(
            "the server refused the job ({status}): {}",
            body["error"]["message"]
                .as_str()
                .unwrap_or("no reason given")
        );
    }
    body["id"]
        .as_u64()
        .ok_or_else(|| anyhow!("the server answered without a job id: {body}"))
}

/// Follows job `id` until it ends, drawing its progress; returns its final status.
fn follow_job(
    client: &reqwest::blocking::Client,
    server: &str,
    id: u64,
    unit: &str,
) -> Result<serde_json::Value> {
    use anyhow::bail;
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{{msg:10}} [{{bar:40}}] {{pos}}/{{len}} {unit} ({{per_sec}}, eta {{eta}})"
        ))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    loop {
        let job: serde_json::Value = client
            .get(format!("{server}/v1/jobs/{id}"))
            .send()
            .and_then(|r| r.json())
            .with_context(|| format!("following job {id}"))?;
        bar.set_length(job["total"].as_u64().unwrap_or(0));
        bar.set_position(job["done"].as_u64().unwrap_or(0));
        bar.set_message(job["phase"].as_str().unwrap_or("").to_string());
        match job["state"].as_str() {
            Some("succeeded") => {
                bar.finish_with_message("done");
                return Ok(job);
            }
            Some("failed") => {
                bar.abandon_with_message("failed");
                bail!(
                    "job {id} failed: {}",
                    job["error"].as_str().unwrap_or("no reason given")
                );
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    }
}

/// `hbidx reindex`: starts the job on `server` (with an admin key) and follows it.
pub fn reindex(server: &str, api_key: &str, table: &str, from: &str) -> Result<()> {
    let server = server.trim_end_matches('/');
    let client = http_client(api_key)?;
    let id = start_job(
        &client,
        server,
        &format!("/v1/tables/{table}/reindex"),
        serde_json::json!({ "from": from }),
    )?;
    let unit = if from == "store" { "rows" } else { "events" };
    let job = follow_job(&client, server, id, unit)?;
    println!(
        "reindexed table {table} from {from}: {} {unit}, shadow checked and swapped in (job {id})",
        job["done"]
    );
    if let Some(range) = describe_range(&job["range"]) {
        println!("  {range}");
    }
    Ok(())
}

/// A job's `range` (`[cluster]`: the shard it covered) in one line; `None` on a single instance.
fn describe_range(range: &serde_json::Value) -> Option<String> {
    let shard = range["shard"].as_u64()?;
    let start = match range["start"].as_str() {
        Some(key) if !key.is_empty() => format!("\"{key}\""),
        _ => "the table's start".to_string(),
    };
    let stop = match range["stop"].as_str() {
        Some(key) => format!("up to \"{key}\" (exclusive)"),
        None => "to the table's end".to_string(),
    };
    Some(format!(
        "shard {shard} of {}: rowkeys from {start} {stop}",
        range["shards"]
    ))
}

/// `hbidx verify`: runs the check on `server`, prints the drift report, returns the drift left
/// (after repairs, when asked for).
pub fn verify(
    server: &str,
    api_key: &str,
    table: &str,
    sample: Option<usize>,
    repair: bool,
) -> Result<u64> {
    let server = server.trim_end_matches('/');
    let client = http_client(api_key)?;
    let body = match sample {
        Some(n) => serde_json::json!({ "sample": n, "repair": repair }),
        None => serde_json::json!({ "full": true, "repair": repair }),
    };
    let id = start_job(&client, server, &format!("/v1/tables/{table}/verify"), body)?;
    let job = follow_job(&client, server, id, "rows")?;
    let report = &job["report"];
    println!(
        "drift report for table {table} ({} check, job {id})",
        report["mode"].as_str().unwrap_or("?")
    );
    if let Some(range) = describe_range(&job["range"]) {
        println!("  {range}");
    }
    println!(
        "  index rows checked: {}   store rows checked: {}",
        report["index_rows_checked"], report["store_rows_checked"]
    );
    let outside = report["outside_range"].as_u64().unwrap_or(0);
    if outside > 0 {
        println!(
            "  index rows outside this shard (not checked; reindex --from-store drops them): {outside}"
        );
    }
    let mut drift = 0;
    for (key, label) in [
        ("missing", "missing from the index"),
        ("ghosts", "ghosts in the index"),
        ("mismatches", "value mismatches"),
    ] {
        let count = report[key]["count"].as_u64().unwrap_or(0);
        drift += count;
        println!("  {label:24} {count}");
        if let Some(examples) = report[key]["examples"].as_array() {
            for example in examples {
                println!("      {}", example.as_str().unwrap_or_default());
            }
        }
    }
    let unfixable = report["unfixable"].as_u64().unwrap_or(0);
    if unfixable > 0 {
        println!("  not repairable by merge (index newer than store): {unfixable}");
    }
    if repair {
        let repaired = report["repaired"].as_u64().unwrap_or(0);
        println!("  repaired: {repaired}");
        drift = drift.saturating_sub(repaired);
    }
    Ok(drift)
}
