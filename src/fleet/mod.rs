//! Fleet mode (`--state redis://HOST:PORT/DB`, a Sentinel-managed
//! primary or a cluster, see [`connect`]): several fusebox instances
//! share state on Redis, behind the [`store::Store`] interface where it is
//! limits and budgets: provider rate limits (leased, see [`lease`]), user
//! and global budgets (allowances, see [`allowance`]); deferred requests on
//! a stream ([`deferred`]); operator actions and the breaker trips providers
//! signalled, stored with a TTL and announced over pub/sub so every instance
//! applies them within a second; instance liveness by heartbeat. When Redis
//! cannot be reached each instance keeps working at its share, shows the
//! store as degraded, and shares what it did when Redis returns.

pub mod allowance;
pub mod connect;
pub mod deferred;
pub mod keys;
pub mod lease;
pub mod retries;
pub mod store;

use crate::command::{Command, Issuer, Subject};
use crate::resilience::breaker::BreakerState;
use crate::resilience::budget::{BudgetExceeded, UserLimits};
use crate::resilience::defer::Deferred;
use crate::runner::shared::{Reserved, Shared};
use crate::runner::Runner;
use crate::target::Target;
use crate::telemetry::events::EventKind;
use connect::{Conn, RedisEndpoint};
use futures_util::StreamExt;
use parking_lot::Mutex;
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Pub/sub channel of operator actions.
const OPS_CHANNEL: &str = "fusebox:ops";
/// Key prefix of stored operator actions (one per subject, the latest).
const OP_KEY: &str = "fusebox:op:";
/// Key prefix of shared breaker trips (one per breaker, while it is open).
const TRIP_KEY: &str = "fusebox:trip:";
/// Key prefix of instance heartbeats.
const INSTANCE_KEY: &str = "fusebox:instance:";
/// On a cluster, where a SCAN sees one node, the keys of stored actions and
/// trips and of instance heartbeats are also kept in these sets.
const ACTIONS_INDEX: &str = "fusebox:index:actions";
const INSTANCES_INDEX: &str = "fusebox:index:instances";
/// How long a stored operator action is applied to instances that start.
const OP_TTL: Duration = Duration::from_secs(15 * 60);
/// Heartbeat period, and how long an instance counts as live without one.
const HEARTBEAT: Duration = Duration::from_millis(500);
const INSTANCE_TTL: Duration = Duration::from_millis(2_000);

/// Why fleet mode could not start.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The URL is not a Redis URL.
    #[error(
        "--state {url}: not a Redis URL ({why}); expected redis://HOST:PORT/DB, \
         redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER[/DB], redis+cluster://HOST:PORT[,HOST:PORT…] or `memory`"
    )]
    BadUrl {
        /// The URL given.
        url: String,
        /// Why.
        why: redis::RedisError,
    },
    /// Redis did not answer.
    #[error("--state {url}: cannot reach Redis ({why}); start it, or run with --state memory")]
    Unreachable {
        /// The URL given.
        url: String,
        /// Why.
        why: redis::RedisError,
    },
}

/// An operator action as shared between instances.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct SharedOp {
    /// The instance it was issued on.
    instance: String,
    /// Who issued it there.
    by: String,
    /// What was done.
    act: Act,
    /// Wall time it was issued (ms), to apply only what is newer.
    at_ms: u64,
}

/// What an instance shares.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Act {
    /// An operator's command.
    Command(Command),
    /// A breaker the provider's answers opened.
    Trip(Target),
}

impl Act {
    /// What it acts on: an instance applies only the newest per subject.
    fn subject(&self) -> Subject {
        match self {
            Act::Command(c) => c.subject(),
            Act::Trip(t) => Subject::Breaker(t.clone()),
        }
    }
}

