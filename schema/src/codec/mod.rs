//! Rowkey codecs: turn a natural key (a uid, a phone number, `uid#ts`) into HBase rowkey bytes
//! and back.
//!
//! A design is an ordered list of parts whose encodings are concatenated:
//!
//! ```text
//! [prefix part]  key  [reverse_ts]
//! ```
//!
//! The prefix spreads writes over regions (the seeds' answer to hotspotting): a slice of a hash
//! (`substr(md5(uid),0,6) + uid`), a random salt, a hashed salt, `id mod N` or a consistent-hash
//! ring. The key part keeps the natural key readable (optionally reversed) so a rowkey can always be
//! decoded without a lookup table. `reverse_ts` appends `Long.MAX_VALUE - ts` so that a scan of
//! one id returns the newest version first.
//!
//! Hash functions, pinned here because changing any of them silently moves every existing row:
//! - `md5`: RFC 1321 via the `md-5` crate; hex is lowercase, as Java's `MD5Hash.getMD5AsHex`.
//! - `xxh64`: XXH64 with seed 0, digest taken big-endian (the order its hex is printed in).
//! - `xxh3`: XXH3 64-bit with seed 0, big-endian.
//! - `murmur3`: MurmurHash3 x86_32 with seed 0 (the `murmur3` crate), big-endian.
//!
//! All hashes read the UTF-8 bytes of the id. When a design has `reverse_ts`, the id is the part
//! before the last `#`, so every version of one id shares a prefix and can be scanned together.

use std::fmt;

use md5::{Digest, Md5};
use xxhash_rust::{xxh3::xxh3_64, xxh64::xxh64};

/// HBase refuses rowkeys longer than `Short.MAX_VALUE` bytes (`HConstants.MAX_ROW_LENGTH`).
pub const MAX_ROWKEY_LEN: usize = i16::MAX as usize;

/// Bucket counts for salts and `modulo`; beyond this a prefix stops being a region number and
/// candidate multi-gets get absurd.
pub const MAX_BUCKETS: u32 = 65_536;

/// Region counts for the consistent-hash ring (the same cap as pre-split region counts).
pub const MAX_RING_REGIONS: u32 = 10_000;

/// Virtual nodes per ring region; more only costs memory once balance is good.
pub const MAX_RING_VNODES: u32 = 1_000;

/// Ring points in total; 16 bytes each, so the cap keeps a ring under 16 MiB.
pub const MAX_RING_POINTS: u64 = 1_000_000;

/// Separators are meant to be one or two readable characters, not payload.
const MAX_SEPARATOR_LEN: usize = 16;

/// Zero-padded decimal prefixes wider than this carry no extra information for 65536 buckets.
const MAX_DECIMAL_WIDTH: usize = 10;

/// Width of the decimal `reverse_ts` form: `i64::MAX` has 19 digits.
const DECIMAL_TS_WIDTH: usize = 19;

/// Errors from building a rowkey design, encoding, decoding, or parsing escaped bytes.
///
/// Messages name the table whose design failed and, where it helps, the key. Rowkey codecs see
/// ids (uids, reversed phones); callers that put personal data in rowkeys should log the error
/// kind, not the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// One part of a design is invalid or in the wrong place.
    #[error("table {table:?}: rowkey part {part} ({kind}): {reason}")]
    InvalidDesign {
        table: String,
        part: usize,
        kind: &'static str,
        reason: String,
    },
    /// A design needs exactly one `key` part and has none.
    #[error(
        "table {table:?}: rowkey has no key part; exactly one {{ kind = \"key\" }} part is required so rowkeys can be decoded"
    )]
    MissingKeyPart { table: String },
    /// HBase has no empty rowkeys, so an empty natural key (or id) can never be stored.
    #[error("table {table:?}: natural key is empty")]
    EmptyKey { table: String },
    /// The design contains a random salt, so the rowkey cannot be rebuilt from the key.
    #[error(
        "table {table:?}: rowkey design \"{design}\" uses a random salt, so the rowkey cannot be rebuilt from the key; write with encode_random and read with candidate_rowkeys"
    )]
    NotDeterministic { table: String, design: String },
    /// A `modulo` design needs the id to be an unsigned 64-bit integer.
    #[error(
        "table {table:?}: key {key:?} is not an unsigned integer, which the modulo prefix needs"
    )]
    NotAnInteger { table: String, key: String },
    /// A `reverse_ts` design needs natural keys of the form `<id>#<ts_millis>`.
    #[error("table {table:?}: key {key:?}: {reason}")]
    BadTimestamp {
        table: String,
        key: String,
        reason: &'static str,
    },
    /// The encoded rowkey would be longer than HBase allows.
    #[error("table {table:?}: rowkey would be {len} bytes, hbase allows at most {MAX_ROWKEY_LEN}")]
    RowkeyTooLong { table: String, len: usize },
    /// Bytes that are not a rowkey of this design.
    #[error("table {table:?}: rowkey {rowkey}: {reason}")]
    Decode {
        table: String,
        /// The rowkey rendered with [`printable`].
        rowkey: String,
        reason: String,
    },
    /// A consistent-hash ring with impossible parameters.
    #[error("hash ring with {regions} regions and {vnodes} vnodes: {reason}")]
    InvalidRing {
        regions: u32,
        vnodes: u32,
        reason: &'static str,
    },
    /// Text that is not in HBase's `Bytes.toStringBinary` form.
    #[error("escaped bytes: character {position}: {reason}")]
    BadEscape {
        /// 0-based character index of the offending backslash.
        position: usize,
        reason: &'static str,
    },
}

/// Hash functions a prefix can use. See the module docs for the exact variants and byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HashAlgo {
    Md5,
    Xxh64,
    Xxh3,
    Murmur3,
}

