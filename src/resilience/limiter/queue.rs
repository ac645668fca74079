//! A provider's waiting queue: calls that found no capacity wait here,
//! served by priority and, within a priority, in weighted fair shares
//! across tenants (self-clocked fair queueing: each call is tagged with
//! its tenant's virtual finish time, `max(clock, tenant's last tag) +
//! tokens / weight`, and the smallest tag goes first), so a tenant sending
//! ten times its share waits behind everyone else's fair share, not in
//! front of it. Only the call at the head may take capacity; a new call
//! does not overtake the queue. A call is shed when its priority's deadline
//! passes, or when a full queue makes room for a more urgent or fairer one
//! (the least urgent call with the largest tag goes).

use crate::config::Priority;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

/// Why a call was shed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShedWhy {
    /// It waited its priority's deadline.
    Deadline,
    /// The queue was full of calls no less urgent and no fairer.
    Full,
    /// A more urgent or fairer call took its place in a full queue.
    Displaced,
    /// Its tenant holds its fair share of the provider's slots.
    Share,
}

impl ShedWhy {
    /// In words.
    pub fn label(self) -> &'static str {
        match self {
            ShedWhy::Deadline => "waited its deadline",
            ShedWhy::Full => "queue full",
            ShedWhy::Displaced => "displaced by a more urgent call",
            ShedWhy::Share => "its tenant holds its fair share of the provider's slots",
        }
    }
}

/// A shed call: whose, at which priority, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shed {
    /// Its tenant.
    pub tenant: Arc<str>,
    /// Its priority.
    pub priority: Priority,
    /// Why.
    pub why: ShedWhy,
}

/// Where a call waits: its priority, tenant and the tenant's weight.
#[derive(Clone, Debug)]
pub struct Place {
    /// How urgent.
    pub priority: Priority,
    /// Whose share it uses.
    pub tenant: Arc<str>,
    /// The tenant's key (its name hashed), for the slots it holds.
    pub key: u64,
    /// The tenant's weight (≥ 1).
    pub weight: u32,
}

impl Place {
    /// `tenant`'s place at `priority`, with its `weight`.
    pub fn new(priority: Priority, tenant: Arc<str>, weight: u32) -> Self {
        Self {
            priority,
            key: Self::key_of(&tenant),
            tenant,
            weight,
        }
    }

    /// A tenant's key: its name, hashed (the same in every process).
    pub fn key_of(tenant: &str) -> u64 {
        ahash::RandomState::with_seeds(0x66, 0x75, 0x73, 0x65).hash_one(tenant)
    }
}

/// A queue's live figures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueView {
    /// Calls waiting, per priority (critical, default, batch).
    pub waiting: [u32; 3],
    /// Room to wait.
    pub max: u32,
    /// Calls shed since start, per priority.
    pub shed: [u64; 3],
    /// The tenants shed most, with their counts (at most three).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shed_most: Vec<(String, u64)>,
}

/// The tenants whose sheds are counted by name; past that they are not
/// listed (the totals still count them).
const MAX_SHED_TENANTS: usize = 1_024;

/// Tags are in tokens scaled by this, so weights divide them finely.
const SCALE: u64 = 1_024;

/// One waiting call, as the caller holds it; dropped, it leaves the queue.
pub struct Queued<'q> {
    queue: &'q FairQueue,
    priority: Priority,
    key: (u64, u64),
    tenant: Arc<str>,
    waiter: Arc<Waiter>,
}

impl Queued<'_> {
    /// Waits until the queue calls on this call (it reached the head, or
    /// was displaced).
    pub async fn called(&self) {
        self.waiter.wake.notified().await;
    }

    /// Whether a fuller queue pushed this call out.
    pub fn displaced(&self) -> bool {
        self.waiter.displaced.load(Ordering::Acquire)
    }

    /// Whether it is at the head: the one call that may take capacity.
    pub fn is_head(&self) -> bool {
        self.queue.lines.lock().head() == Some((self.priority, self.key))
    }

    /// It took capacity: the fair clock moves to its tag.
    pub fn served(self) {
        self.queue.leave(&self, true, None);
    }

    /// It is shed for `why`.
    pub fn shed(self, why: ShedWhy) -> Option<Shed> {
        self.queue.leave(&self, false, Some(why))
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.queue.leave(self, false, None);
    }
}

struct Waiter {
    wake: Notify,
    displaced: AtomicBool,
}

/// One priority's line.
#[derive(Default)]
struct Line {
    /// Waiting calls by (tag, arrival).
    order: BTreeMap<(u64, u64), (Arc<str>, Arc<Waiter>)>,
    /// Each waiting tenant's last tag and calls waiting.
    tenants: HashMap<Arc<str>, (u64, u32)>,
    /// The tag of the call served last.
    clock: u64,
}

impl Line {
    fn tag(&self, tenant: &str, cost: u64, weight: u32) -> u64 {
        let last = self.tenants.get(tenant).map_or(0, |t| t.0);
        self.clock
            .max(last)
            .saturating_add(cost.max(1) * SCALE / u64::from(weight.max(1)))
    }

