//! Spans made of the runner's events: one per request, a child per attempt
//! on a model or tool with the GenAI attributes, and span events for what
//! happened between attempts (short-circuits, skips, retries and their
//! waits, budget refusals, fallbacks, breaker transitions).

use super::names::GenAiNames;
use super::TraceParent;
use crate::outcome::{Level, Outcome};
use crate::request::Via;
use crate::target::{Kind, Target};
use crate::telemetry::events::{Arrival, Attempt, Event, EventKind, Step, StepKind, Transition};
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, SystemTime};

/// A request older than this without an outcome (its outcome event was
/// dropped) is given up, and its spans counted as dropped.
const STALE_MS: u64 = 15 * 60_000;
/// Requests open at most: past this the oldest are given up, so a flood
/// of lost outcomes cannot grow the assembler without bound.
const MAX_OPEN: usize = 65_536;

/// A request whose span is not finished yet.
struct Open {
    arrival: Option<Arrival>,
    start_ms: u64,
    trace_id: TraceId,
    span_id: SpanId,
    parent: Option<TraceParent>,
    attempts: Vec<SpanData>,
    events: Vec<opentelemetry::trace::Event>,
    /// The model tried last, to see a fallback when the next differs.
    last_model: Option<String>,
}

/// Turns events into finished spans, request by request.
pub struct SpanAssembler {
    names: GenAiNames,
    /// Wall time (ms since the Unix epoch) of the runner's time 0.
    origin_ms: u64,
    rng: fastrand::Rng,
    scope: InstrumentationScope,
    open: HashMap<u64, Open>,
    /// Open requests by arrival, to give up the stale.
    arrivals: VecDeque<(u64, u64)>,
    /// The last attempt span per target, to hang a transition it caused on.
    last_attempt: HashMap<Target, (u64, u64)>,
    /// Transitions not yet hung on an attempt (they may come just before it).
    pending: Vec<(u64, Transition)>,
}

impl SpanAssembler {
    /// An assembler for a runner whose time 0 is `origin_ms` on the wall
    /// clock, its ids drawn from `rng`.
    pub fn new(names: GenAiNames, origin_ms: u64, rng: fastrand::Rng) -> Self {
        SpanAssembler {
            names,
            origin_ms,
            rng,
            scope: InstrumentationScope::builder("fusebox")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            open: HashMap::new(),
            arrivals: VecDeque::new(),
            last_attempt: HashMap::new(),
            pending: Vec::new(),
        }
    }

    /// Takes one event; `parent` is the caller's span for a new request.
    /// Finished spans go to `out`; returns how many spans were given up.
    pub fn take(&mut self, ev: Event, parent: impl FnOnce(u64) -> Option<TraceParent>, out: &mut Vec<SpanData>) -> u64 {
        let t = ev.t_ms;
        match ev.kind {
            EventKind::Request(a) => {
                let id = a.request.id;
                let parent = parent(id);
                let open = self.opened(id, t, parent);
                open.arrival = Some(*a);
            }
            EventKind::Attempt(a) => self.attempt(t, *a),
            EventKind::Step(s) => self.step(t, *s),
            EventKind::Transition(x) => self.transition(t, x),
            EventKind::Outcome(o) => {
                let parent = if self.open.contains_key(&o.request) {
                    None
                } else {
                    parent(o.request)
                };
                self.finish(t, *o, parent, out);
            }
            _ => {}
        }
        self.give_up_stale(t)
    }

    fn opened(&mut self, id: u64, t: u64, parent: Option<TraceParent>) -> &mut Open {
        if !self.open.contains_key(&id) {
            let open = self.new_open(t, parent);
            self.arrivals.push_back((t, id));
            self.open.insert(id, open);
        }
        self.open.get_mut(&id).expect("inserted above")
    }

