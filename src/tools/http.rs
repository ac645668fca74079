//! HTTP tools: a tool with `kind = "http"` is a request to a real API, its
//! URL filled from the call's arguments. The arguments the URL does not
//! take go in the query (GET, DELETE) or as a JSON body (POST, PUT,
//! PATCH). A 2xx answer's body is the tool's result; any other status,
//! or no answer, is a failure its breaker counts (with the server's
//! `Retry-After`). The other tools are called as before.

use super::ToolExecutor;
use crate::clock::Clock;
use crate::config::http_tool::Template;
use crate::config::{Config, ToolBackend};
use crate::provider::http::{header_getter, read_body};
use crate::provider::upstream::{HttpCall, Upstream};
use crate::provider::{ErrorKind, ProviderError};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// Characters a URL's argument is escaped of: all but the unreserved ones.
const ESCAPED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// One HTTP tool, ready to call.
struct HttpTool {
    method: reqwest::Method,
    url: Template,
    headers: HeaderMap,
    /// Where its URLs must stay, where the template fixes it.
    scope: Option<Scope>,
}

/// What a filled URL must keep of its template: the origin, and the path
/// written before the first slot.
struct Scope {
    origin: reqwest::Url,
    path: String,
}

impl Scope {
    /// The scope of `url` (`None` where a slot is in its scheme or host,
    /// which no check can then fix).
    fn of(url: &Template) -> Option<Self> {
        use crate::config::http_tool::TemplatePiece;
        let fixed = match url.0.first() {
            Some(TemplatePiece::Text(t)) => t.as_str(),
            _ => return None,
        };
        let after_scheme = fixed.find("://")? + 3;
        let path_at = after_scheme + fixed[after_scheme..].find('/')?;
        let origin = reqwest::Url::parse(&fixed[..path_at]).ok()?;
        let path = fixed[path_at..].split(['?', '#']).next().unwrap_or("/").to_string();
        Some(Self { origin, path })
    }

    /// Whether `url` is within it.
    fn holds(&self, url: &reqwest::Url) -> bool {
        url.origin() == self.origin.origin() && url.path().starts_with(&self.path)
    }
}

/// Why an argument cannot fill a URL slot, if it cannot: a slot takes one
/// path segment, and an empty one or a dot segment would move the path.
fn unfit_segment(text: &str) -> Option<&'static str> {
    match text {
        "" => Some("empty"),
        "." | ".." => Some("a dot segment"),
        _ => None,
    }
}

/// The config's HTTP tools over HTTP, every other tool as `rest` calls it.
pub struct HttpTools {
    client: Upstream,
    /// Reads an HTTP-date `Retry-After`.
    clock: Clock,
    tools: HashMap<String, HttpTool>,
    rest: Arc<dyn ToolExecutor>,
}

