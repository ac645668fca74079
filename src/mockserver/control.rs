//! The control API: read and switch faults at runtime.
//!
//! `GET /_fusebox/faults` answers the active faults as a JSON object of
//! target → [`FaultSpec`]; `PUT /_fusebox/faults` takes such an object and
//! sets each target (a `healthy` fault clears it), answering the new table.

use super::MockServer;
use crate::provider::fault::FaultSpec;
use crate::target::Target;
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
fn validate(target: &Target, spec: &FaultSpec) -> Result<(), String> {
    spec.check().map_err(|e| format!("{target}.{e}"))
}

/// `PUT /_fusebox/faults`.
pub(crate) async fn put_faults(State(server): State<Arc<MockServer>>, body: Bytes) -> Response {
    let table: BTreeMap<Target, FaultSpec> = match serde_json::from_slice(&body) {
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
