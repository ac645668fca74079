//! A loopback OTLP/HTTP traces receiver that decodes what it is sent and
//! counts it: somewhere to point `--otlp-endpoint` without a collector,
//! and the receiver `fusebox bench --otlp-endpoint` is measured against.
//!
//! `otlp_sink [ADDR]` (default 127.0.0.1:4318) says its URL on stderr,
//! then a line a second with the spans received so far.

use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use prost::Message;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:4318".into());
    let spans = Arc::new(AtomicU64::new(0));
    let counted = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: bytes::Bytes| {
            let counted = counted.clone();
            async move {
                match ExportTraceServiceRequest::decode(body) {
                    Ok(req) => {
                        let n: usize = req
                            .resource_spans
                            .iter()
                            .flat_map(|r| &r.scope_spans)
                            .map(|s| s.spans.len())
                            .sum();
                        counted.fetch_add(n as u64, Ordering::Relaxed);
                        (
                            http::StatusCode::OK,
                            [("content-type", "application/x-protobuf")],
                            ExportTraceServiceResponse::default().encode_to_vec(),
                        )
                    }
                    Err(e) => (
                        http::StatusCode::BAD_REQUEST,
                        [("content-type", "text/plain")],
                        format!("not OTLP protobuf: {e}").into_bytes(),
                    ),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("otlp_sink: http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        let mut last = 0;
        loop {
            tick.tick().await;
            let n = spans.load(Ordering::Relaxed);
            if n != last {
                eprintln!("otlp_sink: {n} spans");
                last = n;
            }
        }
    });
    axum::serve(listener, app).await
}
