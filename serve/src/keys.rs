//! The keys a server starts with: the API keys (`[security]` plus the one given on the command
//! line), and the key of blind fields.

use anyhow::{Result, anyhow, bail};
use hbidx_query::auth::{Auth, SecurityConfig};
use hbidx_query::{CursorKeySource, CursorSeal};
use hbidx_schema::BlindKey;
use hbidx_schema::config::HbidxConfig;

/// The environment variable holding the key of blind fields when `[security] blind_key_file`
/// names no file.
pub const BLIND_KEY_ENV: &str = "HBIDX_BLIND_KEY";

/// The key of blind fields: the file `[security] blind_key_file` names, or else `env_key` (the
/// value of [`BLIND_KEY_ENV`]). `None` when the config has no blind field (a key given anyway
/// is not read). A config with blind fields and no key is refused: its index could hold
/// neither plaintext nor hashes. Errors never contain the key.
pub fn blind_key(config: &HbidxConfig, env_key: Option<&str>) -> Result<Option<BlindKey>> {
    let fields = config.blind_fields();
    if fields.is_empty() {
        return Ok(None);
    }
    let (text, source) = match &config.security.blind_key_file {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(|err| anyhow!("cannot read [security] blind_key_file {path}: {err}"))?,
            format!("[security] blind_key_file {path}"),
        ),
        None => match env_key {
            Some(key) if !key.is_empty() => (key.to_string(), BLIND_KEY_ENV.to_string()),
            _ => bail!(
                "blind fields ({}) need a key: set {BLIND_KEY_ENV} or [security] blind_key_file",
                fields.join(", ")
            ),
        },
    };
    let key = BlindKey::new(&text).map_err(|reason| anyhow!("{source}: {reason}"))?;
    Ok(Some(key))
}

/// Gives the config's blind fields their key ([`blind_key`], from the process environment).
pub fn arm_blind_fields(config: &mut HbidxConfig) -> Result<()> {
    let env_key = std::env::var(BLIND_KEY_ENV).ok();
    if let Some(key) = blind_key(config, env_key.as_deref())? {
        config.set_blind_key(&key);
        tracing::info!(fields = config.blind_fields().len(), "blind key loaded");
    }
    Ok(())
}

/// The audit id of the key given with `--api-key` / `HBIDX_API_KEY`.
pub const CLI_KEY_ID: &str = "cli";

/// The environment variable holding the key the instances of a sharded tier (`[cluster]`) call
/// each other's internal routes with. Never `HBIDX_API_KEY`: a peer key with every scope would
/// make any instance's environment a client key, and a client key would reach the internal
/// routes.
pub const CLUSTER_KEY_ENV: &str = "HBIDX_CLUSTER_KEY";

/// The audit id of the key given in [`CLUSTER_KEY_ENV`].
pub const CLUSTER_KEY_ID: &str = "cluster-peers";

/// The keys of `[security]`, plus the one given on the command line (lookup, write and admin
/// scopes), plus, for an instance of a sharded tier, the peers' key from `cluster_key` (the
/// value of [`CLUSTER_KEY_ENV`], the `cluster` scope alone), which such an instance needs.
pub fn security_config(
    config: &HbidxConfig,
    api_key: Option<&str>,
    cluster_key: Option<&str>,
) -> Result<SecurityConfig> {
    let mut security = config.security.clone();
    if let Some(key) = api_key {
        security
            .add_plaintext_key(CLI_KEY_ID, key, "--api-key / HBIDX_API_KEY")
            .map_err(|err| anyhow!("{err}"))?;
    }
    if config.cluster.is_some() {
        let key = cluster_key.filter(|key| !key.is_empty()).ok_or_else(|| {
            anyhow!(
                "[cluster]: the instances call each other's internal routes with the key in \
                 {CLUSTER_KEY_ENV}, which is not set; give every instance of the tier the same \
                 one (`hbidx keys new --id cluster --scope cluster` makes it)"
            )
        })?;
        security
            .add_cluster_key(CLUSTER_KEY_ID, key, CLUSTER_KEY_ENV)
            .map_err(|err| anyhow!("{err}"))?;
    }
    Ok(security)
}