/// This instance's membership of the fleet.
pub struct Fleet {
    endpoint: Arc<RedisEndpoint>,
    conn: Conn,
    /// Limits and budgets.
    store: Arc<dyn store::Store>,
    instance: String,
    runner: Arc<Runner>,
    /// Actions issued here while Redis was unreachable, shared on return.
    unsent: Mutex<Vec<SharedOp>>,
    /// The newest action applied per subject (`at_ms`), local or remote.
    applied: Mutex<HashMap<Subject, u64>>,
    /// Lease round trips.
    leases: lease::LeaseStats,
    /// Deferred requests on the shared stream.
    queue: Arc<deferred::SharedQueue>,
    /// Users' budgets, shared.
    allowances: Arc<allowance::Allowances>,
    /// The retry budget, shared.
    retries: Arc<retries::SharedRetries>,
    /// Where operators reach this instance's live view (its heartbeat
    /// says so, for `fusebox attach --state`); empty until it serves.
    admin_url: Mutex<String>,
}

/// What this instance shares with its runner.
struct Sharing {
    allowances: Arc<allowance::Allowances>,
    retries: Arc<retries::SharedRetries>,
    queue: Arc<deferred::SharedQueue>,
    /// Breaker trips to tell the others about (target, reason).
    trips: tokio::sync::mpsc::UnboundedSender<(Target, String)>,
}

#[async_trait::async_trait]
impl Shared for Sharing {
    async fn reserve(
        &self,
        user: &str,
        limits: UserLimits,
        tokens: u32,
        cost: f64,
    ) -> Result<Reserved, BudgetExceeded> {
        self.allowances.reserve(user, limits, tokens, cost).await
    }

    fn settle(&self, user: &str, reserved: Reserved, tokens: u32, cost: f64) {
        self.allowances.settle(user, reserved, tokens, cost);
    }

    async fn retry(&self) -> Option<bool> {
        self.retries.take().await
    }

    fn retried_alone(&self) {
        self.retries.retried_alone();
    }

    async fn defer(&self, deferred: &Deferred) -> bool {
        self.queue.add(deferred).await
    }

    fn trip(&self, breaker: Target, reason: String) {
        let _ = self.trips.send((breaker, reason));
    }
}

/// What fleet mode did in a run, for the headless summary.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FleetSummary {
    /// Live instances last seen.
    pub instances: u32,
    /// Whether Redis was unreachable at the end.
    pub degraded: bool,
    /// Round trips for rate-limit leases and budget allowances.
    pub round_trips: u64,
    /// Deferred requests this instance put on the shared stream.
    pub deferred_shared: u64,
    /// Deferred requests from the stream (any instance's) re-driven here.
    pub deferred_redriven: u64,
    /// Retries (and hedges) here the fleet's retry budget granted.
    pub retries_granted: u64,
    /// Retries here it refused.
    pub retries_refused: u64,
}

impl Fleet {
    /// Says in each heartbeat that operators reach this instance at `url`.
    pub fn advertise(&self, url: &str) {
        *self.admin_url.lock() = url.to_string();
    }

