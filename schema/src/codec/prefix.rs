//! The validated prefix part and how its bytes are written: what spreads rows over regions,
//! apart from the key and timestamp handling in [`design`](super::design).

use super::hash::HashAlgo;
use super::part::{RowkeyPart, decimal_digits};
use super::ring::HashRing;
use super::{MAX_BUCKETS, MAX_DECIMAL_WIDTH, MAX_RING_REGIONS, MAX_SEPARATOR_LEN};

/// The validated prefix part, with anything expensive (the ring) built once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Prefix {
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
    pub(super) fn len(&self) -> usize {
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

/// `substr(hex(hash(id)),0,width)` or the first `width` digest bytes. `width` was validated
/// against the digest length; slicing is still bounded so a bad width cannot panic.
/// Appends `substr(hex(hash(id)),0,width)` or the first `width` digest bytes to `out`. `width`
/// was validated against the digest length; slicing is still bounded so a bad width cannot
/// panic. Written in place, with no allocation: every encode and every lookup result's decode
/// (which re-checks the prefix) comes through here.
pub(super) fn push_hash_prefix(
    out: &mut Vec<u8>,
    algo: HashAlgo,
    width: usize,
    binary: bool,
    id: &str,
) {
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
pub(super) fn push_decimal(out: &mut Vec<u8>, value: u64, width: usize, separator: &str) {
    out.extend_from_slice(format!("{value:0width$}").as_bytes());
    out.extend_from_slice(separator.as_bytes());
}

pub(super) fn prefix_split_space(prefix: &Prefix) -> u128 {
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
pub(super) fn validate_prefix(part: &RowkeyPart) -> Result<Prefix, String> {
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