/// The environment variable holding the key paging cursors are sealed with when `[security]
/// cursor_key_file` names no file.
pub const CURSOR_KEY_ENV: &str = "HBIDX_CURSOR_KEY";

/// The seal of paging cursors: the key in the file `[security] cursor_key_file` names, else
/// `env_key` (the value of [`CURSOR_KEY_ENV`]), else on a sharded tier one derived from
/// `cluster_key` (every instance of the tier has it, so a client pages through any of them),
/// else a key of this process alone. A configured key must be of the form `hbidx keys new`
/// prints. Errors never contain the key.
pub fn cursor_seal(
    config: &HbidxConfig,
    env_key: Option<&str>,
    cluster_key: Option<&str>,
) -> Result<CursorSeal> {
    let configured = match &config.security.cursor_key_file {
        Some(path) => Some((
            std::fs::read_to_string(path)
                .map_err(|err| anyhow!("cannot read [security] cursor_key_file {path}: {err}"))?,
            format!("[security] cursor_key_file {path}"),
        )),
        None => env_key
            .filter(|key| !key.is_empty())
            .map(|key| (key.to_string(), CURSOR_KEY_ENV.to_string())),
    };
    if let Some((text, source)) = configured {
        let key = text.trim();
        hbidx_schema::config::check_plaintext_key(key).map_err(|reason| {
            anyhow!("{source}: {reason} (the cursor key is made the same way)")
        })?;
        return Ok(CursorSeal::from_secret(key, CursorKeySource::Configured));
    }
    match cluster_key.filter(|key| !key.is_empty()) {
        Some(key) if config.cluster.is_some() => {
            Ok(CursorSeal::from_secret(key, CursorKeySource::Cluster))
        }
        _ => Ok(CursorSeal::random()),
    }
}

/// [`cursor_seal`] from the process environment.
pub fn serve_cursors(config: &HbidxConfig) -> Result<CursorSeal> {
    let env_key = std::env::var(CURSOR_KEY_ENV).ok();
    let cluster_key = std::env::var(CLUSTER_KEY_ENV).ok();
    let seal = cursor_seal(config, env_key.as_deref(), cluster_key.as_deref())?;
    tracing::info!(key = ?seal.source(), "paging cursors sealed");
    Ok(seal)
}

