//! The parts of a rowkey design as written in config: the public vocabulary of designs, apart
//! from the encoding that [`RowkeyCodec::new`](super::RowkeyCodec::new) validates them into.

use super::DECIMAL_TS_WIDTH;
use super::hash::HashAlgo;

/// How `reverse_ts` writes `i64::MAX - ts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TsFormat {
    /// 8 bytes big-endian, as Java's `Bytes.toBytes(Long.MAX_VALUE - ts)`.
    Binary,
    /// 19 ASCII digits, zero-padded, for designs that must stay printable.
    Decimal,
}

impl TsFormat {
    /// The name used in config.
    pub fn as_str(&self) -> &'static str {
        match self {
            TsFormat::Binary => "binary",
            TsFormat::Decimal => "decimal",
        }
    }

    pub(super) fn width(&self) -> usize {
        match self {
            TsFormat::Binary => 8,
            TsFormat::Decimal => DECIMAL_TS_WIDTH,
        }
    }
}

/// One part of a rowkey design, as written in `[tables.rowkey] parts = [...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowkeyPart {
    /// `substr(hex(hash(id)), 0, width)`, or the first `width` digest bytes when `binary`.
    HashPrefix {
        algo: HashAlgo,
        width: usize,
        binary: bool,
        separator: String,
    },
    /// A bucket in `0..buckets` picked at random on every write, zero-padded decimal.
    RandomSalt {
        buckets: u32,
        width: usize,
        separator: String,
    },
    /// `hash(id) mod buckets`, zero-padded decimal.
    HashSalt {
        buckets: u32,
        hash: HashAlgo,
        width: usize,
        separator: String,
    },
    /// `id mod buckets` as 8 bytes big-endian (the seeds' partition design); the id must be a
    /// `u64`.
    Modulo { buckets: u32 },
    /// The region a consistent-hash ring assigns the id to, zero-padded decimal.
    Ring {
        regions: u32,
        vnodes: u32,
        width: usize,
        separator: String,
    },
    /// The id itself, optionally reversed by characters (phone numbers, domains).
    Key { reverse: bool },
    /// `i64::MAX - ts` for natural keys `<id>#<ts_millis>`, so newer versions sort first.
    ReverseTs { format: TsFormat },
}

impl RowkeyPart {
    /// The part's `kind` in config.
    pub fn kind(&self) -> &'static str {
        match self {
            RowkeyPart::HashPrefix { .. } => "hash_prefix",
            RowkeyPart::RandomSalt { .. } => "random_salt",
            RowkeyPart::HashSalt { .. } => "hash_salt",
            RowkeyPart::Modulo { .. } => "modulo",
            RowkeyPart::Ring { .. } => "ring",
            RowkeyPart::Key { .. } => "key",
            RowkeyPart::ReverseTs { .. } => "reverse_ts",
        }
    }

    pub(super) fn is_prefix(&self) -> bool {
        !matches!(self, RowkeyPart::Key { .. } | RowkeyPart::ReverseTs { .. })
    }
}

/// Number of decimal digits needed to print `n`.
pub(crate) fn decimal_digits(n: u64) -> usize {
    let mut digits = 1;
    let mut rest = n / 10;
    while rest > 0 {
        digits += 1;
        rest /= 10;
    }
    digits
}
