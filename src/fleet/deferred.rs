//! Deferred requests shared by the fleet: in fleet mode a request the
//! runner defers goes to a Redis stream instead of the local spool. Every
//! instance reads the stream in one consumer group, so each entry is
//! claimed by one instance, which re-drives it once its dependencies
//! recover and acknowledges (and deletes) it only when it has ended.
//!
//! An instance refreshes its claims on every pass. Entries whose claim was
//! not refreshed for [`STEAL_AFTER`] belong to an instance that died; the
//! next instance to look takes them over (XAUTOCLAIM). An instance where no
//! model admits calls hands the entries it holds back to the stream and
//! claims none until one does, so healthier instances re-drive them. Nothing is lost: an
//! entry leaves the stream only when acknowledged, and while Redis is
//! unreachable deferred requests go to the local spool as before.

use super::connect::Conn;
use crate::resilience::defer::Deferred;
use crate::runner::Runner;
use crate::telemetry::store::StoreStatus;
use parking_lot::Mutex;
use redis::streams::{StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The stream of deferred requests, and its consumer group.
pub const STREAM: &str = "fusebox:deferred";
const GROUP: &str = "fusebox";
/// A claim not refreshed for this long is taken over (its instance died).
pub const STEAL_AFTER: Duration = Duration::from_secs(5);
/// How often an instance looks at the stream.
const PASS: Duration = Duration::from_millis(500);
/// Entries one instance holds at most (the rest wait for others).
const HOLD: usize = 64;

/// This instance's side of the shared stream.
pub struct SharedQueue {
    conn: Conn,
    consumer: String,
    status: Arc<StoreStatus>,
    /// Entries claimed here and not ended: stream id → request.
    held: Mutex<BTreeMap<String, Deferred>>,
    /// Stream ids being re-driven now.
    busy: Mutex<HashSet<String>>,
    /// Entries that ended but are not acknowledged yet (Redis was away).
    ended: Mutex<Vec<String>>,
    /// Requests this instance put on the stream.
    pub added: AtomicU64,
    /// Stream entries this instance re-drove to an end.
    pub redriven: AtomicU64,
}

impl SharedQueue {
    pub(super) fn new(conn: Conn, consumer: String, status: Arc<StoreStatus>) -> Self {
        Self {
            conn,
            consumer,
            status,
            held: Mutex::new(BTreeMap::new()),
            busy: Mutex::new(HashSet::new()),
            ended: Mutex::new(Vec::new()),
            added: AtomicU64::new(0),
            redriven: AtomicU64::new(0),
        }
    }

    /// Puts a deferred request on the stream; false if Redis cannot take it
    /// now (the caller spools it locally).
    pub async fn add(&self, d: &Deferred) -> bool {
        if self.status.view().degraded {
            return false;
        }
        let Ok(json) = serde_json::to_string(d) else {
            return false;
        };
        let r: redis::RedisResult<String> = self.conn.clone().xadd(STREAM, "*", &[("request", json)]).await;
        match r {
            Ok(_) => {
                self.added.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot put a deferred request on the fleet's stream; spooling it locally");
                false
            }
        }
    }

    /// Looks at the stream every [`PASS`], for as long as the runtime runs.
    pub(super) async fn run(self: Arc<Self>, runner: Arc<Runner>) {
        let mut tick = tokio::time::interval(PASS);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.status.view().degraded {
                continue;
            }
            if let Err(e) = self.pass(&runner).await {
                tracing::debug!(error = %e, "deferred stream pass failed");
            }
        }
    }

    /// One pass: refresh the claims held here, take over entries of dead
    /// instances, claim new ones, and re-drive those that are due.
    async fn pass(self: &Arc<Self>, runner: &Arc<Runner>) -> redis::RedisResult<()> {
        let mut conn = self.conn.clone();
        let made: redis::RedisResult<()> = conn.xgroup_create_mkstream(STREAM, GROUP, "0").await;
        if let Err(e) = made {
            if e.code() != Some("BUSYGROUP") {
                return Err(e);
            }
        }
        self.acknowledge(&mut conn).await?;
        let accepting = runner.catalog().any_model_admits(runner.clock().now());
        if !accepting {
            self.release(&mut conn).await?;
        }
        let held: Vec<String> = self.held.lock().keys().cloned().collect();
        if !held.is_empty() {
            // Resets the entries' idle time: they are still owned here.
            let _: redis::Value = redis::cmd("XCLAIM")
                .arg(STREAM)
                .arg(GROUP)
                .arg(&self.consumer)
                .arg(0)
                .arg(&held)
                .arg("JUSTID")
                .query_async(&mut conn)
                .await?;
        }
        let room = if accepting { HOLD.saturating_sub(held.len()) } else { 0 };
        if room > 0 {
            let stolen: StreamAutoClaimReply = conn
                .xautoclaim_options(
                    STREAM,
                    GROUP,
                    &self.consumer,
                    STEAL_AFTER.as_millis() as u64,
                    "0-0",
                    StreamAutoClaimOptions::default().count(room),
                )
                .await?;
            if !stolen.claimed.is_empty() {
                tracing::info!(
                    n = stolen.claimed.len(),
                    "took over deferred requests of an instance gone quiet"
                );
            }
            self.hold(&mut conn, stolen.claimed).await?;
        }
        let room = if accepting {
            HOLD.saturating_sub(self.held.lock().len())
        } else {
            0
        };
        if room > 0 {
            let opts = StreamReadOptions::default().group(GROUP, &self.consumer).count(room);
            let new: StreamReadReply = conn.xread_options(&[STREAM], &[">"], &opts).await?;
            for k in new.keys {
                self.hold(&mut conn, k.ids).await?;
            }
        }
        let due: Vec<(String, Deferred, bool)> = {
            let held = self.held.lock();
            let ended = self.ended.lock();
            let mut busy = self.busy.lock();
            let due: Vec<_> = held
                .iter()
                .filter(|(id, _)| !busy.contains(*id) && !ended.contains(*id))
                .filter_map(|(id, d)| Some((id.clone(), d.clone(), runner.deferral().due(d, false)?)))
                .collect();
            busy.extend(due.iter().map(|(id, _, _)| id.clone()));
            due
        };
        for (id, d, give_up) in due {
            let (me, runner) = (self.clone(), runner.clone());
            tokio::spawn(async move {
                if runner.redrive(&d, give_up, false).await.is_some() {
                    me.ended.lock().push(id.clone());
                    let _ = me.acknowledge(&mut me.conn.clone()).await;
                }
                me.busy.lock().remove(&id);
            });
        }
        Ok(())
    }

    /// Nothing could be re-driven here now: hands the entries held (and not
    /// being re-driven) back to the fleet. Each is put back on the stream
    /// and its claimed copy acknowledged, atomically, so any instance can
    /// take it at once.
    async fn release(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        let idle: Vec<(String, Deferred)> = {
            let held = self.held.lock();
            let (ended, busy) = (self.ended.lock(), self.busy.lock());
            held.iter()
                .filter(|(id, _)| !busy.contains(*id) && !ended.contains(*id))
                .map(|(id, d)| (id.clone(), d.clone()))
                .collect()
        };
        if idle.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (id, d) in &idle {
            let json = serde_json::to_string(d).unwrap_or_default();
            pipe.xadd(STREAM, "*", &[("request", json)])
                .ignore()
                .xack(STREAM, GROUP, &[id])
                .ignore()
                .xdel(STREAM, &[id])
                .ignore();
        }
        let () = pipe.query_async(conn).await?;
        let mut held = self.held.lock();
        for (id, _) in &idle {
            held.remove(id);
        }
        tracing::info!(
            n = idle.len(),
            "no model admits calls here; deferred requests handed back to the fleet"
        );
        Ok(())
    }

    /// Keeps claimed entries; an unreadable one is acknowledged and
    /// dropped with an error (it can never be re-driven).
    async fn hold(&self, conn: &mut Conn, ids: Vec<StreamId>) -> redis::RedisResult<()> {
        for e in ids {
            let parsed = e
                .get::<String>("request")
                .and_then(|json| serde_json::from_str::<Deferred>(&json).ok());
            match parsed {
                Some(d) => {
                    self.held.lock().insert(e.id, d);
                }
                None => {
                    tracing::error!(id = %e.id, "unreadable deferred request on the fleet's stream; dropping it");
                    remove(conn, std::slice::from_ref(&e.id)).await?;
                }
            }
        }
        Ok(())
    }

    /// Acknowledges and deletes the entries that ended; on failure they
    /// stay held (claims refreshed, not re-driven again) until a later pass.
    async fn acknowledge(&self, conn: &mut Conn) -> redis::RedisResult<()> {
        let ids = std::mem::take(&mut *self.ended.lock());
        if ids.is_empty() {
            return Ok(());
        }
        match remove(conn, &ids).await {
            Ok(()) => {
                let mut held = self.held.lock();
                for id in &ids {
                    held.remove(id);
                }
                self.redriven.fetch_add(ids.len() as u64, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                self.ended.lock().extend(ids);
                Err(e)
            }
        }
    }
}

/// Acknowledges and deletes stream entries.
async fn remove(conn: &mut Conn, ids: &[String]) -> redis::RedisResult<()> {
    redis::pipe()
        .xack(STREAM, GROUP, ids)
        .ignore()
        .xdel(STREAM, ids)
        .ignore()
        .query_async(conn)
        .await
}
