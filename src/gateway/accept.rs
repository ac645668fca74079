//! The gateway's accept loop: HTTP/1.1 connections, at most a configured
//! number at once (more are closed as they arrive, and said so in the log,
//! rather than exhausting the file descriptors), each closed when its
//! client takes longer than the header timeout to send a request's headers
//! — which also closes keep-alive connections left idle that long.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How many connections and how long a header may take.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    /// Open connections at most; more are closed at accept.
    pub max_connections: usize,
    /// The longest a client may take to send a request's headers, and the
    /// longest a keep-alive connection may stay idle.
    pub header_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_connections: 4_096,
            header_timeout: Duration::from_secs(30),
        }
    }
}

/// Open connections, for `/metrics` and the tests.
#[derive(Debug, Default)]
pub struct ConnCounts {
    /// Open now.
    pub open: AtomicU64,
    /// Closed at accept because `max_connections` were open.
    pub refused: AtomicU64,
}

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
pub async fn serve(
    listener: TcpListener,
    app: Router,
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
        .keep_alive(true);
    let mut warned_at: Option<std::time::Instant> = None;
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
                // wait a little rather than spin.
                tracing::warn!(error = %e, "gateway: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            let n = counts.refused.fetch_add(1, Ordering::Relaxed) + 1;
            if warned_at.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                warned_at = Some(std::time::Instant::now());
                tracing::warn!(
                    max_connections = limits.max_connections,
                    refused = n,
                    "gateway: connection refused at accept, the most connections are open"
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
        let conn = graceful.watch(http.serve_connection(TokioIo::new(tcp), TowerToHyperService::new(app.clone())));
        let counts = counts.clone();
        counts.open.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "gateway connection ended");
            }
            counts.open.fetch_sub(1, Ordering::Relaxed);
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
