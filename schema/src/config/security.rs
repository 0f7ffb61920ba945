//! `[security]`: the API keys the REST API accepts, their scopes and rate limits.
//!
//! ```toml
//! [security]
//! rate_limit = { per_second = 200, burst = 400 }   # default for every key; omit for no limit
//!
//! [[security.keys]]
//! id = "billing-app"           # named in audit lines and error messages; never the key itself
//! sha256 = "9f86d0…"           # SHA-256 (hex) of the key; `hbidx keys new` prints a key and this
//! scopes = ["lookup"]          # lookup | write | admin
//! rate_limit = { per_second = 50, burst = 100 }    # this key's own limit (optional)
//! ```
//!
//! `blind_key_file = "/run/secrets/hbidx-blind-key"` names the file holding the key of blind
//! fields (`blind = true`); without it the key is the `HBIDX_BLIND_KEY` environment variable.
//! `cursor_key_file = "/run/secrets/hbidx-cursor-key"` names the file holding the key paging
//! cursors are sealed with, shared by every instance a client pages through (else
//! `HBIDX_CURSOR_KEY`; on a sharded tier, derived from the peers' key; else one per process).
//!
//! Keys are kept as SHA-256 digests, never as themselves; why, and how presented keys are
//! checked, is in the query crate's `auth` module, which enforces this section.

use std::collections::HashSet;
use std::num::NonZeroU32;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::ConfigError;

/// What a key may do. Routes need one scope each (or none, see [`Access`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Lookups, batch lookups, reading a row by key, the rowkey calculator.
    Lookup,
    /// Write-through: PUT and DELETE of rows.
    Write,
    /// Reindex jobs, indexer status, metrics, the dashboard's data.
    Admin,
    /// The internal routes other instances of a sharded tier call (`/v1/internal/...`): index
    /// hits of this shard, forwarded writes and repairs, shard status.
    Cluster,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Lookup, Scope::Write, Scope::Admin, Scope::Cluster];

    /// Every scope a client can need: a key given in plain text (`--api-key`) gets these. The
    /// internal routes take only a key with the `cluster` scope (`HBIDX_CLUSTER_KEY` or a
    /// configured one), so an operator's key can't call them.
    pub const CLIENT: [Scope; 3] = [Scope::Lookup, Scope::Write, Scope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Lookup => "lookup",
            Scope::Write => "write",
            Scope::Admin => "admin",
            Scope::Cluster => "cluster",
        }
    }

    pub fn parse(text: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == text)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSecurity {
    #[serde(default)]
    keys: Vec<RawKey>,
    rate_limit: Option<RawRateLimit>,
    refused_rate_limit: Option<RawRateLimit>,
    blind_key_file: Option<String>,
    cursor_key_file: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    id: Option<String>,
    sha256: Option<String>,
    scopes: Option<Vec<String>>,
    rate_limit: Option<RawRateLimit>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    per_second: Option<i64>,
    burst: Option<i64>,
}

/// Requests per second and how many may come at once (a token bucket of `burst` tokens
/// refilled at `per_second`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    pub per_second: NonZeroU32,
    pub burst: NonZeroU32,
}

const MAX_RATE: i64 = 10_000_000;

fn rate_limit(raw: &RawRateLimit, key: &str) -> Result<RateLimit, ConfigError> {
    let positive = |value: i64, name: &str| {
        u32::try_from(value)
            .ok()
            .filter(|v| i64::from(*v) <= MAX_RATE)
            .and_then(NonZeroU32::new)
            .ok_or_else(|| {
                ConfigError::invalid(
                    format!("{key}.{name}"),
                    format!("must be a whole number from 1 to {MAX_RATE}, got {value}"),
                )
            })
    };
    let per_second = match raw.per_second {
        Some(value) => positive(value, "per_second")?,
        None => {
            return Err(ConfigError::invalid(
                format!("{key}.per_second"),
                "missing (requests per second allowed for the key)",
            ));
        }
    };
    let burst = match raw.burst {
        Some(value) => positive(value, "burst")?,
        None => per_second,
    };
    Ok(RateLimit { per_second, burst })
}

/// One configured key, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyConfig {
    pub id: String,
    pub sha256: [u8; 32],
    pub scopes: Vec<Scope>,
    pub rate_limit: Option<RateLimit>,
}

