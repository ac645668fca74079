//! The tool registry: tool specs offered to models, semantic validation of
//! the tool calls models make, and the mock tools (with the shared fault
//! model) that stand in for real APIs; HTTP tools (`http.rs`) call real ones.

use crate::clock::{mix, purpose, Seed};
use crate::config::Config;
use crate::provider::fault::{Fault, FaultTable};
use crate::provider::{ErrorKind, ProviderError, ToolCall, ToolKind, ToolSpec};
use crate::target::Target;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

pub mod aside;
pub mod http;

/// Tool specs for every configured tool, schemas converted to JSON.
pub fn specs(cfg: &Config) -> Vec<ToolSpec> {
    cfg.tools
        .iter()
        .map(|(name, t)| ToolSpec {
            kind: ToolKind::Function,
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

/// Argument schemas compiled to validators, by the schema's text: a tool's
/// schema is compiled once, however many requests offer it (a gateway's
/// clients send theirs with every request). Bounded; a schema that does
/// not compile is remembered as such and only the JSON is checked.
pub struct Schemas {
    /// By the schema's text (its hash, the text kept to tell collisions).
    compiled: parking_lot::Mutex<lru::LruCache<u64, (Box<str>, Compiled)>>,
    /// The same by the schema's allocation, which the configured tools'
    /// specs share: found without writing the schema out.
    by_ptr: parking_lot::Mutex<lru::LruCache<usize, (std::sync::Weak<Value>, Compiled)>>,
    keys: ahash::RandomState,
}

/// A compiled schema (`None`: it does not compile).
type Compiled = Option<Arc<jsonschema::Validator>>;

/// Schemas longer than this are compiled each time rather than kept.
const MAX_CACHED_TEXT: usize = 64 * 1024;

impl Default for Schemas {
    fn default() -> Self {
        Self::new(512)
    }
}

impl Schemas {
    /// A cache of at most `capacity` compiled schemas.
    pub fn new(capacity: usize) -> Self {
        let cap = std::num::NonZeroUsize::new(capacity.max(1)).unwrap_or(std::num::NonZeroUsize::MIN);
        Self {
            compiled: parking_lot::Mutex::new(lru::LruCache::new(cap)),
            by_ptr: parking_lot::Mutex::new(lru::LruCache::new(cap)),
            keys: ahash::RandomState::new(),
        }
    }

    fn validator(&self, schema: &Arc<Value>) -> Compiled {
        let ptr = Arc::as_ptr(schema) as usize;
        if let Some((weak, v)) = self.by_ptr.lock().get(&ptr) {
            if weak.upgrade().is_some_and(|s| Arc::ptr_eq(&s, schema)) {
                return v.clone();
            }
        }
        let v = self.compile(schema);
        self.by_ptr.lock().put(ptr, (Arc::downgrade(schema), v.clone()));
        v
    }

    fn compile(&self, schema: &Value) -> Compiled {
        let text = schema.to_string();
        let key = self.keys.hash_one(&text);
        let mut cache = self.compiled.lock();
        if let Some((t, v)) = cache.get(&key) {
            if **t == *text {
                return v.clone();
            }
        }
        let v = match jsonschema::options().should_validate_formats(true).build(schema) {
            Ok(v) => Some(Arc::new(v)),
            Err(e) => {
                tracing::debug!(error = %e, "a tool schema does not compile; its arguments are checked as JSON only");
                None
            }
        };
        if text.len() <= MAX_CACHED_TEXT {
            cache.put(key, (text.into_boxed_str(), v.clone()));
        }
        v
    }

    /// Checks a model's tool call against the tools offered in the request:
    /// the name must be one of them, a function's arguments a JSON object valid
    /// under the tool's full JSON Schema (types, required keys, enums,
    /// nested objects, array items, `anyOf`, formats). The problem, in
    /// words, naming where in the arguments it is.
    pub fn check(&self, call: &ToolCall, offered: &[ToolSpec]) -> Result<(), String> {
        self.check_read(call, None, offered)
    }

    /// [`Schemas::check`], with the call's arguments already `read` where
    /// the caller has them as JSON (their text is not read again).
    pub fn check_read(&self, call: &ToolCall, read: Option<&Value>, offered: &[ToolSpec]) -> Result<(), String> {
        let Some(spec) = offered.iter().find(|t| *t.name == *call.name) else {
            return Err(format!("hallucinated tool name `{}`", call.name));
        };
        if spec.kind == ToolKind::Custom {
            // Free text; a grammar, if it has one, is the upstream's to keep.
            return Ok(());
        }
        let parsed;
        let args = match read {
            Some(args) => args,
            None => {
                parsed = serde_json::from_str::<Value>(&call.arguments)
                    .map_err(|e| format!("arguments of `{}` are not valid JSON: {e}", call.name))?;
                &parsed
            }
        };
        if !args.is_object() {
            return Err(format!("arguments of `{}` are not a JSON object", call.name));
        }
        let Some(v) = self.validator(&spec.schema).filter(|v| !v.is_valid(args)) else {
            return Ok(());
        };
        let first = v.iter_errors(args).next().map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() {
                String::new()
            } else {
                format!("{at}: ")
            };
            format!("arguments of `{}` do not match the schema: {at}{e}", call.name)
        });
        first.map_or(Ok(()), Err)
    }
}

/// Runs tools.
#[async_trait::async_trait]
pub trait ToolExecutor: Send + Sync {
    /// Calls `name` with JSON `args`; the result is the tool's text output.
    async fn call(&self, name: &str, args: &str, request_id: u64, attempt: u32) -> Result<Arc<str>, ProviderError>;

    /// [`ToolExecutor::call`], failing as timed out after `timeout` of its
    /// own time (waits on the caller's person are not: `aside.rs`). Tools
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
        aside::within_own(timeout, "tool call", self.call(name, args, request_id, attempt)).await
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
        let fault = self
            .faults
            .pick(&Target::tool(name), self.seed.stream(purpose::FAULT, key).f64());
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
        let schemas = Schemas::default();
        let check = |name: &str, args: &str| schemas.check(&ToolCall::new("call_1", name, args), &offered);
        assert!(check("get_order", r#"{"order_id":"1"}"#).is_ok());
        let e = check("get_odrer", r#"{"order_id":"1"}"#).unwrap_err();
        assert!(e.contains("hallucinated tool name `get_odrer`"), "{e}");
        let e = check("get_order", r#"{"order_id": 1"#).unwrap_err();
        assert!(e.contains("not valid JSON"), "{e}");
        let e = check("get_order", r#"{"order_id": 1}"#).unwrap_err();
        assert!(e.contains("/order_id: 1 is not of type \"string\""), "{e}");
        let e = check("get_order", r#"{}"#).unwrap_err();
        assert!(e.contains("\"order_id\" is a required property"), "{e}");
        assert!(check("get_order", "[1]").unwrap_err().contains("not a JSON object"));
    }

    #[test]
    fn arguments_are_checked_against_the_whole_schema() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "status": {"enum": ["open", "shipped"]},
                "address": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                            "required": ["zip"]},
                "items": {"type": "array", "items": {"type": "integer", "minimum": 1}},
                "contact": {"anyOf": [{"type": "string", "format": "email"}, {"type": "integer"}]}
            },
            "additionalProperties": false
        });
        let offered = [ToolSpec {
            kind: ToolKind::Function,
            name: "update".into(),
            description: "".into(),
            schema: Arc::new(schema),
        }];
        let schemas = Schemas::default();
        let check = |args: &str| schemas.check(&ToolCall::new("c", "update", args), &offered);
        assert!(check(r#"{"status":"open","address":{"zip":"12345"},"items":[1,2],"contact":"a@b.co"}"#).is_ok());
        for (args, at) in [
            (r#"{"status":"lost"}"#, "/status"),
            (r#"{"address":{"zip":"12"}}"#, "/address/zip"),
            (r#"{"address":{}}"#, "/address"),
            (r#"{"items":[1,0]}"#, "/items/1"),
            (r#"{"contact":"not an address"}"#, "/contact"),
            (r#"{"extra":1}"#, ""),
        ] {
            let e = check(args).unwrap_err();
            assert!(e.contains(&format!("schema: {at}")), "{args}: {e}");
        }
        // Compiled once, then served from the cache.
        assert_eq!(schemas.compiled.lock().len(), 1);
    }
}
