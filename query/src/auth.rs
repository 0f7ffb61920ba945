//! API keys, scopes and per-key rate limits: the `[security]` section and the middleware that
//! enforces it on every route but the health checks.
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
//! Keys are stored as SHA-256 digests, not as themselves, so the config file (and every copy of
//! it in a ConfigMap, a backup or a diff) can't be used to call the service. A fast hash is
//! enough because keys are high-entropy random strings (`hbidx keys new`: 256 random bits), so
//! there is nothing to brute-force; a slow password hash (argon2, bcrypt) would cost
//! milliseconds on every request for no gain. Presented keys are hashed and compared with every
//! configured digest in constant time.
//!
//! Scopes are independent: `admin` does not imply `lookup`. An operator's or Prometheus's key
//! can read metrics and start reindexes without being able to look up personal data.
//!
//! Which route needs which scope is decided in one place, [`access_for`], by the route's
//! pattern (`MatchedPath`). A route that isn't listed there needs `admin`, so a new endpoint is
//! never open by accident.

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderMap, Method, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::{ApiError, AppState};

/// What a key may do. Routes need one scope each (or none, see [`Access`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Lookups, batch lookups, reading a row by key, the rowkey calculator.
    Lookup,
    /// Write-through: PUT and DELETE of rows.
    Write,
    /// Reindex jobs, indexer status, metrics, the dashboard's data.
    Admin,
}

impl Scope {
    pub const ALL: [Scope; 3] = [Scope::Lookup, Scope::Write, Scope::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Lookup => "lookup",
            Scope::Write => "write",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(text: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == text)
    }
}

/// What a route needs from the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No key: the health checks (probes can't send one), the OpenAPI document, and the
    /// dashboard's HTML shell, which holds no data and takes the key from its URL fragment for
    /// its own data requests.
    Public,
    /// Any valid key, whatever its scopes: the list of tables (names and field kinds only).
    AnyKey,
    Scope(Scope),
}

/// The scope a request needs, by method and route pattern (`None`: no route matched, the 404
/// fallback; a key is still required, so anonymous callers can't probe which routes exist).
pub fn access_for(method: &Method, route: Option<&str>) -> Access {
    match route {
        Some("/healthz" | "/readyz" | "/dashboard" | "/openapi.json") => Access::Public,
        Some("/v1/tables") | None => Access::AnyKey,
        Some(
            "/v1/tables/{table}/rows"
            | "/v1/tables/{table}/rows:batch-lookup"
            | "/v1/tables/{table}/rowkey",
        ) => Access::Scope(Scope::Lookup),
        // Reading a row by its key shows the same personal data a lookup does.
        Some("/v1/tables/{table}/rows/{key}") if method == Method::GET => {
            Access::Scope(Scope::Lookup)
        }
        Some("/v1/tables/{table}/rows/{key}") => Access::Scope(Scope::Write),
        // Reindex and verify jobs, job status, indexer status, /metrics, the dashboard's data
        // (/v1/ops/summary) and anything added later without being listed above.
        Some(_) => Access::Scope(Scope::Admin),
    }
}

// ---------------------------------------------------------------------------------------------
// Config: raw serde structs, then validation (no IO) with errors naming the key.

/// A `[security]` problem, naming the config key (`security.keys[1].sha256`).
#[derive(Debug, thiserror::Error)]
pub enum SecurityConfigError {
    /// The section doesn't have the expected shape (unknown key, wrong type).
    #[error("security: {0}")]
    Shape(String),
    /// A value is missing or invalid.
    #[error("{key}: {reason}")]
    Invalid { key: String, reason: String },
}