/// The validated `[security]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecurityConfig {
    pub keys: Vec<KeyConfig>,
    /// The limit of keys that don't set their own; `None`: unlimited.
    pub default_rate_limit: Option<RateLimit>,
    /// Requests refused for want of a valid key (401), per client address: past it they get
    /// 429 without an audit line each, so a client without a key can't grow the log at will.
    pub refused_rate_limit: RateLimit,
    /// A file holding the key of blind fields (`blind = true`); without it the key is
    /// `HBIDX_BLIND_KEY`. Only the path: the serve layer reads the file.
    pub blind_key_file: Option<String>,
    /// A file holding the key paging cursors are sealed with (a key of the form `hbidx keys
    /// new` prints); without it `HBIDX_CURSOR_KEY`. Only the path, as for `blind_key_file`.
    pub cursor_key_file: Option<String>,
}

/// `[security] refused_rate_limit` by default: 10 refused requests a second per client address,
/// bursts of 100. A client with a wrong key gives up or gets fixed long before that; a scanner
/// or a guesser is slowed a thousandfold from what one connection could send.
pub const DEFAULT_REFUSED_RATE_LIMIT: RateLimit = RateLimit {
    per_second: NonZeroU32::new(10).unwrap(),
    burst: NonZeroU32::new(100).unwrap(),
};

impl Default for SecurityConfig {
    fn default() -> Self {
        Self {
            keys: Vec::new(),
            default_rate_limit: None,
            refused_rate_limit: DEFAULT_REFUSED_RATE_LIMIT,
            blind_key_file: None,
            cursor_key_file: None,
        }
    }
}

fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

impl SecurityConfig {
    /// Validates `[security]`. No IO.
    pub(crate) fn validate(raw: RawSecurity) -> Result<Self, ConfigError> {
        let default_rate_limit = raw
            .rate_limit
            .as_ref()
            .map(|limit| rate_limit(limit, "security.rate_limit"))
            .transpose()?;
        let refused_rate_limit = raw
            .refused_rate_limit
            .as_ref()
            .map(|limit| rate_limit(limit, "security.refused_rate_limit"))
            .transpose()?
            .unwrap_or(DEFAULT_REFUSED_RATE_LIMIT);
        let mut keys = Vec::with_capacity(raw.keys.len());
        let mut ids = HashSet::new();
        let mut digests = HashSet::new();
        for (i, key) in raw.keys.iter().enumerate() {
            let at = format!("security.keys[{i}]");
            let id = key
                .id
                .as_deref()
                .ok_or_else(|| ConfigError::invalid(format!("{at}.id"), "missing"))?;
            if !valid_id(id) {
                return Err(ConfigError::invalid(
                    format!("{at}.id"),
                    format!(
                        "\"{id}\" must be 1 to 64 characters of letters, digits, '-', '_' or '.'"
                    ),
                ));
            }
            if !ids.insert(id) {
                return Err(ConfigError::invalid(
                    format!("{at}.id"),
                    format!("\"{id}\" is used by another key"),
                ));
            }
            let sha256 = parse_digest(key.sha256.as_deref())
                .map_err(|reason| ConfigError::invalid(format!("{at}.sha256"), reason))?;
            if !digests.insert(sha256) {
                return Err(ConfigError::invalid(
                    format!("{at}.sha256"),
                    "the same key is configured twice",
                ));
            }
            let scopes = parse_scopes(key.scopes.as_deref())
                .map_err(|reason| ConfigError::invalid(format!("{at}.scopes"), reason))?;
            let rate_limit = key
                .rate_limit
                .as_ref()
                .map(|limit| rate_limit(limit, &format!("{at}.rate_limit")))
                .transpose()?;
            keys.push(KeyConfig {
                id: id.to_string(),
                sha256,
                scopes,
                rate_limit,
            });
        }
        for (key, path) in [
            ("security.blind_key_file", &raw.blind_key_file),
            ("security.cursor_key_file", &raw.cursor_key_file),
        ] {
            if path.as_deref().is_some_and(str::is_empty) {
                return Err(ConfigError::invalid(
                    key,
                    "is empty; name the file holding the key, or leave the key out",
                ));
            }
        }
        Ok(Self {
            keys,
            default_rate_limit,
            refused_rate_limit,
            blind_key_file: raw.blind_key_file,
            cursor_key_file: raw.cursor_key_file,
        })
    }

    /// Adds a key given in plain text (`--api-key` / `HBIDX_API_KEY`) with the client scopes
    /// ([`Scope::CLIENT`]: every one but `cluster`), under `id`. `source` names where it came
    /// from in errors.
    pub fn add_plaintext_key(
        &mut self,
        id: &str,
        key: &str,
        source: &str,
    ) -> Result<(), ConfigError> {
        let (sha256, existing) = self.checked_plaintext(key, source)?;
        if let Some(existing) = existing {
            return Err(ConfigError::invalid(
                source,
                format!(
                    "this key is already configured as \"{}\" in [security]",
                    existing.id
                ),
            ));
        }
        self.push_plaintext(id, sha256, Scope::CLIENT.to_vec(), source)
    }

