//! The key of blind fields (`blind = true` on an indexed field): the index of such a field holds
//! keyed hashes of its values (HMAC-SHA-256) instead of the values.
//!
//! The key comes from outside the config file (`HBIDX_BLIND_KEY`, or the file `[security]
//! blind_key_file` names): this crate does no IO, so the serve layer reads it and hands it to
//! every blind field ([`crate::HbidxConfig::set_blind_key`]). It is never printed: its `Debug`
//! is redacted, and only a short fingerprint (a MAC of a constant, which tells nothing about the
//! key or any value) appears in the index schema, so an index written under another key is
//! recognised as outdated and rebuilt instead of silently finding nothing.
//!
//! Which terms are hashed, and how lookups use them, is the indexer's `analysis` module.

use std::fmt;
use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// Shortest key accepted, in bytes: 256 bits written as text (e.g. `openssl rand -hex 32` gives
/// 64 characters), so a key can't be a guessable word.
pub const MIN_BLIND_KEY_LEN: usize = 32;

/// Bytes of HMAC-SHA-256 kept per term (hex-encoded: 32 characters). 128 bits is the truncation
/// RFC 2104 allows (at least half the output) and makes collisions between a table's values
/// negligible; a collision would only add a candidate the re-check drops.
const TAG_BYTES: usize = 16;

/// The secret key of blind fields. Cloning shares the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct BlindKey(Arc<[u8]>);

impl fmt::Debug for BlindKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BlindKey(redacted)")
    }
}

impl BlindKey {
    /// A key from its text (surrounding whitespace, such as a file's final newline, is not part
    /// of it). The error says what is wrong, never what the key is.
    pub fn new(text: &str) -> Result<Self, String> {
        let key = text.trim();
        if key.len() < MIN_BLIND_KEY_LEN {
            return Err(format!(
                "the blind key must be at least {MIN_BLIND_KEY_LEN} characters (e.g. the output of `openssl rand -hex 32`), got {}",
                key.len()
            ));
        }
        Ok(Self(Arc::from(key.as_bytes())))
    }

    /// The hex tag of `parts` under this key. The parts are length-prefixed, so no two
    /// different part lists hash the same input (`("ab", "c")` vs `("a", "bc")`).
    pub fn tag(&self, parts: &[&str]) -> String {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes keys of any length");
        for part in parts {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part.as_bytes());
        }
        let digest = mac.finalize().into_bytes();
        hex::encode(&digest[..TAG_BYTES])
    }

    /// Eight hex characters naming the key (a MAC of a constant): part of the index schema of
    /// blind fields, so an index written under another key is rebuilt rather than searched.
    pub fn fingerprint(&self) -> String {
        let mut tag = self.tag(&["hbidx blind key fingerprint"]);
        tag.truncate(8);
        tag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn short_keys_are_refused_without_echoing_them() {
        let err = BlindKey::new("hunter2").unwrap_err();
        assert!(err.contains("at least 32"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        assert!(BlindKey::new(&format!("{KEY}\n")).is_ok());
    }

    #[test]
    fn tags_depend_on_key_and_parts() {
        let key = BlindKey::new(KEY).unwrap();
        let other = BlindKey::new(&KEY.repeat(2)).unwrap();
        let tag = key.tag(&["exact", "phone", "13800138000"]);
        assert_eq!(tag.len(), 2 * TAG_BYTES);
        assert_eq!(tag, key.tag(&["exact", "phone", "13800138000"]));
        assert_ne!(tag, other.tag(&["exact", "phone", "13800138000"]));
        assert_ne!(tag, key.tag(&["exact", "mobile", "13800138000"]));
        assert_ne!(key.tag(&["ab", "c"]), key.tag(&["a", "bc"]));
        assert!(!tag.contains("13800138000"));
        assert_ne!(key.fingerprint(), other.fingerprint());
        assert_eq!(format!("{key:?}"), "BlindKey(redacted)");
    }
}
