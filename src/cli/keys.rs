//! `fusebox keys`: making caller keys and operator tokens. A secret is
//! printed once, with the config entry that holds only its hash.

use crate::config::access::{Grant, Instant, OperatorConfig, SecretHash};
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
        /// An MCP server (`[mcp.NAME]`) it may reach at `/mcp` (repeat for more; none: all).
        #[arg(long = "mcp")]
        mcp: Vec<String>,
        /// When it stops working (RFC 3339, e.g. 2027-01-01T00:00:00Z).
        #[arg(long)]
        expires: Option<String>,
        /// Its calls may name a sub-user (`user` field or `x-fusebox-user`)
        /// for reporting; they are still billed to --user.
        #[arg(long)]
        sub_users: bool,
        /// The most urgent priority its calls may have: critical, default or batch.
        #[arg(long, default_value = "default", value_parser = priority)]
        priority: crate::config::Priority,
        /// Share it with the fleet on this Redis (`redis://HOST:PORT/DB`)
        /// instead of printing its config entry.
        #[arg(long)]
        state: Option<String>,
    },
    /// Revoke a key across the fleet (shared, or in the instances' configs): refused everywhere within a second.
    Revoke {
        /// The key's name.
        name: String,
        /// The fleet's Redis (`redis://HOST:PORT/DB`).
        #[arg(long)]
        state: String,
    },
    /// List the keys the fleet shares and the names it revoked (never a secret).
    List {
        /// The fleet's Redis (`redis://HOST:PORT/DB`).
        #[arg(long)]
        state: String,
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

/// A priority by name.
fn priority(s: &str) -> Result<crate::config::Priority, String> {
    crate::config::Priority::parse(s).ok_or_else(|| format!("`{s}` is not a priority: critical, default or batch"))
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
            mcp,
            expires,
            sub_users,
            priority,
            state,
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
                mcp,
                expires,
                budgets: None,
                sub_users,
                priority,
            };
            match state {
                None => show(&secret, "keys", &name, &key),
                Some(url) => {
                    on_redis(&url, async |conn| crate::fleet::keys::add(conn, &name, &key).await)?;
                    eprintln!("keys: {name}: shared on {url}; the secret, shown this once:");
                    println!("{secret}");
                    Ok(())
                }
            }
        }
        KeysCmd::Revoke { name, state } => {
            on_redis(&state, async |conn| Ok(crate::fleet::keys::revoke(conn, &name).await?))?;
            eprintln!("keys: {name}: revoked on {state}; every instance refuses it within a second");
            Ok(())
        }
        KeysCmd::List { state } => {
            let shared = on_redis(&state, async |conn| Ok(crate::fleet::keys::fetch(conn).await?))?;
            for (name, k) in &shared.keys {
                let routes = if k.routes.is_empty() {
                    "all".to_string()
                } else {
                    k.routes.join(",")
                };
                let expires = k
                    .expires
                    .map_or("never".into(), |e| humantime::format_rfc3339(e.0).to_string());
                println!("{name}\tuser {}\troutes {routes}\texpires {expires}", k.user);
            }
            for name in &shared.revoked {
                println!("{name}\trevoked");
            }
            Ok(())
        }
        KeysCmd::Operator { name, scope } => {
            let secret = secret("fbo")?;
            let scope = match scope {
                ScopeArg::View => Grant::View,
                ScopeArg::Operate => Grant::Operate,
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

/// Runs `f` on a connection to the Redis at `url`.
fn on_redis<T>(url: &str, f: impl AsyncFnOnce(&mut crate::fleet::connect::Conn) -> Result<T>) -> Result<T> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let endpoint = crate::fleet::connect::RedisEndpoint::parse(url)?;
        let mut conn = endpoint
            .connect()
            .await
            .with_context(|| format!("--state {}: cannot reach Redis", endpoint.shown()))?;
        f(&mut conn).await
    })
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
