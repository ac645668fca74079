//! The recorded calls: what each target did, as far as the log has been
//! read, handed to the calls that replay it (a request's own attempts in
//! order, other calls the target's latest behaviour).

use crate::target::Target;
use crate::traffic::log::AttemptRec;
use crate::traffic::replay::prefetch::GiveBack;
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// The recorded behaviour of every target, as far as the reader has read.
#[derive(Default)]
pub struct RecordedCalls {
    inner: Mutex<Calls>,
}

/// A request's recorded attempts not yet taken, in recorded order (a
/// request has few: the first two are held inline).
pub(super) type OwnAttempts = SmallVec<[Arc<AttemptRec>; 2]>;

/// An attempt as the log reader hands it over, with what indexing it
/// needs copied out of the record.
pub struct ReadAttempt {
    attempt: Arc<AttemptRec>,
    pub(super) t_ms: u64,
    /// Its target's index in the calls ([`RecordedCalls::target`]).
    target: usize,
    /// Whether it came after its request's body was made (else it came
    /// with the body).
    late: bool,
}

impl ReadAttempt {
    /// `attempt`, on the target of index `target`.
    pub fn new(attempt: Arc<AttemptRec>, target: usize, late: bool) -> Self {
        Self {
            t_ms: attempt.t_ms,
            attempt,
            target,
            late,
        }
    }
}

tokio::task_local! {
    /// In a replayed request's task: its own attempts read before its body
    /// was made, which came with the body. They are the task's, so they
    /// need no index by request; those read later wait in the calls's.
    pub(super) static OWN: RefCell<OwnAttempts>;
}

/// Takes the first of `own` on `target` that the replay has read (by `read_ms`).
fn take_own(own: &mut OwnAttempts, target: &Target, read_ms: u64) -> Option<Arc<AttemptRec>> {
    let i = own.iter().position(|a| a.target == *target && a.t_ms <= read_ms)?;
    Some(own.remove(i))
}

/// Attempts are shared between a request's own list and its target's
/// history, so indexing one costs no copy.
#[derive(Default)]
struct Calls {
    /// Index of each target's history in `recent`.
    targets: HashMap<Target, usize, ahash::RandomState>,
    /// The own attempts of requests under way read after their bodies
    /// were made (those read before are in the request's task, [`OWN`]),
    /// and what a deferred request left of its own for its re-drive.
    own: HashMap<u64, OwnAttempts, ahash::RandomState>,
    /// Recent attempts per target with their times, in time order, for
    /// calls with no own record.
    recent: Vec<VecDeque<(u64, Arc<AttemptRec>)>>,
    /// The time of the latest attempt the replay has read. An own attempt
    /// that came early with its request's body is used only once the replay
    /// has read that far, as if it had come on its own.
    read_ms: u64,
    /// Where history dropped from `recent` goes, to be freed on the log
    /// reader's thread (dropped here until the replay sets it).
    spent: Option<GiveBack<Arc<AttemptRec>>>,
    /// Requests that ended (not those deferred, whose re-drive takes their
    /// own attempts): an own attempt of theirs read later (the replay
    /// ended them earlier than the recording did) goes to the target's
    /// history only, not to `own`, where nothing would take it.
    /// Compressed: ids numbered in order take a few bytes per thousand.
    ended: roaring::RoaringTreemap,
}

impl Calls {
    /// See [`RecordedCalls::take_at`].
    fn take(&mut self, request: u64, t: usize, target: &Target, now_ms: u64) -> Option<(Arc<AttemptRec>, bool)> {
        self.prune(t, now_ms);
        // The request's own attempts in recorded order: those that came
        // with its body, then those read since.
        let read_ms = self.read_ms;
        if let Ok(Some(a)) = OWN.try_with(|own| take_own(&mut own.borrow_mut(), target, read_ms)) {
            return Some((a, true));
        }
        if let Some(own) = self.own.get_mut(&request) {
            if let Some(a) = take_own(own, target, read_ms) {
                if own.is_empty() {
                    self.own.remove(&request);
                }
                return Some((a, true));
            }
        }
        self.recent[t].front().map(|(_, a)| (a.clone(), false))
    }

