//! Google's `generateContent` on the strict fake, written from the Gemini
//! API reference: it refuses what the API refuses (unknown fields, parts
//! with no data or two, a function response that answers no call or not
//! every call, a replayed call without the signature the model gave it,
//! `parameters` and `parametersJsonSchema` both, no API key, an invalid
//! one) with Google's status and `google.rpc.Status` body, and answers as
//! the OpenAI endpoint's model does (the same [`decide`]), in Gemini's
//! words: whole, or `?alt=sse` chunks with no terminator.

use super::strict::{called, decide, stream_body, words, Api, Fault, Received, StrictState, CALL_ARGS};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// The signature the fake's model gives its calls, to be sent back with them.
pub const SIGNATURE: &str = "c2lnbmVkLWJ5LXRoZS1mYWtl";

/// The key the fake takes as invalid (Google's 400 `API_KEY_INVALID`).
pub const INVALID_KEY: &str = "invalid-key";

fn status(code: u16, status: &str, message: &str, details: Value) -> Response {
    let mut e = json!({"code": code, "message": message, "status": status});
    if details.as_array().is_some_and(|d| !d.is_empty()) {
        e["details"] = details;
    }
    (StatusCode::from_u16(code).unwrap(), Json(json!({ "error": e }))).into_response()
}

fn invalid(message: &str) -> Response {
    status(400, "INVALID_ARGUMENT", message, json!([]))
}

const TOP: [&str; 8] = [
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
    "labels",
];
const DATA: [&str; 7] = [
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
];
const PART_FLAGS: [&str; 3] = ["thought", "thoughtSignature", "videoMetadata"];
const GENERATION: [&str; 14] = [
    "temperature",
    "topP",
    "topK",
    "maxOutputTokens",
    "stopSequences",
    "candidateCount",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "thinkingConfig",
    "presencePenalty",
    "frequencyPenalty",
    "seed",
    "responseModalities",
];

fn unknown(path: &str, key: &str) -> String {
    format!("Invalid JSON payload received. Unknown name \"{key}\" at '{path}': Cannot find field.")
}

