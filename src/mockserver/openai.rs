//! The mock's answers in the OpenAI chat-completions format (also
//! DeepSeek's and Azure OpenAI's), written by [`crate::wire::openai`] and
//! spread over time. Azure's carry its content filter's results: the
//! prompt's (`prompt_filter_results`, in a stream a first chunk of its own
//! with no choices) and each choice's (`content_filter_results`).

use super::play::{fragments, keepalives, text_pieces, Beat, Timeline};
use super::{Answer, Ctx, Provider, Timing};
use crate::wire::openai::{render_reply, ChunkWriter, KEEPALIVE};
use crate::wire::Delta;
use serde_json::{json, Value};
use std::time::Duration;

/// A non-streamed `chat.completion`.
pub(crate) fn completion(ctx: &Ctx, a: &Answer) -> Value {
    let mut v = render_reply(&ctx.openai_frame(), &ctx.reply(a));
    if ctx.provider == Provider::Azure {
        if let Some(choices) = v.get_mut("choices").and_then(Value::as_array_mut) {
            for c in choices {
                c["content_filter_results"] = passed();
            }
        }
        v["prompt_filter_results"] = json!([{"prompt_index": 0, "content_filter_results": passed()}]);
    }
    v
}

/// Azure's content filter's results for text that passed it.
fn passed() -> Value {
    let safe = json!({"filtered": false, "severity": "safe"});
    json!({"hate": safe, "self_harm": safe, "sexual": safe, "violence": safe})
}

/// Azure's first chunk of a stream: the prompt's filter results, no choices.
fn prompt_filtered() -> Vec<u8> {
    let chunk = json!({
        "choices": [], "created": 0, "id": "", "model": "", "object": "",
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": passed()}],
    });
    format!("data: {chunk}\n\n").into_bytes()
}

/// What one delta writes.
fn written(w: &mut ChunkWriter, d: &Delta) -> Vec<u8> {
    let mut out = Vec::new();
    w.write(d, &mut out);
    out
}

/// A streamed answer: keep-alives during the stall, the role, content and
/// tool-call pieces spread over the generation time, the finish chunk, the
/// usage chunk if asked for, and `[DONE]`.
pub(crate) fn stream(ctx: &Ctx, a: &Answer, t: &Timing) -> Vec<Beat> {
    let r = ctx.reply(a);
    let mut deltas = Vec::new();
    for p in text_pieces(&r.text) {
        deltas.push(Delta::Text(p.to_string()));
    }
    for (i, c) in r.tool_calls.iter().enumerate() {
        let index = i as u32;
        deltas.push(Delta::ToolStart {
            index,
            id: c.id.clone(),
            name: c.name.clone(),
        });
        for f in fragments(&c.arguments) {
            deltas.push(Delta::ToolArgs {
                index,
                fragment: f.to_string(),
            });
        }
    }
    let mut w = ChunkWriter::new(ctx.openai_frame(), ctx.include_usage);
    let step = t.gen / u32::try_from(deltas.len().max(1)).unwrap_or(u32::MAX);
    let mut tl = Timeline::new(keepalives(t.stall, KEEPALIVE), t.start, step);
    if ctx.provider == Provider::Azure {
        tl.now(prompt_filtered());
    }
    for d in &deltas {
        tl.tick(written(&mut w, d));
    }
    let finish = r.finish.unwrap_or_default();
    let mut end = written(&mut w, &Delta::Finish(finish));
    if let Some(u) = r.usage {
        w.write(&Delta::Usage(u), &mut end);
    }
    w.write(&Delta::Done, &mut end);
    tl.now(end);
    tl.into_beats()
}

/// A stream cut short: the role at `first`, then `text` in pieces until `end`;
/// no finish chunk, no usage, no `[DONE]`.
pub(crate) fn truncated_stream(ctx: &Ctx, text: &str, first: Duration, end: Duration) -> Vec<Beat> {
    let pieces = text_pieces(text);
    let n = u32::try_from(pieces.len() + 1).unwrap_or(u32::MAX);
    let mut tl = Timeline::new(Vec::new(), first, end.saturating_sub(first) / n);
    let mut w = ChunkWriter::new(ctx.openai_frame(), false);
    tl.tick(written(
        &mut w,
        &Delta::Start {
            id: String::new(),
            model: String::new(),
        },
    ));
    for p in pieces {
        tl.tick(written(&mut w, &Delta::Text(p.to_string())));
    }
    tl.into_beats()
}
