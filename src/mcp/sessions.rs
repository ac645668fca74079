//! Who holds each MCP session at `/mcp`. A session is its opener's: the
//! caller key that sent its `initialize` (none where no keys are used),
//! and no other key may use its id. There are at most so many sessions,
//! in all and per key, and one idle for its idle life is forgotten (and
//! closed by the gateway).

use ahash::AHashMap as HashMap;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The bounds on MCP sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McpLimits {
    /// Sessions open at once, in all.
    pub sessions: usize,
    /// Sessions one caller key may hold open at once.
    pub per_key: usize,
    /// A session not used for this long is closed.
    pub idle: Duration,
}

impl Default for McpLimits {
    fn default() -> Self {
        Self {
            sessions: 1024,
            per_key: 64,
            idle: Duration::from_secs(300),
        }
    }
}

/// Why a session may not be opened now.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The gateway holds as many sessions as it may.
    #[error("this gateway has {0} MCP sessions open, the most it holds; end one (DELETE /mcp) or try again once one has been idle long enough to close")]
    Full(usize),
    /// The caller's key holds as many as it may.
    #[error("API key `{key}` has {max} MCP sessions open, the most one key may; end one (DELETE /mcp) or reuse it")]
    PerKey {
        /// Whose.
        key: Arc<str>,
        /// The bound.
        max: usize,
    },
}

struct Held {
    owner: Option<Arc<str>>,
    last: Instant,
}

#[derive(Default)]
struct Table {
    by_id: HashMap<Box<str>, Held>,
    /// Sessions (and openings under way) per key.
    per_owner: HashMap<Arc<str>, usize>,
    /// Openings under way (counted before their session exists).
    opening: usize,
}

impl Table {
    fn count(&self) -> usize {
        self.by_id.len() + self.opening
    }

    fn release(&mut self, owner: Option<&Arc<str>>) {
        if let Some(o) = owner {
            if let Some(n) = self.per_owner.get_mut(o) {
                *n -= 1;
                if *n == 0 {
                    self.per_owner.remove(o);
                }
            }
        }
    }
}

/// Every session's holder and when it was last used.
pub struct Sessions {
    limits: McpLimits,
    table: Mutex<Table>,
}

/// A session being opened: its room is held until it opens
/// ([`Opening::opened`]) or this is dropped.
pub struct Opening<'a> {
    sessions: &'a Sessions,
    owner: Option<Arc<str>>,
    done: bool,
}

impl Opening<'_> {
    /// The session opened as `id`.
    pub fn opened(mut self, id: &str, now: Instant) {
        self.done = true;
        let mut t = self.sessions.table.lock();
        t.opening -= 1;
        let held = Held {
            owner: self.owner.take(),
            last: now,
        };
        if let Some(old) = t.by_id.insert(id.into(), held) {
            // An id given twice is one session: its room was held once.
            t.release(old.owner.as_ref());
        }
    }
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if !self.done {
            let mut t = self.sessions.table.lock();
            t.opening -= 1;
            t.release(self.owner.as_ref());
        }
    }
}

impl Sessions {
    /// A table holding sessions within `limits`.
    pub fn new(limits: McpLimits) -> Self {
        Self {
            limits,
            table: Mutex::default(),
        }
    }

    /// The bounds it keeps.
    pub fn limits(&self) -> McpLimits {
        self.limits
    }

