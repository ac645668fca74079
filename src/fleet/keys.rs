//! Caller keys a fleet shares through Redis: added and revoked with
//! `fusebox keys … --state redis://…`, read by every instance within a
//! quarter second. Only their hashes are stored.

use crate::config::KeyConfig;
use redis::AsyncCommands;
use std::collections::{BTreeMap, BTreeSet};

/// The hash of shared keys: name → the key's entry as JSON.
const KEYS: &str = "fusebox:keys";
/// Names of revoked keys (a config's keys of those names stop working too).
const REVOKED: &str = "fusebox:keys:revoked";

/// The keys the fleet shares, and the names it revoked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SharedKeys {
    /// Keys by name.
    pub keys: BTreeMap<String, KeyConfig>,
    /// Names that no longer work, wherever they are defined.
    pub revoked: BTreeSet<String>,
}

/// Reads what the fleet shares (an entry that does not parse is skipped,
/// with a warning).
pub async fn fetch(conn: &mut impl redis::aio::ConnectionLike) -> redis::RedisResult<SharedKeys> {
    // Two commands, not a pipeline: on a cluster the two keys are in
    // different slots.
    let raw: BTreeMap<String, String> = redis::cmd("HGETALL").arg(KEYS).query_async(conn).await?;
    let revoked: BTreeSet<String> = redis::cmd("SMEMBERS").arg(REVOKED).query_async(conn).await?;
    let keys = raw
        .into_iter()
        .filter_map(|(name, json)| match serde_json::from_str(&json) {
            Ok(k) => Some((name, k)),
            Err(e) => {
                tracing::warn!(key = %name, error = %e, "a shared key's entry does not parse; skipped");
                None
            }
        })
        .collect();
    Ok(SharedKeys { keys, revoked })
}

/// Shares `key` as `name` (replacing one of that name, and lifting a
/// revocation of it, in that order: a failure between the two leaves the
/// name refused).
pub async fn add(conn: &mut impl AsyncCommands, name: &str, key: &KeyConfig) -> anyhow::Result<()> {
    let json = serde_json::to_string(key)?;
    let () = conn.hset(KEYS, name, json).await?;
    let () = conn.srem(REVOKED, name).await?;
    Ok(())
}

/// Revokes the key `name` across the fleet, shared or in a config.
pub async fn revoke(conn: &mut impl AsyncCommands, name: &str) -> redis::RedisResult<()> {
    // Revoked first: a failure between the two leaves the name refused.
    let () = conn.sadd(REVOKED, name).await?;
    conn.hdel(KEYS, name).await
}
