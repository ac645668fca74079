//! `GET /metrics`: the runner's state in the Prometheus (OpenMetrics) text
//! format, read fresh from the runner on every scrape: breaker state per
//! target, limiter levels, budget usage, requests by level, retries,
//! fallbacks, each target's degraded requests, what the recorder and the
//! trace exporter dropped, and the gateway's request latency histogram.

use super::{Gateway, Shared};
use crate::outcome::Level;
use crate::resilience::breaker::BreakerState;
use crate::resilience::limiter::adaptive::Move;
use crate::runner::Runner;
use crate::telemetry::histogram::{HistogramView, BOUNDS_MS};
use crate::telemetry::stats::StatsView;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;

/// Latency of gateway requests, from arrival to response.
pub(super) struct Latency(Histogram);

impl Default for Latency {
    fn default() -> Self {
        // 0.5 ms … ~65 s.
        Self(Histogram::new(exponential_buckets(0.0005, 2.0, 18)))
    }
}

impl Latency {
    pub(super) fn observe(&self, d: Duration) {
        self.0.observe(d.as_secs_f64());
    }
}

/// Users shown with their share of their daily budgets, at most: the
/// nearest their limits (the label's cardinality stays bounded).
pub const TOP_USERS: usize = 20;

const STATES: [(BreakerState, &str); 6] = [
    (BreakerState::Closed, "closed"),
    (BreakerState::Open, "open"),
    (BreakerState::HalfOpen, "half_open"),
    (BreakerState::ForcedOpen, "forced_open"),
    (BreakerState::ForcedClosed, "forced_closed"),
    (BreakerState::Disabled, "disabled"),
];

struct RunnerMetrics(Arc<Gateway>);

impl std::fmt::Debug for RunnerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunnerMetrics")
    }
}

/// One metric family: its descriptor, then one sample per label set.
fn family<M: EncodeMetric, L: prometheus_client::encoding::EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    ty: MetricType,
    samples: impl IntoIterator<Item = (L, M)>,
) -> std::fmt::Result {
    let mut f = enc.encode_descriptor(name, help, None, ty)?;
    for (labels, m) in samples {
        m.encode(f.encode_family(&labels)?)?;
    }
    Ok(())
}

/// A latency histogram as Prometheus reads it (seconds).
struct Buckets(HistogramView);

