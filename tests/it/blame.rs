//! Blame the right party: what a caller asked for (a tight deadline, a
//! long prompt, a reasoning model's thinking, a long answer) is never
//! counted as the provider's failure, so no caller opens a breaker that
//! every tenant shares; and the table in `docs/blame.md` is the code's.

use crate::common::{runner, Scripted, Step};
use fusebox::blame::{Ending, Party};
use fusebox::clock::Clock;
use fusebox::config::Config;
use fusebox::outcome::Level;
use fusebox::provider::stream::{Live, Opened, Piece, PieceStream};
use fusebox::provider::{LlmRequest, LlmResponse, Provider, ProviderError};
use fusebox::resilience::breaker::BreakerState;
use fusebox::runner::chat::{ChatEnd, ChatRequest};
use fusebox::runner::stream::{StreamHead, StreamSink};
use fusebox::runner::Runner;
use fusebox::target::Target;
use fusebox::wire::reply::{Finish, Usage};
use fusebox::wire::{Api, Delta, Message, Params, Role};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// The breaker state and failures counted of `target`.
fn health(r: &Runner, target: Target) -> (BreakerState, u64) {
    let t = r.catalog().registry().find(&target).expect("target");
    (t.breaker.state(), t.stats.view().failed)
}

/// Every model's provider is `p`; budgets far above what long prompts use.
fn over(p: Arc<dyn Provider>) -> Arc<Runner> {
    let mut cfg = Config::default();
    let b = &mut cfg.budgets;
    (b.user_tokens_per_minute, b.user_tokens_per_hour, b.user_tokens_per_day) = (1 << 40, 1 << 40, 1 << 40);
    (b.global_tokens_per_hour, b.global_tokens_per_day) = (1 << 40, 1 << 40);
    (
        b.user_cost_per_day_usd,
        b.global_cost_per_hour_usd,
        b.global_cost_per_day_usd,
    ) = (1e12, 1e12, 1e12);
    runner(
        cfg,
        ["openai", "anthropic", "deepseek"]
            .into_iter()
            .map(|n| (n, p.clone()))
            .collect(),
        None,
    )
}

fn request(id: u64, user: &str) -> ChatRequest {
    ChatRequest {
        user: user.into(),
        ..crate::common::chat_request(id)
    }
}

#[tokio::test(start_paused = true)]
async fn a_callers_deadline_opens_no_breaker_and_is_told_as_its_own() {
    // Every model answers in 300 ms; the caller gives it 60.
    let slow = Step::Ok {
        delay_ms: 300,
        output: 10,
        tool_calls: Vec::new(),
    };
    let p = Scripted::new(vec![], slow);
    let r = over(p.clone());
    for id in 0..12 {
        let chat = r
            .chat(
                ChatRequest {
                    deadline_ms: Some(60),
                    ..request(id, "hasty")
                },
                None,
            )
            .await;
        match &chat.end {
            ChatEnd::Deadline { reason } => {
                assert!(
                    reason.contains("60 ms") && reason.contains("x-fusebox-deadline-ms"),
                    "{reason}"
                );
            }
            end => panic!("request {id} ended {end:?}, not at its deadline"),
        }
        assert_eq!(chat.outcome.level, Level::Failed);
        assert!(
            chat.outcome.path()[0].starts_with("gpt-4o ✗deadline"),
            "{:?}",
            chat.outcome.path()
        );
    }
    assert_eq!(health(&r, Target::provider("openai")), (BreakerState::Closed, 0));
    assert_eq!(health(&r, Target::model("gpt-4o")), (BreakerState::Closed, 0));
    // A patient caller is answered by the first model, as ever.
    let chat = r.chat(request(99, "patient"), None).await;
    assert_eq!(chat.outcome.level, Level::None, "{:?}", chat.end);
    assert_eq!(chat.outcome.path(), vec!["gpt-4o ✓".to_string()]);
}

/// A provider that streams `pieces` pieces of text `gap` apart, after a
/// first token that takes `ttft` and `per_1k` for each thousand tokens of
/// prompt (`reasoning` more when the caller asked it to reason).
pub(crate) struct Paced {
    ttft: Duration,
    per_1k: Duration,
    reasoning: Duration,
    pieces: u32,
    gap: Duration,
    opened: AtomicU32,
}

impl Paced {
    pub(crate) fn new(ttft_ms: u64, pieces: u32, gap_ms: u64) -> Self {
        Self {
            ttft: Duration::from_millis(ttft_ms),
            per_1k: Duration::ZERO,
            reasoning: Duration::ZERO,
            pieces,
            gap: Duration::from_millis(gap_ms),
            opened: AtomicU32::new(0),
        }
    }
}

