//! [`RowkeyCodec`], the codec proper: validates a design, encodes natural keys, decodes rowkeys
//! and plans the splits of its prefix space. What each prefix kind writes lives in `prefix`.

use super::escape::printable;
use super::part::{RowkeyPart, TsFormat};
use super::prefix::{Prefix, prefix_split_space, push_decimal, push_hash_prefix, validate_prefix};
use super::{CodecError, DECIMAL_TS_WIDTH, MAX_ROWKEY_LEN};

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
