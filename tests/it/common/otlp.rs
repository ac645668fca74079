//! An OTLP/HTTP traces receiver on loopback, decoding what it is sent with
//! the `opentelemetry-proto` types, as a collector would.

use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::sync::{Arc, Mutex};

/// A receiver running on a thread of its own.
pub struct Receiver {
    /// Its base URL (`http://127.0.0.1:PORT`), as `--otlp-endpoint` takes it.
    pub url: String,
    got: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
}

impl Receiver {
    /// Starts one on a free port.
    pub fn start() -> Self {
        let got = Arc::new(Mutex::new(Vec::new()));
        let kept = got.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(listener.local_addr().unwrap()).unwrap();
                let app = axum::Router::new().route(
                    "/v1/traces",
                    axum::routing::post(move |headers: http::HeaderMap, body: bytes::Bytes| {
                        let kept = kept.clone();
                        async move {
                            assert_eq!(headers["content-type"], "application/x-protobuf");
                            let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                            kept.lock().unwrap().push(req);
                            (
                                [("content-type", "application/x-protobuf")],
                                ExportTraceServiceResponse::default().encode_to_vec(),
                            )
                        }
                    }),
                );
                axum::serve(listener, app).await.unwrap();
            });
        });
        let addr = rx.recv().unwrap();
        Receiver {
            url: format!("http://{addr}"),
            got,
        }
    }

    /// Every export request received so far.
    pub fn requests(&self) -> Vec<ExportTraceServiceRequest> {
        self.got.lock().unwrap().clone()
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.requests()
            .into_iter()
            .flat_map(|r| r.resource_spans)
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans)
            .collect()
    }

    /// Waits (in real time, for a child process) until `done` holds of the spans.
    pub fn wait_for(&self, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let spans = self.spans();
            if done(&spans) || std::time::Instant::now() > deadline {
                return spans;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

/// An attribute's value as text (a string, or a number or bool written out).
pub fn attr(kv: &[KeyValue], key: &str) -> Option<String> {
    let v = kv.iter().find(|k| k.key == key)?.value.as_ref()?.value.as_ref()?;
    Some(match v {
        any_value::Value::StringValue(s) => s.clone(),
        any_value::Value::IntValue(i) => i.to_string(),
        any_value::Value::DoubleValue(d) => d.to_string(),
        any_value::Value::BoolValue(b) => b.to_string(),
        any_value::Value::ArrayValue(a) => a
            .values
            .iter()
            .filter_map(|v| match &v.value {
                Some(any_value::Value::StringValue(s)) => Some(s.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(","),
        other => format!("{other:?}"),
    })
}
