//! The tool registry: tool specs offered to models, semantic validation of
//! the tool calls models make, and the mock tools (with the shared fault
//! model) that stand in for real APIs.

use crate::clock::{mix, purpose, Seed};
use crate::config::Config;
use crate::provider::fault::{Fault, FaultTable};
use crate::provider::{ErrorKind, ProviderError, ToolCall, ToolSpec};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// Tool specs for every configured tool, schemas converted to JSON.
pub fn specs(cfg: &Config) -> Vec<ToolSpec> {
    cfg.tools
        .iter()
        .map(|(name, t)| ToolSpec {
            name: name.as_str().into(),
            description: t.description.as_str().into(),
            schema: Arc::new(
                t.schema
                    .as_ref()
                    .and_then(|s| serde_json::to_value(s).ok())
                    .unwrap_or_else(|| serde_json::json!({"type": "object"})),
            ),
        })
        .collect()
}

/// Checks a model's tool call against the tools offered in the request:
/// the name must be one of them, the arguments a JSON object matching the
/// schema (required keys, property types). Returns the problem in words.
pub fn validate_call(call: &ToolCall, offered: &[ToolSpec]) -> Result<(), String> {
    let Some(spec) = offered.iter().find(|t| *t.name == *call.name) else {
        return Err(format!("hallucinated tool name `{}`", call.name));
    };
    let args: Value = serde_json::from_str(&call.arguments)
        .map_err(|e| format!("arguments of `{}` are not valid JSON: {e}", call.name))?;
    check_schema(&args, &spec.schema).map_err(|e| format!("arguments of `{}` do not match the schema: {e}", call.name))
}

/// A JSON-schema subset: `type`, `required`, `properties`.
fn check_schema(v: &Value, schema: &Value) -> Result<(), String> {
    if let Some(ty) = schema.get("type").and_then(Value::as_str) {
        let ok = match ty {
            "object" => v.is_object(),
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            "array" => v.is_array(),
            "null" => v.is_null(),
            _ => true,
        };
        if !ok {
            return Err(format!("expected {ty}, got {}", kind(v)));
        }
    }
    if let Some(obj) = v.as_object() {
        if let Some(req) = schema.get("required").and_then(Value::as_array) {
            for k in req.iter().filter_map(Value::as_str) {
                if !obj.contains_key(k) {
                    return Err(format!("missing required `{k}`"));
                }
            }
        }
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, sub) in props {
                if let Some(val) = obj.get(k) {
                    check_schema(val, sub).map_err(|e| format!("`{k}`: {e}"))?;
                }
            }
        }
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Runs tools.
#[async_trait::async_trait]
pub trait ToolExecutor: Send + Sync {
    /// Calls `name` with JSON `args`; the result is the tool's text output.
    async fn call(&self, name: &str, args: &str, request_id: u64, attempt: u32) -> Result<Arc<str>, ProviderError>;

    /// [`ToolExecutor::call`], failing as timed out after `timeout`. Tools
    /// that know their latency up front (recorded ones) answer this without
    /// a second timer.
    async fn call_within(
        &self,
        name: &str,
        args: &str,
        request_id: u64,
        attempt: u32,
        timeout: Duration,
    ) -> Result<Arc<str>, ProviderError> {
        crate::provider::within(timeout, "tool call", self.call(name, args, request_id, attempt)).await
    }
}

/// Mock tools with realistic latency and the shared fault model
/// (faults keyed `tool:NAME`).
pub struct MockTools {
    seed: Seed,
    faults: Arc<FaultTable>,
}

impl MockTools {
    /// Mock tools drawing from `seed`.
    pub fn new(seed: Seed, faults: Arc<FaultTable>) -> Self {
        Self { seed, faults }
    }
}

fn base_latency_ms(name: &str) -> u64 {
    match name {
        "get_order" => 80,
        "lookup_shipping" => 120,
        "search_docs" => 300,
        "send_notification" => 150,
        _ => 100,
    }
}

#[async_trait::async_trait]
impl ToolExecutor for MockTools {
    async fn call(&self, name: &str, args: &str, request_id: u64, attempt: u32) -> Result<Arc<str>, ProviderError> {
        let key = mix(request_id) ^ crate::clock::hash_str(name) ^ ((attempt as u64) << 56);
        let mut rng = self.seed.stream(purpose::MOCK, key);
        let target = format!("tool:{name}");
        let fault = self.faults.pick(&target, self.seed.stream(purpose::FAULT, key).f64());
        let mut latency = Duration::from_millis(base_latency_ms(name) / 2 + rng.u64(0..=base_latency_ms(name)));
        match fault {
            Fault::Status { code, retry_after_ms } => {
                tokio::time::sleep(latency / 4).await;
                let mut e =
                    ProviderError::new(ErrorKind::from_status(code), Some(code), format!("{name}: HTTP {code}"));
                e.retry_after = retry_after_ms.map(Duration::from_millis);
                return Err(e);
            }
            Fault::Timeout => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return Err(ProviderError::new(
                    ErrorKind::Timeout,
                    None,
                    format!("{name}: no response"),
                ));
            }
            Fault::ConnectionRefused => {
                return Err(ProviderError::new(
                    ErrorKind::Connect,
                    None,
                    format!("{name}: connection refused"),
                ))
            }
            Fault::Reset => {
                tokio::time::sleep(latency / 2).await;
                return Err(ProviderError::new(
                    ErrorKind::Reset,
                    None,
                    format!("{name}: connection reset"),
                ));
            }
            Fault::Latency { ms } => latency += Duration::from_millis(ms),
            Fault::KeepAliveStall { ms } => latency += Duration::from_millis(ms),
            _ => {}
        }
        tokio::time::sleep(latency).await;
        Ok(format!("{{\"tool\":\"{name}\",\"args\":{args},\"status\":\"ok\"}}").into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_catches_hallucinated_names_and_bad_arguments() {
        let offered = specs(&Config::default());
        let call = |name: &str, args: &str| ToolCall::new("call_1", name, args);
        assert!(validate_call(&call("get_order", r#"{"order_id":"1"}"#), &offered).is_ok());
        let e = validate_call(&call("get_odrer", r#"{"order_id":"1"}"#), &offered).unwrap_err();
        assert!(e.contains("hallucinated tool name `get_odrer`"), "{e}");
        let e = validate_call(&call("get_order", r#"{"order_id": 1"#), &offered).unwrap_err();
        assert!(e.contains("not valid JSON"), "{e}");
        let e = validate_call(&call("get_order", r#"{"order_id": 1}"#), &offered).unwrap_err();
        assert!(e.contains("`order_id`: expected string, got number"), "{e}");
        let e = validate_call(&call("get_order", r#"{}"#), &offered).unwrap_err();
        assert!(e.contains("missing required `order_id`"), "{e}");
    }
}
