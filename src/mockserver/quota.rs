//! Per-provider rate-limit quotas that drain as requests arrive and refill
//! linearly over a minute, and the headers that report them.

use axum::http::{HeaderMap, HeaderValue};
use parking_lot::Mutex;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// The refill window: an empty bucket is full again after this long.
const WINDOW_S: f64 = 60.0;

/// One limit: capacity and current level.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bucket {
    limit: f64,
    level: f64,
}

impl Bucket {
    fn full(limit: u64) -> Self {
        Self {
            limit: limit as f64,
            level: limit as f64,
        }
    }

    fn refill(&mut self, dt_s: f64) {
        self.level = (self.level + self.limit * dt_s / WINDOW_S).min(self.limit);
    }

    /// Whole units left.
    pub(crate) fn remaining(&self) -> u64 {
        self.level.max(0.0).floor() as u64
    }

    /// Time until the bucket is full again.
    pub(crate) fn until_full(&self) -> Duration {
        self.wait_for(self.limit).unwrap_or_default()
    }

    /// Time until `need` units are available (`None` if more than the limit).
    fn wait_for(&self, need: f64) -> Option<Duration> {
        if need > self.limit {
            return None;
        }
        let missing = (need - self.level).max(0.0);
        Some(Duration::from_secs_f64(missing / self.limit * WINDOW_S))
    }
}

/// Which header family a quota reports in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// Buckets: requests, tokens (prompt + max_tokens).
    OpenAi,
    /// Buckets: requests, input tokens (prompt), output tokens (max_tokens).
    Anthropic,
}

/// What one request takes from a quota.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Cost {
    /// Requests (0 or 1).
    pub requests: u64,
    /// Prompt tokens.
    pub input: u64,
    /// Output tokens reserved (max_tokens).
    pub output: u64,
}

/// A quota's levels at one moment.
#[derive(Clone, Debug)]
pub(crate) struct Snapshot {
    scheme: Scheme,
    buckets: Vec<Bucket>,
    /// Report every token limit as empty, full again after this long (a
    /// planned 429: its retry-after, else the whole window).
    pub tokens_exhausted: Option<Duration>,
}

/// A request the quota cannot take now.
#[derive(Clone, Debug)]
pub(crate) struct Exhausted {
    /// When it could be taken (`None`: never, it exceeds a limit).
    pub retry_after: Option<Duration>,
    /// Which limit: `requests`, `tokens`, `input tokens` or `output tokens`.
    pub what: &'static str,
    /// The levels that refused it.
    pub snapshot: Snapshot,
}

/// A provider's rate-limit quota.
pub(crate) struct Quota {
    scheme: Scheme,
    names: &'static [&'static str],
    state: Mutex<(Instant, Vec<Bucket>)>,
}

impl Quota {
    /// OpenAI: 1,000 requests and 1,000,000 tokens per minute.
    pub(crate) fn openai() -> Self {
        Self {
            scheme: Scheme::OpenAi,
            names: &["requests", "tokens"],
            state: Mutex::new((Instant::now(), vec![Bucket::full(1_000), Bucket::full(1_000_000)])),
        }
    }

    /// Anthropic: 1,000 requests, 400,000 input and 200,000 output tokens per minute.
    pub(crate) fn anthropic() -> Self {
        Self {
            scheme: Scheme::Anthropic,
            names: &["requests", "input tokens", "output tokens"],
            state: Mutex::new((
                Instant::now(),
                vec![Bucket::full(1_000), Bucket::full(400_000), Bucket::full(200_000)],
            )),
        }
    }

    fn demands(&self, cost: Cost) -> Vec<f64> {
        match self.scheme {
            Scheme::OpenAi => vec![cost.requests as f64, (cost.input + cost.output) as f64],
            Scheme::Anthropic => vec![cost.requests as f64, cost.input as f64, cost.output as f64],
        }
    }

