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

mod design;
mod escape;
mod hash;
mod part;
mod prefix;
mod ring;
#[cfg(test)]
mod tests;

pub use design::RowkeyCodec;
pub use escape::{parse_printable, printable};
pub use hash::HashAlgo;
pub(crate) use part::decimal_digits;
pub use part::{RowkeyPart, TsFormat};
pub use ring::HashRing;

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
