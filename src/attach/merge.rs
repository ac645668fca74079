//! One snapshot out of several instances' snapshots: fleet totals, each
//! breaker, limiter and user once combined (the worst breaker state, summed
//! counters) followed by each instance's own row, and every instance's
//! notable events on one time line.

use crate::resilience::breaker::{BreakerState, BreakerView};
use crate::resilience::limiter::{Frozen, LimiterView};
use crate::telemetry::events::Event;
use crate::telemetry::histogram::HistogramView;
use crate::telemetry::snapshot::{BreakerRow, InstanceView, LimiterRow, Snapshot, UserRow};
use crate::telemetry::stats::StatsView;
use std::collections::BTreeMap;

/// One watched instance: how it is doing and what it last said.
pub struct Member<'a> {
    /// Its name, health and last error.
    pub view: InstanceView,
    /// Its last snapshot, if it ever sent one.
    pub snap: Option<&'a Snapshot>,
    /// Whether it is live now (a stale instance's rows are its last known,
    /// and count in no combined row while another is live).
    pub live: bool,
}

/// How bad a breaker state is: the combined row has the worst.
fn severity(s: Option<BreakerState>) -> u8 {
    s.map_or(0, BreakerState::severity)
}

/// The snapshot of the instances in `parts`, at `t_ms` (the console's own
/// time) and `wall_ms`, with `notes` (the console's own events, on its time
/// line) among theirs. One instance's snapshot is shown as it is, on its
/// own time line.
pub fn combine(parts: &[Member<'_>], notes: &[Event], t_ms: u64, wall_ms: u64, events: usize) -> Snapshot {
    let instances: Vec<InstanceView> = parts.iter().map(|p| p.view.clone()).collect();
    if let [one] = parts {
        let mut s = one.snap.cloned().unwrap_or_default();
        s.instances = instances;
        if !notes.is_empty() {
            // The console's time is the instance's less how much later it started.
            let later = s
                .wall_ms
                .saturating_sub(s.t_ms)
                .saturating_sub(wall_ms.saturating_sub(t_ms));
            s.events.extend(notes.iter().map(|e| Event {
                t_ms: e.t_ms.saturating_sub(later),
                ..e.clone()
            }));
            s.events.sort_by_key(|e| e.t_ms);
            let skip = s.events.len().saturating_sub(events);
            s.events.drain(..skip);
        }
        return s;
    }
    let known: Vec<(&str, &Snapshot)> = parts
        .iter()
        .filter_map(|p| Some((p.view.name.as_str(), p.snap?)))
        .collect();
    // Combined rows count the live instances (all known ones, if none is).
    let counted: Vec<&Snapshot> = if parts.iter().any(|p| p.live && p.snap.is_some()) {
        parts.iter().filter(|p| p.live).filter_map(|p| p.snap).collect()
    } else {
        known.iter().map(|(_, s)| *s).collect()
    };
    let mut out = Snapshot {
        t_ms,
        wall_ms,
        instances,
        ..Snapshot::default()
    };
    // Totals count every instance ever heard (a lost one's last known):
    // they never drop while one is away.
    for (_, s) in &known {
        out.requests += s.requests;
        for (a, b) in out.by_level.iter_mut().zip(s.by_level) {
            *a += b;
        }
        out.tokens += s.tokens;
        out.cost_usd += s.cost_usd;
    }
    for s in &counted {
        out.tracked_users += s.tracked_users;
        out.deferred_pending += s.deferred_pending;
        out.spans_dropped += s.spans_dropped;
        out.descriptor_refusals += s.descriptor_refusals;
        out.drill |= s.drill;
        for i in 0..2 {
            out.global.tokens[i] += s.global.tokens[i];
            out.global.cost[i] += s.global.cost[i];
        }
        out.global.pressure = out.global.pressure.max(s.global.pressure);
        out.faults.extend(s.faults.iter().map(|(t, f)| (t.clone(), f.clone())));
        for (route, hops) in &s.routes {
            let mine = out.routes.entry(route.clone()).or_insert_with(|| hops.clone());
            for (m, h) in mine.iter_mut().zip(hops) {
                m.available &= h.available;
            }
        }
    }
    out.store.redis = !counted.is_empty() && counted.iter().all(|s| s.store.redis);
    out.store.degraded = counted.iter().any(|s| s.store.degraded);
    out.store.instances = counted.iter().map(|s| s.store.instances).max().unwrap_or(0);
    out.store.retries_granted = counted.iter().map(|s| s.store.retries_granted).sum();
    out.store.retries_refused = counted.iter().map(|s| s.store.retries_refused).sum();
    out.breakers = breakers(&known, &counted);
    out.limiters = limiters(&known, &counted);
    out.top_users = users(&known, &counted);
    out.events = timeline(&known, notes, wall_ms, t_ms, events);
    out
}

/// Each target's combined row, then its rows per instance.
fn breakers(known: &[(&str, &Snapshot)], counted: &[&Snapshot]) -> Vec<BreakerRow> {
    let mut groups: BTreeMap<&crate::target::Target, Vec<&BreakerRow>> = BTreeMap::new();
    for s in counted {
        for b in &s.breakers {
            groups.entry(&b.target).or_default().push(b);
        }
    }
    let mut out = Vec::new();
    for (target, rows) in groups {
        let Some(worst) = rows.iter().copied().max_by(|a, b| {
            severity(a.breaker.state)
                .cmp(&severity(b.breaker.state))
                .then(a.breaker.failure_rate.total_cmp(&b.breaker.failure_rate))
                .then(a.breaker.calls_in_window.cmp(&b.breaker.calls_in_window))
        }) else {
            continue;
        };
        let mut stats = StatsView::default();
        for r in &rows {
            add_stats(&mut stats, &r.stats);
        }
        out.push(BreakerRow {
            breaker: window(&worst.breaker, &rows),
            stats,
            pool: pools(&rows),
            instance: None,
            ..worst.clone()
        });
        for (name, s) in known {
            if let Some(b) = s.breakers.iter().find(|b| &b.target == target) {
                out.push(BreakerRow {
                    instance: Some(name.to_string()),
                    ..b.clone()
                });
            }
        }
    }
    out
}

/// A tool's pools on every instance, added up (None where none has one).
fn pools(rows: &[&BreakerRow]) -> Option<crate::resilience::bulkhead::PoolView> {
    rows.iter()
        .filter_map(|r| r.pool)
        .reduce(|a, b| crate::resilience::bulkhead::PoolView {
            in_use: a.in_use + b.in_use,
            size: a.size + b.size,
            waiting: a.waiting + b.waiting,
            queue: a.queue + b.queue,
            refused: a.refused + b.refused,
        })
}

/// The worst breaker's state and probes, over every instance's window:
/// calls summed, rates weighted by calls, the longest failure run.
fn window(worst: &BreakerView, rows: &[&BreakerRow]) -> BreakerView {
    let calls: u32 = rows.iter().map(|r| r.breaker.calls_in_window).sum();
    let weighted = |f: fn(&BreakerView) -> f64| {
        let sum: f64 = rows
            .iter()
            .map(|r| f(&r.breaker) * f64::from(r.breaker.calls_in_window))
            .sum();
        if calls > 0 {
            sum / f64::from(calls)
        } else {
            f(worst)
        }
    };
    BreakerView {
        failure_rate: weighted(|v| v.failure_rate),
        slow_rate: weighted(|v| v.slow_rate),
        calls_in_window: calls,
        consecutive_failures: rows.iter().map(|r| r.breaker.consecutive_failures).max().unwrap_or(0),
        ..worst.clone()
    }
}

fn add_stats(a: &mut StatsView, b: &StatsView) {
    let calls = |s: &StatsView| s.ok + s.failed + s.client_errors;
    let (na, nb) = (calls(a), calls(b));
    if let Some(mean) = (a.mean_latency_ms * na + b.mean_latency_ms * nb).checked_div(na + nb) {
        a.mean_latency_ms = mean;
    }
    a.attempts += b.attempts;
    a.ok += b.ok;
    a.failed += b.failed;
    a.rejected_open += b.rejected_open;
    a.rejected_rate += b.rejected_rate;
    a.retries += b.retries;
    a.hedged += b.hedged;
    a.timeouts += b.timeouts;
    a.semantic += b.semantic;
    a.client_errors += b.client_errors;
    add_histogram(&mut a.latency, &b.latency);
    add_histogram(&mut a.ttft, &b.ttft);
}

fn add_histogram(a: &mut HistogramView, b: &HistogramView) {
    for (x, y) in a.counts.iter_mut().zip(b.counts) {
        *x += y;
    }
    a.sum_ms += b.sum_ms;
}

/// Each provider's combined limiter, then its rows per instance. Apart,
/// each instance has its own buckets: levels and capacities add up.
/// Sharing a store, they lease from one: the emptiest instance's bucket
/// stands for it.
fn limiters(known: &[(&str, &Snapshot)], counted: &[&Snapshot]) -> Vec<LimiterRow> {
    let shared = !counted.is_empty() && counted.iter().all(|s| s.store.redis);
    let mut groups: BTreeMap<&str, Vec<&LimiterView>> = BTreeMap::new();
    for s in counted {
        for l in &s.limiters {
            groups.entry(l.provider.as_str()).or_default().push(&l.limiter);
        }
    }
    let mut out = Vec::new();
    for (provider, views) in groups {
        let sum = |f: fn(&LimiterView) -> Option<(f64, f64)>| {
            let buckets = views.iter().filter_map(|v| f(v));
            if shared {
                buckets.min_by(|a, b| (a.0 / a.1).total_cmp(&(b.0 / b.1)))
            } else {
                buckets.reduce(|a, b| (a.0 + b.0, a.1 + b.1))
            }
        };
        let frozen = views.iter().filter_map(|v| v.frozen).max_by_key(|f| match f {
            Frozen::ByOperator => u64::MAX,
            Frozen::For { ms } => *ms,
        });
        let limiter = LimiterView {
            tpm: sum(|v| v.tpm),
            itpm: sum(|v| v.itpm),
            otpm: sum(|v| v.otpm),
            rpm: sum(|v| v.rpm),
            concurrency: views
                .iter()
                .fold((0, 0), |a, v| (a.0 + v.concurrency.0, a.1 + v.concurrency.1)),
            frozen,
            chars_per_token: views.iter().map(|v| v.chars_per_token).sum::<f64>() / views.len() as f64,
            rejected: views.iter().map(|v| v.rejected).sum(),
            rate_limited: views.iter().map(|v| v.rate_limited).sum(),
            calibrated_ms_ago: views.iter().filter_map(|v| v.calibrated_ms_ago).min(),
            adaptive: merge_adaptive(&views),
            queue: merge_queue(&views),
        };
        out.push(LimiterRow {
            provider: provider.to_string(),
            limiter,
            instance: None,
        });
        for (name, s) in known {
            if let Some(l) = s.limiters.iter().find(|l| l.provider == provider) {
                out.push(LimiterRow {
                    instance: Some(name.to_string()),
                    ..l.clone()
                });
            }
        }
    }
    out
}

/// Each user's combined row (spend summed, the highest share of any
/// instance's limits), most pressed first, then their rows per instance.
fn users(known: &[(&str, &Snapshot)], counted: &[&Snapshot]) -> Vec<UserRow> {
    let mut combined: BTreeMap<&str, crate::resilience::budget::UserView> = BTreeMap::new();
    for s in counted {
        for u in &s.top_users {
            let c = combined
                .entry(u.view.user.as_str())
                .or_insert_with(|| crate::resilience::budget::UserView {
                    user: u.view.user.clone(),
                    tokens: [0.0; 3],
                    cost_day: 0.0,
                    shares: [0.0; 4],
                    pressure: 0.0,
                    rejections: 0,
                    spend_rate: Default::default(),
                });
            for (a, b) in c.tokens.iter_mut().zip(u.view.tokens) {
                *a += b;
            }
            for (a, b) in c.shares.iter_mut().zip(u.view.shares) {
                *a = a.max(b);
            }
            c.cost_day += u.view.cost_day;
            c.pressure = c.pressure.max(u.view.pressure);
            c.rejections += u.view.rejections;
            let (a, b) = (&mut c.spend_rate, &u.view.spend_rate);
            a.tokens_per_minute += b.tokens_per_minute;
            a.baseline_per_minute += b.baseline_per_minute;
            a.open_ms = a.open_ms.max(b.open_ms);
            a.trip_ratio = a.trip_ratio.max(b.trip_ratio);
            a.trips += b.trips;
        }
    }
    let mut rows: Vec<_> = combined.into_values().collect();
    rows.sort_by(|a, b| b.pressure.total_cmp(&a.pressure).then(a.user.cmp(&b.user)));
    let mut out = Vec::new();
    for view in rows {
        let user = view.user.clone();
        out.push(UserRow { view, instance: None });
        for (name, s) in known {
            if let Some(u) = s.top_users.iter().find(|u| u.view.user == user) {
                out.push(UserRow {
                    instance: Some(name.to_string()),
                    ..u.clone()
                });
            }
        }
    }
    out
}

/// Every instance's events, on the console's time line (an event's wall
/// time is its snapshot's, less how long before that it happened), named
/// by instance, and `notes`, the last `max` of them.
fn timeline(known: &[(&str, &Snapshot)], notes: &[Event], wall_ms: u64, t_ms: u64, max: usize) -> Vec<Event> {
    let start_wall = wall_ms.saturating_sub(t_ms);
    let mut all: Vec<Event> = known
        .iter()
        .flat_map(|(name, s)| {
            let at = s.wall_ms.saturating_sub(start_wall);
            s.events.iter().map(move |e| Event {
                t_ms: at.saturating_sub(s.t_ms.saturating_sub(e.t_ms)),
                instance: Some(name.to_string()),
                ..e.clone()
            })
        })
        .chain(notes.iter().cloned())
        .collect();
    all.sort_by_key(|e| e.t_ms);
    let skip = all.len().saturating_sub(max);
    all.split_off(skip)
}

/// The fleet's adaptive limits of one provider: limits, floors, ceilings
/// and moves summed; the latest move of any; latencies the mean.
/// The instances' queues as one: waiting, room and sheds add up; the
/// tenants shed most across them.
fn merge_queue(views: &[&LimiterView]) -> Option<crate::resilience::limiter::QueueView> {
    let all: Vec<_> = views.iter().filter_map(|v| v.queue.as_ref()).collect();
    if all.is_empty() {
        return None;
    }
    let mut by: BTreeMap<&str, u64> = BTreeMap::new();
    for q in &all {
        for (t, n) in &q.shed_most {
            *by.entry(t.as_str()).or_default() += n;
        }
    }
    let mut shed_most: Vec<(String, u64)> = by.into_iter().map(|(t, n)| (t.to_string(), n)).collect();
    shed_most.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    shed_most.truncate(3);
    Some(crate::resilience::limiter::QueueView {
        waiting: all.iter().fold([0; 3], |w, q| [0, 1, 2].map(|i| w[i] + q.waiting[i])),
        max: all.iter().map(|q| q.max).sum(),
        shed: all.iter().fold([0; 3], |w, q| [0, 1, 2].map(|i| w[i] + q.shed[i])),
        shed_most,
    })
}

fn merge_adaptive(views: &[&LimiterView]) -> Option<crate::resilience::limiter::AdaptiveView> {
    let all: Vec<_> = views.iter().filter_map(|v| v.adaptive).collect();
    if all.is_empty() {
        return None;
    }
    let latest = all.iter().filter(|a| a.moved.is_some()).min_by_key(|a| a.moved_ms_ago);
    let lat: Vec<_> = all.iter().filter_map(|a| a.latency_ms).collect();
    let n = lat.len() as f64;
    Some(crate::resilience::limiter::AdaptiveView {
        limit: all.iter().map(|a| a.limit).sum(),
        floor: all.iter().map(|a| a.floor).sum(),
        ceiling: all.iter().map(|a| a.ceiling).sum(),
        moved: latest.and_then(|a| a.moved),
        moved_ms_ago: latest.and_then(|a| a.moved_ms_ago),
        moves: all.iter().fold([0; 3], |m, a| [0, 1, 2].map(|i| m[i] + a.moves[i])),
        latency_ms: (!lat.is_empty()).then(|| {
            let (s, l) = lat.iter().fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
            (s / n, l / n)
        }),
    })
}
