//! fusebox: a resilience runner for LLM agents (circuit breakers, token-aware
//! rate limiting, bulkheads, budgets, retries, graceful degradation and
//! multi-provider fallback) with a mock fleet, a headless demo and benchmarks.

#![warn(missing_docs)]

pub mod bench;
pub mod clock;
pub mod config;
pub mod provider;
pub mod resilience;
pub mod runner;
pub mod telemetry;
pub mod tools;
pub mod traffic;
