//! Validation of one `[[tables]]` entry: its raw serde structs (every value optional, numbers
//! as `i64`, so that validation, which knows the table and field, reports what is missing or
//! out of range) and the checks that turn them into a [`TableConfig`].

use serde::Deserialize;

use super::error::TableError;
use super::table::*;
use crate::codec::{CodecError, HashAlgo, RowkeyCodec, RowkeyPart, TsFormat, decimal_digits};
use crate::model::split_column;
use crate::split::{MAX_REGIONS, parse_split_list};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTable {
    name: Option<String>,
    namespace: Option<String>,
    #[serde(default)]
    families: Vec<RawFamily>,
    rowkey: Option<RawRowkey>,
    #[serde(default)]
    fields: Vec<RawField>,
    /// Columns whose latest values the index keeps beside the indexed fields.
    #[serde(default)]
    covered: Vec<String>,
    splits: Option<RawSplits>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFamily {
    name: Option<String>,
    versions: Option<i64>,
    ttl: Option<toml::Value>,
    compression: Option<String>,
    bloomfilter: Option<String>,
    bloom_prefix_length: Option<i64>,
    blocksize: Option<i64>,
    data_block_encoding: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRowkey {
    parts: Option<Vec<RawPart>>,
}

/// One rowkey part. Flat rather than a tagged enum so validation can say which key does not
/// apply to which kind, naming the table and part index.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPart {
    kind: Option<String>,
    algo: Option<String>,
    width: Option<i64>,
    separator: Option<String>,
    binary: Option<bool>,
    buckets: Option<i64>,
    hash: Option<String>,
    regions: Option<i64>,
    vnodes: Option<i64>,
    reverse: Option<bool>,
    format: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawField {
    name: Option<String>,
    kind: Option<String>,
    column: Option<String>,
    phone_suffix_min: Option<i64>,
    blind: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSplits {
    algo: Option<String>,
    regions: Option<i64>,
    keys: Option<Vec<String>>,
    file: Option<String>,
}

/// HBase table qualifiers: `[A-Za-z0-9_.-]`, not starting with `.` or `-`
/// (`TableName.isLegalTableQualifierName`).
fn check_table_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("name is empty".into());
    }
    if name.len() > 255 {
        return Err("name is longer than 255 characters".into());
    }
    if name.starts_with('.') || name.starts_with('-') {
        return Err("name must not start with '.' or '-'".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "name contains {bad:?}; hbase table names use only letters, digits, '_', '.' and '-'"
        ));
    }
    Ok(())
}

/// HBase namespaces: `[A-Za-z0-9_]` (`TableName.isLegalNamespaceName`); `hbase` is the system
/// namespace and not for user tables.
fn check_namespace(namespace: &str) -> Result<(), String> {
    if namespace.is_empty() {
        return Err("namespace is empty".into());
    }
    if !namespace
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(format!(
            "namespace {namespace:?} may only use letters, digits and '_'"
        ));
    }
    if namespace == "hbase" {
        return Err("namespace \"hbase\" is reserved for hbase's system tables".into());
    }
    Ok(())
}

pub(crate) fn validate_table(raw: RawTable) -> Result<TableConfig, TableError> {
    let name = raw.name.ok_or(TableError::MissingName)?;
    let table_error = |table: &str, reason: String| TableError::Table {
        table: table.to_owned(),
        reason,
    };
    check_table_name(&name).map_err(|reason| table_error(&name, reason))?;
    let namespace = raw
        .namespace
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
    check_namespace(&namespace).map_err(|reason| table_error(&name, reason))?;
    let full_name = if namespace == DEFAULT_NAMESPACE {
        name.clone()
    } else {
        format!("{namespace}:{name}")
    };

    if raw.families.is_empty() {
        return Err(table_error(
            &full_name,
            "declares no column families; add at least one [[tables.families]]".into(),
        ));
    }
    let mut families = Vec::with_capacity(raw.families.len());
    for (family_index, raw_family) in raw.families.into_iter().enumerate() {
        let family = validate_family(&full_name, family_index, raw_family)?;
        if families
            .iter()
            .any(|f: &FamilyConfig| f.name == family.name)
        {
            return Err(TableError::Family {
                table: full_name,
                index: family_index,
                family: family.name,
                reason: "is declared more than once".into(),
            });
        }
        families.push(family);
    }

    let raw_rowkey = raw.rowkey.ok_or_else(|| {
        table_error(
            &full_name,
            "has no [tables.rowkey]; declare its parts, e.g. parts = [{ kind = \"key\" }]".into(),
        )
    })?;
    let raw_parts = raw_rowkey
        .parts
        .ok_or_else(|| table_error(&full_name, "[tables.rowkey] has no parts".into()))?;
    let parts = raw_parts
        .into_iter()
        .enumerate()
        .map(|(part_index, raw_part)| build_part(&full_name, part_index, raw_part))
        .collect::<Result<Vec<_>, _>>()?;
    let rowkey = RowkeyCodec::new(full_name.clone(), parts)?;

    let mut fields: Vec<IndexedField> = Vec::with_capacity(raw.fields.len());
    for (field_index, raw_field) in raw.fields.into_iter().enumerate() {
        let field = validate_field(&full_name, field_index, raw_field, &families)?;
        let field_error = |reason: String| TableError::Field {
            table: full_name.clone(),
            index: field_index,
            field: field.name.clone(),
            reason,
        };
        if fields.iter().any(|f| f.name == field.name) {
            return Err(field_error("is declared more than once".into()));
        }
        if let Some(other) = fields.iter().find(|f| f.column == field.column) {
            return Err(field_error(format!(
                "column {:?} is already indexed by field {:?}",
                field.column, other.name
            )));
        }
        fields.push(field);
    }

    let covered = validate_covered(&full_name, raw.covered, &families, &fields)?;

    let splits = raw
        .splits
        .map(|raw_splits| validate_splits_config(&full_name, raw_splits, &rowkey))
        .transpose()?;

    Ok(TableConfig {
        name,
        namespace,
        families,
        rowkey,
        fields,
        covered,
        splits,
    })
}

