//! One client session at `/mcp` and its own sessions with the servers,
//! each opened when the client first needs that server (as the client:
//! its protocol version, capabilities and name) and closed with it. What
//! a server asks in return (elicitation, sampling, roots) goes to this
//! client alone, on the stream of the request that caused it where the
//! server's transport says which one that was (HTTP) or only one is in
//! flight (stdio), else on its general stream; what it tells (progress,
//! log messages, resource updates, list changes) reaches it too, progress
//! under the client's own token. Each is bounded ([`LinkLimits`]).

use super::ordered::NoticeOrder;
use super::relay::Relay;
use super::Upstreams;
use crate::tools::aside::Aside;
use ahash::{AHashMap as HashMap, AHashSet as HashSet};
use parking_lot::Mutex;
use rmcp::model::{
    CallToolResult, CancelledNotificationParam, ClientCapabilities, ClientConfig, ClientRequest, ClientResult,
    ErrorData, Implementation, ProgressToken, RequestId, ServerNotification, ServerRequest, ServerResult,
};
use rmcp::service::{
    InboundStreamOrigin, OriginatingRequestId, Peer, PeerRequestOptions, RoleClient, RoleServer, RunningService,
    ServiceError,
};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

/// The bounds of one client session's traffic with its servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkLimits {
    /// Requests of its servers waiting on the client's answer at once;
    /// past it a server's request is answered with an error at once.
    pub pending: usize,
    /// Notifications of one server queued for the client at once; past
    /// it (a client that does not read) they are dropped, and logged.
    pub notes: usize,
    /// Resources the client is subscribed to at once.
    pub subscriptions: usize,
}

impl Default for LinkLimits {
    fn default() -> Self {
        Self {
            pending: 16,
            notes: 64,
            subscriptions: 256,
        }
    }
}

/// How long a notification may wait for room on the client's stream.
const NOTE_WAIT: Duration = Duration::from_secs(5);

/// A request of the client's in flight to a server.
pub struct Call {
    /// The client's id of it: what the server asks in return rides its stream.
    pub id: RequestId,
    /// The client's progress token for it.
    pub progress: Option<ProgressToken>,
    /// Cancelled when the client withdraws it.
    pub ct: CancellationToken,
    /// What to send, where it is not a tool call.
    pub request: Option<ClientRequest>,
    /// A tool call's arguments as the client sent them (an object; the
    /// runner carries their text, and checks these): sent on without
    /// parsing the text back.
    pub arguments: Option<Arc<serde_json::Value>>,
    /// Whether the runner needs a tool call's answer as text too (it
    /// caches or records it; `Runner::keeps_answers_of`); else the
    /// client's answer is kept whole only.
    pub text: bool,
    /// The session it is made in.
    pub link: Arc<Link>,
    /// The waits of its try under way.
    aside: Mutex<Option<Arc<Aside>>>,
    /// The server's error, where it answered with one (passed on as it is).
    error: Mutex<Option<ErrorData>>,
    /// The server's answer to the last try of a tool call, kept whole for
    /// the client beside the text the runner caches and records.
    answer: Mutex<Option<CallToolResult>>,
}

tokio::task_local! {
    /// The client's request that the tool call on this task is made for.
    static CALL: Arc<Call>;
}

impl Call {
    /// A request `id` of the client's in `link`.
    pub fn new(link: Arc<Link>, id: RequestId, progress: Option<ProgressToken>, ct: CancellationToken) -> Self {
        Self {
            id,
            progress,
            ct,
            request: None,
            arguments: None,
            text: true,
            link,
            aside: Mutex::default(),
            error: Mutex::default(),
            answer: Mutex::default(),
        }
    }

    /// Runs `f` with `self` as the request its tool calls are made for.
    pub async fn scope<F: std::future::Future>(self: Arc<Self>, f: F) -> F::Output {
        CALL.scope(self, f).await
    }

    /// The request the tool call on this task is made for, if any.
    pub fn current() -> Option<Arc<Call>> {
        CALL.try_with(Arc::clone).ok()
    }

    /// The server's own error, where it answered with one.
    pub fn error(&self) -> Option<ErrorData> {
        self.error.lock().clone()
    }

    pub(super) fn failed(&self, e: ErrorData) {
        *self.error.lock() = Some(e);
    }

    /// The server's answer to the last try of the tool call, taken.
    pub fn answer(&self) -> Option<CallToolResult> {
        self.answer.lock().take()
    }