    fn refilled(&self) -> parking_lot::MutexGuard<'_, (Instant, Vec<Bucket>)> {
        let mut g = self.state.lock();
        let now = Instant::now();
        let dt = now.saturating_duration_since(g.0).as_secs_f64();
        g.0 = now;
        for b in g.1.iter_mut() {
            b.refill(dt);
        }
        g
    }

    fn snapshot_of(&self, buckets: &[Bucket]) -> Snapshot {
        Snapshot {
            scheme: self.scheme,
            buckets: buckets.to_vec(),
            tokens_exhausted: None,
        }
    }

    /// Takes `cost` if every bucket has it; else says which limit refused and when to retry.
    pub(crate) fn take(&self, cost: Cost) -> Result<Snapshot, Exhausted> {
        let demands = self.demands(cost);
        let mut g = self.refilled();
        let mut worst: Option<(usize, Option<Duration>)> = None;
        for (i, (b, &need)) in g.1.iter().zip(&demands).enumerate() {
            if need > 0.0 && b.level < need {
                let wait = b.wait_for(need);
                let later = match (worst, wait) {
                    (None, _) => true,
                    (Some((_, None)), _) => false,
                    (Some(_), None) => true,
                    (Some((_, Some(w))), Some(x)) => x > w,
                };
                if later {
                    worst = Some((i, wait));
                }
            }
        }
        if let Some((i, retry_after)) = worst {
            return Err(Exhausted {
                retry_after,
                what: self.names.get(i).copied().unwrap_or("tokens"),
                snapshot: self.snapshot_of(&g.1),
            });
        }
        for (b, need) in g.1.iter_mut().zip(demands) {
            b.level -= need;
        }
        Ok(self.snapshot_of(&g.1))
    }

    /// The current levels, taking nothing.
    pub(crate) fn peek(&self) -> Snapshot {
        let g = self.refilled();
        self.snapshot_of(&g.1)
    }
}

fn put(h: &mut HeaderMap, name: &'static str, value: String) {
    if let Ok(v) = HeaderValue::try_from(value) {
        h.insert(name, v);
    }
}

