//! What the config built, fixed for the runner's life: every breaker
//! target, the providers with their limiters and clients, the models, the
//! routes (and the routes serving a client that names a model), the tools
//! with their bulkheads. A reload changes breaker settings in place
//! ([`super::reload`]); anything else needs a restart.

mod slots;

use super::calls::{HopResult, Tally, Tried};
use super::needs::let_down;
use super::registry::Registry;
use super::NameMap;
use crate::clock::Seed;
use crate::config::{Config, RouteConfig};
use crate::outcome::Level;
use crate::provider::fault::FaultTable;
use crate::provider::mock::MockProvider;
use crate::provider::Provider;
use crate::resilience::breaker::Breaker;
use crate::resilience::bulkhead::Bulkhead;
use crate::resilience::limiter::Limiter;
use crate::target::Target;
use crate::telemetry::events::EventBus;
pub use slots::{ModelSlot, ProviderSlot, RouteSlot, ToolSlot};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The providers, models, routes and tools, and their breakers.
pub struct Catalog {
    pub(super) registry: Registry,
    pub(super) providers: Vec<ProviderSlot>,
    pub(super) models: Vec<ModelSlot>,
    pub(super) routes: NameMap<RouteSlot>,
    /// What serves a client naming a model rather than a route, by the
    /// model's name and its `api_name` ([`model_routes`]).
    pub(super) model_routes: NameMap<RouteSlot>,
    pub(super) tools: Vec<ToolSlot>,
    pub(super) tool_index: NameMap<usize>,
}

impl Catalog {
    /// Builds what `cfg` names, each provider's client from `providers`
    /// (a mock one, with `seed` and `faults`, where none is given), each
    /// breaker telling `events`.
    pub(super) fn build(
        cfg: &Config,
        mut providers: HashMap<String, Arc<dyn Provider>>,
        (seed, faults): (Seed, &Arc<FaultTable>),
        events: &Arc<EventBus>,
        now: tokio::time::Instant,
    ) -> Self {
        let mut registry = Registry::default();
        let breaker = |reg: &mut Registry, target: Target| {
            let config = cfg.breaker_for(&target).clone();
            let b = Breaker::new(target.clone(), config.clone(), events.clone(), now);
            reg.add(target, b, config)
        };
        let mut provider_slots = Vec::new();
        let mut provider_index = HashMap::new();
        for (name, p) in &cfg.providers {
            let target = breaker(&mut registry, Target::provider(name));
            let client = providers
                .remove(name)
                .unwrap_or_else(|| Arc::new(MockProvider::new(name, seed, faults.clone())));
            provider_index.insert(name.clone(), provider_slots.len());
            provider_slots.push(ProviderSlot {
                name: name.clone(),
                target,
                limiter: Limiter::new(name, p, cfg.limiter.clone(), events.clone(), now),
                client,
                timeout: Duration::from_millis(p.timeout_ms),
            });
        }
        let mut models = Vec::new();
        let mut model_index = HashMap::new();
        for (name, m) in &cfg.models {
            let model = Target::model(name);
            let min_tokens_per_s = cfg.breaker_for(&model).min_tokens_per_s;
            let target = breaker(&mut registry, model);
            model_index.insert(name.clone(), models.len());
            models.push(ModelSlot {
                name: name.as_str().into(),
                api_name: m.api_name.as_deref().unwrap_or(name).into(),
                provider: provider_index[&m.provider],
                target,
                cfg: m.clone(),
                latency_ms: AtomicU64::new(0),
                min_tokens_per_s,
                prefill: m
                    .prefill
                    .unwrap_or_else(|| cfg.providers[&m.provider].kind.takes_prefill())
                    .into(),
            });
        }
        let routes = route_slots(cfg, &model_index);
        let model_routes = model_routes(&routes, &models);
        let (tool_slots, tool_index) = tool_slots(cfg, |t| breaker(&mut registry, t));
        Self {
            registry,
            providers: provider_slots,
            models,
            routes,
            model_routes,
            tools: tool_slots,
            tool_index,
        }
    }

    /// Every breaker target.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The providers.
    pub fn providers(&self) -> &[ProviderSlot] {
        &self.providers
    }

    /// The models.
    pub fn models(&self) -> &[ModelSlot] {
        &self.models
    }

    /// The routes.
    pub fn routes(&self) -> &NameMap<RouteSlot> {
        &self.routes
    }

    /// The routes serving clients that name a model.
    pub fn model_routes(&self) -> &NameMap<RouteSlot> {
        &self.model_routes
    }

    /// The tools.
    pub fn tools(&self) -> &[ToolSlot] {
        &self.tools
    }

