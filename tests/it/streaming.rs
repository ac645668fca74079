//! Streams through the gateway over real sockets, against the strict
//! upstream: the client's first content leaves before the upstream's second
//! chunk, a cut stream ends on an error event (never a clean end), a cut
//! answer is resumed by the next model where the route says so, and a user
//! at the edge of a hard budget is cut at the budget.

use crate::common::strict::{Api, ANSWER};
use crate::faithful::{config, get_order_tool, header, Proxy, ROUTES};
use fusebox::outcome::Level;
use fusebox::telemetry::events::EventKind;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Bounds a step that must happen, so a broken gateway fails the test
/// instead of hanging it.
pub(crate) async fn soon<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not happen"))
}

/// The next outcome announced.
pub(crate) async fn outcome(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<fusebox::telemetry::events::Event>,
) -> Box<fusebox::outcome::Outcome> {
    loop {
        if let Some(ev) = rx.recv().await {
            if let EventKind::Outcome(o) = ev.kind {
                return o;
            }
        }
    }
}

/// A client reading a stream as it comes.
pub(crate) struct Reader {
    resp: reqwest::Response,
    buf: String,
}

impl Reader {
    /// Reads until `buf` holds a complete event for which `want` holds.
    async fn until(&mut self, want: impl Fn(&str) -> bool) -> bool {
        loop {
            if events(&self.buf).iter().any(|e| want(e)) {
                return true;
            }
            match self.resp.chunk().await {
                Ok(Some(b)) => self.buf.push_str(&String::from_utf8_lossy(&b)),
                _ => return false,
            }
        }
    }

    /// Reads to the end of the body.
    pub(crate) async fn rest(mut self) -> String {
        while let Ok(Some(b)) = self.resp.chunk().await {
            self.buf.push_str(&String::from_utf8_lossy(&b));
        }
        self.buf
    }
}

/// The complete events of an SSE text.
pub(crate) fn events(text: &str) -> Vec<&str> {
    let mut out: Vec<&str> = text.split("\n\n").collect();
    out.pop(); // what follows the last blank line is not complete
    out
}

pub(crate) fn data(event: &str) -> Option<Value> {
    let line = event.lines().find_map(|l| l.strip_prefix("data: "))?;
    serde_json::from_str(line).ok()
}

/// The text an OpenAI stream carried.
pub(crate) fn openai_text(text: &str) -> String {
    events(text)
        .iter()
        .filter_map(|e| data(e))
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str().map(str::to_string))
        .collect()
}

pub(crate) fn ask(stream_usage: bool) -> Value {
    let mut b = json!({
        "model": "default", "stream": true,
        "messages": [{"role": "user", "content": "Where is order #38100?"}],
    });
    if stream_usage {
        b["stream_options"] = json!({"include_usage": true});
    }
    b
}

/// The names of a messages stream's events, in order.
fn event_names(text: &str) -> Vec<&str> {
    events(text)
        .iter()
        .filter_map(|e| e.lines().next()?.strip_prefix("event: "))
        .collect()
}

/// All of `resp`'s body, bounded by [`soon`].
async fn read_all(resp: reqwest::Response) -> String {
    let r = Reader {
        resp,
        buf: String::new(),
    };
    soon("the stream", r.rest()).await
}

