//! Paging cursors, sealed: a page's `next_cursor` is the last rowkey of the page encrypted and
//! authenticated (XChaCha20-Poly1305, a random 24-byte nonce each time, the table's name as
//! associated data), so it reveals no rowkey — a rowkey often *is* personal data, e.g.
//! `md5(uid)[..6] + uid` — and a cursor made up or edited by a client is refused, not walked.
//!
//! Every instance a client may page through must open the cursors of the others: the key is
//! `[security] cursor_key_file` or `HBIDX_CURSOR_KEY` where set (replicas behind one load
//! balancer), else derived from the peers' key on a sharded tier (every instance has it), else
//! random per process (a restart ends the paging in progress with a 400, as an expired cursor).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{Key, KeyInit, XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::ApiError;

const NONCE_BYTES: usize = 24;
const TAG_BYTES: usize = 16;
/// A cursor longer than this is refused before decoding: an HBase rowkey is at most 32 KiB.
const MAX_CURSOR_CHARS: usize = 48 * 1024;
/// The derivation's label: a key shared with another use (the peers' key authenticates HTTP
/// calls) yields an unrelated cursor key.
const LABEL: &[u8] = b"hbidx paging cursor v1";

/// Where the key came from, for the log and for the refusal's hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorKeySource {
    /// `[security] cursor_key_file` or `HBIDX_CURSOR_KEY`.
    Configured,
    /// The sharded tier's peers' key.
    Cluster,
    /// Made up at start: cursors don't outlive the process.
    Process,
}

/// Seals and opens paging cursors with one key.
pub struct CursorSeal {
    cipher: XChaCha20Poly1305,
    source: CursorKeySource,
}

impl std::fmt::Debug for CursorSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CursorSeal")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Default for CursorSeal {
    fn default() -> Self {
        Self::random()
    }
}

impl CursorSeal {
    /// A seal whose key is derived from `secret` (HMAC-SHA-256 under a fixed label), so that
    /// every instance given the same secret opens the others' cursors.
    pub fn from_secret(secret: &str, source: CursorKeySource) -> Self {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes())
            .expect("HMAC takes keys of any length");
        mac.update(LABEL);
        let derived: [u8; 32] = mac.finalize().into_bytes().into();
        Self {
            cipher: XChaCha20Poly1305::new(&Key::from(derived)),
            source,
        }
    }

    /// A seal with a key of its own: cursors only this process opens.
    pub fn random() -> Self {
        let key: [u8; 32] = rand::random();
        Self {
            cipher: XChaCha20Poly1305::new(&Key::from(key)),
            source: CursorKeySource::Process,
        }
    }

    pub fn source(&self) -> CursorKeySource {
        self.source
    }

    /// The cursor after `rowkey` in `table`.
    pub fn seal(&self, table: &str, rowkey: &[u8]) -> String {
        let nonce = XNonce::from(rand::random::<[u8; NONCE_BYTES]>());
        let sealed = self
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: rowkey,
                    aad: table.as_bytes(),
                },
            )
            .expect("XChaCha20-Poly1305 seals any message shorter than 256 GiB");
        let mut bytes = Vec::with_capacity(NONCE_BYTES + sealed.len());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The rowkey a cursor of `table` was sealed after, or a 400 on `cursor` that says why
    /// without quoting it.
    pub fn open(&self, table: &str, cursor: &str) -> Result<Vec<u8>, ApiError> {
        let refused = || {
            let hint = match self.source {
                CursorKeySource::Process => {
                    "; cursors end with the process that made them unless every instance \
                     shares [security] cursor_key_file or HBIDX_CURSOR_KEY"
                }
                CursorKeySource::Configured | CursorKeySource::Cluster => "",
            };
            ApiError::bad_request(
                "cursor",
                format!(
                    "not a cursor this service returned for table \"{table}\"; page again from \
                     the first page{hint}"
                ),
            )
        };
        if cursor.len() > MAX_CURSOR_CHARS {
            return Err(refused());
        }
        let bytes = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| refused())?;
        if bytes.len() < NONCE_BYTES + TAG_BYTES {
            return Err(refused());
        }
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        let nonce = XNonce::try_from(nonce).map_err(|_| refused())?;
        self.cipher
            .decrypt(
                &nonce,
                Payload {
                    msg: sealed,
                    aad: table.as_bytes(),
                },
            )
            .map_err(|_| refused())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "hbidx_aGJpZHggY3Vyc29yIHVuaXQgdGVzdHMnIGtleS4uLi4uLi4uLi4";

    #[test]
    fn a_cursor_opens_to_its_rowkey_and_reveals_nothing() {
        let seal = CursorSeal::from_secret(SECRET, CursorKeySource::Configured);
        let rowkey = b"1a2b3c13800138000";
        let cursor = seal.seal("user", rowkey);
        assert_eq!(seal.open("user", &cursor).unwrap(), rowkey);
        let raw = URL_SAFE_NO_PAD.decode(&cursor).unwrap();
        assert!(!raw.windows(8).any(|w| rowkey.windows(8).any(|r| r == w)));
        // A fresh nonce each time: the same rowkey never gives the same cursor.
        assert_ne!(seal.seal("user", rowkey), cursor);
        // Another instance with the same secret opens it.
        let peer = CursorSeal::from_secret(SECRET, CursorKeySource::Configured);
        assert_eq!(peer.open("user", &cursor).unwrap(), rowkey);
    }

    #[test]
    fn a_forged_edited_or_foreign_cursor_is_refused() {
        let seal = CursorSeal::from_secret(SECRET, CursorKeySource::Cluster);
        let cursor = seal.seal("user", b"rowkey-1");
        let refused = |cursor: &str, table: &str| match seal.open(table, cursor) {
            Err(ApiError::BadRequest { field, .. }) => assert_eq!(field, "cursor"),
            other => panic!("{other:?}"),
        };
        // The rowkey itself, as an unsealed cursor was.
        refused(&URL_SAFE_NO_PAD.encode(b"rowkey-1"), "user");
        refused("%%%", "user");
        refused("", "user");
        refused(&"A".repeat(MAX_CURSOR_CHARS + 1), "user");
        // One bit flipped.
        let mut bytes = URL_SAFE_NO_PAD.decode(&cursor).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        refused(&URL_SAFE_NO_PAD.encode(&bytes), "user");
        // Another table's, another key's.
        refused(&cursor, "order");
        let other = CursorSeal::random().seal("user", b"rowkey-1");
        refused(&other, "user");
    }
}
