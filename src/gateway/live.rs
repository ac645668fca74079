//! The live view of a gateway, for operators with a `view` token (or on
//! loopback without tokens): the snapshot the console draws, once or as a
//! stream of at most ten a second, and the notable events as they happen.
//! Both streams are server-sent events, one JSON object per `data:` line.

use super::auth::Operator;
use super::Shared;
use crate::config::access::Grant;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use futures_util::StreamExt;
use serde::Deserialize;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// Users (by budget pressure) and recent events a snapshot carries.
const USERS: usize = 100;
const EVENTS: usize = 100;
/// The shortest time between two snapshots of a stream.
const MIN_EVERY: Duration = Duration::from_millis(100);
/// A stream with nothing to send says it is alive this often, so a
/// watcher can tell a quiet gateway from a lost one.
const KEEP_ALIVE: Duration = Duration::from_millis(500);
/// Events an events stream holds for a watcher that does not keep up;
/// one that falls this far behind is dropped, told so by a last event.
pub(super) const MAX_BACKLOG: usize = 4_096;

fn scope(gw: &super::Gateway, op: Option<&Arc<Operator>>) -> &'static str {
    match op {
        _ if gw.opts.readonly => "readonly",
        Some(op) if op.scope == Grant::View => "view",
        _ => "operate",
    }
}

/// `GET /_fusebox/snapshot`: the snapshot now.
pub(super) async fn snapshot(State(gw): Shared, op: Option<Extension<Arc<Operator>>>) -> Response {
    let scope = scope(&gw, op.as_deref());
    (
        [(crate::wire::fusebox::SCOPE, scope)],
        axum::Json(gw.runner.snapshot(USERS, EVENTS)),
    )
        .into_response()
}

/// A snapshot stream's options.
#[derive(Deserialize)]
pub(super) struct Every {
    /// Milliseconds between snapshots (at least 100).
    every_ms: Option<u64>,
}

/// An events stream's options.
#[derive(Deserialize)]
pub(super) struct Records {
    /// `calls`: each request's outcome record and each provider or tool
    /// call too.
    records: Option<String>,
}

fn sse(scope: &'static str, frames: impl futures_util::Stream<Item = String> + Send + 'static) -> Response {
    let mut resp = super::event_stream(Body::from_stream(frames.map(Ok::<_, Infallible>)));
    resp.headers_mut().insert(
        header::HeaderName::from_static(crate::wire::fusebox::SCOPE),
        header::HeaderValue::from_static(scope),
    );
    resp
}

fn data(json: &impl serde::Serialize) -> String {
    let mut out = Vec::new();
    crate::wire::sse::write_json(None, json, &mut out);
    // JSON is UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// `GET /_fusebox/snapshots?every_ms=N`: a snapshot every N ms (100 by
/// default and at least), sent only when something in it changed; a
/// keep-alive comment when nothing did for half a second.
pub(super) async fn snapshots(
    State(gw): Shared,
    op: Option<Extension<Arc<Operator>>>,
    Query(q): Query<Every>,
) -> Response {
    let scope = scope(&gw, op.as_deref());
    let every = Duration::from_millis(q.every_ms.unwrap_or(100)).max(MIN_EVERY);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let start = (gw, tick, None, tokio::time::Instant::now());
    let stream = futures_util::stream::unfold(start, |(gw, mut tick, last, mut sent)| async move {
        loop {
            tick.tick().await;
            let s = gw.runner.snapshot(USERS, EVENTS);
            // The times always move; what is worth sending is the rest.
            let mut timeless = s.clone();
            (timeless.t_ms, timeless.wall_ms) = (0, 0);
            if last.as_ref() == Some(&timeless) {
                if sent.elapsed() < KEEP_ALIVE {
                    continue;
                }
                sent = tokio::time::Instant::now();
                return Some((": alive\n\n".to_string(), (gw, tick, last, sent)));
            }
            let frame = data(&s);
            return Some((frame, (gw, tick, Some(timeless), tokio::time::Instant::now())));
        }
    });
    sse(scope, stream)
}

/// `GET /_fusebox/events[?records=calls]`: notable events (transitions,
/// operator actions, budget warnings, …) from now on, as they happen; with
/// `records=calls`, each request's outcome and each call's record too. A
/// keep-alive comment when nothing happened for half a second; a watcher
/// that falls [`MAX_BACKLOG`] events behind is dropped, told so.
pub(super) async fn events(
    State(gw): Shared,
    op: Option<Extension<Arc<Operator>>>,
    Query(q): Query<Records>,
) -> Response {
    let scope = scope(&gw, op.as_deref());
    let calls = q.records.as_deref() == Some("calls");
    let watcher = gw
        .runner
        .events()
        .subscribe_watcher(MAX_BACKLOG, calls, gw.watchers_dropped.clone());
    let stream = futures_util::stream::unfold(Some((watcher, gw)), |state| async move {
        let (mut w, gw) = state?;
        // Quiet for a while: a comment says the gateway is still there.
        let Ok(next) = tokio::time::timeout(KEEP_ALIVE, w.rx.recv()).await else {
            return Some((": alive\n\n".to_string(), Some((w, gw))));
        };
        match next {
            Some(e) => Some((data(&e), Some((w, gw)))),
            // Dropped for falling behind: the last event says so.
            None if w.fell_behind() => {
                let t_ms = gw.runner.clock().elapsed_ms();
                Some((data(&dropped(t_ms)), None))
            }
            None => None,
        }
    });
    sse(scope, stream)
}

/// The last event of a stream whose watcher fell too far behind.
fn dropped(t_ms: u64) -> serde_json::Value {
    serde_json::json!({
        "t_ms": t_ms,
        "kind": "watcher_dropped",
        "reason": format!("this watcher fell {MAX_BACKLOG} events behind and was dropped; reconnect to follow on from now"),
    })
}