    fn remove(&mut self, key: (u64, u64)) -> Option<(Arc<str>, Arc<Waiter>)> {
        let (tenant, w) = self.order.remove(&key)?;
        if let Some(t) = self.tenants.get_mut(&tenant) {
            t.1 -= 1;
            if t.1 == 0 {
                self.tenants.remove(&tenant);
            }
        }
        Some((tenant, w))
    }
}

#[derive(Default)]
struct Lines {
    lines: [Line; 3],
    arrivals: u64,
    shed: [u64; 3],
    shed_by: HashMap<Arc<str>, u64>,
}

impl Lines {
    fn head(&self) -> Option<(Priority, (u64, u64))> {
        Priority::ALL
            .into_iter()
            .find_map(|p| self.lines[p.index()].order.keys().next().map(|k| (p, *k)))
    }

    fn count_shed(&mut self, tenant: &Arc<str>, p: Priority) {
        self.shed[p.index()] += 1;
        if let Some(n) = self.shed_by.get_mut(tenant) {
            *n += 1;
        } else if self.shed_by.len() < MAX_SHED_TENANTS {
            self.shed_by.insert(tenant.clone(), 1);
        }
    }
}

/// A provider's waiting queue.
pub struct FairQueue {
    lines: Mutex<Lines>,
    waiting: AtomicUsize,
    max: usize,
}

impl FairQueue {
    /// A queue with room for `max` calls.
    pub fn new(max: u32) -> Self {
        Self {
            lines: Mutex::new(Lines::default()),
            waiting: AtomicUsize::new(0),
            max: max.max(1) as usize,
        }
    }

