//! How a gateway closes without losing a request: it stops taking new ones
//! (the listener closes, `/readyz` says so), lets those in flight finish
//! for up to a drain time, then ends the rest with an error in the
//! client's API. Every request still ends in exactly one outcome, which
//! the recorder has written before the process exits.

use crate::runner::Runner;
use std::sync::atomic::Ordering;
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
pub struct Watch(watch::Receiver<Phase>);

impl Watch {
    /// The phase now.
    pub fn phase(&self) -> Phase {
        *self.0.borrow()
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
        (Self { tx, runner }, Watch(rx))
    }

    /// Stops taking requests, waits up to `drain` for those in flight
    /// (saying, through `left`, how many remain as they end), then ends the
    /// rest with an error and waits for their outcomes.
    pub async fn close(self, drain: Duration, mut left: impl FnMut(u64)) -> Closed {
        let r = &self.runner;
        let in_flight = r.in_flight();
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

/// The message a request cut by the close ends with.
pub const CUT: &str = "the gateway is shutting down and this request did not finish within its drain time; send it again (to another instance)";

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_gateway_whose_closer_is_gone_never_closes() {
        let (tx, rx) = watch::channel(Phase::Open);
        let w = Watch(rx);
        drop(tx);
        let ended = tokio::time::timeout(Duration::from_millis(20), w.draining()).await;
        assert!(ended.is_err(), "still open");
    }
}