    fn new_open(&mut self, t: u64, parent: Option<TraceParent>) -> Open {
        Open {
            arrival: None,
            start_ms: t,
            trace_id: parent.map_or_else(|| TraceId::from_bytes(self.rng.u128(1..).to_be_bytes()), |p| p.trace_id),
            span_id: SpanId::from_bytes(self.rng.u64(1..).to_be_bytes()),
            parent,
            attempts: Vec::new(),
            events: Vec::new(),
            last_model: None,
        }
    }

    fn wall(&self, t_ms: u64) -> SystemTime {
        wall(self.origin_ms, t_ms)
    }

    fn attempt(&mut self, t: u64, a: Attempt) {
        let Some(open) = self.open.get_mut(&a.request) else {
            return;
        };
        let start = t.saturating_sub(a.latency_ms);
        let tool = a.target.kind() == Kind::Tool;
        let model = a.model.clone().unwrap_or_default();
        let mut events = Vec::new();
        if !tool {
            if let Some(from) = open.last_model.replace(model.clone()).filter(|m| *m != model) {
                open.events.push(event(
                    "fusebox.fallback",
                    wall(self.origin_ms, start),
                    vec![
                        KeyValue::new("fusebox.from", from),
                        KeyValue::new("fusebox.to", model.clone()),
                    ],
                ));
            }
        }
        let span_id = SpanId::from_bytes(self.rng.u64(1..).to_be_bytes());
        let trace_id = open.trace_id;
        let parent = open.span_id;
        let mut attrs = Vec::with_capacity(16);
        let failed = a.status != Some(200) || a.semantic_failure.is_some();
        let name = if tool {
            attrs.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
            attrs.push(KeyValue::new("gen_ai.tool.name", a.target.name().to_string()));
            format!("execute_tool {}", a.target.name())
        } else {
            let (api, system) = self.names.model(&model, a.target.name());
            let op = match open.arrival.as_ref().map(|r| r.via) {
                Some(Via::Embeddings) => "embeddings",
                _ => "chat",
            };
            attrs.push(KeyValue::new("gen_ai.operation.name", op));
            attrs.push(KeyValue::new("gen_ai.provider.name", system.to_string()));
            attrs.push(KeyValue::new("gen_ai.system", system.to_string()));
            attrs.push(KeyValue::new("gen_ai.request.model", api.to_string()));
            if !failed {
                let answered = a.response_model.clone().unwrap_or_else(|| api.to_string());
                attrs.push(KeyValue::new("gen_ai.response.model", answered));
            }
            if let Some(id) = &a.response_id {
                attrs.push(KeyValue::new("gen_ai.response.id", id.clone()));
            }
            attrs.push(KeyValue::new("gen_ai.usage.input_tokens", i64::from(a.input_tokens)));
            attrs.push(KeyValue::new("gen_ai.usage.output_tokens", i64::from(a.output_tokens)));
            attrs.push(KeyValue::new("fusebox.cost_usd", a.cost_usd));
            if let Some(f) = a.finish {
                attrs.push(strings("gen_ai.response.finish_reasons", [f.openai()]));
            }
            attrs.push(KeyValue::new("fusebox.model", model.clone()));
            format!("{op} {api}")
        };
        attrs.push(KeyValue::new("fusebox.target", a.target.to_string()));
        if let Some(s) = a.status {
            attrs.push(KeyValue::new("http.response.status_code", i64::from(s)));
        }
        let error = error_type(&a);
        if let Some(e) = &error {
            attrs.push(KeyValue::new("error.type", e.clone()));
        }
        if let Some(why) = &a.semantic_failure {
            attrs.push(KeyValue::new("fusebox.semantic_failure", why.clone()));
        }
        if let Some(cut) = a.cut {
            attrs.push(KeyValue::new("fusebox.cut", cut.as_str()));
        }
        if !a.tool_calls.is_empty() {
            attrs.push(strings("fusebox.tool_calls", a.tool_calls.iter().map(String::as_str)));
        }
        // A transition that came just before this attempt ended is its own.
        let target = if tool { a.target.clone() } else { Target::model(&model) };
        let provider = a.target.clone();
        let mine = |x: &Transition| x.breaker == target || x.breaker == provider;
        let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|(at, x)| *at == t && mine(x));
        self.pending = later;
        for (at, x) in now {
            let e = transition_event(wall(self.origin_ms, at), &x);
            open.events.push(e.clone());
            events.push(e);
        }
        open.attempts.push(SpanData {
            span_context: SpanContext::new(trace_id, span_id, TraceFlags::SAMPLED, false, TraceState::NONE),
            parent_span_id: parent,
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: Cow::Owned(name),
            start_time: wall(self.origin_ms, start),
            end_time: wall(self.origin_ms, t),
            attributes: attrs,
            dropped_attributes_count: 0,
            events: span_events(events),
            links: SpanLinks::default(),
            status: match error {
                Some(e) => Status::error(e),
                None => Status::Unset,
            },
            instrumentation_scope: self.scope.clone(),
        });
        let at = (a.request, open.attempts.len() as u64 - 1);
        self.last_attempt.insert(target, at);
        self.last_attempt.insert(provider, at);
    }

    fn step(&mut self, t: u64, s: Step) {
        let at = self.wall(t);
        let Some(open) = self.open.get_mut(&s.request) else {
            return;
        };
        let mut attrs = vec![KeyValue::new("fusebox.target", s.target.to_string())];
        let name = match s.kind {
            StepKind::ShortCircuit => "fusebox.short_circuit",
            StepKind::RateLimited => "fusebox.rate_limited",
            StepKind::PoolFull => "fusebox.pool_full",
            StepKind::SlaSkipped => "fusebox.sla_skip",
            StepKind::Unsupported { why } => {
                attrs.push(KeyValue::new("fusebox.reason", why));
                "fusebox.skip"
            }
            StepKind::Retry { wait_ms, after } => {
                attrs.push(KeyValue::new("fusebox.retry.wait_ms", wait_ms as i64));
                attrs.push(KeyValue::new("error.type", after));
                "fusebox.retry"
            }
            StepKind::BudgetRefused { reason } => {
                attrs.push(KeyValue::new("fusebox.reason", reason));
                "fusebox.budget_refused"
            }
            StepKind::Hedge { after_ms } => {
                attrs.push(KeyValue::new("fusebox.hedge.after_ms", after_ms as i64));
                "fusebox.hedge"
            }
            StepKind::Shed { priority, why } => {
                attrs.push(KeyValue::new("fusebox.priority", priority.name()));
                attrs.push(KeyValue::new("fusebox.reason", why.label()));
                "fusebox.shed"
            }
        };
        if s.target.kind() == Kind::Model && name != "fusebox.retry" {
            open.last_model = Some(s.target.name().to_string());
        }
        open.events.push(event(name, at, attrs));
    }

    fn transition(&mut self, t: u64, x: Transition) {
        // Caused by an attempt that just ended: hung on it and its request.
        if let Some(&(request, i)) = self.last_attempt.get(&x.breaker) {
            let wall = self.wall(t);
            if let Some(span) = self
                .open
                .get_mut(&request)
                .and_then(|o| o.attempts.get_mut(i as usize).map(|s| (s, &mut o.events)))
                .filter(|(s, _)| s.end_time == wall)
            {
                let e = transition_event(wall, &x);
                span.0.events.events.push(e.clone());
                span.1.push(e);
                return;
            }
        }
        // Else the attempt that caused it may come next; at most a few wait.
        if self.pending.len() >= 64 {
            self.pending.remove(0);
        }
        self.pending.push((t, x));
    }

    fn finish(&mut self, t: u64, o: Outcome, parent: Option<TraceParent>, out: &mut Vec<SpanData>) {
        let start = t.saturating_sub(o.latency_ms);
        // Without its arrival (dropped), the span still says how it ended.
        let mut open = match self.open.remove(&o.request) {
            Some(open) => open,
            None => self.new_open(start, parent),
        };
        self.last_attempt.retain(|_, (r, _)| *r != o.request);
        // The caller did not sample its trace: neither does fusebox.
        if open.parent.is_some_and(|p| !p.sampled) {
            return;
        }
        let (via, route) = match &open.arrival {
            Some(a) => (a.via, a.request.route.to_string()),
            None => (Via::Gateway, String::new()),
        };
        let op = match via {
            Via::Agent => "invoke_agent",
            Via::Gateway => "chat",
            Via::Embeddings => "embeddings",
            Via::Tool => "execute_tool",
        };
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", op),
            KeyValue::new("fusebox.request.id", o.request as i64),
            KeyValue::new("fusebox.route", route.clone()),
            KeyValue::new("fusebox.user", o.user.to_string()),
            KeyValue::new("fusebox.level", o.level.as_str()),
            texts("fusebox.chain", o.chain.iter().map(ToString::to_string)),
            KeyValue::new("fusebox.quality", o.quality),
            KeyValue::new("fusebox.tokens", o.tokens as i64),
            KeyValue::new("fusebox.cost_usd", o.cost_usd),
            KeyValue::new("fusebox.attempts", i64::from(o.attempts)),
        ];
        if !o.missing.is_empty() {
            attrs.push(strings("fusebox.missing", o.missing.iter().map(String::as_str)));
        }
        if let Some(k) = &o.key {
            attrs.push(KeyValue::new("fusebox.request.key", k.to_string()));
        }
        if let Some(a) = &open.arrival {
            // What a replay of an imported trace needs to ask again.
            let r = &a.request;
            let chars: usize = r.messages.iter().map(|m| m.weight()).sum();
            attrs.push(KeyValue::new("fusebox.session", r.session.to_string()));
            attrs.push(KeyValue::new(
                "fusebox.prompt_tokens",
                i64::from(crate::request::tokens_in_chars(chars)),
            ));
            attrs.push(KeyValue::new("gen_ai.request.max_tokens", i64::from(r.max_tokens)));
            if r.max_steps > 0 {
                attrs.push(KeyValue::new("fusebox.max_steps", i64::from(r.max_steps)));
            }
            if !r.tools.is_empty() {
                attrs.push(strings("fusebox.tools", r.tools.iter().map(String::as_str)));
            }
            if !r.critical_tools.is_empty() {
                attrs.push(strings(
                    "fusebox.critical_tools",
                    r.critical_tools.iter().map(String::as_str),
                ));
            }
            if let Some(s) = &r.sub_user {
                attrs.push(KeyValue::new("fusebox.sub_user", s.to_string()));
            }
            if let Some(p) = r.priority {
                attrs.push(KeyValue::new("fusebox.priority", p.name()));
            }
        }
        let status = match o.level {
            Level::Failed => Status::error(o.user_message.clone().unwrap_or_else(|| "failed".into())),
            _ => Status::Unset,
        };
        if o.level == Level::Failed {
            attrs.push(KeyValue::new("error.type", "fusebox.failed"));
        }
        let span = SpanData {
            span_context: SpanContext::new(
                open.trace_id,
                open.span_id,
                TraceFlags::SAMPLED,
                false,
                TraceState::NONE,
            ),
            parent_span_id: open.parent.map_or(SpanId::INVALID, |p| p.span_id),
            parent_span_is_remote: open.parent.is_some(),
            span_kind: if via == Via::Agent {
                SpanKind::Internal
            } else {
                SpanKind::Server
            },
            name: Cow::Owned(format!("{op} {route}")),
            start_time: self.wall(open.start_ms),
            end_time: self.wall(t),
            attributes: attrs,
            dropped_attributes_count: 0,
            events: span_events(std::mem::take(&mut open.events)),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: self.scope.clone(),
        };
        out.push(span);
        out.append(&mut open.attempts);
    }

    /// Forgets arrivals of requests that ended, and gives up requests open
    /// for longer than [`STALE_MS`] or past [`MAX_OPEN`]; returns the spans lost.
    fn give_up_stale(&mut self, now: u64) -> u64 {
        let mut lost = 0;
        while let Some(&(t, id)) = self.arrivals.front() {
            let open = self.open.get(&id).filter(|o| o.start_ms == t);
            let Some(o) = open else {
                self.arrivals.pop_front();
                continue;
            };
            if now.saturating_sub(t) <= STALE_MS && self.open.len() <= MAX_OPEN {
                break;
            }
            lost += 1 + o.attempts.len() as u64;
            self.open.remove(&id);
            self.arrivals.pop_front();
        }
        lost
    }
}

