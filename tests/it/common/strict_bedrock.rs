//! Amazon Bedrock's Converse and ConverseStream on the strict fake,
//! written from the API reference: every request's AWS Signature V4 is
//! verified here by hand (HMAC-SHA256 from `ring`, not the `aws-sigv4`
//! fusebox signs with), an unknown key id or a signature that does not
//! match refused with Bedrock's 403s; bodies checked as Bedrock checks
//! them (alternating roles, one member per content block, tool results
//! answering every tool use of the turn before, `toolConfig` wherever tool
//! blocks are); answers as the OpenAI endpoint's model does, whole or in
//! AWS event-stream frames.

use super::strict::{called, decide, stream_of, words, Api, Fault, Received, StrictState, CALL_ARGS};
use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// The test account's access key id and secret.
pub const KEY_ID: &str = "AKIDFUSEBOXTEST00001";
pub const SECRET: &str = "fusebox/test/secret+key/0123456789abcdefghij";

fn exception(status: u16, name: &str, message: &str) -> Response {
    let mut r = (
        StatusCode::from_u16(status).unwrap(),
        Json(json!({ "message": message })),
    )
        .into_response();
    r.headers_mut().insert(
        "x-amzn-errortype",
        format!("{name}:http://internal.amazon.com/coral/com.amazon.bedrock/")
            .parse()
            .unwrap(),
    );
    r
}

fn validation(message: &str) -> Response {
    exception(400, "ValidationException", message)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let k = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    ring::hmac::sign(&k, data.as_bytes()).as_ref().to_vec()
}

