//! The table config: TOML text → raw serde structs → validated, typed [`Config`].
//!
//! Parsing is two steps, as in Quickwit: serde reads the text into raw structs that reject
//! unknown keys (`deny_unknown_fields`, so a typo such as `compresion` is an error rather than a
//! silently ignored setting), then `validate` checks every value and builds the typed structs.
//! Nothing here does IO: the CLI reads files and passes text, including a splits file.
//!
//! Raw structs keep almost every value optional and numbers as `i64` so that validation, not
//! serde, reports missing and out-of-range values: only validation knows which table and field
//! to name in the message.
//!
//! The top-level sections `store`, `sources`, `server`, `indexer` and `security` belong to other
//! crates; they are accepted and kept as raw [`toml::Value`]s for those crates to parse.
//!
//! ```toml
//! [[tables]]
//! name = "user"
//!
//! [[tables.families]]
//! name = "info"
//! compression = "SNAPPY"
//!
//! [tables.rowkey]
//! parts = [ { kind = "hash_prefix", algo = "md5", width = 6 }, { kind = "key" } ]
//!
//! [[tables.fields]]
//! name = "phone"
//! kind = "phone"
//! column = "info:phone"
//!
//! [tables.splits]
//! algo = "codec"
//! regions = 10
//! ```

use std::collections::HashSet;

use serde::Deserialize;

use crate::codec::{CodecError, HashAlgo, RowkeyCodec, RowkeyPart, TsFormat, decimal_digits};
use crate::model::split_column;
use crate::normalize::{
    NormalizeError, normalize_idcard, normalize_keyword, normalize_name, normalize_phone,
};
use crate::split::{
    MAX_REGIONS, SplitError, decimal_string_split, hex_string_split, parse_split_list,
    parse_splits_file, sampled_splits, uniform_split, validate_splits,
};