/// Runner time `t_ms` on the wall clock whose time 0 is `origin_ms`.
fn wall(origin_ms: u64, t_ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(origin_ms + t_ms)
}

/// How an attempt failed, as `error.type`: the HTTP status, a transport
/// failure, or `semantic` for a 200 that was still wrong.
fn error_type(a: &Attempt) -> Option<String> {
    if let Some(t) = a.transport {
        return Some(t.as_str().to_string());
    }
    match a.status {
        Some(200) if a.semantic_failure.is_some() => Some("semantic".into()),
        Some(200) => None,
        Some(s) => Some(s.to_string()),
        None => Some("_OTHER".into()),
    }
}

fn event(name: &'static str, at: SystemTime, attributes: Vec<KeyValue>) -> opentelemetry::trace::Event {
    opentelemetry::trace::Event::new(name, at, attributes, 0)
}

fn transition_event(at: SystemTime, x: &Transition) -> opentelemetry::trace::Event {
    event(
        "fusebox.breaker",
        at,
        vec![
            KeyValue::new("fusebox.breaker", x.breaker.to_string()),
            KeyValue::new("fusebox.breaker.from", x.from.as_str()),
            KeyValue::new("fusebox.breaker.to", x.to.as_str()),
            KeyValue::new("fusebox.reason", x.reason.clone()),
        ],
    )
}