    /// Whether no call waits.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.waiting.load(Ordering::Acquire) == 0
    }

    /// Queues a call of `cost` tokens; a full queue sheds the least urgent
    /// call with the largest tag to make room, or refuses this one when it
    /// would be that call.
    pub fn join(&self, place: &Place, cost: u64) -> Result<Queued<'_>, Shed> {
        let mut l = self.lines.lock();
        let pi = place.priority.index();
        let tag = l.lines[pi].tag(&place.tenant, cost, place.weight);
        if self.waiting.load(Ordering::Acquire) >= self.max {
            let last = Priority::ALL
                .into_iter()
                .rev()
                .find_map(|p| l.lines[p.index()].order.keys().next_back().map(|k| (p, *k)));
            match last {
                Some((p, key)) if p > place.priority || (p == place.priority && key.0 > tag) => {
                    if let Some((tenant, w)) = l.lines[p.index()].remove(key) {
                        self.waiting.fetch_sub(1, Ordering::AcqRel);
                        l.count_shed(&tenant, p);
                        w.displaced.store(true, Ordering::Release);
                        w.wake.notify_one();
                    }
                }
                _ => {
                    l.count_shed(&place.tenant, place.priority);
                    return Err(Shed {
                        tenant: place.tenant.clone(),
                        priority: place.priority,
                        why: ShedWhy::Full,
                    });
                }
            }
        }
        l.arrivals += 1;
        let key = (tag, l.arrivals);
        let waiter = Arc::new(Waiter {
            wake: Notify::new(),
            displaced: AtomicBool::new(false),
        });
        let line = &mut l.lines[pi];
        line.order.insert(key, (place.tenant.clone(), waiter.clone()));
        let t = line.tenants.entry(place.tenant.clone()).or_insert((0, 0));
        *t = (tag, t.1 + 1);
        self.waiting.fetch_add(1, Ordering::AcqRel);
        Ok(Queued {
            queue: self,
            priority: place.priority,
            key,
            tenant: place.tenant.clone(),
            waiter,
        })
    }

    /// Takes `t` out of the queue, unless it is out already: served (the
    /// fair clock moves to its tag) or not (it went away, or was shed for
    /// `shed`); the new head is called.
    fn leave(&self, t: &Queued<'_>, served: bool, shed: Option<ShedWhy>) -> Option<Shed> {
        let mut l = self.lines.lock();
        let line = &mut l.lines[t.priority.index()];
        line.remove(t.key)?;
        if served {
            line.clock = line.clock.max(t.key.0);
        }
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        let out = shed.map(|why| {
            l.count_shed(&t.tenant, t.priority);
            Shed {
                tenant: t.tenant.clone(),
                priority: t.priority,
                why,
            }
        });
        Self::call_head(&l);
        out
    }

    /// Calls on the head call (capacity was given back).
    pub fn wake_head(&self) {
        if !self.is_empty() {
            Self::call_head(&self.lines.lock());
        }
    }

    fn call_head(l: &Lines) {
        if let Some((p, key)) = l.head() {
            if let Some((_, w)) = l.lines[p.index()].order.get(&key) {
                w.wake.notify_one();
            }
        }
    }

    /// Live figures.
    pub fn view(&self) -> QueueView {
        let l = self.lines.lock();
        let mut most: Vec<(String, u64)> = l.shed_by.iter().map(|(t, n)| (t.to_string(), *n)).collect();
        most.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        most.truncate(3);
        QueueView {
            waiting: Priority::ALL.map(|p| l.lines[p.index()].order.len() as u32),
            max: self.max as u32,
            shed: l.shed,
            shed_most: most,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(p: Priority, tenant: &str) -> Place {
        Place::new(p, tenant.into(), 1)
    }

    /// Serves the queue to the end: the tenants in the order served.
    fn drain(mut tickets: Vec<Queued<'_>>) -> Vec<String> {
        let mut out = Vec::new();
        while !tickets.is_empty() {
            let i = tickets.iter().position(Queued::is_head).expect("a head");
            let t = tickets.remove(i);
            out.push(t.tenant.to_string());
            t.served();
        }
        out
    }

    #[test]
    fn a_flooding_tenant_waits_behind_the_others_shares() {
        let q = FairQueue::new(100);
        let mut t: Vec<Queued> = (0..10)
            .map(|_| q.join(&place(Priority::Default, "noisy"), 100).unwrap())
            .collect();
        t.push(q.join(&place(Priority::Default, "a"), 100).unwrap());
        t.push(q.join(&place(Priority::Default, "b"), 100).unwrap());
        let order = drain(t);
        // Each quiet tenant's first call is served within the first round.
        let pos = |n: &str| order.iter().position(|o| o == n).unwrap();
        assert!(pos("a") <= 2 && pos("b") <= 2, "{order:?}");
    }

    #[test]
    fn weights_and_sizes_set_the_shares() {
        let q = FairQueue::new(100);
        let heavy = Place {
            weight: 3,
            ..place(Priority::Default, "heavy")
        };
        let mut t: Vec<Queued> = Vec::new();
        for _ in 0..8 {
            t.push(q.join(&heavy, 100).unwrap());
            t.push(q.join(&place(Priority::Default, "light"), 100).unwrap());
        }
        let first: Vec<String> = drain(t).into_iter().take(8).collect();
        assert_eq!(first.iter().filter(|n| *n == "heavy").count(), 6, "{first:?}");
        // Calls twice the size use twice the share.
        let q = FairQueue::new(100);
        let mut t: Vec<Queued> = Vec::new();
        for _ in 0..6 {
            t.push(q.join(&place(Priority::Default, "big"), 200).unwrap());
            t.push(q.join(&place(Priority::Default, "small"), 100).unwrap());
        }
        let first: Vec<String> = drain(t).into_iter().take(6).collect();
        assert_eq!(first.iter().filter(|n| *n == "small").count(), 4, "{first:?}");
    }

    #[test]
    fn priorities_go_first_and_a_newcomer_does_not_jump_a_served_share() {
        let q = FairQueue::new(100);
        let b = q.join(&place(Priority::Batch, "x"), 10).unwrap();
        let d = q.join(&place(Priority::Default, "x"), 10).unwrap();
        assert!(d.is_head() && !b.is_head());
        let c = q.join(&place(Priority::Critical, "y"), 10).unwrap();
        assert!(c.is_head());
        assert_eq!(drain(vec![b, d, c]), ["y", "x", "x"]);
        // A tenant idle while others were served starts at the fair clock,
        // not with credit for the time it was away.
        let q = FairQueue::new(100);
        let mut t: Vec<Queued> = (0..4)
            .map(|_| q.join(&place(Priority::Default, "a"), 10).unwrap())
            .collect();
        t.remove(0).served();
        t.remove(0).served();
        t.push(q.join(&place(Priority::Default, "late"), 10).unwrap());
        assert_eq!(drain(t), ["a", "late", "a"]);
    }

    #[test]
    fn a_full_queue_sheds_the_least_urgent_and_largest_share_first() {
        let q = FairQueue::new(3);
        let noisy: Vec<Queued> = (0..2)
            .map(|_| q.join(&place(Priority::Default, "noisy"), 10).unwrap())
            .collect();
        let batch = q.join(&place(Priority::Batch, "b"), 10).unwrap();
        // Full: a default call displaces the batch call.
        let quiet = q.join(&place(Priority::Default, "quiet"), 10).unwrap();
        assert!(batch.displaced() && !noisy[1].displaced());
        // Full of default calls: a fairer one displaces noisy's last…
        let quiet2 = q.join(&place(Priority::Default, "quiet2"), 10).unwrap();
        assert!(noisy[1].displaced());
        // …and noisy's next is refused rather than displacing a fairer one.
        let e = q.join(&place(Priority::Default, "noisy"), 10).err().unwrap();
        assert_eq!(e.why, ShedWhy::Full);
        let v = q.view();
        assert_eq!(v.waiting, [0, 3, 0]);
        assert_eq!(v.shed, [0, 2, 1]);
        assert_eq!(v.shed_most[0], ("noisy".to_string(), 2));
        // A call shed on leaving is counted; one displaced leaves no trace;
        // one that goes away is not counted.
        assert_eq!(quiet.shed(ShedWhy::Deadline).map(|s| s.why), Some(ShedWhy::Deadline));
        assert!(batch.shed(ShedWhy::Deadline).is_none());
        drop((quiet2, noisy));
        assert!(q.is_empty());
        assert_eq!(q.view().shed, [0, 3, 1]);
    }
}