/// Everything that can be wrong with a config. Messages name the table, family, field or key
/// and say why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The text is not TOML, or has a key the config does not know.
    #[error("invalid config toml{location}: {message}")]
    Toml {
        /// ` at line L, column C`, or empty when the parser gave no position.
        location: String,
        message: String,
    },
    /// A `[[tables]]` entry without `name`.
    #[error("tables[{index}] has no name")]
    MissingTableName { index: usize },
    /// A table-level problem.
    #[error("table {table:?}: {reason}")]
    Table { table: String, reason: String },
    /// A column family problem.
    #[error("table {table:?}: family {family:?}: {reason}")]
    Family {
        table: String,
        family: String,
        reason: String,
    },
    /// An indexed field problem.
    #[error("table {table:?}: field {field:?}: {reason}")]
    Field {
        table: String,
        field: String,
        reason: String,
    },
    /// A `[tables.splits]` problem.
    #[error("table {table:?}: splits: {reason}")]
    Splits { table: String, reason: String },
    /// An invalid rowkey design.
    #[error(transparent)]
    Rowkey(#[from] CodecError),
    /// Invalid split keys.
    #[error(transparent)]
    Split(#[from] SplitError),
    /// A `[memory]` problem.
    #[error("memory.{key}: {reason}")]
    Memory { key: String, reason: String },
}

// ---------------------------------------------------------------------------------------------
// Raw structs: what serde reads.

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    tables: Vec<RawTable>,
    store: Option<toml::Value>,
    sources: Option<toml::Value>,
    server: Option<toml::Value>,
    indexer: Option<toml::Value>,
    security: Option<toml::Value>,
    memory: Option<crate::memory::RawMemory>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
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
struct RawFamily {
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
struct RawRowkey {
    parts: Option<Vec<RawPart>>,
}

/// One rowkey part. Flat rather than a tagged enum so validation can say which key does not
/// apply to which kind, naming the table and part index.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPart {
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
struct RawField {
    name: Option<String>,
    kind: Option<String>,
    column: Option<String>,
    phone_suffix_min: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSplits {
    algo: Option<String>,
    regions: Option<i64>,
    keys: Option<Vec<String>>,
    file: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Typed config.

/// A validated config file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub tables: Vec<TableConfig>,
    /// `[store]`, owned by the store crate.
    pub raw_store: Option<toml::Value>,
    /// `[sources]`, owned by the indexer's sources.
    pub raw_sources: Option<toml::Value>,
    /// `[server]`, owned by the query service.
    pub raw_server: Option<toml::Value>,
    /// `[indexer]`, owned by the indexer.
    pub raw_indexer: Option<toml::Value>,
    /// `[security]`, owned by the query service.
    pub raw_security: Option<toml::Value>,
    /// `[memory]`: the process's memory budget and its split.
    pub memory: crate::memory::MemoryBudget,
}

impl Config {
    /// The table called `name`, either its bare name or its full `ns:name`.
    pub fn table(&self, name: &str) -> Option<&TableConfig> {
        self.tables
            .iter()
            .find(|table| table.name == name || table.full_name() == name)
    }
}

/// One HBase table and how hbidx indexes it.
#[derive(Debug, Clone, PartialEq)]
pub struct TableConfig {
    pub name: String,
    pub namespace: String,
    pub families: Vec<FamilyConfig>,
    pub rowkey: RowkeyCodec,
    pub fields: Vec<IndexedField>,
    /// Covered columns (Phoenix's `INCLUDE` columns): `family:qualifier`s whose latest values
    /// the index keeps beside the indexed fields, so a lookup that asks only for covered and
    /// indexed columns is answered from the index alone. Never an indexed column (those are
    /// kept anyway).
    pub covered: Vec<String>,
    pub splits: Option<SplitConfig>,
}

/// Namespace HBase uses when none is given; `full_name` leaves it out, as HBase prints it.
pub const DEFAULT_NAMESPACE: &str = "default";

impl TableConfig {
    /// `ns:table`, or just `table` in the default namespace (how HBase names it).
    pub fn full_name(&self) -> String {
        if self.namespace == DEFAULT_NAMESPACE {
            self.name.clone()
        } else {
            format!("{}:{}", self.namespace, self.name)
        }
    }

    /// The indexed field called `name`.
    pub fn field(&self, name: &str) -> Option<&IndexedField> {
        self.fields.iter().find(|field| field.name == name)
    }

    /// The columns the index keeps the latest value of: every indexed field's, then the
    /// covered ones.
    pub fn kept_columns(&self) -> impl Iterator<Item = &str> + '_ {
        self.fields
            .iter()
            .map(|field| field.column.as_str())
            .chain(self.covered.iter().map(String::as_str))
    }

    /// Whether the index keeps `column`'s latest value (an indexed or covered column).
    pub fn keeps_column(&self, column: &str) -> bool {
        self.kept_columns().any(|kept| kept == column)
    }

    /// Indexed fields of one kind, in config order.
    pub fn fields_of_kind(&self, kind: FieldKind) -> impl Iterator<Item = &IndexedField> + '_ {
        self.fields.iter().filter(move |field| field.kind == kind)
    }

    /// The column family called `name`.
    pub fn family(&self, name: &str) -> Option<&FamilyConfig> {
        self.families.iter().find(|family| family.name == name)
    }

    /// The split keys `[tables.splits]` asks for (none without that section).
    ///
    /// `algo = "file"` needs `file_text` (the CLI reads the file) and `algo = "sampled"` needs
    /// `sample_rowkeys` (encoded rowkeys of a sample); other algorithms ignore both.
    pub fn split_keys(
        &self,
        file_text: Option<&str>,
        sample_rowkeys: Option<Vec<Vec<u8>>>,
    ) -> Result<Vec<Vec<u8>>, SplitError> {
        let Some(splits) = &self.splits else {
            return Ok(Vec::new());
        };
        let missing = |needs| SplitError::MissingInput {
            table: self.full_name(),
            algo: splits.algo(),
            needs,
        };
        let keys = match splits {
            SplitConfig::Hex { regions } => hex_string_split(*regions)?,
            SplitConfig::Uniform { regions } => uniform_split(*regions)?,
            SplitConfig::Decimal { regions } => decimal_string_split(*regions)?,
            SplitConfig::Codec { regions } => {
                self.rowkey
                    .codec_splits(*regions)
                    .ok_or_else(|| SplitError::NoCodecPrefix {
                        table: self.full_name(),
                    })?
            }
            SplitConfig::Sampled { regions } => {
                let samples = sample_rowkeys
                    .ok_or_else(|| missing("sample rowkeys, which the caller encodes"))?;
                sampled_splits(samples, *regions)
            }
            SplitConfig::Explicit { keys } => keys.clone(),
            SplitConfig::File { .. } => {
                let text = file_text
                    .ok_or_else(|| missing("the splits file text, which the caller reads"))?;
                parse_splits_file(text)?
            }
        };
        validate_splits(&keys)?;
        Ok(keys)
    }
}

/// HBase column family properties. Unset options are left to HBase's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyConfig {
    pub name: String,
    /// `VERSIONS`; 1 when not configured (HBase's default since 0.96).
    pub versions: u32,
    pub ttl: Option<Ttl>,
    pub compression: Option<Compression>,
    pub bloomfilter: Option<BloomFilter>,
    /// `RowPrefixBloomFilter.prefix_length`, required by `ROWPREFIX_FIXED_LENGTH` (HBase refuses
    /// the table without it) and refused otherwise.
    pub bloom_prefix_length: Option<u32>,
    pub blocksize: Option<u32>,
    pub data_block_encoding: Option<DataBlockEncoding>,
}

