//! A strict fake upstream: the OpenAI and Anthropic endpoints, refusing
//! what the real APIs refuse (tool results that answer no tool call, tool
//! calls left unanswered, `stream_options` without `stream`, both output
//! caps at once, Anthropic turns that do not alternate, tool blocks
//! without tools, …) with the status and error body the real API sends,
//! and recording every body it receives. Written apart from fusebox's own
//! wire code, so a mistake there cannot hide behind the same mistake here.
//!
//! It answers as a model in a tool loop would: a call of the first tool when
//! tools are offered and the conversation ends in a user turn, the text of
//! the tool's result once it ends in one, text otherwise; whole or as a
//! stream of chunks.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The APIs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    OpenAi,
    Anthropic,
    /// Google's generateContent ([`super::strict_gemini`]).
    Gemini,
    /// Amazon Bedrock's Converse ([`super::strict_bedrock`]).
    Bedrock,
}

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Received {
    pub api: Api,
    pub body: Value,
    pub status: u16,
    pub headers: HeaderMap,
    /// When it came.
    pub at: std::time::Instant,
}

/// How streams are sent.
#[derive(Default)]
pub struct StreamPlan {
    /// Between content chunks.
    pub gap: Duration,
    /// Cut the connection of this API's streams after this many content chunks.
    pub reset_after: Option<(Api, usize)>,
    /// After the first content chunk, wait for this before sending more
    /// (a whole answer waits for it before it is sent).
    pub hold: Option<Arc<Notify>>,
    /// End streams without their terminator (`[DONE]`, `message_stop`),
    /// the body closed cleanly after the finish and usage.
    pub no_terminator: bool,
    /// Send a malformed event (`data: {"choices": [` …) after this many
    /// content chunks.
    pub malformed_after: Option<usize>,
    /// Before content chunk `i` of an OpenAI stream, wait this long (a
    /// whole OpenAI answer waits for all of them before it is sent). A
    /// whole answer of an API whose streams are cut is cut too, part way
    /// through its body.
    pub pauses: Vec<(usize, Duration)>,
}

/// How the OpenAI endpoint fails before it answers, as providers do.
#[derive(Default)]
pub struct Faults {
    /// Answer this many requests 429, with `Retry-After: s` when given.
    pub rate_limited: (u32, Option<u64>),
    /// Answer this many requests 500.
    pub server_errors: u32,
    /// Answer 503 until then.
    pub down_until: Option<std::time::Instant>,
    /// Answer every request 400 with this error object.
    pub refuse: Option<Value>,
}

#[derive(Default)]
pub struct StrictState {
    pub received: Mutex<Vec<Received>>,
    /// APIs answering 503.
    pub down: Mutex<HashSet<Api>>,
    /// Models answering 503 (529 on Anthropic's API).
    pub down_models: Mutex<HashSet<String>>,
    pub stream: Mutex<StreamPlan>,
    /// The text answer (split on spaces into stream chunks).
    pub text: Mutex<String>,
    /// Continue a prefilled answer: answer only the part of `text` after
    /// the assistant's last turn.
    pub continues: Mutex<bool>,
    /// Refuse a conversation that ends in the assistant's turn, as models
    /// without prefill do (Anthropic's 400).
    pub no_prefill: Mutex<bool>,
    /// The OpenAI endpoint's faults.
    pub faults: Mutex<Faults>,
    /// The Anthropic endpoint refuses every request as too large (its 413).
    pub anthropic_too_large: Mutex<bool>,
    /// Asked for the rest of an answer in a user turn, begin by writing
    /// again this many of its last words, as models do.
    pub repeats: Mutex<usize>,
    /// Asked so, begin again at this word of the answer so far instead (0:
    /// the whole answer again, as models often do).
    pub again_from: Mutex<Option<usize>>,
    /// Asked so, answer this instead (a model that begins again and goes
    /// its own way).
    pub instead: Mutex<Option<String>>,
    /// Gemini blocks every prompt for safety (its HTTP 200 without candidates).
    pub blocked: Mutex<bool>,
    /// Bedrock's streams end, after this many content frames, in an
    /// exception frame of this type (`throttlingException`, …).
    pub bedrock_exception: Mutex<Option<(usize, &'static str)>>,
    /// Vertex AI's access tokens ([`super::strict_vertex`]).
    pub vertex: Mutex<super::strict_vertex::Tokens>,
}

/// A failure the endpoint answers with before it answers, in no API's
/// words (each endpoint says it in its own).
pub(super) enum Fault {
    /// 400 with this error object.
    Refused(Value),
    /// 503.
    Down,
    /// 429, with a delay in seconds when given.
    RateLimited(Option<u64>),
    /// 500.
    ServerError,
}

impl Faults {
    /// The failure the next request gets, if any (counting it).
    pub(super) fn take(&mut self) -> Option<Fault> {
        if let Some(e) = &self.refuse {
            return Some(Fault::Refused(e.clone()));
        }
        if self.down_until.is_some_and(|t| std::time::Instant::now() < t) {
            return Some(Fault::Down);
        }
        if self.rate_limited.0 > 0 {
            self.rate_limited.0 -= 1;
            return Some(Fault::RateLimited(self.rate_limited.1));
        }
        if self.server_errors > 0 {
            self.server_errors -= 1;
            return Some(Fault::ServerError);
        }
        None
    }

