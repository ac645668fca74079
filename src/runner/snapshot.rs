//! Taking a snapshot of the runner's state, and the publisher that takes one
//! at most ~30 times a second.

use super::Runner;
use crate::telemetry::snapshot::{BreakerRow, ChainHop, LimiterRow, Snapshot, UserRow};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

impl Runner {
    /// Builds a snapshot of the runner's state now.
    pub fn snapshot(&self, users: usize, events: usize) -> Snapshot {
        let now = self.clock.now();
        let ms = self.clock.ms_at(now);
        let breakers = self
            .catalog
            .registry
            .iter()
            .enumerate()
            .map(|(i, t)| BreakerRow {
                target: t.target.clone(),
                config: t.config.read().clone(),
                breaker: t.breaker.view(now),
                stats: t.stats.view(),
                pool: self
                    .catalog
                    .tools
                    .iter()
                    .find(|s| s.target == i)
                    .map(|s| s.bulkhead.view()),
                instance: None,
            })
            .collect();
        let limiters = self
            .catalog
            .providers
            .iter()
            .map(|p| LimiterRow {
                provider: p.name.clone(),
                limiter: p.limiter.view(now),
                instance: None,
            })
            .collect();
        let routes = self
            .catalog
            .routes
            .values()
            .map(|r| {
                let hops = r
                    .chain
                    .iter()
                    .map(|&m| {
                        let m = &self.catalog.models[m];
                        let p = &self.catalog.providers[m.provider];
                        ChainHop {
                            model: m.name.to_string(),
                            provider: p.name.clone(),
                            available: self.catalog.registry.get(p.target).breaker.would_admit(now)
                                && self.catalog.registry.get(m.target).breaker.would_admit(now),
                        }
                    })
                    .collect();
                (r.name.clone(), hops)
            })
            .collect();
        Snapshot {
            t_ms: ms,
            wall_ms: self.clock.wall_ms(),
            requests: self.totals.requests.load(Ordering::Relaxed),
            by_level: self.by_level(),
            tokens: self.totals.tokens.load(Ordering::Relaxed),
            cost_usd: self.totals.cost_micro_usd.load(Ordering::Relaxed) as f64 / 1e6,
            breakers,
            limiters,
            global: self.budgets.global_view(ms),
            top_users: self
                .budgets
                .top_users(users, ms)
                .into_iter()
                .map(|view| UserRow { view, instance: None })
                .collect(),
            tracked_users: self.budgets.tracked_users(),
            routes,
            faults: self.faults.all(),
            drill: self.drill(),
            deferred_pending: self.spool.as_ref().map_or(0, |s| s.len()),
            spans_dropped: self.totals.spans_dropped.load(Ordering::Relaxed),
            descriptor_refusals: crate::descriptors::view().refused,
            events: self.events.recent(events),
            store: self.store.view(),
            instances: Vec::new(),
        }
    }

    /// Publishes a snapshot (with the top `users` and the last `events`)
    /// every `every` (≥ 33 ms) and keeps breakers and idle-state eviction
    /// moving; ends when every receiver is gone.
    pub fn spawn_publisher(
        self: &Arc<Self>,
        every: Duration,
        users: usize,
        events: usize,
    ) -> watch::Receiver<Arc<Snapshot>> {
        let every = every.max(Duration::from_millis(33));
        let (tx, rx) = watch::channel(Arc::new(self.snapshot(users, events)));
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                me.maintain();
                if tx.send(Arc::new(me.snapshot(users, events))).is_err() {
                    break;
                }
            }
        });
        rx
    }
}
