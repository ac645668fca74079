//! `fusebox attach`: the console over running gateways. Each instance's
//! live view (snapshot stream, outcome records) is followed over HTTP; the
//! console draws their combined snapshot, and its commands go to the
//! instance owning the selected row, or to every instance (one, where they
//! share a Redis store and so each other's commands).

mod link;
pub mod merge;

use crate::command::{Command, Issuer};
use crate::telemetry::events::Event;
use crate::telemetry::snapshot::Snapshot;
use crate::tui::app::Dispatch;
use crate::tui::control::{CommandReply, Control, Feed};
use futures_util::future::BoxFuture;
pub use link::Instance;
use parking_lot::RwLock;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch, Notify};

/// Events a combined snapshot carries.
const EVENTS: usize = crate::tui::SNAPSHOT_EVENTS;
/// The most combined snapshots a second.
const MIN_GAP: Duration = Duration::from_millis(50);
/// How often health is redrawn when nothing arrives (stale ages move).
const TICK: Duration = Duration::from_millis(250);
/// How long a command may take on one instance.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(3);

/// Why `fusebox attach` cannot start.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// A URL is not one.
    #[error("{url}: not an instance URL ({why}); give its address, e.g. http://127.0.0.1:8787")]
    BadUrl {
        /// What was given.
        url: String,
        /// Why not.
        why: String,
    },
    /// No instance to watch.
    #[error("no instance to attach to: give one or more URLs, or --state redis://… to find a fleet's")]
    Nothing,
}

/// The watched instances and their combined view.
pub struct Hub {
    client: reqwest::Client,
    token: Option<String>,
    instances: RwLock<Vec<Arc<Instance>>>,
    view: watch::Sender<Arc<Snapshot>>,
    events: mpsc::UnboundedSender<Event>,
    poked: Notify,
    /// What the hub itself saw (instances lost, back, restarted, and a
    /// restarted one's earlier events), on the console's time line, the
    /// last [`EVENTS`].
    notes: parking_lot::Mutex<std::collections::VecDeque<Event>>,
    /// When the console started: its time line's 0 (and the same in ms
    /// since the Unix epoch).
    started: Instant,
    started_wall_ms: u64,
}

/// An instance's base URL and its name on screen, from what was given
/// (`http://host:port`, with or without `/v1` or a trailing slash).
pub fn parse_url(given: &str) -> Result<(String, String), AttachError> {
    let bad = |why: &str| AttachError::BadUrl {
        url: given.into(),
        why: why.into(),
    };
    let url = reqwest::Url::parse(given).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("use http:// or https://"));
    }
    let host = url.host_str().ok_or_else(|| bad("no host"))?;
    let port = url.port_or_known_default().unwrap_or(80);
    let name = format!("{host}:{port}");
    let base = format!("{}://{name}", url.scheme());
    Ok((base, name))
}

/// Says why an instance could not be reached, in words.
fn reach_error(e: &reqwest::Error) -> String {
    if e.is_connect() {
        "cannot connect".into()
    } else if e.is_timeout() {
        "timed out".into()
    } else {
        format!("request failed: {e}")
    }
}

/// The most of an instance's error body read: its message is in the first
/// few hundred bytes of a fusebox error.
const MAX_ERROR_BODY: usize = 64 << 10;
/// The largest snapshot read whole (a gateway's is well under 1 MiB).
const MAX_SNAPSHOT: usize = 16 << 20;
/// The longest an error body may take to arrive.
const ERROR_BODY_WITHIN: Duration = Duration::from_secs(2);

/// At most `max` bytes of `r`'s body: `Err(true)` if it is longer, `Err(false)`
/// if it broke off. Nothing past the bound is read.
async fn body_within(r: reqwest::Response, max: usize) -> Result<Vec<u8>, bool> {
    use futures_util::StreamExt;
    let mut body = Vec::new();
    let mut chunks = r.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|_| false)?;
        if body.len() + chunk.len() > max {
            return Err(true);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The most of a refusal's message shown.
const MAX_REASON: usize = 512;

/// `s` cut to at most `max` bytes, at a character's boundary.
fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// What an instance's refusal said: its error message and status. Its
/// body is read only so far and so long: a hostile one costs nothing.
async fn refusal(r: reqwest::Response) -> String {
    let status = r.status().as_u16();
    let msg = match tokio::time::timeout(ERROR_BODY_WITHIN, body_within(r, MAX_ERROR_BODY)).await {
        Err(_) => format!(
            "no reason given (its body did not arrive in {} s)",
            ERROR_BODY_WITHIN.as_secs()
        ),
        Ok(Err(true)) => format!("no reason given (its body is over {} KiB)", MAX_ERROR_BODY >> 10),
        Ok(Err(false)) => "no reason given (its body broke off)".into(),
        Ok(Ok(body)) => serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.pointer("/error/message")?.as_str().map(|m| cut(m, MAX_REASON)))
            .unwrap_or_else(|| "no reason given".into()),
    };
    format!("{status} {msg}")
}

