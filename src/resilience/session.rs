//! Per-session quotas (the seeds' per-session sandbox): concurrent requests,
//! LLM steps, tokens and a deadline. Idle sessions are evicted.

use super::evict;
use crate::config::SessionConfig;

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

/// All sessions' quotas.
pub struct Sessions {
    cfg: SessionConfig,
    map: evict::KeyMap<SessionState>,
}

impl Sessions {
    /// Quotas with the given limits.
    pub fn new(cfg: SessionConfig) -> Self {
        Self {
            cfg,
            map: evict::key_map(),
        }
    }

    /// Admits one request of `session`; pair with [`Sessions::leave`].
    pub fn enter(&self, session: &str, now_ms: u64) -> Result<(), QuotaExceeded> {
        // One lookup finds or adds the session (most are new at a gateway);
        // room is made after adding, when no shard is held any more. The new
        // session is busy by then, so it stays.
        let mut added = false;
        let admitted = {
            let mut e = self.map.entry(session.into()).or_insert_with(|| {
                added = true;
                SessionState {
                    started_ms: now_ms,
                    ..SessionState::default()
                }
            });
            self.admit(session, e.value_mut(), now_ms)
        };
        if added && self.map.len() > self.cfg.max_tracked {
            evict::make_room(&self.map, self.cfg.max_tracked, now_ms, self.cfg.idle_evict_s * 1000);
        }
        admitted
    }

    fn admit(&self, session: &str, s: &mut SessionState, now_ms: u64) -> Result<(), QuotaExceeded> {
        s.last_seen_ms = now_ms;
        let c = &self.cfg;
        if c.deadline_s > 0 && now_ms.saturating_sub(s.started_ms) > c.deadline_s * 1000 {
            return Err(QuotaExceeded::Deadline(session.into(), c.deadline_s));
        }
        if s.in_flight >= c.max_concurrent {
            return Err(QuotaExceeded::Concurrency(session.into(), c.max_concurrent));
        }
        s.in_flight += 1;
        Ok(())
    }

    /// Takes one LLM step of the session's quota.
    pub fn step(&self, session: &str) -> Result<(), QuotaExceeded> {
        let c = &self.cfg;
        match self.map.get_mut(session) {
            Some(mut e) => {
                let s = e.value_mut();
                if s.steps >= c.max_steps {
                    return Err(QuotaExceeded::Steps(session.into(), c.max_steps));
                }
                if s.tokens >= c.max_tokens {
                    return Err(QuotaExceeded::Tokens(session.into(), c.max_tokens));
                }
                s.steps += 1;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Adds tokens used by the session.
    pub fn add_tokens(&self, session: &str, tokens: u64) {
        if let Some(mut e) = self.map.get_mut(session) {
            e.value_mut().tokens += tokens;
        }
    }

    /// Ends one request of the session.
    pub fn leave(&self, session: &str, now_ms: u64) {
        if let Some(mut e) = self.map.get_mut(session) {
            let s = e.value_mut();
            s.in_flight = s.in_flight.saturating_sub(1);
            s.last_seen_ms = now_ms;
        }
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

impl evict::Idle for SessionState {
    fn busy(&self) -> bool {
        self.in_flight > 0
    }
    fn last_seen_ms(&self) -> u64 {
        self.last_seen_ms
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
        s.enter("a", 0).unwrap();
        assert!(matches!(s.enter("a", 0), Err(QuotaExceeded::Concurrency(..))));
        s.step("a").unwrap();
        s.step("a").unwrap();
        assert!(matches!(s.step("a"), Err(QuotaExceeded::Steps(..))));
        s.leave("a", 5);
        assert!(matches!(s.enter("a", 20_000), Err(QuotaExceeded::Deadline(..))));
        s.evict_idle(40_000);
        assert!(s.is_empty());
    }

    #[test]
    fn tracked_sessions_stay_bounded() {
        let s = Sessions::new(SessionConfig {
            max_tracked: 1_000,
            ..SessionConfig::default()
        });
        for i in 0..50_000u64 {
            let name = format!("s{i}");
            s.enter(&name, i).unwrap();
            s.leave(&name, i);
        }
        assert!(s.len() <= 1_000, "{}", s.len());
    }
}