/// The API's checks; `Err` is its message.
fn check(b: &Value) -> Result<(), String> {
    let Some(obj) = b.as_object() else {
        return Err("Invalid JSON payload received.".into());
    };
    if let Some(k) = obj.keys().find(|k| !TOP.contains(&k.as_str())) {
        return Err(unknown("", k));
    }
    let Some(contents) = b["contents"].as_array().filter(|c| !c.is_empty()) else {
        return Err("* GenerateContentRequest.contents: contents is not specified".into());
    };
    let mut calls: Vec<String> = Vec::new();
    for (i, c) in contents.iter().enumerate() {
        let role = c["role"].as_str().unwrap_or("user");
        if !["user", "model"].contains(&role) {
            return Err(format!(
                "Please use a valid role: user, model. (contents[{i}].role = {role})"
            ));
        }
        let Some(parts) = c["parts"].as_array().filter(|p| !p.is_empty()) else {
            return Err(format!(
                "* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
            ));
        };
        let mut answered = Vec::new();
        let mut called_here = Vec::new();
        for (j, p) in parts.iter().enumerate() {
            let path = format!("contents[{i}].parts[{j}]");
            let po = p.as_object().ok_or(format!("{path}: not an object"))?;
            if let Some(k) = po
                .keys()
                .find(|k| !DATA.contains(&k.as_str()) && !PART_FLAGS.contains(&k.as_str()))
            {
                return Err(unknown(&path, k));
            }
            let data: Vec<&String> = po.keys().filter(|k| DATA.contains(&k.as_str())).collect();
            if data.len() != 1 {
                return Err(format!(
                    "* GenerateContentRequest.{path}.data: required oneof field 'data' must have one initialized field"
                ));
            }
            if let Some(d) = p.get("inlineData") {
                if !(d["mimeType"].is_string() && d["data"].is_string()) {
                    return Err(format!("{path}.inlineData: mimeType and data are required"));
                }
            }
            if let Some(f) = p.get("functionCall") {
                if role != "model" || !f["name"].is_string() || !(f["args"].is_null() || f["args"].is_object()) {
                    return Err(format!(
                        "{path}.functionCall: a model's call, with a name and args object"
                    ));
                }
                if p["thoughtSignature"] != SIGNATURE {
                    return Err(format!(
                        "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:{}` , position {}.",
                        f["name"].as_str().unwrap_or(""),
                        i + 1
                    ));
                }
                called_here.push(f["name"].as_str().unwrap_or("").to_string());
            }
            if let Some(f) = p.get("functionResponse") {
                if !f["name"].is_string() || !f["response"].is_object() {
                    return Err(format!("{path}.functionResponse: a name and a response object"));
                }
                answered.push(f["name"].as_str().unwrap_or("").to_string());
            }
        }
        if !answered.is_empty() {
            let mut want = std::mem::take(&mut calls);
            let mut got = answered.clone();
            want.sort();
            got.sort();
            if want != got {
                return Err("Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.".into());
            }
        } else if !calls.is_empty() {
            return Err("Please ensure that function call turn comes immediately after a user turn or after a function response turn.".into());
        }
        calls = called_here;
    }
    for (i, t) in b["tools"].as_array().into_iter().flatten().enumerate() {
        for (j, d) in t["functionDeclarations"].as_array().into_iter().flatten().enumerate() {
            let name = d["name"].as_str().unwrap_or("");
            let ok = !name.is_empty()
                && name.len() <= 64
                && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
            if !ok {
                return Err(format!(
                    "* GenerateContentRequest.tools[{i}].function_declarations[{j}].name: Invalid function name."
                ));
            }
            if d.get("parameters").is_some() && d.get("parametersJsonSchema").is_some() {
                return Err(format!(
                    "tools[{i}].function_declarations[{j}]: parameters and parameters_json_schema cannot both be set"
                ));
            }
            if d["parameters"].get("additionalProperties").is_some() {
                return Err(unknown(
                    &format!("tools[{i}].function_declarations[{j}].parameters"),
                    "additionalProperties",
                ));
            }
        }
    }
    let mode = &b["toolConfig"]["functionCallingConfig"]["mode"];
    if !(mode.is_null() || ["AUTO", "ANY", "NONE", "VALIDATED"].contains(&mode.as_str().unwrap_or(""))) {
        return Err(format!(
            "Invalid value at 'tool_config.function_calling_config.mode' ({mode})"
        ));
    }
    if let Some(g) = b.get("generationConfig") {
        let g = g.as_object().ok_or("generationConfig: not an object")?;
        if let Some(k) = g.keys().find(|k| !GENERATION.contains(&k.as_str())) {
            return Err(unknown("generation_config", k));
        }
        if g.contains_key("responseSchema") && g.contains_key("responseJsonSchema") {
            return Err("responseSchema and responseJsonSchema cannot both be set".into());
        }
        if g.get("temperature")
            .and_then(Value::as_f64)
            .is_some_and(|t| !(0.0..=2.0).contains(&t))
        {
            return Err("* GenerationConfig.temperature: must be in [0.0, 2.0]".into());
        }
    }
    Ok(())
}

