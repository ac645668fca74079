//! Rate-limit and Retry-After header parsing for OpenAI(-compatible) and
//! Anthropic responses.
//!
//! Header lookups go through a `get` closure taking a lower-case name, so the
//! caller adapts whatever header map it has. Malformed values are ignored
//! (logged at debug level), never fatal.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a provider told us about its limits (from response headers).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RateFeedback {
    /// Tokens left in the provider's window.
    pub remaining_tokens: Option<u64>,
    /// Input tokens left (Anthropic's separate input limit).
    pub remaining_input_tokens: Option<u64>,
    /// Output tokens left (Anthropic's separate output limit).
    pub remaining_output_tokens: Option<u64>,
    /// Requests left in the provider's window.
    pub remaining_requests: Option<u64>,
    /// Time until the token window is full again.
    pub reset_tokens: Option<Duration>,
    /// Time until the request window is full again.
    pub reset_requests: Option<Duration>,
    /// Retry-After of a 429/503.
    pub retry_after: Option<Duration>,
}

impl RateFeedback {
    /// Feedback that says nothing.
    pub const NONE: Self = Self {
        remaining_tokens: None,
        remaining_input_tokens: None,
        remaining_output_tokens: None,
        remaining_requests: None,
        reset_tokens: None,
        reset_requests: None,
        retry_after: None,
    };

    /// Boxed where it says anything, as answers and errors carry it.
    pub fn boxed(self) -> Option<Box<Self>> {
        (self != Self::NONE).then(|| Box::new(self))
    }

    /// What a boxed feedback says ([`RateFeedback::NONE`] for none).
    pub fn of(boxed: &Option<Box<Self>>) -> &Self {
        boxed.as_deref().unwrap_or(&Self::NONE)
    }
}

const NS_PER_SEC: u128 = 1_000_000_000;
/// Fractional digits kept (more are accepted and truncated).
const MAX_FRAC_DIGITS: u32 = 18;

/// Parses a Go-style duration as OpenAI sends in `x-ratelimit-reset-*`:
/// `"6m0s"`, `"1s"`, `"12ms"`, `"2m59.56s"`, `"1h2m3.5s"`, `"500us"`, `"500µs"`,
/// `"20ns"`, `"1.5h"`, and Go's bare `"0"`. `None` if malformed (also negative,
/// empty or beyond `u64` nanoseconds).
pub fn go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() {
        return None;
    }
    let mut rest = s;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (int, frac, frac_scale, after) = split_number(rest)?;
        let unit_end = after
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after.len());
        let unit: u128 = match &after[..unit_end] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => NS_PER_SEC,
            "m" => 60 * NS_PER_SEC,
            "h" => 3_600 * NS_PER_SEC,
            _ => return None,
        };
        total = total.checked_add(int.checked_mul(unit)?)?;
        total = total.checked_add(frac * unit / frac_scale)?;
        if total > u128::from(u64::MAX) {
            return None;
        }
        rest = &after[unit_end..];
    }
    Some(Duration::from_nanos(u64::try_from(total).ok()?))
}

/// Splits a leading unsigned decimal (`12`, `1.5`, `.5`, `3.`; at least one
/// digit) off `s`: `(integer part, fraction digits, 10^digits kept, rest)`.
/// The integer part is capped to stay far from overflow in callers.
fn split_number(s: &str) -> Option<(u128, u128, u128, &str)> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut int: u128 = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        int = int.checked_mul(10)?.checked_add(u128::from(b[i] - b'0'))?;
        if int > u128::from(u64::MAX) {
            return None;
        }
        i += 1;
    }
    let int_digits = i;
    let (mut frac, mut scale, mut frac_digits) = (0u128, 1u128, 0usize);
    if i < b.len() && b[i] == b'.' {
        i += 1;
        let mut kept = 0;
        while i < b.len() && b[i].is_ascii_digit() {
            if kept < MAX_FRAC_DIGITS {
                frac = frac * 10 + u128::from(b[i] - b'0');
                scale *= 10;
                kept += 1;
            }
            frac_digits += 1;
            i += 1;
        }
    }
    if int_digits == 0 && frac_digits == 0 {
        return None;
    }
    // `i` only ever advanced over ASCII bytes, so it is a char boundary.
    Some((int, frac, scale, s.get(i..)?))
}

/// A whole unsigned decimal (`"1.5"`, `" 30 "`) times `unit_ns`, as a duration.
fn decimal(s: &str, unit_ns: u128) -> Option<Duration> {
    let (int, frac, scale, rest) = split_number(s.trim())?;
    if !rest.is_empty() {
        return None;
    }
    let ns = int.checked_mul(unit_ns)?.checked_add(frac * unit_ns / scale)?;
    Some(Duration::from_nanos(u64::try_from(ns).ok()?))
}

/// An unsigned integer with optional surrounding whitespace.
fn integer(s: &str) -> Option<u64> {
    let s = s.trim();
    // `u64::from_str` accepts a leading '+'; headers should not carry one, but it is harmless.
    s.parse().ok()
}

