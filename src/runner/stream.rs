//! A streamed answer passed on as it arrives (the gateway's streaming
//! clients). The answer's first content opens the client's stream; text
//! goes out at once; tool calls are held until they are whole and checked;
//! the finish and terminator are held so the client's last chunk can carry
//! the outcome; output is counted against the user's hard token budgets as
//! it streams, and the stream is cut where it would pass one.

use super::align::{Align, Misaligned, Step};
use crate::outcome::Level;
use crate::provider::stream::Live;
use crate::provider::{ErrorKind, LlmResponse, Piece, ProviderError, Usage};
use crate::resilience::budget::BudgetExceeded;
use crate::wire::{Api, Assembler, Delta};

/// What a client is told when its answer starts streaming.
#[derive(Clone, Debug)]
pub struct StreamHead {
    /// Level so far (`none`, or `fallback` when a later model answers).
    pub level: Level,
    /// The chain walked so far, the answering model last.
    pub chain: Vec<crate::outcome::Hop>,
    /// Quality of the answering model relative to the first.
    pub quality: f64,
    /// Attempts so far.
    pub attempts: u32,
    /// The upstream's id of the answer.
    pub id: String,
    /// The model, as the upstream names it (else as configured).
    pub model: String,
}

/// Where a streamed answer goes. A client that goes away drops the call
/// (and with it the sink), so writing to it cannot fail.
pub trait StreamSink: Send {
    /// The answer starts streaming.
    fn start(&mut self, head: StreamHead);
    /// One piece of the answer, in `kind`'s format; `own` when it comes
    /// from the first upstream that streamed (so, of the client's API, it
    /// may go as sent).
    fn piece(&mut self, kind: Api, piece: &Piece, own: bool);
    /// The answer goes on from `model`, continuing a cut one: what is
    /// written from now on names it.
    fn resumed_by(&mut self, _model: &str) {}

    /// Bytes written and not yet taken by the client: past
    /// [`crate::limits::STREAM_BACKLOG`] the stream waits for its client
    /// before it reads more of the upstream's answer.
    fn backlog(&self) -> usize {
        0
    }
}

/// A client's stream as the runner drives it.
pub struct Streaming<'s> {
    sink: &'s mut dyn StreamSink,
    /// The client's stream has started.
    pub started: bool,
    /// The text the client was sent (to resume a cut answer from), while
    /// it is within [`crate::limits::STREAM_TEXT_KEPT`].
    pub sent_text: String,
    /// Nothing but text went out.
    pub only_text: bool,
    /// More text went out than is kept: the answer cannot be resumed.
    pub too_long: bool,
    /// The upstream now streaming continues another's cut answer.
    pub resumed: bool,
    /// Whitespace the client was sent at the cut that a continuation,
    /// given the answer without it, sends again.
    skip: String,
    /// A continuation asked for in a user turn, held until it lines up
    /// with what was sent (`align.rs`).
    align: Option<Align>,
    /// What the cut attempts before the one streaming now used: added to
    /// the usage the client is told, which covers all it received.
    carried: Usage,
    /// The held end of the answer (its finish and terminator), for the
    /// client's last chunk: `(API, piece, own)`.
    pub tail: Vec<(Api, Piece, bool)>,
}

/// How a streamed attempt went.
pub(crate) enum Pumped {
    /// The stream ended whole; pieces not yet sent (held tool calls, the
    /// end) are given with the answer.
    Whole(LlmResponse, Vec<Piece>),
    /// It broke (before or after the client's stream started).
    Broke(ProviderError),
    /// A continuation that does not line up with what the client was
    /// sent: fusebox stopped reading it, having used so much.
    Unaligned(Usage, Misaligned),
    /// The user's hard budget would be passed: cut there.
    OverBudget(Usage, BudgetExceeded),
}

fn holds(d: &Delta) -> bool {
    matches!(
        d,
        Delta::ToolStart { .. } | Delta::ToolArgs { .. } | Delta::Finish(_) | Delta::Done
    )
}