/// Column family names: kept to `[A-Za-z0-9_.-]`, not starting with `.`, so they are safe in
/// `family:qualifier` strings, shell statements and file names.
fn check_family_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("name is empty".into());
    }
    if name.starts_with('.') {
        return Err("name must not start with '.'".into());
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "name contains {bad:?}; use only letters, digits, '_', '.' and '-'"
        ));
    }
    Ok(())
}

const MIN_BLOCKSIZE: i64 = 1024;
const MAX_BLOCKSIZE: i64 = 16 * 1024 * 1024;
const MAX_TTL_SECONDS: i64 = i32::MAX as i64;

fn validate_family(table: &str, index: usize, raw: RawFamily) -> Result<FamilyConfig, TableError> {
    let name = raw.name.ok_or_else(|| TableError::Table {
        table: table.to_owned(),
        reason: format!("families[{index}] has no name"),
    })?;
    let error = |reason: String| TableError::Family {
        table: table.to_owned(),
        index,
        family: name.clone(),
        reason,
    };
    check_family_name(&name).map_err(error)?;

    let versions = match raw.versions {
        None => 1,
        Some(v) if (1..=i64::from(i32::MAX)).contains(&v) => v as u32,
        Some(v) => {
            return Err(error(format!(
                "versions {v} is out of range 1..={}",
                i32::MAX
            )));
        }
    };
    let ttl = match raw.ttl {
        None => None,
        Some(toml::Value::Integer(seconds)) if (1..=MAX_TTL_SECONDS).contains(&seconds) => {
            Some(Ttl::Seconds(seconds as u64))
        }
        Some(toml::Value::Integer(seconds)) => {
            return Err(error(format!(
                "ttl {seconds} is out of range 1..={MAX_TTL_SECONDS} seconds"
            )));
        }
        Some(toml::Value::String(text)) if text.eq_ignore_ascii_case("FOREVER") => {
            Some(Ttl::Forever)
        }
        Some(other) => {
            return Err(error(format!(
                "ttl must be a number of seconds or \"FOREVER\", got {other}"
            )));
        }
    };
    let compression = raw
        .compression
        .map(|text| {
            Compression::parse(&text).ok_or_else(|| {
                error(format!(
                    "compression {text:?} is not one of {}",
                    Compression::choices()
                ))
            })
        })
        .transpose()?;
    let bloomfilter = raw
        .bloomfilter
        .map(|text| {
            BloomFilter::parse(&text).ok_or_else(|| {
                error(format!(
                    "bloomfilter {text:?} is not one of {}",
                    BloomFilter::choices()
                ))
            })
        })
        .transpose()?;
    let bloom_prefix_length = match (bloomfilter, raw.bloom_prefix_length) {
        (Some(BloomFilter::RowPrefixFixedLength), Some(length))
            if (1..=i64::from(i16::MAX)).contains(&length) =>
        {
            Some(length as u32)
        }
        (Some(BloomFilter::RowPrefixFixedLength), Some(length)) => {
            return Err(error(format!(
                "bloom_prefix_length {length} is out of range 1..=32767"
            )));
        }
        (Some(BloomFilter::RowPrefixFixedLength), None) => {
            return Err(error(
                "bloomfilter ROWPREFIX_FIXED_LENGTH needs bloom_prefix_length (hbase refuses the table without it)".into(),
            ));
        }
        (_, Some(_)) => {
            return Err(error(
                "bloom_prefix_length only applies to bloomfilter ROWPREFIX_FIXED_LENGTH".into(),
            ));
        }
        (_, None) => None,
    };
    let blocksize = match raw.blocksize {
        None => None,
        Some(size) if (MIN_BLOCKSIZE..=MAX_BLOCKSIZE).contains(&size) => Some(size as u32),
        Some(size) => {
            return Err(error(format!(
                "blocksize {size} is out of range {MIN_BLOCKSIZE}..={MAX_BLOCKSIZE} bytes"
            )));
        }
    };
    let data_block_encoding = raw
        .data_block_encoding
        .map(|text| {
            DataBlockEncoding::parse(&text).ok_or_else(|| {
                error(format!(
                    "data_block_encoding {text:?} is not one of {}",
                    DataBlockEncoding::choices()
                ))
            })
        })
        .transpose()?;
    Ok(FamilyConfig {
        name,
        versions,
        ttl,
        compression,
        bloomfilter,
        bloom_prefix_length,
        blocksize,
        data_block_encoding,
    })
}

