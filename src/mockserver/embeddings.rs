//! `POST /v1/embeddings` of the mock providers: deterministic vectors for each
//! input, under the OpenAI provider's faults and quota.

use super::{check_auth, cut, error_response, quota::Cost, MockServer, Provider};
use crate::clock::{hash_str, mix};
use crate::provider::mock::MockReply;
use crate::provider::{LlmRequest, Message};
use axum::extract::{ConnectInfo, Request};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::{sleep_until, Instant};

/// Vector length when the request does not say.
const DIMENSIONS: usize = 16;

/// The texts of an `input`: a string, strings, or token arrays (as their digits).
fn texts(input: &Value) -> Option<Vec<String>> {
    match input {
        Value::String(s) => Some(vec![s.clone()]),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                Value::Array(tokens) => Some(tokens.iter().map(Value::to_string).collect::<Vec<_>>().join(" ")),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// A unit vector of `n` numbers drawn from `text`.
fn vector(text: &str, n: usize) -> Vec<f64> {
    let seed = hash_str(text);
    let raw: Vec<f64> = (0..n as u64)
        .map(|i| (mix(seed ^ (i + 1)) >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
        .collect();
    let norm = raw.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
    raw.iter().map(|x| (x / norm * 1e6).round() / 1e6).collect()
}

impl MockServer {
    /// One embeddings call to `provider` (OpenAI or Azure OpenAI): auth,
    /// parse, its backend's plan, vectors.
    pub(super) async fn embeddings(&self, provider: Provider, req: Request) -> Response {
        let arrived = Instant::now();
        let (parts, body) = req.into_parts();
        let conn = parts
            .extensions
            .get::<ConnectInfo<super::conn::ConnHandle>>()
            .map(|c| c.0.clone());
        if let Some(resp) = check_auth(provider, &parts.headers, self.keyless) {
            return resp;
        }
        let backend = self.backend(provider);
        let bad = |msg: &str, param: &str| error_response(provider, 400, msg, Some(param), HeaderMap::new());
        let Ok(bytes) = axum::body::to_bytes(body, 8 << 20).await else {
            return bad("request body unreadable or too large", "input");
        };
        let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
            return bad("request body is not valid JSON", "input");
        };
        let Some(model) = v.get("model").and_then(Value::as_str) else {
            return bad("model: field required", "model");
        };
        let Some(inputs) = v.get("input").and_then(texts) else {
            return bad(
                "input: expected a string, an array of strings or of token arrays",
                "input",
            );
        };
        let dims = v
            .get("dimensions")
            .and_then(Value::as_u64)
            .map_or(DIMENSIONS, |d| d.clamp(1, 4096) as usize);
        let chars: usize = inputs.iter().map(String::len).sum();
        let plan_req = LlmRequest {
            request_id: super::wire_request_id(&parts.headers, &bytes),
            model: model.into(),
            messages: vec![Message::user(inputs.join("\n"))].into(),
            max_tokens: 1,
            ..LlmRequest::default()
        };
        let tokens = ((chars as f64 / backend.profile.chars_per_token).ceil() as u64).max(1);
        let plan = backend.mock.plan(&plan_req);
        let mut headers = HeaderMap::new();
        if let Some(q) = &backend.quota {
            match q.take(Cost {
                requests: 1,
                input: tokens,
                output: 0,
            }) {
                Ok(snap) => snap.write_headers(&mut headers),
                Err(ex) => return super::quota_exhausted(provider, ex),
            }
        }
        match plan {
            MockReply::Answer { ttft, .. } => {
                sleep_until(arrived + ttft / 4).await;
                let data: Vec<Value> = inputs
                    .iter()
                    .enumerate()
                    .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": vector(t, dims)}))
                    .collect();
                let body = json!({"object": "list", "data": data, "model": model,
                                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}});
                (headers, Json(body)).into_response()
            }
            MockReply::Status {
                code, message, delay, ..
            } => {
                sleep_until(arrived + delay).await;
                error_response(provider, code, &message, None, headers)
            }
            MockReply::Timeout => {
                sleep_until(arrived + Duration::from_secs(3_600)).await;
                error_response(provider, 504, "Upstream request timed out.", None, headers)
            }
            MockReply::Refused => cut(conn.as_ref(), false),
            MockReply::Reset { delay } | MockReply::Truncated { delay, .. } => {
                sleep_until(arrived + delay).await;
                cut(conn.as_ref(), true)
            }
        }
    }
}