    /// Drops target `t`'s history older than its latest attempt at or
    /// before `now_ms`, which no call can get any more (on every call and
    /// every attempt read, so the history stays within the read-ahead
    /// horizon also for targets the replay never calls).
    fn prune(&mut self, t: usize, now_ms: u64) {
        let recent = &mut self.recent[t];
        while recent.len() > 1 && recent[1].0 <= now_ms {
            if let (Some((_, a)), Some(spent)) = (recent.pop_front(), &mut self.spent) {
                spent.put(a);
            }
        }
    }

    /// The index of `target`'s history, added empty if new.
    fn target(&mut self, target: &Target) -> usize {
        match self.targets.get(target) {
            Some(&t) => t,
            None => {
                self.targets.insert(target.clone(), self.recent.len());
                self.recent.push(VecDeque::new());
                self.recent.len() - 1
            }
        }
    }
}

impl RecordedCalls {
    /// Adds an attempt read from the log. Only a late one (read after its
    /// request's body was made) is read here, for its request's id: the
    /// rest of the record, made on the reader's thread, stays in that
    /// core's cache until a call plays it.
    pub fn add(&self, read: ReadAttempt, now_ms: u64) {
        let ReadAttempt {
            attempt,
            t_ms,
            target,
            late,
        } = read;
        let mut f = self.inner.lock();
        let f = &mut *f;
        f.read_ms = t_ms;
        if late && !f.ended.contains(attempt.request.n()) {
            f.own.entry(attempt.request.n()).or_default().push(attempt.clone());
        }
        f.recent[target].push_back((t_ms, attempt));
        f.prune(target, now_ms);
    }

    /// Keeps what a deferred request left of the own attempts that came
    /// with its body, for its re-drive (they come before any read since).
    pub(super) fn keep(&self, request: u64, mut own: OwnAttempts) {
        if own.is_empty() {
            return;
        }
        let mut f = self.inner.lock();
        let kept = f.own.entry(request).or_default();
        own.extend(kept.drain(..));
        *kept = own;
    }

    /// The index a target's calls are taken under ([`RecordedCalls::take_at`]).
    pub fn target(&self, target: &Target) -> usize {
        self.inner.lock().target(target)
    }

    /// [`RecordedCalls::take_at`] by the target's name.
    pub fn take(&self, request: u64, target: &Target, now_ms: u64) -> Option<(Arc<AttemptRec>, bool)> {
        let mut f = self.inner.lock();
        let t = *f.targets.get(target)?;
        f.take(request, t, target, now_ms)
    }

    /// The attempt a call of `request` to `target` (its history's index
    /// `t`) gets at `now_ms`: its own next unused one; else the latest
    /// recorded on the target at or before now (the earliest if none is),
    /// answering without tool calls (`false`: not its own); None if the
    /// target has no recorded attempt (healthy).
    pub fn take_at(&self, request: u64, t: usize, target: &Target, now_ms: u64) -> Option<(Arc<AttemptRec>, bool)> {
        self.inner.lock().take(request, t, target, now_ms)
    }

    /// Forgets what is left of a finished request, and what is read of it
    /// from now on.
    pub fn forget(&self, request: u64) {
        let mut f = self.inner.lock();
        f.ended.insert(request);
        if !f.own.is_empty() {
            f.own.remove(&request);
        }
    }