    /// A try's answer (`None`: the try got none).
    pub(super) fn answered(&self, r: Option<CallToolResult>) {
        *self.answer.lock() = r;
    }
}

/// Why a request to a server got no result.
pub enum Failure {
    /// The server's session could not be opened.
    Open(String),
    /// It failed on the way, or the server answered with an error.
    Service(ServiceError),
}

/// One client session and its sessions with the servers.
pub struct Link {
    upstreams: Arc<Upstreams>,
    limits: LinkLimits,
    /// The client, from its first request.
    client: OnceLock<Peer<RoleServer>>,
    /// Its session with each server, once opened.
    conns: Vec<tokio::sync::Mutex<Option<Conn>>>,
    /// Held by a request to each server until it is noted as in flight.
    sending: Vec<tokio::sync::Mutex<()>>,
    /// Its requests in flight, by server and the id that server knows.
    calls: Mutex<HashMap<(usize, RequestId), Arc<Call>>>,
    /// The client's progress tokens, by server and the token it was given.
    tokens: Mutex<HashMap<(usize, ProgressToken), ProgressToken>>,
    pending: Arc<Semaphore>,
    subscriptions: Mutex<HashSet<(usize, String)>>,
}

impl Link {
    /// A client session's link to `upstreams`.
    pub fn new(upstreams: Arc<Upstreams>, limits: LinkLimits) -> Arc<Self> {
        let conns = (0..upstreams.len()).map(|_| tokio::sync::Mutex::new(None)).collect();
        let sending = (0..upstreams.len()).map(|_| tokio::sync::Mutex::new(())).collect();
        Arc::new(Self {
            upstreams,
            limits,
            client: OnceLock::new(),
            conns,
            sending,
            calls: Mutex::default(),
            tokens: Mutex::default(),
            pending: Arc::new(Semaphore::new(limits.pending)),
            subscriptions: Mutex::default(),
        })
    }

    /// The upstream servers.
    pub fn upstreams_arc(&self) -> Arc<Upstreams> {
        self.upstreams.clone()
    }

    /// The client is reached at `peer` (its session at `/mcp`).
    pub fn client_is(&self, peer: &Peer<RoleServer>) {
        let _ = self.client.set(peer.clone());
    }

    /// What this client said of itself, to say to its servers.
    fn client_info(&self) -> ClientConfig {
        match self.client.get().and_then(|p| p.peer_info()) {
            Some(info) => (*info).clone(),
            None => ClientConfig::new(ClientCapabilities::default(), Implementation::from_build_env()),
        }
    }

    /// The session with server `server`, opened now if it has none, and
    /// how far what its server told has been passed on.
    async fn peer(self: &Arc<Self>, server: usize) -> Result<(Peer<RoleClient>, Arc<NoticeOrder>), Failure> {
        let mut slot = self.conns[server].lock().await;
        if let Some(c) = slot
            .as_ref()
            .filter(|c| !c.running.is_closed() && !c.running.is_transport_closed())
        {
            return Ok((c.running.peer().clone(), c.order.clone()));
        }
        let relay = Relay::new(Arc::downgrade(self), server, self.client_info());
        // Boxed: opening is rare and its future large; every send would
        // carry (and move) it otherwise.
        let (running, told) = Box::pin(self.upstreams.open(server, relay, self.limits.notes))
            .await
            .map_err(|e| Failure::Open(e.to_string()))?;
        tokio::spawn(pass_on(Arc::downgrade(self), server, told.order.clone(), told.queue));
        // What the server asks on its general stream is lost until it is up.
        if let Some(mut up) = told.up {
            let _ = tokio::time::timeout(NOTE_WAIT, up.wait_for(|&up| up)).await;
        }
        let conn = Conn {
            running,
            order: told.order,
        };
        let out = (conn.running.peer().clone(), conn.order.clone());
        *slot = Some(conn);
        Ok(out)
    }

    /// The peers of the sessions opened so far.
    pub async fn opened(&self) -> Vec<Peer<RoleClient>> {
        let mut out = Vec::new();
        for c in &self.conns {
            if let Some(c) = c.lock().await.as_ref() {
                out.push(c.running.peer().clone());
            }
        }
        out
    }

