//! Per-session quotas (the seeds' per-session sandbox): concurrent requests,
//! LLM steps, tokens and a deadline. Idle sessions are evicted.

use super::evict;
use crate::config::SessionConfig;
use parking_lot::Mutex;

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

impl evict::Idle for SessionState {
    fn busy(&self) -> bool {
        self.in_flight > 0
    }
    fn last_seen_ms(&self) -> u64 {
        self.last_seen_ms
    }
}

/// All sessions' quotas.
pub struct SessionQuotas {
    cfg: SessionConfig,
    table: Mutex<evict::Slots<SessionState>>,
}

impl SessionQuotas {
    /// Quotas with the given limits.
    pub fn new(cfg: SessionConfig) -> Self {
        Self {
            table: Mutex::new(evict::Slots::with_room(cfg.max_tracked)),
            cfg,
        }
    }

    /// Admits one request of `user`'s `session`; it leaves the session
    /// when the returned [`InSession`] is dropped. A session belongs to its
    /// user: another user naming the same session has one of its own.
    pub fn enter<'a>(&'a self, user: &str, session: &'a str, now_ms: u64) -> Result<InSession<'a>, QuotaExceeded> {
        let key = owned_key(user, session);
        let mut t = super::lock(&self.table);
        let fresh = || SessionState {
            started_ms: now_ms,
            ..SessionState::default()
        };
        let (slot, added) = t.find_or_add(key, fresh);
        // Idle past eviction but not yet swept: forgotten all the same, so
        // it starts anew (its deadline too) rather than by when a sweep ran.
        let s = t.get_mut(slot);
        if !added && s.in_flight == 0 && now_ms.saturating_sub(s.last_seen_ms) >= self.cfg.idle_evict_s * 1000 {
            *s = fresh();
        }
        self.admit(session, t.get_mut(slot), now_ms)?;
        // Room is made after adding: the new session is busy by then, so it stays.
        if added && t.len() > self.cfg.max_tracked {
            t.make_room(self.cfg.max_tracked, now_ms, self.cfg.idle_evict_s * 1000);
        }
        Ok(InSession {
            sessions: self,
            name: session,
            slot,
            left_ms: None,
        })
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

    /// Forgets sessions idle for `idle_evict_s` with nothing in flight.
    pub fn evict_idle(&self, now_ms: u64) {
        super::lock(&self.table).evict_idle(now_ms, self.cfg.idle_evict_s * 1000);
    }

    /// Sessions currently tracked.
    pub fn len(&self) -> usize {
        super::lock(&self.table).len()
    }

    /// Whether no session is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The table's key of `user`'s `session`: the user's length, then both,
/// so that no two pairs share a key whatever the names hold.
/// Built in a `String`, whose buffer the key then keeps.
fn owned_key(user: &str, session: &str) -> compact_str::CompactString {
    let mut len = itoa::Buffer::new();
    let len = len.format(user.len());
    let mut key = String::with_capacity(len.len() + 1 + user.len() + session.len());
    key.push_str(len);
    key.push(':');
    key.push_str(user);
    key.push_str(session);
    key.into()
}

/// One request admitted to its session ([`SessionQuotas::enter`]). A session
/// with a request in flight is never evicted, so its slot stays its own.
pub struct InSession<'a> {
    sessions: &'a SessionQuotas,
    name: &'a str,
    slot: u32,
    /// When the request left (None: dropped before it said, as when a
    /// gateway client goes away; the session was last seen at entry then).
    left_ms: Option<u64>,
}

impl InSession<'_> {
    /// Takes one LLM step of the session's quota.
    pub fn step(&self) -> Result<(), QuotaExceeded> {
        let c = &self.sessions.cfg;
        let mut t = super::lock(&self.sessions.table);
        let s = t.get_mut(self.slot);
        if s.steps >= c.max_steps {
            return Err(QuotaExceeded::Steps(self.name.into(), c.max_steps));
        }
        if s.tokens >= c.max_tokens {
            return Err(QuotaExceeded::Tokens(self.name.into(), c.max_tokens));
        }
        s.steps += 1;
        Ok(())
    }

    /// Adds tokens used by the session.
    pub fn add_tokens(&self, tokens: u64) {
        super::lock(&self.sessions.table).get_mut(self.slot).tokens += tokens;
    }

    /// Ends the request at `now_ms`.
    pub fn leave(mut self, now_ms: u64) {
        self.left_ms = Some(now_ms);
    }
}

