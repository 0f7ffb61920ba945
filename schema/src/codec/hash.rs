//! The hash functions prefixes are built from, pinned to exact variants and byte orders (see
//! the module docs of [`crate::codec`]) because changing one moves every existing row.

use md5::{Digest, Md5};
use xxhash_rust::{xxh3::xxh3_64, xxh64::xxh64};

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
    pub(super) fn digest(&self, data: &[u8]) -> ([u8; 16], usize) {
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
pub(super) fn murmur3_32(data: &[u8]) -> u32 {
    let mut reader = data;
    // The crate reads through `std::io::Read`; reading a byte slice cannot fail.
    murmur3::murmur3_32(&mut reader, 0).expect("reading from a byte slice cannot fail")
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur3_is_x86_32_seed_0() {
        // Reference vectors of MurmurHash3_x86_32 with seed 0.
        assert_eq!(murmur3_32(b""), 0);
        assert_eq!(murmur3_32(b"hello"), 0x248b_fa47);
    }
}
