//! Reaching the fleet's Redis: one server (`redis://HOST:PORT/DB`), or the
//! primary that Redis Sentinels name (`redis+sentinel://…`), followed
//! through failovers.
//!
//! A [`Conn`] is what every fleet operation runs on. On one server it is
//! the `redis` crate's connection manager (it reconnects to that address).
//! Behind Sentinels an address can stop being the primary: when a command
//! fails because the server is gone or has become a replica (`READONLY`),
//! the connection is dropped and the next command asks the Sentinels for
//! the primary again. The command that failed fails (the caller decides
//! locally, as whenever Redis is unreachable); none is retried blindly,
//! since a script may have run before the connection broke.

use super::FleetError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use std::sync::Arc;
use std::time::Duration;

/// The URL scheme of a Sentinel-managed primary.
pub const SENTINEL_SCHEME: &str = "redis+sentinel://";
/// A Sentinel's port when the URL names none.
const SENTINEL_PORT: u16 = 26379;

/// Where the fleet's Redis is.
pub struct Endpoint {
    /// The URL as given (with any password), for errors it is shown
    /// without the password.
    url: String,
    kind: Kind,
    /// The database every connection selects.
    db: i64,
}

enum Kind {
    /// One server.
    Server(redis::Client),
    /// The primary the Sentinels name for a master name. Asking is `&mut`
    /// (the client remembers which Sentinel answered), so one asks at a time.
    Sentinel(tokio::sync::Mutex<SentinelClient>),
}

/// How long connecting and each answer may take: past these the call
/// decides locally rather than wait on a store that is failing over.
fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Duration::from_millis(1_000))
        .set_response_timeout(Duration::from_millis(500))
        .set_number_of_retries(1)
        .set_max_delay(1_000)
}

impl Endpoint {
    /// Parses `url`: `redis://…` (one server) or
    /// `redis+sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]…]/MASTER[/DB]`
    /// (Sentinels at port 26379 unless said; the credentials are the Redis
    /// servers', not the Sentinels').
    pub fn parse(url: &str) -> Result<Arc<Self>, FleetError> {
        let bad = |why: RedisError| FleetError::BadUrl { url: shown(url), why };
        let Some(rest) = url.strip_prefix(SENTINEL_SCHEME) else {
            let client = redis::Client::open(url).map_err(bad)?;
            let db = client.get_connection_info().redis.db;
            return Ok(Arc::new(Self {
                url: url.to_string(),
                kind: Kind::Server(client),
                db,
            }));
        };
        let invalid = |what: &str| bad(RedisError::from((ErrorKind::InvalidClientConfig, "", what.to_string())));
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((auth, rest)) => (Some(auth), rest),
            None => (None, rest),
        };
        let (hosts, path) = rest
            .split_once('/')
            .ok_or_else(|| invalid("no master name after the Sentinels (…/MASTER)"))?;
        let mut path = path.split('/');
        let master = path.next().filter(|m| !m.is_empty());
        let master = master.ok_or_else(|| invalid("no master name after the Sentinels (…/MASTER)"))?;
        let db = match path.next() {
            None | Some("") => 0,
            Some(db) => db
                .parse()
                .map_err(|_| invalid(&format!("the database `{db}` is not a number")))?,
        };
        let mut sentinels = Vec::new();
        for host in hosts.split(',') {
            let (name, port) = match host.rsplit_once(':') {
                Some((name, port)) => (
                    name,
                    port.parse()
                        .map_err(|_| invalid(&format!("the port in `{host}` is not a number")))?,
                ),
                None => (host, SENTINEL_PORT),
            };
            if name.is_empty() {
                return Err(invalid("a Sentinel's host is empty"));
            }
            sentinels.push(format!("redis://{name}:{port}"));
        }
        let (username, password) = match auth.map(|a| a.split_once(':').unwrap_or((a, ""))) {
            Some((user, pass)) => (
                Some(user.to_string()).filter(|u| !u.is_empty()),
                Some(pass.to_string()).filter(|p| !p.is_empty()),
            ),
            None => (None, None),
        };
        let node = SentinelNodeConnectionInfo {
            tls_mode: None,
            redis_connection_info: Some(redis::RedisConnectionInfo {
                db,
                username,
                password,
                ..Default::default()
            }),
        };
        let client = SentinelClient::build(sentinels, master.to_string(), Some(node), SentinelServerType::Master)
            .map_err(bad)?;
        Ok(Arc::new(Self {
            url: url.to_string(),
            kind: Kind::Sentinel(tokio::sync::Mutex::new(client)),
            db,
        }))
    }

    /// The URL, without its password.
    pub fn shown(&self) -> String {
        shown(&self.url)
    }

    /// A client of the primary now (for a subscription).
    pub async fn primary(&self) -> RedisResult<redis::Client> {
        match &self.kind {
            Kind::Server(c) => Ok(c.clone()),
            Kind::Sentinel(s) => s.lock().await.async_get_client().await,
        }
    }

    /// A connection that follows the primary; an error if none answers.
    pub async fn connect(self: &Arc<Self>) -> RedisResult<Conn> {
        let conn = Conn {
            endpoint: self.clone(),
            current: Arc::new(tokio::sync::Mutex::new(None)),
        };
        conn.manager().await?;
        Ok(conn)
    }
}

