//! Rate-limit feedback as a traffic log records it (lower-case header names
//! and values) and reads it back.

use crate::resilience::limiter::RateFeedback;
use std::collections::BTreeMap;

/// Rate-limit feedback as the lower-case headers a log records.
pub fn rate_headers(r: &RateFeedback) -> BTreeMap<String, String> {
    let mut h = BTreeMap::new();
    let mut put = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            h.insert(k.to_string(), v);
        }
    };
    put("retry-after-ms", r.retry_after.map(|d| d.as_millis().to_string()));
    put(
        "x-ratelimit-remaining-tokens",
        r.remaining_tokens.map(|v| v.to_string()),
    );
    put(
        "x-ratelimit-remaining-requests",
        r.remaining_requests.map(|v| v.to_string()),
    );
    put(
        "anthropic-ratelimit-input-tokens-remaining",
        r.remaining_input_tokens.map(|v| v.to_string()),
    );
    put(
        "anthropic-ratelimit-output-tokens-remaining",
        r.remaining_output_tokens.map(|v| v.to_string()),
    );
    put(
        "x-ratelimit-reset-tokens",
        r.reset_tokens.map(|d| format!("{}ms", d.as_millis())),
    );
    put(
        "x-ratelimit-reset-requests",
        r.reset_requests.map(|d| format!("{}ms", d.as_millis())),
    );
    h
}

/// The rate-limit feedback in a log's recorded headers: the inverse of
/// [`rate_headers`] (OpenAI's names and relative times, with Anthropic's
/// separate input and output limits), also reading a hand-written
/// `retry-after` (an HTTP date relative to `now_unix_ms`).
pub fn recorded_rate(h: &BTreeMap<String, String>, now_unix_ms: u64) -> RateFeedback {
    use crate::wire::headers::{anthropic_feedback, openai_feedback};
    let get = |k: &str| h.get(k).cloned();
    let anthropic = anthropic_feedback(&get, now_unix_ms);
    RateFeedback {
        remaining_input_tokens: anthropic.remaining_input_tokens,
        remaining_output_tokens: anthropic.remaining_output_tokens,
        ..openai_feedback(&get, now_unix_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn recorded_headers_give_back_the_feedback_they_were_written_from() {
        let full = RateFeedback {
            remaining_tokens: Some(1_000),
            remaining_input_tokens: Some(700),
            remaining_output_tokens: Some(300),
            remaining_requests: Some(9),
            reset_tokens: Some(Duration::from_millis(1_500)),
            reset_requests: Some(Duration::from_millis(250)),
            retry_after: Some(Duration::from_millis(4_000)),
        };
        let anthropic = RateFeedback {
            remaining_input_tokens: Some(5),
            ..RateFeedback::default()
        };
        for r in [full, anthropic, RateFeedback::default()] {
            assert_eq!(recorded_rate(&rate_headers(&r), 0), r);
        }
    }
}