/// The keys `hbidx serve` accepts ([`security_config`], the peers' key from the process
/// environment). With none at all it refuses to start: every route but the health checks needs
/// a key, so such a server would only ever answer 401, and generating one (as the demo does)
/// would put a credential into the server's log.
pub fn serve_auth(config: &HbidxConfig, api_key: Option<&str>) -> Result<Auth> {
    let cluster_key = std::env::var(CLUSTER_KEY_ENV).ok();
    let security = security_config(config, api_key, cluster_key.as_deref())?;
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

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    fn blind_config(extra: &str) -> HbidxConfig {
        let text = hbidx_schema::EXAMPLE_CONFIG.replace(
            "column = \"info:idcard\"\n",
            "column = \"info:idcard\"\nblind = true\n",
        );
        hbidx_schema::parse_config(&format!("{text}\n{extra}")).unwrap()
    }

    #[test]
    fn no_key_is_refused_in_one_line_naming_the_fields() {
        let config = blind_config("");
        let err = blind_key(&config, None).unwrap_err().to_string();
        assert!(
            err.contains("user.idcard") && err.contains(BLIND_KEY_ENV),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
        let err = blind_key(&config, Some("short")).unwrap_err().to_string();
        assert!(!err.contains("short"), "the key is never echoed: {err}");
    }

    #[test]
    fn the_key_reaches_blind_fields_only() {
        let mut config = blind_config("");
        let key = blind_key(&config, Some(KEY)).unwrap().unwrap();
        config.set_blind_key(&key);
        let table = config.table("user").unwrap();
        assert!(table.field("idcard").unwrap().blind_key.is_some());
        assert!(table.field("phone").unwrap().blind_key.is_none());
        assert!(!format!("{config:?}").contains(KEY));
        // Without blind fields no key is needed.
        let plain = hbidx_schema::parse_config(hbidx_schema::EXAMPLE_CONFIG).unwrap();
        assert!(blind_key(&plain, None).unwrap().is_none());
    }

    #[test]
    fn the_key_file_wins_over_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blind.key");
        std::fs::write(&path, format!("{KEY}\n")).unwrap();
        let config = blind_config(&format!(
            "[security]\nblind_key_file = {:?}\n",
            path.display().to_string()
        ));
        let from_file = blind_key(&config, None).unwrap().unwrap();
        assert_eq!(from_file, BlindKey::new(KEY).unwrap());
        let missing = blind_config("[security]\nblind_key_file = \"/nonexistent/blind.key\"\n");
        assert!(blind_key(&missing, Some(KEY)).is_err());
    }

    const CURSOR_KEY: &str = "hbidx_dY8OwyHPTEhTglLbdz5EQpRDC5cksRl8KiMFmF3OQ3E";
    const PEERS_KEY: &str = "hbidx_KCVv5TTKNuyFnOrjoGwC2jVSTrJxR6_kR6f26XHiDyo";

    #[test]
    fn the_cursor_key_is_the_file_then_the_environment_then_the_peers_key() {
        use hbidx_query::CursorKeySource::{Cluster, Configured, Process};
        let plain = hbidx_schema::parse_config(hbidx_schema::EXAMPLE_CONFIG).unwrap();
        let cursor = |config: &HbidxConfig, env: Option<&str>, peers: Option<&str>| {
            cursor_seal(config, env, peers).unwrap()
        };
        // A single instance: its own key unless one is given, the peers' key unused.
        assert_eq!(cursor(&plain, None, Some(PEERS_KEY)).source(), Process);
        let from_env = cursor(&plain, Some(CURSOR_KEY), None);
        assert_eq!(from_env.source(), Configured);
        let sealed = from_env.seal("user", b"row");
        assert_eq!(
            cursor(&plain, Some(CURSOR_KEY), None)
                .open("user", &sealed)
                .unwrap(),
            b"row"
        );
        // The file wins over the environment.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cursor.key");
        std::fs::write(&path, format!("{CURSOR_KEY}\n")).unwrap();
        let with_file = hbidx_schema::parse_config(&format!(
            "{}\n[security]\ncursor_key_file = {:?}\n",
            hbidx_schema::EXAMPLE_CONFIG,
            path.display().to_string()
        ))
        .unwrap();
        let from_file = cursor(&with_file, Some(PEERS_KEY), None);
        assert_eq!(from_file.open("user", &sealed).unwrap(), b"row");
        // A tier: derived from the peers' key, so every instance opens the others' cursors,
        // and unrelated to a cursor key equal to it.
        let tier =
            hbidx_schema::parse_config(include_str!("../../deploy/config/hbidx-cluster.toml"))
                .unwrap();
        assert!(tier.cluster.is_some());
        let one = cursor(&tier, None, Some(PEERS_KEY));
        assert_eq!(one.source(), Cluster);
        let sealed = one.seal("user", b"row");
        let other = cursor(&tier, None, Some(PEERS_KEY));
        assert_eq!(other.open("user", &sealed).unwrap(), b"row");
        assert!(from_env.open("user", &sealed).is_err());
        // A weak key is refused, never quoted.
        let err = cursor_seal(&plain, Some("weak-cursor-key"), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(CURSOR_KEY_ENV) && !err.contains("weak-cursor-key"),
            "{err}"
        );
        let missing = hbidx_schema::parse_config(&format!(
            "{}\n[security]\ncursor_key_file = \"/nonexistent/cursor.key\"\n",
            hbidx_schema::EXAMPLE_CONFIG
        ))
        .unwrap();
        assert!(cursor_seal(&missing, Some(CURSOR_KEY), None).is_err());
    }
}
