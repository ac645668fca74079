//! The resilience runner: the one place an agent request goes through every
//! layer (session quota → budgets → limiter → breakers → provider/tool with
//! retries → degradation), emits events, and ends in exactly one outcome.

pub mod agent;
mod align;
pub mod calls;
pub mod catalog;
pub mod chat;
mod deferral;
pub mod embed;
mod ending;
mod needs;
pub mod operations;
pub mod registry;
mod scope;
pub mod shared;
mod snapshot;
pub mod stream;
pub mod tool_call;

use crate::clock::{Clock, Seed};
use crate::config::{Config, Priority};
use crate::outcome::Level;
use crate::provider::fault::FaultTable;
use crate::provider::{LlmResponse, Provider, ToolSpec};
use crate::resilience::budget::Budgets;
use crate::resilience::cache::ResultCache;
use crate::resilience::defer::{Spool, SpoolError};
use crate::resilience::retry::RetryBudget;
use crate::resilience::session::SessionQuotas;
use crate::telemetry::events::EventBus;
use crate::tools::{MockTools, ToolExecutor};
pub use calls::{own_params, Calls, HopResult, LlmCall, LlmFailure, Tally, ToolFailure, ToolUse, Tried};
pub use catalog::{Catalog, ModelSlot, ProviderSlot, RouteSlot, ToolSlot};
use dashmap::DashMap;
pub use deferral::Deferral;
pub use operations::{command, reload, Operations};
use shared::Shared;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Routes and tools by name, looked up on every call (ahash: SipHash showed
/// in profiles).
pub type NameMap<V> = HashMap<String, V, ahash::RandomState>;

/// Totals over the run.
#[derive(Default)]
pub struct Totals {
    /// Requests received.
    pub requests: AtomicU64,
    /// Outcomes by level.
    pub by_level: [AtomicU64; 5],
    /// Tokens consumed.
    pub tokens: AtomicU64,
    /// Tokens consumed by failed calls.
    pub wasted: AtomicU64,
    /// Cost in micro-dollars.
    pub cost_micro_usd: AtomicU64,
    /// Budget rejections per user.
    pub budget_rejections: DashMap<String, u64>,
    /// Deferred requests finally completed, by level.
    pub deferred_done: [AtomicU64; 5],
    /// Requests whose client went away before their answer (counted as
    /// `failed` too, and apart here so a provider's failures stand out).
    pub abandoned: AtomicU64,
    /// Trace spans dropped (or the events they were made of): the export
    /// queue was full or the collector could not take them.
    pub spans_dropped: Arc<AtomicU64>,
    /// The front door is closing: a request ended before its answer ends
    /// because of that, not because its client left.
    pub closing: std::sync::atomic::AtomicBool,
}

/// What the runner is built from besides its config.
pub struct RunnerParts {
    /// The clock.
    pub clock: Clock,
    /// The seed.
    pub seed: Seed,
    /// Provider clients by provider name; missing ones get the mock.
    pub providers: HashMap<String, Arc<dyn Provider>>,
    /// The tool executor (default: mock tools).
    pub tools: Option<Arc<dyn ToolExecutor>>,
    /// Faults of the mock providers.
    pub faults: Arc<FaultTable>,
    /// Spool file for deferred requests (None = no defer).
    pub spool: Option<PathBuf>,
}

impl RunnerParts {
    /// Mock providers, given clock and seed, no spool.
    pub fn mock(clock: Clock, seed: Seed) -> Self {
        Self {
            clock,
            seed,
            providers: HashMap::new(),
            tools: None,
            faults: Arc::new(FaultTable::default()),
            spool: None,
        }
    }
}

/// The runner.
pub struct Runner {
    cfg: Config,
    clock: Clock,
    seed: Seed,
    events: Arc<EventBus>,
    catalog: Catalog,
    executor: Arc<dyn ToolExecutor>,
    budgets: Budgets,
    sessions: SessionQuotas,
    retry_budget: RetryBudget,
    cache: ResultCache,
    /// Tool argument schemas, compiled once each.
    schemas: crate::tools::Schemas,
    /// An empty tool list, shared by every call that offers no tools.
    no_tools: Arc<[ToolSpec]>,
    spool: Option<Spool>,
    faults: Arc<FaultTable>,
    drill: AtomicBool,
    totals: Totals,
    store: Arc<crate::telemetry::store::StoreStatus>,
    /// Whose fair share each user's calls use where calls queue.
    tenants: calls::tenants::Tenants,
    /// Fleet mode: the fleet's budgets, deferred stream and trips.
    shared: std::sync::OnceLock<Arc<dyn Shared>>,
    /// The config file a reload reads again (`serve --config`).
    reload_source: std::sync::OnceLock<reload::Source>,
}

impl Runner {
    /// Builds a runner from a validated config.
    pub fn new(cfg: Config, parts: RunnerParts) -> Result<Arc<Self>, SpoolError> {
        let RunnerParts {
            clock,
            seed,
            providers,
            tools,
            faults,
            spool,
        } = parts;
        let now = clock.now();
        let events = EventBus::new(clock, 2_000);
        let catalog = Catalog::build(&cfg, providers, (seed, &faults), &events, now);
        let spool = spool.map(|p| Spool::open(&p)).transpose()?;
        let budgets = Budgets::new(cfg.budgets.clone(), events.clone());
        // A caller key's user has the key's budgets.
        for k in cfg.keys.values() {
            if let Some(own) = k.budgets {
                budgets.set_own(&k.user, own);
            }
        }
        Ok(Arc::new(Self {
            executor: tools.unwrap_or_else(|| Arc::new(MockTools::new(seed, faults.clone()))),
            budgets,
            sessions: SessionQuotas::new(cfg.sessions.clone()),
            retry_budget: RetryBudget::new(&cfg.retry, now),
            cache: ResultCache::new(cfg.degradation.cache_capacity),
            schemas: crate::tools::Schemas::default(),
            no_tools: Arc::from(Vec::new()),
            tenants: calls::tenants::Tenants::new(&cfg.limiter.queue),
            cfg,
            clock,
            seed,
            events,
            catalog,
            spool,
            faults,
            drill: AtomicBool::new(false),
            totals: Totals::default(),
            store: Arc::default(),
            shared: std::sync::OnceLock::new(),
            reload_source: std::sync::OnceLock::new(),
        }))
    }

    /// Where shared state lives and how it is doing.
    pub fn store(&self) -> &Arc<crate::telemetry::store::StoreStatus> {
        &self.store
    }

    /// Joins a fleet: from now on budgets, deferral and trips are shared
    /// through `fleet`. Only the first call counts.
    pub fn share_with(&self, fleet: Arc<dyn Shared>) {
        let _ = self.shared.set(fleet);
    }

    /// The priority a call of `user` made without a key gets on `route`
    /// for asking `asked`: no more urgent than the operator gives its
    /// tenant or route (`[limiter.queue] trust_priority` lets callers
    /// choose); `None` where that is its route's.
    pub fn priority_for(&self, user: &str, asked: Option<Priority>, route: &str) -> Option<Priority> {
        let of_route = self
            .catalog
            .route_for(route)
            .map(|r| r.cfg.priority)
            .unwrap_or_default();
        let p = self.tenants.grant(user, asked, of_route);
        (p != of_route).then_some(p)
    }

    /// What the config built: targets, providers, models, routes, tools.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The run's seed.
    pub fn seed(&self) -> Seed {
        self.seed
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The event bus.
    pub fn events(&self) -> &Arc<EventBus> {
        &self.events
    }

    /// The budgets.
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }

    /// The session quotas.
    pub fn sessions(&self) -> &SessionQuotas {
        &self.sessions
    }

    /// The mock providers' faults.
    pub fn faults(&self) -> &Arc<FaultTable> {
        &self.faults
    }

    /// The deferred-request spool, if deferring is on.
    pub fn spool(&self) -> Option<&Spool> {
        self.spool.as_ref()
    }

    /// What a call borrows: see [`Calls`].
    pub fn calls(&self) -> Calls<'_> {
        Calls {
            cfg: &self.cfg,
            clock: &self.clock,
            seed: self.seed,
            events: &self.events,
            catalog: &self.catalog,
            budgets: &self.budgets,
            tenants: &self.tenants,
            retry_budget: &self.retry_budget,
            shared: &self.shared,
            schemas: &self.schemas,
            executor: &*self.executor,
            cache: &self.cache,
            totals: &self.totals,
            drill: &self.drill,
        }
    }

    /// Where requests are deferred to and re-driven from: see [`Deferral`].
    pub fn deferral(&self) -> Deferral<'_> {
        Deferral {
            cfg: &self.cfg.degradation,
            clock: &self.clock,
            catalog: &self.catalog,
            events: &self.events,
            spool: self.spool.as_ref(),
            shared: &self.shared,
            totals: &self.totals,
        }
    }

    /// Runs one LLM call through its route's chain (see [`Calls::call`]).
    pub async fn call_llm(&self, call: &LlmCall<'_>, tally: &mut Tally) -> Result<(LlmResponse, usize), LlmFailure> {
        self.calls().call(call, tally, None).await
    }

    /// What an operator may do here: commands, reloads.
    pub fn operations(&self) -> Operations<'_> {
        Operations {
            cfg: &self.cfg,
            catalog: &self.catalog,
            clock: &self.clock,
            events: &self.events,
            faults: &self.faults,
            budgets: &self.budgets,
            drill: &self.drill,
            source: &self.reload_source,
        }
    }

    /// Whether fault-drill mode is on.
    pub fn drill(&self) -> bool {
        self.drill.load(Ordering::Relaxed)
    }

    /// Run totals.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    /// Requests begun and not yet ended in their outcome.
    pub fn in_flight(&self) -> u64 {
        let ended: u64 = self.by_level().iter().sum();
        self.totals.requests.load(Ordering::Relaxed).saturating_sub(ended)
    }

    /// Outcomes so far by level.
    pub fn by_level(&self) -> [u64; 5] {
        let mut out = [0; 5];
        for l in Level::ALL {
            out[l.index()] = self.totals.by_level[l.index()].load(Ordering::Relaxed);
        }
        out
    }

    /// Moves time-driven breaker transitions and evicts idle users and
    /// sessions; call periodically (the publisher does).
    pub fn maintain(&self) {
        let now = self.clock.now();
        for t in self.catalog.registry.iter() {
            t.breaker.tick(now);
        }
        let ms = self.clock.ms_at(now);
        self.budgets.evict_idle(ms);
        self.sessions.evict_idle(ms);
    }
}
