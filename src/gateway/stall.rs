//! A streamed call whose client stopped reading. The call runs only when
//! the client's connection asks for more (`stream.rs`), so a client that
//! keeps its connection open and reads nothing would hold the call (its
//! upstream stream, its limiter slot, its reservations) for as long as it
//! likes. The call is polled here with a waker that notes when it was
//! woken with work to do; woken and not run again for
//! [`CLIENT_STALL`](crate::limits::CLIENT_STALL), the client is taken to
//! have gone: the call is dropped, ending failed as for a client that left.

use futures_util::task::AtomicWaker;
use parking_lot::Mutex;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Wake, Waker};
use tokio::time::Instant;

/// The call, boxed.
pub(super) type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A streamed call and what its watchdog sees of it.
pub(super) struct Running {
    call: Mutex<Option<Call>>,
    /// When the call was woken with work to do and has not run since.
    woken: Mutex<Option<Instant>>,
    /// The connection's task, woken in turn.
    outer: AtomicWaker,
}

impl Wake for Running {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.lock().get_or_insert_with(Instant::now);
        self.outer.wake();
    }
}

impl Running {
    /// The call, to be run as the connection asks and watched for a
    /// client that stopped asking; stalls are counted in `stalled`.
    pub(super) fn watched(call: Call, stalled: Arc<AtomicU64>) -> Arc<Self> {
        let running = Arc::new(Self {
            call: Mutex::new(Some(call)),
            woken: Mutex::new(None),
            outer: AtomicWaker::new(),
        });
        tokio::spawn(watch(Arc::downgrade(&running), stalled));
        running
    }

    /// Runs the call on (the connection asked for more); `true` once it
    /// has ended (or was dropped).
    pub(super) fn poll(self: &Arc<Self>, cx: &mut Context<'_>) -> bool {
        self.outer.register(cx.waker());
        *self.woken.lock() = None;
        let mut call = self.call.lock();
        if let Some(c) = call.as_mut() {
            let waker = Waker::from(self.clone());
            if c.as_mut().poll(&mut Context::from_waker(&waker)).is_ready() {
                *call = None;
            }
        }
        call.is_none()
    }
}

impl Running {
    /// Drops the call (its stream went away).
    pub(super) fn end(&self) {
        let call = self.call.lock().take();
        drop(call);
    }
}

/// Drops the call when it has waited [`CLIENT_STALL`] to run; returns once
/// the call has ended or the stream has gone.
async fn watch(running: Weak<Running>, stalled: Arc<AtomicU64>) {
    use crate::limits::CLIENT_STALL;
    loop {
        tokio::time::sleep(CLIENT_STALL / 4).await;
        let Some(r) = running.upgrade() else { return };
        if r.call.lock().is_none() {
            return;
        }
        if r.woken.lock().is_some_and(|t| t.elapsed() >= CLIENT_STALL) {
            let call = r.call.lock().take();
            if call.is_some() {
                stalled.fetch_add(1, Ordering::Relaxed);
                tracing::info!("a client read none of its stream for {CLIENT_STALL:?}: its call is dropped");
            }
            drop(call);
            r.outer.wake();
            return;
        }
    }
}
