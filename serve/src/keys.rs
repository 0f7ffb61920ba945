//! The API keys a server starts with: `[security]` plus the key given on the command line.

use anyhow::{Result, anyhow, bail};
use hbidx_query::auth::{Auth, SecurityConfig};
use hbidx_schema::config::HbidxConfig;

/// The audit id of the key given with `--api-key` / `HBIDX_API_KEY`.
pub const CLI_KEY_ID: &str = "cli";

/// The keys of `[security]` plus the one given on the command line, if any.
pub fn security_config(config: &HbidxConfig, api_key: Option<&str>) -> Result<SecurityConfig> {
    let mut security = config.security.clone();
    if let Some(key) = api_key {
        security
            .add_plaintext_key(CLI_KEY_ID, key, "--api-key / HBIDX_API_KEY")
            .map_err(|err| anyhow!("{err}"))?;
    }
    Ok(security)
}

/// The keys `hbidx serve` accepts. With none at all it refuses to start: every route but the
/// health checks needs a key, so such a server would only ever answer 401, and generating one
/// (as the demo does) would put a credential into the server's log.
pub fn serve_auth(config: &HbidxConfig, api_key: Option<&str>) -> Result<Auth> {
    let security = security_config(config, api_key)?;
    if security.keys.is_empty() {
        bail!(
            "no API keys: every route but /healthz and /readyz needs one. Add [[security.keys]] \
             to the config (`hbidx keys new` prints a key and its entry) or pass --api-key KEY \
             (or set HBIDX_API_KEY)"
        );
    }
    tracing::info!(keys = security.keys.len(), "API keys loaded");
    Ok(Auth::new(&security))
}