impl EncodeMetric for Buckets {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> std::fmt::Result {
        let bounds = BOUNDS_MS.iter().map(|&ms| ms as f64 / 1000.0).chain([f64::MAX]);
        let buckets: Vec<(f64, u64)> = bounds.zip(self.0.counts).collect();
        let sum = self.0.sum_ms as f64 / 1000.0;
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, self.0.count(), &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// A metric without labels.
fn single(enc: &mut DescriptorEncoder, name: &str, help: &str, m: &impl EncodeMetric) -> std::fmt::Result {
    m.encode(enc.encode_descriptor(name, help, None, m.metric_type())?)
}

impl Collector for RunnerMetrics {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let r = &self.0.runner;
        let now = r.clock().now();
        targets(&mut enc, r, now)?;
        limiters(&mut enc, r, now)?;
        budgets_and_store(&mut enc, r)?;
        requests(&mut enc, r)?;
        let c = &self.0.conns;
        single(
            &mut enc,
            "fusebox_connections_open",
            "Client connections open",
            &ConstGauge::new(c.open.load(std::sync::atomic::Ordering::Relaxed) as i64),
        )?;
        single(
            &mut enc,
            "fusebox_connections_refused",
            "Client connections closed at accept because the most were open and busy",
            &ConstCounter::new(c.refused.load(std::sync::atomic::Ordering::Relaxed)),
        )?;
        single(
            &mut enc,
            "fusebox_connections_evicted",
            "Client connections closed to give their slot to a new one: of those waiting on their clients (idle, or a request still arriving), the one waiting longest",
            &ConstCounter::new(c.evicted.load(std::sync::atomic::Ordering::Relaxed)),
        )?;
        let fds = crate::descriptors::view();
        single(
            &mut enc,
            "fusebox_descriptors_in_use",
            "File descriptors held by client connections and upstream calls",
            &ConstGauge::new(fds.in_use as i64),
        )?;
        single(
            &mut enc,
            "fusebox_descriptors_usable",
            "The most descriptors connections and upstream calls may hold (the open-file limit less a reserve; 0: not bounded)",
            &ConstGauge::new(fds.usable.min(i64::MAX as u64) as i64),
        )?;
        single(
            &mut enc,
            "fusebox_descriptor_refusals",
            "Upstream calls refused before any upstream for want of a file descriptor (fusebox's own limit, not a provider's)",
            &ConstCounter::new(fds.refused),
        )?;
        single(
            &mut enc,
            "fusebox_records_dropped",
            "Traffic records the recorder could not write (a write failed; the recording stopped)",
            &ConstCounter::new(self.0.opts.records_dropped.load(std::sync::atomic::Ordering::Relaxed)),
        )?;
        single(
            &mut enc,
            "fusebox_watchers_dropped",
            "Watchers of /_fusebox/events dropped for falling too far behind",
            &ConstCounter::new(self.0.watchers_dropped.load(std::sync::atomic::Ordering::Relaxed)),
        )?;
        single(
            &mut enc,
            "fusebox_streams_stalled",
            "Streamed calls dropped because their client read nothing for the stall time",
            &ConstCounter::new(self.0.stalls.stalled.load(std::sync::atomic::Ordering::Relaxed)),
        )?;
        single(
            &mut enc,
            "fusebox_request_duration_seconds",
            "Gateway request latency, arrival to response",
            &self.0.latency.0,
        )
    }
}

/// Each target's breaker state and call counters.
fn targets(enc: &mut DescriptorEncoder, r: &Runner, now: tokio::time::Instant) -> std::fmt::Result {
    let targets: Vec<_> = (0..r.catalog().registry().len())
        .map(|i| r.catalog().registry().get(i))
        .collect();
    let views: Vec<_> = targets
        .iter()
        .map(|t| (t.target.to_string(), t.breaker.view(now)))
        .collect();
    family(
        enc,
        "fusebox_breaker_state",
        "Circuit breaker state per target (1 for the current state)",
        MetricType::Gauge,
        views.iter().flat_map(|(name, v)| {
            STATES.iter().map(move |(s, label)| {
                (
                    [("target", name.as_str()), ("state", *label)],
                    ConstGauge::new(i64::from(v.state == Some(*s))),
                )
            })
        }),
    )?;
    let stats: Vec<_> = targets.iter().map(|t| (t.target.to_string(), t.stats.view())).collect();
    for (name, help, get) in [
        (
            "fusebox_attempts",
            "Calls made to a target",
            (|s| s.attempts) as fn(&StatsView) -> u64,
        ),
        ("fusebox_failures", "Calls to a target that failed", |s| s.failed),
        ("fusebox_retries", "Retries of calls to a target", |s| s.retries),
        (
            "fusebox_hedged",
            "Calls to a model raced by a hedged call to the next model",
            |s| s.hedged,
        ),
        ("fusebox_rejected_open", "Calls refused by an open breaker", |s| {
            s.rejected_open
        }),
        ("fusebox_rejected_rate", "Calls refused by the rate limiter", |s| {
            s.rejected_rate
        }),
        (
            "fusebox_needed",
            "Requests that needed a target: called it, or skipped it for its breaker, rate limit or latency",
            |s| s.needed,
        ),
        (
            "fusebox_malformed_events",
            "Stream events from a target that could not be read, skipped rather than passed on",
            |s| s.malformed,
        ),
        (
            "fusebox_degraded",
            "Requests that needed a target and ended degraded (partial, fallback, deferred, failed) because it failed or was skipped",
            |s| s.degraded,
        ),
    ] {
        family(
            enc,
            name,
            help,
            MetricType::Counter,
            stats
                .iter()
                .map(|(t, s)| ([("target", t.as_str())], ConstCounter::new(get(s)))),
        )?;
    }
    family(
        enc,
        "fusebox_call_duration_seconds",
        "Latency of finished calls to a target",
        MetricType::Histogram,
        stats
            .iter()
            .map(|(t, s)| ([("target", t.as_str())], Buckets(s.latency))),
    )?;
    family(
        enc,
        "fusebox_time_to_first_token_seconds",
        "Streamed calls' time to their first content, per target",
        MetricType::Histogram,
        stats.iter().map(|(t, s)| ([("target", t.as_str())], Buckets(s.ttft))),
    )?;
    Ok(())
}

/// Each provider's limiter levels and calls in flight.
fn limiters(enc: &mut DescriptorEncoder, r: &Runner, now: tokio::time::Instant) -> std::fmt::Result {
    let limiters: Vec<_> = r
        .catalog()
        .providers()
        .iter()
        .map(|p| (p.name.as_str(), p.limiter.view(now)))
        .collect();
    family(
        enc,
        "fusebox_limiter_available_ratio",
        "Share of a provider's token or request bucket available now",
        MetricType::Gauge,
        limiters.iter().flat_map(|(p, v)| {
            [("tpm", v.tpm), ("itpm", v.itpm), ("otpm", v.otpm), ("rpm", v.rpm)]
                .into_iter()
                .filter_map(move |(bucket, b)| {
                    b.map(|(level, cap)| {
                        (
                            [("provider", *p), ("bucket", bucket)],
                            ConstGauge::new(level / cap.max(1.0)),
                        )
                    })
                })
        }),
    )?;
    family(
        enc,
        "fusebox_limiter_in_flight",
        "Calls in flight to a provider",
        MetricType::Gauge,
        limiters
            .iter()
            .map(|(p, v)| ([("provider", *p)], ConstGauge::new(i64::from(v.concurrency.0)))),
    )?;
    family(
        enc,
        "fusebox_limiter_concurrency_limit",
        "Calls a provider may have in flight (its adaptive limit, or its configured concurrency; absent when uncapped)",
        MetricType::Gauge,
        limiters
            .iter()
            .filter(|(_, v)| v.concurrency.1 > 0)
            .map(|(p, v)| ([("provider", *p)], ConstGauge::new(i64::from(v.concurrency.1)))),
    )?;
    family(
        enc,
        "fusebox_limiter_adaptive_moves",
        "Moves of a provider's adaptive concurrency limit, by why it moved",
        MetricType::Counter,
        limiters.iter().flat_map(|(p, v)| {
            v.adaptive.into_iter().flat_map(move |a| {
                Move::ALL.into_iter().map(move |m| {
                    (
                        [("provider", *p), ("why", m.name())],
                        ConstCounter::new(a.moves[m as usize]),
                    )
                })
            })
        }),
    )?;
    family(
        enc,
        "fusebox_queue_waiting",
        "Calls waiting in a provider's queue for capacity, by priority",
        MetricType::Gauge,
        per_priority(&limiters, |q, i| ConstGauge::new(i64::from(q.waiting[i]))),
    )?;
    family(
        enc,
        "fusebox_queue_shed",
        "Calls shed from a provider's queue (deadline passed, or no room), by priority",
        MetricType::Counter,
        per_priority(&limiters, |q, i| ConstCounter::new(q.shed[i])),
    )?;
    Ok(())
}

/// One figure of each provider's queue per priority, labelled.
fn per_priority<'a, T>(
    limiters: &'a [(&'a str, crate::resilience::limiter::LimiterView)],
    figure: impl Fn(&crate::resilience::limiter::QueueView, usize) -> T + Copy + 'a,
) -> impl Iterator<Item = ([(&'static str, &'a str); 2], T)> + 'a {
    use crate::config::Priority;
    limiters.iter().flat_map(move |(p, v)| {
        v.queue.iter().flat_map(move |q| {
            Priority::ALL
                .into_iter()
                .map(move |pr| ([("provider", *p), ("priority", pr.name())], figure(q, pr.index())))
        })
    })
}

