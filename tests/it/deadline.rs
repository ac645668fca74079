//! Time bounds on a call, in paused time: a timeout falls over to the next
//! model at once (no retry on a model that is not answering), a
//! request's deadline bounds the whole chain, and a streamed answer whose
//! first token is too slow is given up for the next model.

use crate::common::{runner, Scripted, Step};
use fusebox::config::Config;
use fusebox::outcome::Level;
use fusebox::provider::{Piece, Provider};
use fusebox::runner::chat::{ChatEnd, ChatRequest};
use fusebox::runner::stream::{StreamHead, StreamSink};
use fusebox::runner::Runner;
use fusebox::wire::Api;
use std::sync::Arc;
use std::time::Duration;

/// A model that never answers, and one that answers in 100 ms.
fn silent_primary() -> (Arc<Runner>, Arc<Scripted>, Arc<Scripted>) {
    primary_taking(3_600_000)
}

/// A primary (openai) that answers after `delay_ms`, and a fallback that
/// answers in 100 ms.
fn primary_taking(delay_ms: u64) -> (Arc<Runner>, Arc<Scripted>, Arc<Scripted>) {
    let slow = Step::Ok {
        delay_ms,
        output: 10,
        tool_calls: Vec::new(),
    };
    let (openai, anthropic) = (Scripted::new(vec![], slow), Scripted::new(vec![], Step::ok()));
    let r = runner(
        Config::default(),
        vec![
            ("openai", openai.clone() as Arc<dyn Provider>),
            ("anthropic", anthropic.clone() as Arc<dyn Provider>),
        ],
        None,
    );
    (r, openai, anthropic)
}

fn request(id: u64, deadline_ms: Option<u64>, stream: bool) -> ChatRequest {
    ChatRequest {
        stream,
        deadline_ms,
        ..crate::common::chat_request(id)
    }
}

#[tokio::test(start_paused = true)]
async fn a_timeout_falls_over_at_once_rather_than_retrying_a_silent_model() {
    let (r, openai, anthropic) = silent_primary();
    let start = tokio::time::Instant::now();
    let chat = r.chat(request(1, None, false), None).await;
    let took = start.elapsed();
    assert!(
        matches!(chat.end, ChatEnd::Answer { ref model, .. } if model == "claude-haiku"),
        "{:?}",
        chat.end
    );
    assert_eq!(chat.outcome.level, Level::Fallback);
    assert_eq!(
        (openai.calls(), anthropic.calls()),
        (1, 1),
        "one attempt on the silent model"
    );
    // The provider's 30 s timeout, then the fallback's 100 ms: not 90 s.
    assert_eq!(took, Duration::from_millis(30_100), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_deadline_bounds_the_chain_and_the_fallback_answers_within_it() {
    let (r, openai, anthropic) = silent_primary();
    let start = tokio::time::Instant::now();
    let chat = r.chat(request(1, Some(5_000), false), None).await;
    let took = start.elapsed();
    assert!(
        matches!(chat.end, ChatEnd::Answer { ref model, .. } if model == "claude-haiku"),
        "{:?}",
        chat.end
    );
    // The primary had its share: a third of the 5 s, with two models
    // after it (claude-haiku, deepseek-chat); then the fallback's 100 ms.
    // (The timer ends on the millisecond after the share's 1,666.67 ms.)
    assert_eq!(took, Duration::from_millis(1_667 + 100), "{took:?}");
    assert!(
        chat.outcome.path()[0].starts_with("gpt-4o ✗deadline"),
        "{:?}",
        chat.outcome.path()
    );
    assert_eq!((openai.calls(), anthropic.calls()), (1, 1));
    // With every model silent, the request ends at its deadline.
    let silent = Step::Ok {
        delay_ms: 3_600_000,
        output: 10,
        tool_calls: Vec::new(),
    };
    let both = Scripted::new(vec![], silent);
    let r = runner(
        Config::default(),
        ["openai", "anthropic", "deepseek"]
            .into_iter()
            .map(|p| (p, both.clone() as Arc<dyn Provider>))
            .collect(),
        None,
    );
    let start = tokio::time::Instant::now();
    let chat = r.chat(request(2, Some(5_000), false), None).await;
    assert_eq!(start.elapsed(), Duration::from_millis(5_000), "not a moment past it");
    assert_eq!(chat.outcome.level, Level::Failed);
    assert_eq!(both.calls(), 3, "each model tried once, in its share");
}

/// What a streaming client was sent.
#[derive(Default)]
struct Collected {
    started: Option<StreamHead>,
    pieces: usize,
}

impl StreamSink for Collected {
    fn start(&mut self, head: StreamHead) {
        self.started = Some(head);
    }
    fn piece(&mut self, _: Api, _: &Piece, _: bool) {
        self.pieces += 1;
    }
}

#[tokio::test(start_paused = true)]
async fn a_first_token_slower_than_the_limit_is_given_up_for_the_next_model() {
    let (r, _, _) = primary_taking(20_000);
    let mut sink = Collected::default();
    let start = tokio::time::Instant::now();
    let chat = r.chat(request(1, None, true), Some(&mut sink)).await;
    let took = start.elapsed();
    // The default 15 s limit, then the fallback's 100 ms.
    assert_eq!(took, Duration::from_millis(15_100), "{took:?}");
    assert_eq!(chat.outcome.level, Level::Fallback, "{:?}", chat.end);
    assert!(
        chat.outcome.path()[0].starts_with("gpt-4o ✗timeout"),
        "{:?}",
        chat.outcome.path()
    );
    assert_eq!(sink.started.expect("the stream began").model, "claude-haiku");
    let t = r
        .catalog()
        .registry()
        .find(&fusebox::target::Target::model("gpt-4o"))
        .unwrap();
    assert_eq!(t.stats.view().timeouts, 1, "the breaker counts the limit as a timeout");
}
