//! The mock's answers in the Anthropic messages format, written by
//! [`crate::wire::anthropic`] and spread over time.

use super::play::{fragments, keepalives, text_pieces, Beat, Timeline};
use super::{Answer, Ctx, Timing};
use crate::wire::anthropic::{error_event, render_reply, EventWriter, PING};
use crate::wire::{Delta, Usage};
use serde_json::Value;
use std::time::Duration;

/// SSE comment sent while the model stalls.
pub(crate) const KEEPALIVE: &[u8] = b": keep-alive\n\n";

/// A non-streamed message.
pub(crate) fn message(ctx: &Ctx, a: &Answer) -> Value {
    render_reply(&ctx.id, &ctx.model, &ctx.reply(a))
}

fn written(w: &mut EventWriter, ds: &[Delta]) -> Vec<u8> {
    let mut out = Vec::new();
    for d in ds {
        w.write(d, &mut out);
    }
    out
}

/// A writer whose `message_start` carries the prompt's tokens.
fn writer(ctx: &Ctx, u: Usage) -> (EventWriter, Vec<u8>) {
    let mut w = EventWriter::new(ctx.id.clone(), ctx.model.clone());
    let start = written(
        &mut w,
        &[
            Delta::Usage(Usage { output: 1, ..u }),
            Delta::Start {
                id: ctx.id.clone(),
                model: ctx.model.clone(),
            },
        ],
    );
    (w, start)
}

/// A streamed answer: keep-alives during the stall, `message_start`, each
/// content block (`content_block_start`, a `ping` after the first, deltas
/// spread over the generation time, `content_block_stop`), `message_delta`
/// with the stop reason and cumulative output tokens, `message_stop`.
pub(crate) fn stream(ctx: &Ctx, a: &Answer, t: &Timing) -> Vec<Beat> {
    let r = ctx.reply(a);
    let mut ticks: Vec<Delta> = Vec::new();
    for p in text_pieces(&r.text) {
        ticks.push(Delta::Text(p.to_string()));
    }
    for (i, c) in r.tool_calls.iter().enumerate() {
        let index = i as u32;
        ticks.push(Delta::ToolStart {
            index,
            id: c.id.clone(),
            name: c.name.clone(),
        });
        for f in fragments(&c.arguments) {
            ticks.push(Delta::ToolArgs {
                index,
                fragment: f.to_string(),
            });
        }
    }
    let usage = r.usage.unwrap_or_default();
    let (mut w, start) = writer(ctx, usage);
    let step = t.gen / u32::try_from(ticks.len().max(1)).unwrap_or(u32::MAX);
    let mut tl = Timeline::new(keepalives(t.stall, KEEPALIVE), t.start, step);
    tl.now(start);
    for d in &ticks {
        // A tool call's start is sent with its first fragment.
        if matches!(d, Delta::ToolStart { .. }) {
            tl.now(written(&mut w, std::slice::from_ref(d)));
        } else {
            tl.tick(written(&mut w, std::slice::from_ref(d)));
        }
    }
    tl.now(written(
        &mut w,
        &[
            Delta::Finish(r.finish.unwrap_or_default()),
            Delta::Usage(usage),
            Delta::Done,
        ],
    ));
    tl.into_beats()
}

/// A stream cut short: `message_start`, a text block start and `ping` at
/// `first`, then `text` in deltas until `end`; no block stop, no
/// `message_delta`, no `message_stop`.
pub(crate) fn truncated_stream(ctx: &Ctx, text: &str, u: Usage, first: Duration, end: Duration) -> Vec<Beat> {
    let pieces = text_pieces(text);
    let n = u32::try_from(pieces.len() + 1).unwrap_or(u32::MAX);
    let mut tl = Timeline::new(Vec::new(), first, end.saturating_sub(first) / n);
    let (mut w, start) = writer(ctx, u);
    tl.now(start);
    if pieces.is_empty() {
        tl.tick(PING);
    }
    for p in pieces {
        tl.tick(written(&mut w, &[Delta::Text(p.to_string())]));
    }
    tl.into_beats()
}

/// An in-band overload: `message_start`, then an `error` event.
pub(crate) fn overloaded_stream(ctx: &Ctx, u: Usage, message: &str) -> Vec<u8> {
    let (_, mut out) = writer(ctx, u);
    error_event("overloaded_error", message, &mut out);
    out
}

/// The error body for an HTTP status.
pub(crate) fn error(code: u16, message: &str) -> Value {
    crate::wire::anthropic::error(code, message)
}
