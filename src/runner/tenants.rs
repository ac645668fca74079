//! Whose fair share a call uses where calls queue: its user's tenant in
//! `[limiter.queue.tenants]`, else its user alone with weight 1.

use crate::config::{Priority, QueueConfig};
use crate::resilience::limiter::Place;
use std::collections::HashMap;
use std::sync::Arc;

/// Each grouped user's tenant and weight.
#[derive(Default)]
pub(super) struct Tenants(HashMap<Box<str>, (Arc<str>, u32)>);

impl Tenants {
    /// The tenants `cfg` groups users into.
    pub(super) fn new(cfg: &QueueConfig) -> Self {
        let mut map = HashMap::new();
        for (name, t) in &cfg.tenants {
            let tenant: Arc<str> = name.as_str().into();
            for u in &t.users {
                map.insert(u.as_str().into(), (tenant.clone(), t.weight));
            }
        }
        Self(map)
    }

    /// A key for `user`'s tenant (its group's, else its own), and its
    /// weight: whose call an adaptive limit hears of, and whose share of
    /// the slots it uses.
    pub(super) fn key(&self, user: &str) -> (u64, u32) {
        match self.0.get(user) {
            Some((t, w)) => (Place::key_of(t), *w),
            None => (Place::key_of(user), 1),
        }
    }

    /// Where a call of `user` at `priority` waits.
    pub(super) fn place(&self, user: &str, priority: Priority) -> Place {
        let (tenant, weight) = self.0.get(user).cloned().unwrap_or_else(|| (user.into(), 1));
        Place::new(priority, tenant, weight)
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
}