impl Hub {
    /// Watches the instances at `urls` (more may be added), sending `token`
    /// as the operator's bearer credential.
    pub fn start(urls: &[String], token: Option<String>) -> Result<(Arc<Self>, Feed), AttachError> {
        let parsed = urls.iter().map(|u| parse_url(u)).collect::<Result<Vec<_>, _>>()?;
        let (view, snapshots) = watch::channel(Arc::new(Snapshot::default()));
        let (events, rx) = mpsc::unbounded_channel();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .build()
            .map_err(|e| AttachError::BadUrl {
                url: urls.join(" "),
                why: e.to_string(),
            })?;
        let hub = Arc::new(Self {
            client,
            token,
            instances: RwLock::new(Vec::new()),
            view,
            events,
            poked: Notify::new(),
            notes: Default::default(),
            started: Instant::now(),
            started_wall_ms: crate::clock::Clock::system().wall_ms(),
        });
        for (base, name) in parsed {
            hub.add(base, name);
        }
        tokio::spawn(Self::publish_loop(Arc::downgrade(&hub)));
        let feed = Feed {
            snapshots,
            events: rx,
            control: Arc::new(Commands(hub.clone())),
        };
        Ok((hub, feed))
    }

    /// Watches one more instance (none twice).
    pub fn add(self: &Arc<Self>, base: String, name: String) {
        let inst = {
            let mut all = self.instances.write();
            if all.iter().any(|i| i.base == base) {
                return;
            }
            let inst = Arc::new(Instance::new(name, base));
            all.push(inst.clone());
            inst
        };
        tokio::spawn(link::follow_snapshots(Arc::downgrade(self), inst.clone()));
        tokio::spawn(link::follow_records(Arc::downgrade(self), inst));
        self.poke();
    }

    /// Stops watching the instances not at `bases` that have been lost
    /// for longer than `grace` (they left the fleet).
    pub fn forget_lost(&self, bases: &[String], grace: Duration) {
        let now = Instant::now();
        let mut all = self.instances.write();
        all.retain(|i| {
            let keep = bases.contains(&i.base) || i.stale_for(now).is_none_or(|d| d < grace);
            if !keep {
                i.forget();
            }
            keep
        });
        drop(all);
        self.poke();
    }

    /// The instances watched.
    pub fn instances(&self) -> Vec<Arc<Instance>> {
        self.instances.read().clone()
    }

    /// Something changed: publish a new combined snapshot soon.
    fn poke(&self) {
        self.poked.notify_one();
    }

    /// Says `change` of `inst` on the events pane; a restarted instance's
    /// earlier events stay there.
    fn note(&self, inst: &Instance, change: link::Change) {
        let now = self.started.elapsed().as_millis() as u64;
        let mut notes = self.notes.lock();
        if let Some(old) = &change.earlier {
            let at = (old.wall_ms.saturating_sub(self.started_wall_ms)).min(now);
            notes.extend(old.events.iter().map(|e| Event {
                t_ms: at.saturating_sub(old.t_ms.saturating_sub(e.t_ms)),
                instance: Some(inst.name.clone()),
                ..e.clone()
            }));
        }
        notes.push_back(Event {
            t_ms: now,
            instance: Some(inst.name.clone()),
            kind: crate::telemetry::events::EventKind::Instance {
                change: change.kind,
                detail: change.detail,
            },
        });
        let extra = notes.len().saturating_sub(EVENTS);
        notes.drain(..extra);
    }