/// The conversation as the OpenAI endpoint's model reads it, so that it
/// answers the same way in either API.
fn as_chat(model: &str, b: &Value) -> Value {
    let mut messages = Vec::new();
    for c in b["contents"].as_array().into_iter().flatten() {
        let parts = c["parts"].as_array().cloned().unwrap_or_default();
        let text: String = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        if c["role"] == "model" {
            messages.push(json!({"role": "assistant", "content": text}));
            continue;
        }
        for p in &parts {
            if let Some(r) = p.pointer("/functionResponse/response") {
                let content = match &r["result"] {
                    Value::String(s) => s.clone(),
                    _ => r.to_string(),
                };
                messages.push(json!({"role": "tool", "content": content}));
            }
        }
        if !text.is_empty() {
            messages.push(json!({"role": "user", "content": text}));
        }
    }
    let tools: Vec<Value> = b["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["functionDeclarations"].as_array().cloned().unwrap_or_default())
        .map(|d| json!({"type": "function", "function": {"name": d["name"]}}))
        .collect();
    let mut chat = json!({"model": model, "messages": messages, "tools": tools});
    if b["toolConfig"]["functionCallingConfig"]["mode"] == "NONE" {
        chat["tool_choice"] = json!("none");
    }
    chat
}

fn fault(f: Fault) -> Response {
    match f {
        Fault::Refused(e) => invalid(e["message"].as_str().unwrap_or("Request contains an invalid argument.")),
        Fault::Down => status(503, "UNAVAILABLE", "The model is overloaded. Please try again later.", json!([])),
        Fault::RateLimited(after) => {
            let details = match after {
                Some(s) => json!([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{s}s")}]),
                None => json!([]),
            };
            status(
                429,
                "RESOURCE_EXHAUSTED",
                "You exceeded your current quota, please check your plan and billing details.",
                details,
            )
        }
        Fault::ServerError => status(
            500,
            "INTERNAL",
            "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
            json!([]),
        ),
    }
}

/// `POST /{version}/models/{model}:{method}`: the Gemini API, its key in
/// `x-goog-api-key` (or `?key=`).
pub async fn gemini(
    State(state): State<Arc<StrictState>>,
    Path(call): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    let query = uri.query().unwrap_or("");
    let key = headers
        .get("x-goog-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or_else(|| {
            query
                .split('&')
                .find_map(|p| p.strip_prefix("key="))
                .map(str::to_string)
        })
        .filter(|k| !k.is_empty());
    let refused = match key.as_deref() {
        None => Some(status(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.", json!([]))),
        Some(INVALID_KEY) => Some(status(
            400,
            "INVALID_ARGUMENT",
            "API key not valid. Please pass a valid API key.",
            json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]),
        )),
        Some(_) => None,
    };
    answer(&state, &call, query, (headers, body), refused, false).await
}

/// A `generateContent` call to `call` (`model:method`), refused as
/// `refused` says when its credential was (recorded either way); Vertex
/// AI's (`vertex`) wants every content's role.
pub(super) async fn answer(
    state: &StrictState,
    call: &str,
    query: &str,
    (headers, body): (HeaderMap, String),
    refused: Option<Response>,
    vertex: bool,
) -> Response {
    let Some((model, method)) = call.split_once(':') else {
        return status(404, "NOT_FOUND", "Method not found.", json!([]));
    };
    let stream = match method {
        "generateContent" => false,
        "streamGenerateContent" => true,
        "batchEmbedContents" => return embed(state, model, headers, body, refused, vertex),
        "predict" if vertex => return predict(state, headers, body, refused),
        _ => return status(404, "NOT_FOUND", "Method not found.", json!([])),
    };
    let sse = query.split('&').any(|p| p == "alt=sse");
    let b: Value = match serde_json::from_str(&body) {
        Ok(b) => b,
        Err(_) => return invalid("Invalid JSON payload received."),
    };
    let record = |code: u16| {
        state.received.lock().push(Received {
            api: Api::Gemini,
            body: b.clone(),
            status: code,
            headers: headers.clone(),
            at: std::time::Instant::now(),
        })
    };
    if let Some(r) = refused {
        record(r.status().as_u16());
        return r;
    }
    let roles = b["contents"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|c| c["role"].is_string());
    if vertex && !roles {
        record(400);
        return invalid("Please use a valid role: user, model.");
    }
    if let Err(msg) = check(&b) {
        record(400);
        return invalid(&msg);
    }
    let chat = as_chat(model, &b);
    if state.is_down(Api::Gemini, &chat) {
        record(503);
        return fault(Fault::Down);
    }
    if let Some(f) = state.faults.lock().take() {
        let r = fault(f);
        record(r.status().as_u16());
        return r;
    }
    record(200);
    let chunk = |parts: Value, finish: Option<&str>, usage: Value| {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(f) = finish {
            candidate["finishReason"] = json!(f);
        }
        json!({"candidates": [candidate], "usageMetadata": usage, "modelVersion": model, "responseId": "strict-g1"})
    };
    let usage = json!({"promptTokenCount": 25, "candidatesTokenCount": 12, "totalTokenCount": 37});
    if *state.blocked.lock() {
        let v = json!({"promptFeedback": {"blockReason": "SAFETY", "safetyRatings": [
            {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}]},
            "usageMetadata": {"promptTokenCount": 25, "totalTokenCount": 25}, "modelVersion": model, "responseId": "strict-g1"});
        return match stream {
            true => ([("content-type", "text/event-stream")], format!("data: {v}\r\n\r\n")).into_response(),
            false => Json(v).into_response(),
        };
    }
    let (call, mut text) = decide(state, Api::OpenAi, &chat);
    if b["generationConfig"]["responseMimeType"] == "application/json" {
        // Structured output: an object as the schema asks.
        text = json!({"order_id": "38100", "status": "in transit"}).to_string();
    }
    let call_part = || {
        let args: Value = serde_json::from_str(CALL_ARGS).unwrap();
        json!({"functionCall": {"name": called(Api::OpenAi, &chat), "args": args}, "thoughtSignature": SIGNATURE})
    };
    if !stream {
        let hold = state.stream.lock().hold.clone();
        if let Some(h) = hold {
            h.notified().await;
        }
        let paused: Duration = state.stream.lock().pauses.iter().map(|p| p.1).sum();
        tokio::time::sleep(paused).await;
        let parts = if call {
            json!([call_part()])
        } else {
            json!([{"text": text}])
        };
        let whole = chunk(parts, Some("STOP"), usage);
        if state.stream.lock().reset_after.is_some_and(|(a, _)| a == Api::Gemini) {
            let bytes = whole.to_string();
            let part = bytes[..bytes.len() / 2].to_string();
            let body = futures_util::stream::iter([Ok(part), Err(std::io::Error::other("cut"))]);
            let len = bytes.len().to_string();
            return (
                [("content-type", "application/json"), ("content-length", len.as_str())],
                axum::body::Body::from_stream(body),
            )
                .into_response();
        }
        return Json(whole).into_response();
    }
    let prompt_only = json!({"promptTokenCount": 25, "totalTokenCount": 25});
    let event = |v: Value| format!("data: {v}\r\n\r\n");
    let content: Vec<String> = match call {
        true => vec![event(chunk(json!([call_part()]), None, prompt_only.clone()))],
        false => words(&text)
            .into_iter()
            .map(|w| event(chunk(json!([{ "text": w }]), None, prompt_only.clone())))
            .collect(),
    };
    let tail = vec![event(chunk(json!([{"text": ""}]), Some("STOP"), usage))];
    if !sse {
        // Without `alt=sse` the stream is one JSON array of the chunks.
        let all: Vec<Value> = content
            .iter()
            .chain(&tail)
            .map(|e| serde_json::from_str(e.trim().trim_start_matches("data: ")).unwrap())
            .collect();
        return Json(Value::Array(all)).into_response();
    }
    stream_body(state, Api::Gemini, Vec::new(), content, tail)
}

/// A call that embeds: recorded, refused as `refused` says, else read.
fn embedding(
    state: &StrictState,
    headers: HeaderMap,
    body: String,
    refused: Option<Response>,
) -> Result<Value, Box<Response>> {
    let b: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    state.received.lock().push(Received {
        api: Api::Gemini,
        body: b.clone(),
        status: refused.as_ref().map_or(200, |r| r.status().as_u16()),
        headers,
        at: std::time::Instant::now(),
    });
    refused.map_or(Ok(b), |r| Err(Box::new(r)))
}

/// A vector of `dims` values made from `text`.
fn vector(text: &str, dims: usize) -> Vec<f64> {
    (0..dims).map(|d| ((text.len() + d) % 7) as f64 / 8.0).collect()
}

/// `models/{model}:batchEmbedContents`: each request has text to embed
/// and, on the Gemini API, names the model it is sent to (Vertex AI's
/// official SDK names none); a vector of `outputDimensionality` (8 by
/// default) values each, made from its text.
fn embed(
    state: &StrictState,
    model: &str,
    headers: HeaderMap,
    body: String,
    refused: Option<Response>,
    vertex: bool,
) -> Response {
    let b = match embedding(state, headers, body, refused) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let Some(requests) = b["requests"].as_array().filter(|r| !r.is_empty()) else {
        return invalid("* BatchEmbedContentsRequest.requests: requests is not specified");
    };
    let named = match vertex {
        true => Value::Null,
        false => json!(format!("models/{model}")),
    };
    let mut embeddings = Vec::new();
    for (i, r) in requests.iter().enumerate() {
        let keys_ok = r.as_object().is_some_and(|o| {
            o.keys()
                .all(|k| ["model", "content", "taskType", "title", "outputDimensionality"].contains(&k.as_str()))
        });
        if !keys_ok || r["model"] != named {
            return invalid(&format!(
                "* BatchEmbedContentsRequest.requests[{i}].model: the model of each request must be models/{model}"
            ));
        }
        let Some(text) = r["content"]["parts"][0]["text"].as_str() else {
            return invalid(&format!(
                "* BatchEmbedContentsRequest.requests[{i}].content: text is required"
            ));
        };
        let dims = r["outputDimensionality"].as_u64().unwrap_or(8) as usize;
        embeddings.push(json!({ "values": vector(text, dims) }));
    }
    Json(json!({ "embeddings": embeddings })).into_response()
}

/// Vertex AI's `publishers/google/models/{model}:predict` for its
/// `text-embedding-*` models: up to 250 instances of `content` (with an
/// optional `task_type` and `title`), `parameters` of
/// `outputDimensionality` (1 to 768, 8 by default here) and
/// `autoTruncate`; a prediction per instance with its token count.
fn predict(state: &StrictState, headers: HeaderMap, body: String, refused: Option<Response>) -> Response {
    let b = match embedding(state, headers, body, refused) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let Some(instances) = b["instances"].as_array().filter(|r| !r.is_empty() && r.len() <= 250) else {
        return invalid("instances: between 1 and 250 instances are required");
    };
    let params = b.get("parameters").cloned().unwrap_or(json!({}));
    let params_ok = params.as_object().is_some_and(|o| {
        o.keys()
            .all(|k| ["outputDimensionality", "autoTruncate"].contains(&k.as_str()))
    });
    let dims = params["outputDimensionality"].as_u64().unwrap_or(8);
    if !params_ok || !(1..=768).contains(&dims) {
        return invalid("parameters: unknown field, or outputDimensionality not between 1 and 768");
    }
    let mut predictions = Vec::new();
    for (i, r) in instances.iter().enumerate() {
        let keys_ok = r.as_object().is_some_and(|o| {
            o.keys()
                .all(|k| ["content", "task_type", "title"].contains(&k.as_str()))
        });
        let Some(text) = r["content"].as_str().filter(|_| keys_ok) else {
            return invalid(&format!(
                "instances[{i}]: a `content` string is required, and no other field than task_type and title"
            ));
        };
        let stats = json!({"truncated": false, "token_count": text.split_whitespace().count() as f64});
        predictions.push(json!({"embeddings": {"values": vector(text, dims as usize), "statistics": stats}}));
    }
    Json(json!({ "predictions": predictions, "metadata": {"billableCharacterCount": 0} })).into_response()
}