impl Snapshot {
    /// Adds the rate-limit headers of this snapshot to `h`.
    pub(crate) fn write_headers(&self, h: &mut HeaderMap) {
        let bucket = |i: usize| {
            let b = self.buckets.get(i).copied().unwrap_or(Bucket::full(0));
            // Tokens (every bucket but requests) may be reported as exhausted.
            match self.tokens_exhausted {
                Some(_) if i > 0 => Bucket { level: 0.0, ..b },
                _ => b,
            }
        };
        // When tokens are reported exhausted, they are full again after the given time.
        let tokens_full = |b: Bucket| self.tokens_exhausted.unwrap_or_else(|| b.until_full());
        match self.scheme {
            Scheme::OpenAi => {
                let (req, tok) = (bucket(0), bucket(1));
                put(h, "x-ratelimit-limit-requests", (req.limit as u64).to_string());
                put(h, "x-ratelimit-limit-tokens", (tok.limit as u64).to_string());
                put(h, "x-ratelimit-remaining-requests", req.remaining().to_string());
                put(h, "x-ratelimit-remaining-tokens", tok.remaining().to_string());
                put(h, "x-ratelimit-reset-requests", go_duration(req.until_full()));
                put(h, "x-ratelimit-reset-tokens", go_duration(tokens_full(tok)));
            }
            Scheme::Anthropic => {
                let now = SystemTime::now();
                let (req, inp, out) = (bucket(0), bucket(1), bucket(2));
                // `tokens` reports the more depleted of the input and output limits.
                let fill = |b: Bucket| if b.limit > 0.0 { b.level / b.limit } else { 0.0 };
                let tok = if fill(out) < fill(inp) { out } else { inp };
                let rows: [(&'static str, &'static str, &'static str, Bucket, Duration); 4] = [
                    (
                        "anthropic-ratelimit-requests-limit",
                        "anthropic-ratelimit-requests-remaining",
                        "anthropic-ratelimit-requests-reset",
                        req,
                        req.until_full(),
                    ),
                    (
                        "anthropic-ratelimit-tokens-limit",
                        "anthropic-ratelimit-tokens-remaining",
                        "anthropic-ratelimit-tokens-reset",
                        tok,
                        tokens_full(tok),
                    ),
                    (
                        "anthropic-ratelimit-input-tokens-limit",
                        "anthropic-ratelimit-input-tokens-remaining",
                        "anthropic-ratelimit-input-tokens-reset",
                        inp,
                        tokens_full(inp),
                    ),
                    (
                        "anthropic-ratelimit-output-tokens-limit",
                        "anthropic-ratelimit-output-tokens-remaining",
                        "anthropic-ratelimit-output-tokens-reset",
                        out,
                        tokens_full(out),
                    ),
                ];
                for (limit, remaining, reset, b, full_in) in rows {
                    put(h, limit, (b.limit as u64).to_string());
                    put(h, remaining, b.remaining().to_string());
                    put(h, reset, rfc3339_after(now, full_in));
                }
            }
        }
    }
}

/// A duration the way Go prints it (and OpenAI sends it): `6m0s`, `1s`,
/// `12ms`, `2m59.56s`, `0s`; rounded up to whole milliseconds.
pub(crate) fn go_duration(d: Duration) -> String {
    let ms = u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    if ms == 0 {
        return "0s".into();
    }
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let (s, frac) = (rest / 1_000, rest % 1_000);
    let mut out = String::new();
    if h > 0 {
        let _ = write!(out, "{h}h");
    }
    if h > 0 || m > 0 {
        let _ = write!(out, "{m}m");
    }
    let _ = write!(out, "{s}");
    if frac > 0 {
        let f = format!("{frac:03}");
        let _ = write!(out, ".{}", f.trim_end_matches('0'));
    }
    out.push('s');
    out
}

/// The RFC 3339 instant `d` after `now`, rounded up to the second (`2024-05-01T12:00:07Z`).
pub(crate) fn rfc3339_after(now: SystemTime, d: Duration) -> String {
    let t = now.checked_add(d).unwrap_or(now);
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|x| x.as_secs() + u64::from(x.subsec_nanos() > 0))
        .unwrap_or(0);
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::ZERO), "0s");
        assert_eq!(go_duration(Duration::from_millis(12)), "12ms");
        assert_eq!(go_duration(Duration::from_micros(1)), "1ms");
        assert_eq!(go_duration(Duration::from_secs(1)), "1s");
        assert_eq!(go_duration(Duration::from_secs(360)), "6m0s");
        assert_eq!(go_duration(Duration::from_millis(179_560)), "2m59.56s");
        assert_eq!(go_duration(Duration::from_millis(3_723_500)), "1h2m3.5s");
    }

    #[test]
    fn rfc3339_rounds_up() {
        let t = UNIX_EPOCH + Duration::from_millis(1_500);
        assert_eq!(rfc3339_after(t, Duration::from_millis(200)), "1970-01-01T00:00:02Z");
        assert_eq!(rfc3339_after(t, Duration::from_millis(500)), "1970-01-01T00:00:02Z");
    }

    #[tokio::test(start_paused = true)]
    async fn drains_refills_and_refuses() {
        let q = Quota::openai();
        let first = q.take(Cost {
            requests: 1,
            input: 100,
            output: 500_000,
        });
        assert!(first.is_ok());
        let e = q.take(Cost {
            requests: 1,
            input: 100,
            output: 600_000,
        });
        let Err(e) = e else {
            panic!("second take should be refused")
        };
        assert_eq!(e.what, "tokens");
        let wait = e.retry_after.unwrap_or_default();
        assert!(
            wait > Duration::from_secs(5) && wait < Duration::from_secs(7),
            "{wait:?}"
        );
        tokio::time::advance(wait + Duration::from_millis(10)).await;
        assert!(q
            .take(Cost {
                requests: 1,
                input: 100,
                output: 600_000
            })
            .is_ok());
        let never = q.take(Cost {
            requests: 1,
            input: 0,
            output: 2_000_000,
        });
        assert!(matches!(never, Err(Exhausted { retry_after: None, .. })));
    }
}