    /// Passes an outcome record on to the console; false once it left.
    fn event(&self, e: Event) -> bool {
        self.events.send(e).is_ok()
    }

    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let r = self.client.request(method, url);
        match &self.token {
            Some(t) => r.bearer_auth(t),
            None => r,
        }
    }

    /// The combined snapshot now.
    pub fn combined(&self) -> Arc<Snapshot> {
        let now = Instant::now();
        let seen: Vec<_> = self.instances().iter().map(|i| i.view(now)).collect();
        let parts: Vec<merge::Member<'_>> = seen
            .iter()
            .map(|(view, snap, live)| merge::Member {
                view: view.clone(),
                snap: snap.as_deref(),
                live: *live,
            })
            .collect();
        let t_ms = self.started.elapsed().as_millis() as u64;
        let notes: Vec<Event> = self.notes.lock().iter().cloned().collect();
        Arc::new(merge::combine(
            &parts,
            &notes,
            t_ms,
            self.started_wall_ms + t_ms,
            EVENTS,
        ))
    }

    /// Publishes the combined snapshot whenever an instance says something
    /// (at most every [`MIN_GAP`]) and every [`TICK`] regardless.
    async fn publish_loop(hub: std::sync::Weak<Self>) {
        loop {
            let Some(h) = hub.upgrade() else { return };
            let _ = tokio::time::timeout(TICK, h.poked.notified()).await;
            if h.view.send(h.combined()).is_err() {
                return;
            }
            drop(h);
            tokio::time::sleep(MIN_GAP).await;
        }
    }

    /// Waits until every instance sent a snapshot or failed, at most
    /// `limit`, and publishes what they said.
    pub async fn settled(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let all = self.instances();
            if all.iter().all(|i| i.answered() || i.failed().is_some()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.view.send_replace(self.combined());
    }

    /// Why commands cannot be sent anywhere, if every instance that
    /// answered refuses them.
    pub fn readonly(&self) -> Option<String> {
        let scopes: Vec<String> = self.instances().iter().filter_map(|i| i.scope()).collect();
        if scopes.is_empty() || scopes.iter().any(|s| s == "operate") {
            return None;
        }
        Some(if scopes.iter().all(|s| s == "readonly") {
            "the gateways run --readonly".into()
        } else {
            "the operator token may view, not operate".into()
        })
    }

    /// Where a command given on a row owned by `to` goes: that instance;
    /// else, where the live instances share a Redis store, one of them (the
    /// store passes it on); else every instance.
    fn route(&self, to: Option<&str>) -> Vec<Arc<Instance>> {
        let now = Instant::now();
        let all = self.instances();
        if let Some(name) = to {
            return all.into_iter().filter(|i| i.name == name).collect();
        }
        let live: Vec<_> = all.iter().filter(|i| i.view(now).2).cloned().collect();
        let shared = !live.is_empty()
            && live
                .iter()
                .all(|i| i.view(now).1.is_some_and(|s| s.store.redis && !s.store.degraded));
        match (shared, live.is_empty()) {
            (true, _) => live.into_iter().take(1).collect(),
            (false, false) => live,
            (false, true) => all,
        }
    }

    /// Sends `cmd` as `by` to `inst`, then takes its snapshot after it.
    async fn command(&self, inst: &Instance, cmd: &Command, by: &Issuer) -> Result<(), String> {
        let url = format!("{}/_fusebox/commands", inst.base);
        let r = self
            .request(reqwest::Method::POST, &url)
            .header(crate::wire::fusebox::OPERATOR, &by.name)
            .timeout(COMMAND_TIMEOUT)
            .json(cmd)
            .send()
            .await
            .map_err(|e| reach_error(&e))?;
        if !r.status().is_success() {
            return Err(refusal(r).await);
        }
        let url = format!("{}/_fusebox/snapshot", inst.base);
        let snap = self
            .request(reqwest::Method::GET, &url)
            .timeout(COMMAND_TIMEOUT)
            .send()
            .await
            .map_err(|e| reach_error(&e))?;
        let snap = body_within(snap, MAX_SNAPSHOT).await.ok();
        if let Some(s) = snap.and_then(|b| serde_json::from_slice::<Snapshot>(&b).ok()) {
            for change in inst.take(s) {
                self.note(inst, change);
            }
        }
        Ok(())
    }
}

/// The console's commands, sent to the instances.
struct Commands(Arc<Hub>);

impl Control for Commands {
    fn send(&self, order: Dispatch, by: Issuer) -> BoxFuture<'static, CommandReply> {
        let hub = self.0.clone();
        Box::pin(async move {
            let to = hub.route(order.to.as_deref());
            if to.is_empty() {
                return CommandReply {
                    status: Some(format!("{}: no such instance", order.to.unwrap_or_default())),
                    snapshot: None,
                };
            }
            let sent = futures_util::future::join_all(to.iter().map(|i| hub.command(i, &order.command, &by))).await;
            let (mut done, mut failed) = (Vec::new(), Vec::new());
            for (inst, r) in to.iter().zip(sent) {
                match r {
                    Ok(()) => done.push(inst.name.as_str()),
                    Err(e) => failed.push(format!("{}: {e}", inst.name)),
                }
            }
            let what = order.command.describe();
            let status = match (done.is_empty(), failed.is_empty()) {
                (_, true) => format!("{what}: applied on {}", done.join(", ")),
                (true, false) => format!("{what} refused: {}", failed.join("; ")),
                (false, false) => format!("{what}: applied on {}; refused: {}", done.join(", "), failed.join("; ")),
            };
            let snapshot = hub.combined();
            let _ = hub.view.send(snapshot.clone());
            CommandReply {
                status: Some(status),
                snapshot: Some(snapshot),
            }
        })
    }
}
