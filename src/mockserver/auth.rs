//! What the mock accepts: the keys and versions the real APIs require.

use super::Provider;
use crate::mockserver::error_response;
use axum::http::{header, HeaderMap};
use axum::response::Response;

/// Whether `v` names an Anthropic API version: a date (`YYYY-MM-DD`) from
/// the first one on. The SDKs move to newer versions as they come out
/// (anthropic 2.14 sends 2026-10-21), and the messages API this server
/// speaks is the same in every one of them.
pub(super) fn is_api_version(v: &str) -> bool {
    let b = v.as_bytes();
    b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit())
        && v >= "2023-01-01"
        && v[5..7] >= *"01"
        && v[5..7] <= *"12"
        && v[8..10] >= *"01"
        && v[8..10] <= *"31"
}

pub(super) fn header_str(headers: &HeaderMap, name: impl axum::http::header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

pub(super) fn has_bearer(headers: &HeaderMap) -> bool {
    header_str(headers, header::AUTHORIZATION)
        .and_then(|s| s.split_once(' '))
        .is_some_and(|(scheme, key)| scheme.eq_ignore_ascii_case("bearer") && !key.trim().is_empty())
}

pub(super) fn has_api_key(headers: &HeaderMap) -> bool {
    header_str(headers, "x-api-key").is_some_and(|k| !k.is_empty())
}

/// The provider's credential check: `Some` rejection if it fails (key
/// values are never logged or echoed).
pub(super) fn check_auth(provider: Provider, headers: &HeaderMap, keyless: bool) -> Option<Response> {
    let fail = |code: u16, msg: &str| Some(error_response(provider, code, msg, None, HeaderMap::new()));
    let no_key = headers.get(header::AUTHORIZATION).is_none() && headers.get("x-api-key").is_none();
    match provider {
        Provider::OpenAi | Provider::DeepSeek if keyless && no_key => None,
        Provider::OpenAi | Provider::DeepSeek => {
            if headers.get(header::AUTHORIZATION).is_none() {
                return fail(
                    401,
                    "You didn't provide an API key. Send it in the Authorization header (Authorization: Bearer KEY).",
                );
            }
            if !has_bearer(headers) {
                return fail(401, "Incorrect API key format: expected 'Authorization: Bearer KEY'.");
            }
            None
        }
        // A resource key in `api-key`, or an Entra ID token as a bearer one.
        Provider::Azure => {
            let keyed = header_str(headers, "api-key").is_some_and(|k| !k.is_empty());
            if keyed || has_bearer(headers) {
                return None;
            }
            fail(
                401,
                "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.",
            )
        }
        Provider::Anthropic => {
            // The current SDKs send the key as a bearer token; older ones as x-api-key.
            let answered = has_api_key(headers) || has_bearer(headers) || (keyless && no_key);
            if !answered {
                return fail(401, "x-api-key header is required");
            }
            match header_str(headers, "anthropic-version") {
                None => fail(400, "anthropic-version: header is required"),
                Some(v) if !is_api_version(v) => fail(
                    400,
                    "anthropic-version: not a version (a date from 2023-01-01 on, such as 2023-06-01)",
                ),
                Some(_) => None,
            }
        }
    }
}
