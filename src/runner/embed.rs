//! One embeddings call on behalf of an outside client (the gateway):
//! through the named model's breakers, its provider's limiter and the
//! user's budgets, one attempt, no fallback (another model's vectors would
//! not be comparable), ending in exactly one outcome.

pub use super::calls::{EmbedCall, EmbedEnd};
use super::ending::Ended;
use super::scope::{Scope, Tallied};
use super::Runner;
use crate::outcome::Outcome;
use crate::request::{AgentRequest, Via};
use crate::telemetry::events::Arrival;

/// An embeddings call's end and its outcome.
#[derive(Debug)]
pub struct Embedding {
    /// How it ended.
    pub end: EmbedEnd,
    /// Its outcome.
    pub outcome: Outcome,
}

impl Runner {
    /// Runs one embeddings call to its end.
    pub async fn embed(&self, call: EmbedCall) -> Embedding {
        let mut run = Tallied::new(Scope::begin(self, call.id, &call.user, || Arrival {
            request: AgentRequest {
                id: call.id,
                user: call.user.as_str().into(),
                sub_user: call.sub_user.as_deref().map(Into::into),
                session: crate::request::own_session(&call.user, call.id),
                route: call.model.as_str().into(),
                max_steps: 1,
                ..AgentRequest::default()
            },
            via: Via::Embeddings,
        }));
        let end = match self.catalog.route_for(&call.model).map(|r| r.chain[0]) {
            None => EmbedEnd::Unavailable(format!("no model `{}`", call.model)),
            Some(mi) => self.calls().embed(&call, mi, &mut run.tally).await,
        };
        let ended = Ended {
            chain: run.tally.hops.iter().map(|h| self.catalog.hop_of(h)).collect(),
            ..Ended::from(&end)
        };
        let outcome = run.outcome(ended);
        run.end(&outcome);
        Embedding { end, outcome }
    }
}