    /// Hands the attempts the history drops to `spent` (None: drops them).
    pub(super) fn give_back(&self, spent: Option<GiveBack<Arc<AttemptRec>>>) {
        self.inner.lock().spent = spent;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn p() -> Target {
        Target::provider("p")
    }
    use crate::traffic::log::AttemptRec;
    use smallvec::SmallVec;
    use std::cell::RefCell;

    pub(in crate::traffic::replay) fn attempt(t_ms: u64, request: u64, status: u16) -> Arc<AttemptRec> {
        Arc::new(AttemptRec {
            t_ms,
            request: request.into(),
            target: p(),
            model: None,
            status: Some(status),
            transport: None,
            latency_ms: 10,
            input_tokens: 1,
            output_tokens: 1,
            headers: Default::default(),
            semantic_failure: None,
            tool_calls: Vec::new(),
            tool_keys: Vec::new(),
            answer: None,
            response_id: None,
            cut: None,
            cost_usd: None,
        })
    }

    /// Adds `a` to `calls` as the log reader hands it over at time 0.
    fn add(calls: &RecordedCalls, a: Arc<AttemptRec>, late: bool) {
        let t = calls.target(&a.target);
        calls.add(ReadAttempt::new(a, t, late), 0);
    }

    #[test]
    fn own_attempts_that_came_with_the_body_wait_until_the_replay_reads_them() {
        let calls = RecordedCalls::default();
        let t = calls.target(&p());
        // Another request's attempt has been read; request 1's own attempt
        // (at 100 ms) came early, with its body.
        add(&calls, attempt(0, 9, 503), true);
        let own = attempt(100, 1, 429);
        OWN.sync_scope(RefCell::new(SmallVec::from_iter([own.clone()])), || {
            let (a, is_own) = calls.take_at(1, t, &p(), 0).unwrap();
            assert_eq!(
                (a.status, is_own),
                (Some(503), false),
                "not read yet: the target's history answers"
            );
            // Once read, it is request 1's own.
            add(&calls, own, false);
            let (a, is_own) = calls.take_at(1, t, &p(), 0).unwrap();
            assert_eq!((a.status, is_own), (Some(429), true));
            // Used once.
            assert!(!calls.take_at(1, t, &p(), 0).unwrap().1);
        });
    }

    #[test]
    fn a_target_never_called_keeps_only_the_history_a_call_could_get() {
        let calls = RecordedCalls::default();
        let t = calls.target(&p());
        // Read 30 s ahead of the replay, which never calls the target.
        for i in 0..100_000u64 {
            let a = attempt(i * 10, i, 200);
            calls.add(ReadAttempt::new(a, t, false), (i * 10).saturating_sub(30_000));
        }
        let f = calls.inner.lock();
        // From the latest at or before now to the horizon: 3,001 of 100,000.
        assert_eq!(f.recent[t].len(), 3_001);
        assert_eq!(f.recent[t].front().map(|(t_ms, _)| *t_ms), Some(969_990));
    }

    #[test]
    fn an_own_attempt_read_after_its_request_ended_is_history_only() {
        let calls = RecordedCalls::default();
        let t = calls.target(&p());
        // The replay ended request 1 before its recorded attempt is read.
        calls.forget(1);
        add(&calls, attempt(100, 1, 503), true);
        assert!(calls.inner.lock().own.is_empty(), "nothing waits for it");
        let taken = calls.take_at(2, t, &p(), 100).map(|(a, own)| (a.status, own));
        assert_eq!(taken, Some((Some(503), false)), "the target's history has it");
    }

    #[test]
    fn attempts_read_after_the_body_follow_those_that_came_with_it() {
        let calls = RecordedCalls::default();
        let t = calls.target(&p());
        let (first, second) = (attempt(10, 1, 500), attempt(20, 1, 200));
        add(&calls, first.clone(), false);
        // The later attempt is read (late) before the request starts.
        add(&calls, second, true);
        let statuses: Vec<_> = OWN.sync_scope(RefCell::new(SmallVec::from_iter([first])), || {
            (0..2)
                .map(|_| calls.take_at(1, t, &p(), 30).unwrap().0.status)
                .collect()
        });
        assert_eq!(statuses, [Some(500), Some(200)]);
    }

    #[test]
    fn a_deferred_request_keeps_the_rest_of_its_own_attempts_for_its_redrive() {
        let calls = RecordedCalls::default();
        let t = calls.target(&p());
        let body = [attempt(10, 1, 500), attempt(20, 1, 503)];
        for a in &body {
            add(&calls, a.clone(), false);
        }
        add(&calls, attempt(30, 1, 429), true);
        OWN.sync_scope(RefCell::new(SmallVec::from_iter(body)), || {
            assert_eq!(calls.take_at(1, t, &p(), 40).unwrap().0.status, Some(500));
            // Deferred: what is left goes to the calls with the task's end.
            calls.keep(1, OWN.with(RefCell::take));
        });
        // The re-drive runs in another task, with no own attempts of its own.
        let taken: Vec<_> = (0..3).map(|_| calls.take_at(1, t, &p(), 40).unwrap()).collect();
        let taken: Vec<_> = taken.iter().map(|(a, own)| (a.status, *own)).collect();
        assert_eq!(taken, [(Some(503), true), (Some(429), true), (Some(429), false)]);
    }
}