    /// Adds the key the instances of a sharded tier call each other's internal routes with
    /// (`HBIDX_CLUSTER_KEY`), with the `cluster` scope only. The same key may also be configured
    /// in `[security]` (by its hash), then with the `cluster` scope alone: a peer key that could
    /// also look up, write or administer would make every instance's environment a client key.
    pub fn add_cluster_key(
        &mut self,
        id: &str,
        key: &str,
        source: &str,
    ) -> Result<(), ConfigError> {
        let (sha256, existing) = self.checked_plaintext(key, source)?;
        if let Some(existing) = existing {
            if existing.scopes == [Scope::Cluster] {
                return Ok(());
            }
            return Err(ConfigError::invalid(
                source,
                format!(
                    "this key is also \"{}\" (in [security] or --api-key) with scopes other than \
                     \"cluster\"; the key the instances call each other with must have the \
                     cluster scope only: `hbidx keys new --id cluster --scope cluster` makes one",
                    existing.id
                ),
            ));
        }
        self.push_plaintext(id, sha256, vec![Scope::Cluster], source)
    }

    /// A plain-text key's digest once it passes [`check_plaintext_key`], and the configured key
    /// with the same digest, if any.
    fn checked_plaintext(
        &self,
        key: &str,
        source: &str,
    ) -> Result<([u8; 32], Option<&KeyConfig>), ConfigError> {
        check_plaintext_key(key).map_err(|reason| ConfigError::invalid(source, reason))?;
        let sha256 = hash_key(key);
        Ok((sha256, self.keys.iter().find(|k| k.sha256 == sha256)))
    }

    fn push_plaintext(
        &mut self,
        id: &str,
        sha256: [u8; 32],
        scopes: Vec<Scope>,
        source: &str,
    ) -> Result<(), ConfigError> {
        if self.keys.iter().any(|k| k.id == id) {
            return Err(ConfigError::invalid(
                source,
                format!("the key id \"{id}\" is taken by a [security] key; rename that one"),
            ));
        }
        self.keys.push(KeyConfig {
            id: id.to_string(),
            sha256,
            scopes,
            rate_limit: None,
        });
        Ok(())
    }
}

fn parse_digest(raw: Option<&str>) -> Result<[u8; 32], String> {
    let raw = raw.ok_or("missing (the SHA-256 of the key in hex; `hbidx keys hash` prints it)")?;
    let mut digest = [0u8; 32];
    hex::decode_to_slice(raw.trim(), &mut digest).map_err(|_| {
        "must be 64 hex characters: the SHA-256 of the key, not the key itself \
         (`hbidx keys hash` prints it)"
            .to_string()
    })?;
    Ok(digest)
}

fn parse_scopes(raw: Option<&[String]>) -> Result<Vec<Scope>, String> {
    let raw = raw.ok_or("missing; give one or more of \"lookup\", \"write\", \"admin\"")?;
    if raw.is_empty() {
        return Err("empty; give one or more of \"lookup\", \"write\", \"admin\"".into());
    }
    let mut scopes = Vec::with_capacity(raw.len());
    for text in raw {
        let scope = Scope::parse(text).ok_or_else(|| {
            format!("unknown scope \"{text}\"; scopes are \"lookup\", \"write\" and \"admin\"")
        })?;
        if scopes.contains(&scope) {
            return Err(format!("\"{text}\" is given twice"));
        }
        scopes.push(scope);
    }
    Ok(scopes)
}

/// What every API key starts with (`hbidx keys new`): a key pasted into the wrong place is
/// recognisable, and secret scanners can match it.
pub const KEY_PREFIX: &str = "hbidx_";

/// Base64url characters after [`KEY_PREFIX`]: 32 random bytes, 256 bits.
pub const KEY_RANDOM_CHARS: usize = 43;

/// Fewest distinct characters the random part may have. 43 characters drawn at random from
/// base64url's 64 hold ~31 distinct ones, and fewer than 16 about once in 10^12 keys; a
/// placeholder (`hbidx_aaaa…`) or a made-up pattern has far fewer.
pub const KEY_MIN_DISTINCT: usize = 16;