    /// The route called `name`.
    pub fn route(&self, name: &str) -> Option<&RouteSlot> {
        self.routes.get(name)
    }

    /// What a client's `model` asks for: the route of that name, else the
    /// model of that name (or `api_name`) first, then the models after it
    /// in its route's chain.
    pub fn route_for(&self, name: &str) -> Option<&RouteSlot> {
        self.routes.get(name).or_else(|| self.model_routes.get(name))
    }

    /// Model `mi`'s targets: its provider's, then its own.
    #[inline]
    pub(super) fn model_targets(&self, mi: usize) -> [&super::registry::Entry; 2] {
        let m = &self.models[mi];
        [
            self.registry.get(self.providers[m.provider].target),
            self.registry.get(m.target),
        ]
    }
    /// Model `mi`'s target (`model:NAME`).
    pub(super) fn model_target(&self, mi: usize) -> crate::target::Target {
        self.registry.get(self.models[mi].target).target.clone()
    }
    /// Whether both breakers of a model would admit a call now.
    pub(crate) fn admits(&self, m: &ModelSlot, now: tokio::time::Instant) -> bool {
        let p = &self.providers[m.provider];
        self.registry.get(p.target).breaker.would_admit(now) && self.registry.get(m.target).breaker.would_admit(now)
    }
    /// How a hop went, as its outcome says it.
    pub fn hop_of(&self, h: &Tried) -> crate::outcome::Hop {
        use crate::outcome::HopEnd;
        let end = match &h.result {
            HopResult::Ok => HopEnd::Ok,
            HopResult::Open => HopEnd::Open,
            HopResult::Rate => HopEnd::Rate,
            HopResult::Shed(..) => HopEnd::Shed,
            HopResult::Sla => HopEnd::Sla,
            HopResult::Failed(k, s) => HopEnd::Failed(k.label(*s).into()),
            HopResult::Semantic(_) => HopEnd::Semantic,
            HopResult::Cut(e) => HopEnd::Cut(e.kind.label(e.status).into()),
            HopResult::OverBudget => HopEnd::Cut("budget".into()),
            HopResult::Resumed => HopEnd::Resumed,
            HopResult::Unaligned(_) => HopEnd::Cut("unaligned".into()),
            HopResult::Unsupported(why) => HopEnd::Unsupported(why.clone()),
            HopResult::Outrun => HopEnd::Outrun,
        };
        crate::outcome::Hop {
            tries: h.tries,
            ..crate::outcome::Hop::new(&self.models[h.model].name, end)
        }
    }
    /// Whether a tool is critical for this request.
    pub fn is_critical(&self, tool: usize, extra: &[String]) -> bool {
        let t = &self.tools[tool];
        t.cfg.critical || extra.contains(&t.name)
    }
    /// The targets `tally` shows the request needed, each once, with
    /// whether any of its uses let the request down.
    pub(crate) fn needs(&self, tally: &Tally) -> SmallVec<[(usize, bool); 4]> {
        let mut seen: SmallVec<[(usize, bool); 4]> = SmallVec::new();
        let mut note = |t: usize, down: bool| match seen.iter_mut().find(|(s, _)| *s == t) {
            Some(e) => e.1 |= down,
            None => seen.push((t, down)),
        };
        for h in &tally.hops {
            let Some(down) = let_down(&h.result) else { continue };
            let m = &self.models[h.model];
            note(m.target, down);
            note(self.providers[m.provider].target, down);
        }
        for &(t, down) in &tally.tools {
            note(t, down);
        }
        seen
    }
    /// The quality of an answer from model `answered` relative to the
    /// route's first choice `primary` (at most 1).
    pub(super) fn quality_ratio(&self, answered: usize, primary: usize) -> f64 {
        (self.models[answered].cfg.quality / self.models[primary].cfg.quality.max(1e-9)).min(1.0)
    }

    /// Whether any of `models` would take a call at `now`.
    pub(super) fn any_admits(&self, models: &[usize], now: tokio::time::Instant) -> bool {
        models.iter().any(|&m| self.admits(&self.models[m], now))
    }

    /// Whether any model could take a call at `now` (its and its
    /// provider's breakers admit): where none can, deferred requests wait
    /// elsewhere.
    pub fn any_model_admits(&self, now: tokio::time::Instant) -> bool {
        self.models.iter().any(|m| self.admits(m, now))
    }

    /// An attempt's share of the time left before `deadline` (none
    /// without one): all of it for the last model that could take the
    /// call, else an even share with each later one that could.
    pub(super) fn share_of(
        &self,
        deadline: Option<tokio::time::Instant>,
        rest: &[usize],
        now: tokio::time::Instant,
    ) -> Option<Duration> {
        let left = deadline?.saturating_duration_since(now);
        let later = rest.iter().filter(|&&m| self.admits(&self.models[m], now)).count() as u32;
        Some(left / (later + 1))
    }

