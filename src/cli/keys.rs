//! `fusebox keys`: making caller keys and operator tokens. A secret is
//! printed once, with the config entry that holds only its hash.

use crate::config::access::{Instant, OperatorConfig, Scope, SecretHash};
use crate::config::KeyConfig;
use anyhow::{bail, Context, Result};
use clap::{Subcommand, ValueEnum};
use std::collections::BTreeMap;
use std::io::Read;

/// What `fusebox keys` does.
#[derive(Subcommand)]
pub enum KeysCmd {
    /// Make a caller key for a user: prints the key once, and its `[keys]` entry.
    New {
        /// The key's name (shown in errors and the console; not secret).
        name: String,
        /// The user its calls are billed to.
        #[arg(long)]
        user: String,
        /// A route or model it may call (repeat for more; none: all).
        #[arg(long = "route")]
        routes: Vec<String>,
        /// When it stops working (RFC 3339, e.g. 2027-01-01T00:00:00Z).
        #[arg(long)]
        expires: Option<String>,
    },
    /// Make an operator token: prints the token once, and its `[operators]` entry.
    Operator {
        /// The operator's name (commands are issued as it).
        name: String,
        /// What it grants.
        #[arg(long, value_enum, default_value_t = ScopeArg::View)]
        scope: ScopeArg,
    },
    /// Print the hash of a key or token read from standard input.
    Hash,
}

/// An operator token's scope.
#[derive(Clone, Copy, ValueEnum)]
pub enum ScopeArg {
    /// Snapshots, events and metrics.
    View,
    /// Those, and operator commands.
    Operate,
}

/// Runs `fusebox keys …`.
pub fn keys(cmd: KeysCmd) -> Result<()> {
    match cmd {
        KeysCmd::New {
            name,
            user,
            routes,
            expires,
        } => {
            if user.trim().is_empty() {
                bail!("--user must name the user the key's calls are billed to");
            }
            let expires = expires
                .map(|e| humantime::parse_rfc3339_weak(&e).map(Instant))
                .transpose()
                .context("--expires: not an RFC 3339 time, e.g. 2027-01-01T00:00:00Z")?;
            let secret = secret("fbx")?;
            let key = KeyConfig {
                hash: SecretHash::of(&secret),
                user,
                routes,
                expires,
                budgets: None,
            };
            show(&secret, "keys", &name, &key)
        }
        KeysCmd::Operator { name, scope } => {
            let secret = secret("fbo")?;
            let scope = match scope {
                ScopeArg::View => Scope::View,
                ScopeArg::Operate => Scope::Operate,
            };
            let token = OperatorConfig {
                hash: SecretHash::of(&secret),
                scope,
            };
            show(&secret, "operators", &name, &token)
        }
        KeysCmd::Hash => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading the secret from standard input")?;
            let s = s.trim_end_matches(['\n', '\r']);
            if s.is_empty() {
                bail!("nothing on standard input: pipe the key or token in (echo -n KEY | fusebox keys hash)");
            }
            println!("{}", SecretHash::of(s));
            Ok(())
        }
    }
}

/// A new secret: `prefix`, `_` and 32 random bytes in hex.
fn secret(prefix: &str) -> Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness from the system: {e}"))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{prefix}_{hex}"))
}

/// Prints the secret (on stderr, once) and the config entry (on stdout).
fn show(secret: &str, table: &str, name: &str, entry: &impl serde::Serialize) -> Result<()> {
    let doc = BTreeMap::from([(table, BTreeMap::from([(name, entry)]))]);
    eprintln!("{table}: {name}: the secret, shown this once (keep it; fusebox keeps only its hash):");
    eprintln!("{secret}");
    print!("{}", toml::to_string(&doc)?);
    Ok(())
}
