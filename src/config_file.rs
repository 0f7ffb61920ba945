//! The config file every command takes: read (`--config FILE`, else the built-in example) and
//! parsed with the schema crate's one builder; for a running instance, also its `[cluster]`
//! identity and its blind fields' key.

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use hbidx_schema::config::HbidxConfig;

/// The config's text: the file at `path`, else the built-in example.
pub fn read_config_text(path: Option<&Path>) -> Result<String> {
    match path {
        None => Ok(hbidx_schema::EXAMPLE_CONFIG.to_string()),
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config {}", path.display())),
    }
}

/// Parses and validates a config's text.
pub fn parse(text: &str) -> Result<HbidxConfig> {
    hbidx_schema::config::parse_config(text).map_err(|err| anyhow!("invalid config: {err}"))
}

/// The config of a running instance: with `[cluster]`, its shard and replica from the command
/// line (or the config) checked against the layout.
pub fn parse_instance(text: &str, identity: (Option<usize>, Option<usize>)) -> Result<HbidxConfig> {
    let mut config = parse(text)?;
    if let Some(cluster) = config.cluster.take() {
        let cluster = cluster
            .with_identity(identity.0, identity.1)
            .map_err(|err| anyhow!("invalid config: {err}"))?;
        config.cluster = Some(cluster);
    }
    hbidx_serve::arm_blind_fields(&mut config)?;
    Ok(config)
}