/// Whether `key` can be used as an API key in plain text (`--api-key`, `HBIDX_API_KEY`,
/// `HBIDX_CLUSTER_KEY`): exactly the form `hbidx keys new` prints, [`KEY_PREFIX`] and 32 bytes
/// in base64url without padding, with at least [`KEY_MIN_DISTINCT`] distinct characters. Any
/// other string (a placeholder, a password, a short or patterned secret) is refused: nobody
/// can tell a guessable key from a strong one by looking, so only the generator's form is
/// taken. The reason never quotes the key.
pub fn check_plaintext_key(key: &str) -> Result<(), String> {
    const HOW: &str = "`hbidx keys new` makes one";
    let Some(random) = key.strip_prefix(KEY_PREFIX) else {
        return Err(format!(
            "an API key must be what `hbidx keys new` prints: \"{KEY_PREFIX}\" and \
             {KEY_RANDOM_CHARS} base64url characters; this one does not start with \
             \"{KEY_PREFIX}\""
        ));
    };
    let base64url = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    if random.len() != KEY_RANDOM_CHARS || !random.bytes().all(base64url) {
        return Err(format!(
            "an API key must be \"{KEY_PREFIX}\" and {KEY_RANDOM_CHARS} base64url characters \
             (32 random bytes); this one has {} characters after the prefix{}; {HOW}",
            random.chars().count(),
            if random.bytes().all(base64url) {
                ""
            } else {
                ", not all of them base64url"
            }
        ));
    }
    let mut seen = [false; 256];
    let distinct = random
        .bytes()
        .filter(|&b| !std::mem::replace(&mut seen[usize::from(b)], true))
        .count();
    if distinct < KEY_MIN_DISTINCT {
        return Err(format!(
            "an API key must be random: this one has only {distinct} distinct characters after \
             \"{KEY_PREFIX}\" (a random key has ~31, at least {KEY_MIN_DISTINCT} are required); \
             {HOW}"
        ));
    }
    Ok(())
}

