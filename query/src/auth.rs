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
//!
//! Requests refused for want of a valid key (401) are limited per client address
//! (`[security] refused_rate_limit`): past the limit they get 429 without an audit line each,
//! so a client without a key can't grow the log at will. The limiter keeps one bucket per
//! recent address (an IPv6 /64 counts as one), at most [`MAX_REFUSING_ADDRESSES`].

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderMap, Method, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use subtle::ConstantTimeEq;

use crate::{ApiError, AppState};

pub use hbidx_schema::config::{
    DEFAULT_REFUSED_RATE_LIMIT, KEY_PREFIX, KeyConfig, RateLimit, Scope, SecurityConfig,
    check_plaintext_key, hash_key,
};

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
            | "/v1/tables/{table}/rows:lookup"
            | "/v1/tables/{table}/rows:batch-lookup"
            | "/v1/tables/{table}/rowkey",
        ) => Access::Scope(Scope::Lookup),
        // Reading a row by its key shows the same personal data a lookup does; HEAD is answered
        // by the same handler and tells whether the row exists and how big it is.
        Some("/v1/tables/{table}/rows/{key}")
            if method == Method::GET || method == Method::HEAD =>
        {
            Access::Scope(Scope::Lookup)
        }
        Some("/v1/tables/{table}/rows/{key}") => Access::Scope(Scope::Write),
        Some(route) if route.starts_with("/v1/internal/") => Access::Scope(Scope::Cluster),
        // Reindex and verify jobs, job status, indexer status, /metrics, the dashboard's data
        // (/v1/ops/summary) and anything added later without being listed above.
        Some(_) => Access::Scope(Scope::Admin),
    }
}

/// A fresh key: `hbidx_` and 32 random bytes in base64url (256 bits from the OS-seeded CSPRNG).
/// Drawn again in the ~1-in-10^12 case that the draw fails [`check_plaintext_key`]'s rule.
pub fn generate_key() -> String {
    loop {
        let bytes: [u8; 32] = rand::random();
        let key = format!("{KEY_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
        if check_plaintext_key(&key).is_ok() {
            return key;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Runtime: who is calling, may they, and are they over their limit.

/// The address a request's connection came from, put into its extensions by the HTTP server
/// (hbidx-serve's `http.rs`); absent for requests made in-process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// The most client addresses whose refused requests are tracked at once. Past it, buckets back
/// at their full burst are dropped; if every one is still in use, further refusals from
/// addresses not tracked get 429 too. Bounds the limiter at a few MB whatever the number of
/// addresses a flood comes from.
pub const MAX_REFUSING_ADDRESSES: usize = 65_536;

/// Refused requests (401) per client address.
struct RefusalLimiter {
    limit: RateLimit,
    limiter: DefaultKeyedRateLimiter<IpAddr>,
}

impl RefusalLimiter {
    fn new(limit: RateLimit) -> Self {
        Self {
            limit,
            limiter: RateLimiter::keyed(
                Quota::per_second(limit.per_second).allow_burst(limit.burst),
            ),
        }
    }

    /// `Err(seconds to wait)` when `addr` has been refused too often.
    fn check(&self, addr: IpAddr) -> Result<(), u64> {
        let bucket = client_bucket(addr);
        if self.limiter.len() >= MAX_REFUSING_ADDRESSES {
            self.limiter.retain_recent();
            self.limiter.shrink_to_fit();
            if self.limiter.len() >= MAX_REFUSING_ADDRESSES {
                return Err(1);
            }
        }
        self.limiter.check_key(&bucket).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            wait.as_secs() + u64::from(wait.subsec_nanos() > 0)
        })
    }
}

/// A client address as per-client limits count it: IPv4 as it is, IPv6 by its /64 (one host
/// has a whole /64 to pick addresses from). The refused-request limit here and the HTTP
/// server's connection cap per client both count this.
pub fn client_bucket(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

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

/// The keys the service accepts, with one rate limiter per key, and the limit of refused
/// requests per client address.
pub struct Auth {
    keys: Vec<KeyEntry>,
    refusals: RefusalLimiter,
}

impl Default for Auth {
    fn default() -> Self {
        Self::new(&SecurityConfig::default())
    }
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
                // The peers' key takes no default limit: a 429 from a peer would mark it not
                // ready, and a tier under load would take its own shards down.
                let rate_limit = if key.scopes == [Scope::Cluster] {
                    key.rate_limit
                } else {
                    key.rate_limit.or(config.default_rate_limit)
                };
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
        Self {
            keys,
            refusals: RefusalLimiter::new(config.refused_rate_limit),
        }
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
            if let (ApiError::Unauthorized(_), Some(ClientAddr(addr))) =
                (&refusal, request.extensions().get::<ClientAddr>())
                && let Err(retry_after_secs) = state.auth.refusals.check(*addr)
            {
                // Counted, not audited line by line: that is what the limit is for.
                metrics::counter!("hbidx_auth_refusals_limited_total").increment(1);
                let limit = state.auth.refusals.limit;
                return Err(ApiError::TooManyRefusals {
                    per_second: limit.per_second.get(),
                    burst: limit.burst.get(),
                    retry_after_secs,
                });
            }
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
                // From the fixed set: the method is caller text.
                method = crate::telemetry::method_label(request.method()),
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

    fn config(text: &str) -> Result<SecurityConfig, hbidx_schema::ConfigError> {
        hbidx_schema::parse_config(text).map(|config| config.security)
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
    fn generated_keys_are_long_and_fresh() {
        let key = generate_key();
        assert!(key.len() >= 49 && key.starts_with("hbidx_"), "{key}");
        check_plaintext_key(&key).unwrap();
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
            access_for(&Method::HEAD, Some("/v1/tables/{table}/rows/{key}")),
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
        assert_eq!(
            access_for(&get, Some("/v1/internal/tables/{table}/hits")),
            Access::Scope(Scope::Cluster)
        );
        for admin in [
            "/metrics",
            "/v1/indexer/status",
            "/v1/jobs/{id}",
            "/v1/cluster",
            "/v2/new",
        ] {
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

    /// A key with the `cluster` scope alone takes no default limit (a 429 would mark the peer
    /// not ready); every other key does.
    #[test]
    fn the_peers_key_takes_no_default_limit() {
        let internal = Some("/v1/internal/tables/{table}/hits");
        let get = Method::GET;
        let limited = |scopes: &str| {
            let key = generate_key();
            let text = format!(
                "[security]\nrate_limit = {{ per_second = 1 }}\n[[security.keys]]\nid = \"app\"\n\
                 sha256 = \"{}\"\nscopes = [{scopes}]\n",
                hex_of(&key)
            );
            (Auth::new(&config(&text).unwrap()), key)
        };
        let (peers, key) = limited("\"cluster\"");
        let peer = headers(&format!("Bearer {key}"));
        for _ in 0..50 {
            assert_eq!(
                status_of(peers.check(&peer, &get, internal)),
                Ok(Some("app".into()))
            );
        }
        let (wide, key) = limited("\"cluster\", \"lookup\"");
        let caller = headers(&format!("Bearer {key}"));
        assert!(status_of(wide.check(&caller, &get, internal)).is_ok());
        assert!(matches!(
            wide.check(&caller, &get, internal),
            Err(ApiError::RateLimited { .. })
        ));
    }
}
