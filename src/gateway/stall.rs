//! Streamed calls whose client stopped reading. A call runs only when the
//! client's connection asks for more (`stream.rs`), so a client that keeps
//! its connection open and reads nothing would hold the call (its upstream
//! stream, its limiter slot, its reservations) for as long as it likes.
//! Each call is polled with a waker that notes when it was woken with work
//! to do; one sweeper a gateway looks at the running calls every quarter
//! of [`CLIENT_STALL`]: a call woken and not run again for that long has
//! lost its client, and is dropped, ending failed as for a client that left.

use crate::limits::CLIENT_STALL;
use futures_util::task::AtomicWaker;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Wake, Waker};
use tokio::time::Instant;

/// The call, boxed.
pub(super) type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The gateway's streamed calls still running, and the stalls found.
#[derive(Default)]
pub(super) struct Stalls {
    running: Mutex<HashMap<u64, Weak<Running>>>,
    next: AtomicU64,
    swept: AtomicBool,
    /// Calls dropped because their client stopped reading.
    pub(super) stalled: AtomicU64,
}

/// A streamed call and what the sweeper sees of it.
struct Running {
    call: Mutex<Option<Call>>,
    /// When the call was woken with work to do and has not run since.
    woken: Mutex<Option<Instant>>,
    /// The connection's task, woken in turn.
    outer: AtomicWaker,
}

/// A call being watched; dropped with the client's stream, it drops the
/// call (the wakers its upstream holds keep the shared state alive, not
/// the call) and leaves the watch.
pub(super) struct Watched {
    running: Arc<Running>,
    stalls: Arc<Stalls>,
    id: u64,
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

impl Stalls {
    /// `call`, to be run as the connection asks and watched for a client
    /// that stopped asking.
    pub(super) fn watch(self: &Arc<Self>, call: Call) -> Watched {
        if !self.swept.swap(true, Ordering::Relaxed) {
            tokio::spawn(sweep(Arc::downgrade(self)));
        }
        let running = Arc::new(Running {
            call: Mutex::new(Some(call)),
            woken: Mutex::new(None),
            outer: AtomicWaker::new(),
        });
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.running.lock().insert(id, Arc::downgrade(&running));
        Watched {
            running,
            stalls: self.clone(),
            id,
        }
    }

    /// Drops the calls that have waited [`CLIENT_STALL`] to run.
    fn drop_stalled(&self) {
        let stalled: Vec<Arc<Running>> = self
            .running
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .filter(|r| r.woken.lock().is_some_and(|t| t.elapsed() >= CLIENT_STALL))
            .collect();
        for r in stalled {
            let call = r.call.lock().take();
            if call.is_some() {
                self.stalled.fetch_add(1, Ordering::Relaxed);
                tracing::info!("a client read none of its stream for {CLIENT_STALL:?}: its call is dropped");
            }
            drop(call);
            r.outer.wake();
        }
    }
}

/// Looks for stalls every quarter of [`CLIENT_STALL`] while the gateway is.
async fn sweep(stalls: Weak<Stalls>) {
    loop {
        tokio::time::sleep(CLIENT_STALL / 4).await;
        match stalls.upgrade() {
            Some(s) => s.drop_stalled(),
            None => return,
        }
    }
}

impl Watched {
    /// Runs the call on (the connection asked for more); `true` once it
    /// has ended (or was dropped).
    pub(super) fn poll(&self, cx: &mut Context<'_>) -> bool {
        let r = &self.running;
        r.outer.register(cx.waker());
        *r.woken.lock() = None;
        let mut call = r.call.lock();
        if let Some(c) = call.as_mut() {
            let waker = Waker::from(r.clone());
            if c.as_mut().poll(&mut Context::from_waker(&waker)).is_ready() {
                *call = None;
            }
        }
        call.is_none()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.stalls.running.lock().remove(&self.id);
        let call = self.running.call.lock().take();
        drop(call);
    }
}
