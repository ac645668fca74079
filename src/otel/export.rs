//! The exporter thread: events in, spans assembled, sent in batches over
//! OTLP/HTTP. It runs on a runtime of its own with the real clock, so a
//! run on virtual time (demo, replay) neither waits for it nor times its
//! requests out early.

use super::spans::SpanAssembler;
use super::Parents;
use crate::telemetry::events::Event;
use anyhow::{Context, Result};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Spans per OTLP request.
const BATCH: usize = 512;
/// Spans waiting to be sent; past this, new ones are dropped.
const QUEUE: usize = 8_192;
/// How long a batch may wait for more spans.
const EVERY: Duration = Duration::from_millis(500);
/// How long one export may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// How long the last spans may take to leave at exit.
const AT_EXIT: Duration = Duration::from_secs(5);

/// Sends spans to one collector.
pub(super) struct Exporter {
    exporter: opentelemetry_otlp::SpanExporter,
    dropped: Arc<AtomicU64>,
    sent: Arc<AtomicU64>,
    endpoint: String,
}

impl Exporter {
    /// An exporter to `endpoint` (an OTLP/HTTP traces URL), counting what
    /// it cannot send in `dropped` and what it sent in `sent`.
    /// The resource names the run's `seed`, for a replay of what it sent.
    pub(super) fn new(endpoint: &str, seed: u64, dropped: Arc<AtomicU64>, sent: Arc<AtomicU64>) -> Result<Self> {
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint)
            .with_timeout(TIMEOUT)
            .build()
            .with_context(|| format!("cannot export traces to {endpoint}"))?;
        exporter.set_resource(&resource(seed));
        Ok(Exporter {
            exporter,
            dropped,
            sent,
            endpoint: endpoint.to_string(),
        })
    }

    /// Assembles and sends spans until the event bus closes, then sends
    /// what is left (for at most [`AT_EXIT`]).
    pub(super) fn run(self, events: mpsc::Receiver<Event>, assembler: SpanAssembler, parents: Parents) {
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                tracing::error!(error = %e, "cannot start the trace exporter; no traces are sent");
                return;
            }
        };
        rt.block_on(self.pump(events, assembler, parents));
    }

    async fn pump(self, mut events: mpsc::Receiver<Event>, mut assembler: SpanAssembler, parents: Parents) {
        let (tx, rx) = mpsc::channel::<SpanData>(QUEUE);
        let dropped = self.dropped.clone();
        let sender = tokio::spawn(self.send(rx));
        let mut made = Vec::new();
        while let Some(ev) = events.recv().await {
            let mut lost = assembler.take(ev, |id| parents.take(id), &mut made);
            for span in made.drain(..) {
                if tx.try_send(span).is_err() {
                    lost += 1;
                }
            }
            if lost > 0 {
                dropped.fetch_add(lost, Ordering::Relaxed);
            }
        }
        drop(tx);
        if tokio::time::timeout(AT_EXIT, sender).await.is_err() {
            tracing::warn!("gave up sending the last spans after {AT_EXIT:?}");
        }
    }

    /// Sends queued spans in batches of up to [`BATCH`], at least every
    /// [`EVERY`] while any wait.
    async fn send(self, mut rx: mpsc::Receiver<SpanData>) {
        let mut batch = Vec::with_capacity(BATCH);
        let mut warned: Option<Instant> = None;
        loop {
            let first = match rx.recv().await {
                Some(s) => s,
                None => break,
            };
            batch.push(first);
            let deadline = tokio::time::Instant::now() + EVERY;
            while batch.len() < BATCH {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some(s)) => batch.push(s),
                    Ok(None) | Err(_) => break,
                }
            }
            let n = batch.len() as u64;
            let result = self.exporter.export(std::mem::take(&mut batch)).await;
            if result.is_ok() {
                self.sent.fetch_add(n, Ordering::Relaxed);
            }
            if let Err(e) = result {
                self.dropped.fetch_add(n, Ordering::Relaxed);
                // Said once a minute at most: a collector down says so at every batch.
                if warned.is_none_or(|w| w.elapsed() > Duration::from_secs(60)) {
                    tracing::warn!(endpoint = %self.endpoint, error = %e, spans = n, "cannot export spans; dropped");
                    warned = Some(Instant::now());
                }
            }
        }
    }
}

/// The resource spans are from: `OTEL_SERVICE_NAME` and
/// `OTEL_RESOURCE_ATTRIBUTES` as set, else service `fusebox`.
fn resource(seed: u64) -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let b = Resource::builder()
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_attribute(opentelemetry::KeyValue::new("fusebox.seed", seed as i64));
    if named {
        b.build()
    } else {
        b.with_service_name("fusebox").build()
    }
}