/// Everything but unreserved characters escaped, as SigV4 encodes.
fn uri_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Seconds since the epoch of an `x-amz-date` (`20261206T041500Z`).
fn amz_seconds(d: &str) -> Option<i64> {
    let n = |r: std::ops::Range<usize>| d.get(r)?.parse::<i64>().ok();
    let (y, m, day) = (n(0..4)?, n(4..6)?, n(6..8)?);
    let (h, min, s) = (n(9..11)?, n(11..13)?, n(13..15)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some((era * 146_097 + doe - 719_468) * 86_400 + h * 3600 + min * 60 + s)
}

/// Why the request's signature is refused, if it is: (exception, message).
fn refuse_signature(uri: &Uri, headers: &HeaderMap, body: &[u8]) -> Option<(&'static str, String)> {
    let h = |k: &str| headers.get(k).and_then(|v| v.to_str().ok()).unwrap_or("");
    let auth = h("authorization");
    let Some(rest) = auth.strip_prefix("AWS4-HMAC-SHA256 ") else {
        return Some((
            "MissingAuthenticationTokenException",
            "Missing Authentication Token".into(),
        ));
    };
    let field = |name: &str| {
        rest.split(',')
            .map(str::trim)
            .find_map(|p| p.strip_prefix(name).and_then(|p| p.strip_prefix('=')))
            .unwrap_or("")
    };
    let (credential, signed, signature) = (field("Credential"), field("SignedHeaders"), field("Signature"));
    let scope: Vec<&str> = credential.split('/').collect();
    let [key_id, date, region, service, "aws4_request"] = scope[..] else {
        return Some((
            "IncompleteSignatureException",
            format!("Credential={credential} is no credential scope"),
        ));
    };
    if key_id != KEY_ID {
        return Some((
            "UnrecognizedClientException",
            "The security token included in the request is invalid.".into(),
        ));
    }
    if service != "bedrock" {
        return Some((
            "InvalidSignatureException",
            format!("Credential should be scoped to correct service: 'bedrock'. (not '{service}')"),
        ));
    }
    let amz_date = h("x-amz-date");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    if amz_seconds(amz_date).is_none_or(|t| (t - now).abs() > 300) || !amz_date.starts_with(date) {
        return Some((
            "InvalidSignatureException",
            "Signature expired or not yet current.".into(),
        ));
    }
    let names: Vec<&str> = signed.split(';').collect();
    if !names.contains(&"host") || !names.contains(&"x-amz-date") {
        return Some((
            "InvalidSignatureException",
            "host and x-amz-date must be signed.".into(),
        ));
    }
    // The path as sent, each segment encoded once more (every service but S3).
    let path: Vec<String> = uri.path().split('/').map(uri_encode).collect();
    let canonical_headers: String = names
        .iter()
        .map(|n| format!("{n}:{}\n", h(n).split_whitespace().collect::<Vec<_>>().join(" ")))
        .collect();
    let payload = hex(ring::digest::digest(&ring::digest::SHA256, body).as_ref());
    let canonical = format!(
        "POST\n{}\n{}\n{canonical_headers}\n{signed}\n{payload}",
        path.join("/"),
        uri.query().unwrap_or("")
    );
    let hashed = hex(ring::digest::digest(&ring::digest::SHA256, canonical.as_bytes()).as_ref());
    let to_sign = format!("AWS4-HMAC-SHA256\n{amz_date}\n{date}/{region}/bedrock/aws4_request\n{hashed}");
    let mut key = hmac(format!("AWS4{SECRET}").as_bytes(), date);
    for part in [region, "bedrock", "aws4_request"] {
        key = hmac(&key, part);
    }
    (hex(&hmac(&key, &to_sign)) != signature).then(|| {
        ("InvalidSignatureException", "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.".into())
    })
}

const TOP: [&str; 10] = [
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "guardrailConfig",
    "additionalModelRequestFields",
    "additionalModelResponseFieldPaths",
    "promptVariables",
    "requestMetadata",
    "performanceConfig",
];
const BLOCKS: [&str; 9] = [
    "text",
    "image",
    "document",
    "video",
    "toolUse",
    "toolResult",
    "guardContent",
    "cachePoint",
    "reasoningContent",
];

/// Converse's checks; `Err` is its message.
fn check(b: &Value) -> Result<(), String> {
    let obj = b
        .as_object()
        .ok_or("Malformed input request, please reformat your input and try again.")?;
    if let Some(k) = obj.keys().find(|k| !TOP.contains(&k.as_str())) {
        return Err(format!(
            "Malformed input request: extraneous key [{k}] is not permitted, please reformat your input and try again."
        ));
    }
    let Some(messages) = b["messages"].as_array().filter(|m| !m.is_empty()) else {
        return Err("A conversation must start with a user message. Try again with a conversation that starts with a user message.".into());
    };
    let mut open: Vec<String> = Vec::new();
    let mut tools_used = false;
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        let want = if i % 2 == 0 { "user" } else { "assistant" };
        if role != want {
            return Err("A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again.".into());
        }
        let Some(blocks) = m["content"].as_array().filter(|c| !c.is_empty()) else {
            return Err(format!("The content field in the Message object at messages.{i} is empty. Add a ContentBlock object to the content field and try again."));
        };
        let mut answered = Vec::new();
        let mut used = Vec::new();
        for (j, block) in blocks.iter().enumerate() {
            let keys: Vec<&String> = block.as_object().map(|o| o.keys().collect()).unwrap_or_default();
            if keys.len() != 1 || !BLOCKS.contains(&keys[0].as_str()) {
                return Err(format!(
                    "Malformed input request: messages.{i}.content.{j} must have exactly one member"
                ));
            }
            if let Some(u) = block.get("toolUse") {
                if role != "assistant"
                    || !u["toolUseId"].is_string()
                    || !u["name"].is_string()
                    || !u["input"].is_object()
                {
                    return Err(format!(
                        "messages.{i}.content.{j}.toolUse: toolUseId, name and an input object are required"
                    ));
                }
                used.push(u["toolUseId"].as_str().unwrap_or("").to_string());
            }
            if let Some(r) = block.get("toolResult") {
                let content_ok = r["content"].as_array().is_some_and(|c| {
                    c.iter().all(|x| {
                        x.as_object()
                            .is_some_and(|o| o.len() == 1 && (x["text"].is_string() || x["json"].is_object()))
                    })
                });
                if !r["toolUseId"].is_string() || !content_ok {
                    return Err(format!(
                        "messages.{i}.content.{j}.toolResult: a toolUseId and text or json content are required"
                    ));
                }
                answered.push(r["toolUseId"].as_str().unwrap_or("").to_string());
            }
            if let Some(img) = block.get("image") {
                let format_ok = ["png", "jpeg", "gif", "webp"].contains(&img["format"].as_str().unwrap_or(""));
                if !format_ok || !img["source"]["bytes"].is_string() {
                    return Err(format!(
                        "messages.{i}.content.{j}.image: a format and source.bytes are required"
                    ));
                }
            }
        }
        tools_used |= !used.is_empty() || !answered.is_empty();
        let mut want_ids = std::mem::take(&mut open);
        want_ids.sort();
        answered.sort();
        if want_ids != answered {
            return Err(format!(
                "Expected toolResult blocks at messages.{i}.content for the following Ids: {}",
                want_ids.join(", ")
            ));
        }
        open = used;
    }
    if tools_used && b.get("toolConfig").is_none() {
        return Err("The toolConfig field must be defined when using toolUse and toolResult content blocks.".into());
    }
    if let Some(c) = b.get("toolConfig") {
        let tools_ok = c["tools"].as_array().is_some_and(|t| {
            !t.is_empty()
                && t.iter()
                    .all(|t| t["toolSpec"]["name"].is_string() && t["toolSpec"]["inputSchema"]["json"].is_object())
        });
        if !tools_ok {
            return Err("toolConfig.tools: each tool needs a toolSpec with a name and inputSchema.json".into());
        }
        if let Some(choice) = c.get("toolChoice") {
            let keys: Vec<&String> = choice.as_object().map(|o| o.keys().collect()).unwrap_or_default();
            if keys.len() != 1 || !["auto", "any", "tool"].contains(&keys[0].as_str()) {
                return Err("toolConfig.toolChoice: exactly one of auto, any, tool".into());
            }
        }
    }
    if let Some(k) = b["inferenceConfig"].as_object().and_then(|o| {
        o.keys()
            .find(|k| !["maxTokens", "temperature", "topP", "stopSequences"].contains(&k.as_str()))
    }) {
        return Err(format!(
            "Malformed input request: extraneous key [{k}] is not permitted"
        ));
    }
    Ok(())
}