    /// Connects to Redis at `url`, applies the actions stored there, and
    /// starts sharing: heartbeats, announcing local actions, applying remote
    /// ones. The tasks run until the runtime ends.
    pub async fn start(url: &str, runner: Arc<Runner>) -> Result<Arc<Self>, FleetError> {
        let endpoint = RedisEndpoint::parse(url)?;
        let conn = endpoint.connect().await.map_err(|why| FleetError::Unreachable {
            url: endpoint.shown(),
            why,
        })?;
        let instance = format!("{}-{}", std::process::id(), runner.clock().wall_ms());
        runner.store().set_redis();
        let store: Arc<dyn store::Store> = Arc::new(store::RedisStore::new(conn.clone()));
        let cfg = runner.config();
        let allowances = Arc::new(allowance::Allowances::new(
            store.clone(),
            runner.store().clone(),
            &cfg.budgets,
            cfg.state.budgets_fail,
            *runner.clock(),
        ));
        let retries = Arc::new(retries::SharedRetries::new(store.clone(), runner.clone()));
        let me = Arc::new(Self {
            endpoint,
            conn: conn.clone(),
            store,
            retries,
            instance: instance.clone(),
            runner: runner.clone(),
            unsent: Mutex::new(Vec::new()),
            applied: Mutex::new(HashMap::new()),
            leases: lease::LeaseStats::default(),
            allowances,
            admin_url: Mutex::new(String::new()),
            queue: Arc::new(deferred::SharedQueue::new(
                conn.clone(),
                instance.clone(),
                runner.store().clone(),
            )),
        });
        if let Err(e) = me.catch_up().await {
            tracing::warn!(error = %e, "cannot read the fleet's stored actions");
        }
        me.heartbeat_once().await;
        tokio::spawn(me.clone().heartbeat());
        tokio::spawn(me.clone().announce());
        tokio::spawn(me.clone().listen());
        let (trips, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(me.clone().share_trips(rx));
        tokio::spawn(me.retries.clone().share());
        me.runner.share_with(Arc::new(Sharing {
            allowances: me.allowances.clone(),
            retries: me.retries.clone(),
            queue: me.queue.clone(),
            trips,
        }));
        tokio::spawn(me.queue.clone().run(me.runner.clone()));
        for p in 0..me.runner.catalog().providers().len() {
            tokio::spawn(lease::keep_leased(me.clone(), p));
        }
        Ok(me)
    }

    /// The caller keys the fleet shares and the names it revoked.
    pub async fn shared_keys(&self) -> redis::RedisResult<keys::SharedKeys> {
        keys::fetch(&mut self.conn.clone()).await
    }

    /// Round trips made so far for rate-limit leases and user allowances.
    pub fn round_trips(&self) -> u64 {
        let allowances = self.allowances.round_trips.load(std::sync::atomic::Ordering::Relaxed);
        self.leases.round_trips.load(std::sync::atomic::Ordering::Relaxed) + allowances
    }

    /// What fleet mode did so far.
    pub fn summary(&self) -> FleetSummary {
        let view = self.runner.store().view();
        FleetSummary {
            instances: view.instances,
            degraded: view.degraded,
            round_trips: self.round_trips(),
            deferred_shared: self.queue.added.load(std::sync::atomic::Ordering::Relaxed),
            deferred_redriven: self.queue.redriven.load(std::sync::atomic::Ordering::Relaxed),
            retries_granted: view.retries_granted,
            retries_refused: view.retries_refused,
        }
    }

    /// This instance's id in the fleet.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Applies a remote action once: only if newer than what this instance
    /// applied to the same target.
    async fn apply_remote(&self, op: &SharedOp) {
        if op.instance == self.instance {
            return;
        }
        {
            let mut applied = self.applied.lock();
            let seen = applied.entry(op.act.subject()).or_insert(0);
            if op.at_ms <= *seen {
                return;
            }
            *seen = op.at_ms;
        }
        match &op.act {
            Act::Trip(target) => self.trip_here(op, target),
            Act::Command(cmd) => {
                if let Err(e) = self
                    .runner
                    .operations()
                    .command(cmd, &Issuer::fleet(&op.by, &op.instance))
                    .await
                {
                    tracing::warn!(error = %e, "a fleet action does not apply here");
                }
            }
        }
    }

    /// Opens this instance's breaker on a trip another instance shared,
    /// unless an operator holds the breaker or it is open already.
    fn trip_here(&self, op: &SharedOp, target: &Target) {
        let Some(t) = self.runner.catalog().registry().find(target) else {
            return;
        };
        if matches!(t.breaker.state(), BreakerState::Closed | BreakerState::HalfOpen) {
            let reason = format!("{} on instance {} (provider-signalled) via fleet", op.by, op.instance);
            t.breaker
                .set_state(BreakerState::Open, &reason, self.runner.clock().now());
        }
    }

    /// Shares the trips of this instance's breakers that the provider
    /// signalled (429, 5xx, 529): stored while the breaker stays open, so
    /// instances that start meanwhile apply them too, and announced.
    async fn share_trips(self: Arc<Self>, mut rx: tokio::sync::mpsc::UnboundedReceiver<(Target, String)>) {
        while let Some((target, reason)) = rx.recv().await {
            let now = self.runner.clock().now();
            let open_ms = self
                .runner
                .catalog()
                .registry()
                .find(&target)
                .and_then(|t| t.breaker.view(now).next_probe_ms)
                .unwrap_or(0)
                .max(1_000);
            let op = SharedOp {
                instance: self.instance.clone(),
                by: reason,
                act: Act::Trip(target),
                at_ms: self.runner.clock().wall_ms(),
            };
            self.applied.lock().insert(op.act.subject(), op.at_ms);
            if !self.share(TRIP_KEY, open_ms, &op).await {
                tracing::debug!(subject = %op.act.subject(), "trip not shared (Redis unreachable)");
            }
        }
    }

    /// Applies every action stored in Redis (issued while this instance was
    /// away), oldest first.
    async fn catch_up(&self) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        let mut stored = records(&mut conn, OP_KEY, ACTIONS_INDEX).await?;
        stored.extend(records(&mut conn, TRIP_KEY, ACTIONS_INDEX).await?);
        let mut ops: Vec<SharedOp> = stored
            .into_iter()
            .filter_map(|(_, v)| serde_json::from_str(&v).ok())
            .collect();
        ops.sort_by_key(|o| o.at_ms);
        for op in &ops {
            self.apply_remote(op).await;
        }
        Ok(())
    }

