//! The gateway's accept loop: HTTP/1.1 connections, at most a configured
//! number at once, each closed when its client takes longer than the
//! header timeout to send a request's headers — which also closes
//! keep-alive connections left idle that long — or than the body timeout
//! to send its body. With every slot taken, a new connection takes the
//! slot of the one that has waited on its client longest (`conns.rs`);
//! when all are busy answering, it is closed as it arrives, and said so
//! in the log, rather than exhausting the file descriptors.

use super::conns::{Answered, Arrival, Conn, Conns};
use crate::descriptors::Use;
use axum::body::Body;
use http_body::Body as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How many connections, and how long a request's head and body may take.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    /// Open connections at most.
    pub max_connections: usize,
    /// The longest a client may take to send a request's headers, and the
    /// longest a keep-alive connection may stay idle.
    pub header_timeout: Duration,
    /// The longest a client may take to send a request's body, from its
    /// headers on: 408 past it.
    pub body_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_connections: 4_096,
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// Open connections, for `/metrics` and the tests.
#[derive(Debug, Default)]
pub struct ConnCounts {
    /// Open now.
    pub open: AtomicU64,
    /// Closed at accept because `max_connections` were open and busy.
    pub refused: AtomicU64,
    /// Closed to give their slot to a new connection: they were waiting
    /// on their clients, longest of all.
    pub evicted: AtomicU64,
}

/// How long a new connection waits for the slot of the one it evicted.
const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// Connections the kernel holds ready for `accept` (capped by
/// `net.core.somaxconn`): a burst of new connections while the loop is
/// busy waits here rather than being dropped (and retried a second later).
const BACKLOG: u32 = 4_096;

/// Listens on the first address `addr` names.
pub async fn listen(addr: &str) -> std::io::Result<TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // As `TcpListener::bind` does: a restarted gateway can bind at once.
        socket.set_reuseaddr(true)?;
        match socket.bind(a).and_then(|()| socket.listen(BACKLOG)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address to listen on")))
}

/// Serves `app` on `listener` until `stop` resolves: then the listener is
/// closed, idle connections are closed, and each busy one closes once its
/// request is answered.
pub(super) async fn serve(
    listener: TcpListener,
    app: super::App,
    limits: ConnLimits,
    counts: Arc<ConnCounts>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_header_size(crate::limits::MAX_HEAD_BYTES)
        .max_buf_size(crate::limits::WRITE_BUFFER)
        .keep_alive(true);
    let fds = crate::descriptors::view();
    if fds.usable > 0 && limits.max_connections as u64 > fds.usable / 2 {
        tracing::warn!(
            max_connections = limits.max_connections,
            open_files = fds.limit,
            "gateway: the open-file limit leaves descriptors for {} connections with their upstream calls; more are closed at accept (raise `ulimit -n`)",
            fds.usable / 2
        );
    }
    let conns = Arc::new(Conns::default());
    let mut warned_at: Option<std::time::Instant> = None;
    let mut accept_warned: Option<std::time::Instant> = None;
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut stop => break,
            a = listener.accept() => a,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors (or another transient failure):
                // wait a little rather than spin, and say so once a second.
                if accept_warned.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    accept_warned = Some(std::time::Instant::now());
                    tracing::warn!(error = %e, "gateway: accept failed");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(room) = room(&slots, &conns, &counts).await else {
            let n = counts.refused.fetch_add(1, Ordering::Relaxed) + 1;
            if warned_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                warned_at = Some(std::time::Instant::now());
                let fds = crate::descriptors::view();
                tracing::warn!(
                    max_connections = limits.max_connections,
                    descriptors_in_use = fds.in_use,
                    descriptors_usable = fds.usable,
                    refused = n,
                    "gateway: connection refused at accept, the most connections (or descriptors) are busy"
                );
            }
            drop(tcp);
            continue;
        };
        // Stream chunks leave as they are written, not held back by Nagle's
        // algorithm until the client acknowledges the one before.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a client connection");
        }
        let (id, conn) = conns.open();
        let svc = ConnService {
            app: app.clone(),
            conn: conn.clone(),
            body_timeout: limits.body_timeout,
        };
        let served = graceful.watch(http.serve_connection(TokioIo::new(tcp), svc));
        let (counts, conns) = (counts.clone(), conns.clone());
        counts.open.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            tokio::select! {
                r = served => if let Err(e) = r {
                    tracing::debug!(error = %e, "gateway connection ended");
                },
                () = conn.evicted.notified() => {
                    tracing::debug!("gateway connection closed: its slot went to a new connection");
                }
            }
            conns.close(id);
            counts.open.fetch_sub(1, Ordering::Relaxed);
            drop(room);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// A slot for a new connection and a descriptor for its socket: free
/// ones, else those of the connection waiting longest on its client,
/// which is told to close; `None` when every connection is busy.
async fn room(
    slots: &Arc<Semaphore>,
    conns: &Conns,
    counts: &ConnCounts,
) -> Option<(tokio::sync::OwnedSemaphorePermit, crate::descriptors::Held)> {
    if let (Ok(slot), Some(fd)) = (
        slots.clone().try_acquire_owned(),
        crate::descriptors::take(Use::Connection),
    ) {
        return Some((slot, fd));
    }
    if !conns.evict_longest_waiting() {
        return None;
    }
    counts.evicted.fetch_add(1, Ordering::Relaxed);
    // The evicted connection gives both back as it closes.
    let slot = tokio::time::timeout(EVICTION_WAIT, slots.clone().acquire_owned())
        .await
        .ok()?
        .ok()?;
    let fd = crate::descriptors::take_within(Use::Connection, EVICTION_WAIT).await?;
    Some((slot, fd))
}

/// One connection's requests: each body watched as it arrives (in time,
/// and the connection busy once it has come), each answer's end noted.
#[derive(Clone)]
struct ConnService {
    app: super::App,
    conn: Arc<Conn>,
    body_timeout: Duration,
}

impl hyper::service::Service<http::Request<Incoming>> for ConnService {
    type Response = http::Response<Answered>;
    type Error = Infallible;
    type Future = Answering<<super::App as tower::Service<axum::extract::Request>>::Future>;

    fn call(&self, req: http::Request<Incoming>) -> Self::Future {
        let (parts, body) = req.into_parts();
        let body = if body.is_end_stream() {
            self.conn.busy();
            Body::new(body)
        } else {
            Body::new(Arrival::new(body, self.conn.clone(), self.body_timeout))
        };
        let mut app = self.app.clone();
        // A router is always ready: it is called without polling first.
        Answering {
            answer: tower::Service::call(&mut app, http::Request::from_parts(parts, body)),
            conn: self.conn.clone(),
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's answer on its way: its body, once it comes, tells the
    /// connection when it has gone out.
    pub(super) struct Answering<F> {
        #[pin]
        answer: F,
        conn: Arc<Conn>,
    }
}

impl<F> std::future::Future for Answering<F>
where
    F: std::future::Future<Output = Result<axum::response::Response, Infallible>>,
{
    type Output = Result<http::Response<Answered>, Infallible>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let this = self.project();
        let Ok(resp) = std::task::ready!(this.answer.poll(cx));
        std::task::Poll::Ready(Ok(resp.map(|b| Answered::new(b, this.conn.clone()))))
    }
}