impl SecurityConfigError {
    fn invalid(key: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecurity {
    #[serde(default)]
    keys: Vec<RawKey>,
    rate_limit: Option<RawRateLimit>,
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

fn rate_limit(raw: &RawRateLimit, key: &str) -> Result<RateLimit, SecurityConfigError> {
    let positive = |value: i64, name: &str| {
        u32::try_from(value)
            .ok()
            .filter(|v| i64::from(*v) <= MAX_RATE)
            .and_then(NonZeroU32::new)
            .ok_or_else(|| {
                SecurityConfigError::invalid(
                    format!("{key}.{name}"),
                    format!("must be a whole number from 1 to {MAX_RATE}, got {value}"),
                )
            })
    };
    let per_second = match raw.per_second {
        Some(value) => positive(value, "per_second")?,
        None => {
            return Err(SecurityConfigError::invalid(
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecurityConfig {
    pub keys: Vec<KeyConfig>,
    /// The limit of keys that don't set their own; `None`: unlimited.
    pub default_rate_limit: Option<RateLimit>,
}

fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

impl SecurityConfig {
    /// Parses and validates `[security]` as handed over by the schema crate
    /// (`Config::raw_security`). No IO.
    pub fn from_raw(raw: Option<&toml::Value>) -> Result<Self, SecurityConfigError> {
        let raw: RawSecurity = match raw {
            None => RawSecurity::default(),
            Some(value) => value
                .clone()
                .try_into()
                .map_err(|err: toml::de::Error| SecurityConfigError::Shape(err.message().into()))?,
        };
        let default_rate_limit = raw
            .rate_limit
            .as_ref()
            .map(|limit| rate_limit(limit, "security.rate_limit"))
            .transpose()?;
        let mut keys = Vec::with_capacity(raw.keys.len());
        let mut ids = HashSet::new();
        let mut digests = HashSet::new();
        for (i, key) in raw.keys.iter().enumerate() {
            let at = format!("security.keys[{i}]");
            let id = key
                .id
                .as_deref()
                .ok_or_else(|| SecurityConfigError::invalid(format!("{at}.id"), "missing"))?;
            if !valid_id(id) {
                return Err(SecurityConfigError::invalid(
                    format!("{at}.id"),
                    format!(
                        "\"{id}\" must be 1 to 64 characters of letters, digits, '-', '_' or '.'"
                    ),
                ));
            }
            if !ids.insert(id) {
                return Err(SecurityConfigError::invalid(
                    format!("{at}.id"),
                    format!("\"{id}\" is used by another key"),
                ));
            }
            let sha256 = parse_digest(key.sha256.as_deref())
                .map_err(|reason| SecurityConfigError::invalid(format!("{at}.sha256"), reason))?;
            if !digests.insert(sha256) {
                return Err(SecurityConfigError::invalid(
                    format!("{at}.sha256"),
                    "the same key is configured twice",
                ));
            }
            let scopes = parse_scopes(key.scopes.as_deref())
                .map_err(|reason| SecurityConfigError::invalid(format!("{at}.scopes"), reason))?;
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
        Ok(Self {
            keys,
            default_rate_limit,
        })
    }

    /// Adds a key given in plain text (`--api-key` / `HBIDX_API_KEY`) with every scope, under
    /// `id`. `source` names where it came from in errors.
    pub fn add_plaintext_key(
        &mut self,
        id: &str,
        key: &str,
        source: &str,
    ) -> Result<(), SecurityConfigError> {
        check_plaintext_key(key).map_err(|reason| SecurityConfigError::invalid(source, reason))?;
        let sha256 = hash_key(key);
        if let Some(existing) = self.keys.iter().find(|k| k.sha256 == sha256) {
            return Err(SecurityConfigError::invalid(
                source,
                format!(
                    "this key is already configured as \"{}\" in [security]",
                    existing.id
                ),
            ));
        }
        if self.keys.iter().any(|k| k.id == id) {
            return Err(SecurityConfigError::invalid(
                source,
                format!("the key id \"{id}\" is taken by a [security] key; rename that one"),
            ));
        }
        self.keys.push(KeyConfig {
            id: id.to_string(),
            sha256,
            scopes: Scope::ALL.to_vec(),
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

/// Shortest key accepted in plain text. `hbidx keys new` makes 49-character keys; 24 random
/// base64 characters would still be 144 bits.
pub const MIN_KEY_LEN: usize = 24;

/// Whether `key` can be used as an API key: long enough to be unguessable, and printable ASCII
/// without spaces, so it survives an HTTP header and a shell.
pub fn check_plaintext_key(key: &str) -> Result<(), String> {
    if key.len() < MIN_KEY_LEN {
        return Err(format!(
            "an API key must be at least {MIN_KEY_LEN} characters (this one has {}); \
             `hbidx keys new` makes one",
            key.len()
        ));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("an API key must be printable ASCII without spaces".into());
    }
    Ok(())
}

/// SHA-256 of a key, as stored in `[security]`.
pub fn hash_key(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// A fresh key: `hbidx_` and 32 random bytes in base64url (256 bits from the OS-seeded CSPRNG).
pub fn generate_key() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("hbidx_{}", URL_SAFE_NO_PAD.encode(bytes))
}

// ---------------------------------------------------------------------------------------------
// Runtime: who is calling, may they, and are they over their limit.

/// The authenticated caller, put into the request's extensions by [`authorize`] for handlers
/// that log it (the audit line).
#[derive(Debug, Clone)]
pub struct Caller {
    pub key_id: Arc<str>,
}

struct KeyEntry {
    id: Arc<str>,
    sha256: [u8; 32],
    scopes: Vec<Scope>,
    rate_limit: Option<RateLimit>,
    limiter: Option<DefaultDirectRateLimiter>,
}

/// The keys the service accepts, with one rate limiter per key.
#[derive(Default)]
pub struct Auth {
    keys: Vec<KeyEntry>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|k| &*k.id).collect();
        f.debug_struct("Auth").field("keys", &ids).finish()
    }
}

/// Why a presented key was refused.
enum Refusal {
    Missing,
    NotBearer,
    Unknown,
}

impl Auth {
    pub fn new(config: &SecurityConfig) -> Self {
        let keys = config
            .keys
            .iter()
            .map(|key| {
                let rate_limit = key.rate_limit.or(config.default_rate_limit);
                KeyEntry {
                    id: key.id.as_str().into(),
                    sha256: key.sha256,
                    scopes: key.scopes.clone(),
                    rate_limit,
                    limiter: rate_limit.map(|limit| {
                        RateLimiter::direct(
                            Quota::per_second(limit.per_second).allow_burst(limit.burst),
                        )
                    }),
                }
            })
            .collect();
        Self { keys }
    }

    fn identify(&self, headers: &HeaderMap) -> Result<&KeyEntry, Refusal> {
        let value = headers.get(header::AUTHORIZATION).ok_or(Refusal::Missing)?;
        let value = value.to_str().map_err(|_| Refusal::NotBearer)?;
        let (scheme, key) = value.trim().split_once(' ').ok_or(Refusal::NotBearer)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(Refusal::NotBearer);
        }
        let digest = hash_key(key.trim());
        // Every configured digest is compared, in constant time, so the time taken doesn't
        // depend on how much of a guess matched or on which key it was.
        let mut found = None;
        for entry in &self.keys {
            if bool::from(entry.sha256.ct_eq(&digest)) {
                found = Some(entry);
            }
        }
        found.ok_or(Refusal::Unknown)
    }

    /// Authenticates, authorises and rate-limits one request to `route` (its pattern, for
    /// messages).
    fn check(
        &self,
        headers: &HeaderMap,
        method: &Method,
        route: Option<&str>,
    ) -> Result<Option<Caller>, ApiError> {
        let access = access_for(method, route);
        if access == Access::Public {
            return Ok(None);
        }
        let entry = self.identify(headers).map_err(|refusal| {
            ApiError::Unauthorized(match refusal {
                Refusal::Missing => {
                    "this endpoint needs an API key: send \"Authorization: Bearer <key>\"".into()
                }
                Refusal::NotBearer => "the Authorization header must be \"Bearer <key>\"".into(),
                Refusal::Unknown => "unknown API key".into(),
            })
        })?;
        if let Access::Scope(scope) = access
            && !entry.scopes.contains(&scope)
        {
            return Err(ApiError::Forbidden {
                key_id: entry.id.to_string(),
                scope: scope.as_str(),
                route: format!("{method} {}", route.unwrap_or("this path")),
            });
        }
        if let (Some(limiter), Some(limit)) = (&entry.limiter, entry.rate_limit)
            && let Err(not_until) = limiter.check()
        {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            return Err(ApiError::RateLimited {
                key_id: entry.id.to_string(),
                per_second: limit.per_second.get(),
                burst: limit.burst.get(),
                // Retry-After is in whole seconds; round up so a client that obeys it succeeds.
                retry_after_secs: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
            });
        }
        Ok(Some(Caller {
            key_id: entry.id.clone(),
        }))
    }
}

/// The middleware on every route (`Router::layer`, so `MatchedPath` is known): refuses the
/// request with 401/403/429 or passes it on with the [`Caller`] in its extensions.
/// Checks the request's key against `route` (its pattern) and puts the caller into its
/// extensions for the handlers. A refusal is audited here and returned for the caller of this to
/// answer; it runs in [`crate::front`], the one middleware in front of every route.
pub fn authorize(
    state: &AppState,
    request: &mut Request,
    route: Option<&str>,
) -> Result<(), ApiError> {
    let caller = match state.auth.check(request.headers(), request.method(), route) {
        Ok(caller) => caller,
        Err(refusal) => {
            // Refusals are audited too (repeated 401s are how a guessed key shows). The route
            // is its pattern, never the raw path, which can hold a looked-up value.
            let key = match &refusal {
                ApiError::Forbidden { key_id, .. } | ApiError::RateLimited { key_id, .. } => {
                    key_id.as_str()
                }
                _ => "-",
            };
            tracing::info!(
                target: "audit",
                key,
                method = %request.method(),
                route = route.unwrap_or("-"),
                status = refusal.status().as_u16(),
                "refused"
            );
            return Err(refusal);
        }
    };
    if let Some(caller) = caller {
        request.extensions_mut().insert(caller);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn config(text: &str) -> Result<SecurityConfig, SecurityConfigError> {
        let value: toml::Table = toml::from_str(text).unwrap();
        SecurityConfig::from_raw(value.get("security"))
    }

    fn hex_of(key: &str) -> String {
        hex::encode(hash_key(key))
    }

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
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
                "security: unknown field `keyz`",
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
    fn plaintext_keys_are_checked_and_get_every_scope() {
        let mut config = SecurityConfig::default();
        let err = config
            .add_plaintext_key("cli", "short", "--api-key")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--api-key: an API key must be at least 24"),
            "{err}"
        );
        let key = generate_key();
        assert!(key.len() >= 49 && key.starts_with("hbidx_"), "{key}");
        config.add_plaintext_key("cli", &key, "--api-key").unwrap();
        assert_eq!(config.keys[0].scopes, Scope::ALL.to_vec());
        assert_eq!(config.keys[0].sha256, hash_key(&key));
        let err = config
            .add_plaintext_key("other", &key, "HBIDX_API_KEY")
            .unwrap_err()
            .to_string();
        assert!(err.contains("already configured as \"cli\""), "{err}");
        assert_ne!(generate_key(), key);
    }

    #[test]
    fn route_table() {
        let get = Method::GET;
        assert_eq!(access_for(&get, Some("/healthz")), Access::Public);
        assert_eq!(access_for(&get, Some("/readyz")), Access::Public);
        assert_eq!(access_for(&get, None), Access::AnyKey);
        assert_eq!(
            access_for(&get, Some("/v1/tables/{table}/rows/{key}")),
            Access::Scope(Scope::Lookup)
        );
        assert_eq!(
            access_for(&Method::PUT, Some("/v1/tables/{table}/rows/{key}")),
            Access::Scope(Scope::Write)
        );
        assert_eq!(
            access_for(&Method::DELETE, Some("/v1/tables/{table}/rows/{key}")),
            Access::Scope(Scope::Write)
        );
        for admin in ["/metrics", "/v1/indexer/status", "/v1/jobs/{id}", "/v2/new"] {
            assert_eq!(
                access_for(&get, Some(admin)),
                Access::Scope(Scope::Admin),
                "{admin}"
            );
        }
    }

    fn one_key_auth(scopes: &[&str], limit: &str) -> (Auth, String) {
        let key = generate_key();
        let scopes: Vec<String> = scopes.iter().map(|s| format!("\"{s}\"")).collect();
        let text = format!(
            "[[security.keys]]\nid = \"app\"\nsha256 = \"{}\"\nscopes = [{}]\n{limit}",
            hex_of(&key),
            scopes.join(", ")
        );
        (Auth::new(&config(&text).unwrap()), key)
    }

    fn status_of(result: Result<Option<Caller>, ApiError>) -> Result<Option<String>, String> {
        result
            .map(|caller| caller.map(|c| c.key_id.to_string()))
            .map_err(|err| err.to_string())
    }

    #[test]
    fn keys_scopes_and_limits() {
        let (auth, key) = one_key_auth(&["lookup"], "rate_limit = { per_second = 1, burst = 2 }");
        let rows = Some("/v1/tables/{table}/rows");
        let get = Method::GET;
        let anonymous = HeaderMap::new();
        assert!(
            status_of(auth.check(&anonymous, &get, rows))
                .unwrap_err()
                .contains("needs an API key")
        );
        assert_eq!(
            status_of(auth.check(&anonymous, &get, Some("/healthz"))),
            Ok(None)
        );
        assert!(
            status_of(auth.check(&headers(&format!("Basic {key}")), &get, rows))
                .unwrap_err()
                .contains("must be \"Bearer <key>\"")
        );
        assert_eq!(
            status_of(auth.check(
                &headers("Bearer hbidx_not_a_configured_key_123456"),
                &get,
                rows
            )),
            Err("unknown API key".into())
        );
        let good = headers(&format!("bearer {key}"));
        let err = status_of(auth.check(&good, &get, Some("/v1/indexer/status"))).unwrap_err();
        assert!(
            err.contains("\"app\"") && err.contains("\"admin\""),
            "{err}"
        );
        // Burst of 2, then refused until a token comes back (1/s).
        assert_eq!(
            status_of(auth.check(&good, &get, rows)),
            Ok(Some("app".into()))
        );
        assert_eq!(
            status_of(auth.check(&good, &get, rows)),
            Ok(Some("app".into()))
        );
        match auth.check(&good, &get, rows) {
            Err(ApiError::RateLimited {
                retry_after_secs, ..
            }) => assert_eq!(retry_after_secs, 1),
            other => panic!("expected a rate limit, got {:?}", status_of(other)),
        }
    }
}
