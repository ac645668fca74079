//! A streamed answer's client that stops reading loses its call after the
//! stall time (its upstream stream, limiter slot and reservations freed,
//! its outcome counted once), while a slow upstream read by a patient
//! client is never cut for it. On a paused clock, over real sockets.

use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::gateway::GatewayOptions;
use fusebox::provider::stream::{Live, Opened, Piece, PieceStream};
use fusebox::provider::{LlmRequest, LlmResponse, Provider, ProviderError};
use fusebox::runner::{Runner, RunnerParts};
use fusebox::wire::reply::{Finish, Usage};
use fusebox::wire::{Api, Delta};
use serde_json::json;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// A provider whose streams send `words` pieces of text (`None`: without
/// end), `gap` apart; counts the streams it opened and those dropped.
struct Words {
    words: Option<u32>,
    gap: Duration,
    opened: AtomicU32,
    dropped: Arc<AtomicU32>,
}

impl Words {
    fn new(words: Option<u32>, gap: Duration) -> Arc<Self> {
        Arc::new(Self {
            words,
            gap,
            opened: AtomicU32::new(0),
            dropped: Arc::default(),
        })
    }
}

struct Stream {
    left: Option<u32>,
    gap: Duration,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    yielded: bool,
    dropped: Arc<AtomicU32>,
}

fn piece() -> Piece {
    Piece::said(Delta::Text("word ".repeat(200)))
}

impl PieceStream for Stream {
    fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Piece, ProviderError>>> {
        match self.left {
            // The end: its finish, usage and terminator, then no more.
            Some(0) => {
                self.left = None;
                self.gap = Duration::MAX;
                let end = [Delta::Finish(Finish::Stop), Delta::Usage(Usage::default()), Delta::Done];
                return Poll::Ready(Some(Ok(Piece {
                    raw: Default::default(),
                    deltas: end.into_iter().collect(),
                })));
            }
            None if self.gap == Duration::MAX => return Poll::Ready(None),
            _ => {}
        }
        // Each piece comes `gap` after the last; with none, after a yield,
        // as a socket's read would.
        let gap = self.gap;
        let wait = self.wait.get_or_insert_with(|| Box::pin(tokio::time::sleep(gap)));
        if gap.is_zero() && !self.yielded {
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        if !gap.is_zero() && wait.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.yielded = false;
        self.wait = None;
        self.left = self.left.map(|n| n - 1);
        Poll::Ready(Some(Ok(piece())))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Provider for Words {
    async fn complete(&self, _req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        unreachable!("every call is streamed")
    }

    async fn open(&self, _req: &LlmRequest) -> Result<Opened, ProviderError> {
        self.opened.fetch_add(1, Ordering::SeqCst);
        Ok(Opened::Live(Live {
            kind: Api::Chat,
            rate: Default::default(),
            head: vec![piece()],
            rest: Box::new(Stream {
                left: self.words,
                gap: self.gap,
                wait: None,
                yielded: false,
                dropped: self.dropped.clone(),
            }),
            started: tokio::time::Instant::now(),
            clock: Clock::system(),
            prompt_chars: 20,
            skipped: Arc::default(),
        }))
    }
}

/// A gateway whose every provider is `words`; its address and runner.
async fn gateway(words: Arc<Words>) -> (String, Arc<Runner>) {
    let mut parts = RunnerParts::mock(Clock::system(), Seed(9));
    let mut cfg = Config::default();
    // Budgets far above what a stream that fills the sockets uses.
    cfg.budgets.user_tokens_per_minute = 1 << 40;
    cfg.budgets.user_tokens_per_hour = 1 << 40;
    cfg.budgets.user_tokens_per_day = 1 << 40;
    cfg.budgets.user_cost_per_day_usd = 1e12;
    cfg.budgets.global_tokens_per_hour = 1 << 40;
    cfg.budgets.global_tokens_per_day = 1 << 40;
    cfg.budgets.global_cost_per_hour_usd = 1e12;
    cfg.budgets.global_cost_per_day_usd = 1e12;
    parts.providers = cfg
        .providers
        .keys()
        .map(|n| (n.clone(), words.clone() as Arc<dyn Provider>))
        .collect();
    let runner = Runner::new(cfg, parts).unwrap();
    let addr = fusebox::gateway::spawn(runner.clone(), "127.0.0.1:0", GatewayOptions::default())
        .await
        .unwrap()
        .addr;
    (format!("http://{addr}"), runner)
}

/// A streamed chat call to the gateway at `base`, its head read.
async fn ask(base: &str) -> reqwest::Response {
    let body = json!({"model": "default", "stream": true, "max_tokens": 1000000, "user": "reader",
                      "messages": [{"role": "user", "content": "Tell me everything."}]});
    let url = format!("{base}/v1/chat/completions");
    reqwest::Client::new().post(url).json(&body).send().await.unwrap()
}

async fn stalled(base: &str) -> String {
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let line = metrics
        .lines()
        .find(|l| l.starts_with("fusebox_streams_stalled_total "));
    line.unwrap_or("no fusebox_streams_stalled_total").to_string()
}

#[tokio::test(start_paused = true)]
async fn a_client_that_stops_reading_its_stream_loses_the_call() {
    let words = Words::new(None, Duration::ZERO);
    let (base, runner) = gateway(words.clone()).await;
    let resp = ask(&base).await;
    assert_eq!(resp.status(), 200);
    // The client holds its connection and reads nothing: the sockets fill,
    // the call waits to run; a minute on, it is dropped.
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert_eq!(words.dropped.load(Ordering::SeqCst), 0, "not before the stall time");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(words.dropped.load(Ordering::SeqCst), 1, "the upstream stream is closed");
    assert_eq!(runner.totals().abandoned.load(Ordering::Relaxed), 1);
    let openai = &runner.catalog().providers()[0];
    let now = tokio::time::Instant::now();
    assert_eq!(openai.limiter.view(now).concurrency.0, 0, "its slot is free");
    assert_eq!(stalled(&base).await, "fusebox_streams_stalled_total 1");
    drop(resp);
}

#[tokio::test(start_paused = true)]
async fn a_slow_upstream_read_by_its_client_is_not_a_stall() {
    let words = Words::new(Some(3), Duration::from_secs(100));
    let (base, runner) = gateway(words.clone()).await;
    let resp = ask(&base).await;
    let text = resp.text().await.unwrap();
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "{}",
        &text[text.len().saturating_sub(200)..]
    );
    assert_eq!(text.matches("word ").count(), 4 * 200, "the head and three pieces");
    assert_eq!(runner.totals().abandoned.load(Ordering::Relaxed), 0);
    assert_eq!(stalled(&base).await, "fusebox_streams_stalled_total 0");
    assert_eq!(words.opened.load(Ordering::SeqCst), 1);
}

/// An OpenAI-compatible upstream whose every answer streams `events`
/// events of 16 KiB of text each, as fast as its client takes them;
/// counts the events it has sent.
async fn firehose(events: usize) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use axum::response::IntoResponse;
    use futures_util::StreamExt as _;
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let text = "lorem ".repeat(16 * 1024 / 6);
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        let v = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        bytes::Bytes::from(format!("data: {v}\n\n"))
    };
    let event = chunk(json!({"content": text}), serde_json::Value::Null);
    let end = bytes::Bytes::from(format!(
        "{}data: [DONE]\n\n",
        String::from_utf8_lossy(&chunk(json!({}), json!("stop")))
    ));
    let counter = sent.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            let (event, end, counter) = (event.clone(), end.clone(), counter.clone());
            async move {
                let body = futures_util::stream::iter(0..=events).map(move |i| {
                    counter.fetch_add(1, Ordering::Relaxed);
                    Ok::<_, std::io::Error>(if i < events { event.clone() } else { end.clone() })
                });
                (
                    [("content-type", "text/event-stream")],
                    axum::body::Body::from_stream(body),
                )
                    .into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), sent)
}

