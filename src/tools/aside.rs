//! Time a tool call spends waiting on someone other than the tool: an MCP
//! server that asks the caller's person a question (elicitation) or the
//! caller's model for text (sampling) is not slow while it waits for the
//! answer. That time is set aside: the tool's timeout counts only its own
//! time and its breaker judges only its own pace. A wait has its own bound,
//! kept by whoever waits.

use crate::provider::ProviderError;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

tokio::task_local! {
    /// The waits of the tool call being made on this task (the runner's
    /// tool path sets it around each try).
    static ASIDE: Arc<Aside>;
}

/// The waits of one try of a tool call.
#[derive(Debug, Default)]
pub struct Aside {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Waits under way.
    open: u32,
    /// When the first of them began.
    since: Option<Instant>,
    /// Waits that ended, in all.
    done: Duration,
}

/// A wait under way: it ends when this is dropped.
pub struct Waiting(Arc<Aside>);

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut s = self.0.state.lock();
        s.open -= 1;
        if s.open == 0 {
            if let Some(since) = s.since.take() {
                s.done += Instant::now().saturating_duration_since(since);
            }
        }
    }
}

impl Aside {
    /// A wait begins now.
    pub fn begin(self: &Arc<Self>) -> Waiting {
        let mut s = self.state.lock();
        if s.open == 0 {
            s.since = Some(Instant::now());
        }
        s.open += 1;
        Waiting(self.clone())
    }

    /// Whether the call has waited on someone (or waits now).
    pub fn any(&self) -> bool {
        let s = self.state.lock();
        s.open > 0 || !s.done.is_zero()
    }

    /// Whether a wait is under way.
    pub fn waiting(&self) -> bool {
        self.state.lock().open > 0
    }

    /// Time spent waiting up to `now`.
    pub fn total(&self, now: Instant) -> Duration {
        let s = self.state.lock();
        s.done + s.since.map_or(Duration::ZERO, |t| now.saturating_duration_since(t))
    }

    /// Runs `call` with `self` as the waits of the call on this task.
    pub async fn scope<F: std::future::Future>(self: Arc<Self>, call: F) -> F::Output {
        ASIDE.scope(self, call).await
    }

    /// The waits of the tool call made on this task, if any.
    pub fn current() -> Option<Arc<Aside>> {
        ASIDE.try_with(Arc::clone).ok()
    }
}

/// `call` within `timeout` of its own time: time this task's call waits on
/// someone else does not count.
pub async fn within_own<T>(
    timeout: Duration,
    what: &str,
    call: impl std::future::Future<Output = Result<T, ProviderError>>,
) -> Result<T, ProviderError> {
    let Some(aside) = Aside::current() else {
        return crate::provider::within(timeout, what, call).await;
    };
    let start = Instant::now();
    let mut call = std::pin::pin!(call);
    // A call that answers at once needs no timer.
    if let std::task::Poll::Ready(r) = std::future::poll_fn(|cx| std::task::Poll::Ready(call.as_mut().poll(cx))).await {
        return r;
    }
    let mut deadline = start + timeout;
    loop {
        tokio::select! {
            biased;
            r = &mut call => return r,
            () = tokio::time::sleep_until(deadline) => {
                let now = Instant::now();
                let own = now.saturating_duration_since(start).saturating_sub(aside.total(now));
                if own >= timeout {
                    return Err(ProviderError::timed_out(what));
                }
                deadline = now + (timeout - own);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn time_waiting_on_a_person_is_not_the_call_s() {
        let aside = Arc::new(Aside::default());
        let a = aside.clone();
        // 2 s of its own, 60 s waiting, 2 s of its own: within a 5 s timeout.
        let call = async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let w = a.begin();
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(w);
            tokio::time::sleep(Duration::from_secs(2)).await;
            Ok::<_, ProviderError>(7)
        };
        let r = aside
            .clone()
            .scope(within_own(Duration::from_secs(5), "tool call", call))
            .await;
        assert_eq!(r.unwrap(), 7);
        assert_eq!(aside.total(Instant::now()), Duration::from_secs(60));
        assert!(aside.any() && !aside.waiting());
    }

    #[tokio::test(start_paused = true)]
    async fn its_own_time_still_times_out() {
        let aside = Arc::new(Aside::default());
        let a = aside.clone();
        let t0 = Instant::now();
        let call = async move {
            let w = a.begin();
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(w);
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, ProviderError>(())
        };
        let r = aside.scope(within_own(Duration::from_secs(5), "tool call", call)).await;
        assert!(r.is_err());
        assert_eq!(
            Instant::now() - t0,
            Duration::from_secs(35),
            "5 s of its own after 30 s aside"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn without_waits_it_is_a_plain_timeout() {
        let t0 = Instant::now();
        let r = within_own(Duration::from_secs(5), "tool call", async {
            tokio::time::sleep(Duration::from_secs(9)).await;
            Ok::<_, ProviderError>(())
        })
        .await;
        assert!(r.is_err());
        assert_eq!(Instant::now() - t0, Duration::from_secs(5));
    }
}