    /// The failure the next request gets, in OpenAI's words.
    fn fail(&mut self) -> Option<Response> {
        Some(match self.take()? {
            Fault::Refused(e) => (StatusCode::BAD_REQUEST, Json(json!({ "error": e }))).into_response(),
            Fault::Down => openai_error(503, "The server is overloaded.", None),
            Fault::RateLimited(after) => {
                let mut r = (
                    StatusCode::TOO_MANY_REQUESTS,
                    Json(json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "param": null, "code": "rate_limit_exceeded"}})),
                )
                    .into_response();
                if let Some(s) = after {
                    r.headers_mut().insert("retry-after", s.into());
                }
                r
            }
            Fault::ServerError => openai_error(500, "The server had an error while processing your request.", None),
        })
    }
}

impl StrictState {
    pub(super) fn is_down(&self, api: Api, body: &Value) -> bool {
        self.down.lock().contains(&api)
            || body["model"]
                .as_str()
                .is_some_and(|m| self.down_models.lock().contains(m))
    }
}

pub struct Strict {
    pub addr: SocketAddr,
    pub state: Arc<StrictState>,
}

pub const ANSWER: &str = "Order 38100 is in transit and should arrive within two days.";

impl Strict {
    pub async fn start() -> Strict {
        let state = Arc::new(StrictState::default());
        *state.text.lock() = ANSWER.to_string();
        let app = Router::new()
            .route("/v1/chat/completions", post(openai))
            .route("/openai/deployments/{deployment}/chat/completions", post(azure))
            .route("/openai/deployments/{deployment}/embeddings", post(azure_embeddings))
            .route("/v1/messages", post(anthropic))
            .route("/v1beta/models/{call}", post(super::strict_gemini::gemini))
            .route("/v1/models/{call}", post(super::strict_gemini::gemini))
            .route("/token", post(super::strict_vertex::token))
            .route("/model/{model}/{op}", post(super::strict_bedrock::bedrock))
            .route(
                "/{version}/projects/{project}/locations/{location}/publishers/google/models/{call}",
                post(super::strict_vertex::vertex),
            )
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Strict { addr, state }
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bodies received from `api`, in order.
    pub fn bodies(&self, api: Api) -> Vec<Value> {
        self.state
            .received
            .lock()
            .iter()
            .filter(|r| r.api == api)
            .map(|r| r.body.clone())
            .collect()
    }

    /// Every request received.
    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().clone()
    }

    /// Model `model` (as the upstream is asked for it) answers 503.
    pub fn set_model_down(&self, model: &str) {
        self.state.down_models.lock().insert(model.to_string());
    }

    pub fn set_down(&self, api: Api, down: bool) {
        let mut d = self.state.down.lock();
        if down {
            d.insert(api);
        } else {
            d.remove(&api);
        }
    }
}

fn openai_error(status: u16, message: &str, param: Option<&str>) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": param, "code": null}});
    (StatusCode::from_u16(status).unwrap(), Json(body)).into_response()
}

fn anthropic_error(status: u16, ty: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": ty, "message": message}});
    (StatusCode::from_u16(status).unwrap(), Json(body)).into_response()
}