/// The rest of a [`Paced`] stream.
struct Rest {
    left: u32,
    gap: Duration,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
    ended: bool,
}

fn words() -> Piece {
    Piece::said(Delta::Text("some more words ".into()))
}

impl PieceStream for Rest {
    fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Piece, ProviderError>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if self.left == 0 {
            self.ended = true;
            let end = [Delta::Finish(Finish::Stop), Delta::Usage(Usage::default()), Delta::Done];
            return Poll::Ready(Some(Ok(Piece {
                raw: Default::default(),
                deltas: end.into_iter().collect(),
            })));
        }
        let gap = self.gap;
        let wait = self.wait.get_or_insert_with(|| Box::pin(tokio::time::sleep(gap)));
        if wait.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.wait = None;
        self.left -= 1;
        Poll::Ready(Some(Ok(words())))
    }
}

#[async_trait::async_trait]
impl Provider for Paced {
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        self.open(req).await?.whole().await
    }

    async fn open(&self, req: &LlmRequest) -> Result<Opened, ProviderError> {
        let started = tokio::time::Instant::now();
        let prompt = req.prompt_chars() as u32 / 4;
        let mut ttft = self.ttft + self.per_1k * prompt / 1000;
        if req.params.reasoning_effort.is_some() {
            ttft += self.reasoning;
        }
        tokio::time::sleep(ttft).await;
        self.opened.fetch_add(1, Ordering::SeqCst);
        Ok(Opened::Live(Live {
            kind: Api::Chat,
            rate: Default::default(),
            head: vec![words()],
            rest: Box::new(Rest {
                left: self.pieces,
                gap: self.gap,
                wait: None,
                ended: false,
            }),
            started,
            clock: Clock::system(),
            prompt_chars: req.prompt_chars(),
            skipped: Arc::default(),
        }))
    }
}

/// A streaming client that reads all it is sent.
#[derive(Default)]
pub(crate) struct Reader {
    pub(crate) head: Option<StreamHead>,
}

impl StreamSink for Reader {
    fn start(&mut self, head: StreamHead) {
        self.head = Some(head);
    }
    fn piece(&mut self, _: Api, _: &Piece, _: bool) {}
}

/// Runs `reqs` streamed at once; the model that began each answer.
async fn stream_all(r: &Arc<Runner>, reqs: Vec<ChatRequest>) -> Vec<(Level, String)> {
    let calls = reqs.into_iter().map(|req| {
        let r = r.clone();
        tokio::spawn(async move {
            let mut sink = Reader::default();
            let chat = r.chat(ChatRequest { stream: true, ..req }, Some(&mut sink)).await;
            let model = sink.head.map(|h| h.model).unwrap_or_default();
            (chat.outcome.level, model)
        })
    });
    let mut out = Vec::new();
    for c in calls {
        out.push(c.await.unwrap());
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_long_prompt_and_a_reasoning_ask_are_given_the_time_they_ask_for() {
    // 2 s to the first token, 0.2 s more per thousand tokens of prompt,
    // and 25 s of thinking when asked to reason; the model's first token
    // limit is the default 15 s, its provider's timeout 30 s.
    let p = Arc::new(Paced {
        per_1k: Duration::from_millis(200),
        reasoning: Duration::from_secs(25),
        ..Paced::new(2_000, 20, 50)
    });
    let r = over(p.clone());
    let long = "a long document to read ".repeat(16_000); // 96k tokens: 21 s
    let mut reqs: Vec<ChatRequest> = (0..6)
        .map(|id| ChatRequest {
            messages: vec![Message::new(Role::User, long.as_str())].into(),
            ..request(id, "reader")
        })
        .collect();
    reqs.extend((6..12).map(|id| ChatRequest {
        params: Arc::new(Params {
            reasoning_effort: Some("high".into()),
            ..Params::default()
        }),
        ..request(id, "thinker")
    }));
    for (level, model) in stream_all(&r, reqs).await {
        assert_eq!((level, model.as_str()), (Level::None, "gpt-4o"));
    }
    assert_eq!(p.opened.load(Ordering::SeqCst), 12, "no call given up");
    assert_eq!(health(&r, Target::provider("openai")), (BreakerState::Closed, 0));
    assert_eq!(health(&r, Target::model("gpt-4o")), (BreakerState::Closed, 0));
}

#[tokio::test(start_paused = true)]
async fn a_streams_length_is_not_its_slowness() {
    // Twelve answers of 40 s each (first token in half a second, then a
    // piece every 200 ms), against `slow_call_ms` of 30 s.
    let p = Arc::new(Paced::new(500, 200, 200));
    let r = over(p.clone());
    let reqs = (0..12).map(|id| request(id, "storyteller")).collect();
    let start = tokio::time::Instant::now();
    for (level, model) in stream_all(&r, reqs).await {
        assert_eq!((level, model.as_str()), (Level::None, "gpt-4o"));
    }
    assert!(start.elapsed() >= Duration::from_secs(40));
    for t in [Target::provider("openai"), Target::model("gpt-4o")] {
        let e = r.catalog().registry().find(&t).unwrap();
        assert_eq!(e.breaker.state(), BreakerState::Closed, "{t}");
        assert_eq!(e.breaker.view(tokio::time::Instant::now()).slow_rate, 0.0, "{t}");
    }
    // The next caller is answered by the first model.
    let next = stream_all(&r, vec![request(99, "next")]).await;
    assert_eq!(next, vec![(Level::None, "gpt-4o".to_string())]);
}

/// The rows of the table in `docs/blame.md`: ending, party, and what it
/// feeds (breaker, limit, health).
fn table() -> Vec<(String, String, [bool; 3])> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/blame.md")).unwrap();
    doc.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let yes = |c: &str| match c {
                "yes" => true,
                "no" => false,
                other => panic!("`{other}` in {l}: write yes or no"),
            };
            (
                cells[0].trim_matches('`').to_string(),
                cells[1].to_string(),
                [yes(cells[3]), yes(cells[4]), yes(cells[5])],
            )
        })
        .collect()
}

