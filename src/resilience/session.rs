//! Per-session quotas (the seeds' per-session sandbox): concurrent requests,
//! LLM steps, tokens and a deadline. Idle sessions are evicted.

use super::evict;
use crate::config::SessionConfig;
use compact_str::CompactString;
use parking_lot::Mutex;
use std::sync::Arc;

/// A session quota that was hit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuotaExceeded {
    /// Too many requests of this session in flight.
    #[error("session {0}: {1} concurrent requests already running (max {1})")]
    Concurrency(String, u32),
    /// The session used all its LLM steps.
    #[error("session {0}: step quota of {1} used up")]
    Steps(String, u32),
    /// The session used all its tokens.
    #[error("session {0}: token quota of {1} used up")]
    Tokens(String, u64),
    /// The session outlived its deadline.
    #[error("session {0}: deadline of {1}s passed")]
    Deadline(String, u64),
}

#[derive(Default)]
struct SessionState {
    in_flight: u32,
    steps: u32,
    tokens: u64,
    started_ms: u64,
    last_seen_ms: u64,
}

/// A session's state, shared by the map and the requests in it.
type Shared = Arc<Mutex<SessionState>>;

/// All sessions' quotas.
pub struct Sessions {
    cfg: SessionConfig,
    map: evict::KeyMap<Shared>,
}

/// One request's stay in its session, from [`Sessions::enter`] to
/// [`InSession::leave`]: its steps and tokens are counted through it without
/// looking the session up again. Dropped without `leave` (a cancelled
/// request), it still frees its concurrency slot.
#[must_use = "the session's slot is freed when this is dropped"]
pub struct InSession {
    name: CompactString,
    state: Shared,
}

impl InSession {
    /// Ends the request's stay at `now_ms`.
    pub fn leave(self, now_ms: u64) {
        self.state.lock().last_seen_ms = now_ms;
    }
}

impl Drop for InSession {
    fn drop(&mut self) {
        let mut s = self.state.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
    }
}

impl Sessions {
    /// Quotas with the given limits.
    pub fn new(cfg: SessionConfig) -> Self {
        Self {
            cfg,
            map: evict::key_map(),
        }
    }

    /// Admits one request of `session`.
    pub fn enter(&self, session: &str, now_ms: u64) -> Result<InSession, QuotaExceeded> {
        let (name, state) = match self.map.get(session) {
            Some(e) => (e.key().clone(), e.value().clone()),
            None => {
                evict::make_room(&self.map, self.cfg.max_tracked, now_ms, self.cfg.idle_evict_s * 1000);
                let e = self.map.entry(session.into()).or_insert_with(|| {
                    Arc::new(Mutex::new(SessionState {
                        started_ms: now_ms,
                        ..SessionState::default()
                    }))
                });
                (e.key().clone(), e.value().clone())
            }
        };
        let mut s = state.lock();
        s.last_seen_ms = now_ms;
        let c = &self.cfg;
        if c.deadline_s > 0 && now_ms.saturating_sub(s.started_ms) > c.deadline_s * 1000 {
            return Err(QuotaExceeded::Deadline(session.into(), c.deadline_s));
        }
        if s.in_flight >= c.max_concurrent {
            return Err(QuotaExceeded::Concurrency(session.into(), c.max_concurrent));
        }
        s.in_flight += 1;
        drop(s);
        Ok(InSession { name, state })
    }

    /// Takes one LLM step of the session's quota.
    pub fn step(&self, at: &InSession) -> Result<(), QuotaExceeded> {
        let c = &self.cfg;
        let mut s = at.state.lock();
        if s.steps >= c.max_steps {
            return Err(QuotaExceeded::Steps(at.name.to_string(), c.max_steps));
        }
        if s.tokens >= c.max_tokens {
            return Err(QuotaExceeded::Tokens(at.name.to_string(), c.max_tokens));
        }
        s.steps += 1;
        Ok(())
    }

    /// Adds tokens used by the session.
    pub fn add_tokens(&self, at: &InSession, tokens: u64) {
        at.state.lock().tokens += tokens;
    }

    /// Forgets sessions idle for `idle_evict_s` with nothing in flight.
    pub fn evict_idle(&self, now_ms: u64) {
        evict::evict_idle(&self.map, now_ms, self.cfg.idle_evict_s * 1000);
    }

    /// Sessions currently tracked.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no session is tracked.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl evict::Idle for Shared {
    fn busy(&self) -> bool {
        self.lock().in_flight > 0
    }
    fn last_seen_ms(&self) -> u64 {
        self.lock().last_seen_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_hold() {
        let s = Sessions::new(SessionConfig {
            max_concurrent: 1,
            max_steps: 2,
            max_tokens: 100,
            deadline_s: 10,
            idle_evict_s: 1,
            max_tracked: 100,
        });
        let a = s.enter("a", 0).unwrap();
        assert!(matches!(s.enter("a", 0), Err(QuotaExceeded::Concurrency(..))));
        s.step(&a).unwrap();
        s.step(&a).unwrap();
        assert!(matches!(s.step(&a), Err(QuotaExceeded::Steps(..))));
        a.leave(5);
        assert!(matches!(s.enter("a", 20_000), Err(QuotaExceeded::Deadline(..))));
        s.evict_idle(40_000);
        assert!(s.is_empty());
    }

    #[test]
    fn a_request_dropped_mid_session_frees_its_slot() {
        let s = Sessions::new(SessionConfig {
            max_concurrent: 1,
            ..SessionConfig::default()
        });
        let a = s.enter("a", 0).unwrap();
        assert!(matches!(s.enter("a", 0), Err(QuotaExceeded::Concurrency(..))));
        drop(a);
        s.enter("a", 1).unwrap().leave(1);
    }

    #[test]
    fn tracked_sessions_stay_bounded() {
        let s = Sessions::new(SessionConfig {
            max_tracked: 1_000,
            ..SessionConfig::default()
        });
        for i in 0..50_000u64 {
            let name = format!("s{i}");
            s.enter(&name, i).unwrap().leave(i);
        }
        assert!(s.len() <= 1_000, "{}", s.len());
    }
}