/// Milliseconds since the Unix epoch of `t` (0 before it).
fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// How long from `now_unix_ms` until `t` (zero if `t` is past).
fn until(t: SystemTime, now_unix_ms: u64) -> Duration {
    Duration::from_millis(unix_ms(t).saturating_sub(now_unix_ms))
}

/// Parses an RFC 3339 instant. `humantime` only knows UTC (`Z` / `+00:00`),
/// so other numeric offsets are applied here; lower-case `t`/`z` are accepted.
fn rfc3339(s: &str) -> Option<SystemTime> {
    let s = s.trim().to_ascii_uppercase();
    let b = s.as_bytes();
    if b.len() > 6 {
        let off = &b[b.len() - 6..];
        let is_offset = (off[0] == b'+' || off[0] == b'-')
            && off[1].is_ascii_digit()
            && off[2].is_ascii_digit()
            && off[3] == b':'
            && off[4].is_ascii_digit()
            && off[5].is_ascii_digit();
        if is_offset {
            let hours = u64::from(off[1] - b'0') * 10 + u64::from(off[2] - b'0');
            let mins = u64::from(off[4] - b'0') * 10 + u64::from(off[5] - b'0');
            if hours > 23 || mins > 59 {
                return None;
            }
            let shift = Duration::from_secs(hours * 3600 + mins * 60);
            // The suffix is ASCII, so this is a char boundary.
            let local = format!("{}Z", s.get(..s.len() - 6)?);
            let t = humantime::parse_rfc3339(&local).ok()?;
            // Local time = UTC + offset, so UTC = local - offset.
            return if off[0] == b'+' {
                t.checked_sub(shift)
            } else {
                t.checked_add(shift)
            };
        }
    }
    humantime::parse_rfc3339(&s).ok()
}

/// Reads header `name` and parses it; a malformed value is logged and ignored.
fn parse_header<T>(
    get: &dyn Fn(&str) -> Option<String>,
    name: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Option<T> {
    let v = get(name)?;
    let parsed = parse(&v);
    if parsed.is_none() {
        tracing::debug!(header = name, value = %v.escape_debug(), "ignoring malformed header");
    }
    parsed
}

/// Retry-After from response headers: `retry-after-ms` (milliseconds, may be
/// fractional) wins, else `retry-after` as seconds (integer or fractional) or
/// as an HTTP date (relative to `now_unix_ms`; a past date gives
/// `Duration::ZERO`). `None` if absent or malformed (a malformed
/// `retry-after-ms` falls back to `retry-after`).
pub fn retry_after(get: &dyn Fn(&str) -> Option<String>, now_unix_ms: u64) -> Option<Duration> {
    if let Some(d) = parse_header(get, "retry-after-ms", |v| decimal(v, 1_000_000)) {
        return Some(d);
    }
    parse_header(get, "retry-after", |v| {
        decimal(v, NS_PER_SEC).or_else(|| {
            let t = httpdate::parse_http_date(v.trim()).ok()?;
            Some(until(t, now_unix_ms))
        })
    })
}

/// OpenAI / OpenAI-compatible: `x-ratelimit-remaining-tokens`,
/// `x-ratelimit-remaining-requests`, `x-ratelimit-reset-tokens`,
/// `x-ratelimit-reset-requests` (Go durations), plus [`retry_after`].
pub fn openai_feedback(get: &dyn Fn(&str) -> Option<String>, now_unix_ms: u64) -> RateFeedback {
    RateFeedback {
        remaining_tokens: parse_header(get, "x-ratelimit-remaining-tokens", integer),
        remaining_requests: parse_header(get, "x-ratelimit-remaining-requests", integer),
        reset_tokens: parse_header(get, "x-ratelimit-reset-tokens", go_duration),
        reset_requests: parse_header(get, "x-ratelimit-reset-requests", go_duration),
        retry_after: retry_after(get, now_unix_ms),
        ..RateFeedback::default()
    }
}

/// Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{remaining,reset}`
/// (resets are RFC 3339 instants, turned into a duration from `now_unix_ms`;
/// past gives zero) plus [`retry_after`]. `reset_tokens` is the earliest of
/// the token resets present.
pub fn anthropic_feedback(get: &dyn Fn(&str) -> Option<String>, now_unix_ms: u64) -> RateFeedback {
    let reset = |name: &str| parse_header(get, name, |v| rfc3339(v).map(|t| until(t, now_unix_ms)));
    let reset_tokens = [
        "anthropic-ratelimit-tokens-reset",
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-output-tokens-reset",
    ]
    .into_iter()
    .filter_map(reset)
    .min();
    RateFeedback {
        remaining_tokens: parse_header(get, "anthropic-ratelimit-tokens-remaining", integer),
        remaining_input_tokens: parse_header(get, "anthropic-ratelimit-input-tokens-remaining", integer),
        remaining_output_tokens: parse_header(get, "anthropic-ratelimit-output-tokens-remaining", integer),
        remaining_requests: parse_header(get, "anthropic-ratelimit-requests-remaining", integer),
        reset_tokens,
        reset_requests: reset("anthropic-ratelimit-requests-reset"),
        retry_after: retry_after(get, now_unix_ms),
    }
}