impl HashAlgo {
    /// The name used in config.
    pub fn as_str(&self) -> &'static str {
        match self {
            HashAlgo::Md5 => "md5",
            HashAlgo::Xxh64 => "xxh64",
            HashAlgo::Xxh3 => "xxh3",
            HashAlgo::Murmur3 => "murmur3",
        }
    }

    /// Parses a config name, case-insensitively.
    pub fn parse(name: &str) -> Option<HashAlgo> {
        match name.to_ascii_lowercase().as_str() {
            "md5" => Some(HashAlgo::Md5),
            "xxh64" => Some(HashAlgo::Xxh64),
            "xxh3" => Some(HashAlgo::Xxh3),
            "murmur3" => Some(HashAlgo::Murmur3),
            _ => None,
        }
    }

    /// Length of the digest in bytes.
    pub fn digest_len(&self) -> usize {
        match self {
            HashAlgo::Md5 => 16,
            HashAlgo::Xxh64 | HashAlgo::Xxh3 => 8,
            HashAlgo::Murmur3 => 4,
        }
    }

    /// The raw digest, in the first `len` bytes (no allocation); integer hashes are big-endian
    /// so the hex matches how they are printed.
    fn digest(&self, data: &[u8]) -> ([u8; 16], usize) {
        let mut out = [0u8; 16];
        let len = match self {
            HashAlgo::Md5 => {
                out.copy_from_slice(&Md5::digest(data));
                16
            }
            HashAlgo::Xxh64 => {
                out[..8].copy_from_slice(&xxh64(data, 0).to_be_bytes());
                8
            }
            HashAlgo::Xxh3 => {
                out[..8].copy_from_slice(&xxh3_64(data).to_be_bytes());
                8
            }
            HashAlgo::Murmur3 => {
                out[..4].copy_from_slice(&murmur3_32(data).to_be_bytes());
                4
            }
        };
        (out, len)
    }

    /// The hash as an integer for `mod N` salting: md5's first 8 bytes big-endian, the others
    /// as they are.
    pub fn hash_u64(&self, data: &[u8]) -> u64 {
        match self {
            HashAlgo::Md5 => {
                let digest = Md5::digest(data);
                let mut first = [0u8; 8];
                first.copy_from_slice(&digest[..8]);
                u64::from_be_bytes(first)
            }
            HashAlgo::Xxh64 => xxh64(data, 0),
            HashAlgo::Xxh3 => xxh3_64(data),
            HashAlgo::Murmur3 => u64::from(murmur3_32(data)),
        }
    }
}

/// MurmurHash3 x86_32, seed 0.
fn murmur3_32(data: &[u8]) -> u32 {
    let mut reader = data;
    // The crate reads through `std::io::Read`; reading a byte slice cannot fail.
    murmur3::murmur3_32(&mut reader, 0).expect("reading from a byte slice cannot fail")
}

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

    fn width(&self) -> usize {
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

    fn is_prefix(&self) -> bool {
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

/// A consistent-hash ring (seed 000's answer to "adding a region must not move every key").
///
/// Each region owns `vnodes` points at `xxh3_64("<region>#<vnode>")`; a key belongs to the first
/// point clockwise from `xxh3_64(key)`. Points of existing regions never depend on the region
/// count, so growing from N to N+1 regions only moves the keys the new region's points capture,
/// about 1/(N+1) of them.
#[derive(Clone, PartialEq, Eq)]
pub struct HashRing {
    regions: u32,
    vnodes: u32,
    /// Sorted by (point, region) so ties resolve the same way on every build.
    points: Vec<(u64, u32)>,
}

impl fmt::Debug for HashRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The point list is thousands of entries; it says nothing a reader needs.
        f.debug_struct("HashRing")
            .field("regions", &self.regions)
            .field("vnodes", &self.vnodes)
            .finish_non_exhaustive()
    }
}

impl HashRing {
    /// Builds a ring of `regions` regions (numbered `0..regions`) with `vnodes` points each.
    pub fn new(regions: u32, vnodes: u32) -> Result<HashRing, CodecError> {
        let invalid = |reason| CodecError::InvalidRing {
            regions,
            vnodes,
            reason,
        };
        if regions == 0 || regions > MAX_RING_REGIONS {
            return Err(invalid("regions must be in 1..=10000"));
        }
        if vnodes == 0 || vnodes > MAX_RING_VNODES {
            return Err(invalid("vnodes must be in 1..=1000"));
        }
        if u64::from(regions) * u64::from(vnodes) > MAX_RING_POINTS {
            return Err(invalid("regions x vnodes must be at most 1000000"));
        }
        let mut points = Vec::with_capacity(regions as usize * vnodes as usize);
        for region in 0..regions {
            for vnode in 0..vnodes {
                let label = format!("{region}#{vnode}");
                points.push((xxh3_64(label.as_bytes()), region));
            }
        }
        points.sort_unstable();
        Ok(HashRing {
            regions,
            vnodes,
            points,
        })
    }

    /// The same ring with a different region count; existing regions keep their points.
    pub fn with_regions(&self, regions: u32) -> Result<HashRing, CodecError> {
        HashRing::new(regions, self.vnodes)
    }

    /// Number of regions.
    pub fn regions(&self) -> u32 {
        self.regions
    }

    /// Virtual nodes per region.
    pub fn vnodes(&self) -> u32 {
        self.vnodes
    }

    /// The region (`0..regions`) that owns `key`.
    pub fn region_of(&self, key: impl AsRef<[u8]>) -> u32 {
        let hash = xxh3_64(key.as_ref());
        let index = self.points.partition_point(|&(point, _)| point < hash);
        // Past the last point the ring wraps to the first one. `new` never builds an empty
        // ring, but a lookup must not panic even so.
        self.points
            .get(index)
            .or_else(|| self.points.first())
            .map_or(0, |&(_, region)| region)
    }
}

/// The validated prefix part, with anything expensive (the ring) built once.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Prefix {
    Hash {
        algo: HashAlgo,
        width: usize,
        binary: bool,
        separator: String,
    },
    RandomSalt {
        buckets: u32,
        width: usize,
        separator: String,
    },
    HashSalt {
        buckets: u32,
        hash: HashAlgo,
        width: usize,
        separator: String,
    },
    Modulo {
        buckets: u32,
    },
    Ring {
        ring: HashRing,
        width: usize,
        separator: String,
    },
}

impl Prefix {
    /// Bytes the prefix occupies, separator included.
    fn len(&self) -> usize {
        match self {
            Prefix::Hash {
                width, separator, ..
            }
            | Prefix::RandomSalt {
                width, separator, ..
            }
            | Prefix::HashSalt {
                width, separator, ..
            }
            | Prefix::Ring {
                width, separator, ..
            } => width + separator.len(),
            Prefix::Modulo { .. } => 8,
        }
    }
}

/// A validated rowkey design for one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowkeyCodec {
    table: String,
    parts: Vec<RowkeyPart>,
    prefix: Option<Prefix>,
    reverse_key: bool,
    ts: Option<TsFormat>,
}

/// A natural key split into its id and optional timestamp.
struct NaturalKey<'a> {
    id: &'a str,
    ts: Option<i64>,
}