/// `url` with any password replaced by `***`.
fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((auth, host)) if auth.contains(':') => {
            let user = auth.split_once(':').map_or("", |(u, _)| u);
            format!("{scheme}://{user}:***@{host}")
        }
        _ => url.to_string(),
    }
}

/// A connection to the fleet's Redis that follows its primary (see the
/// module's doc). Clones share it.
#[derive(Clone)]
pub struct Conn {
    endpoint: Arc<Endpoint>,
    /// The connection to the primary, once made; dropped when it stops
    /// being one.
    current: Arc<tokio::sync::Mutex<Option<ConnectionManager>>>,
}

impl Conn {
    /// The connection to the primary, made if there is none.
    async fn manager(&self) -> RedisResult<ConnectionManager> {
        let mut current = self.current.lock().await;
        if let Some(m) = current.as_ref() {
            return Ok(m.clone());
        }
        let client = self.endpoint.primary().await?;
        let m = client.get_connection_manager_with_config(manager_config()).await?;
        *current = Some(m.clone());
        Ok(m)
    }

    /// After an error on `used`: behind Sentinels, a server that is gone
    /// or now a replica is forgotten, so the next command asks again.
    async fn judge(&self, e: &RedisError) {
        let moved = e.is_io_error()
            || e.is_connection_refusal()
            || e.is_connection_dropped()
            || e.is_timeout()
            || e.kind() == ErrorKind::ReadOnly;
        if moved && matches!(self.endpoint.kind, Kind::Sentinel(_)) {
            *self.current.lock().await = None;
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let r = self.manager().await?.req_packed_command(cmd).await;
            if let Err(e) = &r {
                self.judge(e).await;
            }
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let r = self.manager().await?.req_packed_commands(cmd, offset, count).await;
            if let Err(e) = &r {
                self.judge(e).await;
            }
            r
        })
    }

    fn get_db(&self) -> i64 {
        self.endpoint.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_name_their_sentinels_master_and_database() {
        let e = Endpoint::parse("redis+sentinel://:pw@10.0.0.1,10.0.0.2:26380/fleet/3").unwrap();
        assert_eq!(e.db, 3);
        assert!(matches!(e.kind, Kind::Sentinel(_)));
        assert_eq!(e.shown(), "redis+sentinel://:***@10.0.0.1,10.0.0.2:26380/fleet/3");
        for (url, said) in [
            ("redis+sentinel://10.0.0.1", "no master name"),
            ("redis+sentinel://10.0.0.1/", "no master name"),
            ("redis+sentinel://10.0.0.1:x/m", "the port in `10.0.0.1:x`"),
            ("redis+sentinel://10.0.0.1/m/zero", "the database `zero`"),
            ("redis+sentinel://,10.0.0.1/m", "a Sentinel's host is empty"),
        ] {
            let e = Endpoint::parse(url).err().unwrap().to_string();
            assert!(e.contains(said) && e.contains("--state"), "{url}: {e}");
        }
        let one = Endpoint::parse("redis://127.0.0.1:6379/2").unwrap();
        assert_eq!(one.db, 2);
    }
}