/// The conversation as the OpenAI endpoint's model reads it.
fn as_chat(model: &str, b: &Value) -> Value {
    let mut messages = Vec::new();
    for m in b["messages"].as_array().into_iter().flatten() {
        let blocks = m["content"].as_array().cloned().unwrap_or_default();
        let text: String = blocks.iter().filter_map(|x| x["text"].as_str()).collect();
        if m["role"] == "assistant" {
            messages.push(json!({"role": "assistant", "content": text}));
            continue;
        }
        for x in &blocks {
            if let Some(r) = x.get("toolResult") {
                let content: String = r["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| c["text"].as_str().map_or_else(|| c["json"].to_string(), str::to_string))
                    .collect();
                messages.push(json!({"role": "tool", "content": content}));
            }
        }
        if !text.is_empty() {
            messages.push(json!({"role": "user", "content": text}));
        }
    }
    let tools: Vec<Value> = b["toolConfig"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| json!({"type": "function", "function": {"name": t["toolSpec"]["name"]}}))
        .collect();
    json!({"model": model, "messages": messages, "tools": tools})
}

fn frame(event: &'static str, payload: Value) -> Vec<u8> {
    let m = Message::new(payload.to_string().into_bytes())
        .add_header(Header::new(":message-type", HeaderValue::String("event".into())))
        .add_header(Header::new(":event-type", HeaderValue::String(event.into())))
        .add_header(Header::new(
            ":content-type",
            HeaderValue::String("application/json".into()),
        ));
    let mut out = Vec::new();
    write_message_to(&m, &mut out).unwrap();
    out
}

fn fault(f: Fault) -> Response {
    match f {
        Fault::Refused(e) => validation(e["message"].as_str().unwrap_or("Malformed input request.")),
        Fault::Down => exception(
            503,
            "ServiceUnavailableException",
            "Bedrock is unable to process your request.",
        ),
        Fault::RateLimited(_) => exception(
            429,
            "ThrottlingException",
            "Too many requests, please wait before trying again.",
        ),
        Fault::ServerError => exception(
            500,
            "InternalServerException",
            "The system encountered an unexpected error during processing. Try your request again.",
        ),
    }
}

/// `InvokeModel` on an embedding model: Amazon Titan's `inputText` (one
/// text; `dimensions` 256, 512 or 1024, the default) or Cohere's `texts`
/// (1 to 96, with a required `input_type`; 1024 values each), as the
/// models' references define their bodies; the input tokens counted in
/// the body (Titan) and the `X-Amzn-Bedrock-Input-Token-Count` header.
fn invoke(model: &str, b: &Value) -> Response {
    let keys = |allowed: &[&str]| {
        b.as_object()
            .is_some_and(|o| o.keys().all(|k| allowed.contains(&k.as_str())))
    };
    let vector =
        |text: &str, dims: usize| -> Vec<f64> { (0..dims).map(|d| ((text.len() + d) % 7) as f64 / 8.0).collect() };
    let (body, tokens) = if model.contains("titan-embed") {
        let Some(text) = b["inputText"].as_str().filter(|t| !t.is_empty()) else {
            return validation("Malformed input request: #: required key [inputText] not found, please reformat your input and try again.");
        };
        let dims = b["dimensions"].as_u64().unwrap_or(1024);
        if !keys(&["inputText", "dimensions", "normalize", "embeddingTypes"]) || ![256, 512, 1024].contains(&dims) {
            return validation("Malformed input request: #: extraneous key, or dimensions not one of 256, 512, 1024, please reformat your input and try again.");
        }
        let tokens = text.split_whitespace().count();
        let values = vector(text, dims as usize);
        (
            json!({"embedding": values, "embeddingsByType": {"float": values}, "inputTextTokenCount": tokens}),
            tokens,
        )
    } else if model.contains("cohere.embed") {
        let texts: Vec<&str> = b["texts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let kinds = ["search_document", "search_query", "classification", "clustering"];
        let typed = b["input_type"].as_str().is_some_and(|t| kinds.contains(&t));
        let counted = b["texts"].as_array().map_or(0, Vec::len);
        if !keys(&["texts", "input_type", "truncate", "embedding_types", "images"])
            || !typed
            || texts.is_empty()
            || texts.len() != counted
            || counted > 96
        {
            return validation("Malformed input request: #: texts (1 to 96 strings) and input_type are required, please reformat your input and try again.");
        }
        let tokens = texts.iter().map(|t| t.split_whitespace().count()).sum();
        let vectors: Vec<Vec<f64>> = texts.iter().map(|t| vector(t, 1024)).collect();
        (
            json!({"embeddings": vectors, "id": "emb-1", "response_type": "embeddings_floats", "texts": texts}),
            tokens,
        )
    } else {
        return validation("The provided model doesn't support embeddings.");
    };
    ([("x-amzn-bedrock-input-token-count", tokens.to_string())], Json(body)).into_response()
}

/// The guardrail's answer to a prompt it blocks.
pub const BLOCKED: &str = "Sorry, the model cannot answer this question.";

/// `POST /model/{modelId}/{converse | converse-stream}`.
pub async fn bedrock(
    State(state): State<Arc<StrictState>>,
    Path((model, op)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let stream = match op.as_str() {
        "converse" => false,
        "converse-stream" => true,
        "invoke" => false,
        _ => return exception(404, "UnknownOperationException", "Unknown operation"),
    };
    let b: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let record = |code: u16| {
        state.received.lock().push(Received {
            api: Api::Bedrock,
            body: b.clone(),
            status: code,
            headers: headers.clone(),
            at: std::time::Instant::now(),
        })
    };
    if let Some((name, message)) = refuse_signature(&uri, &headers, &body) {
        record(403);
        return exception(403, name, &message);
    }
    if op == "invoke" {
        let r = match state.faults.lock().take() {
            Some(f) => fault(f),
            None => invoke(&model, &b),
        };
        record(r.status().as_u16());
        return r;
    }
    if let Err(msg) = check(&b) {
        record(400);
        return validation(&msg);
    }
    let chat = as_chat(&model, &b);
    if state.is_down(Api::Bedrock, &chat) {
        record(503);
        return fault(Fault::Down);
    }
    if let Some(f) = state.faults.lock().take() {
        let r = fault(f);
        record(r.status().as_u16());
        return r;
    }
    record(200);
    let usage = json!({"inputTokens": 25, "outputTokens": 12, "totalTokens": 37});
    let metrics = json!({"latencyMs": 120});
    let blocked = *state.blocked.lock();
    let (call, text) = if blocked {
        (false, BLOCKED.to_string())
    } else {
        decide(&state, Api::OpenAi, &chat)
    };
    let stop = match (blocked, call) {
        (true, _) => "guardrail_intervened",
        (false, true) => "tool_use",
        (false, false) => "end_turn",
    };
    let args: Value = serde_json::from_str(CALL_ARGS).unwrap();
    let name = called(Api::OpenAi, &chat);
    if !stream {
        let hold = state.stream.lock().hold.clone();
        if let Some(h) = hold {
            h.notified().await;
        }
        let paused: Duration = state.stream.lock().pauses.iter().map(|p| p.1).sum();
        tokio::time::sleep(paused).await;
        let content = match call {
            true => json!([{"toolUse": {"toolUseId": "tooluse_abc123", "name": name, "input": args}}]),
            false => json!([{ "text": text }]),
        };
        let whole = json!({"output": {"message": {"role": "assistant", "content": content}},
            "stopReason": stop, "usage": usage, "metrics": metrics});
        if state.stream.lock().reset_after.is_some_and(|(a, _)| a == Api::Bedrock) {
            let bytes = whole.to_string();
            let part = bytes[..bytes.len() / 2].to_string();
            let cut = futures_util::stream::iter([Ok(part), Err(std::io::Error::other("cut"))]);
            let len = bytes.len().to_string();
            return (
                [("content-type", "application/json"), ("content-length", len.as_str())],
                axum::body::Body::from_stream(cut),
            )
                .into_response();
        }
        return Json(whole).into_response();
    }
    let head = vec![frame("messageStart", json!({"role": "assistant", "p": "abcdefgh"}))];
    let content: Vec<Vec<u8>> = match call {
        true => vec![
            frame(
                "contentBlockStart",
                json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "tooluse_abc123", "name": name}}}),
            ),
            frame(
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": CALL_ARGS}}}),
            ),
        ],
        false => words(&text)
            .into_iter()
            .map(|w| {
                frame(
                    "contentBlockDelta",
                    json!({"contentBlockIndex": 0, "delta": {"text": w}, "p": "ab"}),
                )
            })
            .collect(),
    };
    let mut content = content;
    if let Some((n, kind)) = *state.bedrock_exception.lock() {
        // The stream ends in the exception, as Bedrock's do.
        content.truncate(n);
        let m = Message::new(
            json!({"message": "Too many tokens, please wait before trying again."})
                .to_string()
                .into_bytes(),
        )
        .add_header(Header::new(":message-type", HeaderValue::String("exception".into())))
        .add_header(Header::new(":exception-type", HeaderValue::String(kind.into())))
        .add_header(Header::new(
            ":content-type",
            HeaderValue::String("application/json".into()),
        ));
        let mut e = Vec::new();
        write_message_to(&m, &mut e).unwrap();
        let plan = (head, content, vec![e]);
        return stream_of(
            &state,
            Api::Bedrock,
            plan,
            Vec::new(),
            "application/vnd.amazon.eventstream",
        );
    }
    let tail = vec![
        frame("contentBlockStop", json!({"contentBlockIndex": 0})),
        frame("messageStop", json!({ "stopReason": stop })),
        frame("metadata", json!({"usage": usage, "metrics": metrics})),
    ];
    // A frame whose payload is no JSON: an event that cannot be read.
    let mut malformed = Vec::new();
    let m = Message::new(b"{\"delta\": {\"text\": \"tru".to_vec())
        .add_header(Header::new(":message-type", HeaderValue::String("event".into())))
        .add_header(Header::new(
            ":event-type",
            HeaderValue::String("contentBlockDelta".into()),
        ));
    write_message_to(&m, &mut malformed).unwrap();
    stream_of(
        &state,
        Api::Bedrock,
        (head, content, tail),
        malformed,
        "application/vnd.amazon.eventstream",
    )
}