impl RowkeyCodec {
    /// Validates `parts` for `table` (named in every error): exactly one `key`, at most one
    /// prefix part and only before the key, at most one `reverse_ts` and only after it.
    pub fn new(
        table: impl Into<String>,
        parts: Vec<RowkeyPart>,
    ) -> Result<RowkeyCodec, CodecError> {
        let table = table.into();
        let mut prefix = None;
        let mut key_seen = false;
        let mut reverse_key = false;
        let mut ts = None;
        for (index, part) in parts.iter().enumerate() {
            let invalid = |reason: String| CodecError::InvalidDesign {
                table: table.clone(),
                part: index,
                kind: part.kind(),
                reason,
            };
            if part.is_prefix() {
                if key_seen {
                    return Err(invalid(
                        "a prefix part must come before the key part".into(),
                    ));
                }
                if prefix.is_some() {
                    return Err(invalid(
                        "a design can have at most one prefix part (hash_prefix, random_salt, hash_salt, modulo or ring)"
                            .into(),
                    ));
                }
                prefix = Some(validate_prefix(part).map_err(invalid)?);
                continue;
            }
            match part {
                RowkeyPart::Key { reverse } => {
                    if key_seen {
                        return Err(invalid("a design must have exactly one key part".into()));
                    }
                    key_seen = true;
                    reverse_key = *reverse;
                }
                RowkeyPart::ReverseTs { format } => {
                    if !key_seen {
                        return Err(invalid("reverse_ts must come after the key part".into()));
                    }
                    if ts.is_some() {
                        return Err(invalid(
                            "a design can have at most one reverse_ts part".into(),
                        ));
                    }
                    ts = Some(*format);
                }
                _ => {}
            }
        }
        if !key_seen {
            return Err(CodecError::MissingKeyPart { table });
        }
        Ok(RowkeyCodec {
            table,
            parts,
            prefix,
            reverse_key,
            ts,
        })
    }

    /// A plain design: the natural key is the rowkey. Useful as the hotspot baseline.
    pub fn plain(table: impl Into<String>) -> RowkeyCodec {
        RowkeyCodec {
            table: table.into(),
            parts: vec![RowkeyPart::Key { reverse: false }],
            prefix: None,
            reverse_key: false,
            ts: None,
        }
    }

    /// The table this design belongs to.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The parts as configured.
    pub fn parts(&self) -> &[RowkeyPart] {
        &self.parts
    }

    /// Whether natural keys carry a timestamp (`<id>#<ts_millis>`).
    pub fn has_timestamp(&self) -> bool {
        self.ts.is_some()
    }

    /// False when a random salt makes the rowkey impossible to rebuild from the key.
    pub fn is_deterministic(&self) -> bool {
        !matches!(self.prefix, Some(Prefix::RandomSalt { .. }))
    }

    /// Number of distinct prefixes for bucketed prefixes (salts, modulo, ring); `None` for
    /// hash prefixes and designs without a prefix.
    pub fn bucket_count(&self) -> Option<u32> {
        match &self.prefix {
            Some(Prefix::RandomSalt { buckets, .. })
            | Some(Prefix::HashSalt { buckets, .. })
            | Some(Prefix::Modulo { buckets }) => Some(*buckets),
            Some(Prefix::Ring { ring, .. }) => Some(ring.regions()),
            Some(Prefix::Hash { .. }) | None => None,
        }
    }

    /// The rowkey for `key`. Fails for random-salt designs, which have no single rowkey.
    ///
    /// Empty keys (and empty ids before `#ts`) are errors: HBase has no empty rowkeys, and an
    /// empty id would give every such row the same hash prefix.
    pub fn encode(&self, key: &str) -> Result<Vec<u8>, CodecError> {
        if !self.is_deterministic() {
            return Err(CodecError::NotDeterministic {
                table: self.table.clone(),
                design: self.describe(),
            });
        }
        let natural = self.split_key(key)?;
        self.assemble(key, &natural, None)
    }

    /// The rowkey to write for `key`: random-salt designs draw the bucket from `rng`, every
    /// other design ignores it and returns [`RowkeyCodec::encode`].
    pub fn encode_random(
        &self,
        key: &str,
        rng: &mut impl rand::Rng,
    ) -> Result<Vec<u8>, CodecError> {
        let natural = self.split_key(key)?;
        let bucket = match &self.prefix {
            Some(Prefix::RandomSalt { buckets, .. }) => Some(rng.random_range(0..*buckets)),
            _ => None,
        };
        self.assemble(key, &natural, bucket)
    }

    /// Every rowkey `key` may be stored under: one for deterministic designs, one per bucket for
    /// a random salt (so a reader can multi-get them all).
    pub fn candidate_rowkeys(&self, key: &str) -> Result<Vec<Vec<u8>>, CodecError> {
        let natural = self.split_key(key)?;
        match &self.prefix {
            Some(Prefix::RandomSalt { buckets, .. }) => (0..*buckets)
                .map(|bucket| self.assemble(key, &natural, Some(bucket)))
                .collect(),
            _ => Ok(vec![self.assemble(key, &natural, None)?]),
        }
    }

    /// The natural key stored in `rowkey`, after checking that the prefix is the one this
    /// design would have written for it.
    pub fn decode(&self, rowkey: &[u8]) -> Result<String, CodecError> {
        let fail = |reason: String| CodecError::Decode {
            table: self.table.clone(),
            rowkey: printable(rowkey),
            reason,
        };
        let prefix_len = self.prefix.as_ref().map_or(0, Prefix::len);
        let ts_len = self.ts.map_or(0, |format| format.width());
        if rowkey.len() <= prefix_len + ts_len {
            return Err(fail(format!(
                "is {} bytes, too short for this design ({prefix_len} prefix + key + {ts_len} timestamp bytes)",
                rowkey.len()
            )));
        }
        let (prefix_bytes, rest) = rowkey.split_at(prefix_len);
        let (key_bytes, ts_bytes) = rest.split_at(rest.len() - ts_len);
        let stored = std::str::from_utf8(key_bytes)
            .map_err(|_| fail("key bytes are not valid utf-8".into()))?;
        let id: String = if self.reverse_key {
            stored.chars().rev().collect()
        } else {
            stored.to_owned()
        };
        let ts = match self.ts {
            Some(format) => {
                Some(decode_ts(format, ts_bytes).map_err(|reason| fail(reason.into()))?)
            }
            None => None,
        };
        if let Some(prefix) = &self.prefix {
            self.check_prefix(prefix, &id, prefix_bytes).map_err(fail)?;
        }
        Ok(match ts {
            Some(ts) => format!("{id}#{ts}"),
            None => id,
        })
    }

