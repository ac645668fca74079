//! The floor for `gateway_overhead`: a forwarding proxy with no resilience
//! at all (axum in, reqwest out, one current-thread runtime, streamed
//! answers passed through chunk by chunk). What it costs on a machine is
//! what any Rust proxy of this shape costs there; fusebox's own work is the
//! difference.
//!
//! Run by the harness (`gateway_overhead --bare target/dist/examples/bare_proxy`)
//! with the same arguments as the gateway: `--listen ADDR --config FILE`,
//! where the first `base_url = "…"` line of FILE names the upstream.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::serve::ListenerExt;

#[derive(Clone)]
struct Upstream {
    http: reqwest::Client,
    url: reqwest::Url,
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
    out.body(Body::from_stream(resp.bytes_stream())).unwrap_or_default()
}

fn arg(args: &[String], name: &str) -> anyhow::Result<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("usage: bare_proxy --listen ADDR --config FILE (missing {name})"))
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
