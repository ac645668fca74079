//! The resilience components, each usable on its own: breaker, limiter,
//! budgets, session quotas, bulkheads, retries, cache and the defer spool.

pub mod breaker;
pub mod budget;
pub mod bulkhead;
pub mod cache;
pub mod defer;
pub mod evict;
pub mod limiter;
pub mod retry;
pub mod session;