// `SpanEvents` is non-exhaustive: made by default, then filled.
#[allow(clippy::field_reassign_with_default)]
fn span_events(events: Vec<opentelemetry::trace::Event>) -> SpanEvents {
    let mut e = SpanEvents::default();
    e.events = events;
    e
}

fn strings<'a>(key: &'static str, values: impl IntoIterator<Item = &'a str>) -> KeyValue {
    texts(key, values.into_iter().map(str::to_string))
}

fn texts(key: &'static str, values: impl IntoIterator<Item = String>) -> KeyValue {
    let v: Vec<StringValue> = values.into_iter().map(StringValue::from).collect();
    KeyValue::new(key, Value::Array(Array::String(v)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resilience::breaker::BreakerState;

    fn ev(t_ms: u64, kind: EventKind) -> Event {
        Event {
            t_ms,
            kind,
            instance: None,
        }
    }

    fn arrival(id: u64) -> EventKind {
        let mut a = Arrival::default();
        a.request.id = id;
        EventKind::Request(Box::new(a))
    }

    fn attempt(request: u64, status: u16) -> EventKind {
        EventKind::Attempt(Box::new(Attempt {
            model: Some("gpt-4o".into()),
            status: Some(status),
            latency_ms: 10,
            ..Attempt::of(request, Target::provider("openai"))
        }))
    }

    fn outcome(request: u64) -> EventKind {
        EventKind::Outcome(Box::new(Outcome {
            request,
            user: "u".into(),
            level: Level::Failed,
            chain: vec![],
            quality: 0.0,
            tokens: 0,
            cost_usd: 0.0,
            missing: vec![],
            user_message: Some("no model could answer".into()),
            answer: None,
            stale_ms: None,
            attempts: 2,
            latency_ms: 50,
            key: None,
        }))
    }

    fn trip(to: BreakerState) -> EventKind {
        EventKind::Transition(Transition {
            breaker: Target::provider("openai"),
            from: BreakerState::Closed,
            to,
            reason: "3 failures".into(),
        })
    }

    fn names(events: &[opentelemetry::trace::Event]) -> Vec<&str> {
        events.iter().map(|e| &*e.name).collect()
    }

    /// A transition is hung on the attempt that caused it, whether it is
    /// announced just before the attempt's record or just after.
    #[test]
    fn a_transition_goes_on_the_attempt_that_caused_it_and_its_request() {
        let mut a = SpanAssembler::new(GenAiNames::default(), 1_000, fastrand::Rng::with_seed(1));
        let mut out = Vec::new();
        let none = |_| None;
        a.take(ev(0, arrival(1)), none, &mut out);
        a.take(ev(20, attempt(1, 503)), none, &mut out);
        a.take(ev(20, trip(BreakerState::Open)), none, &mut out);
        a.take(ev(40, trip(BreakerState::HalfOpen)), none, &mut out);
        a.take(ev(40, attempt(1, 503)), none, &mut out);
        a.take(ev(50, outcome(1)), none, &mut out);
        assert_eq!(out.len(), 3, "the request and its two attempts");
        let (root, tries) = (&out[0], &out[1..]);
        assert_eq!(names(&root.events), ["fusebox.breaker", "fusebox.breaker"]);
        for t in tries {
            assert_eq!(names(&t.events), ["fusebox.breaker"]);
            assert_eq!(t.parent_span_id, root.span_context.span_id());
            assert_eq!(t.span_context.trace_id(), root.span_context.trace_id());
        }
        assert_eq!(root.status, Status::error("no model could answer"));
        assert_eq!(
            tries[0].start_time,
            SystemTime::UNIX_EPOCH + Duration::from_millis(1_010),
            "an attempt starts its latency before it ended"
        );
    }

    /// A call a hedge outran is traced with what it was charged and what
    /// cut it.
    #[test]
    fn an_outrun_attempt_carries_its_tokens_cost_and_cut() {
        let mut a = SpanAssembler::new(GenAiNames::default(), 0, fastrand::Rng::with_seed(1));
        let mut out = Vec::new();
        a.take(ev(0, arrival(1)), |_| None, &mut out);
        let outrun = Attempt {
            model: Some("gpt-4o".into()),
            latency_ms: 600,
            input_tokens: 9,
            output_tokens: 256,
            cost_usd: 0.002_582_5,
            cut: Some(crate::telemetry::events::Cut::Outrun),
            ..Attempt::of(1, Target::provider("openai"))
        };
        a.take(ev(600, EventKind::Attempt(Box::new(outrun))), |_| None, &mut out);
        a.take(ev(600, outcome(1)), |_| None, &mut out);
        let span = &out[1];
        let attr = |k: &str| {
            span.attributes
                .iter()
                .find(|kv| kv.key.as_str() == k)
                .map(|kv| kv.value.clone())
        };
        assert_eq!(attr("gen_ai.usage.input_tokens"), Some(Value::I64(9)));
        assert_eq!(attr("gen_ai.usage.output_tokens"), Some(Value::I64(256)));
        assert_eq!(attr("fusebox.cost_usd"), Some(Value::F64(0.002_582_5)));
        assert_eq!(attr("fusebox.cut"), Some(Value::from("outrun")));
    }

    /// A request whose outcome never comes is given up, its spans counted.
    #[test]
    fn a_request_without_an_outcome_is_given_up_and_counted() {
        let mut a = SpanAssembler::new(GenAiNames::default(), 0, fastrand::Rng::with_seed(1));
        let mut out = Vec::new();
        a.take(ev(0, arrival(1)), |_| None, &mut out);
        a.take(ev(5, attempt(1, 200)), |_| None, &mut out);
        let lost = a.take(ev(STALE_MS + 1, arrival(2)), |_| None, &mut out);
        assert_eq!((lost, out.len(), a.open.len()), (2, 0, 1));
    }
}