/// OpenAI's checks, the ones its API makes; `Err` is (param, message).
fn check_openai(b: &Value) -> Result<(), (String, String)> {
    let bad = |p: &str, m: &str| Err((p.to_string(), m.to_string()));
    if !b["model"].is_string() {
        return bad("model", "you must provide a model parameter");
    }
    let Some(messages) = b["messages"].as_array().filter(|m| !m.is_empty()) else {
        return bad("messages", "messages must be a non-empty array");
    };
    if b.get("max_tokens").is_some() && b.get("max_completion_tokens").is_some() {
        return bad("max_tokens", "max_tokens and max_completion_tokens cannot both be set");
    }
    if let Some(n) = b.get("n").filter(|n| !n.is_null()) {
        if !n.as_u64().is_some_and(|n| (1..=128).contains(&n)) {
            return bad(
                "n",
                "Invalid 'n': integer out of range. Expected a value between 1 and 128.",
            );
        }
    }
    if b.get("stream_options").is_some() && b["stream"] != json!(true) {
        return bad(
            "stream_options",
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
        );
    }
    let mut open: Option<Vec<String>> = None;
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if !["system", "developer", "user", "assistant", "tool"].contains(&role) {
            return bad(&format!("messages[{i}].role"), "invalid role");
        }
        if let Some(parts) = m["content"].as_array() {
            for (j, p) in parts.iter().enumerate() {
                let ok = match p["type"].as_str() {
                    Some("text") => p["text"].is_string(),
                    Some("image_url") => p["image_url"]["url"].is_string(),
                    Some("input_audio") | Some("file") | Some("refusal") => true,
                    _ => false,
                };
                if !ok {
                    return bad(&format!("messages[{i}].content[{j}]"), "invalid content part");
                }
            }
        } else if !(m["content"].is_string() || (role == "assistant" && m["content"].is_null())) {
            return bad(&format!("messages[{i}].content"), "invalid content");
        }
        if role == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or("");
            match open.as_mut() {
                Some(ids) if ids.iter().any(|x| x == id) => ids.retain(|x| x != id),
                _ => {
                    return bad(
                        &format!("messages[{i}].role"),
                        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
                    )
                }
            }
            continue;
        }
        if let Some(ids) = open.take().filter(|ids| !ids.is_empty()) {
            return bad(
                "messages",
                &format!("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}", ids.join(", ")),
            );
        }
        if let Some(calls) = m["tool_calls"].as_array() {
            let mut ids = Vec::new();
            for c in calls {
                let function = c["type"] == "function"
                    && c["function"]["name"].is_string()
                    && c["function"]["arguments"].is_string();
                let custom =
                    c["type"] == "custom" && c["custom"]["name"].is_string() && c["custom"]["input"].is_string();
                if !(function || custom) {
                    return bad(&format!("messages[{i}].tool_calls"), "invalid tool call");
                }
                ids.push(c["id"].as_str().unwrap_or("").to_string());
            }
            open = Some(ids);
        }
    }
    if open.is_some_and(|ids| !ids.is_empty()) {
        return bad("messages", "tool_calls without tool messages responding to them");
    }
    for (i, t) in b["tools"].as_array().into_iter().flatten().enumerate() {
        let function = t["type"] == "function" && t["function"]["name"].is_string();
        let custom = t["type"] == "custom" && t["custom"]["name"].is_string();
        if !(function || custom) {
            return bad(&format!("tools[{i}]"), "invalid tool");
        }
    }
    Ok(())
}

