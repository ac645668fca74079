//! How a gateway closes without losing a request: it stops taking new ones
//! (the listener closes, `/readyz` says so), lets those in flight finish
//! for up to a drain time, then ends the rest with an error in the
//! client's API. Every request still ends in exactly one outcome, which
//! the recorder has written before the process exits.

use crate::runner::Runner;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Where a gateway is in closing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Taking requests.
    Open,
    /// Taking no new ones; those in flight run on.
    Draining,
    /// The drain time is over: those still in flight end now.
    Cut,
}

/// What the gateway's parts watch to know when to close.
#[derive(Clone)]
pub struct Watch(watch::Receiver<Phase>, Arc<AtomicBool>);

impl Watch {
    /// The phase now.
    pub fn phase(&self) -> Phase {
        *self.0.borrow()
    }

    /// `f`'s output, or `None` if requests in flight are to end first (then
    /// `f` is dropped: a request ends in its outcome as when its client
    /// goes). Polled at each step of `f`, the close is looked at only once
    /// the gateway has begun closing (or when the task polling changed),
    /// not registered for anew at each step.
    pub fn until_cut<F: std::future::Future>(
        &self,
        f: F,
    ) -> UntilCut<F, impl std::future::Future<Output = ()> + Send + 'static> {
        UntilCut {
            f,
            cut: self.cut(),
            closing: self.1.clone(),
            waker: None,
        }
    }

    /// Resolves once the gateway stops taking requests.
    pub fn draining(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.reaches(|p| p != Phase::Open)
    }

    /// Resolves once requests still in flight are to end.
    pub fn cut(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.reaches(|p| p == Phase::Cut)
    }

    /// Resolves once the phase is one `ok` takes; never, once no
    /// [`Closer`] is left to close the gateway.
    fn reaches(&self, ok: fn(Phase) -> bool) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.0.clone();
        async move {
            if rx.wait_for(|p| ok(*p)).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Closes a gateway ([`Closer::close`]).
pub struct Closer {
    tx: watch::Sender<Phase>,
    /// Set as the gateway starts closing (the phase leaves
    /// [`Phase::Open`]), for [`UntilCut`].
    closing: Arc<AtomicBool>,
    runner: Arc<Runner>,
}

/// How a close went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Closed {
    /// Requests in flight when it began.
    pub in_flight: u64,
    /// Of those, the ones ended at the drain time, before their answer.
    pub cut: u64,
}

/// How long requests cut at the drain time have to end in their outcome.
const CUT_GRACE: Duration = Duration::from_secs(5);
/// How often the requests in flight are counted while draining.
const EVERY: Duration = Duration::from_millis(10);

impl Closer {
    /// A closer of a gateway over `runner`, and what its parts watch.
    pub fn new(runner: Arc<Runner>) -> (Self, Watch) {
        let (tx, rx) = watch::channel(Phase::Open);
        let closing = Arc::new(AtomicBool::new(false));
        (
            Self {
                tx,
                closing: closing.clone(),
                runner,
            },
            Watch(rx, closing),
        )
    }

    /// Stops taking requests, waits up to `drain` for those in flight
    /// (saying, through `left`, how many remain as they end), then ends the
    /// rest with an error and waits for their outcomes.
    pub async fn close(self, drain: Duration, mut left: impl FnMut(u64)) -> Closed {
        let r = &self.runner;
        let in_flight = r.in_flight();
        // Before the phase: a request woken by a change of it sees the flag.
        self.closing.store(true, Ordering::Release);
        let _ = self.tx.send(Phase::Draining);
        let until = tokio::time::Instant::now() + drain;
        let mut said = u64::MAX;
        while r.in_flight() > 0 && tokio::time::Instant::now() < until {
            let n = r.in_flight();
            if n != said {
                left(n);
                said = n;
            }
            tokio::time::sleep(EVERY).await;
        }
        let cut = r.in_flight();
        if cut > 0 {
            r.totals().closing.store(true, Ordering::Relaxed);
            let _ = self.tx.send(Phase::Cut);
            let grace = tokio::time::Instant::now() + CUT_GRACE;
            while r.in_flight() > 0 && tokio::time::Instant::now() < grace {
                tokio::time::sleep(EVERY).await;
            }
        }
        left(0);
        Closed { in_flight, cut }
    }
}

pin_project_lite::pin_project! {
    /// [`Watch::until_cut`].
    pub struct UntilCut<F, C> {
        #[pin]
        f: F,
        #[pin]
        cut: C,
        // Whether the gateway has begun to close: from then on the close
        // is looked at each time (its phase may have changed).
        closing: Arc<AtomicBool>,
        // The waker the close was last registered with.
        waker: Option<std::task::Waker>,
    }
}

impl<F: std::future::Future, C: std::future::Future<Output = ()>> std::future::Future for UntilCut<F, C> {
    type Output = Option<F::Output>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let this = self.project();
        if let Poll::Ready(out) = this.f.poll(cx) {
            return Poll::Ready(Some(out));
        }
        let registered = this.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()));
        if registered && !this.closing.load(Ordering::Acquire) {
            return Poll::Pending;
        }
        if this.cut.poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        if !registered {
            *this.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// The message a request cut by the close ends with.
pub const CUT: &str = "the gateway is shutting down and this request did not finish within its drain time; send it again (to another instance)";

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_call_waiting_when_the_close_begins_is_cut_at_its_end_and_not_before() {
        let (tx, rx) = watch::channel(Phase::Open);
        let closing = Arc::new(AtomicBool::new(false));
        let w = Watch(rx, closing.clone());
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let waiting = tokio::spawn(w.until_cut(std::future::pending::<()>()));
        let finishing = tokio::spawn(w.until_cut(done_rx));
        tokio::time::sleep(Duration::from_millis(10)).await;
        // As `Closer::close` does it: the flag, then each phase.
        closing.store(true, Ordering::Release);
        tx.send(Phase::Draining).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!waiting.is_finished(), "draining does not cut");
        done_tx.send(()).unwrap();
        assert_eq!(
            finishing.await.unwrap(),
            Some(Ok(())),
            "a call that ends while draining ends as it did"
        );
        tx.send(Phase::Cut).unwrap();
        let cut = tokio::time::timeout(Duration::from_secs(1), waiting).await;
        assert_eq!(cut.expect("cut at once").unwrap(), None);
    }

    #[tokio::test]
    async fn a_gateway_whose_closer_is_gone_never_closes() {
        let (tx, rx) = watch::channel(Phase::Open);
        let w = Watch(rx, Arc::default());
        drop(tx);
        let ended = tokio::time::timeout(Duration::from_millis(20), w.draining()).await;
        assert!(ended.is_err(), "still open");
    }
}
