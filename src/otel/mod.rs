//! Traces out: the runner's requests as OpenTelemetry spans, exported over
//! OTLP (HTTP/protobuf) to a collector, continuing a caller's W3C trace.
//!
//! Nothing here is on the decision path. The runner's events reach a thread
//! of its own through a bounded channel that drops (and counts) what does
//! not fit; that thread assembles spans ([`spans`]) and exports them in
//! batches ([`export`]). A slow or absent collector costs spans, counted in
//! [`Totals::spans_dropped`](crate::runner::Totals), never requests.

mod export;
pub mod ids;
pub mod import;
pub mod names;
mod quoted;
mod spans;
mod traceparent;

pub use traceparent::TraceParent;

use crate::runner::Runner;
use anyhow::{Context, Result};
use parking_lot::Mutex;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Events the assembler's channel holds before it drops them.
const EVENTS: usize = 16_384;
/// Callers' spans kept for requests not yet begun (a bound, not a need).
const PARENTS: usize = 65_536;

/// Where traces go: `--otlp-endpoint`, else the standard variables. A
/// base URL gets `/v1/traces` added, as `OTEL_EXPORTER_OTLP_ENDPOINT`
/// does; `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is used as it is. None: no
/// traces.
pub fn endpoint(flag: Option<&str>) -> Option<String> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let base = |url: &str| {
        let url = url.trim().trim_end_matches('/');
        if url.ends_with("/v1/traces") {
            url.to_string()
        } else {
            format!("{url}/v1/traces")
        }
    };
    match flag {
        Some(url) => Some(base(url)),
        None => {
            var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT").map(|u| base(&u)))
        }
    }
}

/// The callers' spans of requests about to run, by request id.
#[derive(Clone)]
pub struct Parents(Arc<Mutex<lru::LruCache<u64, TraceParent>>>);

impl Parents {
    fn new() -> Self {
        Parents(Arc::new(Mutex::new(lru::LruCache::new(
            NonZeroUsize::new(PARENTS).unwrap_or(NonZeroUsize::MIN),
        ))))
    }

    /// Request `id`'s spans continue the caller's trace `parent`.
    pub fn set(&self, id: u64, parent: TraceParent) {
        self.0.lock().put(id, parent);
    }

    fn take(&self, id: u64) -> Option<TraceParent> {
        self.0.lock().pop(&id)
    }
}

/// Traces being exported: the thread that makes and sends them.
pub struct Tracing {
    parents: Parents,
    thread: Option<std::thread::JoinHandle<()>>,
    endpoint: String,
    sent: Arc<AtomicU64>,
}

impl Tracing {
    /// Starts exporting `runner`'s requests as spans to `endpoint` (an
    /// OTLP/HTTP traces URL).
    pub fn start(runner: &Runner, endpoint: &str) -> Result<Self> {
        let http: http::Uri = endpoint
            .parse()
            .with_context(|| format!("--otlp-endpoint {endpoint}: not a URL"))?;
        if !matches!(http.scheme_str(), Some("http" | "https")) || http.host().is_none() {
            anyhow::bail!("--otlp-endpoint {endpoint}: not an http:// or https:// URL (e.g. http://127.0.0.1:4318)");
        }
        let dropped = runner.totals().spans_dropped.clone();
        let events = runner.events().subscribe_lossy(EVENTS, dropped.clone());
        let parents = Parents::new();
        let clock = runner.clock();
        // Ids differ between runs of one seed: the wall clock is part of their seed.
        let rng = fastrand::Rng::with_seed(
            runner.seed().value(0x07e1, clock.wall_origin_ms()) ^ u64::from(std::process::id()),
        );
        let assembler = spans::SpanAssembler::new(names::GenAiNames::of(runner), clock.wall_origin_ms(), rng);
        let sent = Arc::new(AtomicU64::new(0));
        let exporter = export::Exporter::new(endpoint, runner.seed().0, dropped.clone(), sent.clone())?;
        let p = parents.clone();
        let thread = std::thread::Builder::new()
            .name("fusebox-otlp".into())
            .spawn(move || exporter.run(events, assembler, p))
            .context("cannot start the trace exporter thread")?;
        Ok(Tracing {
            parents,
            thread: Some(thread),
            endpoint: endpoint.to_string(),
            sent,
        })
    }

    /// Where the spans go.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// What the gateway tells of callers' spans.
    pub fn parents(&self) -> Parents {
        self.parents.clone()
    }

    /// Waits for the spans still queued to be sent (or given up), once the
    /// runner's event bus is closed; returns how many were sent.
    pub fn finish(mut self) -> u64 {
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the trace exporter thread panicked");
            }
        }
        self.sent.load(Ordering::Relaxed)
    }
}

/// Spans dropped so far by `runner`'s tracing.
pub fn dropped(runner: &Runner) -> u64 {
    runner.totals().spans_dropped.load(Ordering::Relaxed)
}