/// Anthropic's checks; `Err` is the message.
fn check_anthropic(h: &HeaderMap, b: &Value) -> Result<(), String> {
    if h.get("anthropic-version").is_none() {
        return Err("anthropic-version: header is required".into());
    }
    if !b["max_tokens"].is_u64() {
        return Err("max_tokens: Field required".into());
    }
    if b["temperature"].as_f64().is_some_and(|t| !(0.0..=1.0).contains(&t)) {
        return Err("temperature: Input should be less than or equal to 1".into());
    }
    let Some(messages) = b["messages"].as_array().filter(|m| !m.is_empty()) else {
        return Err("messages: at least one message is required".into());
    };
    let has_tools = b["tools"].as_array().is_some_and(|t| !t.is_empty());
    let mut prev_role = "";
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if role != "user" && role != "assistant" {
            return Err(format!("messages.{i}.role: Input should be 'user' or 'assistant'"));
        }
        if i == 0 && role != "user" {
            return Err("messages: first message must use the \"user\" role".into());
        }
        if role == prev_role {
            return Err(format!("messages: roles must alternate between \"user\" and \"assistant\", but found multiple \"{role}\" roles in a row"));
        }
        prev_role = role;
        let blocks: Vec<Value> = match &m["content"] {
            Value::String(s) if !s.is_empty() => vec![json!({"type": "text", "text": s})],
            Value::Array(a) if !a.is_empty() => a.clone(),
            _ => return Err(format!("messages.{i}.content: must be a non-empty string or array")),
        };
        let mut answered = Vec::new();
        let mut calls = Vec::new();
        for (j, bl) in blocks.iter().enumerate() {
            match bl["type"].as_str() {
                Some("text") if bl["text"].as_str().is_some_and(|t| !t.is_empty()) => {}
                Some("text") => {
                    return Err(format!(
                        "messages.{i}.content.{j}.text: text content blocks must be non-empty"
                    ))
                }
                Some("image") if bl["source"]["type"].is_string() => {}
                Some("tool_use") if role == "assistant" => calls.push(bl["id"].as_str().unwrap_or("").to_string()),
                Some("tool_result") if role == "user" => {
                    answered.push(bl["tool_use_id"].as_str().unwrap_or("").to_string())
                }
                Some("thinking") | Some("document") => {}
                other => return Err(format!("messages.{i}.content.{j}: unexpected block {other:?}")),
            }
        }
        if (!calls.is_empty() || !answered.is_empty()) && !has_tools {
            return Err("Requests which include `tool_use` or `tool_result` blocks must define tools.".into());
        }
        if role == "user" {
            for id in &answered {
                if !open.contains(id) {
                    return Err(format!("messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."));
                }
            }
            if let Some(missing) = open.iter().find(|id| !answered.contains(id)) {
                return Err(format!(
                    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {missing}"
                ));
            }
            open.clear();
        } else {
            open = calls;
        }
        if role == "assistant" && i + 1 == messages.len() {
            if let Some(t) = blocks.last().and_then(|b| b["text"].as_str()) {
                if t.ends_with(char::is_whitespace) {
                    return Err("final assistant content cannot end with trailing whitespace".into());
                }
            }
        }
    }
    Ok(())
}

/// The first tool offered is a custom (free-text) tool.
fn custom_first(b: &Value) -> bool {
    b["tools"][0]["type"] == "custom"
}

/// What the model writes as the call's input.
fn call_input(b: &Value) -> &'static str {
    if custom_first(b) {
        CUSTOM_INPUT
    } else {
        CALL_ARGS
    }
}

/// The model's call of the first tool offered, its input `input`.
fn openai_call(b: &Value, input: &str) -> Value {
    let name = called(Api::OpenAi, b);
    if custom_first(b) {
        json!({"id": "call_abc123", "type": "custom", "custom": {"name": name, "input": input}})
    } else {
        json!({"id": "call_abc123", "type": "function", "function": {"name": name, "arguments": input}})
    }
}

/// What the model does with a conversation: `(tool call?, text)`.
/// The tool the model calls: the first one offered.
pub(super) fn called(api: Api, b: &Value) -> String {
    let t = &b["tools"][0];
    let name = match api {
        Api::OpenAi if t["type"] == "custom" => &t["custom"]["name"],
        // A Gemini or Bedrock conversation is read in its OpenAI form.
        Api::OpenAi | Api::Gemini | Api::Bedrock => &t["function"]["name"],
        Api::Anthropic => &t["name"],
    };
    name.as_str().unwrap_or("get_order").to_string()
}

