//! The floor for `gateway_overhead`: a forwarding proxy with no resilience
//! at all (axum in, reqwest out, one current-thread runtime, streamed
//! answers passed through chunk by chunk). What it costs on a machine is
//! what any Rust proxy of this shape costs there; fusebox's own work is the
//! difference.
//!
//! With `--parse` it is the parsing floor instead: the least any gateway
//! that reads what models answer must do. It parses each SSE event of a
//! streamed answer as JSON (a whole answer's body once) and counts its
//! usage, then passes the bytes on as they came.
//!
//! Run by the harness (`gateway_overhead --bare target/dist/examples/bare_proxy`,
//! `--parsing` for the second floor) with the same arguments as the
//! gateway: `--listen ADDR --config FILE [--parse]`, where the first
//! `base_url = "…"` line of FILE names the upstream.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use futures_util::StreamExt;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Clone)]
struct Upstream {
    http: reqwest::Client,
    url: reqwest::Url,
    /// Read what the model answers (the parsing floor).
    parse: bool,
}

/// Tokens the answers said they used, so the parsing is not optimised away.
static TOKENS: AtomicU64 = AtomicU64::new(0);

/// What the parsing floor reads of an answer or a streamed chunk; the rest
/// is parsed and skipped.
#[derive(serde::Deserialize)]
struct Answer {
    usage: Option<Usage>,
}

#[derive(serde::Deserialize)]
struct Usage {
    total_tokens: u64,
}

/// Reads an answer (whole, or one SSE event's data) and counts its usage.
fn count(json: &[u8]) {
    if let Ok(Answer { usage: Some(u) }) = serde_json::from_slice(json) {
        TOKENS.fetch_add(u.total_tokens, Ordering::Relaxed);
    }
}

/// A stream's events as they come: each complete one read, the rest of a
/// chunk kept for the next.
#[derive(Default)]
struct Events {
    partial: Vec<u8>,
}

impl Events {
    fn feed(&mut self, chunk: &[u8]) {
        if self.partial.is_empty() {
            let rest = Self::read(chunk);
            self.partial.extend_from_slice(rest);
        } else {
            self.partial.extend_from_slice(chunk);
            let done = self.partial.len() - Self::read(&self.partial).len();
            self.partial.drain(..done);
        }
    }

    /// Reads every complete event of `bytes`; what follows the last.
    fn read(mut bytes: &[u8]) -> &[u8] {
        while let Some(end) = memchr::memmem::find(bytes, b"\n\n") {
            for line in bytes[..end].split(|&b| b == b'\n') {
                if let Some(data) = line.strip_prefix(b"data:").map(<[u8]>::trim_ascii_start) {
                    if data != b"[DONE]" {
                        count(data);
                    }
                }
            }
            bytes = &bytes[end + 2..];
        }
        bytes
    }
}

async fn chat(State(up): State<Upstream>, headers: HeaderMap, body: Bytes) -> Response {
    let mut req = up.http.post(up.url.clone()).body(body);
    for name in [header::AUTHORIZATION, header::CONTENT_TYPE] {
        if let Some(v) = headers.get(&name) {
            req = req.header(name, v);
        }
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            return Response::builder()
                .status(StatusCode::BAD_GATEWAY)
                .body(Body::from(e.to_string()))
                .unwrap_or_default();
        }
    };
    let mut out = Response::builder()
        .status(resp.status())
        // What the harness requires of a gateway answer.
        .header("x-fusebox-level", HeaderValue::from_static("none"));
    if let Some(ct) = resp.headers().get(header::CONTENT_TYPE) {
        out = out.header(header::CONTENT_TYPE, ct);
    }
    if !up.parse {
        return out.body(Body::from_stream(resp.bytes_stream())).unwrap_or_default();
    }
    let sse = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    if !sse {
        let body = resp.bytes().await.unwrap_or_default();
        count(&body);
        return out.body(Body::from(body)).unwrap_or_default();
    }
    let mut events = Events::default();
    let stream = resp.bytes_stream().inspect(move |chunk| {
        if let Ok(c) = chunk {
            events.feed(c);
        }
    });
    out.body(Body::from_stream(stream)).unwrap_or_default()
}

fn arg(args: &[String], name: &str) -> anyhow::Result<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("usage: bare_proxy --listen ADDR --config FILE [--parse] (missing {name})"))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let listen = arg(&args, "--listen")?;
    let config = arg(&args, "--config")?;
    let text = std::fs::read_to_string(&config)?;
    let base = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("base_url")?.split('"').nth(1))
        .ok_or_else(|| anyhow::anyhow!("{config}: no base_url = \"…\" line"))?;
    let url = reqwest::Url::parse(&format!("{base}/chat/completions"))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let up = Upstream {
            http: reqwest::Client::new(),
            url,
            parse: args.iter().any(|a| a == "--parse"),
        };
        let app = axum::Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/v1/chat/completions", post(chat))
            .with_state(up);
        // Chunks go out as they come (no Nagle delay), as the gateway's do.
        let listener = tokio::net::TcpListener::bind(&listen).await?.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, app).await?;
        Ok(())
    })
}