const PART_KINDS: &str = "hash_prefix, random_salt, hash_salt, modulo, ring, key, reverse_ts";

/// Turns one raw rowkey part into a [`RowkeyPart`]; ranges are checked by [`RowkeyCodec::new`].
fn build_part(table: &str, index: usize, raw: RawPart) -> Result<RowkeyPart, CodecError> {
    let error = |kind: &'static str, reason: String| CodecError::InvalidDesign {
        table: table.to_owned(),
        part: index,
        kind,
        reason,
    };
    let kind: &'static str = match raw.kind.as_deref() {
        None => {
            return Err(error(
                "unknown",
                format!("has no kind; use one of {PART_KINDS}"),
            ));
        }
        Some(text) => match text {
            "hash_prefix" => "hash_prefix",
            "random_salt" => "random_salt",
            "hash_salt" => "hash_salt",
            "modulo" => "modulo",
            "ring" => "ring",
            "key" => "key",
            "reverse_ts" => "reverse_ts",
            other => {
                return Err(error(
                    "unknown",
                    format!("kind {other:?} is not one of {PART_KINDS}"),
                ));
            }
        },
    };
    let allowed: &[&str] = match kind {
        "hash_prefix" => &["algo", "width", "separator", "binary"],
        "random_salt" => &["buckets", "width", "separator"],
        "hash_salt" => &["buckets", "hash", "width", "separator"],
        "modulo" => &["buckets"],
        "ring" => &["regions", "vnodes", "width", "separator"],
        "key" => &["reverse"],
        _ => &["format"],
    };
    let present = [
        ("algo", raw.algo.is_some()),
        ("width", raw.width.is_some()),
        ("separator", raw.separator.is_some()),
        ("binary", raw.binary.is_some()),
        ("buckets", raw.buckets.is_some()),
        ("hash", raw.hash.is_some()),
        ("regions", raw.regions.is_some()),
        ("vnodes", raw.vnodes.is_some()),
        ("reverse", raw.reverse.is_some()),
        ("format", raw.format.is_some()),
    ];
    if let Some((key, _)) = present
        .iter()
        .find(|(key, is_set)| *is_set && !allowed.contains(key))
    {
        return Err(error(
            kind,
            format!(
                "`{key}` does not apply to {kind}; it takes {}",
                allowed.join(", ")
            ),
        ));
    }
    let number = |key: &str, value: Option<i64>| -> Result<Option<u32>, CodecError> {
        value
            .map(|v| {
                u32::try_from(v)
                    .map_err(|_| error(kind, format!("{key} {v} must be a non-negative integer")))
            })
            .transpose()
    };
    let required = |key: &str, value: Option<i64>| -> Result<u32, CodecError> {
        number(key, value)?.ok_or_else(|| error(kind, format!("needs `{key}`")))
    };
    let hash_algo = |key: &str, value: Option<&str>, default: HashAlgo| match value {
        None => Ok(default),
        Some(text) => HashAlgo::parse(text).ok_or_else(|| {
            error(
                kind,
                format!("{key} {text:?} is not one of md5, xxh64, xxh3, murmur3"),
            )
        }),
    };
    let separator = raw.separator.clone().unwrap_or_default();
    let part = match kind {
        "hash_prefix" => {
            let algo = hash_algo("algo", raw.algo.as_deref(), HashAlgo::Md5)?;
            RowkeyPart::HashPrefix {
                algo,
                width: required("width", raw.width)? as usize,
                binary: raw.binary.unwrap_or(false),
                separator,
            }
        }
        "random_salt" | "hash_salt" => {
            let buckets = required("buckets", raw.buckets)?;
            let width = match number("width", raw.width)? {
                Some(width) => width as usize,
                None => decimal_digits(u64::from(buckets.saturating_sub(1))),
            };
            if kind == "random_salt" {
                RowkeyPart::RandomSalt {
                    buckets,
                    width,
                    separator,
                }
            } else {
                RowkeyPart::HashSalt {
                    buckets,
                    hash: hash_algo("hash", raw.hash.as_deref(), HashAlgo::Murmur3)?,
                    width,
                    separator,
                }
            }
        }
        "modulo" => RowkeyPart::Modulo {
            buckets: required("buckets", raw.buckets)?,
        },
        "ring" => {
            let regions = required("regions", raw.regions)?;
            let width = match number("width", raw.width)? {
                Some(width) => width as usize,
                None => decimal_digits(u64::from(regions.saturating_sub(1))),
            };
            RowkeyPart::Ring {
                regions,
                vnodes: number("vnodes", raw.vnodes)?.unwrap_or(160),
                width,
                separator,
            }
        }
        "key" => RowkeyPart::Key {
            reverse: raw.reverse.unwrap_or(false),
        },
        _ => RowkeyPart::ReverseTs {
            format: match raw.format.as_deref() {
                None | Some("binary") => TsFormat::Binary,
                Some("decimal") => TsFormat::Decimal,
                Some(other) => {
                    return Err(error(
                        kind,
                        format!("format {other:?} is not one of binary, decimal"),
                    ));
                }
            },
        },
    };
    Ok(part)
}

