//! The live view of a gateway, for operators with a `view` token (or on
//! loopback without tokens): the snapshot the console draws, once or as a
//! stream of at most ten a second, and the notable events as they happen.
//! Both streams are server-sent events, one JSON object per `data:` line.

use super::Shared;
use axum::body::Body;
use axum::extract::Query;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::Deserialize;
use std::convert::Infallible;
use std::time::Duration;

/// Users (by budget pressure) and recent events a snapshot carries.
const USERS: usize = 100;
const EVENTS: usize = 100;
/// The shortest time between two snapshots of a stream.
const MIN_EVERY: Duration = Duration::from_millis(100);

/// `GET /_fusebox/snapshot`: the snapshot now.
pub(super) async fn snapshot(axum::extract::State(gw): Shared) -> Response {
    axum::Json(gw.runner.snapshot(USERS, EVENTS)).into_response()
}

/// How often a snapshot stream sends.
#[derive(Deserialize)]
pub(super) struct Every {
    /// Milliseconds between snapshots (at least 100).
    every_ms: Option<u64>,
}

fn sse(stream: impl futures_util::Stream<Item = String> + Send + 'static) -> Response {
    let body = Body::from_stream(stream.map(|json| Ok::<_, Infallible>(format!("data: {json}\n\n"))));
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `GET /_fusebox/snapshots?every_ms=N`: a snapshot every N ms (100 by
/// default and at least), sent only when something in it changed.
pub(super) async fn snapshots(axum::extract::State(gw): Shared, Query(q): Query<Every>) -> Response {
    let every = Duration::from_millis(q.every_ms.unwrap_or(100)).max(MIN_EVERY);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let stream = futures_util::stream::unfold((gw, tick, None), |(gw, mut tick, last)| async move {
        loop {
            tick.tick().await;
            let s = gw.runner.snapshot(USERS, EVENTS);
            // The times always move; what is worth sending is the rest.
            let mut timeless = s.clone();
            (timeless.t_ms, timeless.wall_ms) = (0, 0);
            if last.as_ref() == Some(&timeless) {
                continue;
            }
            let json = serde_json::to_string(&s).unwrap_or_default();
            return Some((json, (gw, tick, Some(timeless))));
        }
    });
    sse(stream)
}

/// `GET /_fusebox/events`: notable events (transitions, operator actions,
/// budget warnings, …) from now on, as they happen.
pub(super) async fn events(axum::extract::State(gw): Shared) -> Response {
    let rx = gw.runner.events().subscribe_notable();
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let e = rx.recv().await?;
        Some((serde_json::to_string(&e).unwrap_or_default(), rx))
    });
    sse(stream)
}
