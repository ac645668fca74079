//! Whose fair share a call uses where calls queue: its user's tenant in
//! `[limiter.queue.tenants]`, else its user alone with weight 1; and how
//! urgent a call without a key may be: what the operator says, not what
//! the caller asks.

use crate::config::{Priority, QueueConfig};
use crate::resilience::limiter::Place;
use std::collections::HashMap;
use std::sync::Arc;

/// Each grouped user's tenant, and whether callers choose their priority.
#[derive(Default)]
pub(in crate::runner) struct Tenants {
    users: HashMap<Box<str>, Grouped>,
    trust_priority: bool,
}

/// A grouped user's tenant, weight and most urgent priority.
struct Grouped {
    tenant: Arc<str>,
    weight: u32,
    priority: Option<Priority>,
}

impl Tenants {
    /// The tenants `cfg` groups users into.
    pub(in crate::runner) fn new(cfg: &QueueConfig) -> Self {
        let mut users = HashMap::new();
        for (name, t) in &cfg.tenants {
            let tenant: Arc<str> = name.as_str().into();
            for u in &t.users {
                let g = Grouped {
                    tenant: tenant.clone(),
                    weight: t.weight,
                    priority: t.priority,
                };
                users.insert(u.as_str().into(), g);
            }
        }
        Self {
            users,
            trust_priority: cfg.trust_priority,
        }
    }

    /// The priority a call of `user` without a key gets for asking
    /// `asked` on a route of priority `route`: what it asks, no more
    /// urgent than its tenant's priority, else its route's (unless the
    /// config trusts callers).
    pub(in crate::runner) fn grant(&self, user: &str, asked: Option<Priority>, route: Priority) -> Priority {
        let Some(asked) = asked else { return route };
        if self.trust_priority {
            return asked;
        }
        let cap = self.users.get(user).and_then(|g| g.priority).unwrap_or(route);
        asked.max(cap)
    }

    /// A key for `user`'s tenant (its group's, else its own), and its
    /// weight: whose call an adaptive limit hears of, and whose share of
    /// the slots it uses.
    pub(super) fn key(&self, user: &str) -> (u64, u32) {
        match self.users.get(user) {
            Some(g) => (Place::key_of(&g.tenant), g.weight),
            None => (Place::key_of(user), 1),
        }
    }

    /// Where a call of `user` at `priority` waits.
    pub(super) fn place(&self, user: &str, priority: Priority) -> Place {
        match self.users.get(user) {
            Some(g) => Place::new(priority, g.tenant.clone(), g.weight),
            None => Place::new(priority, user.into(), 1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_users_share_their_tenant_and_others_stand_alone() {
        let cfg: QueueConfig = toml::from_str("[tenants.acme]\nusers = [\"alice\", \"bob\"]\nweight = 3\n").unwrap();
        let t = Tenants::new(&cfg);
        let p = t.place("bob", Priority::Batch);
        assert_eq!((&*p.tenant, p.weight, p.priority), ("acme", 3, Priority::Batch));
        let p = t.place("carol", Priority::Default);
        assert_eq!((&*p.tenant, p.weight), ("carol", 1));
    }

    #[test]
    fn a_caller_without_a_key_asks_no_more_than_the_operator_gives() {
        use Priority::*;
        let toml = "[tenants.ops]\nusers = [\"pager\"]\npriority = \"critical\"\n";
        let cfg: QueueConfig = toml::from_str(toml).unwrap();
        let t = Tenants::new(&cfg);
        // Anyone may ask for less; asking for more stops at the route's.
        assert_eq!(t.grant("flood", Some(Critical), Default), Default);
        assert_eq!(t.grant("flood", Some(Batch), Default), Batch);
        assert_eq!(t.grant("flood", None, Batch), Batch);
        assert_eq!(t.grant("flood", Some(Critical), Batch), Batch);
        // A tenant the operator made critical may ask for it.
        assert_eq!(t.grant("pager", Some(Critical), Default), Critical);
        assert_eq!(t.grant("pager", None, Default), Default);
        // Trusted, callers choose.
        let trusting: QueueConfig = toml::from_str("trust_priority = true\n").unwrap();
        assert_eq!(Tenants::new(&trusting).grant("flood", Some(Critical), Batch), Critical);
    }
}
