//! Every breaker target (providers, models, tools) with its counters, in a
//! registry that views can enumerate.

use crate::config::BreakerConfig;
use crate::resilience::breaker::Breaker;
use crate::target::Target;
use crate::telemetry::stats::TargetStats;
use std::collections::HashMap;
use std::sync::Arc;

/// One target: its breaker and counters.
pub struct Entry {
    /// What it is.
    pub target: Target,
    /// Its breaker.
    pub breaker: Breaker,
    /// Its counters.
    pub stats: TargetStats,
    /// Its breaker's settings, for views (new ones on a reload).
    pub config: parking_lot::RwLock<Arc<BreakerConfig>>,
}

/// All targets, addressable by index or name.
#[derive(Default)]
pub struct Registry {
    targets: Vec<Entry>,
    index: HashMap<Target, usize>,
}

impl Registry {
    /// Adds a target; returns its index.
    pub fn add(&mut self, target: Target, breaker: Breaker, config: BreakerConfig) -> usize {
        let i = self.targets.len();
        self.index.insert(target.clone(), i);
        self.targets.push(Entry {
            config: parking_lot::RwLock::new(Arc::new(config)),
            target,
            breaker,
            stats: TargetStats::default(),
        });
        i
    }

    /// The target at `i`.
    #[inline]
    pub fn get(&self, i: usize) -> &Entry {
        &self.targets[i]
    }

    /// The entry of `target`.
    pub fn find(&self, target: &Target) -> Option<&Entry> {
        self.index.get(target).map(|&i| &self.targets[i])
    }

    /// Every target, in registration order.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.targets.iter()
    }

    /// Number of targets.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }
}
