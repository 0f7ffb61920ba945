//! `hbidx-schema`: everything hbidx knows about a table that needs no IO.
//!
//! - [`config`]: the config file, every section, parsed into raw structs and validated into
//!   one typed [`HbidxConfig`] in one place ([`parse_config`]), with errors naming the key;
//!   among them the `[memory]` budget and its split between caches, buffers and writer heaps
//!   ([`MemoryBudget`]).
//! - [`codec`]: rowkey designs (hash prefix, salts, modulo, consistent-hash ring, reversal,
//!   reverse timestamp, composites) that turn a natural key into rowkey bytes and back.
//! - [`split`]: pre-split calculators, region routing and the hotspot report.
//! - [`ddl`]: HBase shell `create` statements.
//! - [`normalize`]: phone / PRC idcard / name normalisers and validators.
//! - [`hanzi`]: Han characters in names: traditional → simplified folding, which characters
//!   are Han (whitespace between them is dropped).
//! - [`mask`]: phone and idcard masks for the few log lines that name a value, and the log
//!   writer's last line of defence ([`mask::mask_pii_in_text`]).
//! - [`blind`]: the key of blind fields, whose index holds keyed hashes instead of values.
//! - [`model`]: the mutation model shared by the store, the change feed, the Kafka sources and
//!   the indexer. It lives here, at the bottom of the crate graph, so nothing imports back up.
//!
//! The library never reads files or the clock: callers pass text in, so every function can be
//! tested (and fuzzed) on strings alone.

pub mod blind;
pub mod codec;
pub mod config;
pub mod ddl;
pub mod hanzi;
pub mod mask;
pub mod model;
pub mod normalize;
pub mod split;

pub use blind::{BlindKey, MIN_BLIND_KEY_LEN};
pub use codec::{
    CodecError, HashAlgo, HashRing, RowkeyCodec, RowkeyPart, TsFormat, parse_printable, printable,
};
pub use config::{
    BloomFilter, Compression, ConfigError, DataBlockEncoding, FamilyConfig, FieldKind, HbidxConfig,
    IndexedField, MemoryBudget, MemoryPart, SplitConfig, TableConfig, Ttl, parse_config,
};
pub use ddl::create_statement;

/// The config hbidx runs with when given none (`deploy/config/hbidx.toml`): the demo's `user`
/// table, also the example every doc starts from.
pub const EXAMPLE_CONFIG: &str = include_str!("../../deploy/config/hbidx.toml");
pub use mask::{mask_idcard, mask_phone};
pub use normalize::{
    NormalizeError, idcard_check_digit, normalize_idcard, normalize_keyword, normalize_name,
    normalize_phone,
};
pub use split::{
    HotspotReport, Region, RegionMap, SplitError, decimal_string_split, hex_string_split,
    parse_splits_file, sampled_splits, uniform_split,
};