    /// A human-readable formula, e.g. `substr(md5(key),0,6) + key`.
    pub fn describe(&self) -> String {
        let id = if self.ts.is_some() { "id" } else { "key" };
        let mut pieces = Vec::new();
        for part in &self.parts {
            let (piece, separator) = match part {
                RowkeyPart::HashPrefix {
                    algo,
                    width,
                    binary: false,
                    separator,
                } => (
                    format!("substr({}({id}),0,{width})", algo.as_str()),
                    separator,
                ),
                RowkeyPart::HashPrefix {
                    algo,
                    width,
                    binary: true,
                    separator,
                } => (
                    format!("head({}_bytes({id}),{width})", algo.as_str()),
                    separator,
                ),
                RowkeyPart::RandomSalt {
                    buckets,
                    width,
                    separator,
                } => (
                    format!("lpad(random() mod {buckets},{width},'0')"),
                    separator,
                ),
                RowkeyPart::HashSalt {
                    buckets,
                    hash,
                    width,
                    separator,
                } => (
                    format!("lpad({}({id}) mod {buckets},{width},'0')", hash.as_str()),
                    separator,
                ),
                RowkeyPart::Modulo { buckets } => {
                    pieces.push(format!("bytes8({id} mod {buckets})"));
                    continue;
                }
                RowkeyPart::Ring {
                    regions,
                    vnodes,
                    width,
                    separator,
                } => (
                    format!("lpad(ring({id},{regions} regions,{vnodes} vnodes),{width},'0')"),
                    separator,
                ),
                RowkeyPart::Key { reverse } => {
                    pieces.push(if *reverse {
                        format!("reverse({id})")
                    } else {
                        id.to_owned()
                    });
                    continue;
                }
                RowkeyPart::ReverseTs { format } => {
                    pieces.push(match format {
                        TsFormat::Binary => "bytes8(Long.MAX_VALUE - ts)".to_owned(),
                        TsFormat::Decimal => "lpad(Long.MAX_VALUE - ts,19,'0')".to_owned(),
                    });
                    continue;
                }
            };
            pieces.push(piece);
            if !separator.is_empty() {
                pieces.push(format!("{separator:?}"));
            }
        }
        pieces.join(" + ")
    }

    /// Split points at prefix-bucket boundaries for `regions` regions, or `None` when the
    /// design has no prefix (then the key space is not known and sampling is the answer).
    ///
    /// Each boundary is `floor(i * space / regions)` for the prefix's value space: `16^width`
    /// for a hex hash prefix, `256^width` for a binary one, the bucket count for salts, modulo
    /// and the ring. Boundaries are prefixes only: every rowkey starting with a bucket's prefix
    /// sorts at or after it. Hash prefixes use at most their first 8 characters or bytes, which
    /// is already finer than any region count. `regions` is capped at the number of distinct
    /// prefixes (so the result is always strictly increasing) and at 10000.
    pub fn codec_splits(&self, regions: u32) -> Option<Vec<Vec<u8>>> {
        let prefix = self.prefix.as_ref()?;
        let space = prefix_split_space(prefix);
        let regions = u128::from(regions.min(crate::split::MAX_REGIONS)).min(space);
        let boundaries = (1..regions).map(|i| i * space / regions);
        let splits = match prefix {
            Prefix::Hash {
                width,
                binary: false,
                ..
            } => {
                let chars = (*width).min(8);
                boundaries
                    .map(|v| format!("{v:0chars$x}").into_bytes())
                    .collect()
            }
            Prefix::Hash {
                width,
                binary: true,
                ..
            } => {
                let bytes = (*width).min(8);
                boundaries
                    .map(|v| v.to_be_bytes()[16 - bytes..].to_vec())
                    .collect()
            }
            Prefix::RandomSalt { width, .. }
            | Prefix::HashSalt { width, .. }
            | Prefix::Ring { width, .. } => boundaries
                .map(|v| format!("{v:0width$}").into_bytes())
                .collect(),
            Prefix::Modulo { .. } => boundaries
                .map(|v| (v as u64).to_be_bytes().to_vec())
                .collect(),
        };
        Some(splits)
    }

    /// Number of distinct split positions the prefix offers (see [`RowkeyCodec::codec_splits`]).
    pub(crate) fn split_space(&self) -> Option<u128> {
        self.prefix.as_ref().map(prefix_split_space)
    }

    fn split_key<'k>(&self, key: &'k str) -> Result<NaturalKey<'k>, CodecError> {
        if key.is_empty() {
            return Err(CodecError::EmptyKey {
                table: self.table.clone(),
            });
        }
        let natural = match self.ts {
            None => NaturalKey { id: key, ts: None },
            Some(_) => {
                let bad = |reason| CodecError::BadTimestamp {
                    table: self.table.clone(),
                    key: key.to_owned(),
                    reason,
                };
                let (id, ts) = key.rsplit_once('#').ok_or_else(|| {
                    bad("has no '#'; this design takes keys of the form <id>#<ts_millis>")
                })?;
                NaturalKey {
                    id,
                    ts: Some(parse_ts(ts).map_err(bad)?),
                }
            }
        };
        if natural.id.is_empty() {
            return Err(CodecError::EmptyKey {
                table: self.table.clone(),
            });
        }
        Ok(natural)
    }

    fn assemble(
        &self,
        key: &str,
        natural: &NaturalKey<'_>,
        bucket: Option<u32>,
    ) -> Result<Vec<u8>, CodecError> {
        let mut out = Vec::with_capacity(natural.id.len() + 32);
        if let Some(prefix) = &self.prefix {
            self.write_prefix(prefix, key, natural.id, bucket, &mut out)?;
        }
        if self.reverse_key {
            out.extend(natural.id.chars().rev().collect::<String>().bytes());
        } else {
            out.extend_from_slice(natural.id.as_bytes());
        }
        if let (Some(format), Some(ts)) = (self.ts, natural.ts) {
            let reversed = i64::MAX - ts;
            match format {
                TsFormat::Binary => out.extend_from_slice(&reversed.to_be_bytes()),
                TsFormat::Decimal => {
                    out.extend_from_slice(format!("{reversed:0DECIMAL_TS_WIDTH$}").as_bytes())
                }
            }
        }
        if out.len() > MAX_ROWKEY_LEN {
            return Err(CodecError::RowkeyTooLong {
                table: self.table.clone(),
                len: out.len(),
            });
        }
        Ok(out)
    }

    fn write_prefix(
        &self,
        prefix: &Prefix,
        key: &str,
        id: &str,
        bucket: Option<u32>,
        out: &mut Vec<u8>,
    ) -> Result<(), CodecError> {
        match prefix {
            Prefix::Hash {
                algo,
                width,
                binary,
                separator,
            } => {
                push_hash_prefix(out, *algo, *width, *binary, id);
                out.extend_from_slice(separator.as_bytes());
            }
            Prefix::HashSalt {
                buckets,
                hash,
                width,
                separator,
            } => {
                let bucket = hash.hash_u64(id.as_bytes()) % u64::from(*buckets);
                push_decimal(out, bucket, *width, separator);
            }
            Prefix::Ring {
                ring,
                width,
                separator,
            } => push_decimal(out, u64::from(ring.region_of(id)), *width, separator),
            Prefix::RandomSalt {
                width, separator, ..
            } => {
                // Only `encode_random` and `candidate_rowkeys` reach here with a bucket;
                // `encode` refuses random designs before assembling.
                let bucket = bucket.ok_or_else(|| CodecError::NotDeterministic {
                    table: self.table.clone(),
                    design: self.describe(),
                })?;
                push_decimal(out, u64::from(bucket), *width, separator);
            }
            Prefix::Modulo { buckets } => {
                let value = parse_u64_id(id).ok_or_else(|| CodecError::NotAnInteger {
                    table: self.table.clone(),
                    key: key.to_owned(),
                })?;
                out.extend_from_slice(&(value % u64::from(*buckets)).to_be_bytes());
            }
        }
        Ok(())
    }

    fn check_prefix(&self, prefix: &Prefix, id: &str, found: &[u8]) -> Result<(), String> {
        match prefix {
            Prefix::RandomSalt {
                buckets,
                width,
                separator,
            } => {
                let (digits, sep) = found.split_at(*width);
                let bucket = std::str::from_utf8(digits)
                    .ok()
                    .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u32>().ok())
                    .ok_or_else(|| format!("salt {} is not a decimal bucket", printable(digits)))?;
                if bucket >= *buckets {
                    return Err(format!("salt bucket {bucket} is not below {buckets}"));
                }
                if sep != separator.as_bytes() {
                    return Err(format!(
                        "separator {} differs from the design's {separator:?}",
                        printable(sep)
                    ));
                }
                Ok(())
            }
            Prefix::Modulo { .. } if parse_u64_id(id).is_none() => {
                Err("key is not an unsigned integer, which the modulo prefix needs".to_owned())
            }
            _ => {
                let mut expected = Vec::with_capacity(found.len());
                self.write_prefix(prefix, id, id, None, &mut expected)
                    .map_err(|e| e.to_string())?;
                if found != expected.as_slice() {
                    return Err(format!(
                        "prefix {} does not match {} computed from the key",
                        printable(found),
                        printable(&expected)
                    ));
                }
                Ok(())
            }
        }
    }
}

