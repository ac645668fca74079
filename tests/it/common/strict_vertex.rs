//! Vertex AI on the strict fake: an OAuth token endpoint that takes a
//! service account's signed JWT (RFC 7523) only when its signature verifies
//! with the test key's public half, and issues short-lived access tokens;
//! and `…/projects/{p}/locations/{l}/publishers/google/models/{m}:…`, which
//! takes only a token it issued and not yet expired (401 `UNAUTHENTICATED`
//! otherwise), then answers as the Gemini API does.

use super::strict::StrictState;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Form, Json};
use base64::Engine;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The test service account's key file (its `token_uri` is rewritten to
/// the fake's by [`key_file`]).
const KEY: &str = include_str!("../../fixtures/vertex-service-account.json");
/// Its public key (PKCS#1 DER), which its JWTs must verify with.
const PUBLIC: &[u8] = include_bytes!("../../fixtures/vertex-service-account.pub.der");

/// The tokens the endpoint issued, and how long each lives.
pub struct Tokens {
    /// Each token's end.
    pub issued: HashMap<String, Instant>,
    /// The lifetime of the next tokens issued.
    pub lifetime: Duration,
    /// Token requests answered.
    pub requests: u32,
}

impl Default for Tokens {
    fn default() -> Self {
        Tokens {
            issued: HashMap::new(),
            lifetime: Duration::from_secs(3600),
            requests: 0,
        }
    }
}

/// The test key file with its `token_uri` at the fake `base`, written in
/// `dir` (one file per fake).
pub fn key_file(dir: &std::path::Path, base: &str) -> std::path::PathBuf {
    let mut key: Value = serde_json::from_str(KEY).unwrap();
    key["token_uri"] = json!(format!("{base}/token"));
    let name: String = base.chars().filter(char::is_ascii_digit).collect();
    let path = dir.join(format!("vertex-key-{name}.json"));
    std::fs::write(&path, key.to_string()).unwrap();
    path
}

fn oauth_error(error: &str, description: &str) -> Response {
    let body = json!({"error": error, "error_description": description});
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

/// Why a JWT assertion is refused, if it is.
fn refuse_assertion(jwt: &str) -> Option<&'static str> {
    // Google takes each part padded or not (gcp_auth pads).
    let b64 = base64::engine::GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    let mut parts = jwt.split('.');
    let (Some(h), Some(c), Some(sig), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Some("Invalid JWT: not three parts.");
    };
    let read = |p: &str| {
        b64.decode(p)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
    };
    let (Some(header), Some(claims)) = (read(h), read(c)) else {
        return Some("Invalid JWT: unreadable.");
    };
    if header["alg"] != "RS256" {
        return Some("Invalid JWT: alg must be RS256.");
    }
    let key: Value = serde_json::from_str(KEY).unwrap();
    if claims["iss"] != key["client_email"] {
        return Some("Invalid JWT: unknown issuer.");
    }
    if !claims["scope"].as_str().is_some_and(|s| s.contains("cloud-platform")) {
        return Some("Invalid JWT: no scope.");
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    if claims["exp"].as_u64().is_none_or(|e| e <= now) {
        return Some("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.");
    }
    let Ok(sig) = b64.decode(sig) else {
        return Some("Invalid JWT Signature.");
    };
    let public = ring::signature::UnparsedPublicKey::new(&ring::signature::RSA_PKCS1_2048_8192_SHA256, PUBLIC);
    let signed = &jwt[..h.len() + 1 + c.len()];
    public
        .verify(signed.as_bytes(), &sig)
        .err()
        .map(|_| "Invalid JWT Signature.")
}

/// `POST /token`: a JWT bearer grant for an access token.
pub async fn token(State(state): State<Arc<StrictState>>, Form(form): Form<HashMap<String, String>>) -> Response {
    if form.get("grant_type").map(String::as_str) != Some("urn:ietf:params:oauth:grant-type:jwt-bearer") {
        return oauth_error("unsupported_grant_type", "Invalid grant_type.");
    }
    if let Some(why) = refuse_assertion(form.get("assertion").map_or("", String::as_str)) {
        return oauth_error("invalid_grant", why);
    }
    let mut tokens = state.vertex.lock();
    tokens.requests += 1;
    let token = format!("ya29.fake-{}", tokens.requests);
    let lifetime = tokens.lifetime;
    tokens.issued.insert(token.clone(), Instant::now() + lifetime);
    Json(json!({"access_token": token, "expires_in": lifetime.as_secs(), "token_type": "Bearer"})).into_response()
}

/// `POST /{version}/projects/{p}/locations/{l}/publishers/google/models/{m}:{method}`.
pub async fn vertex(
    State(state): State<Arc<StrictState>>,
    Path((_version, _project, _location, call)): Path<(String, String, String, String)>,
    uri: Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let valid = state
        .vertex
        .lock()
        .issued
        .get(token)
        .is_some_and(|end| Instant::now() < *end);
    let refused = (!valid).then(|| {
        let e = json!({"error": {"code": 401, "status": "UNAUTHENTICATED",
            "message": "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."}});
        (StatusCode::UNAUTHORIZED, Json(e)).into_response()
    });
    super::strict_gemini::answer(&state, &call, uri.query().unwrap_or(""), (headers, body), refused, true).await
}