impl HttpTools {
    /// `rest` with the config's HTTP tools called over HTTP (`rest` itself
    /// when it has none). An error names the header whose environment
    /// variable is not set.
    pub fn wrap(cfg: &Config, clock: Clock, rest: Arc<dyn ToolExecutor>) -> Result<Arc<dyn ToolExecutor>, String> {
        let mut tools = HashMap::new();
        for (name, t) in cfg.tools.iter().filter(|(_, t)| t.kind == ToolBackend::Http) {
            let at = |field: &str| format!("tools.{name}.{field}");
            let url = Template::parse(t.url.as_deref().unwrap_or_default(), "{")
                .map_err(|e| format!("{}: {e}", at("url")))?;
            let method = t.method.as_deref().unwrap_or("GET");
            let method =
                reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| format!("{}: {e}", at("method")))?;
            let mut headers = HeaderMap::new();
            for (h, v) in &t.headers {
                let at = at(&format!("headers.{h}"));
                let value = Template::parse(v, "${")
                    .map_err(|e| format!("{at}: {e}"))?
                    .fill(|var| std::env::var(var).ok())
                    .map_err(|var| format!("{at}: environment variable {var} is not set; export it"))?;
                let mut value =
                    HeaderValue::from_str(&value).map_err(|_| format!("{at}: not a header value once filled"))?;
                value.set_sensitive(true);
                let name = HeaderName::from_bytes(h.as_bytes()).map_err(|e| format!("{at}: {e}"))?;
                headers.insert(name, value);
            }
            let scope = Scope::of(&url);
            tools.insert(
                name.clone(),
                HttpTool {
                    method,
                    url,
                    headers,
                    scope,
                },
            );
        }
        if tools.is_empty() {
            return Ok(rest);
        }
        let client = Upstream::new().map_err(|e| e.to_string())?;
        Ok(Arc::new(Self {
            client,
            clock,
            tools,
            rest,
        }))
    }

    async fn call_http(&self, name: &str, t: &HttpTool, args: &str) -> Result<Arc<str>, ProviderError> {
        let refused = |why: String| ProviderError::new(ErrorKind::BadRequest, None, format!("{name}: {why}"));
        let mut args: Map<String, Value> = match serde_json::from_str(args) {
            Ok(Value::Object(m)) => m,
            _ if args.trim().is_empty() => Map::new(),
            _ => return Err(refused("arguments are not a JSON object".into())),
        };
        let mut unfit = None;
        let url = t
            .url
            .fill(|slot| {
                let v = args.remove(slot)?;
                let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                if let Some(why) = unfit_segment(&text) {
                    unfit.get_or_insert((slot.to_string(), why));
                }
                Some(percent_encoding::utf8_percent_encode(&text, ESCAPED).to_string())
            })
            .map_err(|slot| refused(format!("argument `{slot}` is missing (the URL needs it)")))?;
        if let Some((slot, why)) = unfit {
            return Err(refused(format!(
                "argument `{slot}` is {why}; it fills one segment of the URL's path: give the value itself"
            )));
        }
        let url = reqwest::Url::parse(&url).map_err(|e| refused(format!("the URL is not valid once filled: {e}")))?;
        if t.scope.as_ref().is_some_and(|s| !s.holds(&url)) {
            return Err(refused(
                "the arguments move the URL off its template's host or path".into(),
            ));
        }
        let mut url = url;
        let body = if matches!(t.method, reqwest::Method::GET | reqwest::Method::DELETE) {
            // The rest of the arguments in the query, an empty one dropped.
            let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_string);
            url.query_pairs_mut()
                .extend_pairs(args.iter().map(|(k, v)| (k, text(v))));
            if url.query() == Some("") {
                url.set_query(None);
            }
            None
        } else {
            Some(Value::Object(args).to_string())
        };
        let mut call = HttpCall::new(t.method.clone(), url);
        *call.headers_mut() = t.headers.clone();
        if let Some(body) = body {
            call.headers_mut()
                .entry(reqwest::header::CONTENT_TYPE)
                .or_insert(crate::provider::http::JSON);
            call = call.body(body);
        }
        let (resp, _fd) = self.client.send(name, call).await?;
        let status = resp.status().as_u16();
        let retry_after = crate::wire::headers::retry_after(&header_getter(resp.headers()), self.clock.wall_ms());
        let body = read_body(name, resp).await?;
        if !(200..300).contains(&status) {
            // The body may say what the caller asked: it stays out of the message.
            let mut e = ProviderError::new(
                ErrorKind::from_status(status),
                Some(status),
                format!("{name}: HTTP {status}"),
            );
            e.retry_after = retry_after;
            return Err(e);
        }
        Ok(String::from_utf8_lossy(&body).into())
    }
}

#[async_trait::async_trait]
impl ToolExecutor for HttpTools {
    async fn call(&self, name: &str, args: &str, request_id: u64, attempt: u32) -> Result<Arc<str>, ProviderError> {
        match self.tools.get(name) {
            Some(t) => self.call_http(name, t, args).await,
            None => self.rest.call(name, args, request_id, attempt).await,
        }
    }

