//! The gateway's open connections as the accept loop sees them: each is
//! either waiting on its client (idle between requests, or its request's
//! head or body still arriving) or busy with a request the gateway is
//! answering. When every slot is taken, a new connection takes the slot of
//! the one that has waited on its client longest, so a client that holds
//! connections open without finishing a request (a byte of body every
//! 20 s) costs no one else their turn. A request's body must also arrive
//! whole within the body timeout ([`Arrival`]).

use ahash::AHashMap as HashMap;
use axum::body::Body;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use parking_lot::Mutex;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

/// One open connection.
pub(super) struct Conn {
    /// Since when (ms after the table's start, plus one) it has waited on
    /// its client; 0 while busy.
    waiting: AtomicU64,
    /// Told when its slot is given to a newer connection.
    pub(super) evicted: Notify,
    base: Instant,
}

impl Conn {
    /// It is answering a request: its client owes it nothing now.
    pub(super) fn busy(&self) {
        self.waiting.store(0, Ordering::Relaxed);
    }

    /// It waits on its client again (its answer went out), from now.
    pub(super) fn waits(&self) {
        let ms = Instant::now().saturating_duration_since(self.base).as_millis() as u64;
        self.waiting.store(ms + 1, Ordering::Relaxed);
    }
}

/// The open connections.
pub(super) struct Conns {
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next: AtomicU64,
    base: Instant,
}

impl Default for Conns {
    fn default() -> Self {
        Self {
            open: Mutex::default(),
            next: AtomicU64::new(0),
            base: Instant::now(),
        }
    }
}

impl Conns {
    /// A new connection, waiting on its client from now; its id.
    pub(super) fn open(&self) -> (u64, Arc<Conn>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            waiting: AtomicU64::new(0),
            evicted: Notify::new(),
            base: self.base,
        });
        conn.waits();
        self.open.lock().insert(id, conn.clone());
        (id, conn)
    }

    /// Connection `id` closed.
    pub(super) fn close(&self, id: u64) {
        self.open.lock().remove(&id);
    }

    /// Tells the connection that has waited on its client longest to
    /// close, and forgets it; false when every connection is busy.
    pub(super) fn evict_longest_waiting(&self) -> bool {
        let mut open = self.open.lock();
        let oldest = open
            .iter()
            .filter_map(|(id, c)| match c.waiting.load(Ordering::Relaxed) {
                0 => None,
                since => Some((since, *id)),
            })
            .min();
        let Some((_, id)) = oldest else { return false };
        if let Some(c) = open.remove(&id) {
            c.evicted.notify_one();
        }
        true
    }
}

/// A request's body did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub(super) struct BodyTimeout(pub Duration);

/// A request's body as it arrives: its connection is busy once it has
/// come whole, and it fails with [`BodyTimeout`] when it has not come
/// within its time.
pub(super) struct Arrival<B> {
    inner: B,
    conn: Arc<Conn>,
    limit: Duration,
    /// When its headers came.
    start: tokio::time::Instant,
    /// Its timer, set the first time it waits (a body already read whole
    /// needs none).
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<B> Arrival<B> {
    pub(super) fn new(inner: B, conn: Arc<Conn>, limit: Duration) -> Self {
        Self {
            inner,
            conn,
            limit,
            start: tokio::time::Instant::now(),
            deadline: None,
        }
    }
}

impl<B> http_body::Body for Arrival<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let me = &mut *self;
        match Pin::new(&mut me.inner).poll_frame(cx) {
            Poll::Ready(None) => {
                me.conn.busy();
                Poll::Ready(None)
            }
            Poll::Ready(Some(Ok(frame))) => {
                if me.inner.is_end_stream() {
                    me.conn.busy();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Pending => match me
                .deadline
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(me.start + me.limit)))
                .as_mut()
                .poll(cx)
            {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout(me.limit))))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// An answer's body: once it has gone out (or is dropped), its connection
/// waits on its client for the next request.
pub(super) struct Answered {
    inner: Body,
    conn: Option<Arc<Conn>>,
}

impl Answered {
    pub(super) fn new(inner: Body, conn: Arc<Conn>) -> Self {
        Self {
            inner,
            conn: Some(conn),
        }
    }

    fn done(&mut self) {
        if let Some(c) = self.conn.take() {
            c.waits();
        }
    }
}

impl Drop for Answered {
    fn drop(&mut self) {
        self.done();
    }
}

impl http_body::Body for Answered {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            self.done();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_connection_waiting_longest_on_its_client_is_evicted_and_never_a_busy_one() {
        let conns = Conns::default();
        let (_, a) = conns.open();
        tokio::time::advance(Duration::from_secs(1)).await;
        let (_, b) = conns.open();
        tokio::time::advance(Duration::from_secs(1)).await;
        let (_, c) = conns.open();
        a.busy();
        assert!(conns.evict_longest_waiting());
        // b waited longer than c; a is busy.
        assert!(tokio::time::timeout(Duration::ZERO, b.evicted.notified()).await.is_ok());
        c.busy();
        assert!(!conns.evict_longest_waiting(), "every connection left is busy");
        a.waits();
        assert!(conns.evict_longest_waiting());
        assert!(tokio::time::timeout(Duration::ZERO, a.evicted.notified()).await.is_ok());
    }
}
