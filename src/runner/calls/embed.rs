//! One embeddings call made: one attempt on the named model (no retry, no
//! fallback: another model's vectors would not be comparable), admitted,
//! settled and ended as every attempt is.

use super::admission::{Ask, Spent};
use super::attempt::Verdict;
use super::{Calls, HopResult, Tally, Tried};
use crate::provider::{EmbedRequest, ErrorKind};
use crate::provider::{Embedded, ProviderError};
use crate::resilience::breaker::CallRecord;
use crate::telemetry::events::Attempt;
use std::sync::Arc;

/// An embeddings call asked for by an outside client.
#[derive(Clone, Debug)]
pub struct EmbedCall {
    /// Unique id.
    pub id: u64,
    /// Who pays.
    pub user: String,
    /// The sub-user the caller named (recorded, not billed).
    pub sub_user: Option<String>,
    /// The model (or route, whose first model serves) the client named.
    pub model: String,
    /// The client's body.
    pub body: Arc<crate::wire::RawBody>,
    /// Characters to embed.
    pub chars: usize,
}

/// How an embeddings call ended.
#[derive(Debug)]
pub enum EmbedEnd {
    /// The upstream's answer.
    Answer(Embedded),
    /// A budget refused.
    Refused(crate::resilience::budget::BudgetExceeded),
    /// The model's breaker is open or its provider has no capacity.
    Unavailable(String),
    /// The upstream failed.
    Failed(Box<ProviderError>),
}

impl Calls<'_> {
    /// Makes embeddings call `call` on model `mi`: one attempt, admitted,
    /// made within the provider's timeout, settled and ended.
    pub(in crate::runner) async fn embed(&self, call: &EmbedCall, mi: usize, tally: &mut Tally) -> EmbedEnd {
        let m = &self.catalog.models[mi];
        let p = &self.catalog.providers[m.provider];
        let spend = crate::runner::stream::Spend::default();
        let ask = Ask {
            model: mi,
            user: &call.user,
            tenant: &call.user,
            chars: call.chars,
            max_tokens: 0,
            priority: Default::default(),
            deadline: None,
        };
        let (mut held, now) = match self.admit(ask, || false).await {
            Ok(h) => h,
            Err(refusal) => {
                return match self.refused(call.id, mi, refusal, 1) {
                    Ok(hop) => {
                        let why = match hop.result {
                            HopResult::Open => format!("{} is unavailable (breaker open)", m.name),
                            _ => format!("{} has no rate-limit capacity now", m.name),
                        };
                        tally.hops.push(hop);
                        EmbedEnd::Unavailable(why)
                    }
                    Err(e) => {
                        self.note_budget_rejection(&call.user, &e);
                        EmbedEnd::Refused(e)
                    }
                };
            }
        };
        let targets = self.catalog.model_targets(mi);
        let attempt = self.attempt(&targets, now, tally);
        held.calling = Some(super::admission::Calling {
            spend: &spend,
            request: call.id,
            admitted: attempt.start(),
            leg: None,
        });
        let req = EmbedRequest {
            request_id: call.id,
            model: m.api_name.clone(),
            body: call.body.clone(),
            chars: call.chars,
        };
        let made = crate::provider::within(p.timeout, "embeddings call", p.client.embed(&req));
        let result = attempt.make(&mut held.watched(), p.timeout, || false, made).await;
        let end = self.clock.now();
        let (probes, reserved) = held.disarm();
        let (usage, rate, failure) = match &result {
            Ok(e) => (e.usage, e.rate, None),
            Err(e) => (
                e.usage,
                *crate::resilience::limiter::RateFeedback::of(&e.rate),
                Some(e.kind),
            ),
        };
        // Embeddings answer in their own time: no sample of the chat latency.
        let spent = Spent {
            usage,
            rate: &rate,
            signal: super::admission::signal(failure, None, attempt.start()),
            end,
        };
        self.settle(&call.user, mi, reserved, &spent, tally);
        let rec = CallRecord {
            failure: failure.map(ErrorKind::failure),
            tokens: usage.total(),
            ..CallRecord::default()
        };
        let provider = self.catalog.registry.get(p.target);
        let failed = result.as_ref().err();
        let timing = attempt.timing(end, None);
        attempt.end(probes, Verdict::from(&result), rec, timing, |latency| Attempt {
            model: Some(m.name.to_string()),
            status: failed.map_or(Some(200), |e| e.status),
            transport: failed.and_then(|e| e.kind.transport()),
            latency_ms: latency.as_millis() as u64,
            input_tokens: usage.input,
            cost_usd: m.cost(usage.input, usage.output),
            rate,
            ..Attempt::of(call.id, provider.target.clone())
        });
        tally.hops.push(Tried {
            model: mi,
            result: match &result {
                Ok(_) => HopResult::Ok,
                Err(e) => HopResult::Failed(e.kind, e.status),
            },
            tries: 1,
        });
        match result {
            Ok(e) => EmbedEnd::Answer(e),
            Err(e) => EmbedEnd::Failed(Box::new(e)),
        }
    }
}