/// Field names are identifiers because they become index field names and URL path segments.
fn check_field_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    if !first_ok
        || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        || name.len() > 64
    {
        return Err("name must match [a-z][a-z0-9_]* (at most 64 characters)".into());
    }
    Ok(())
}

fn validate_field(
    table: &str,
    index: usize,
    raw: RawField,
    families: &[FamilyConfig],
) -> Result<IndexedField, TableError> {
    let name = raw.name.ok_or_else(|| TableError::Table {
        table: table.to_owned(),
        reason: format!("fields[{index}] has no name"),
    })?;
    let error = |reason: String| TableError::Field {
        table: table.to_owned(),
        index,
        field: name.clone(),
        reason,
    };
    check_field_name(&name).map_err(error)?;
    let kind_text = raw
        .kind
        .ok_or_else(|| error("has no kind; use phone, idcard, name or keyword".into()))?;
    let kind = FieldKind::parse(&kind_text).ok_or_else(|| {
        error(format!(
            "kind {kind_text:?} is not one of phone, idcard, name, keyword"
        ))
    })?;
    let column = raw
        .column
        .ok_or_else(|| error("has no column; write it as \"family:qualifier\"".into()))?;
    let (family, qualifier) = split_column(&column).ok_or_else(|| {
        error(format!(
            "column {column:?} is not of the form \"family:qualifier\""
        ))
    })?;
    if qualifier.is_empty() {
        return Err(error(format!("column {column:?} has an empty qualifier")));
    }
    if !families.iter().any(|f| f.name == family) {
        return Err(error(format!(
            "column {column:?} uses family {family:?} which is not declared"
        )));
    }
    let phone_suffix_min = match (kind, raw.phone_suffix_min) {
        (_, None) => DEFAULT_PHONE_SUFFIX_MIN,
        (FieldKind::Phone, Some(n)) if (3..=8).contains(&n) => n as usize,
        (FieldKind::Phone, Some(n)) => {
            return Err(error(format!("phone_suffix_min {n} is out of range 3..=8")));
        }
        (other, Some(_)) => {
            return Err(error(format!(
                "phone_suffix_min only applies to phone fields, this one is {}",
                other.as_str()
            )));
        }
    };
    let blind = raw.blind.unwrap_or(false);
    if blind && kind == FieldKind::Name {
        // Name lookups are prefix, substring and pinyin matches: none of them works on keyed
        // hashes of whole values.
        return Err(TableError::FieldKey {
            table: table.to_owned(),
            index,
            field: name,
            key: "blind",
            reason: "name fields can't be blind: their prefix, partial and pinyin lookups need \
                     the name itself in the index; blind = true is for phone, idcard and \
                     keyword fields"
                .into(),
        });
    }
    Ok(IndexedField {
        name,
        kind,
        column,
        phone_suffix_min,
        blind,
        blind_key: None,
    })
}

