//! The control API: read and switch faults at runtime.
//!
//! `GET /_fusebox/faults` answers the active faults as a JSON object of
//! target → [`FaultSpec`]; `PUT /_fusebox/faults` takes such an object and
//! sets each target (a `healthy` fault clears it), answering the new table.

use super::MockServer;
use crate::provider::fault::{Fault, FaultSpec};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `GET /_fusebox/faults`.
pub(crate) async fn get_faults(State(server): State<Arc<MockServer>>) -> Response {
    Json(server.faults.all()).into_response()
}

fn bad(message: String) -> Response {
    let body = json!({"error": {"type": "invalid_request_error", "message": message}});
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

/// Checks one entry; the message names the target and field.
fn validate(target: &str, spec: &FaultSpec) -> Result<(), String> {
    if target.trim().is_empty() {
        return Err("fault target must not be empty (e.g. \"provider:openai\")".into());
    }
    if !(spec.rate.is_finite() && (0.0..=1.0).contains(&spec.rate)) {
        return Err(format!("{target}.rate: must be between 0 and 1"));
    }
    match spec.fault {
        Fault::Status { code, .. } if !(400..=599).contains(&code) => {
            Err(format!("{target}.fault.code: must be an HTTP error status (400..=599)"))
        }
        Fault::SlowTokens { tokens_per_s } if !(tokens_per_s.is_finite() && tokens_per_s > 0.0) => {
            Err(format!("{target}.fault.tokens_per_s: must be a positive number"))
        }
        _ => Ok(()),
    }
}

/// `PUT /_fusebox/faults`.
pub(crate) async fn put_faults(State(server): State<Arc<MockServer>>, body: Bytes) -> Response {
    let table: BTreeMap<String, FaultSpec> = match serde_json::from_slice(&body) {
        Ok(t) => t,
        Err(e) => {
            return bad(format!(
                "invalid fault table (expected {{\"TARGET\": {{\"fault\": {{\"type\": ...}}, \"rate\": 1.0}}}}): {e}"
            ))
        }
    };
    for (target, spec) in &table {
        if let Err(m) = validate(target, spec) {
            return bad(m);
        }
    }
    for (target, spec) in table {
        tracing::info!(fault_target = %target, fault = %spec.fault.label(), rate = spec.rate, "mock server: fault set");
        server.faults.set(&target, spec);
    }
    Json(server.faults.all()).into_response()
}