    /// Stores an action under `prefix` + its target for `ttl_ms` and
    /// announces it; false if Redis did not take it.
    async fn share(&self, prefix: &str, ttl_ms: u64, op: &SharedOp) -> bool {
        let Ok(json) = serde_json::to_string(op) else {
            return false;
        };
        let mut conn = self.conn.clone();
        let key = format!("{prefix}{}", op.act.subject());
        if put(&mut conn, &key, &json, ttl_ms, ACTIONS_INDEX).await.is_err() {
            return false;
        }
        let published: redis::RedisResult<()> = conn.publish(OPS_CHANNEL, &json).await;
        published.is_ok()
    }

    /// Announces the actions operators take on this instance.
    async fn announce(self: Arc<Self>) {
        let mut rx = self.runner.events().subscribe_notable();
        while let Some(e) = rx.recv().await {
            let EventKind::Operator {
                command, by, applied, ..
            } = e.kind
            else {
                continue;
            };
            if by.via_fleet() || !applied || matches!(command, Command::SetFault { .. }) {
                continue;
            }
            let op = SharedOp {
                instance: self.instance.clone(),
                by: by.name,
                act: Act::Command(command),
                at_ms: self.runner.clock().wall_ms(),
            };
            self.applied.lock().insert(op.act.subject(), op.at_ms);
            if !self.share(OP_KEY, OP_TTL.as_millis() as u64, &op).await {
                tracing::warn!(subject = %op.act.subject(), "Redis unreachable; the action is shared when it returns");
                self.unsent.lock().push(op);
            }
        }
    }