#[test]
fn the_blame_table_is_the_code() {
    let rows = table();
    assert_eq!(rows.len(), Ending::ALL.len(), "one row per ending: {rows:?}");
    for (row, e) in rows.iter().zip(Ending::ALL) {
        let f = e.feeds();
        assert_eq!(
            (row.0.as_str(), row.1.as_str(), row.2),
            (e.as_str(), e.party().as_str(), [f.breaker, f.limit, f.health]),
            "docs/blame.md"
        );
    }
    assert!(Ending::ALL.iter().any(|e| e.party() == Party::Fusebox));
}

#[tokio::test]
async fn a_gateway_caller_past_its_deadline_is_answered_504_naming_it() {
    use fusebox::provider::fault::{Fault, FaultSpec};
    let f = crate::gateway::gateway(Config::default(), Default::default()).await;
    for p in ["openai", "anthropic", "deepseek"] {
        f.faults
            .set(&Target::provider(p), FaultSpec::always(Fault::Latency { ms: 300 }));
    }
    for _ in 0..6 {
        let r = f
            .http
            .post(format!("{}/v1/chat/completions", f.base))
            .header("x-fusebox-deadline-ms", "60")
            .json(&crate::gateway::ask("default", "hasty"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 504);
        let v: serde_json::Value = r.json().await.unwrap();
        let said = v["error"]["message"].as_str().unwrap_or_default();
        assert!(said.contains("deadline of 60 ms (x-fusebox-deadline-ms)"), "{v}");
    }
    assert_eq!(health(&f.runner, Target::provider("openai")), (BreakerState::Closed, 0));
}

/// A provider fusebox has no descriptor for: every call refused before it.
struct NoDescriptor(AtomicU32);

#[async_trait::async_trait]
impl Provider for NoDescriptor {
    async fn complete(&self, _req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(ProviderError::new(
            fusebox::provider::ErrorKind::Local,
            None,
            "fusebox has no file descriptor left for the call",
        ))
    }
}

#[tokio::test(start_paused = true)]
async fn fuseboxs_own_shortage_is_refused_as_its_own_and_tries_no_other_model() {
    let p = Arc::new(NoDescriptor(AtomicU32::new(0)));
    let r = over(p.clone());
    for id in 0..12 {
        let chat = r.chat(request(id, "anyone"), None).await;
        match &chat.end {
            ChatEnd::Unavailable { message } => assert!(message.contains("file descriptors"), "{message}"),
            end => panic!("{end:?}"),
        }
        assert_eq!(chat.outcome.path(), vec!["gpt-4o ✗no descriptors".to_string()]);
    }
    assert_eq!(
        p.0.load(Ordering::SeqCst),
        12,
        "one attempt a request, no retry, no other model"
    );
    assert_eq!(health(&r, Target::provider("openai")), (BreakerState::Closed, 0));
    assert_eq!(health(&r, Target::model("gpt-4o")), (BreakerState::Closed, 0));
}
