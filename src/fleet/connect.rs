//! Reaching the fleet's Redis: one server (`redis://HOST:PORT/DB`), the
//! primary that Redis Sentinels name (`redis+sentinel://…`), followed
//! through failovers, or a Redis Cluster (`redis+cluster://…`).
//!
//! A [`Conn`] is what every fleet operation runs on. On one server it is
//! the `redis` crate's connection manager (it reconnects to that address);
//! on a cluster, the crate's cluster connection (it follows slots as they
//! move and replicas as they are promoted). Behind Sentinels an address
//! can stop being the primary: when a command fails because the server is
//! gone or has become a replica (`READONLY`), the connection is dropped
//! and the next command asks the Sentinels for the primary again. The
//! command that failed fails (the caller decides locally, as whenever
//! Redis is unreachable); none is retried blindly, since a script may have
//! run before the connection broke.

use super::FleetError;
use crate::config::{CLUSTER_SCHEME, SENTINEL_SCHEME};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use std::sync::Arc;
use std::time::Duration;

/// A Sentinel's port when the URL names none.
const SENTINEL_PORT: u16 = 26379;
/// A Redis server's port when the URL names none.
const REDIS_PORT: u16 = 6379;
/// How long connecting and each answer may take: past these the call
/// decides locally rather than wait on a store that is failing over.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(1_000);
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);

/// Where the fleet's Redis is.
pub struct RedisEndpoint {
    /// The URL as given (shown without its password).
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
    /// A cluster, and the nodes the URL names (to subscribe on one).
    Cluster(redis::cluster::ClusterClient, Vec<redis::Client>),
}