impl<'s> Streaming<'s> {
    /// A stream to `sink`, not started.
    pub fn new(sink: &'s mut dyn StreamSink) -> Self {
        Self {
            sink,
            started: false,
            sent_text: String::new(),
            only_text: true,
            too_long: false,
            resumed: false,
            skip: String::new(),
            align: None,
            carried: Usage::default(),
            tail: Vec::new(),
        }
    }

    /// The answer so far, for `model` to continue after an attempt cut
    /// having used `spent`: without its trailing whitespace, which APIs
    /// refuse at the end of a prefill (and which the continuation's first
    /// text is not sent again). Without a `prefill` (asked for the rest in
    /// a user turn) the continuation is held until it lines up with it.
    pub fn resume(&mut self, model: &str, spent: Usage, prefill: bool) -> &str {
        self.resumed = true;
        self.carried.input = self.carried.input.saturating_add(spent.input);
        self.carried.output = self.carried.output.saturating_add(spent.output);
        self.sink.resumed_by(model);
        let kept = self.sent_text.trim_end().len();
        self.skip = self.sent_text[kept..].to_string();
        self.align = (!prefill).then(|| Align::after(&self.sent_text[..kept]));
        &self.sent_text[..kept]
    }

    /// Whether a model could continue the answer if it were cut: nothing
    /// but text went out, and all of it is kept.
    pub fn resumable(&self) -> bool {
        self.only_text && !self.too_long
    }

    /// What the earlier, cut attempts used (none unless resumed).
    pub fn carried(&self) -> Usage {
        self.carried
    }

    /// `p` with the usage it says raised by what earlier attempts used,
    /// when it says any and they used some.
    fn carrying(&self, p: &Piece) -> Option<Piece> {
        if self.carried.total() == 0 || !p.deltas.iter().any(|d| matches!(d, Delta::Usage(_))) {
            return None;
        }
        let mut p = p.clone();
        for d in &mut p.deltas {
            if let Delta::Usage(u) = d {
                u.input = u.input.saturating_add(self.carried.input);
                u.output = u.output.saturating_add(self.carried.output);
            }
        }
        Some(p)
    }

    /// Sends what a continuation's start held, any repeat left out; or
    /// why it does not line up.
    fn release_align(&mut self, kind: Api) -> Result<(), Misaligned> {
        if let Some(text) = self.align.take().map(Align::end).transpose()? {
            if !text.is_empty() {
                self.send_now(kind, &Piece::said(Delta::Text(text)));
            }
        }
        Ok(())
    }

    fn open(&mut self, head: StreamHead) {
        self.started = true;
        self.sink.start(head);
    }

    /// Sends `p`, noting what it says; a continuation's start is held
    /// until it lines up with what was sent, or found not to.
    fn send(&mut self, kind: Api, p: &Piece) -> Result<(), Misaligned> {
        let Some(a) = self.align.as_mut() else {
            self.send_now(kind, p);
            return Ok(());
        };
        if p.deltas.iter().any(|d| d.is_content() && text_of(d).is_none()) {
            self.release_align(kind)?;
            self.send_now(kind, p);
            return Ok(());
        }
        let text: String = p.deltas.iter().filter_map(text_of).collect();
        let decided = match a.take(&text) {
            Step::Hold => None,
            Step::Send(t) => Some(t),
            Step::Stop(why) => {
                self.align = None;
                return Err(why);
            }
        };
        if decided.is_some() {
            self.align = None;
        }
        // The piece with its text held, or replaced by what is sent.
        let mut p = p.clone();
        p.deltas.retain(|d| text_of(d).is_none());
        p.deltas.extend(decided.filter(|t| !t.is_empty()).map(Delta::Text));
        if !p.deltas.is_empty() {
            self.send_now(kind, &p);
        }
        Ok(())
    }