/// `substr(hex(hash(id)),0,width)` or the first `width` digest bytes. `width` was validated
/// against the digest length; slicing is still bounded so a bad width cannot panic.
/// Appends `substr(hex(hash(id)),0,width)` or the first `width` digest bytes to `out`. `width`
/// was validated against the digest length; slicing is still bounded so a bad width cannot
/// panic. Written in place, with no allocation: every encode and every lookup result's decode
/// (which re-checks the prefix) comes through here.
fn push_hash_prefix(out: &mut Vec<u8>, algo: HashAlgo, width: usize, binary: bool, id: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let (digest, len) = algo.digest(id.as_bytes());
    let digest = &digest[..len];
    if binary {
        out.extend_from_slice(&digest[..width.min(len)]);
    } else {
        let start = out.len();
        for byte in digest.iter().take(width.div_ceil(2)) {
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0x0f)]);
        }
        out.truncate(start + width.min(2 * len));
    }
}

/// A zero-padded decimal bucket followed by the separator.
fn push_decimal(out: &mut Vec<u8>, value: u64, width: usize, separator: &str) {
    out.extend_from_slice(format!("{value:0width$}").as_bytes());
    out.extend_from_slice(separator.as_bytes());
}

fn prefix_split_space(prefix: &Prefix) -> u128 {
    match prefix {
        Prefix::Hash {
            width,
            binary: false,
            ..
        } => 16u128.pow((*width).min(8) as u32),
        Prefix::Hash {
            width,
            binary: true,
            ..
        } => 256u128.pow((*width).min(8) as u32),
        Prefix::RandomSalt { buckets, .. }
        | Prefix::HashSalt { buckets, .. }
        | Prefix::Modulo { buckets } => u128::from(*buckets),
        Prefix::Ring { ring, .. } => u128::from(ring.regions()),
    }
}

/// Checks one prefix part's parameters; the error is the reason only, the caller adds where.
fn validate_prefix(part: &RowkeyPart) -> Result<Prefix, String> {
    let check_separator = |separator: &str| {
        if separator.len() > MAX_SEPARATOR_LEN {
            Err(format!(
                "separator is {} bytes, at most {MAX_SEPARATOR_LEN} are allowed",
                separator.len()
            ))
        } else {
            Ok(())
        }
    };
    let check_buckets = |buckets: u32| {
        if (2..=MAX_BUCKETS).contains(&buckets) {
            Ok(())
        } else {
            Err(format!(
                "buckets {buckets} is out of range 2..={MAX_BUCKETS}"
            ))
        }
    };
    let check_width = |width: usize, count: u32| {
        let needed = decimal_digits(u64::from(count.saturating_sub(1)));
        if width < needed {
            Err(format!(
                "width {width} is too narrow for {count} buckets, which need {needed} digits"
            ))
        } else if width > MAX_DECIMAL_WIDTH {
            Err(format!(
                "width {width} is above the maximum of {MAX_DECIMAL_WIDTH}"
            ))
        } else {
            Ok(())
        }
    };
    match part {
        RowkeyPart::HashPrefix {
            algo,
            width,
            binary,
            separator,
        } => {
            let max = if *binary {
                algo.digest_len()
            } else {
                algo.digest_len() * 2
            };
            if *width == 0 || *width > max {
                let unit = if *binary { "bytes" } else { "hex characters" };
                return Err(format!(
                    "width {width} is out of range 1..={max} {unit} for {}",
                    algo.as_str()
                ));
            }
            check_separator(separator)?;
            Ok(Prefix::Hash {
                algo: *algo,
                width: *width,
                binary: *binary,
                separator: separator.clone(),
            })
        }
        RowkeyPart::RandomSalt {
            buckets,
            width,
            separator,
        } => {
            check_buckets(*buckets)?;
            check_width(*width, *buckets)?;
            check_separator(separator)?;
            Ok(Prefix::RandomSalt {
                buckets: *buckets,
                width: *width,
                separator: separator.clone(),
            })
        }
        RowkeyPart::HashSalt {
            buckets,
            hash,
            width,
            separator,
        } => {
            check_buckets(*buckets)?;
            check_width(*width, *buckets)?;
            check_separator(separator)?;
            Ok(Prefix::HashSalt {
                buckets: *buckets,
                hash: *hash,
                width: *width,
                separator: separator.clone(),
            })
        }
        RowkeyPart::Modulo { buckets } => {
            check_buckets(*buckets)?;
            Ok(Prefix::Modulo { buckets: *buckets })
        }
        RowkeyPart::Ring {
            regions,
            vnodes,
            width,
            separator,
        } => {
            if *regions < 2 {
                return Err(format!(
                    "regions {regions} is out of range 2..={MAX_RING_REGIONS}"
                ));
            }
            check_width(*width, *regions)?;
            check_separator(separator)?;
            let ring = HashRing::new(*regions, *vnodes).map_err(|e| e.to_string())?;
            Ok(Prefix::Ring {
                ring,
                width: *width,
                separator: separator.clone(),
            })
        }
        RowkeyPart::Key { .. } | RowkeyPart::ReverseTs { .. } => {
            Err("is not a prefix part".to_owned())
        }
    }
}