/// SHA-256 of a key, as stored in `[security]`.
pub fn hash_key(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Result<SecurityConfig, ConfigError> {
        crate::config::parse_config(text).map(|config| config.security)
    }

    fn hex_of(key: &str) -> String {
        hex::encode(hash_key(key))
    }

    #[test]
    fn sha256_matches_a_known_vector() {
        // FIPS 180-2 example: SHA-256("abc").
        assert_eq!(
            hex_of("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn valid_section_parses() {
        let text = format!(
            "[security]\nrate_limit = {{ per_second = 10 }}\n\
             [[security.keys]]\nid = \"app\"\nsha256 = \"{}\"\nscopes = [\"lookup\", \"write\"]\n\
             [[security.keys]]\nid = \"ops\"\nsha256 = \"{}\"\nscopes = [\"admin\"]\n\
             rate_limit = {{ per_second = 5, burst = 20 }}\n",
            hex_of("k1"),
            hex_of("k2")
        );
        let config = config(&text).unwrap();
        assert_eq!(config.keys.len(), 2);
        assert_eq!(config.keys[0].scopes, vec![Scope::Lookup, Scope::Write]);
        assert_eq!(config.keys[0].rate_limit, None);
        let ten = NonZeroU32::new(10).unwrap();
        assert_eq!(
            config.default_rate_limit,
            Some(RateLimit {
                per_second: ten,
                burst: ten
            })
        );
        assert_eq!(config.keys[1].rate_limit.map(|l| l.burst.get()), Some(20));
    }

    #[test]
    fn errors_name_the_key() {
        let h = hex_of("k1");
        for (text, expected) in [
            (
                "[[security.keys]]\nsha256 = \"00\"\nscopes = [\"lookup\"]".to_string(),
                "security.keys[0].id: missing",
            ),
            (
                "[[security.keys]]\nid = \"a\"\nsha256 = \"k1\"\nscopes = [\"lookup\"]".into(),
                "security.keys[0].sha256: must be 64 hex characters",
            ),
            (
                format!("[[security.keys]]\nid = \"a\"\nsha256 = \"{h}\"\nscopes = [\"read\"]"),
                "security.keys[0].scopes: unknown scope \"read\"",
            ),
            (
                format!("[[security.keys]]\nid = \"a\"\nsha256 = \"{h}\"\nscopes = []"),
                "security.keys[0].scopes: empty",
            ),
            (
                format!(
                    "[[security.keys]]\nid = \"a\"\nsha256 = \"{h}\"\nscopes = [\"admin\"]\n\
                     [[security.keys]]\nid = \"a\"\nsha256 = \"{}\"\nscopes = [\"admin\"]",
                    hex_of("k2")
                ),
                "security.keys[1].id: \"a\" is used by another key",
            ),
            (
                format!(
                    "[[security.keys]]\nid = \"a\"\nsha256 = \"{h}\"\nscopes = [\"admin\"]\n\
                     [[security.keys]]\nid = \"b\"\nsha256 = \"{h}\"\nscopes = [\"admin\"]"
                ),
                "security.keys[1].sha256: the same key is configured twice",
            ),
            (
                "[security]\nrate_limit = { per_second = 0 }".into(),
                "security.rate_limit.per_second: must be a whole number from 1",
            ),
            (
                format!(
                    "[[security.keys]]\nid = \"a\"\nsha256 = \"{h}\"\nscopes = [\"admin\"]\n\
                     rate_limit = {{ burst = 3 }}"
                ),
                "security.keys[0].rate_limit.per_second: missing",
            ),
            (
                "[security]\nkeyz = []".into(),
                "security.keyz: unknown field `keyz`",
            ),
            (
                "[[security.keys]]\nid = \"has space\"\nsha256 = \"00\"\nscopes = [\"admin\"]"
                    .into(),
                "security.keys[0].id: \"has space\" must be",
            ),
        ] {
            let err = config(&text).expect_err(&text).to_string();
            assert!(err.starts_with(expected), "{text}\n=> {err}");
        }
    }

    #[test]
    fn plaintext_keys_are_checked_and_get_the_client_scopes() {
        let mut config = SecurityConfig::default();
        let key = "hbidx_aGJpZHggc2NoZW1hIHVuaXQgdGVzdCBrZXkuLi4uLi4";
        for (bad, expected) in [
            ("short", "does not start with \"hbidx_\""),
            (
                "REPLACE-with-the-output-of-hbidx-keys-new",
                "does not start with",
            ),
            ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "does not start with"),
            (
                "hbidx_0123456789abcdef",
                "this one has 16 characters after the prefix;",
            ),
            (&format!("{key}x"), "this one has 44 characters"),
            (
                "hbidx_aGJpZHggc2NoZW1hIHVuaXQgdGVzdCBrZXkuLi4uLi+",
                "not all of them base64url",
            ),
            (
                "hbidx_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                "only 1 distinct characters",
            ),
            (
                "hbidx_abcdefghijklmnoabcdefghijklmnoabcdefghijklm",
                "only 15 distinct characters",
            ),
        ] {
            let err = config
                .add_plaintext_key("cli", bad, "--api-key")
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("--api-key: an API key must"), "{err}");
            assert!(err.contains(expected), "{bad}: {err}");
            assert!(!err.contains(bad), "the key is never echoed: {err}");
        }
        // What `hbidx keys new` makes always passes.
        for _ in 0..1000 {
            let random = rand::random::<[u8; 32]>();
            let fresh = format!(
                "hbidx_{}",
                base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, random)
            );
            check_plaintext_key(&fresh).unwrap();
        }
        config.add_plaintext_key("cli", key, "--api-key").unwrap();
        assert_eq!(config.keys[0].scopes, Scope::CLIENT.to_vec());
        assert_eq!(config.keys[0].sha256, hash_key(key));
        let err = config
            .add_plaintext_key("other", key, "HBIDX_API_KEY")
            .unwrap_err()
            .to_string();
        assert!(err.contains("already configured as \"cli\""), "{err}");
        // The client key can't double as the peers' key.
        let err = config
            .add_cluster_key("peers", key, "HBIDX_CLUSTER_KEY")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cluster scope only"), "{err}");
    }

    #[test]
    fn the_cluster_key_has_the_cluster_scope_only() {
        let key = "hbidx_aGJpZHggc2NoZW1hIHVuaXQgdGVzdCBrZXkuLi4uLi4";
        let mut config = SecurityConfig::default();
        config
            .add_cluster_key("peers", key, "HBIDX_CLUSTER_KEY")
            .unwrap();
        assert_eq!(config.keys[0].scopes, vec![Scope::Cluster]);
        // Configured by its hash as well, with the cluster scope only: taken once.
        let text = format!(
            "[[security.keys]]\nid = \"cluster\"\nsha256 = \"{}\"\nscopes = [\"cluster\"]\n",
            hex_of(key)
        );
        let mut configured = config_of(&text);
        configured
            .add_cluster_key("peers", key, "HBIDX_CLUSTER_KEY")
            .unwrap();
        assert_eq!(configured.keys.len(), 1);
        let text = text.replace("[\"cluster\"]", "[\"cluster\", \"admin\"]");
        let mut wider = config_of(&text);
        assert!(
            wider
                .add_cluster_key("peers", key, "HBIDX_CLUSTER_KEY")
                .is_err()
        );
    }

    fn config_of(text: &str) -> SecurityConfig {
        config(text).unwrap()
    }
}
