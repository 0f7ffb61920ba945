//! `hbidx keys new|hash`.

use std::io::BufRead;

use anyhow::{Context, Result, anyhow};
use hbidx_query::auth::{self, Scope};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ScopeArg {
    Lookup,
    Write,
    Admin,
    /// The internal routes of a sharded tier: the key the instances call each other with
    /// (`HBIDX_CLUSTER_KEY`).
    Cluster,
}

impl From<ScopeArg> for Scope {
    fn from(arg: ScopeArg) -> Self {
        match arg {
            ScopeArg::Lookup => Scope::Lookup,
            ScopeArg::Write => Scope::Write,
            ScopeArg::Admin => Scope::Admin,
            ScopeArg::Cluster => Scope::Cluster,
        }
    }
}

/// `hbidx keys new`: a fresh key for the client and the `[[security.keys]]` entry (with only
/// its hash) for the server's config.
pub fn new_key(id: &str, scopes: &[ScopeArg]) -> Result<()> {
    let scopes: Vec<&str> = scopes.iter().map(|s| Scope::from(*s).as_str()).collect();
    let key = auth::generate_key();
    let entry = format!(
        "[[security.keys]]\nid = \"{id}\"\nsha256 = \"{}\"\nscopes = [{}]\n",
        hex::encode(auth::hash_key(&key)),
        scopes
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // The entry is validated the way the server will read it, so a bad --id fails here.
    hbidx_schema::parse_config(&entry).map_err(|err| anyhow!("{err}"))?;
    println!("# API key for the client (shown once; hbidx keeps only its hash):");
    println!("{key}");
    println!("\n# Config entry for the server:");
    print!("{entry}");
    Ok(())
}

/// `hbidx keys hash [KEY]`: the SHA-256 (hex) that `[[security.keys]] sha256` takes. Without KEY
/// the key is read from the first line of stdin, so it stays out of shell history.
pub fn hash(key: Option<String>) -> Result<()> {
    let key = match key {
        Some(key) => key,
        None => {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .context("reading the key from stdin")?;
            line.trim_end_matches(['\r', '\n']).to_string()
        }
    };
    auth::check_plaintext_key(&key).map_err(|reason| anyhow!("{reason}"))?;
    println!("{}", hex::encode(auth::hash_key(&key)));
    Ok(())
}