    /// Counts a request that ended at `level` on every target it needed,
    /// and as degraded on those that let it down when it was degraded.
    pub(super) fn count_needs(&self, tally: &Tally, level: Level) {
        for (t, down) in self.needs(tally) {
            let s = &self.registry.get(t).stats;
            s.needed.inc();
            if down && level != Level::None {
                s.degraded.inc();
            }
        }
    }

    /// The models a caller allowed only `names` (routes or models) may
    /// reach on any hop: every model of each route's chain, and each model
    /// itself (not what it falls back to, unless named too).
    pub fn reach_of(&self, names: &[String]) -> Arc<[usize]> {
        let mut reach: Vec<usize> = Vec::new();
        for n in names {
            match self.routes.get(n.as_str()) {
                Some(r) => reach.extend(&r.chain),
                None => reach.extend(self.model_routes.get(n.as_str()).map(|r| r.chain[0])),
            }
        }
        reach.sort_unstable();
        reach.dedup();
        reach.into()
    }
}

/// For each model, what serves a client that names it: the model first,
/// then the models after it in its home route's chain (the route where it
/// comes earliest; of those, `default`, else the first by name), with that
/// route's settings; only the model itself where the route says
/// `named_fallback = false` or no route holds it. Keyed by name, and by
/// `api_name` where that names nothing else.
fn model_routes(routes: &NameMap<RouteSlot>, models: &[ModelSlot]) -> NameMap<RouteSlot> {
    let mut out = NameMap::default();
    for (mi, m) in models.iter().enumerate() {
        let home = routes
            .values()
            .filter_map(|r| r.chain.iter().position(|&c| c == mi).map(|at| (r, at)))
            .min_by_key(|(r, at)| (*at, r.name != "default", r.name.clone()));
        let (chain, cfg) = match home {
            Some((r, at)) if r.cfg.named_fallback => (r.chain[at..].to_vec(), r.cfg.clone()),
            Some((r, _)) => (vec![mi], r.cfg.clone()),
            None => (
                vec![mi],
                RouteConfig {
                    deadline_ms: 0,
                    chain: Vec::new(),
                    max_tokens_factor: 1.0,
                    trim_prompt_on_fallback: false,
                    latency_sla_ms: 0,
                    defer: false,
                    named_fallback: false,
                    stream_resume: false,
                    priority: Default::default(),
                    hedge: Default::default(),
                },
            ),
        };
        let slot = |name: &str| RouteSlot {
            name: name.to_string(),
            chain: chain.clone(),
            cfg: cfg.clone(),
        };
        out.insert(m.name.to_string(), slot(&m.name));
        let api = &*m.api_name;
        if api != &*m.name && !routes.contains_key(api) && !models.iter().any(|o| &*o.name == api) {
            out.entry(api.to_string()).or_insert_with(|| slot(api));
        }
    }
    out
}

impl ModelSlot {
    /// Folds one call's latency into the moving average the route plan
    /// reads (a fifth of the new, four fifths of the old).
    pub(super) fn note_latency(&self, latency: Duration) {
        let ms = latency.as_millis() as u64;
        let old = self.latency_ms.load(Ordering::Relaxed);
        let new = if old == 0 { ms } else { (old * 4 + ms) / 5 };
        self.latency_ms.store(new, Ordering::Relaxed);
    }
}

/// Each route with its chain as model indexes.
fn route_slots(cfg: &Config, model_index: &HashMap<String, usize>) -> NameMap<RouteSlot> {
    cfg.routes
        .iter()
        .map(|(name, r)| {
            let slot = RouteSlot {
                name: name.clone(),
                chain: r.chain.iter().map(|m| model_index[m]).collect(),
                cfg: r.clone(),
            };
            (name.clone(), slot)
        })
        .collect()
}

/// Each tool with its bulkhead and breaker (from `breaker`), and the index
/// of each by name.
fn tool_slots(cfg: &Config, mut breaker: impl FnMut(Target) -> usize) -> (Vec<ToolSlot>, NameMap<usize>) {
    let mut slots = Vec::new();
    let mut index = NameMap::default();
    for ((name, t), spec) in cfg.tools.iter().zip(crate::tools::specs(cfg)) {
        index.insert(name.clone(), slots.len());
        slots.push(ToolSlot {
            name: name.clone(),
            target: breaker(Target::tool(name)),
            cfg: t.clone(),
            bulkhead: Bulkhead::new(t.pool, t.queue),
            spec,
        });
    }
    (slots, index)
}
