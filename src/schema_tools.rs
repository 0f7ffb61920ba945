//! The schema tools: `schema check`, `rowkey`, `splits`, `ddl`, `hotspot`. Thin wrappers over
//! the schema crate; all IO (reading config and sample files) happens here, not there.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use hbidx_schema::codec::printable;
use hbidx_schema::config::{HbidxConfig, StoreConfig, TableConfig};
use hbidx_schema::split::{self, HotspotReport, RegionMap};

use crate::config_file::{parse, read_config_text};

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

fn table<'a>(config: &'a HbidxConfig, name: &str) -> Result<&'a TableConfig> {
    config.table(name).ok_or_else(|| {
        let known: Vec<_> = config.tables.iter().map(|t| t.name.as_str()).collect();
        anyhow!(
            "unknown table \"{name}\"; the config has: {}",
            known.join(", ")
        )
    })
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
        StoreConfig::Embedded(embedded) => {
            println!(
                "  store: embedded (durability {})",
                embedded.durability.as_str()
            )
        }
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