/// HBase column family TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// Seconds, 1..=2147483647 (HBase stores an `int`; the maximum means forever).
    Seconds(u64),
    /// Never expire (`TTL => 'FOREVER'`).
    Forever,
}

/// Declares a closed set of HBase option values, spelled as HBase spells them.
macro_rules! hbase_choice {
    ($(#[$doc:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            /// Every value, for messages and docs.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The HBase spelling (uppercase).
            pub fn as_str(&self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            /// Parses a value case-insensitively.
            pub fn parse(text: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|v| v.as_str().eq_ignore_ascii_case(text))
            }

            fn choices() -> String {
                Self::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(", ")
            }
        }
    };
}

hbase_choice!(
    /// `COMPRESSION` codecs HBase ships.
    Compression {
        None => "NONE",
        Snappy => "SNAPPY",
        Lz4 => "LZ4",
        Gz => "GZ",
        Zstd => "ZSTD",
        Lzo => "LZO",
    }
);

hbase_choice!(
    /// `BLOOMFILTER` types.
    BloomFilter {
        None => "NONE",
        Row => "ROW",
        RowCol => "ROWCOL",
        RowPrefixFixedLength => "ROWPREFIX_FIXED_LENGTH",
    }
);

hbase_choice!(
    /// `DATA_BLOCK_ENCODING` types.
    DataBlockEncoding {
        None => "NONE",
        Prefix => "PREFIX",
        Diff => "DIFF",
        FastDiff => "FAST_DIFF",
        RowIndexV1 => "ROW_INDEX_V1",
    }
);

/// What an indexed field holds; decides how values are normalised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldKind {
    Phone,
    Idcard,
    Name,
    Keyword,
}

impl FieldKind {
    /// Every kind.
    pub const ALL: [FieldKind; 4] = [
        FieldKind::Phone,
        FieldKind::Idcard,
        FieldKind::Name,
        FieldKind::Keyword,
    ];

    /// The name used in config.
    pub fn as_str(&self) -> &'static str {
        match self {
            FieldKind::Phone => "phone",
            FieldKind::Idcard => "idcard",
            FieldKind::Name => "name",
            FieldKind::Keyword => "keyword",
        }
    }

    /// Parses a config name.
    pub fn parse(text: &str) -> Option<FieldKind> {
        FieldKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }

    /// Normalises a raw value of this kind (see [`crate::normalize`]).
    pub fn normalize(&self, raw: &str) -> Result<String, NormalizeError> {
        match self {
            FieldKind::Phone => normalize_phone(raw),
            FieldKind::Idcard => normalize_idcard(raw),
            FieldKind::Name => normalize_name(raw),
            FieldKind::Keyword => normalize_keyword(raw),
        }
    }
}

/// Default `phone_suffix_min`: the last 4 digits, what people quote from a phone number.
pub const DEFAULT_PHONE_SUFFIX_MIN: usize = 4;

/// A column whose values are indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedField {
    pub name: String,
    pub kind: FieldKind,
    /// `family:qualifier`, e.g. `info:phone`.
    pub column: String,
    /// Shortest phone suffix a lookup may search by (3..=8); only meaningful for phone fields.
    pub phone_suffix_min: usize,
}

impl IndexedField {
    /// The column family part of `column`.
    pub fn family(&self) -> &str {
        split_column(&self.column).map_or("", |(family, _)| family)
    }

    /// The qualifier part of `column`.
    pub fn qualifier(&self) -> &str {
        split_column(&self.column).map_or("", |(_, qualifier)| qualifier)
    }
}