    /// Sends `p` as it is but for whitespace sent before a cut.
    fn send_now(&mut self, kind: Api, p: &Piece) {
        if !self.skip.is_empty() && p.deltas.iter().any(|d| matches!(d, Delta::Text(_))) {
            let mut p = p.clone();
            for d in &mut p.deltas {
                if let Delta::Text(t) = d {
                    *t = t.strip_prefix(self.skip.as_str()).unwrap_or(t).to_string();
                    break;
                }
            }
            self.skip.clear();
            return self.send_now(kind, &p);
        }
        for d in &p.deltas {
            match d {
                Delta::Text(t) if self.sent_text.len() + t.len() > crate::limits::STREAM_TEXT_KEPT => {
                    self.too_long = true;
                }
                Delta::Text(t) if !self.too_long => crate::wire::reply::push_text(&mut self.sent_text, t),
                d if d.is_content() => self.only_text = false,
                _ => {}
            }
        }
        match self.carrying(p) {
            Some(p) => self.sink.piece(kind, &p, false),
            None => self.sink.piece(kind, p, !self.resumed),
        }
    }

    /// Reads `live` to its end, passing text on as it comes (opening the
    /// client's stream with `head` at the first piece sent), holding tool
    /// calls and the end, and cutting at `room` tokens. What it has used
    /// so far is kept in `spend` (charged if the call is dropped).
    pub(crate) async fn pump(
        &mut self,
        mut live: Live,
        room: Option<(u64, BudgetExceeded)>,
        spend: &Spend,
        head: impl FnOnce(&Assembler) -> StreamHead,
    ) -> Pumped {
        let kind = live.kind;
        // The text went on to the client: what is kept of it is bounded.
        let mut acc = Assembler::keeping(crate::limits::STREAM_TEXT_KEPT);
        let mut held: Vec<Piece> = Vec::new();
        let mut head = Some(head);
        // An answer that begins with a tool call is held whole: it is
        // checked before anything reaches the client, so a bad call can
        // still fall back.
        let tools_first = live
            .head
            .iter()
            .flat_map(|p| p.deltas.iter())
            .find(|d| d.is_content())
            .is_some_and(|d| matches!(d, Delta::ToolStart { .. } | Delta::ToolArgs { .. }));
        let mut holding = tools_first && !self.started;
        let mut first = std::mem::take(&mut live.head).into_iter();
        loop {
            let p = match first.next() {
                Some(p) => p,
                None => match live.rest.piece().await {
                    Some(Ok(p)) => p,
                    Some(Err(mut e)) => {
                        e.usage = live.usage_so_far(&acc);
                        return Pumped::Broke(e);
                    }
                    None => break,
                },
            };
            p.deltas.iter().for_each(|d| acc.take(d));
            let u = live.usage_so_far(&acc);
            spend.set(u);
            if let Some((limit, why)) = &room {
                if u64::from(u.input) + u64::from(u.output) > *limit {
                    return Pumped::OverBudget(u, why.clone());
                }
            }
            holding |= p.deltas.iter().any(holds);
            if holding {
                held.push(p);
                continue;
            }
            if !self.started {
                let h = head.take().map(|f| f(&acc));
                if let Some(h) = h {
                    self.open(h);
                }
            }
            if let Err(why) = self.send(kind, &p) {
                return Pumped::Unaligned(live.usage_so_far(&acc), why);
            }
            // What the client has not taken stays in the upstream's socket,
            // not here: the rest is read once the client reads this.
            if self.sink.backlog() >= crate::limits::STREAM_BACKLOG {
                tokio::task::yield_now().await;
            }
        }
        if !acc.finished() {
            let mut e = ProviderError::new(ErrorKind::Truncated, None, "stream ended before its answer finished");
            e.usage = live.usage_so_far(&acc);
            return Pumped::Broke(e);
        }
        // Held text of a continuation that ended: it lines up now or never.
        if let Err(why) = self.release_align(kind) {
            return Pumped::Unaligned(live.usage_so_far(&acc), why);
        }
        if !acc.done {
            // Finished, then ended without the terminator: the client's
            // stream ends as its API ends one.
            held.push(Piece::said(Delta::Done));
        }
        let resp = live.answer(acc);
        Pumped::Whole(resp, held)
    }

