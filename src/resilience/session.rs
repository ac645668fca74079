//! Per-session quotas (the seeds' per-session sandbox): concurrent requests,
//! LLM steps, tokens and a deadline. Idle sessions are evicted.

use super::evict;
use crate::config::SessionConfig;
use compact_str::CompactString;
use hashbrown::HashTable;
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
pub struct Sessions {
    cfg: SessionConfig,
    table: Mutex<Table>,
}

/// Sessions in slots, found by name through an index of slot numbers. A
/// request holds its slot's number ([`InSession`]), so its steps, tokens
/// and leaving need no lookup; the index (4 bytes a session) stays small
/// enough to stay in cache, and making room scans the slots in order.
#[derive(Default)]
struct Table {
    index: HashTable<u32>,
    slots: Vec<Slot>,
    /// Slots no session holds.
    free: Vec<u32>,
    hasher: ahash::RandomState,
}

#[derive(Default)]
struct Slot {
    /// Whether a session holds the slot.
    live: bool,
    name: CompactString,
    /// The name's hash, to find the slot's index entry when it is evicted.
    hash: u64,
    state: SessionState,
}

impl Table {
    /// The slot of `name`, added with `add` if the session is new (true).
    fn find_or_add(&mut self, name: &str, add: impl FnOnce() -> SessionState) -> (u32, bool) {
        let Table {
            index,
            slots,
            free,
            hasher,
        } = self;
        let hash = hasher.hash_one(name);
        if let Some(&i) = index.find(hash, |&i| slots[i as usize].name == name) {
            return (i, false);
        }
        let slot = Slot {
            live: true,
            name: name.into(),
            hash,
            state: add(),
        };
        let i = match free.pop() {
            Some(i) => {
                slots[i as usize] = slot;
                i
            }
            None => {
                slots.push(slot);
                (slots.len() - 1) as u32
            }
        };
        index.insert_unique(hash, i, |&j| slots[j as usize].hash);
        (i, true)
    }

    /// Frees the slots of the sessions that `goes`; returns how many went.
    fn evict(&mut self, goes: impl Fn(&SessionState) -> bool) -> usize {
        let mut gone = 0;
        for (i, s) in self.slots.iter_mut().enumerate() {
            if s.live && goes(&s.state) {
                if let Ok(e) = self.index.find_entry(s.hash, |&j| j as usize == i) {
                    e.remove();
                }
                *s = Slot::default();
                self.free.push(i as u32);
                gone += 1;
            }
        }
        gone
    }

    /// Before adding to a full table: evicts idle sessions, then the least
    /// recently seen, until a tenth of the room is free.
    fn make_room(&mut self, max: usize, now_ms: u64, idle_ms: u64) {
        let len = self.index.len();
        if len < max {
            return;
        }
        let seen = (self.slots.iter())
            .filter(|s| s.live && !evict::Idle::busy(&s.state))
            .map(|s| s.state.last_seen_ms)
            .collect();
        let lru = evict::lru_cutoff(seen, len, max);
        self.evict(|s| evict::goes(s, now_ms, idle_ms, lru));
    }
}

impl Sessions {
    /// Quotas with the given limits.
    pub fn new(cfg: SessionConfig) -> Self {
        Self {
            cfg,
            table: Mutex::default(),
        }
    }

    /// Admits one request of `session`; it leaves the session when the
    /// returned [`InSession`] is dropped.
    pub fn enter<'a>(&'a self, session: &'a str, now_ms: u64) -> Result<InSession<'a>, QuotaExceeded> {
        let mut t = self.table.lock();
        let (slot, added) = t.find_or_add(session, || SessionState {
            started_ms: now_ms,
            ..SessionState::default()
        });
        self.admit(session, &mut t.slots[slot as usize].state, now_ms)?;
        // Room is made after adding: the new session is busy by then, so it stays.
        if added && t.index.len() > self.cfg.max_tracked {
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
        let idle_ms = self.cfg.idle_evict_s * 1000;
        self.table.lock().evict(|s| evict::goes(s, now_ms, idle_ms, None));
    }

    /// Sessions currently tracked.
    pub fn len(&self) -> usize {
        self.table.lock().index.len()
    }

    /// Whether no session is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One request admitted to its session ([`Sessions::enter`]). A session
/// with a request in flight is never evicted, so its slot stays its own.
pub struct InSession<'a> {
    sessions: &'a Sessions,
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
        let mut t = self.sessions.table.lock();
        let s = &mut t.slots[self.slot as usize].state;
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
        self.sessions.table.lock().slots[self.slot as usize].state.tokens += tokens;
    }

    /// Ends the request at `now_ms`.
    pub fn leave(mut self, now_ms: u64) {
        self.left_ms = Some(now_ms);
    }
}

impl Drop for InSession<'_> {
    fn drop(&mut self) {
        let mut t = self.sessions.table.lock();
        let s = &mut t.slots[self.slot as usize].state;
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
        a.step().unwrap();
        a.step().unwrap();
        assert!(matches!(a.step(), Err(QuotaExceeded::Steps(..))));
        a.leave(5);
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
            s.enter(&name, i).unwrap().leave(i);
        }
        assert!(s.len() <= 1_000, "{}", s.len());
    }

    #[test]
    fn a_dropped_request_leaves_and_a_busy_session_outlives_making_room() {
        let s = Sessions::new(SessionConfig {
            max_concurrent: 1,
            max_steps: 1,
            max_tracked: 10,
            ..SessionConfig::default()
        });
        // Dropped without leaving (a cancelled call): the slot is free again.
        drop(s.enter("a", 0).unwrap());
        let busy = s.enter("a", 1).unwrap();
        busy.step().unwrap();
        for i in 0..100u64 {
            s.enter(&format!("s{i}"), 2 + i).unwrap().leave(2 + i);
        }
        assert!(s.len() <= 10, "{}", s.len());
        // "a" kept its slot and its quota through every eviction.
        assert!(matches!(busy.step(), Err(QuotaExceeded::Steps(..))));
        busy.leave(200);
        // Evicted sessions come back fresh, in reused slots.
        s.evict_idle(200 + 600_000);
        assert!(s.is_empty());
        let again = s.enter("a", 200 + 600_000).unwrap();
        again.step().unwrap();
    }
}