/// How a table is pre-split (`[tables.splits]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitConfig {
    /// HBase `HexStringSplit`.
    Hex { regions: u32 },
    /// HBase `UniformSplit`.
    Uniform { regions: u32 },
    /// HBase `DecimalStringSplit`.
    Decimal { regions: u32 },
    /// The rowkey design's prefix buckets.
    Codec { regions: u32 },
    /// Quantiles of sample rowkeys supplied by the caller.
    Sampled { regions: u32 },
    /// Keys listed in the config (escaped like `Bytes.toStringBinary`), sorted.
    Explicit { keys: Vec<Vec<u8>> },
    /// A splits file; only the path is stored, the CLI reads it.
    File { path: String },
}

impl SplitConfig {
    /// The `algo` name.
    pub fn algo(&self) -> &'static str {
        match self {
            SplitConfig::Hex { .. } => "hex",
            SplitConfig::Uniform { .. } => "uniform",
            SplitConfig::Decimal { .. } => "decimal",
            SplitConfig::Codec { .. } => "codec",
            SplitConfig::Sampled { .. } => "sampled",
            SplitConfig::Explicit { .. } => "explicit",
            SplitConfig::File { .. } => "file",
        }
    }

    /// The configured region count, for the algorithms that take one.
    pub fn regions(&self) -> Option<u32> {
        match self {
            SplitConfig::Hex { regions }
            | SplitConfig::Uniform { regions }
            | SplitConfig::Decimal { regions }
            | SplitConfig::Codec { regions }
            | SplitConfig::Sampled { regions } => Some(*regions),
            SplitConfig::Explicit { .. } | SplitConfig::File { .. } => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing and validation.

/// Parses and validates a config file's text.
pub fn parse_config(toml_text: &str) -> Result<Config, SchemaError> {
    let raw: RawConfig = toml::from_str(toml_text).map_err(|err| toml_error(toml_text, &err))?;
    let mut tables = Vec::with_capacity(raw.tables.len());
    let mut seen = HashSet::new();
    for (index, raw_table) in raw.tables.into_iter().enumerate() {
        let table = validate_table(index, raw_table)?;
        if !seen.insert(table.full_name()) {
            return Err(SchemaError::Table {
                table: table.full_name(),
                reason: "is declared more than once".into(),
            });
        }
        tables.push(table);
    }
    let memory = crate::memory::validate_memory(raw.memory.unwrap_or_default(), tables.len())?;
    Ok(Config {
        tables,
        raw_store: raw.store,
        raw_sources: raw.sources,
        raw_server: raw.server,
        raw_indexer: raw.indexer,
        raw_security: raw.security,
        memory,
    })
}

fn toml_error(text: &str, err: &toml::de::Error) -> SchemaError {
    let location = err
        .span()
        .map(|span| {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before
                .rsplit('\n')
                .next()
                .map_or(0, |last| last.chars().count())
                + 1;
            format!(" at line {line}, column {column}")
        })
        .unwrap_or_default();
    SchemaError::Toml {
        location,
        message: err.message().trim().to_owned(),
    }
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

fn validate_table(index: usize, raw: RawTable) -> Result<TableConfig, SchemaError> {
    let name = raw.name.ok_or(SchemaError::MissingTableName { index })?;
    let table_error = |table: &str, reason: String| SchemaError::Table {
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
            return Err(SchemaError::Family {
                table: full_name,
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
        let field_error = |reason: String| SchemaError::Field {
            table: full_name.clone(),
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

fn validate_family(table: &str, index: usize, raw: RawFamily) -> Result<FamilyConfig, SchemaError> {
    let name = raw.name.ok_or_else(|| SchemaError::Table {
        table: table.to_owned(),
        reason: format!("families[{index}] has no name"),
    })?;
    let error = |reason: String| SchemaError::Family {
        table: table.to_owned(),
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
) -> Result<IndexedField, SchemaError> {
    let name = raw.name.ok_or_else(|| SchemaError::Table {
        table: table.to_owned(),
        reason: format!("fields[{index}] has no name"),
    })?;
    let error = |reason: String| SchemaError::Field {
        table: table.to_owned(),
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
    Ok(IndexedField {
        name,
        kind,
        column,
        phone_suffix_min,
    })
}

/// `covered = ["family:qualifier", …]`: declared families, each column once, none indexed.
fn validate_covered(
    table: &str,
    raw: Vec<String>,
    families: &[FamilyConfig],
    fields: &[IndexedField],
) -> Result<Vec<String>, SchemaError> {
    let mut covered: Vec<String> = Vec::with_capacity(raw.len());
    for (index, column) in raw.into_iter().enumerate() {
        let error = |reason: String| SchemaError::Table {
            table: table.to_owned(),
            reason: format!("covered[{index}] {column:?}: {reason}"),
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
) -> Result<SplitConfig, SchemaError> {
    let error = |reason: String| SchemaError::Splits {
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

#[cfg(test)]
mod tests {
    use super::*;

    const USER: &str = r#"
[[tables]]
name = "user"

[[tables.families]]
name = "info"
versions = 1
ttl = "forever"
compression = "snappy"
bloomfilter = "ROW"
blocksize = 65536
data_block_encoding = "fast_diff"

[tables.rowkey]
parts = [ { kind = "hash_prefix", algo = "md5", width = 6 }, { kind = "key" } ]

[[tables.fields]]
name = "phone"
kind = "phone"
column = "info:phone"
phone_suffix_min = 6

[[tables.fields]]
name = "idcard"
kind = "idcard"
column = "info:idcard"

[tables.splits]
algo = "codec"
regions = 10
"#;

    /// `USER` with `from` replaced, to provoke one error at a time.
    fn user_with(from: &str, to: &str) -> Result<Config, SchemaError> {
        assert!(USER.contains(from), "{from}");
        parse_config(&USER.replacen(from, to, 1))
    }

    fn message(result: Result<Config, SchemaError>) -> String {
        result.expect_err("config should be rejected").to_string()
    }

    /// The example shipped in `deploy/config` must always parse and do what its comments say.
    #[test]
    fn example_config_is_valid() {
        let config = parse_config(include_str!("../../deploy/config/hbidx.toml")).unwrap();
        let user = config.table("user").unwrap();
        assert_eq!(user.full_name(), "user");
        assert_eq!(user.rowkey.describe(), "substr(md5(key),0,6) + key");
        assert_eq!(user.rowkey.encode("foo0001").unwrap(), b"95f18cfoo0001");
        let kinds: Vec<FieldKind> = user.fields.iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            [FieldKind::Phone, FieldKind::Idcard, FieldKind::Name]
        );
        let splits = user.split_keys(None, None).unwrap();
        let text: Vec<String> = splits.iter().map(|s| crate::codec::printable(s)).collect();
        assert_eq!(
            text,
            [
                "199999", "333333", "4ccccc", "666666", "800000", "999999", "b33333", "cccccc",
                "e66666"
            ]
        );
        assert_eq!(
            crate::ddl::create_statement(user, &splits),
            "create 'user', {NAME => 'info', VERSIONS => '1', COMPRESSION => 'SNAPPY', BLOOMFILTER => 'ROW', \
             BLOCKSIZE => '65536', DATA_BLOCK_ENCODING => 'FAST_DIFF'}, {SPLITS => ['199999', '333333', \
             '4ccccc', '666666', '800000', '999999', 'b33333', 'cccccc', 'e66666']}"
        );
    }

    #[test]
    fn parses_a_table() {
        let config = parse_config(USER).unwrap();
        let user = config.table("user").unwrap();
        assert_eq!(user.full_name(), "user");
        assert_eq!(user.namespace, "default");
        let info = user.family("info").unwrap();
        assert_eq!(info.ttl, Some(Ttl::Forever));
        assert_eq!(info.compression, Some(Compression::Snappy));
        assert_eq!(info.data_block_encoding, Some(DataBlockEncoding::FastDiff));
        assert_eq!(info.blocksize, Some(65536));
        assert_eq!(user.rowkey.describe(), "substr(md5(key),0,6) + key");
        assert_eq!(user.field("phone").unwrap().phone_suffix_min, 6);
        assert_eq!(user.field("idcard").unwrap().phone_suffix_min, 4);
        assert_eq!(user.field("idcard").unwrap().family(), "info");
        assert_eq!(user.field("idcard").unwrap().qualifier(), "idcard");
        assert_eq!(user.fields_of_kind(FieldKind::Phone).count(), 1);
        assert_eq!(user.splits, Some(SplitConfig::Codec { regions: 10 }));
        assert_eq!(user.split_keys(None, None).unwrap().len(), 9);
        assert!(config.raw_store.is_none());
    }

    #[test]
    fn other_crates_sections_are_kept_raw() {
        let text = format!(
            "{USER}\n[store]\nkind = \"embedded\"\n[server]\nlisten = \"127.0.0.1:8080\"\n[sources]\n[indexer]\n[security]\n"
        );
        let config = parse_config(&text).unwrap();
        let store = config.raw_store.unwrap();
        assert_eq!(store.get("kind").and_then(|v| v.as_str()), Some("embedded"));
        assert!(config.raw_server.is_some());
        assert!(config.raw_sources.is_some());
        assert!(config.raw_indexer.is_some());
        assert!(config.raw_security.is_some());
    }

    #[test]
    fn namespaces_and_lookup() {
        let config = user_with("name = \"user\"", "name = \"user\"\nnamespace = \"crm\"").unwrap();
        assert!(config.table("user").is_some());
        assert_eq!(config.table("crm:user").unwrap().full_name(), "crm:user");
        assert!(config.table("other").is_none());
        assert_eq!(
            message(user_with(
                "name = \"user\"",
                "name = \"user\"\nnamespace = \"hbase\""
            )),
            "table \"user\": namespace \"hbase\" is reserved for hbase's system tables"
        );
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = message(user_with("compression", "compresion"));
        assert!(
            err.starts_with("invalid config toml at line 9, column 1: unknown field `compresion`"),
            "{err}"
        );
        let err = message(parse_config(&format!("{USER}\n[metrics]\nport = 1\n")));
        assert!(err.contains("unknown field `metrics`"), "{err}");
        let err = message(parse_config("[[tables]\n"));
        assert!(err.starts_with("invalid config toml at line 1"), "{err}");
    }

    #[test]
    fn covered_columns_are_kept_beside_the_indexed_ones() {
        // Table keys go before the table's first sub-table in TOML.
        let config = user_with(
            "name = \"user\"\n",
            "name = \"user\"\ncovered = [\"info:name\", \"info:city\"]\n",
        )
        .unwrap();
        let user = config.table("user").unwrap();
        assert_eq!(user.covered, ["info:name", "info:city"]);
        let kept: Vec<&str> = user.kept_columns().collect();
        assert_eq!(
            kept,
            ["info:phone", "info:idcard", "info:name", "info:city"]
        );
        assert!(user.keeps_column("info:city") && !user.keeps_column("info:email"));
        let cases = [
            (
                "[\"info:city\", \"other:x\"]",
                "table \"user\": covered[1] \"other:x\": family \"other\" is not declared",
            ),
            (
                "[\"city\"]",
                "table \"user\": covered[0] \"city\": is not of the form \"family:qualifier\"",
            ),
            (
                "[\"info:\"]",
                "table \"user\": covered[0] \"info:\": has an empty qualifier",
            ),
            (
                "[\"info:phone\"]",
                "table \"user\": covered[0] \"info:phone\": is indexed by field \"phone\", whose value the index keeps anyway; remove it from covered",
            ),
            (
                "[\"info:city\", \"info:city\"]",
                "table \"user\": covered[1] \"info:city\": is listed more than once",
            ),
        ];
        for (list, expected) in cases {
            let err = message(user_with(
                "name = \"user\"\n",
                &format!("name = \"user\"\ncovered = {list}\n"),
            ));
            assert_eq!(err, expected);
        }
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let cases = [
            (
                "column = \"info:phone\"",
                "column = \"info2:phone\"",
                "table \"user\": field \"phone\": column \"info2:phone\" uses family \"info2\" which is not declared",
            ),
            (
                "column = \"info:idcard\"",
                "column = \"info:phone\"",
                "table \"user\": field \"idcard\": column \"info:phone\" is already indexed by field \"phone\"",
            ),
            (
                "name = \"idcard\"",
                "name = \"phone\"",
                "table \"user\": field \"phone\": is declared more than once",
            ),
            (
                "name = \"idcard\"",
                "name = \"IdCard\"",
                "table \"user\": field \"IdCard\": name must match [a-z][a-z0-9_]* (at most 64 characters)",
            ),
            (
                "kind = \"idcard\"",
                "kind = \"passport\"",
                "table \"user\": field \"idcard\": kind \"passport\" is not one of phone, idcard, name, keyword",
            ),
            (
                "phone_suffix_min = 6",
                "phone_suffix_min = 9",
                "table \"user\": field \"phone\": phone_suffix_min 9 is out of range 3..=8",
            ),
            (
                "column = \"info:idcard\"",
                "column = \"info:idcard\"\nphone_suffix_min = 4",
                "table \"user\": field \"idcard\": phone_suffix_min only applies to phone fields, this one is idcard",
            ),
            (
                "compression = \"snappy\"",
                "compression = \"brotli\"",
                "table \"user\": family \"info\": compression \"brotli\" is not one of NONE, SNAPPY, LZ4, GZ, ZSTD, LZO",
            ),
            (
                "versions = 1",
                "versions = 0",
                "table \"user\": family \"info\": versions 0 is out of range 1..=2147483647",
            ),
            (
                "ttl = \"forever\"",
                "ttl = -5",
                "table \"user\": family \"info\": ttl -5 is out of range 1..=2147483647 seconds",
            ),
            (
                "blocksize = 65536",
                "blocksize = 512",
                "table \"user\": family \"info\": blocksize 512 is out of range 1024..=16777216 bytes",
            ),
            (
                "bloomfilter = \"ROW\"",
                "bloomfilter = \"ROWPREFIX_FIXED_LENGTH\"",
                "table \"user\": family \"info\": bloomfilter ROWPREFIX_FIXED_LENGTH needs bloom_prefix_length (hbase refuses the table without it)",
            ),
            (
                "name = \"user\"",
                "name = \".user\"",
                "table \".user\": name must not start with '.' or '-'",
            ),
            (
                "name = \"user\"",
                "name = \"us er\"",
                "table \"us er\": name contains ' '; hbase table names use only letters, digits, '_', '.' and '-'",
            ),
            (
                "width = 6",
                "width = 40",
                "table \"user\": rowkey part 0 (hash_prefix): width 40 is out of range 1..=32 hex characters for md5",
            ),
            (
                "width = 6",
                "width = 6, buckets = 4",
                "table \"user\": rowkey part 0 (hash_prefix): `buckets` does not apply to hash_prefix; it takes algo, width, separator, binary",
            ),
            (
                "{ kind = \"key\" }",
                "{ kind = \"id\" }",
                "table \"user\": rowkey part 1 (unknown): kind \"id\" is not one of hash_prefix, random_salt, hash_salt, modulo, ring, key, reverse_ts",
            ),
            (
                "{ kind = \"key\" }",
                "{ kind = \"reverse_ts\" }, { kind = \"key\" }",
                "table \"user\": rowkey part 1 (reverse_ts): reverse_ts must come after the key part",
            ),
            (
                "regions = 10",
                "regions = 1",
                "table \"user\": splits: regions 1 is out of range 2..=10000",
            ),
            (
                "algo = \"codec\"",
                "algo = \"murmur\"",
                "table \"user\": splits: algo \"murmur\" is not one of hex, uniform, decimal, codec, sampled, explicit, file",
            ),
            (
                "{ kind = \"hash_prefix\", algo = \"md5\", width = 6 }, ",
                "",
                "table \"user\": splits: algo \"codec\" needs a rowkey prefix part, and \"key\" has none; use \"sampled\" or an explicit list",
            ),
        ];
        for (from, to, expected) in cases {
            let err = message(user_with(from, to));
            assert_eq!(err, expected, "replacing {from:?} with {to:?}");
        }
        // A hex hash prefix of width 1 has only 16 distinct prefixes.
        let err = message(parse_config(
            &USER
                .replace("width = 6", "width = 1")
                .replace("regions = 10", "regions = 20"),
        ));
        assert!(
            err.starts_with(
                "table \"user\": splits: regions 20 is more than the 16 distinct prefixes"
            ),
            "{err}"
        );
    }

    #[test]
    fn structural_errors() {
        assert_eq!(
            message(parse_config("[[tables]]\nnamespace = \"x\"\n")),
            "tables[0] has no name"
        );
        assert_eq!(
            message(parse_config(
                "[[tables]]\nname = \"t\"\n[tables.rowkey]\nparts = [{ kind = \"key\" }]\n"
            )),
            "table \"t\": declares no column families; add at least one [[tables.families]]"
        );
        assert!(
            message(parse_config(
                "[[tables]]\nname = \"t\"\n[[tables.families]]\nname = \"f\"\n"
            ))
            .starts_with("table \"t\": has no [tables.rowkey]")
        );
        let twice = format!(
            "{USER}\n{}",
            USER.split("[tables.splits]").next().unwrap_or("")
        );
        assert_eq!(
            message(parse_config(&twice)),
            "table \"user\": is declared more than once"
        );
        assert!(parse_config("").unwrap().tables.is_empty());
    }

    #[test]
    fn every_split_algo() {
        let with = |splits: &str| user_with("algo = \"codec\"\nregions = 10", splits);
        let table = |config: Config| config.tables.into_iter().next().unwrap();
        let hex = table(with("algo = \"hex\"\nregions = 15").unwrap());
        assert_eq!(hex.split_keys(None, None).unwrap()[0], b"11111111");
        let uniform = table(with("algo = \"uniform\"\nregions = 2").unwrap());
        assert_eq!(
            uniform.split_keys(None, None).unwrap(),
            vec![vec![0x80, 0, 0, 0, 0, 0, 0, 0]]
        );
        let decimal = table(with("algo = \"decimal\"\nregions = 2").unwrap());
        assert_eq!(
            decimal.split_keys(None, None).unwrap(),
            vec![b"50000000".to_vec()]
        );
        let explicit =
            table(with("algo = \"explicit\"\nkeys = [\"b\", \"a\", \"\\\\x00\"]").unwrap());
        assert_eq!(
            explicit.split_keys(None, None).unwrap(),
            vec![vec![0], b"a".to_vec(), b"b".to_vec()]
        );
        let file = table(with("algo = \"file\"\nfile = \"splits.txt\"").unwrap());
        assert_eq!(
            file.splits,
            Some(SplitConfig::File {
                path: "splits.txt".into()
            })
        );
        assert_eq!(
            file.split_keys(None, None).unwrap_err().to_string(),
            "table \"user\": splits algo \"file\" needs the splits file text, which the caller reads"
        );
        assert_eq!(
            file.split_keys(Some("b\na\n"), None).unwrap(),
            vec![b"a".to_vec(), b"b".to_vec()]
        );
        let sampled = table(with("algo = \"sampled\"\nregions = 2").unwrap());
        let samples = vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()];
        assert_eq!(
            sampled.split_keys(None, Some(samples)).unwrap(),
            vec![b"c".to_vec()]
        );
        assert!(sampled.split_keys(None, None).is_err());
        assert!(
            message(with("algo = \"explicit\"\nkeys = [\"a\", \"a\"]"))
                .contains("appears more than once")
        );
        assert!(
            message(with("algo = \"explicit\"\nkeys = [\"\"]")).contains("split key 0 is empty")
        );
        assert!(message(with("algo = \"hex\"")).ends_with("algo \"hex\" needs regions"));
        assert!(
            message(with("algo = \"file\"\nregions = 3"))
                .ends_with("regions does not apply to algo \"file\"")
        );
    }

    #[test]
    fn every_part_kind_parses() {
        let design = |parts: &str| {
            user_with(
                "parts = [ { kind = \"hash_prefix\", algo = \"md5\", width = 6 }, { kind = \"key\" } ]",
                &format!("parts = {parts}"),
            )
            .map(|config| config.tables[0].rowkey.describe())
        };
        assert_eq!(
            design(
                r#"[{ kind = "random_salt", buckets = 10, separator = "-" }, { kind = "key" }]"#
            )
            .unwrap(),
            "lpad(random() mod 10,1,'0') + \"-\" + key"
        );
        assert_eq!(
            design(r#"[{ kind = "hash_salt", buckets = 100, hash = "xxh3" }, { kind = "key" }]"#)
                .unwrap(),
            "lpad(xxh3(key) mod 100,2,'0') + key"
        );
        assert_eq!(
            design(r#"[{ kind = "modulo", buckets = 10 }, { kind = "key" }]"#).unwrap(),
            "bytes8(key mod 10) + key"
        );
        assert_eq!(
            design(r#"[{ kind = "ring", regions = 10 }, { kind = "key", reverse = true }, { kind = "reverse_ts", format = "decimal" }]"#).unwrap(),
            "lpad(ring(id,10 regions,160 vnodes),1,'0') + reverse(id) + lpad(Long.MAX_VALUE - ts,19,'0')"
        );
        assert_eq!(
            design(r#"[{ kind = "hash_prefix", algo = "murmur3", width = 4, binary = true, separator = "|" }, { kind = "key" }]"#).unwrap(),
            "head(murmur3_bytes(key),4) + \"|\" + key"
        );
        assert!(
            design(r#"[{ kind = "random_salt", buckets = 100, width = 1 }, { kind = "key" }]"#)
                .is_err()
        );
        assert!(design(r#"[{ kind = "modulo" }, { kind = "key" }]"#).is_err());
        assert!(design(r#"[{ kind = "modulo", buckets = -3 }, { kind = "key" }]"#).is_err());
        assert!(design(r#"[{ kind = "key" }, { kind = "reverse_ts", format = "iso" }]"#).is_err());
        assert!(
            design(r#"[{ kind = "hash_prefix", algo = "sha1", width = 4 }, { kind = "key" }]"#)
                .is_err()
        );
        assert!(design(r#"[]"#).is_err());
    }
}