    /// Applies actions announced by other instances; resubscribes (and
    /// catches up on what was stored meanwhile) after losing Redis.
    async fn listen(self: Arc<Self>) {
        loop {
            let pubsub = match self.endpoint.client().await {
                Ok(client) => client.get_async_pubsub().await,
                Err(e) => Err(e),
            };
            match pubsub {
                Ok(mut ps) => {
                    if ps.subscribe(OPS_CHANNEL).await.is_ok() {
                        if let Err(e) = self.catch_up().await {
                            tracing::warn!(error = %e, "cannot read the fleet's stored actions");
                        }
                        let mut msgs = ps.on_message();
                        while let Some(m) = msgs.next().await {
                            let Ok(json) = m.get_payload::<String>() else { continue };
                            if let Ok(op) = serde_json::from_str::<SharedOp>(&json) {
                                self.apply_remote(&op).await;
                            }
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %e, "fleet subscription not available"),
            }
            tokio::time::sleep(HEARTBEAT).await;
        }
    }

    /// One heartbeat: this instance is live; count the live ones; count in
    /// what budgets granted themselves alone and share what could not be
    /// shared before. Marks the store degraded on failure.
    async fn heartbeat_once(&self) {
        let mut conn = self.conn.clone();
        let key = format!("{INSTANCE_KEY}{}", self.instance);
        let admin = self.admin_url.lock().clone();
        let beat = put(
            &mut conn,
            &key,
            &admin,
            INSTANCE_TTL.as_millis() as u64,
            INSTANCES_INDEX,
        )
        .await;
        let live = match beat {
            Ok(()) => records(&mut conn, INSTANCE_KEY, INSTANCES_INDEX).await.map(|r| r.len()),
            Err(e) => Err(e),
        };
        let status = self.runner.store();
        self.allowances.forget_idle();
        match live {
            Ok(n) => {
                self.allowances.count_in().await;
                self.allowances.saw_instances(n as u32);
                if status.view().degraded {
                    tracing::info!("Redis is back; fleet state shared again");
                    self.allowances.rejoined();
                }
                status.set_degraded(false);
                status.set_instances(n as u32);
                let unsent = std::mem::take(&mut *self.unsent.lock());
                for op in unsent {
                    if !self.share(OP_KEY, OP_TTL.as_millis() as u64, &op).await {
                        self.unsent.lock().push(op);
                    }
                }
            }
            Err(e) => {
                if !status.view().degraded {
                    tracing::warn!(error = %e, "Redis unreachable; limits and actions are local until it returns");
                }
                status.set_degraded(true);
            }
        }
    }

    async fn heartbeat(self: Arc<Self>) {
        let mut tick = tokio::time::interval(HEARTBEAT);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.heartbeat_once().await;
        }
    }
}

/// Where operators reach the live instances of the fleet at `url`: the
/// admin URLs their heartbeats publish (instances that serve no gateway
/// publish none).
pub async fn admin_urls(url: &str) -> Result<Vec<String>, FleetError> {
    let endpoint = RedisEndpoint::parse(url)?;
    let unreachable = |why| FleetError::Unreachable {
        url: endpoint.shown(),
        why,
    };
    let mut conn = endpoint.connect().await.map_err(unreachable)?;
    let beats = records(&mut conn, INSTANCE_KEY, INSTANCES_INDEX)
        .await
        .map_err(unreachable)?;
    let mut urls: Vec<String> = beats
        .into_iter()
        .map(|(_, url)| url)
        .filter(|u| u.starts_with("http"))
        .collect();
    urls.sort();
    urls.dedup();
    Ok(urls)
}

/// Stores `value` at `key` for `ttl_ms`; on a cluster `key` also joins
/// `index`, where [`records`] finds it.
async fn put(conn: &mut Conn, key: &str, value: &str, ttl_ms: u64, index: &str) -> redis::RedisResult<()> {
    let () = conn.pset_ex(key, value, ttl_ms).await?;
    if conn.is_cluster() {
        let () = conn.sadd(index, key).await?;
    }
    Ok(())
}

/// Every live key under `prefix` and its value: found by SCAN on one
/// server, by `index` on a cluster (a SCAN there sees one node), whose
/// expired keys then leave it.
async fn records(conn: &mut Conn, prefix: &str, index: &str) -> redis::RedisResult<Vec<(String, String)>> {
    let keys: Vec<String> = if conn.is_cluster() {
        let all: Vec<String> = conn.smembers(index).await?;
        all.into_iter().filter(|k| k.starts_with(prefix)).collect()
    } else {
        scan(conn, &format!("{prefix}*")).await?
    };
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    // One MGET (on a cluster, split by slot by the client).
    let values: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query_async(conn).await?;
    let (mut live, mut gone) = (Vec::new(), Vec::new());
    for (key, value) in keys.into_iter().zip(values) {
        match value {
            Some(v) => live.push((key, v)),
            None => gone.push(key),
        }
    }
    if conn.is_cluster() && !gone.is_empty() {
        let () = conn.srem(index, gone).await?;
    }
    Ok(live)
}

/// Every key matching `pattern` (SCAN, never KEYS).
async fn scan(conn: &mut Conn, pattern: &str) -> redis::RedisResult<Vec<String>> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(500)
            .query_async(conn)
            .await?;
        keys.extend(batch);
        if next == 0 {
            return Ok(keys);
        }
        cursor = next;
    }
}