/// Ids for `modulo` must be plain decimal digits: `+1` or ` 1` would encode but not round-trip
/// the way a reader expects.
fn parse_u64_id(id: &str) -> Option<u64> {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok()
}

/// Parses the `<ts_millis>` of a natural key. Leading zeros are refused so that decoding gives
/// back exactly the key that was encoded.
fn parse_ts(ts: &str) -> Result<i64, &'static str> {
    if ts.is_empty() {
        return Err("timestamp after '#' is empty");
    }
    if ts.starts_with('-') {
        return Err("timestamp after '#' is negative");
    }
    if !ts.bytes().all(|b| b.is_ascii_digit()) {
        return Err("timestamp after '#' is not a decimal integer");
    }
    if ts.len() > 1 && ts.starts_with('0') {
        return Err("timestamp after '#' has leading zeros");
    }
    ts.parse::<i64>()
        .map_err(|_| "timestamp after '#' does not fit in a signed 64-bit integer")
}

fn decode_ts(format: TsFormat, bytes: &[u8]) -> Result<i64, &'static str> {
    let reversed = match format {
        TsFormat::Binary => {
            let mut raw = [0u8; 8];
            raw.copy_from_slice(bytes);
            i64::from_be_bytes(raw)
        }
        TsFormat::Decimal => {
            if !bytes.iter().all(u8::is_ascii_digit) {
                return Err("reverse timestamp is not 19 decimal digits");
            }
            std::str::from_utf8(bytes)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or("reverse timestamp does not fit in a signed 64-bit integer")?
        }
    };
    if reversed < 0 {
        return Err("reverse timestamp is negative, so it was not written by this design");
    }
    Ok(i64::MAX - reversed)
}

/// Renders bytes the way HBase's `Bytes.toStringBinary` does: printable ASCII (space to `~`)
/// as is, except `\`, and everything else as `\xNN` with uppercase hex.
pub fn printable(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &byte in bytes {
        if (b' '..=b'~').contains(&byte) && byte != b'\\' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("\\x{byte:02X}"));
        }
    }
    out
}

