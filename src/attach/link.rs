//! One watched instance: its snapshot stream and its outcome records, each
//! followed until the console leaves, reconnected with backoff when lost.
//! An instance that says nothing for [`STALE_AFTER`] is stale: a slow one
//! never holds the console up.

use super::Hub;
use crate::telemetry::events::{Event, EventKind};
use crate::telemetry::snapshot::{Health, InstanceView, Snapshot};
use crate::wire::sse::{SseItem, SseParser};
use futures_util::StreamExt;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Silence after which an instance counts as lost (its stream sends a
/// keep-alive twice a second when nothing changes).
pub const STALE_AFTER: Duration = Duration::from_millis(1_500);
/// The first and the longest wait before reconnecting.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(250), Duration::from_secs(5));

/// How the link to an instance is.
#[derive(Clone, Copy, Debug)]
enum State {
    Connecting,
    Live,
    Stale { since: Instant, retry_at: Instant },
}

/// What the console knows of one instance.
pub struct Instance {
    /// Its name on screen (host:port).
    pub name: String,
    /// Its base URL (`http://host:port`).
    pub base: String,
    link: Mutex<Link>,
    /// No longer watched (it left the fleet): its links stop.
    gone: std::sync::atomic::AtomicBool,
}

struct Link {
    state: State,
    snap: Option<Arc<Snapshot>>,
    error: Option<String>,
    /// What its live view said the credential may do (`operate`, `view`,
    /// `readonly`).
    scope: Option<String>,
    /// Its totals before its last restart, added to each snapshot's so
    /// they run on across restarts.
    carried: Carried,
}

/// Running totals an instance's earlier processes reached.
#[derive(Clone, Copy, Debug, Default)]
struct Carried {
    requests: u64,
    by_level: [u64; 5],
    tokens: u64,
    cost_usd: f64,
}

impl Carried {
    /// `s`'s totals (already counting what was carried into it).
    fn of(s: &Snapshot) -> Self {
        Self {
            requests: s.requests,
            by_level: s.by_level,
            tokens: s.tokens,
            cost_usd: s.cost_usd,
        }
    }

    fn add_to(&self, s: &mut Snapshot) {
        s.requests += self.requests;
        for (a, b) in s.by_level.iter_mut().zip(self.by_level) {
            *a += b;
        }
        s.tokens += self.tokens;
        s.cost_usd += self.cost_usd;
    }
}

/// Whether `new` comes from another process than `old`: its time went
/// back, or it started more than [`RESTART_SKEW_MS`] apart.
fn restarted(old: &Snapshot, new: &Snapshot) -> bool {
    let start = |s: &Snapshot| s.wall_ms.saturating_sub(s.t_ms);
    new.t_ms < old.t_ms || start(new).abs_diff(start(old)) > RESTART_SKEW_MS
}

/// How far apart two snapshots' start times may be and still be one process
/// (wall time and process time are read a moment apart).
const RESTART_SKEW_MS: u64 = 2_000;

/// What changed when an instance spoke or went silent.
pub struct Change {
    /// What changed, and in words.
    pub kind: crate::telemetry::events::InstanceChange,
    /// In words.
    pub detail: String,
    /// The events its earlier process had said (on a restart).
    pub earlier: Option<Arc<Snapshot>>,
}

impl Instance {
    /// An instance at `base`, not reached yet.
    pub fn new(name: String, base: String) -> Self {
        Self {
            name,
            base,
            link: Mutex::new(Link {
                state: State::Connecting,
                snap: None,
                error: None,
                scope: None,
                carried: Carried::default(),
            }),
            gone: Default::default(),
        }
    }

    /// Stops watching it.
    pub fn forget(&self) {
        self.gone.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn is_gone(&self) -> bool {
        self.gone.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How long it has been lost, if it is.
    pub fn stale_for(&self, now: Instant) -> Option<Duration> {
        match self.link.lock().state {
            State::Stale { since, .. } => Some(now.saturating_duration_since(since)),
            _ => None,
        }
    }

    /// Its name and health now, its last snapshot, and whether it is live.
    pub fn view(&self, now: Instant) -> (InstanceView, Option<Arc<Snapshot>>, bool) {
        let l = self.link.lock();
        let health = match l.state {
            State::Connecting => Health::Connecting,
            State::Live => Health::Live,
            State::Stale { since, retry_at } => Health::Stale {
                for_ms: now.saturating_duration_since(since).as_millis() as u64,
                retry_ms: retry_at.saturating_duration_since(now).as_millis() as u64,
            },
        };
        let view = InstanceView {
            name: self.name.clone(),
            health,
            error: l.error.clone(),
        };
        (view, l.snap.clone(), matches!(l.state, State::Live))
    }

    /// Whether it sent a snapshot yet.
    pub fn answered(&self) -> bool {
        self.link.lock().snap.is_some()
    }

    /// What its live view said the credential may do.
    pub fn scope(&self) -> Option<String> {
        self.link.lock().scope.clone()
    }

    /// Whether it failed before it ever answered, and why.
    pub fn failed(&self) -> Option<String> {
        let l = self.link.lock();
        l.snap.is_none().then(|| l.error.clone()).flatten()
    }

    /// Takes a snapshot it sent; says whether it came back or restarted.
    pub fn take(&self, mut snap: Snapshot) -> Vec<Change> {
        use crate::telemetry::events::InstanceChange;
        let mut l = self.link.lock();
        let mut changes = Vec::new();
        if let State::Stale { since, .. } = l.state {
            changes.push(Change {
                kind: InstanceChange::Back,
                detail: format!("answers again after {:.1} s", since.elapsed().as_secs_f64()),
                earlier: None,
            });
        }
        if let Some(old) = l.snap.clone().filter(|old| restarted(old, &snap)) {
            l.carried = Carried::of(&old);
            changes.push(Change {
                kind: InstanceChange::Restarted,
                detail: format!(
                    "a new process (up {}); its totals go on from {} requests",
                    crate::tui::ui::clock(snap.t_ms),
                    old.requests
                ),
                earlier: Some(old),
            });
        }
        l.carried.add_to(&mut snap);
        l.snap = Some(Arc::new(snap));
        l.state = State::Live;
        l.error = None;
        changes
    }

    /// It could not be reached or went silent: stale until it answers
    /// again, the next try in `retry_in`. Says so if it was live.
    fn lost(&self, why: String, retry_in: Duration) -> Option<Change> {
        let now = Instant::now();
        let mut l = self.link.lock();
        let was_live = matches!(l.state, State::Live);
        let since = match l.state {
            State::Stale { since, .. } => since,
            _ => now,
        };
        l.state = State::Stale {
            since,
            retry_at: now + retry_in,
        };
        l.error = Some(why.clone());
        was_live.then(|| Change {
            kind: crate::telemetry::events::InstanceChange::Lost,
            detail: why,
            earlier: None,
        })
    }
}

/// Follows `inst`'s snapshot stream until the hub is dropped.
pub async fn follow_snapshots(hub: std::sync::Weak<Hub>, inst: Arc<Instance>) {
    let mut wait = BACKOFF.0;
    loop {
        let Some(h) = hub.upgrade().filter(|_| !inst.is_gone()) else {
            return;
        };
        let why = match stream_snapshots(&h, &inst).await {
            Ok(()) => "the stream ended".to_string(),
            Err(e) => e,
        };
        // A link that was live starts its backoff again.
        if matches!(inst.link.lock().state, State::Live) {
            wait = BACKOFF.0;
        }
        if let Some(change) = inst.lost(why, wait) {
            h.note(&inst, change);
        }
        h.poke();
        drop(h);
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(BACKOFF.1);
    }
}

/// A GET of `path` on `inst`, with the hub's credential.
/// An instance that takes longer than [`STALE_AFTER`] to answer at all is
/// as lost as one that went silent.
async fn get(hub: &Hub, inst: &Instance, path: &str) -> Result<reqwest::Response, String> {
    let send = hub
        .request(reqwest::Method::GET, &format!("{}{path}", inst.base))
        .send();
    let r = tokio::time::timeout(STALE_AFTER, send)
        .await
        .map_err(|_| format!("no answer in {} s", STALE_AFTER.as_secs_f64()))?
        .map_err(|e| super::reach_error(&e))?;
    if !r.status().is_success() {
        return Err(super::refusal(r).await);
    }
    Ok(r)
}

/// An instance's server-sent events, read so that a slow or hostile one
/// costs little: each whole event (or keep-alive comment) must arrive
/// within [`STALE_AFTER`] of the one before, however the bytes drip, and
/// no line may pass the parser's bound.
struct Events {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    parser: SseParser,
    /// When the next whole item is due.
    due: tokio::time::Instant,
    /// Bytes since the last whole item.
    partial: usize,
}

impl Events {
    fn of(r: reqwest::Response) -> Self {
        Self {
            body: Box::pin(r.bytes_stream()),
            parser: SseParser::new(),
            due: tokio::time::Instant::now() + STALE_AFTER,
            partial: 0,
        }
    }

    /// The next items; `Ok(None)` when the stream ended.
    async fn next(&mut self) -> Result<Option<Vec<SseItem>>, String> {
        loop {
            let chunk = match tokio::time::timeout_at(self.due, self.body.next()).await {
                Err(_) if self.partial > 0 => {
                    return Err(format!(
                        "too slow: {} bytes in {} s and no whole event",
                        self.partial,
                        STALE_AFTER.as_secs_f64()
                    ))
                }
                Err(_) => return Err(format!("silent for {} s", STALE_AFTER.as_secs_f64())),
                Ok(None) => return Ok(None),
                Ok(Some(Err(e))) => return Err(format!("stream cut: {e}")),
                Ok(Some(Ok(c))) => c,
            };
            self.partial += chunk.len();
            let items = self.parser.feed(&chunk).map_err(|e| e.to_string())?;
            if !items.is_empty() {
                self.due = tokio::time::Instant::now() + STALE_AFTER;
                self.partial = 0;
                return Ok(Some(items));
            }
        }
    }
}

async fn stream_snapshots(hub: &Hub, inst: &Instance) -> Result<(), String> {
    let r = get(hub, inst, "/_fusebox/snapshots?every_ms=100").await?;
    let scope = r
        .headers()
        .get(crate::wire::fusebox::SCOPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    inst.link.lock().scope = scope;
    let mut events = Events::of(r);
    while let Some(items) = events.next().await? {
        // Keep-alive comments only keep the deadline from running out.
        for item in items {
            if let SseItem::Event(e) = item {
                let snap: Snapshot =
                    serde_json::from_str(&e.data).map_err(|e| format!("not a fusebox snapshot: {e}"))?;
                for change in inst.take(snap) {
                    hub.note(inst, change);
                }
                hub.poke();
            }
        }
    }
    Ok(())
}

/// Follows `inst`'s outcome and call records (for the chains pane and the
/// breaker detail) until the hub is dropped; reconnects as the snapshots
/// do, without marking anything.
pub async fn follow_records(hub: std::sync::Weak<Hub>, inst: Arc<Instance>) {
    let mut wait = BACKOFF.0;
    loop {
        let Some(h) = hub.upgrade().filter(|_| !inst.is_gone()) else {
            return;
        };
        if stream_records(&h, &inst).await {
            wait = BACKOFF.0;
        }
        drop(h);
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(BACKOFF.1);
    }
}

/// Reads records until the stream ends; true if it got any. Notable
/// events are not taken here: the snapshots carry them.
async fn stream_records(hub: &Hub, inst: &Instance) -> bool {
    let Ok(r) = get(hub, inst, "/_fusebox/events?records=calls").await else {
        return false;
    };
    let mut events = Events::of(r);
    let mut got = false;
    while let Ok(Some(items)) = events.next().await {
        for item in items {
            let SseItem::Event(e) = item else { continue };
            let Ok(mut ev) = serde_json::from_str::<Event>(&e.data) else {
                continue;
            };
            if matches!(ev.kind, EventKind::Outcome(_) | EventKind::Attempt(_)) {
                got = true;
                // Among several, named and on the console's time line (the
                // instance started its snapshot's wall time less its t).
                if hub.instances().len() > 1 {
                    let started = inst.link.lock().snap.as_ref().map(|s| s.wall_ms.saturating_sub(s.t_ms));
                    if let Some(started) = started {
                        ev.t_ms = (started + ev.t_ms).saturating_sub(hub.started_wall_ms);
                    }
                    ev.instance = Some(inst.name.clone());
                }
                if !hub.event(ev) {
                    return got;
                }
            }
        }
    }
    got
}
