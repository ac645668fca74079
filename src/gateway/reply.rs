//! How a call's end is answered in the client's API, whole or as a
//! stream that never started, and the `x-fusebox-*` headers that say how
//! it ended: shared by chat, streams and embeddings.

use super::client_api::Client;
use super::error::GatewayError;
use crate::runner::chat::{Chat, ChatEnd};
use crate::wire::fusebox;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// Writes the outcome as the `x-fusebox-*` headers say it: level and
/// chain, and quality and attempts where given.
pub(super) fn outcome_headers(
    h: &mut HeaderMap,
    level: crate::outcome::Level,
    chain: &[crate::outcome::Hop],
    more: Option<(f64, u32)>,
) {
    // Room for these four and the two still to come (the request's name,
    // the length) at once: the map is not grown, and rehashed, on the way.
    h.reserve(6);
    h.insert(
        HeaderName::from_static(fusebox::LEVEL),
        HeaderValue::from_static(level.as_str()),
    );
    let mut hops = String::with_capacity(chain.iter().map(|h| h.name.len() + 12).sum());
    for (i, hop) in chain.iter().enumerate() {
        if i > 0 {
            hops.push_str(", ");
        }
        hop.push_ascii(&mut hops);
    }
    // Printable ASCII only, so always a valid value.
    if let Ok(v) = HeaderValue::try_from(hops) {
        h.insert(HeaderName::from_static(fusebox::CHAIN), v);
    }
    if let Some((quality, attempts)) = more {
        // The first model's answer, nearly always: nothing to write.
        let v = if quality == 1.0 {
            Ok(HeaderValue::from_static("1.00"))
        } else {
            HeaderValue::try_from(two_decimals(quality))
        };
        if let Ok(v) = v {
            h.insert(HeaderName::from_static(fusebox::QUALITY), v);
        }
        h.insert(HeaderName::from_static(fusebox::ATTEMPTS), fusebox::count(attempts));
    }
}

/// `q` with two decimals, as `{:.2}` writes it (without formatting a
/// float, which costs more than the rest of the headers together).
fn two_decimals(q: f64) -> String {
    use std::fmt::Write as _;
    let hundredths = q * 100.0;
    let r = hundredths.round();
    // Away from a half, rounding the product rounds as `{:.2}` does.
    if !(0.0..1e9).contains(&r) || (hundredths - r).abs() >= 0.49 {
        return format!("{q:.2}");
    }
    let r = r as u64;
    let mut s = String::with_capacity(12);
    let _ = write!(s, "{}.{:02}", r / 100, r % 100);
    s
}

/// The whole response for a call whose client's stream (if it asked for
/// one) never started.
pub(super) fn respond(client: &Client, id: u64, chat: Chat, stream: bool) -> Response {
    let o = chat.outcome;
    let mut resp = answer(client, id, chat.end, stream).unwrap_or_else(IntoResponse::into_response);
    outcome_headers(resp.headers_mut(), o.level, &o.chain, Some((o.quality, o.attempts)));
    resp
}

/// How a call's end is answered in the client's API.
fn answer(client: &Client, id: u64, end: ChatEnd, stream: bool) -> Result<Response, GatewayError> {
    let api = client.api;
    let error = |status, message: String| GatewayError::new(api, status, message);
    match end {
        ChatEnd::Answer { response, model, .. } | ChatEnd::Streamed { response, model, .. } => {
            let wire = response.wire.as_deref();
            if let Some(body) = wire
                .filter(|w| api.takes_as_sent(w.kind) && !stream)
                .and_then(|w| w.body.clone())
            {
                // The upstream's own answer, as it sent it.
                return Ok(super::answer(Body::from(body), "application/json"));
            }
            let mut reply = response.reply();
            if reply.id.is_empty() {
                reply.id = api.reply_id(id);
            }
            if reply.model.is_empty() {
                reply.model = model;
            }
            Ok(if stream {
                super::event_stream(written(client, id, &reply).into())
            } else {
                axum::Json(api.render(client, id, &reply)).into_response()
            })
        }
        ChatEnd::Refused { reason, retry_after } | ChatEnd::RateLimited { reason, retry_after } => {
            Err(error(StatusCode::TOO_MANY_REQUESTS, reason).retry_after(retry_after))
        }
        ChatEnd::Unavailable { message } => Err(error(StatusCode::SERVICE_UNAVAILABLE, message)),
        ChatEnd::Unservable { reason, param } => Err(error(StatusCode::BAD_REQUEST, reason).param(param)),
        ChatEnd::Upstream(e) => Err(GatewayError::upstream(api, &e)),
        ChatEnd::Cut { reason, .. } => Err(error(StatusCode::BAD_GATEWAY, reason)),
        ChatEnd::Deadline { reason } => Err(error(StatusCode::GATEWAY_TIMEOUT, reason)),
    }
}

/// A whole answer written as a stream in the client's API.
fn written(client: &Client, id: u64, reply: &crate::wire::Reply) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = super::client_api::Writer::new(client, id, &reply.id, &reply.model);
    reply.deltas().iter().for_each(|d| w.write(d, &mut out));
    out
}

#[cfg(test)]
mod tests {
    use super::two_decimals;

    #[test]
    fn a_quality_has_two_decimals_as_the_float_format_writes_them() {
        let mut q = 0.0;
        while q <= 2.0 {
            assert_eq!(two_decimals(q), format!("{q:.2}"), "{q}");
            q += 0.0005;
        }
        for q in [
            0.125,
            0.375,
            0.005,
            0.015,
            1.005,
            0.85 * 0.9,
            f64::NAN,
            -0.5,
            1e12,
            0.999_999,
        ] {
            assert_eq!(two_decimals(q), format!("{q:.2}"), "{q}");
        }
    }
}
