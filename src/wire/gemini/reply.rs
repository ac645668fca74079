//! `GenerateContentResponse` bodies and `google.rpc.Status` errors, read.

use crate::wire::message::{ToolCall, ToolKind};
use crate::wire::reply::{Finish, Reply, Usage};
use serde_json::Value;
use std::time::Duration;

fn n(v: &Value, p: &str) -> u32 {
    v.pointer(p)
        .and_then(Value::as_u64)
        .map_or(0, |x| x.min(u64::from(u32::MAX)) as u32)
}

/// Usage from `usageMetadata`: output is the answer's tokens and its
/// thoughts' (both are billed as output).
pub(super) fn usage_of(u: &Value) -> Usage {
    Usage {
        input: n(u, "/promptTokenCount"),
        output: n(u, "/candidatesTokenCount").saturating_add(n(u, "/thoughtsTokenCount")),
        cached_input: n(u, "/cachedContentTokenCount"),
    }
}

/// Why a candidate stopped (`STOP` ends a tool call too: `called` says
/// whether it made one). A safety, recitation or other block is a filter.
pub(super) fn finish_of(reason: &str, called: bool) -> Finish {
    match reason {
        "STOP" if called => Finish::ToolCalls,
        "STOP" | "FINISH_REASON_UNSPECIFIED" => Finish::Stop,
        "MAX_TOKENS" => Finish::Length,
        _ => Finish::Filtered,
    }
}

/// A tool call from a `functionCall` part: its own id where Gemini gave
/// one, else one made from the answer's id and the call's place.
pub(super) fn call_of(part: &Value, answer: &str, index: u32) -> Option<ToolCall> {
    let f = part.get("functionCall")?;
    let name = f.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    let arguments = match f.get("args") {
        Some(v @ Value::Object(_)) => v.to_string(),
        _ => "{}".into(),
    };
    let base = match f.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        Some(id) => id.to_string(),
        None => format!(
            "call_{:016x}",
            crate::clock::mix(crate::clock::hash_str(answer) ^ crate::clock::hash_str(&arguments) ^ u64::from(index))
        ),
    };
    let signature = part.get("thoughtSignature").and_then(Value::as_str);
    Some(ToolCall {
        id: super::call_id(base, signature),
        name,
        arguments,
        kind: ToolKind::Function,
    })
}

/// Reads a whole answer. A prompt blocked before any candidate is an
/// answer that was filtered, as Gemini says it (HTTP 200).
pub fn parse_reply(v: &Value) -> Reply {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut r = Reply {
        id: s("responseId"),
        model: s("modelVersion"),
        usage: v.get("usageMetadata").map(usage_of),
        ..Reply::default()
    };
    let candidate = v.pointer("/candidates/0");
    let parts = candidate
        .and_then(|c| c.pointer("/content/parts"))
        .and_then(Value::as_array);
    for part in parts.into_iter().flatten() {
        if let Some(call) = call_of(part, &r.id, r.tool_calls.len() as u32) {
            r.tool_calls.push(call);
        } else if let Some(t) = part.get("text").and_then(Value::as_str) {
            match part.get("thought").and_then(Value::as_bool) {
                Some(true) => r.reasoning.push_str(t),
                _ => r.text.push_str(t),
            }
        }
    }
    let reason = candidate.and_then(|c| c.get("finishReason")).and_then(Value::as_str);
    r.finish = match (reason, v.pointer("/promptFeedback/blockReason")) {
        (Some(reason), _) => Some(finish_of(reason, !r.tool_calls.is_empty())),
        (None, Some(_)) => Some(Finish::Filtered),
        (None, None) => None,
    };
    r
}

/// A `google.rpc.Status` error, read: its status name, message and the
/// delay its `RetryInfo` asks for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Status {
    /// `RESOURCE_EXHAUSTED`, `UNAVAILABLE`, …
    pub status: String,
    /// What the provider said.
    pub message: String,
    /// `RetryInfo.retryDelay`.
    pub retry_delay: Option<Duration>,
    /// An `ErrorInfo` reason (`API_KEY_INVALID`, …).
    pub reason: String,
}