    async fn call_within(
        &self,
        name: &str,
        args: &str,
        request_id: u64,
        attempt: u32,
        timeout: std::time::Duration,
    ) -> Result<Arc<str>, ProviderError> {
        match self.tools.get(name) {
            Some(t) => crate::provider::within(timeout, "tool call", self.call_http(name, t, args)).await,
            None => self.rest.call_within(name, args, request_id, attempt, timeout).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ToolConfig;
    use parking_lot::Mutex;
    use serde_json::json;

    /// What the API saw: method, path and query, body.
    type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

    /// An API on loopback: `/limited` answers 429 with `Retry-After: 7`, the rest 200.
    async fn api() -> (String, Seen) {
        let seen: Seen = Arc::default();
        let s = seen.clone();
        let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
            let s = s.clone();
            async move {
                let (parts, body) = req.into_parts();
                let body = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default();
                let uri = parts.uri.to_string();
                s.lock().push((
                    parts.method.to_string(),
                    uri.clone(),
                    String::from_utf8_lossy(&body).into(),
                ));
                if uri.starts_with("/limited") {
                    return (
                        axum::http::StatusCode::TOO_MANY_REQUESTS,
                        [("retry-after", "7")],
                        "slow down",
                    );
                }
                (
                    axum::http::StatusCode::OK,
                    [("content-type", "application/json")],
                    "{\"ok\":true}",
                )
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), seen)
    }

    /// The other tools: answers at once with the tool's name.
    struct Others;

    #[async_trait::async_trait]
    impl ToolExecutor for Others {
        async fn call(&self, name: &str, _: &str, _: u64, _: u32) -> Result<Arc<str>, ProviderError> {
            Ok(format!("{{\"tool\":\"{name}\"}}").into())
        }
    }

    fn tool(method: &str, url: String) -> ToolConfig {
        ToolConfig {
            kind: ToolBackend::Http,
            method: Some(method.into()),
            url: Some(url),
            ..ToolConfig::default()
        }
    }

    #[tokio::test]
    async fn arguments_fill_the_url_then_the_query_or_the_body() {
        let (base, seen) = api().await;
        let mut cfg = Config::default();
        cfg.tools
            .insert("get_order".into(), tool("GET", format!("{base}/orders/{{order_id}}")));
        cfg.tools.insert(
            "refund".into(),
            tool("POST", format!("{base}/orders/{{order_id}}/refunds")),
        );
        cfg.tools
            .insert("limited".into(), tool("GET", format!("{base}/limited")));
        let tools = HttpTools::wrap(&cfg, Clock::system(), Arc::new(Others)).unwrap();
        let answer = tools
            .call("get_order", r#"{"order_id":"A/1 2","expand":true,"lang":"fr"}"#, 1, 0)
            .await
            .unwrap();
        assert_eq!(&*answer, "{\"ok\":true}");
        tools
            .call("refund", r#"{"order_id":7,"amount":12.5}"#, 2, 0)
            .await
            .unwrap();
        let e = tools.call("limited", "{}", 3, 0).await.unwrap_err();
        assert_eq!((e.kind, e.status), (ErrorKind::RateLimited, Some(429)));
        assert_eq!(e.retry_after, Some(std::time::Duration::from_secs(7)));
        assert!(!e.message.contains("slow down"), "the body stays out of the message");
        let e = tools.call("get_order", r#"{"id":"A-1"}"#, 4, 0).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadRequest);
        assert!(e.message.contains("argument `order_id` is missing"), "{}", e.message);
        // A tool that is not an HTTP one is the others'.
        let other = tools.call("search_docs", r#"{"query":"x"}"#, 5, 0).await.unwrap();
        assert_eq!(&*other, "{\"tool\":\"search_docs\"}");
        assert_eq!(
            *seen.lock(),
            [
                (
                    "GET".into(),
                    "/orders/A%2F1%202?expand=true&lang=fr".into(),
                    String::new()
                ),
                ("POST".into(), "/orders/7/refunds".into(), "{\"amount\":12.5}".into()),
                ("GET".into(), "/limited".into(), String::new()),
            ]
        );
    }

    #[tokio::test]
    async fn a_slot_takes_one_path_segment_and_no_dot_segment_or_empty_value() {
        let (base, seen) = api().await;
        let mut cfg = Config::default();
        cfg.tools.insert(
            "get_order".into(),
            tool("GET", format!("{base}/api/orders/{{order_id}}/status")),
        );
        let tools = HttpTools::wrap(&cfg, Clock::system(), Arc::new(Others)).unwrap();
        for (id, why) in [("..", "a dot segment"), (".", "a dot segment"), ("", "empty")] {
            let args = json!({ "order_id": id }).to_string();
            let e = tools.call("get_order", &args, 1, 0).await.unwrap_err();
            assert_eq!(e.kind, ErrorKind::BadRequest, "{id:?}");
            assert!(
                e.message.contains(&format!("argument `order_id` is {why}")),
                "{}",
                e.message
            );
        }
        // What looks like a path is one escaped segment.
        tools
            .call("get_order", r#"{"order_id":"../../admin"}"#, 2, 0)
            .await
            .unwrap();
        assert_eq!(
            *seen.lock(),
            [("GET".into(), "/api/orders/..%2F..%2Fadmin/status".into(), String::new())],
            "only the escaped call reached the API"
        );
        let scope = Scope::of(&Template::parse("http://h:9/api/v1/x/{id}?a=1", "{").unwrap()).unwrap();
        assert_eq!(scope.path, "/api/v1/x/");
        assert!(scope.holds(&reqwest::Url::parse("http://h:9/api/v1/x/7").unwrap()));
        assert!(!scope.holds(&reqwest::Url::parse("http://h:9/api/v1/7").unwrap()));
        assert!(!scope.holds(&reqwest::Url::parse("http://evil:9/api/v1/x/7").unwrap()));
        assert!(Scope::of(&Template::parse("http://{host}/x", "{").unwrap()).is_none());
    }
}
