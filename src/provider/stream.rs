//! A streamed answer as the runner reads it: pieces carrying the bytes the
//! upstream sent and what they say, so the gateway can pass them on as
//! they are (or translate them) while the runner counts and checks them.

use super::{ErrorKind, LlmResponse, ProviderError};
use crate::resilience::limiter::RateFeedback;
use crate::wire::{Api, Assembler, Delta};
use smallvec::SmallVec;
use std::sync::Arc;
use std::task::Poll;

/// One piece of a stream: an SSE event (or keep-alive comment).
#[derive(Clone, Debug, Default)]
pub struct Piece {
    /// The event as the upstream sent it (its SSE framing normalised).
    pub raw: bytes::Bytes,
    /// What it says (nothing for a keep-alive).
    pub deltas: SmallVec<[Delta; 2]>,
}

impl Piece {
    /// A piece written from what it says, with no bytes of an upstream's
    /// (so it is always written anew in the client's API).
    pub fn said(d: Delta) -> Self {
        Self {
            raw: bytes::Bytes::new(),
            deltas: smallvec::smallvec![d],
        }
    }

    /// Whether it carries content a client waits for.
    pub fn has_content(&self) -> bool {
        self.deltas.iter().any(Delta::is_content)
    }
}

/// The rest of a stream, polled piece by piece (not an `async fn`, whose
/// future a trait object would box at every piece).
pub trait PieceStream: Send {
    /// The next piece; `None` once the body has ended (whether it ended
    /// whole is for the reader to tell, from the terminator).
    fn poll_piece(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<Result<Piece, ProviderError>>>;
}

impl<'s> dyn PieceStream + 's {
    /// The next piece, awaited.
    pub fn piece(&mut self) -> impl std::future::Future<Output = Option<Result<Piece, ProviderError>>> + use<'_, 's> {
        std::future::poll_fn(move |cx| self.poll_piece(cx))
    }
}

/// An answer streaming in: what arrived up to its first content, and the
/// rest to read.
pub struct Live {
    /// The API the pieces are in.
    pub kind: Api,
    /// Rate-limit feedback from the response headers.
    pub rate: RateFeedback,
    /// Pieces read so far: up to and including the first with content.
    pub head: Vec<Piece>,
    /// The rest.
    pub rest: Box<dyn PieceStream>,
    /// When the call started (the output rate is measured from it).
    pub started: tokio::time::Instant,
    /// The clock the rate is measured on.
    pub clock: crate::clock::Clock,
    /// Prompt characters, for a usage estimate when the stream has none.
    pub prompt_chars: usize,
    /// Events of the stream that could not be read, skipped as they came.
    pub skipped: Arc<std::sync::atomic::AtomicU32>,
}

/// What opening a streamed call gives.
pub enum Opened {
    /// The whole answer.
    Whole(LlmResponse),
    /// The answer is streaming.
    Live(Live),
}

impl Opened {
    /// The whole answer: as it came, or read to the end of its stream.
    pub async fn whole(self) -> Result<LlmResponse, ProviderError> {
        match self {
            Opened::Whole(r) => Ok(r),
            Opened::Live(live) => live.drain().await,
        }
    }
}

impl Live {
    /// Reads the rest of the stream into a whole answer.
    pub async fn drain(mut self) -> Result<LlmResponse, ProviderError> {
        let mut acc = Assembler::default();
        for p in std::mem::take(&mut self.head) {
            p.deltas.iter().for_each(|d| acc.take(d));
        }
        loop {
            match self.rest.piece().await {
                Some(Ok(p)) => p.deltas.iter().for_each(|d| acc.take(d)),
                Some(Err(mut e)) => {
                    e.usage = self.usage_so_far(&acc);
                    return Err(e);
                }
                None => break,
            }
        }
        if !acc.finished() {
            let mut e = ProviderError::new(ErrorKind::Truncated, None, "stream ended before its answer finished");
            e.usage = self.usage_so_far(&acc);
            return Err(e);
        }
        Ok(self.answer(acc))
    }

    /// Usage as far as the stream went: what it said, else estimated.
    pub fn usage_so_far(&self, acc: &Assembler) -> crate::wire::Usage {
        let said = acc.reply().usage.unwrap_or_default();
        crate::wire::Usage {
            input: if said.input > 0 {
                said.input
            } else {
                crate::request::tokens_in_chars(self.prompt_chars)
            },
            // What a finished stream says is what was used; a cut one is
            // counted from what arrived.
            output: if acc.finished() && said.output > 0 {
                said.output
            } else {
                said.output.max(crate::request::tokens_in_chars(acc.chars()))
            },
            cached_input: said.cached_input,
        }
    }

    /// The whole answer from what was assembled.
    pub fn answer(&self, acc: Assembler) -> LlmResponse {
        let usage = self.usage_so_far(&acc);
        let elapsed = self.clock.now().saturating_duration_since(self.started);
        let skipped = self.skipped.load(std::sync::atomic::Ordering::Relaxed);
        LlmResponse::of_reply(acc.finish(), self.kind, (usage, self.rate), elapsed, skipped)
    }
}
