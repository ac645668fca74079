//! The resilience components, each usable on its own: breaker, limiter,
//! budgets, session quotas, bulkheads, retries, cache and the defer spool.

pub mod breaker;
pub mod budget;
pub mod bulkhead;
pub mod cache;
pub mod defer;
pub mod evict;
pub mod limiter;
pub mod notice;
pub mod retry;
pub mod session;

/// Locks a mutex that guards a short critical section: spins briefly while
/// it is held (the holder needs nanoseconds) before falling back to
/// parking_lot's lock, which yields and parks, costing microseconds under
/// contention between cores.
#[inline]
pub(crate) fn lock<T>(m: &parking_lot::Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    for _ in 0..200 {
        if !m.is_locked() {
            if let Some(g) = m.try_lock() {
                return g;
            }
        }
        std::hint::spin_loop();
    }
    m.lock()
}