impl RedisEndpoint {
    /// Parses `url`: `redis://…` (one server),
    /// `redis+sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]…]/MASTER[/DB]`
    /// (Sentinels at port 26379 unless said; the credentials are the Redis
    /// servers', not the Sentinels'), or
    /// `redis+cluster://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]…]` (some
    /// of the cluster's nodes; it finds the rest).
    pub fn parse(url: &str) -> Result<Arc<Self>, FleetError> {
        let bad = |why: RedisError| FleetError::BadUrl { url: shown(url), why };
        let (kind, db) = if let Some(rest) = url.strip_prefix(SENTINEL_SCHEME) {
            Self::sentinel(url, rest)?
        } else if let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) {
            Self::cluster(url, rest)?
        } else {
            let client = redis::Client::open(url).map_err(bad)?;
            let db = client.get_connection_info().redis.db;
            (Kind::Server(client), db)
        };
        Ok(Arc::new(Self {
            url: url.to_string(),
            kind,
            db,
        }))
    }

    /// What follows `redis+sentinel://`.
    fn sentinel(url: &str, rest: &str) -> Result<(Kind, i64), FleetError> {
        let (auth, rest) = split_auth(rest);
        let no_master = || invalid(url, "no master name after the Sentinels (…/MASTER)");
        let (hosts, path) = rest.split_once('/').ok_or_else(no_master)?;
        let mut path = path.split('/');
        let master = path.next().filter(|m| !m.is_empty()).ok_or_else(no_master)?;
        let db = match path.next() {
            None | Some("") => 0,
            Some(db) => db
                .parse()
                .map_err(|_| invalid(url, &format!("the database `{db}` is not a number")))?,
        };
        let sentinels = hosts_of(url, hosts, SENTINEL_PORT)?;
        let (username, password) = credentials(auth);
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
            .map_err(|why| FleetError::BadUrl { url: shown(url), why })?;
        Ok((Kind::Sentinel(tokio::sync::Mutex::new(client)), db))
    }

    /// What follows `redis+cluster://`.
    fn cluster(url: &str, rest: &str) -> Result<(Kind, i64), FleetError> {
        let bad = |why: RedisError| FleetError::BadUrl { url: shown(url), why };
        let (auth, hosts) = split_auth(rest);
        let hosts = hosts.strip_suffix('/').unwrap_or(hosts);
        if hosts.contains('/') {
            return Err(invalid(url, "a cluster has only database 0: name no database"));
        }
        let (username, password) = credentials(auth);
        let mut nodes = Vec::new();
        for host in hosts_of(url, hosts, REDIS_PORT)? {
            let mut info: redis::ConnectionInfo = host.parse().map_err(bad)?;
            info.redis.username = username.clone();
            info.redis.password = password.clone();
            nodes.push(info);
        }
        let seeds = nodes
            .iter()
            .map(|n| redis::Client::open(n.clone()))
            .collect::<RedisResult<Vec<_>>>()
            .map_err(bad)?;
        let client = redis::cluster::ClusterClient::builder(nodes)
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT)
            .retries(2)
            .build()
            .map_err(bad)?;
        Ok((Kind::Cluster(client, seeds), 0))
    }

    /// Whether this is a cluster (where a SCAN sees one node, and keys of
    /// different slots never meet in one command).
    pub fn is_cluster(&self) -> bool {
        matches!(self.kind, Kind::Cluster(..))
    }

    /// The URL, without its password.
    pub fn shown(&self) -> String {
        shown(&self.url)
    }

    /// A client of the primary now; on a cluster, of the first node the URL
    /// names that answers (enough to subscribe: a message published on any
    /// node of a cluster reaches every node's subscribers).
    pub async fn client(&self) -> RedisResult<redis::Client> {
        match &self.kind {
            Kind::Server(c) => Ok(c.clone()),
            Kind::Sentinel(s) => s.lock().await.async_get_client().await,
            Kind::Cluster(_, seeds) => {
                let mut last: RedisError = (ErrorKind::InvalidClientConfig, "no cluster node").into();
                for seed in seeds {
                    match seed.get_multiplexed_async_connection().await {
                        Ok(_) => return Ok(seed.clone()),
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
        }
    }

    /// A connection that follows the primary (or the cluster); an error if
    /// none answers.
    pub async fn connect(self: &Arc<Self>) -> RedisResult<Conn> {
        let link = match &self.kind {
            Kind::Cluster(client, _) => Link::Cluster(client.get_async_connection().await?),
            Kind::Server(_) | Kind::Sentinel(_) => Link::Primary(Arc::new(tokio::sync::Mutex::new(None))),
        };
        let conn = Conn {
            endpoint: self.clone(),
            link,
        };
        if let Link::Primary(current) = &conn.link {
            manager(self, current).await?;
        }
        Ok(conn)
    }
}

/// `USER:PASSWORD@` and the rest, if there is one.
fn split_auth(rest: &str) -> (Option<&str>, &str) {
    match rest.rsplit_once('@') {
        Some((auth, rest)) => (Some(auth), rest),
        None => (None, rest),
    }
}

/// The user and password of `USER:PASSWORD` (either may be empty).
fn credentials(auth: Option<&str>) -> (Option<String>, Option<String>) {
    match auth.map(|a| a.split_once(':').unwrap_or((a, ""))) {
        Some((user, pass)) => (
            Some(user.to_string()).filter(|u| !u.is_empty()),
            Some(pass.to_string()).filter(|p| !p.is_empty()),
        ),
        None => (None, None),
    }
}

/// `redis://HOST:PORT` of each `HOST[:PORT]` in the comma-separated
/// `hosts` (`port` where none is said).
fn hosts_of(url: &str, hosts: &str, port: u16) -> Result<Vec<String>, FleetError> {
    let mut out = Vec::new();
    for host in hosts.split(',') {
        let (name, port) = match host.rsplit_once(':') {
            Some((name, p)) => (
                name,
                p.parse()
                    .map_err(|_| invalid(url, &format!("the port in `{host}` is not a number")))?,
            ),
            None => (host, port),
        };
        if name.is_empty() {
            return Err(invalid(url, "a host is empty"));
        }
        out.push(format!("redis://{name}:{port}"));
    }
    Ok(out)
}

/// The error for a URL that cannot be used, saying why.
fn invalid(url: &str, what: &str) -> FleetError {
    FleetError::BadUrl {
        url: shown(url),
        why: RedisError::from((ErrorKind::InvalidClientConfig, "", what.to_string())),
    }
}

/// `url` with any password replaced by `***`.
fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.rsplit_once('@') {
        Some((auth, host)) if auth.contains(':') => {
            let user = auth.split_once(':').map_or("", |(u, _)| u);
            format!("{scheme}://{user}:***@{host}")
        }
        _ => url.to_string(),
    }
}

/// A connection to the fleet's Redis that follows its primary or cluster
/// (see the module's doc). Clones share it.
#[derive(Clone)]
pub struct Conn {
    endpoint: Arc<RedisEndpoint>,
    link: Link,
}

#[derive(Clone)]
enum Link {
    /// The connection to the primary, once made; dropped when it stops
    /// being one.
    Primary(Arc<tokio::sync::Mutex<Option<ConnectionManager>>>),
    /// A cluster's.
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Conn {
    /// Whether it is a cluster's (see [`RedisEndpoint::is_cluster`]).
    pub fn is_cluster(&self) -> bool {
        self.endpoint.is_cluster()
    }
}

/// The connection to the primary in `current`, made if there is none.
async fn manager(
    endpoint: &RedisEndpoint,
    current: &tokio::sync::Mutex<Option<ConnectionManager>>,
) -> RedisResult<ConnectionManager> {
    let mut current = current.lock().await;
    if let Some(m) = current.as_ref() {
        return Ok(m.clone());
    }
    let client = endpoint.client().await?;
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(CONNECT_TIMEOUT)
        .set_response_timeout(RESPONSE_TIMEOUT)
        .set_number_of_retries(1)
        .set_max_delay(1_000);
    let m = client.get_connection_manager_with_config(config).await?;
    *current = Some(m.clone());
    Ok(m)
}

/// After `r`: behind Sentinels, a server that is gone or now a replica is
/// forgotten, so the next command asks again.
async fn judged<T>(
    r: RedisResult<T>,
    endpoint: &RedisEndpoint,
    current: &tokio::sync::Mutex<Option<ConnectionManager>>,
) -> RedisResult<T> {
    if let (Err(e), Kind::Sentinel(_)) = (&r, &endpoint.kind) {
        let moved = e.is_io_error()
            || e.is_connection_refusal()
            || e.is_connection_dropped()
            || e.is_timeout()
            || e.kind() == ErrorKind::ReadOnly;
        if moved {
            *current.lock().await = None;
        }
    }
    r
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.link {
            Link::Cluster(c) => c.req_packed_command(cmd),
            Link::Primary(current) => {
                let (endpoint, current) = (self.endpoint.clone(), current.clone());
                Box::pin(async move {
                    let r = manager(&endpoint, &current).await?.req_packed_command(cmd).await;
                    judged(r, &endpoint, &current).await
                })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.link {
            Link::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            Link::Primary(current) => {
                let (endpoint, current) = (self.endpoint.clone(), current.clone());
                Box::pin(async move {
                    let r = manager(&endpoint, &current)
                        .await?
                        .req_packed_commands(cmd, offset, count)
                        .await;
                    judged(r, &endpoint, &current).await
                })
            }
        }
    }

    fn get_db(&self) -> i64 {
        self.endpoint.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_server_sentinels_or_a_cluster() {
        let e = RedisEndpoint::parse("redis+sentinel://:pw@10.0.0.1,10.0.0.2:26380/fleet/3").unwrap();
        assert_eq!(e.db, 3);
        assert!(matches!(e.kind, Kind::Sentinel(_)));
        assert_eq!(e.shown(), "redis+sentinel://:***@10.0.0.1,10.0.0.2:26380/fleet/3");
        let c = RedisEndpoint::parse("redis+cluster://10.0.0.1:7000,10.0.0.2:7001/").unwrap();
        assert!(c.is_cluster());
        assert_eq!(RedisEndpoint::parse("redis://127.0.0.1:6379/2").unwrap().db, 2);
        for (url, said) in [
            ("redis+sentinel://10.0.0.1", "no master name"),
            ("redis+sentinel://10.0.0.1/", "no master name"),
            ("redis+sentinel://10.0.0.1:x/m", "the port in `10.0.0.1:x`"),
            ("redis+sentinel://10.0.0.1/m/zero", "the database `zero`"),
            ("redis+sentinel://,10.0.0.1/m", "a host is empty"),
            ("redis+cluster://10.0.0.1:7000/2", "only database 0"),
        ] {
            let e = RedisEndpoint::parse(url).err().unwrap().to_string();
            assert!(e.contains(said) && e.contains("--state"), "{url}: {e}");
        }
    }
}