/// The global budgets and the shared store's health.
fn budgets_and_store(enc: &mut DescriptorEncoder, r: &Runner) -> std::fmt::Result {
    let g = r.budgets().global_view(r.clock().elapsed_ms());
    family(
        enc,
        "fusebox_budget_global_tokens",
        "Tokens spent against the global budgets in the current window",
        MetricType::Gauge,
        [("hour", g.tokens[0]), ("day", g.tokens[1])].map(|(w, v)| ([("window", w)], ConstGauge::new(v))),
    )?;
    family(
        enc,
        "fusebox_budget_global_cost_usd",
        "USD spent against the global budgets in the current window",
        MetricType::Gauge,
        [("hour", g.cost[0]), ("day", g.cost[1])].map(|(w, v)| ([("window", w)], ConstGauge::new(v))),
    )?;
    single(
        enc,
        "fusebox_budget_pressure_ratio",
        "Highest share of any global budget used",
        &ConstGauge::new(g.pressure),
    )?;
    let shares = r.budgets().global_shares(&g);
    family(
        enc,
        "fusebox_budget_global_used_ratio",
        "Share of a global budget used in the current window (only budgets with a limit)",
        MetricType::Gauge,
        [
            ("hour", "tokens", shares.tokens[0]),
            ("day", "tokens", shares.tokens[1]),
            ("hour", "cost", shares.cost[0]),
            ("day", "cost", shares.cost[1]),
        ]
        .into_iter()
        .filter_map(|(w, k, s)| Some(([("window", w), ("kind", k)], ConstGauge::new(s?)))),
    )?;
    user_budgets(enc, r)?;
    spend_rate(enc, r)?;
    let store = r.store().view();
    single(
        enc,
        "fusebox_store_degraded",
        "1 while the shared store (Redis) cannot be reached and limits are local",
        &ConstGauge::new(i64::from(store.degraded)),
    )?;
    single(
        enc,
        "fusebox_fleet_instances",
        "Live fusebox instances sharing the store (by heartbeat)",
        &ConstGauge::new(i64::from(store.instances)),
    )?;
    family(
        enc,
        "fusebox_fleet_retries",
        "Retries (and hedges) of this instance the fleet's retry budget granted or refused",
        MetricType::Counter,
        [("granted", store.retries_granted), ("refused", store.retries_refused)]
            .map(|(answer, n)| ([("answer", answer)], ConstCounter::new(n))),
    )?;
    Ok(())
}