impl Drop for InSession<'_> {
    fn drop(&mut self) {
        let mut t = super::lock(&self.sessions.table);
        let s = t.get_mut(self.slot);
        s.in_flight = s.in_flight.saturating_sub(1);
        if let Some(ms) = self.left_ms {
            s.last_seen_ms = ms;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_hold() {
        let s = SessionQuotas::new(SessionConfig {
            max_concurrent: 1,
            max_steps: 2,
            max_tokens: 100,
            deadline_s: 10,
            idle_evict_s: 5,
            max_tracked: 100,
        });
        let a = s.enter("u", "a", 0).unwrap();
        assert!(matches!(s.enter("u", "a", 0), Err(QuotaExceeded::Concurrency(..))));
        a.step().unwrap();
        a.step().unwrap();
        assert!(matches!(a.step(), Err(QuotaExceeded::Steps(..))));
        a.leave(5);
        // Kept busy (never idle 5 s): past its 10 s deadline it is refused.
        s.enter("u", "a", 4_000).unwrap().leave(4_000);
        s.enter("u", "a", 8_000).unwrap().leave(8_000);
        assert!(matches!(s.enter("u", "a", 12_000), Err(QuotaExceeded::Deadline(..))));
        s.evict_idle(40_000);
        assert!(s.is_empty());
    }

    #[test]
    fn a_session_idle_past_eviction_starts_anew_before_any_sweep() {
        let s = SessionQuotas::new(SessionConfig {
            max_steps: 1,
            deadline_s: 10,
            idle_evict_s: 5,
            ..SessionConfig::default()
        });
        let a = s.enter("u", "a", 0).unwrap();
        a.step().unwrap();
        a.leave(1_000);
        // Two days later, no sweep in between: a new session, steps and deadline too.
        let again = s.enter("u", "a", 2 * 86_400_000).unwrap();
        again.step().unwrap();
    }

    #[test]
    fn a_session_is_its_user_s_alone() {
        let s = SessionQuotas::new(SessionConfig {
            max_concurrent: 1,
            max_steps: 1,
            ..SessionConfig::default()
        });
        let bob = s.enter("bob", "shared", 0).unwrap();
        bob.step().unwrap();
        // Alice naming Bob's session gets one of her own: neither his
        // concurrency nor his steps are hers.
        let alice = s.enter("alice", "shared", 0).unwrap();
        alice.step().unwrap();
        assert!(matches!(bob.step(), Err(QuotaExceeded::Steps(..))));
        // Nor can names made of both reach either.
        s.enter("bobshared", "", 0).unwrap().leave(0);
        s.enter("bo", "bshared", 0).unwrap().leave(0);
        s.enter("3:bob", "shared", 0).unwrap().leave(0);
        assert!(matches!(
            s.enter("bob", "shared", 0),
            Err(QuotaExceeded::Concurrency(..))
        ));
    }

    #[test]
    fn tracked_sessions_stay_bounded() {
        let s = SessionQuotas::new(SessionConfig {
            max_tracked: 1_000,
            ..SessionConfig::default()
        });
        for i in 0..50_000u64 {
            let name = format!("s{i}");
            s.enter("u", &name, i).unwrap().leave(i);
        }
        assert!(s.len() <= 1_000, "{}", s.len());
    }

    #[test]
    fn a_dropped_request_leaves_and_a_busy_session_outlives_making_room() {
        let s = SessionQuotas::new(SessionConfig {
            max_concurrent: 1,
            max_steps: 1,
            max_tracked: 10,
            ..SessionConfig::default()
        });
        // Dropped without leaving (a cancelled call): the slot is free again.
        drop(s.enter("u", "a", 0).unwrap());
        let busy = s.enter("u", "a", 1).unwrap();
        busy.step().unwrap();
        for i in 0..100u64 {
            s.enter("u", &format!("s{i}"), 2 + i).unwrap().leave(2 + i);
        }
        assert!(s.len() <= 10, "{}", s.len());
        // "a" kept its slot and its quota through every eviction.
        assert!(matches!(busy.step(), Err(QuotaExceeded::Steps(..))));
        busy.leave(200);
        // Evicted sessions come back fresh, in reused slots.
        s.evict_idle(200 + 600_000);
        assert!(s.is_empty());
        let again = s.enter("u", "a", 200 + 600_000).unwrap();
        again.step().unwrap();
    }
}