pub(super) fn decide(state: &StrictState, api: Api, b: &Value) -> (bool, String) {
    let messages = b["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let tool_result = match api {
        Api::OpenAi | Api::Gemini | Api::Bedrock => {
            (last["role"] == "tool").then(|| last["content"].as_str().unwrap_or("").to_string())
        }
        Api::Anthropic => last["content"].as_array().and_then(|bl| {
            bl.iter()
                .find(|x| x["type"] == "tool_result")
                .map(|x| match &x["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(a) => a.iter().filter_map(|p| p["text"].as_str()).collect(),
                    _ => String::new(),
                })
        }),
    };
    if let Some(result) = tool_result {
        return (false, format!("The order service says: {result}"));
    }
    let choice_none = match api {
        Api::OpenAi | Api::Gemini | Api::Bedrock => b["tool_choice"] == "none",
        Api::Anthropic => b["tool_choice"]["type"] == "none",
    };
    let tools = b["tools"].as_array().is_some_and(|t| !t.is_empty());
    let text = state.text.lock().clone();
    if *state.continues.lock() {
        // The assistant's last turn: a prefill, or the answer so far
        // followed by the user's asking for the rest.
        let prefix = match messages
            .iter()
            .rev()
            .find(|m| m["role"] == "assistant")
            .map(|m| &m["content"])
        {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(a)) => a.iter().filter_map(|p| p["text"].as_str()).collect(),
            _ => String::new(),
        };
        if let Some(rest) = text.strip_prefix(prefix.trim_end()) {
            let asked = messages.last().is_some_and(|m| m["role"] == "user");
            if let Some(other) = state.instead.lock().clone().filter(|_| asked && !prefix.is_empty()) {
                return (false, other);
            }
            let words: Vec<&str> = prefix.split_whitespace().collect();
            let from = state
                .again_from
                .lock()
                .unwrap_or_else(|| words.len().saturating_sub(*state.repeats.lock()));
            let again = words[from.min(words.len())..].join(" ");
            return match asked && !again.is_empty() {
                true => (false, format!("{again}{rest}")),
                false => (false, rest.to_string()),
            };
        }
    }
    (tools && !choice_none, text)
}

pub(super) fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        cur.push(c);
        if c == ' ' {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

pub(super) const CALL_ARGS: &str = r#"{"order_id":"38100"}"#;
/// A custom tool's call input: free text, not JSON.
pub const CUSTOM_INPUT: &str = "SELECT status FROM orders WHERE id = 38100";

/// Azure OpenAI's deployment URL: an `api-version` and the key in
/// `api-key`, as Azure requires; then OpenAI's API, as Azure's is.
async fn azure(
    State(state): State<Arc<StrictState>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    match azure_auth(&uri, headers) {
        Ok(headers) => openai(State(state), headers, body).await,
        Err(refused) => *refused,
    }
}

/// `headers` with Azure's key as OpenAI's bearer token, or Azure's
/// refusal of a call without an `api-version` or without a key.
fn azure_auth(uri: &axum::http::Uri, mut headers: HeaderMap) -> Result<HeaderMap, Box<Response>> {
    let versioned = uri.query().is_some_and(|q| {
        q.split('&')
            .any(|p| p.strip_prefix("api-version=").is_some_and(|v| !v.is_empty()))
    });
    if !versioned {
        let body = json!({"error": {"code": "404", "message": "Resource not found"}});
        return Err(Box::new((StatusCode::NOT_FOUND, Json(body)).into_response()));
    }
    let Some(key) = headers.remove("api-key").filter(|k| !k.is_empty()) else {
        let body = json!({"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API endpoint."}});
        return Err(Box::new((StatusCode::UNAUTHORIZED, Json(body)).into_response()));
    };
    if headers.contains_key("authorization") {
        return Err(Box::new(openai_error(
            400,
            "Give the key in api-key or a token in Authorization, not both.",
            None,
        )));
    }
    let bearer = format!("Bearer {}", key.to_str().unwrap_or_default());
    headers.insert("authorization", bearer.parse().unwrap());
    Ok(headers)
}

/// Azure OpenAI's embeddings on a deployment: `input` a string or a list
/// of strings, `dimensions`, `encoding_format` `float` or `base64`, as
/// OpenAI's reference defines them; 8 values each by default.
async fn azure_embeddings(
    State(state): State<Arc<StrictState>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    use base64::Engine;
    let headers = match azure_auth(&uri, headers) {
        Ok(h) => h,
        Err(refused) => return *refused,
    };
    let b: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let texts: Option<Vec<&str>> = match &b["input"] {
        Value::String(s) => Some(vec![s.as_str()]),
        Value::Array(items) if !items.is_empty() => items.iter().map(Value::as_str).collect(),
        _ => None,
    };
    let known = b.as_object().is_some_and(|o| {
        o.keys()
            .all(|k| ["input", "model", "dimensions", "encoding_format", "user"].contains(&k.as_str()))
    });
    let encoding = b["encoding_format"].as_str().unwrap_or("float");
    let ok = known && texts.is_some() && ["float", "base64"].contains(&encoding);
    state.received.lock().push(Received {
        api: Api::OpenAi,
        body: b.clone(),
        status: if ok { 200 } else { 400 },
        headers,
        at: std::time::Instant::now(),
    });
    let Some(texts) = texts.filter(|_| ok) else {
        return openai_error(
            400,
            "'input' must be a string or a list of strings; unknown parameter or encoding_format",
            None,
        );
    };
    let dims = b["dimensions"].as_u64().unwrap_or(8) as usize;
    let data: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let values: Vec<f32> = (0..dims).map(|d| ((t.len() + d) % 7) as f32 / 8.0).collect();
            let embedding = match encoding {
                "base64" => {
                    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                    json!(base64::engine::general_purpose::STANDARD.encode(bytes))
                }
                _ => json!(values),
            };
            json!({"object": "embedding", "index": i, "embedding": embedding})
        })
        .collect();
    let tokens: usize = texts.iter().map(|t| t.split_whitespace().count()).sum();
    Json(
        json!({"object": "list", "data": data, "model": "text-embedding-3-small",
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}),
    )
    .into_response()
}