    /// Room for one more session of `owner`'s, or why not. Sessions idle
    /// past their life are forgotten first; their ids are in `expired`,
    /// for the caller to close.
    pub fn open(&self, owner: Option<&str>, now: Instant, expired: &mut Vec<Box<str>>) -> Result<Opening<'_>, Refused> {
        let mut t = self.table.lock();
        if t.count() >= self.limits.sessions || owner.is_some_and(|o| t.per_owner.get(o) >= Some(&self.limits.per_key))
        {
            self.sweep(&mut t, now, expired);
        }
        if t.count() >= self.limits.sessions {
            return Err(Refused::Full(self.limits.sessions));
        }
        let owner: Option<Arc<str>> = match owner {
            Some(o) => {
                let (key, n) = match t.per_owner.get_key_value(o) {
                    Some((k, &n)) => (k.clone(), n),
                    None => (Arc::from(o), 0),
                };
                if n >= self.limits.per_key {
                    return Err(Refused::PerKey {
                        key,
                        max: self.limits.per_key,
                    });
                }
                t.per_owner.insert(key.clone(), n + 1);
                Some(key)
            }
            None => None,
        };
        t.opening += 1;
        Ok(Opening {
            sessions: self,
            owner,
            done: false,
        })
    }

    /// Whether session `id` is `owner`'s (then it counts as used now). A
    /// session another key opened is as unknown as one never opened.
    pub fn touch(&self, id: &str, owner: Option<&str>, now: Instant) -> bool {
        let mut t = self.table.lock();
        match t.by_id.get_mut(id) {
            Some(h) if h.owner.as_deref() == owner && now.saturating_duration_since(h.last) < self.limits.idle => {
                h.last = now;
                true
            }
            _ => false,
        }
    }

    /// Forgets session `id` (its client ended it).
    pub fn close(&self, id: &str) {
        let mut t = self.table.lock();
        if let Some(h) = t.by_id.remove(id) {
            t.release(h.owner.as_ref());
        }
    }

    /// Forgets the sessions idle past their life; their ids, to close.
    pub fn expire(&self, now: Instant) -> Vec<Box<str>> {
        let mut out = Vec::new();
        self.sweep(&mut self.table.lock(), now, &mut out);
        out
    }

    fn sweep(&self, t: &mut Table, now: Instant, out: &mut Vec<Box<str>>) {
        let idle = self.limits.idle;
        let gone: Vec<Box<str>> = t
            .by_id
            .iter()
            .filter(|(_, h)| now.saturating_duration_since(h.last) >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            if let Some(h) = t.by_id.remove(&id) {
                t.release(h.owner.as_ref());
            }
            out.push(id);
        }
    }

    /// Sessions open now.
    pub fn len(&self) -> usize {
        self.table.lock().by_id.len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> McpLimits {
        McpLimits {
            sessions: 3,
            per_key: 2,
            idle: Duration::from_secs(10),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_is_its_opener_s_alone() {
        let s = Sessions::new(limits());
        let now = Instant::now();
        s.open(Some("alice"), now, &mut Vec::new()).unwrap().opened("a1", now);
        assert!(s.touch("a1", Some("alice"), now));
        assert!(!s.touch("a1", Some("bob"), now), "another key's");
        assert!(!s.touch("a1", None, now), "no key's");
        assert!(!s.touch("zz", Some("alice"), now), "never opened");
        s.close("a1");
        assert!(!s.touch("a1", Some("alice"), now), "ended");
        assert!(s.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn sessions_are_bounded_per_key_and_in_all_and_idle_ones_make_room() {
        let s = Sessions::new(limits());
        let t0 = Instant::now();
        let mut expired = Vec::new();
        s.open(Some("alice"), t0, &mut expired).unwrap().opened("a1", t0);
        s.open(Some("alice"), t0, &mut expired).unwrap().opened("a2", t0);
        let third = s.open(Some("alice"), t0, &mut expired).map(drop);
        assert!(matches!(third, Err(Refused::PerKey { max: 2, .. })), "{third:?}");
        // An opening that never opens gives its room back.
        drop(s.open(Some("bob"), t0, &mut expired).unwrap());
        s.open(Some("bob"), t0, &mut expired).unwrap().opened("b1", t0);
        assert_eq!(s.open(None, t0, &mut expired).map(drop), Err(Refused::Full(3)));
        assert!(expired.is_empty());
        // Kept in use, a1 stays; a2 and b1 go idle and make room.
        let t1 = t0 + Duration::from_secs(6);
        assert!(s.touch("a1", Some("alice"), t1));
        let t2 = t0 + Duration::from_secs(11);
        assert!(!s.touch("a2", Some("alice"), t2), "idle past its life");
        s.open(Some("alice"), t2, &mut expired).unwrap().opened("a3", t2);
        expired.sort();
        assert_eq!(expired, ["a2".into(), "b1".into()] as [Box<str>; 2]);
        assert_eq!(s.len(), 2);
        assert!(s.touch("a1", Some("alice"), t2));
    }
}
