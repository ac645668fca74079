//! fusebox's own work per call for each provider kind: what differs
//! between them is the wire (rendering the typed call, reading the answer
//! whole or as a 60-chunk stream) and, for Bedrock, signing. One agent
//! turn (system, user, a tool call and its result, one tool offered), its
//! answer 60 words; OpenAI's is the anchor.
//! `cargo bench --bench providers`.

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue, Message as Frame};
use criterion::{criterion_group, criterion_main, Criterion};
use fusebox::provider::{Message, ToolCall, ToolSpec};
use fusebox::wire::request::{Outgoing, Params};
use fusebox::wire::sse::SseItem;
use fusebox::wire::{anthropic, bedrock, gemini, openai, Assembler};
use serde_json::json;
use std::hint::black_box;
use std::sync::Arc;

fn words() -> Vec<String> {
    (1..=60).map(|i| format!("w{i} ")).collect()
}

fn text() -> String {
    words().concat()
}

fn conversation() -> (Vec<Message>, Vec<ToolSpec>) {
    let call = ToolCall::new("call_1", "get_order", r#"{"order_id":"38100"}"#);
    let messages = vec![
        Message::system("You are a support agent. Answer in one sentence."),
        Message::user("Where is order #38100?"),
        Message::assistant("", vec![call.clone()]),
        Message::tool_result(&call, r#"{"status":"in transit","eta_days":2}"#, false),
    ];
    let tools = vec![ToolSpec {
        name: "get_order".into(),
        description: "Look up an order's shipping status by id.".into(),
        schema: Arc::new(
            json!({"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}),
        ),
        kind: fusebox::provider::ToolKind::Function,
    }];
    (messages, tools)
}

fn frame(event: &'static str, payload: serde_json::Value) -> Vec<u8> {
    let m = Frame::new(payload.to_string().into_bytes())
        .add_header(Header::new(":message-type", HeaderValue::String("event".into())))
        .add_header(Header::new(":event-type", HeaderValue::String(event.into())));
    let mut out = Vec::new();
    write_message_to(&m, &mut out).unwrap();
    out
}

fn providers(c: &mut Criterion) {
    let (messages, tools) = conversation();
    let params = Params::default();
    let out = Outgoing {
        model: "model-1",
        messages: &messages,
        own_messages: true,
        tools: &tools,
        params: &params,
        max_tokens: 256,
        stream: true,
    };
    let t = text();
    let usage_openai = json!({"prompt_tokens": 80, "completion_tokens": 60, "total_tokens": 140});
    let openai_whole = json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}], "usage": usage_openai})
    .to_string();
    let openai_chunks: Vec<String> = words()
        .iter()
        .map(|w| {
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o",
                         "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": null}]})
            .to_string()
        })
        .collect();
    let anthropic_whole = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": t}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 80, "output_tokens": 60}});
    let anthropic_events: Vec<(&str, String)> = words()
        .iter()
        .map(|w| {
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                                               "delta": {"type": "text_delta", "text": w}})
                .to_string(),
            )
        })
        .collect();
    let gemini_whole = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": t}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 80, "candidatesTokenCount": 60}, "modelVersion": "gemini", "responseId": "r1"});
    let gemini_chunks: Vec<String> = words()
        .iter()
        .map(|w| {
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": w}]}}],
                         "usageMetadata": {"promptTokenCount": 80}, "modelVersion": "gemini", "responseId": "r1"})
            .to_string()
        })
        .collect();
    let bedrock_whole = json!({"output": {"message": {"role": "assistant", "content": [{"text": t}]}},
        "stopReason": "end_turn", "usage": {"inputTokens": 80, "outputTokens": 60, "totalTokens": 140}});
    let bedrock_frames: Vec<u8> = words()
        .iter()
        .flat_map(|w| {
            frame(
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": w}}),
            )
        })
        .collect();
    let credentials = aws_credential_types::Credentials::new("AKID", "secret", None, None, "bench");
    let url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream";

    let mut g = c.benchmark_group("one call's wire work");
    g.bench_function("openai", |b| {
        b.iter(|| {
            let body = openai::render_request(&out, openai::Dialect::OpenAi).unwrap();
            let whole = openai::read_reply(openai_whole.as_bytes()).unwrap();
            let mut acc = Assembler::default();
            for c in &openai_chunks {
                openai::decode_chunk(c).unwrap().iter().for_each(|d| acc.take(d));
            }
            black_box((body, whole, acc.finish()))
        })
    });
    g.bench_function("anthropic", |b| {
        b.iter(|| {
            let body = anthropic::render_request(&out).unwrap();
            let whole = anthropic::parse_reply(&serde_json::from_str(&anthropic_whole.to_string()).unwrap());
            let mut reader = anthropic::EventReader::default();
            let mut acc = Assembler::default();
            for (name, data) in &anthropic_events {
                reader.read(name, data).unwrap().iter().for_each(|d| acc.take(d));
            }
            black_box((body, whole, acc.finish()))
        })
    });
    g.bench_function("gemini", |b| {
        let whole_text = gemini_whole.to_string();
        b.iter(|| {
            let body = gemini::render_request(&out).unwrap();
            let whole = gemini::parse_reply(&serde_json::from_str(&whole_text).unwrap());
            let mut reader = gemini::ChunkReader::default();
            let mut acc = Assembler::default();
            for c in &gemini_chunks {
                reader.read(c).unwrap().iter().for_each(|d| acc.take(d));
            }
            black_box((body, whole, acc.finish()))
        })
    });
    g.bench_function("bedrock (signed)", |b| {
        let whole_text = bedrock_whole.to_string();
        let now = std::time::SystemTime::now();
        b.iter(|| {
            let body = bedrock::render_request(&out).unwrap();
            let signed = fusebox::provider::bedrock::sign(&credentials, "us-east-1", url, &body, now).unwrap();
            let whole = bedrock::parse_reply(&serde_json::from_str(&whole_text).unwrap());
            let mut frames = bedrock::EventFrames::default();
            let mut reader = bedrock::ConverseEventReader::default();
            let mut acc = Assembler::default();
            for item in frames.feed(&bedrock_frames).unwrap() {
                if let SseItem::Event(e) = item {
                    let name = e.event.as_deref().unwrap_or("");
                    reader.read(name, &e.data).unwrap().iter().for_each(|d| acc.take(d));
                }
            }
            black_box((body, signed, whole, acc.finish()))
        })
    });
    g.finish();
}

criterion_group!(benches, providers);
criterion_main!(benches);