/// Inverse of [`printable`], i.e. HBase's `Bytes.toBytesBinary`, but strict where HBase is
/// silently lossy:
/// - `\xNN` needs two uppercase hex digits. HBase drops the backslash of a malformed escape
///   (so `\xff` becomes the text `xff`); here it is an error, since it is almost always a typo.
/// - A backslash not followed by `x` is kept as a literal byte, as HBase does.
/// - Non-ASCII characters are written as UTF-8. HBase truncates each UTF-16 unit to its low
///   byte, which never gives the bytes a user meant; [`printable`] never produces them anyway.
pub fn parse_printable(text: &str) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::with_capacity(text.len());
    let chars: Vec<char> = text.chars().collect();
    let mut index = 0;
    while let Some(&ch) = chars.get(index) {
        if ch == '\\' && chars.get(index + 1) == Some(&'x') {
            let hex_value = |c: Option<&char>| match c {
                Some(c @ '0'..='9') => Some(*c as u8 - b'0'),
                Some(c @ 'A'..='F') => Some(*c as u8 - b'A' + 10),
                _ => None,
            };
            let high = chars.get(index + 2);
            let low = chars.get(index + 3);
            match (hex_value(high), hex_value(low)) {
                (Some(h), Some(l)) => out.push(h << 4 | l),
                _ => {
                    let reason = if high.is_none() || low.is_none() {
                        "\\x escape needs two hex digits but the text ends"
                    } else if high.is_some_and(|c| c.is_ascii_hexdigit())
                        && low.is_some_and(|c| c.is_ascii_hexdigit())
                    {
                        "\\x escape uses lowercase hex; hbase only decodes uppercase (\\xAB)"
                    } else {
                        "\\x escape is not followed by two hex digits"
                    };
                    return Err(CodecError::BadEscape {
                        position: index,
                        reason,
                    });
                }
            }
            index += 4;
        } else {
            let mut buf = [0u8; 4];
            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
            index += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn md5_design(width: usize) -> RowkeyCodec {
        RowkeyCodec::new(
            "user",
            vec![
                RowkeyPart::HashPrefix {
                    algo: HashAlgo::Md5,
                    width,
                    binary: false,
                    separator: String::new(),
                },
                RowkeyPart::Key { reverse: false },
            ],
        )
        .expect("valid design")
    }

    #[test]
    fn seed_004_md5_prefix_examples() {
        // Seed 004: foo0001 -> 95f18cfoo0001 and so on.
        let codec = md5_design(6);
        for (key, rowkey) in [
            ("foo0001", "95f18cfoo0001"),
            ("foo0002", "6ccc20foo0002"),
            ("foo0003", "b61d00foo0003"),
            ("foo0004", "1a7475foo0004"),
        ] {
            assert_eq!(codec.encode(key).unwrap(), rowkey.as_bytes());
            assert_eq!(codec.decode(rowkey.as_bytes()).unwrap(), key);
        }
        assert_eq!(codec.describe(), "substr(md5(key),0,6) + key");
    }

    /// The in-place hex of every algorithm and width, odd ones included, against `hex::encode`
    /// of the digest crates' output, and each encoded key decodes back (its prefix re-checked).
    #[test]
    fn hash_prefix_is_the_leading_hex_or_bytes_of_the_digest() {
        let key = "13800138000";
        let digests: [(HashAlgo, Vec<u8>); 4] = [
            (HashAlgo::Md5, Md5::digest(key.as_bytes()).to_vec()),
            (
                HashAlgo::Xxh64,
                xxh64(key.as_bytes(), 0).to_be_bytes().to_vec(),
            ),
            (
                HashAlgo::Xxh3,
                xxh3_64(key.as_bytes()).to_be_bytes().to_vec(),
            ),
            (
                HashAlgo::Murmur3,
                murmur3_32(key.as_bytes()).to_be_bytes().to_vec(),
            ),
        ];
        for (algo, digest) in digests {
            let hex = hex::encode(&digest);
            for binary in [false, true] {
                let max = if binary { digest.len() } else { hex.len() };
                for width in 1..=max {
                    let codec = RowkeyCodec::new(
                        "t",
                        vec![
                            RowkeyPart::HashPrefix {
                                algo,
                                width,
                                binary,
                                separator: "_".into(),
                            },
                            RowkeyPart::Key { reverse: false },
                        ],
                    )
                    .unwrap();
                    let mut expected = if binary {
                        digest[..width].to_vec()
                    } else {
                        hex.as_bytes()[..width].to_vec()
                    };
                    expected.extend_from_slice(b"_13800138000");
                    let rowkey = codec.encode(key).unwrap();
                    assert_eq!(rowkey, expected, "{algo:?} width {width} binary {binary}");
                    assert_eq!(codec.decode(&rowkey).unwrap(), key);
                }
            }
        }
    }

    #[test]
    fn decode_rejects_a_wrong_prefix() {
        let codec = md5_design(6);
        let err = codec.decode(b"000000foo0001").unwrap_err();
        assert!(err.to_string().contains("does not match"), "{err}");
        assert!(
            err.to_string()
                .starts_with("table \"user\": rowkey 000000foo0001")
        );
    }

    #[test]
    fn binary_prefix_skips_width_bytes() {
        let codec = RowkeyCodec::new(
            "t",
            vec![
                RowkeyPart::HashPrefix {
                    algo: HashAlgo::Md5,
                    width: 2,
                    binary: true,
                    separator: String::new(),
                },
                RowkeyPart::Key { reverse: false },
            ],
        )
        .unwrap();
        let rowkey = codec.encode("foo0001").unwrap();
        // md5("foo0001") starts 95 f1.
        assert_eq!(&rowkey[..2], &[0x95, 0xf1]);
        assert_eq!(&rowkey[2..], b"foo0001");
        assert_eq!(codec.decode(&rowkey).unwrap(), "foo0001");
    }

    #[test]
    fn modulo_matches_seed_002_partition_design() {
        let codec = RowkeyCodec::new(
            "t",
            vec![
                RowkeyPart::Modulo { buckets: 10 },
                RowkeyPart::Key { reverse: false },
            ],
        )
        .unwrap();
        let rowkey = codec.encode("1234").unwrap();
        assert_eq!(&rowkey[..8], &4u64.to_be_bytes());
        assert_eq!(&rowkey[8..], b"1234");
        assert_eq!(codec.decode(&rowkey).unwrap(), "1234");
        let err = codec.encode("12a4").unwrap_err();
        assert_eq!(
            err.to_string(),
            "table \"t\": key \"12a4\" is not an unsigned integer, which the modulo prefix needs"
        );
        // Seed 002's calcSplitKeys: Bytes.toBytes((long) i) for i in 1..partitions.
        let splits = codec.codec_splits(10).unwrap();
        let expected: Vec<Vec<u8>> = (1u64..10).map(|i| i.to_be_bytes().to_vec()).collect();
        assert_eq!(splits, expected);
    }

    #[test]
    fn random_salt_reports_it_is_not_deterministic() {
        let codec = RowkeyCodec::new(
            "events",
            vec![
                RowkeyPart::RandomSalt {
                    buckets: 4,
                    width: 1,
                    separator: "-".into(),
                },
                RowkeyPart::Key { reverse: false },
            ],
        )
        .unwrap();
        assert!(!codec.is_deterministic());
        let err = codec.encode("foo0001").unwrap_err();
        assert!(matches!(err, CodecError::NotDeterministic { .. }));
        assert!(
            err.to_string()
                .contains("lpad(random() mod 4,1,'0') + \"-\" + key"),
            "{err}"
        );
        let candidates = codec.candidate_rowkeys("foo0001").unwrap();
        let expected: Vec<Vec<u8>> = ["0-foo0001", "1-foo0001", "2-foo0001", "3-foo0001"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        assert_eq!(candidates, expected);
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..20 {
            let rowkey = codec.encode_random("foo0001", &mut rng).unwrap();
            assert!(candidates.contains(&rowkey));
            assert_eq!(codec.decode(&rowkey).unwrap(), "foo0001");
        }
        assert!(codec.decode(b"7-foo0001").is_err());
    }

    #[test]
    fn hash_salt_is_stable_and_decodes() {
        let codec = RowkeyCodec::new(
            "t",
            vec![
                RowkeyPart::HashSalt {
                    buckets: 16,
                    hash: HashAlgo::Murmur3,
                    width: 2,
                    separator: "_".into(),
                },
                RowkeyPart::Key { reverse: false },
            ],
        )
        .unwrap();
        let rowkey = codec.encode("foo").unwrap();
        let bucket = murmur3_32(b"foo") % 16;
        assert_eq!(rowkey, format!("{bucket:02}_foo").into_bytes());
        assert_eq!(codec.decode(&rowkey).unwrap(), "foo");
        assert_eq!(
            codec.codec_splits(4).unwrap(),
            vec![b"04".to_vec(), b"08".to_vec(), b"12".to_vec()]
        );
    }

    #[test]
    fn murmur3_is_x86_32_seed_0() {
        // Reference vectors of MurmurHash3_x86_32 with seed 0.
        assert_eq!(murmur3_32(b""), 0);
        assert_eq!(murmur3_32(b"hello"), 0x248b_fa47);
    }

    #[test]
    fn reversed_key_with_reverse_timestamp() {
        let codec = RowkeyCodec::new(
            "calls",
            vec![
                RowkeyPart::Key { reverse: true },
                RowkeyPart::ReverseTs {
                    format: TsFormat::Decimal,
                },
            ],
        )
        .unwrap();
        let rowkey = codec.encode("13800138000#1700000000000").unwrap();
        let expected = format!("00083100831{:019}", i64::MAX - 1_700_000_000_000);
        assert_eq!(rowkey, expected.into_bytes());
        assert_eq!(codec.decode(&rowkey).unwrap(), "13800138000#1700000000000");
        assert_eq!(
            codec.describe(),
            "reverse(id) + lpad(Long.MAX_VALUE - ts,19,'0')"
        );
        for bad in ["13800138000", "x#", "x#-1", "x#01", "x#1.5", "#5"] {
            assert!(codec.encode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn newer_timestamps_sort_first() {
        let codec = RowkeyCodec::new(
            "t",
            vec![
                RowkeyPart::HashPrefix {
                    algo: HashAlgo::Md5,
                    width: 4,
                    binary: false,
                    separator: String::new(),
                },
                RowkeyPart::Key { reverse: false },
                RowkeyPart::ReverseTs {
                    format: TsFormat::Binary,
                },
            ],
        )
        .unwrap();
        let older = codec.encode("car7#1000").unwrap();
        let newer = codec.encode("car7#2000").unwrap();
        assert!(newer < older);
        // The prefix hashes the id only, so both versions share it.
        assert_eq!(older[..4], newer[..4]);
        assert_eq!(codec.decode(&older).unwrap(), "car7#1000");
        assert_eq!(
            codec.describe(),
            "substr(md5(id),0,4) + id + bytes8(Long.MAX_VALUE - ts)"
        );
    }

    #[test]
    fn design_order_is_validated() {
        let key = RowkeyPart::Key { reverse: false };
        let ts = RowkeyPart::ReverseTs {
            format: TsFormat::Binary,
        };
        let salt = RowkeyPart::Modulo { buckets: 4 };
        let cases = [
            (vec![], "table \"t\": rowkey has no key part"),
            (
                vec![key.clone(), salt.clone()],
                "table \"t\": rowkey part 1 (modulo): a prefix part must come before the key part",
            ),
            (
                vec![ts.clone(), key.clone()],
                "table \"t\": rowkey part 0 (reverse_ts): reverse_ts must come after the key part",
            ),
            (
                vec![key.clone(), key.clone()],
                "table \"t\": rowkey part 1 (key): a design must have exactly one key part",
            ),
            (
                vec![salt.clone(), salt.clone(), key.clone()],
                "table \"t\": rowkey part 1 (modulo): a design can have at most one prefix part",
            ),
            (
                vec![key.clone(), ts.clone(), ts.clone()],
                "table \"t\": rowkey part 2 (reverse_ts): a design can have at most one reverse_ts part",
            ),
        ];
        for (parts, message) in cases {
            let err = RowkeyCodec::new("t", parts).unwrap_err();
            assert!(err.to_string().starts_with(message), "{err}");
        }
    }

    #[test]
    fn prefix_parameters_are_validated() {
        let hash = |width, binary| RowkeyPart::HashPrefix {
            algo: HashAlgo::Md5,
            width,
            binary,
            separator: String::new(),
        };
        let key = RowkeyPart::Key { reverse: false };
        for part in [
            hash(0, false),
            hash(33, false),
            hash(17, true),
            RowkeyPart::RandomSalt {
                buckets: 1,
                width: 1,
                separator: String::new(),
            },
            RowkeyPart::HashSalt {
                buckets: 100,
                hash: HashAlgo::Xxh3,
                width: 1,
                separator: String::new(),
            },
            RowkeyPart::Ring {
                regions: 10,
                vnodes: 0,
                width: 1,
                separator: String::new(),
            },
        ] {
            assert!(
                RowkeyCodec::new("t", vec![part.clone(), key.clone()]).is_err(),
                "{part:?}"
            );
        }
        let err = RowkeyCodec::new("t", vec![hash(40, false), key]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "table \"t\": rowkey part 0 (hash_prefix): width 40 is out of range 1..=32 hex characters for md5"
        );
    }

    #[test]
    fn empty_and_oversized_keys_are_errors() {
        let codec = md5_design(6);
        assert!(matches!(codec.encode(""), Err(CodecError::EmptyKey { .. })));
        let long = "x".repeat(MAX_ROWKEY_LEN);
        assert!(matches!(
            codec.encode(&long),
            Err(CodecError::RowkeyTooLong { .. })
        ));
    }

    #[test]
    fn md5_prefix_splits_partition_the_prefix_space_evenly() {
        let splits = md5_design(6).codec_splits(10).unwrap();
        let text: Vec<String> = splits.iter().map(|s| printable(s)).collect();
        assert_eq!(
            text,
            [
                "199999", "333333", "4ccccc", "666666", "800000", "999999", "b33333", "cccccc",
                "e66666"
            ]
        );
        // Never more regions than prefixes.
        assert_eq!(md5_design(1).codec_splits(100).unwrap().len(), 15);
        assert_eq!(RowkeyCodec::plain("t").codec_splits(10), None);
    }

    #[test]
    fn ring_parameters_are_bounded() {
        assert!(HashRing::new(0, 160).is_err());
        assert!(HashRing::new(10, 0).is_err());
        assert!(HashRing::new(10_001, 1).is_err());
        let err = HashRing::new(10_000, 1_000).unwrap_err();
        assert_eq!(
            err.to_string(),
            "hash ring with 10000 regions and 1000 vnodes: regions x vnodes must be at most 1000000"
        );
        let ring = HashRing::new(1, 4).unwrap();
        assert_eq!(ring.region_of("anything"), 0);
    }

    #[test]
    fn ring_region_formatting_and_splits() {
        let codec = RowkeyCodec::new(
            "t",
            vec![
                RowkeyPart::Ring {
                    regions: 12,
                    vnodes: 160,
                    width: 2,
                    separator: String::new(),
                },
                RowkeyPart::Key { reverse: false },
            ],
        )
        .unwrap();
        let ring = HashRing::new(12, 160).unwrap();
        let rowkey = codec.encode("u42").unwrap();
        assert_eq!(
            rowkey,
            format!("{:02}u42", ring.region_of("u42")).into_bytes()
        );
        assert_eq!(codec.decode(&rowkey).unwrap(), "u42");
        assert_eq!(codec.codec_splits(12).unwrap().len(), 11);
        assert_eq!(
            codec.codec_splits(3).unwrap(),
            vec![b"04".to_vec(), b"08".to_vec()]
        );
    }

    #[test]
    fn ring_spreads_keys_and_adding_a_region_moves_few() {
        let ring = HashRing::new(10, 160).unwrap();
        let grown = ring.with_regions(11).unwrap();
        let mut counts = [0u32; 10];
        let mut moved = 0;
        let total = 20_000;
        for i in 0..total {
            let key = format!("u{i:07}");
            let before = ring.region_of(&key);
            counts[before as usize] += 1;
            let after = grown.region_of(&key);
            if before != after {
                // Keys only ever move to the new region.
                assert_eq!(after, 10);
                moved += 1;
            }
        }
        let share = f64::from(moved) / f64::from(total);
        assert!((share - 1.0 / 11.0).abs() < 0.03, "moved {share}");
        for count in counts {
            assert!((1_500..=2_500).contains(&count), "{counts:?}");
        }
    }

    #[test]
    fn printable_matches_hbase_to_string_binary() {
        assert_eq!(printable(b"abc"), "abc");
        assert_eq!(
            printable(&[0x00, 0x7f, 0xff, b'\\', b' ', b'~']),
            "\\x00\\x7F\\xFF\\x5C ~"
        );
        assert_eq!(
            parse_printable("\\x00\\x7F\\xFFa\\x5C").unwrap(),
            vec![0, 0x7f, 0xff, b'a', b'\\']
        );
        // A backslash without x is literal, like HBase.
        assert_eq!(parse_printable("a\\b").unwrap(), b"a\\b");
        assert_eq!(parse_printable("中").unwrap(), "中".as_bytes());
        for bad in ["\\x", "\\xA", "\\xzz", "\\xff"] {
            assert!(parse_printable(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_printable("ab\\xff").unwrap_err().to_string(),
            "escaped bytes: character 2: \\x escape uses lowercase hex; hbase only decodes uppercase (\\xAB)"
        );
    }
}
