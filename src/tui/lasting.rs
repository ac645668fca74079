//! The events the console keeps for the whole run, after they leave the
//! snapshot's newest few hundred: breaker transitions, operator actions and
//! refused commands, instance changes and reloads — what a post-mortem asks
//! for first. Bounded (`docs/limits.md`); each kept with its words, so a
//! frame does not describe them again.

use crate::telemetry::events::{Event, EventKind};
use std::collections::VecDeque;

/// Events kept beyond the snapshot's; the oldest go first past it.
pub const LASTING: usize = 10_000;

/// An event seen again within this of its first sighting is the same one
/// (attach puts an instance's events on the console's time line, which may
/// move it by a few ms from one snapshot to the next).
const SAME_WITHIN_MS: u64 = 50;

/// The kept events, oldest first, each with what it says.
#[derive(Debug, Default)]
pub struct Lasting {
    kept: VecDeque<(Event, String)>,
}

/// Whether `kind` is kept for the whole run.
fn lasts(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Transition(_)
            | EventKind::Operator { .. }
            | EventKind::CommandRefused { .. }
            | EventKind::Instance { .. }
            | EventKind::Reloaded { .. }
    )
}

impl Lasting {
    /// Keeps the lasting events of a snapshot taken at `now_ms` (oldest
    /// first) not kept yet; those it kept.
    pub fn take<'a>(&mut self, events: &'a [Event], now_ms: u64) -> Vec<&'a Event> {
        let mut new = Vec::new();
        // Only the newest need looking at, unless time went back (a
        // replay started again): then all of them.
        let floor = match self.kept.back() {
            Some((e, _)) if now_ms >= e.t_ms => e.t_ms.saturating_sub(1_000),
            _ => 0,
        };
        for e in events.iter().filter(|e| e.t_ms >= floor && lasts(&e.kind)) {
            let near = self.kept.partition_point(|(k, _)| k.t_ms + SAME_WITHIN_MS < e.t_ms)
                ..self.kept.partition_point(|(k, _)| k.t_ms <= e.t_ms + SAME_WITHIN_MS);
            let seen = self
                .kept
                .range(near)
                .any(|(k, _)| k.kind == e.kind && k.instance == e.instance);
            if seen {
                continue;
            }
            if self.kept.len() == LASTING {
                self.kept.pop_front();
            }
            let said = super::said::describe(e);
            // Time lines of several instances interleave: keep them ordered.
            let at = self.kept.partition_point(|(k, _)| k.t_ms <= e.t_ms);
            self.kept.insert(at, (e.clone(), said));
            new.push(e);
        }
        new
    }

    /// The kept events older than `t_ms` (the oldest the snapshot carries),
    /// oldest first.
    pub fn before(&self, t_ms: u64) -> impl DoubleEndedIterator<Item = &(Event, String)> {
        self.kept.range(..self.kept.partition_point(|(k, _)| k.t_ms < t_ms))
    }

    /// How many are kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{Command, Issuer};
    use crate::target::Target;

    fn op(t_ms: u64, target: &str) -> Event {
        Event {
            t_ms,
            kind: EventKind::Operator {
                command: Command::ForceOpen {
                    target: Target::provider(target),
                },
                by: Issuer::operator("ana"),
                applied: true,
                result: "forced open".into(),
            },
            instance: None,
        }
    }

    fn other(t_ms: u64) -> Event {
        Event {
            t_ms,
            kind: EventKind::BudgetRejected {
                user: "u".into(),
                reason: "tokens".into(),
            },
            instance: None,
        }
    }

    #[test]
    fn keeps_each_lasting_event_once_and_only_those() {
        let mut l = Lasting::default();
        let a = op(1_000, "openai");
        let b = op(2_000, "anthropic");
        l.take(&[a.clone(), other(1_500)], 1_500);
        // The same again, once moved by a few ms, with a new one after.
        let mut moved = a.clone();
        moved.t_ms += 20;
        l.take(&[moved, other(1_500), b.clone()], 2_000);
        let kept: Vec<&Event> = l.before(u64::MAX).map(|(e, _)| e).collect();
        assert_eq!(kept, [&a, &b]);
        assert_eq!(
            l.before(2_000).count(),
            1,
            "only what is older than the snapshot's oldest"
        );
        assert!(l.before(u64::MAX).next().unwrap().1.contains("openai"));
    }

    #[test]
    fn a_time_line_started_again_is_kept_too() {
        let mut l = Lasting::default();
        l.take(&[op(5_000, "openai")], 5_000);
        // A replay started again: its clock back near 0.
        let again = op(50, "anthropic");
        assert_eq!(l.take(std::slice::from_ref(&again), 100), [&again]);
        assert_eq!(l.take(std::slice::from_ref(&again), 200), Vec::<&Event>::new(), "once");
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn holds_its_bound() {
        let mut l = Lasting::default();
        for t in 0..(LASTING as u64 + 500) {
            l.take(&[op(t * 100, "openai")], t * 100);
        }
        assert_eq!(l.len(), LASTING);
        assert_eq!(
            l.before(u64::MAX).next().unwrap().0.t_ms,
            500 * 100,
            "the oldest went first"
        );
    }
}
