//! Telling breakers, while a call still runs, that it has outlasted their
//! slow-call bound.

use super::{Breaker, Permit};
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
        tokio::select! {
            biased;
            out = &mut call => return out,
            () = tokio::time::sleep_until(at) => {
                if judged() {
                    break;
                }
                let (b, p) = &mut permits[i];
                b.overdue(p, at);
            }
        }
    }
    call.await
}