#[tokio::test]
async fn clients_that_stop_reading_large_answers_cost_the_gateway_a_bounded_backlog() {
    use tokio::io::AsyncWriteExt;
    // Answers of 9 MiB each.
    let (upstream, sent) = firehose(576).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fusebox.toml");
    let cfg = format!(
        "[providers.openai]\nkind = \"openai-compatible\"\nbase_url = \"{upstream}\"\napi_key_env = \"UP_KEY\"\n\
         [models.gpt-4o]\nprovider = \"openai\"\ninput_per_m = 2.5\noutput_per_m = 10.0\n\
         [routes.default]\nchain = [\"gpt-4o\"]\n\
         [budgets]\nuser_tokens_per_minute = 1000000000000\nuser_tokens_per_hour = 1000000000000\n\
         user_tokens_per_day = 1000000000000\nglobal_tokens_per_hour = 1000000000000\nglobal_tokens_per_day = 1000000000000\n"
    );
    std::fs::write(&path, cfg).unwrap();
    let config = path.display().to_string();
    let serve = tokio::task::spawn_blocking(move || {
        crate::common::Serve::start_with_env(&["--config", &config], &[("UP_KEY", "sk-test")])
    })
    .await
    .unwrap();
    let before = serve.rss_kb();
    // 100 clients ask for a streamed answer and read none of it.
    let addr = serve.base.trim_start_matches("http://").to_string();
    let body = json!({"model": "default", "stream": true, "user": "reader",
                      "messages": [{"role": "user", "content": "Tell me everything."}]})
    .to_string();
    let mut clients = Vec::new();
    for _ in 0..100 {
        let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        clients.push(tcp);
    }
    // Until the upstream sends no more: every socket between is full.
    let mut last = usize::MAX;
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = sent.load(Ordering::Relaxed);
        if now == last && now > 100 {
            break;
        }
        last = now;
    }
    let grew_mb = serve.rss_kb().saturating_sub(before) / 1024;
    let sent_mb = sent.load(Ordering::Relaxed) * 16 / 1024;
    println!("100 stalled streams: the gateway grew {grew_mb} MiB while the upstream sent {sent_mb} MiB");
    assert!(sent_mb < 100 * 9, "the upstream stopped before the answers' ends");
    // What each may hold (docs/limits.md): 64 KiB unsent, a 128 KiB write
    // buffer, twice 128 KiB of text, the upstream connection's read
    // buffer; under 2 MiB with the allocator's slack (each used to keep
    // its whole 9 MiB answer, twice).
    assert!(grew_mb <= 200, "{grew_mb} MiB for 100 stalled streams");
    drop(clients);
}