/// The spend-rate breakers open now: everyone's (`user="*"`), and the
/// users' among the [`TOP_USERS`] most pressed (an open one counts as
/// fully pressed), with the seconds until each closes.
fn spend_rate(enc: &mut DescriptorEncoder, r: &Runner) -> std::fmt::Result {
    let now = r.clock().elapsed_ms();
    let global = r.budgets().global_view(now).spend_rate;
    let users = r.budgets().top_users(TOP_USERS, now);
    let open = std::iter::once(("*", global.open_ms))
        .chain(users.iter().map(|u| (u.user.as_str(), u.spend_rate.open_ms)))
        .filter(|(_, ms)| *ms > 0);
    family(
        enc,
        "fusebox_spend_rate_open_seconds",
        "Seconds until an open spend-rate breaker closes, by user (* for everyone's)",
        MetricType::Gauge,
        open.map(|(user, ms)| ([("user", user)], ConstGauge::new(ms as f64 / 1000.0))),
    )
}

/// The share of their daily budgets the users nearest them have used
/// today: the [`TOP_USERS`] highest, those with a daily limit and some use.
fn user_budgets(enc: &mut DescriptorEncoder, r: &Runner) -> std::fmt::Result {
    let day = |u: &crate::resilience::budget::UserView| u.shares[2].max(u.shares[3]);
    let top = r.budgets().top_users_by(TOP_USERS, r.clock().elapsed_ms(), day);
    let rows: Vec<_> = top
        .iter()
        .filter(|u| day(u) > 0.0)
        .flat_map(|u| {
            let limits = r.budgets().limits_of(&u.user);
            [
                ("tokens", limits.day, u.shares[2]),
                ("cost", limits.cost_day, u.shares[3]),
            ]
            .into_iter()
            .filter(|(_, limit, _)| *limit > 0.0)
            .map(|(kind, _, share)| (u.user.as_str(), kind, share))
        })
        .collect();
    family(
        enc,
        "fusebox_budget_user_used_ratio",
        "Share of a user's daily budget used today, for the users nearest their limits",
        MetricType::Gauge,
        rows.iter().map(|&(user, kind, share)| {
            (
                [("user", user), ("window", "day"), ("kind", kind)],
                ConstGauge::new(share),
            )
        }),
    )
}

/// Requests by level, tokens, cost, and abandoned calls.
fn requests(enc: &mut DescriptorEncoder, r: &Runner) -> std::fmt::Result {
    let by_level = r.by_level();
    family(
        enc,
        "fusebox_requests",
        "Requests ended, by degradation level",
        MetricType::Counter,
        Level::ALL.map(|l| ([("level", l.as_str())], ConstCounter::new(by_level[l.index()]))),
    )?;
    single(
        enc,
        "fusebox_fallbacks",
        "Requests answered by a fallback model or the cache",
        &ConstCounter::new(by_level[Level::Fallback.index()]),
    )?;
    let t = r.totals();
    single(
        enc,
        "fusebox_tokens",
        "Tokens consumed",
        &ConstCounter::new(t.tokens.load(std::sync::atomic::Ordering::Relaxed)),
    )?;
    single(
        enc,
        "fusebox_tokens_wasted",
        "Tokens consumed by calls that brought no answer (failed, or cancelled: a hedge outran them)",
        &ConstCounter::new(t.wasted.load(std::sync::atomic::Ordering::Relaxed)),
    )?;
    single(
        enc,
        "fusebox_cost_usd",
        "Cost of the requests ended (USD), as their users' budgets were charged",
        &ConstCounter::new(t.cost_micro_usd.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e6),
    )?;
    single(
        enc,
        "fusebox_spans_dropped",
        "Trace spans dropped (or the events they were to be made of): the export queue was full or the collector could not take them",
        &ConstCounter::new(t.spans_dropped.load(std::sync::atomic::Ordering::Relaxed)),
    )?;
    single(
        enc,
        "fusebox_requests_abandoned",
        "Requests whose client went away before the answer (also counted as failed)",
        &ConstCounter::new(t.abandoned.load(std::sync::atomic::Ordering::Relaxed)),
    )?;
    Ok(())
}

pub(super) async fn metrics(axum::extract::State(gw): Shared) -> Response {
    let mut reg = Registry::default();
    reg.register_collector(Box::new(RunnerMetrics(gw)));
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &reg) {
        tracing::error!(error = %e, "cannot encode metrics");
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        out,
    )
        .into_response()
}