    /// Sends the request `request` makes to server `server` for `call`:
    /// the server's answer, or why none came. Withdrawn by the client, or
    /// dropped (its time ran out), it is withdrawn from the server too.
    /// (Made again only where the session ended before it left, so a
    /// request is not copied on every send to keep it for that.)
    pub async fn send(
        self: &Arc<Self>,
        server: usize,
        request: impl Fn() -> ClientRequest,
        call: &Arc<Call>,
    ) -> Result<ServerResult, Failure> {
        *call.aside.lock() = Aside::current();
        // Noted as in flight before anything its server sends is looked up.
        let sending = self.sending[server].lock().await;
        let (mut peer, mut order) = self.peer(server).await?;
        let handle = match peer
            .send_request_with_option(request(), PeerRequestOptions::no_options())
            .await
        {
            // The session ended before the request left: a new one takes it.
            Err(ServiceError::TransportClosed) => {
                *self.conns[server].lock().await = None;
                (peer, order) = self.peer(server).await?;
                peer.send_request_with_option(request(), PeerRequestOptions::no_options())
                    .await
            }
            sent => sent,
        }
        .map_err(Failure::Service)?;
        let mut flight = InFlight {
            link: self,
            peer: peer.clone(),
            key: (server, handle.id.clone()),
            token: handle.progress_token.clone(),
            done: false,
        };
        self.calls.lock().insert(flight.key.clone(), call.clone());
        if let Some(t) = &call.progress {
            self.tokens.lock().insert((server, flight.token.clone()), t.clone());
        }
        drop(sending);
        let r = tokio::select! {
            r = handle.await_response() => r,
            () = call.ct.cancelled() => Err(ServiceError::Cancelled {
                reason: Some("the client cancelled its request".into()),
            }),
        };
        flight.done = !matches!(r, Err(ServiceError::Cancelled { .. }));
        // What the server told before it answered reaches the client first.
        order.settled(&flight.key.1, NOTE_WAIT).await;
        r.map_err(Failure::Service)
    }

    /// Until what is being sent to server `server` is noted as in flight
    /// (a server may answer a request before its sender has noted it).
    async fn noted(&self, server: usize) {
        drop(self.sending[server].lock().await);
    }

    /// The client's request that server `server`'s request arriving from
    /// `origin` was caused by: the one on whose stream it came, else the
    /// only one in flight to that server.
    async fn caller(&self, server: usize, origin: Option<&InboundStreamOrigin>) -> Option<Arc<Call>> {
        self.noted(server).await;
        let calls = self.calls.lock();
        if let Some(InboundStreamOrigin::OutboundRequest(id)) = origin {
            return calls.get(&(server, id.clone())).cloned();
        }
        let mut of = calls.iter().filter(|((s, _), _)| *s == server);
        match (of.next(), of.next()) {
            (Some((_, c)), None) => Some(c.clone()),
            _ => None,
        }
    }