async fn openai(State(state): State<Arc<StrictState>>, headers: HeaderMap, body: String) -> Response {
    let b: Value = match serde_json::from_str(&body) {
        Ok(b) => b,
        Err(_) => return openai_error(400, "We could not parse the JSON body of your request.", None),
    };
    let record = |status: u16| {
        state.received.lock().push(Received {
            api: Api::OpenAi,
            body: b.clone(),
            status,
            headers: headers.clone(),
            at: std::time::Instant::now(),
        })
    };
    if !headers
        .get("authorization")
        .is_some_and(|v| v.to_str().unwrap_or("").starts_with("Bearer "))
    {
        record(401);
        return openai_error(401, "You didn't provide an API key.", None);
    }
    if let Err((param, msg)) = check_openai(&b) {
        record(400);
        return openai_error(400, &msg, Some(&param));
    }
    if state.is_down(Api::OpenAi, &b) {
        record(503);
        return openai_error(503, "The server is overloaded.", None);
    }
    if let Some(failed) = state.faults.lock().fail() {
        record(failed.status().as_u16());
        return failed;
    }
    record(200);
    let hold = state.stream.lock().hold.clone();
    if let (Some(h), false) = (hold, b["stream"] == json!(true)) {
        h.notified().await;
    }
    let paused: Duration = state.stream.lock().pauses.iter().map(|p| p.1).sum();
    if b["stream"] != json!(true) && !paused.is_zero() {
        tokio::time::sleep(paused).await;
    }
    let (call, mut text) = decide(&state, Api::OpenAi, &b);
    if b["response_format"]["type"] == "json_schema" {
        // Structured output: an object as the schema asks.
        text = json!({"order_id": "38100", "status": "in transit"}).to_string();
    }
    let model = b["model"].as_str().unwrap_or("").to_string();
    // Each of `n` choices is 12 tokens, as the real API bills them all.
    let n = b["n"].as_u64().unwrap_or(1);
    let usage = json!({"prompt_tokens": 25, "completion_tokens": 12 * n, "total_tokens": 25 + 12 * n,
                       "prompt_tokens_details": {"cached_tokens": 0}});
    if b["stream"] != json!(true) {
        let message = if call {
            json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                openai_call(&b, call_input(&b))]})
        } else {
            json!({"role": "assistant", "content": text, "refusal": null})
        };
        let choices: Vec<Value> = (0..n)
            .map(|i| {
                json!({"index": i, "message": message, "logprobs": null,
                            "finish_reason": if call { "tool_calls" } else { "stop" }})
            })
            .collect();
        let whole = json!({
            "id": "chatcmpl-strict1", "object": "chat.completion", "created": 1_700_000_000, "model": model,
            "system_fingerprint": "fp_strict",
            "choices": choices,
            "usage": usage, "service_tier": "default",
        });
        if state.stream.lock().reset_after.is_some_and(|(a, _)| a == Api::OpenAi) {
            // Cut part way through the body, its length promised whole.
            let bytes = whole.to_string();
            let part = bytes[..bytes.len() / 2].to_string();
            let body = futures_util::stream::iter([Ok(part), Err(std::io::Error::other("cut"))]);
            return (
                [
                    ("content-type", "application/json"),
                    ("content-length", &bytes.len().to_string()),
                ],
                Body::from_stream(body),
            )
                .into_response();
        }
        return Json(whole).into_response();
    }
    let chunk = |delta: Value, finish: Value| {
        let v = json!({"id": "chatcmpl-strict1", "object": "chat.completion.chunk", "created": 1_700_000_000,
                       "model": model, "system_fingerprint": "fp_strict",
                       "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]});
        format!("data: {v}\n\n")
    };
    let mut head = vec![chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        Value::Null,
    )];
    let mut content = Vec::new();
    if call {
        let key = if custom_first(&b) { "custom" } else { "function" };
        head.push(chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_abc123", "type": openai_call(&b, "")["type"],
                                   key: openai_call(&b, "")[key]}]}),
            Value::Null,
        ));
        let input = if custom_first(&b) { "input" } else { "arguments" };
        content.push(chunk(
            json!({"tool_calls": [{"index": 0, key: {input: call_input(&b)}}]}),
            Value::Null,
        ));
    } else {
        for w in words(&text) {
            content.push(chunk(json!({"content": w}), Value::Null));
        }
    }
    let mut tail = vec![chunk(json!({}), json!(if call { "tool_calls" } else { "stop" }))];
    if b["stream_options"]["include_usage"] == json!(true) {
        let v = json!({"id": "chatcmpl-strict1", "object": "chat.completion.chunk", "created": 1_700_000_000,
                       "model": model, "choices": [], "usage": usage});
        tail.push(format!("data: {v}\n\n"));
    }
    tail.push("data: [DONE]\n\n".into());
    stream_body(&state, Api::OpenAi, head, content, tail)
}