impl Status {
    /// Reads `{"error": {...}}`.
    pub fn read(v: &Value) -> Option<Self> {
        let e = v.get("error")?;
        let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let mut out = Status {
            status: s("status"),
            message: s("message"),
            ..Status::default()
        };
        for d in e.get("details").and_then(Value::as_array).into_iter().flatten() {
            let t = d.get("@type").and_then(Value::as_str).unwrap_or("");
            if t.ends_with("google.rpc.RetryInfo") {
                out.retry_delay = d.get("retryDelay").and_then(Value::as_str).and_then(duration);
            } else if t.ends_with("google.rpc.ErrorInfo") {
                out.reason = d.get("reason").and_then(Value::as_str).unwrap_or("").to_string();
            }
        }
        Some(out)
    }

    /// The error's type in the words fusebox classifies in-band errors by
    /// (`rate_limit_error`, …; `api_error` for the rest, whose HTTP status
    /// says): an invalid key is the operator's to fix, not the caller's; a
    /// prompt over the model's window is too large.
    pub fn error_type(&self) -> &'static str {
        match (self.status.as_str(), self.reason.as_str()) {
            (_, "API_KEY_INVALID") | ("UNAUTHENTICATED" | "PERMISSION_DENIED", _) => "authentication_error",
            ("RESOURCE_EXHAUSTED", _) => "rate_limit_error",
            ("UNAVAILABLE", _) => "overloaded_error",
            ("INVALID_ARGUMENT", _) if self.message.contains("exceeds the maximum number of tokens") => {
                "request_too_large"
            }
            ("INVALID_ARGUMENT" | "FAILED_PRECONDITION", _) => "invalid_request_error",
            ("NOT_FOUND", _) => "not_found_error",
            _ => "api_error",
        }
    }

    /// What it says, for messages.
    pub fn said(&self) -> String {
        format!("{} {}", self.status, self.message).trim().to_string()
    }
}

/// A protobuf `Duration` in JSON: decimal seconds and `s` (`"37s"`, `"0.5s"`).
fn duration(s: &str) -> Option<Duration> {
    let secs: f64 = s.strip_suffix('s')?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A function call ends `STOP` and is a tool call; its signature rides
    /// in its id; thoughts are reasoning; usage counts thoughts as output.
    #[test]
    fn an_answer_with_a_call_thoughts_and_usage_is_read() {
        let v = json!({
            "candidates": [{"content": {"role": "model", "parts": [
                {"text": "thinking…", "thought": true},
                {"text": "Checking."},
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"}
            ]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 5, "thoughtsTokenCount": 7, "totalTokenCount": 24},
            "modelVersion": "gemini-2.5-flash", "responseId": "r1"
        });
        let r = parse_reply(&v);
        assert_eq!((r.text.as_str(), r.reasoning.as_str()), ("Checking.", "thinking…"));
        assert_eq!(r.finish, Some(Finish::ToolCalls));
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].arguments, r#"{"city":"Paris"}"#);
        assert_eq!(crate::wire::gemini::signature_of(&r.tool_calls[0].id), Some("c2ln"));
        assert_eq!(
            r.usage,
            Some(Usage {
                input: 12,
                output: 12,
                cached_input: 0
            })
        );
        let blocked = json!({"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 3}});
        assert_eq!(parse_reply(&blocked).finish, Some(Finish::Filtered));
    }

    /// A quota error says when to retry; an invalid key is the operator's.
    #[test]
    fn errors_are_read_with_their_retry_delay_and_type() {
        let body = json!({"error": {"code": 429, "message": "You exceeded your current quota", "status": "RESOURCE_EXHAUSTED",
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}]}});
        let s = Status::read(&body).unwrap();
        assert_eq!(s.error_type(), "rate_limit_error");
        assert_eq!(s.said(), "RESOURCE_EXHAUSTED You exceeded your current quota");
        assert_eq!(s.retry_delay, Some(Duration::from_secs(37)));
        let key = json!({"error": {"code": 400, "message": "API key not valid.", "status": "INVALID_ARGUMENT",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]}});
        assert_eq!(Status::read(&key).unwrap().error_type(), "authentication_error");
        assert_eq!(duration("0.5s"), Some(Duration::from_millis(500)));
    }
}