    /// Sends held pieces of a checked answer: up to its finish, opening the
    /// client's stream first if need be; the finish and what follows are
    /// kept as the tail. A continuation answered whole that does not line
    /// up with what was sent is not sent: why is returned.
    pub(crate) fn flush(&mut self, kind: Api, held: Vec<Piece>, head: StreamHead) -> Result<(), Misaligned> {
        if !self.started {
            self.open(head);
        }
        let mut pieces = held.into_iter();
        for p in pieces.by_ref() {
            if p.deltas.iter().any(|d| matches!(d, Delta::Finish(_) | Delta::Done)) {
                self.release_align(kind)?;
                let p = self.carrying(&p).unwrap_or(p);
                self.tail.push((kind, p, !self.resumed));
                break;
            }
            self.send(kind, &p)?;
        }
        let own = !self.resumed;
        for p in pieces {
            let p = self.carrying(&p).unwrap_or(p);
            self.tail.push((kind, p, own));
        }
        Ok(())
    }
}

/// What an attempt in flight has used so far, as its stream reports it:
/// what it is charged if the call is dropped midway (the client went
/// away). Unmeasured (a whole answer awaited), it is charged as reserved.
/// A stream also notes how long its first token took: from then on its
/// pace is judged by its rate, not by how long the answer runs.
#[derive(Debug)]
pub(crate) struct Spend {
    used: std::sync::atomic::AtomicU64,
    /// The time to first token in µs, plus one; 0 until it came.
    first: std::sync::atomic::AtomicU64,
}

impl Default for Spend {
    fn default() -> Self {
        Self {
            used: std::sync::atomic::AtomicU64::new(u64::MAX),
            first: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl Spend {
    pub(crate) fn set(&self, u: Usage) {
        let packed = (u64::from(u.input) << 32) | u64::from(u.output.min(u32::MAX - 1));
        self.used.store(packed, std::sync::atomic::Ordering::Relaxed);
    }

    /// Input and output tokens, once measured.
    pub(crate) fn get(&self) -> Option<(u32, u32)> {
        let v = self.used.load(std::sync::atomic::Ordering::Relaxed);
        (v != u64::MAX).then_some(((v >> 32) as u32, v as u32))
    }

    /// Notes that the stream's first token came `ttft` after the call began.
    pub(crate) fn opened(&self, ttft: std::time::Duration) {
        let us = u64::try_from(ttft.as_micros()).unwrap_or(u64::MAX - 1);
        self.first.store(us + 1, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long the stream's first token took, once it came.
    pub(crate) fn first_token(&self) -> Option<std::time::Duration> {
        match self.first.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            us => Some(std::time::Duration::from_micros(us - 1)),
        }
    }

    /// Unmeasured again (a new attempt).
    pub(crate) fn clear(&self) {
        self.used.store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
        self.first.store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A text delta's text.
fn text_of(d: &Delta) -> Option<&str> {
    match d {
        Delta::Text(t) => Some(t),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nowhere;

    impl StreamSink for Nowhere {
        fn start(&mut self, _: StreamHead) {}
        fn piece(&mut self, _: Api, _: &Piece, _: bool) {}
    }

    #[test]
    fn an_answer_longer_than_the_text_kept_is_not_resumable_and_keeps_no_more() {
        let mut sink = Nowhere;
        let mut s = Streaming::new(&mut sink);
        let chunk = "x".repeat(32 * 1024);
        for _ in 0..4 {
            s.send_now(Api::Chat, &Piece::said(Delta::Text(chunk.clone())));
        }
        assert!(s.resumable(), "128 KiB is kept whole");
        s.send_now(Api::Chat, &Piece::said(Delta::Text("more".into())));
        assert!(!s.resumable());
        assert_eq!(s.sent_text.len(), crate::limits::STREAM_TEXT_KEPT);
        let mut acc = Assembler::keeping(8);
        for t in ["1234", "5678", "9"] {
            acc.take(&Delta::Text(t.into()));
        }
        assert_eq!((acc.reply().text.as_str(), acc.chars()), ("12345678", 9));
    }
}
