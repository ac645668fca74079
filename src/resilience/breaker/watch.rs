//! Telling breakers, while a call still runs, that it has outlasted their
//! slow-call bound.

use super::{Breaker, Permit};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// Runs `call`, made under `permits` of their breakers, telling each
/// breaker whose slow-call bound the call outlasts that it is overdue the
/// moment it does ([`Breaker::overdue`]): a target that turned slow trips
/// on the calls in flight, not seconds later when they end. No timer is
/// armed for a bound that `within` (the call's own timeout) ends first,
/// and none is told once `judged` says the call's pace is no longer its
/// length (a stream whose first token came is judged by its rate: how
/// long it runs is what its caller asked for).
pub async fn watched<F: std::future::Future>(
    permits: &mut [(&Breaker, &mut Permit)],
    start: Instant,
    within: Duration,
    judged: impl Fn() -> bool,
    call: F,
) -> F::Output {
    let mut marks: smallvec::SmallVec<[(Instant, usize); 2]> = permits
        .iter()
        .enumerate()
        .filter_map(|(i, (b, _))| {
            let bound = Duration::from_millis(b.slow_ms.load(Ordering::Relaxed));
            // Slow is longer than the bound: still running 1 ms past it.
            (!bound.is_zero() && bound < within).then(|| (start + bound + Duration::from_millis(1), i))
        })
        .collect();
    if marks.is_empty() {
        return call.await;
    }
    marks.sort_unstable();
    tokio::pin!(call);
    for (at, i) in marks {
        let sleep = tokio::time::sleep_until(at);
        tokio::pin!(sleep);
        // The call first; its timer only while the call's length is still
        // its pace (once `judged` holds it holds for good: the timer is
        // dropped, not polled at each piece of a stream).
        let next = std::future::poll_fn(|cx| {
            if let std::task::Poll::Ready(out) = call.as_mut().poll(cx) {
                return std::task::Poll::Ready(Next::Done(out));
            }
            if judged() {
                return std::task::Poll::Ready(Next::Judged);
            }
            sleep.as_mut().poll(cx).map(|()| Next::Overdue)
        })
        .await;
        match next {
            Next::Done(out) => return out,
            Next::Judged => break,
            Next::Overdue => {
                let (b, p) = &mut permits[i];
                b.overdue(p, at);
            }
        }
    }
    call.await
}

/// What a watched call came to next.
enum Next<T> {
    /// It ended.
    Done(T),
    /// Its pace is judged otherwise from now on.
    Judged,
    /// It outlasted the next bound.
    Overdue,
}
