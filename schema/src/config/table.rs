//! One `[[tables]]` entry, validated: the HBase table (namespace, families), its rowkey design,
//! the indexed fields, covered columns and pre-splits. Built by `validate_table`.

use crate::blind::BlindKey;
use crate::codec::RowkeyCodec;
use crate::model::split_column;
use crate::normalize::{
    NormalizeError, normalize_idcard, normalize_keyword, normalize_name, normalize_phone,
};
use crate::split::{
    SplitError, decimal_string_split, hex_string_split, parse_splits_file, sampled_splits,
    uniform_split, validate_splits,
};

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

    /// Whether a lookup may return `column`'s value from the index: a kept column that is not
    /// blind (the index keeps only keyed hashes of a blind column's value).
    pub fn answers_column(&self, column: &str) -> bool {
        self.keeps_column(column) && self.blind_field_of(column).is_none()
    }

    /// The blind field indexing `column`, if one does.
    pub fn blind_field_of(&self, column: &str) -> Option<&IndexedField> {
        self.fields
            .iter()
            .find(|field| field.blind && field.column == column)
    }

    /// Whether any indexed field is blind.
    pub fn has_blind_fields(&self) -> bool {
        self.fields.iter().any(|field| field.blind)
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

            pub(crate) fn choices() -> String {
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
    /// `blind = true`: the index holds keyed hashes of the value instead of the value (phone,
    /// idcard and keyword fields). Exact and phone suffix lookups only.
    pub blind: bool,
    /// The key of a blind field, set after validation by whoever read it
    /// ([`crate::HbidxConfig::set_blind_key`]); `None` for other fields.
    pub blind_key: Option<BlindKey>,
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