pub(crate) async fn open(p: &Proxy, body: &Value) -> Reader {
    let resp = p.post("/v1/chat/completions", body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(header(&resp, "content-type"), "text/event-stream");
    Reader {
        resp,
        buf: String::new(),
    }
}

#[tokio::test]
async fn the_first_content_leaves_before_the_upstream_sends_its_second_chunk() {
    let p = Proxy::start(config(ROUTES)).await;
    let hold = Arc::new(Notify::new());
    {
        let mut plan = p.upstream.state.stream.lock();
        plan.gap = Duration::from_millis(100);
        plan.hold = Some(hold.clone());
    }
    let mut r = soon("the response head", open(&p, &ask(false))).await;
    assert_eq!(header(&r.resp, "x-fusebox-level"), "none");
    assert_eq!(header(&r.resp, "x-fusebox-chain"), "gpt-4o ok");
    // The upstream holds its second chunk until the client has the first.
    let first = soon(
        "the first content",
        r.until(|e| {
            data(e).is_some_and(|v| {
                v["choices"][0]["delta"]["content"]
                    .as_str()
                    .is_some_and(|c| !c.is_empty())
            })
        }),
    )
    .await;
    assert!(first);
    assert_eq!(openai_text(&r.buf), "Order ", "only the first chunk so far");
    hold.notify_one();
    let text = soon("the end", r.rest()).await;
    assert_eq!(openai_text(&text), ANSWER);
    let evs = events(&text);
    assert_eq!(*evs.last().unwrap(), "data: [DONE]");
    // The upstream's own chunks, passed on: its id and fingerprint.
    let chunks: Vec<Value> = evs.iter().filter_map(|e| data(e)).collect();
    assert!(chunks
        .iter()
        .all(|c| c["id"] == "chatcmpl-strict1" && c["system_fingerprint"] == "fp_strict"));
    // The usage chunk fusebox asked for is not shown to a client that did not.
    assert!(chunks.iter().all(|c| c["usage"].is_null()), "{text}");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(last["fusebox"]["level"], "none");
    assert_eq!(last["fusebox"]["chain"], json!(["gpt-4o ok"]));
    // The upstream was asked for usage, so what was used is settled.
    let sent = p.upstream.bodies(Api::OpenAi).pop().unwrap();
    assert_eq!(sent["stream_options"], json!({"include_usage": true}));
    assert_eq!(p.runner.totals().tokens.load(std::sync::atomic::Ordering::Relaxed), 37);
}

#[tokio::test]
async fn a_client_that_asked_for_usage_gets_it_with_the_outcome() {
    let p = Proxy::start(config(ROUTES)).await;
    let text = soon("the stream", open(&p, &ask(true)).await.rest()).await;
    let chunks: Vec<Value> = events(&text).iter().filter_map(|e| data(e)).collect();
    let last = chunks.last().unwrap();
    assert_eq!(last["usage"]["total_tokens"], 37);
    assert_eq!(last["fusebox"]["level"], "none");
}

#[tokio::test]
async fn a_reset_after_three_chunks_that_nothing_can_continue_ends_on_an_error_naming_the_cut() {
    let p = Proxy::start(config(ROUTES)).await;
    // The fallback that would continue it is overloaded.
    p.upstream.set_down(Api::Anthropic, true);
    {
        let mut plan = p.upstream.state.stream.lock();
        plan.gap = Duration::from_millis(100);
        plan.reset_after = Some((Api::OpenAi, 3));
    }
    let mut events_rx = p.runner.events().subscribe();
    let text = soon("the stream", open(&p, &ask(false)).await.rest()).await;
    assert_eq!(openai_text(&text), "Order 38100 is ", "the three chunks sent");
    let evs = events(&text);
    assert!(!text.contains("[DONE]"), "never a clean end: {text}");
    let last = data(evs.last().unwrap()).unwrap();
    let message = last["error"]["message"].as_str().unwrap();
    assert!(message.contains("stream broke"), "the cut first: {last}");
    assert!(message.contains("not resumed") && message.contains("529"), "{last}");
    // One outcome: partial, with what was sent.
    let o = soon("the outcome", outcome(&mut events_rx)).await;
    assert_eq!(o.level, Level::Partial);
    assert_eq!(o.answer.as_deref(), Some("Order 38100 is "));
    assert!(o.path()[0].starts_with("gpt-4o ✗cut"), "{:?}", o.path());
    assert!(o.path()[1].starts_with("claude-haiku ✗"), "{:?}", o.path());
    let t = crate::common::entry(&p.runner, "model:gpt-4o");
    assert_eq!(t.breaker.view(p.runner.clock().now()).calls_in_window, 1);
    assert_eq!(t.stats.view().failed, 1, "the cut counts as a failure");
}

#[tokio::test]
async fn a_cut_answer_is_resumed_by_the_next_model_as_one_stream() {
    // Resumed by default.
    let p = Proxy::start(config(ROUTES)).await;
    // The OpenAI upstream's stream is cut; Anthropic continues it.
    {
        let mut plan = p.upstream.state.stream.lock();
        plan.gap = Duration::from_millis(100);
        plan.reset_after = Some((Api::OpenAi, 3));
    }
    *p.upstream.state.continues.lock() = true;
    let mut events_rx = p.runner.events().subscribe();
    let text = soon("the stream", open(&p, &ask(false)).await.rest()).await;
    assert_eq!(openai_text(&text), ANSWER, "one uninterrupted answer: {text}");
    let o = soon("the outcome", outcome(&mut events_rx)).await;
    assert_eq!(
        o.answer.as_deref(),
        Some(ANSWER),
        "the outcome's answer is what was sent"
    );
    let evs = events(&text);
    assert_eq!(*evs.last().unwrap(), "data: [DONE]");
    let chunks: Vec<Value> = evs.iter().filter_map(|e| data(e)).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(
        chunks
            .iter()
            .filter(|c| c["choices"][0]["delta"]["role"].is_string())
            .count(),
        1
    );
    let meta = &chunks.last().unwrap()["fusebox"];
    assert_eq!(meta["level"], "fallback");
    let chain: Vec<&str> = meta["chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(chain[0].starts_with("gpt-4o failed cut"), "{chain:?}");
    assert_eq!(chain[1], "claude-haiku ok resumed");
    // Anthropic was given the conversation and the text already sent.
    let resumed = p.upstream.bodies(Api::Anthropic).pop().unwrap();
    let last = resumed["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"][0]["text"], "Order 38100 is");
}

#[tokio::test]
async fn a_model_that_refuses_a_prefill_continues_in_a_user_turn_and_the_usage_covers_both() {
    let p = Proxy::start(config(ROUTES)).await;
    {
        let mut plan = p.upstream.state.stream.lock();
        plan.gap = Duration::from_millis(100);
        plan.reset_after = Some((Api::OpenAi, 3));
    }
    *p.upstream.state.continues.lock() = true;
    *p.upstream.state.no_prefill.lock() = true;
    let mut events_rx = p.runner.events().subscribe();
    let text = soon("the stream", open(&p, &ask(true)).await.rest()).await;
    assert_eq!(
        openai_text(&text),
        ANSWER,
        "one answer, the continuation only once: {text}"
    );
    let chunks: Vec<Value> = events(&text).iter().filter_map(|e| data(e)).collect();
    // The 400 was said once, then the rest asked for in a user turn.
    let asked = p.upstream.bodies(Api::Anthropic);
    assert_eq!(asked.len(), 2, "{asked:?}");
    let turns = asked[1]["messages"].as_array().unwrap();
    let n = turns.len();
    assert_eq!(turns[n - 2]["role"], "assistant");
    assert_eq!(turns[n - 2]["content"][0]["text"], "Order 38100 is");
    assert_eq!(turns[n - 1]["role"], "user");
    assert!(
        turns[n - 1]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Continue it from exactly where it stopped"),
        "{turns:?}"
    );
    // Usage covers both parts: the cut one (6 prompt tokens estimated,
    // 15 characters received) and the continuation (25 + the fake's 12).
    let usage = &chunks.iter().find(|c| c["usage"].is_object()).expect("the usage chunk")["usage"];
    assert_eq!(
        (usage["prompt_tokens"].clone(), usage["completion_tokens"].clone()),
        (json!(31), json!(16))
    );
    assert_eq!(usage["total_tokens"], 47);
    // Each model was charged its own part: together, what the client was told.
    let o = soon("the outcome", outcome(&mut events_rx)).await;
    assert_eq!(o.tokens, 47);
    assert_eq!(o.level, Level::Fallback);
    assert!(o.path()[0].starts_with("gpt-4o ✗cut"), "{:?}", o.path());
    assert_eq!(o.path().len(), 3, "{:?}", o.path());
    assert!(
        o.path()[1].starts_with("claude-haiku ✗400"),
        "the refused prefill: {:?}",
        o.path()
    );
    assert_eq!(o.path()[2], "claude-haiku ✓ resumed");
    // The chunks after the cut name the model that wrote them.
    let models: Vec<&str> = chunks.iter().filter_map(|c| c["model"].as_str()).collect();
    assert_eq!(models.first(), Some(&"gpt-4o"));
    assert_eq!(models.last(), Some(&"claude-3-5-haiku-latest"));
    // Remembered: the next cut answer is continued without a prefill at once.
    let _ = soon("another stream", open(&p, &ask(false)).await.rest()).await;
    let asked = p.upstream.bodies(Api::Anthropic);
    assert_eq!(asked.len(), 3, "no second 400");
}

#[tokio::test]
async fn a_continuation_that_repeats_the_end_of_the_answer_is_sent_without_the_repeat() {
    let p = Proxy::start(config(ROUTES)).await;
    {
        let mut plan = p.upstream.state.stream.lock();
        plan.gap = Duration::from_millis(100);
        plan.reset_after = Some((Api::OpenAi, 3));
    }
    *p.upstream.state.continues.lock() = true;
    *p.upstream.state.no_prefill.lock() = true;
    // Asked for the rest of "Order 38100 is", it begins "38100 is in …".
    *p.upstream.state.repeats.lock() = 2;
    let text = soon("the stream", open(&p, &ask(false)).await.rest()).await;
    assert_eq!(openai_text(&text), ANSWER, "the repeat left out: {text}");
    let asked = p.upstream.bodies(Api::Anthropic);
    assert_eq!(asked.len(), 2, "a refused prefill, then a user turn");
}

#[tokio::test]
async fn a_user_at_the_edge_of_a_hard_budget_is_cut_at_the_budget() {
    let mut cfg = config(ROUTES);
    cfg.budgets.user_tokens_per_minute = 150;
    let p = Proxy::start(cfg).await;
    *p.upstream.state.text.lock() = "word ".repeat(400);
    let mut body = ask(false);
    body["max_tokens"] = json!(100);
    body["user"] = json!("ivy");
    let text = soon("the stream", open(&p, &body).await.rest()).await;
    let evs = events(&text);
    assert!(!text.contains("[DONE]"));
    let last = data(evs.last().unwrap()).unwrap();
    let msg = last["error"]["message"].as_str().unwrap();
    assert!(msg.contains("user ivy") && msg.contains("tokens/minute"), "{msg}");
    assert_eq!(last["error"]["type"], "budget_exceeded");
    let sent = openai_text(&text);
    assert!(
        !sent.is_empty() && sent.len() < 2_000,
        "cut part way: {} chars",
        sent.len()
    );
    // What was produced is settled: the user stands at the limit, not past it.
    let used = p.runner.budgets().top_users(1, p.runner.clock().elapsed_ms())[0].tokens[0];
    assert!((145.0..=152.0).contains(&used), "{used}");
}

#[tokio::test]
async fn an_anthropic_stream_passes_through_and_carries_the_outcome() {
    let p = Proxy::start(config(ROUTES)).await;
    let body = json!({
        "model": "claude-haiku", "max_tokens": 200, "stream": true,
        "messages": [{"role": "user", "content": "Where is order #38100?"}],
    });
    let resp = p.post("/v1/messages", &body).await;
    assert_eq!(resp.status(), 200);
    let text = read_all(resp).await;
    let evs = events(&text);
    let names = event_names(&text);
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    let streamed: String = evs
        .iter()
        .filter_map(|e| data(e))
        .filter_map(|v| v["delta"]["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(streamed, ANSWER);
    let stop = data(evs.last().unwrap()).unwrap();
    assert_eq!(stop["fusebox"]["level"], "none");
    assert_eq!(data(evs[0]).unwrap()["message"]["id"], "msg_strict1");
}

#[tokio::test]
async fn a_stream_from_the_other_api_is_translated() {
    let p = Proxy::start(config(ROUTES)).await;
    p.upstream.set_down(Api::OpenAi, true);
    let mut body = ask(true);
    body["tools"] = json!([get_order_tool()]);
    let text = soon("the stream", open(&p, &body).await.rest()).await;
    let chunks: Vec<Value> = events(&text).iter().filter_map(|e| data(e)).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"), "{text}");
    let call = chunks
        .iter()
        .find_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["id"].as_str())
        .unwrap();
    assert_eq!(call, "toolu_abc123");
    let args: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(args, r#"{"order_id":"38100"}"#);
    assert!(chunks.iter().any(|c| c["choices"][0]["finish_reason"] == "tool_calls"));
    let last = chunks.last().unwrap();
    assert_eq!(last["usage"]["prompt_tokens"], 25);
    assert_eq!(last["fusebox"]["level"], "fallback");
    assert!(text.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn an_answer_without_content_still_streams_to_its_end() {
    let p = Proxy::start(config(ROUTES)).await;
    *p.upstream.state.text.lock() = String::new();
    let text = soon("the stream", open(&p, &ask(true)).await.rest()).await;
    let evs = events(&text);
    assert_eq!(evs.last(), Some(&"data: [DONE]"), "{text}");
    let chunks: Vec<Value> = evs.iter().filter_map(|e| data(e)).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"), "{text}");
    assert!(
        chunks.iter().any(|c| c["choices"][0]["finish_reason"] == "stop"),
        "{text}"
    );
    let last = chunks.last().unwrap();
    assert_eq!(last["fusebox"]["level"], "none", "{text}");
    assert!(last["usage"]["prompt_tokens"].is_u64(), "{text}");
    // The same for an Anthropic client.
    let body = json!({
        "model": "claude-haiku", "max_tokens": 200, "stream": true,
        "messages": [{"role": "user", "content": "Say nothing."}],
    });
    let resp = p.post("/v1/messages", &body).await;
    assert_eq!(resp.status(), 200);
    let text = read_all(resp).await;
    let names = event_names(&text);
    assert_eq!(names.first(), Some(&"message_start"), "{text}");
    assert_eq!(names.last(), Some(&"message_stop"), "{text}");
    assert!(names.contains(&"message_delta"), "{text}");
}

/// Once the abandoned call's outcome is counted: the tokens `user` was
/// charged this minute.
async fn charged_once_abandoned(p: &Proxy, user: &str) -> f64 {
    let failed = fusebox::outcome::Level::Failed.index();
    soon("the abandoned outcome", async {
        while p.runner.by_level()[failed] == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let now = p.runner.clock().elapsed_ms();
    let u = p
        .runner
        .budgets()
        .top_users(4, now)
        .into_iter()
        .find(|u| u.user == user);
    u.unwrap_or_else(|| panic!("{user} was charged nothing")).tokens[0]
}

#[tokio::test]
async fn a_client_that_leaves_mid_stream_is_charged_what_it_was_sent() {
    let p = Proxy::start(config(ROUTES)).await;
    let hold = Arc::new(Notify::new());
    p.upstream.state.stream.lock().hold = Some(hold.clone());
    let mut body = ask(false);
    body["user"] = json!("leaver");
    let mut r = soon("the response head", open(&p, &body)).await;
    assert!(soon("the first content", r.until(|e| e.contains("Order "))).await);
    drop(r);
    // The call is dropped with the connection: its outcome is counted and
    // the user is charged the prompt and what streamed, not nothing.
    let tokens = charged_once_abandoned(&p, "leaver").await;
    assert!((5.0..100.0).contains(&tokens), "{tokens}");
    hold.notify_one();
}

#[tokio::test]
async fn a_client_that_leaves_before_a_whole_answer_is_charged_what_was_reserved() {
    let p = Proxy::start(config(ROUTES)).await;
    let hold = Arc::new(Notify::new());
    p.upstream.state.stream.lock().hold = Some(hold.clone());
    let body = json!({
        "model": "default", "max_tokens": 50, "user": "leaver",
        "messages": [{"role": "user", "content": "Where is order #38100?"}],
    });
    let url = format!("{}/v1/chat/completions", p.base);
    let call = tokio::spawn(async move { reqwest::Client::new().post(url).json(&body).send().await });
    soon("the upstream call", async {
        while p.upstream.received().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    call.abort();
    let tokens = charged_once_abandoned(&p, "leaver").await;
    // The prompt's estimate and the 50 output tokens it may be billed for.
    assert!((50.0..80.0).contains(&tokens), "{tokens}");
    hold.notify_one();
}

/// A stream whose upstream sent every word, its finish and its usage and
/// then closed the body without `[DONE]` is a whole answer: the client
/// gets its API's own end (one usage chunk, `[DONE]`), no error.
#[tokio::test]
async fn a_stream_that_finishes_without_its_terminator_is_a_whole_answer() {
    let p = Proxy::start(config(ROUTES)).await;
    p.upstream.state.stream.lock().no_terminator = true;
    let mut events_rx = p.runner.events().subscribe();
    let text = soon("the stream", open(&p, &ask(true)).await.rest()).await;
    assert_eq!(openai_text(&text), ANSWER);
    let evs = events(&text);
    assert_eq!(*evs.last().unwrap(), "data: [DONE]", "{text}");
    assert!(!text.contains("\"error\""), "{text}");
    let chunks: Vec<Value> = evs.iter().filter_map(|e| data(e)).collect();
    let usage: Vec<&Value> = chunks.iter().filter(|c| !c["usage"].is_null()).collect();
    assert_eq!(usage.len(), 1, "one usage chunk: {text}");
    assert_eq!(usage[0]["usage"]["total_tokens"], 37);
    assert_eq!(chunks.last().unwrap()["fusebox"]["level"], "none");
    let o = soon("the outcome", outcome(&mut events_rx)).await;
    assert_eq!(o.level, Level::None);
    // Anthropic's stream ends with its message_stop, once.
    let body = json!({
        "model": "claude-haiku", "max_tokens": 200, "stream": true,
        "messages": [{"role": "user", "content": "Where is order #38100?"}],
    });
    let resp = p.post("/v1/messages", &body).await;
    let text = read_all(resp).await;
    let names = event_names(&text);
    assert_eq!(names.iter().filter(|n| **n == "message_delta").count(), 1, "{text}");
    assert_eq!(names.last(), Some(&"message_stop"), "{text}");
    // A whole answer read from such a stream is whole too.
    let r = p
        .post(
            "/v1/chat/completions",
            &json!({"model": "default", "messages": [{"role": "user", "content": "Where is order #38100?"}]}),
        )
        .await;
    assert_eq!(r.status(), 200);
}

/// A malformed event mid-stream never reaches the client (whose SDK would
/// fail to parse it): the stream goes on, the event is skipped, counted on
/// its provider and said in the events.
#[tokio::test]
async fn a_malformed_event_mid_stream_is_skipped_counted_and_said() {
    let p = Proxy::start(config(ROUTES)).await;
    p.upstream.state.stream.lock().malformed_after = Some(3);
    let mut events_rx = p.runner.events().subscribe();
    let text = soon("the stream", open(&p, &ask(true)).await.rest()).await;
    assert_eq!(openai_text(&text), ANSWER);
    for e in events(&text) {
        if let Some(d) = e
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
        {
            assert!(serde_json::from_str::<Value>(d).is_ok(), "a client would choke on: {d}");
        }
    }
    assert_eq!(*events(&text).last().unwrap(), "data: [DONE]");
    let mut skipped = None;
    while let Ok(e) = events_rx.try_recv() {
        if let fusebox::telemetry::events::EventKind::EventsSkipped { target, count, .. } = e.kind {
            skipped = Some((target.to_string(), count));
        }
    }
    assert_eq!(skipped, Some(("provider:openai".to_string(), 1)));
    let t = crate::common::entry(&p.runner, "provider:openai");
    assert_eq!(t.stats.view().malformed, 1);
}