/// `covered = ["family:qualifier", …]`: declared families, each column once, none indexed.
fn validate_covered(
    table: &str,
    raw: Vec<String>,
    families: &[FamilyConfig],
    fields: &[IndexedField],
) -> Result<Vec<String>, TableError> {
    let mut covered: Vec<String> = Vec::with_capacity(raw.len());
    for (index, column) in raw.into_iter().enumerate() {
        let error = |reason: String| TableError::Covered {
            table: table.to_owned(),
            index,
            column: column.clone(),
            reason,
        };
        let Some((family, qualifier)) = split_column(&column) else {
            return Err(error("is not of the form \"family:qualifier\"".into()));
        };
        if qualifier.is_empty() {
            return Err(error("has an empty qualifier".into()));
        }
        if !families.iter().any(|f| f.name == family) {
            return Err(error(format!("family {family:?} is not declared")));
        }
        if let Some(field) = fields.iter().find(|f| f.column == column) {
            return Err(error(format!(
                "is indexed by field {:?}, whose value the index keeps anyway; remove it from covered",
                field.name
            )));
        }
        if covered.contains(&column) {
            return Err(error("is listed more than once".into()));
        }
        covered.push(column);
    }
    Ok(covered)
}

const SPLIT_ALGOS: &str = "hex, uniform, decimal, codec, sampled, explicit, file";

fn validate_splits_config(
    table: &str,
    raw: RawSplits,
    rowkey: &RowkeyCodec,
) -> Result<SplitConfig, TableError> {
    let error = |reason: String| TableError::Splits {
        table: table.to_owned(),
        reason,
    };
    let algo = raw
        .algo
        .ok_or_else(|| error(format!("has no algo; use one of {SPLIT_ALGOS}")))?;
    if !SPLIT_ALGOS.split(", ").any(|known| known == algo) {
        return Err(error(format!("algo {algo:?} is not one of {SPLIT_ALGOS}")));
    }
    let takes_regions = matches!(
        algo.as_str(),
        "hex" | "uniform" | "decimal" | "codec" | "sampled"
    );
    let regions = match (takes_regions, raw.regions) {
        (true, Some(n)) if (2..=i64::from(MAX_REGIONS)).contains(&n) => n as u32,
        (true, Some(n)) => {
            return Err(error(format!(
                "regions {n} is out of range 2..={MAX_REGIONS}"
            )));
        }
        (true, None) => return Err(error(format!("algo {algo:?} needs regions"))),
        (false, Some(_)) => {
            return Err(error(format!("regions does not apply to algo {algo:?}")));
        }
        (false, None) => 0,
    };
    if raw.keys.is_some() && algo != "explicit" {
        return Err(error(format!(
            "keys only apply to algo \"explicit\", not {algo:?}"
        )));
    }
    if raw.file.is_some() && algo != "file" {
        return Err(error(format!(
            "file only applies to algo \"file\", not {algo:?}"
        )));
    }
    let config = match algo.as_str() {
        "hex" => SplitConfig::Hex { regions },
        "uniform" => SplitConfig::Uniform { regions },
        "decimal" => SplitConfig::Decimal { regions },
        "sampled" => SplitConfig::Sampled { regions },
        "codec" => {
            let Some(space) = rowkey.split_space() else {
                return Err(error(format!(
                    "algo \"codec\" needs a rowkey prefix part, and {:?} has none; use \"sampled\" or an explicit list",
                    rowkey.describe()
                )));
            };
            if u128::from(regions) > space {
                return Err(error(format!(
                    "regions {regions} is more than the {space} distinct prefixes of {:?}; the extra regions would stay empty",
                    rowkey.describe()
                )));
            }
            SplitConfig::Codec { regions }
        }
        "explicit" => {
            let keys = raw
                .keys
                .ok_or_else(|| error("algo \"explicit\" needs keys = [...]".into()))?;
            if keys.is_empty() {
                return Err(error(
                    "keys is empty; omit [tables.splits] for one region".into(),
                ));
            }
            let keys = parse_split_list(&keys).map_err(|e| error(e.to_string()))?;
            SplitConfig::Explicit { keys }
        }
        "file" => {
            let path = raw
                .file
                .filter(|path| !path.is_empty())
                .ok_or_else(|| error("algo \"file\" needs file = \"<path>\"".into()))?;
            SplitConfig::File { path }
        }
        other => {
            return Err(error(format!("algo {other:?} is not one of {SPLIT_ALGOS}")));
        }
    };
    Ok(config)
}