/// A stream: `head` at once, `content` one chunk per gap (held or cut as
/// the plan says), then `tail`.
pub(super) fn stream_body(
    state: &StrictState,
    api: Api,
    head: Vec<String>,
    content: Vec<String>,
    tail: Vec<String>,
) -> Response {
    let mut tail = tail;
    if state.stream.lock().no_terminator {
        tail.retain(|t| !t.contains("[DONE]") && !t.contains("message_stop"));
    }
    let bytes = |v: Vec<String>| v.into_iter().map(String::into_bytes).collect();
    let malformed = b"data: {\"choices\": [{\"delta\": {\"content\": \"tru\n\n".to_vec();
    let plain = (bytes(head), bytes(content), bytes(tail));
    stream_of(state, api, plain, malformed, "text/event-stream")
}

/// A stream's chunks: sent at once, one per gap, and at the end.
pub(super) type Chunks = (Vec<Vec<u8>>, Vec<Vec<u8>>, Vec<Vec<u8>>);

/// A stream of `(head, content, tail)` chunks as [`stream_body`] sends
/// them, `malformed` sent where the plan says, as `content_type`.
pub(super) fn stream_of(
    state: &StrictState,
    api: Api,
    (head, content, tail): Chunks,
    malformed: Vec<u8>,
    content_type: &'static str,
) -> Response {
    let plan = state.stream.lock();
    let reset_after = plan.reset_after.filter(|(a, _)| *a == api).map(|(_, n)| n);
    let (gap, hold) = (plan.gap, plan.hold.clone());
    let pauses = if api != Api::Anthropic {
        plan.pauses.clone()
    } else {
        Vec::new()
    };
    let mut content = content;
    if let Some(n) = plan.malformed_after.filter(|&n| n <= content.len()) {
        content.insert(n, malformed);
    }
    let stream = async_stream([head, content, tail], gap, reset_after, hold, pauses);
    ([("content-type", content_type)], Body::from_stream(stream)).into_response()
}

fn async_stream(
    [head, content, tail]: [Vec<Vec<u8>>; 3],
    gap: Duration,
    reset_after: Option<usize>,
    hold: Option<Arc<Notify>>,
    pauses: Vec<(usize, Duration)>,
) -> impl futures_util::Stream<Item = Result<Vec<u8>, std::io::Error>> + Send {
    enum Next {
        Head(Vec<Vec<u8>>),
        Content(usize),
        Tail,
        Done,
    }
    let content = Arc::new(content);
    let tail = Arc::new(tail);
    futures_util::stream::unfold(Next::Head(head), move |next| {
        let (content, tail, hold) = (content.clone(), tail.clone(), hold.clone());
        let pause: Duration = match next {
            Next::Content(i) => pauses.iter().filter(|p| p.0 == i).map(|p| p.1).sum(),
            _ => Duration::ZERO,
        };
        async move {
            tokio::time::sleep(pause).await;
            match next {
                Next::Head(h) => Some((Ok(h.concat()), Next::Content(0))),
                Next::Content(i) if i < content.len() => {
                    if reset_after == Some(i) {
                        // Let what was sent reach the client before the cut.
                        tokio::time::sleep(gap).await;
                        return Some((Err(std::io::Error::other("cut")), Next::Done));
                    }
                    if i == 1 {
                        if let Some(h) = &hold {
                            h.notified().await;
                        }
                    }
                    if i > 0 && !gap.is_zero() {
                        tokio::time::sleep(gap).await;
                    }
                    Some((Ok(content[i].clone()), Next::Content(i + 1)))
                }
                Next::Content(_) => {
                    if reset_after.is_some() {
                        return Some((Err(std::io::Error::other("cut")), Next::Done));
                    }
                    Some((Ok(tail.concat()), Next::Tail))
                }
                Next::Tail | Next::Done => None,
            }
        }
    })
}

