//! What the console remembers of the traffic: recent requests (the chains
//! pane) and each breaker row's last calls (its detail), from the event
//! records.

use super::app::{App, RowKey};
use crate::outcome::Outcome;
use crate::target::Target;
use crate::telemetry::events::{Event, EventKind};
use std::collections::VecDeque;

/// Recent requests kept.
pub const RECENT: usize = 1000;

/// One finished request, for the chains pane.
#[derive(Clone, Debug, PartialEq)]
pub struct Recent {
    /// Request id.
    pub id: u64,
    /// User.
    pub user: String,
    /// Path taken.
    pub chain: String,
    /// Level name.
    pub level: crate::outcome::Level,
    /// Quality.
    pub quality: f64,
    /// Missing components.
    pub missing: String,
    /// Why it ended as it did, as the client was told (a refusal's
    /// budget or quota, the outage, the cut), when it was degraded.
    pub why: Option<String>,
    /// When it ended (ms on the console's time line).
    pub t_ms: u64,
    /// Arrival to outcome (ms).
    pub latency_ms: u64,
    /// Tokens and cost of all its attempts.
    pub tokens: u64,
    /// USD.
    pub cost_usd: f64,
    /// The instance it ran on, where the console watches several.
    pub instance: Option<String>,
    /// Its name outside (`x-fusebox-request-id`), for a gateway's request.
    pub key: Option<String>,
    /// The upstreams' ids of the answers it got (`chatcmpl-…`), oldest
    /// first.
    pub upstream: Vec<String>,
}

impl Recent {
    /// Whether `filter` (lower case) matches it: its user, path, level,
    /// reason, request id or an upstream's id of its answer.
    pub fn matches(&self, filter: &str) -> bool {
        [
            self.user.as_str(),
            self.chain.as_str(),
            self.level.as_str(),
            self.why.as_deref().unwrap_or(""),
            self.key.as_deref().unwrap_or(""),
        ]
        .into_iter()
        .chain(self.upstream.iter().map(String::as_str))
        .any(|t| t.to_lowercase().contains(filter))
    }
}

impl From<&Outcome> for Recent {
    fn from(o: &Outcome) -> Self {
        Self {
            instance: None,
            id: o.request,
            user: o.user.to_string(),
            chain: o.path().join(" → "),
            level: o.level,
            quality: o.quality,
            missing: o.missing.join(", "),
            why: o.user_message.clone(),
            t_ms: 0,
            latency_ms: o.latency_ms,
            tokens: o.tokens,
            cost_usd: o.cost_usd,
            key: o.key.as_ref().map(ToString::to_string),
            upstream: Vec::new(),
        }
    }
}

/// Upstream answer ids held for requests not ended yet; past it the
/// oldest go (a request that long in flight is found by its other names).
pub const UPSTREAM_IDS: usize = 2_048;

/// Calls kept per breaker row for its detail.
pub const ATTEMPTS: usize = 8;

/// One call of a target, as its detail lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    /// When it ended (ms on the console's time line).
    pub t_ms: u64,
    /// The request it was for.
    pub request: u64,
    /// The model asked for, on provider calls.
    pub model: Option<String>,
    /// Its HTTP status, if it got one.
    pub status: Option<u16>,
    /// How it failed below HTTP, if it did.
    pub transport: Option<crate::provider::Transport>,
    /// How long it took.
    pub latency_ms: u64,
    /// The instance it ran on, where the console watches several.
    pub instance: Option<String>,
}

fn push(q: &mut VecDeque<Seen>, seen: Seen) {
    if q.len() == ATTEMPTS {
        q.pop_front();
    }
    q.push_back(seen);
}

impl App {
    /// Takes an event from the runner (outcome records feed the chains
    /// pane), unless the display is frozen.
    pub fn on_event(&mut self, e: &Event) {
        if self.display_frozen {
            return;
        }
        match &e.kind {
            EventKind::Outcome(o) => {
                if self.recent.len() == RECENT {
                    self.recent.pop_front();
                }
                let mine = |(request, instance, _): &(u64, Option<String>, String)| {
                    *request == o.request && *instance == e.instance
                };
                let upstream = self
                    .upstream_ids
                    .iter()
                    .filter(|x| mine(x))
                    .map(|(_, _, id)| id.clone())
                    .collect();
                self.upstream_ids.retain(|x| !mine(x));
                self.recent.push_back(Recent {
                    instance: e.instance.clone(),
                    t_ms: e.t_ms,
                    upstream,
                    ..Recent::from(o.as_ref())
                });
            }
            EventKind::Attempt(a) => {
                if let Some(id) = &a.response_id {
                    if self.upstream_ids.len() == UPSTREAM_IDS {
                        self.upstream_ids.pop_front();
                    }
                    self.upstream_ids.push_back((a.request, e.instance.clone(), id.clone()));
                }
                let seen = Seen {
                    t_ms: e.t_ms,
                    request: a.request,
                    model: a.model.clone(),
                    status: a.status,
                    transport: a.transport,
                    latency_ms: a.latency_ms,
                    instance: e.instance.clone(),
                };
                // On the provider's (or tool's) row and the model's, each on
                // its instance's row and (attached to several) the combined one.
                let mut targets = vec![a.target.clone()];
                targets.extend(a.model.as_deref().map(Target::model));
                let mut keys: Vec<RowKey> = targets.iter().map(|t| (t.clone(), e.instance.clone())).collect();
                if e.instance.is_some() {
                    keys.extend(targets.into_iter().map(|t| (t, None)));
                }
                let failed = a.transport.is_some() || a.status.is_some_and(|s| s != 200);
                for key in keys {
                    if failed {
                        push(self.failures.entry(key.clone()).or_default(), seen.clone());
                        // Its record came after the trip it led to.
                        if let Some((t_ms, by)) = self.tripped_by.get_mut(&key) {
                            if super::app::tripped(&seen, *t_ms) && by.len() < ATTEMPTS && !by.contains(&seen) {
                                by.push(seen.clone());
                                by.sort_by_key(|f| f.t_ms);
                            }
                        }
                    }
                    push(self.attempts.entry(key).or_default(), seen.clone());
                }
            }
            _ => {}
        }
    }
}