    /// Asks the client what server `server` asks (`request`), and gives
    /// the server its answer: waiting on the client is not the tool's
    /// time; past the server's input timeout the server is told no answer
    /// came. Withdrawn by the server (`ct`), it is withdrawn from the
    /// client too.
    pub(super) async fn ask(
        &self,
        server: usize,
        mut request: ServerRequest,
        ct: CancellationToken,
    ) -> Result<ClientResult, ErrorData> {
        use rmcp::model::GetExtensions;
        let Some(client) = self.client.get().cloned() else {
            return Err(ErrorData::internal_error(
                "the client's session has no stream yet",
                None,
            ));
        };
        let Ok(slot) = self.pending.clone().try_acquire_owned() else {
            return Err(ErrorData::internal_error(
                format!(
                    "the client has {} requests of its servers unanswered, the most fusebox holds; ask again once it answers",
                    self.limits.pending
                ),
                None,
            ));
        };
        let origin = request.extensions().get::<InboundStreamOrigin>().cloned();
        let call = self.caller(server, origin.as_ref()).await;
        let waiting = call.as_ref().and_then(|c| c.aside.lock().clone()).map(|a| a.begin());
        *request.extensions_mut() = Default::default();
        if let Some(c) = &call {
            request.extensions_mut().insert(OriginatingRequestId(c.id.clone()));
        }
        let bound = self.upstreams.input_timeout(server);
        // On a task of its own: the stream it rides is the one named
        // above, not that of the server's request being handled here.
        let asked = tokio::spawn(async move {
            let handle = client
                .send_request_with_option(request, PeerRequestOptions::with_timeout(bound))
                .await?;
            let id = handle.id.clone();
            tokio::select! {
                r = handle.await_response() => r,
                () = ct.cancelled() => {
                    let why = "the server withdrew its request".to_string();
                    let _ = client.notify_cancelled(CancelledNotificationParam::new(Some(id), Some(why.clone()))).await;
                    Err(ServiceError::Cancelled { reason: Some(why) })
                }
            }
        })
        .await;
        drop((waiting, slot));
        match asked {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(ServiceError::McpError(e))) => Err(e),
            Ok(Err(ServiceError::Timeout { .. })) => Err(ErrorData::internal_error(
                format!("the client did not answer within {} s", bound.as_secs()),
                None,
            )),
            Ok(Err(e)) => Err(ErrorData::internal_error(
                format!("the client could not be asked: {e}"),
                None,
            )),
            Err(e) => Err(ErrorData::internal_error(
                format!("asking the client failed: {e}"),
                None,
            )),
        }
    }

    /// Tells the client what server `server` tells (`note`): progress
    /// under the client's token (dropped where it names no request of
    /// this client's), the rest as it is; dropped, and logged, where the
    /// client does not take it within [`NOTE_WAIT`].
    async fn tell(&self, server: usize, note: ServerNotification) {
        let Some(client) = self.client.get().cloned() else {
            return;
        };
        let note = match note {
            ServerNotification::ProgressNotification(mut p) => {
                self.noted(server).await;
                let key = (server, p.params.progress_token.clone());
                let Some(token) = self.tokens.lock().get(&key).cloned() else {
                    return;
                };
                p.params.progress_token = token;
                ServerNotification::ProgressNotification(p)
            }
            // A request the server withdraws is withdrawn by its wait (`ask`).
            ServerNotification::CancelledNotification(_) => return,
            other => other,
        };
        if tokio::time::timeout(NOTE_WAIT, client.send_notification(note))
            .await
            .is_err()
        {
            tracing::warn!(server = %self.upstreams.name(server), "an MCP client took too long to take a notification: dropped");
        }
    }

    /// Counts a subscription to `uri` on server `server`: `Err` past the bound.
    pub fn subscribe(&self, server: usize, uri: &str) -> Result<(), ErrorData> {
        let mut subs = self.subscriptions.lock();
        if subs.len() >= self.limits.subscriptions && !subs.contains(&(server, uri.to_string())) {
            return Err(ErrorData::invalid_request(
                format!(
                    "this session holds {} resource subscriptions, the most fusebox keeps for one session; unsubscribe from one first",
                    self.limits.subscriptions
                ),
                None,
            ));
        }
        subs.insert((server, uri.to_string()));
        Ok(())
    }

    /// Forgets a subscription to `uri` on server `server`.
    pub fn unsubscribe(&self, server: usize, uri: &str) {
        self.subscriptions.lock().remove(&(server, uri.to_string()));
    }
}

/// A session with a server.
struct Conn {
    running: RunningService<RoleClient, Relay>,
    order: Arc<NoticeOrder>,
}

/// Passes what server `server` tells on to the client of `link`, one at a
/// time in the order sent, until the session ends or the link is gone.
async fn pass_on(
    link: Weak<Link>,
    server: usize,
    order: Arc<NoticeOrder>,
    mut queue: mpsc::Receiver<ServerNotification>,
) {
    while let Some(note) = queue.recv().await {
        if let Some(link) = link.upgrade() {
            link.tell(server, note).await;
        }
        order.passed_one();
    }
}

/// A request in flight to a server: forgotten when it ends, and withdrawn
/// from the server where it ends unanswered.
struct InFlight<'a> {
    link: &'a Link,
    peer: Peer<RoleClient>,
    key: (usize, RequestId),
    token: ProgressToken,
    done: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.link.calls.lock().remove(&self.key);
        self.link.tokens.lock().remove(&(self.key.0, self.token.clone()));
        if !self.done {
            let (peer, id) = (self.peer.clone(), self.key.1.clone());
            tokio::spawn(async move {
                let why = "the caller withdrew it, or its time ran out".to_string();
                let _ = peer
                    .notify_cancelled(CancelledNotificationParam::new(Some(id), Some(why)))
                    .await;
            });
        }
    }
}

/// What `Weak<Link>` the relays hold.
pub(super) type LinkRef = Weak<Link>;