async fn anthropic(State(state): State<Arc<StrictState>>, headers: HeaderMap, body: String) -> Response {
    let b: Value = match serde_json::from_str(&body) {
        Ok(b) => b,
        Err(_) => return anthropic_error(400, "invalid_request_error", "invalid JSON"),
    };
    let record = |status: u16| {
        state.received.lock().push(Received {
            api: Api::Anthropic,
            body: b.clone(),
            status,
            headers: headers.clone(),
            at: std::time::Instant::now(),
        })
    };
    let key = headers.get("x-api-key").is_some()
        || headers
            .get("authorization")
            .is_some_and(|v| v.to_str().unwrap_or("").starts_with("Bearer "));
    if !key {
        record(401);
        return anthropic_error(401, "authentication_error", "x-api-key header is required");
    }
    if let Err(msg) = check_anthropic(&headers, &b) {
        record(400);
        return anthropic_error(400, "invalid_request_error", &msg);
    }
    let prefilled = b["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "assistant");
    if prefilled && *state.no_prefill.lock() {
        record(400);
        return anthropic_error(
            400,
            "invalid_request_error",
            "This model does not support assistant message prefill. The conversation must end with a user message.",
        );
    }
    if *state.anthropic_too_large.lock() {
        record(413);
        return anthropic_error(
            413,
            "request_too_large",
            "Request exceeds the maximum allowed number of bytes.",
        );
    }
    if state.is_down(Api::Anthropic, &b) {
        record(529);
        return anthropic_error(529, "overloaded_error", "Overloaded");
    }
    record(200);
    let (call, text) = decide(&state, Api::Anthropic, &b);
    let model = b["model"].as_str().unwrap_or("").to_string();
    let stop = if call { "tool_use" } else { "end_turn" };
    if b["stream"] != json!(true) {
        let content = if call {
            json!([{"type": "tool_use", "id": "toolu_abc123", "name": called(Api::Anthropic, &b), "input": {"order_id": "38100"}}])
        } else {
            json!([{"type": "text", "text": text}])
        };
        return Json(json!({
            "id": "msg_strict1", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "stop_sequence": null,
            "usage": {"input_tokens": 25, "output_tokens": 12, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }))
        .into_response();
    }
    let ev = |name: &str, v: Value| format!("event: {name}\ndata: {v}\n\n");
    let mut head = vec![ev(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_strict1", "type": "message", "role": "assistant",
               "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
               "usage": {"input_tokens": 25, "output_tokens": 1}}}),
    )];
    let mut content = Vec::new();
    if call {
        head.push(ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_abc123", "name": called(Api::Anthropic, &b), "input": {}}}),
        ));
        content.push(ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": CALL_ARGS}}),
        ));
    } else {
        head.push(ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ));
        head.push("event: ping\ndata: {\"type\": \"ping\"}\n\n".into());
        for w in words(&text) {
            content.push(ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": w}}),
            ));
        }
    }
    let tail = vec![
        ev("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        ev(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                                   "usage": {"output_tokens": 12}}),
        ),
        ev("message_stop", json!({"type": "message_stop"})),
    ];
    stream_body(&state, Api::Anthropic, head, content, tail)
}

/// Lets every call held by `hold` through, also one that reaches the hold
/// only later (a notify wakes only those already waiting), until aborted.
pub fn release(hold: std::sync::Arc<tokio::sync::Notify>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            hold.notify_waiters();
            tokio::time::sleep(std::time::Duration::from_millis(20)).await; // until every call is let through
        }
    })
}
