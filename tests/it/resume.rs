//! A cut stream resumed in a user turn, over real sockets against the
//! strict upstream: a 60-word answer cut after 40 words is continued by a
//! model that takes no prefill. However it lines up with what the client
//! has (a restart, its last words again, its sentence again, or the rest
//! only) the client reads the 60 words once; a continuation that begins
//! again and then goes its own way ends the stream on the cut, `partial`.

use crate::common::strict::Api;
use crate::faithful::{config, Proxy, ROUTES};
use crate::streaming::{ask, data, events, open, openai_text, outcome, soon};
use fusebox::outcome::Level;
use std::time::Duration;

/// The answer: 60 words, one stream chunk each.
const ANSWER: &str = "Order 38100 left our warehouse in Leeds on Monday morning. \
It was handed to the courier at noon and scanned at the regional hub that evening. \
The courier reports that the parcel is now on a van for delivery in your area, \
and the driver expects to reach your street before six tonight. You will get a text before then.";

/// The words the client has when the stream is cut.
const SENT: usize = 40;

/// The word of the answer that begins the sentence it is cut in.
const SENTENCE: usize = 26;

/// A gateway whose OpenAI model's stream of [`ANSWER`] is cut after
/// [`SENT`] words, and whose Anthropic model, taking no prefill, continues
/// it as `continues` sets the upstream.
async fn cut(continues: impl FnOnce(&crate::common::strict::StrictState)) -> Proxy {
    let p = Proxy::start(config(ROUTES)).await;
    *p.upstream.state.text.lock() = ANSWER.to_string();
    {
        let mut plan = p.upstream.state.stream.lock();
        plan.gap = Duration::from_millis(5);
        plan.reset_after = Some((Api::OpenAi, SENT));
    }
    *p.upstream.state.continues.lock() = true;
    *p.upstream.state.no_prefill.lock() = true;
    continues(&p.upstream.state);
    p
}

/// The first `n` words of the answer, as the client was sent them.
fn first(n: usize) -> String {
    ANSWER.split(' ').take(n).map(|w| format!("{w} ")).collect()
}

/// Streams the question through `p`: the client's text, whether the
/// stream ended cleanly, and the outcome's level, answer and path.
async fn run(p: &Proxy) -> (String, bool, Level, String, Vec<String>) {
    let mut rx = p.runner.events().subscribe();
    let text = soon("the stream", open(p, &ask(false)).await.rest()).await;
    let o = soon("the outcome", outcome(&mut rx)).await;
    // What the continuation was asked: the answer so far, then the user turn.
    let asked = p.upstream.bodies(Api::Anthropic);
    let turns = asked.last().unwrap()["messages"].as_array().unwrap().clone();
    assert_eq!(turns[turns.len() - 2]["content"][0]["text"], first(SENT).trim_end());
    assert_eq!(turns[turns.len() - 1]["role"], "user");
    let clean = events(&text).last() == Some(&"data: [DONE]");
    let answer = o.answer.as_deref().unwrap_or_default().to_string();
    (openai_text(&text), clean, o.level, answer, o.path())
}

/// The client read the whole answer once, as one clean stream.
async fn reads_once(p: &Proxy) {
    let (text, clean, level, answer, path) = run(p).await;
    assert_eq!(text, ANSWER, "{} words", text.split_whitespace().count());
    assert!(clean);
    assert_eq!((level, answer.as_str()), (Level::Fallback, ANSWER));
    assert_eq!(
        path.last().map(String::as_str),
        Some("claude-haiku ✓ resumed"),
        "{path:?}"
    );
}

#[tokio::test]
async fn a_continuation_that_begins_the_answer_again_reads_once() {
    let p = cut(|s| *s.again_from.lock() = Some(0)).await;
    reads_once(&p).await;
}

#[tokio::test]
async fn a_continuation_that_writes_its_last_words_again_reads_once() {
    let p = cut(|s| *s.repeats.lock() = 3).await;
    reads_once(&p).await;
}

#[tokio::test]
async fn a_continuation_that_begins_its_sentence_again_reads_once() {
    let p = cut(|s| *s.again_from.lock() = Some(SENTENCE)).await;
    reads_once(&p).await;
}

#[tokio::test]
async fn a_continuation_of_the_rest_only_reads_once() {
    let p = cut(|_| {}).await;
    reads_once(&p).await;
}

#[tokio::test]
async fn a_continuation_that_begins_again_and_goes_its_own_way_ends_the_stream_on_the_cut() {
    // It writes the answer's first 12 words again, then says otherwise.
    let other = format!("{}is still in Leeds and will leave tomorrow.", first(12));
    let p = cut(move |s| *s.instead.lock() = Some(other)).await;
    let mut rx = p.runner.events().subscribe();
    let raw = soon("the stream", open(&p, &ask(false)).await.rest()).await;
    // The client has the 40 words it had, and an error event it can read.
    assert_eq!(openai_text(&raw), first(SENT));
    assert!(!raw.contains("[DONE]"), "never a clean end: {raw}");
    let last = data(events(&raw).last().unwrap()).unwrap();
    let message = last["error"]["message"].as_str().unwrap();
    assert!(message.contains("stream broke"), "the cut first: {message}");
    assert!(
        message.contains("(not resumed: the continuation by claude-haiku wrote again 12 words of the answer"),
        "{message}"
    );
    let o = soon("the outcome", outcome(&mut rx)).await;
    assert_eq!(o.level, Level::Partial);
    assert_eq!(o.answer.as_deref(), Some(first(SENT).as_str()));
    assert_eq!(o.path().last().map(String::as_str), Some("claude-haiku ✗cut unaligned"));
    // How the model writes is not its provider's failure.
    let haiku = crate::common::entry(&p.runner, "model:claude-haiku");
    assert_eq!(haiku.stats.view().failed, 0);
}
