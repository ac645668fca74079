//! How a request ends: the one place its outcome is built, and where it is
//! counted and announced.

use super::calls::{HopResult, Tally, Tried};
use crate::outcome::{Level, Outcome};
use std::sync::Arc;
use std::time::Duration;

/// How a request ended, before its outcome is built.
#[derive(Debug)]
pub(super) struct Ended {
    /// Its level.
    pub level: Level,
    /// Its quality before rounding (ignored unless it was answered).
    pub quality: f64,
    /// The path it walked.
    pub chain: Vec<crate::outcome::Hop>,
    /// What was unavailable.
    pub missing: Vec<String>,
    /// What the user is told.
    pub user_message: Option<String>,
    /// The answer.
    pub answer: Option<Arc<str>>,
    /// Age of a cached answer (ms).
    pub stale_ms: Option<u64>,
}

impl Ended {
    /// Ended at `level`, with nothing else to say.
    pub fn at(level: Level) -> Self {
        Self {
            level,
            quality: 1.0,
            chain: Vec::new(),
            missing: Vec::new(),
            user_message: None,
            answer: None,
            stale_ms: None,
        }
    }
}

/// The outcome of `request` for `user`: how it ended, what its tally
/// spent, and how long it took. Quality is rounded to hundredths, and is 0
/// for a request that was not answered (failed or deferred).
pub(super) fn outcome(request: u64, user: &str, ended: Ended, tally: &Tally, took: Duration) -> Outcome {
    let level = ended.level;
    let answered = !matches!(level, Level::Failed | Level::Deferred);
    Outcome {
        request,
        user: user.into(),
        level,
        chain: ended.chain,
        quality: if answered {
            (ended.quality * 100.0).round() / 100.0
        } else {
            0.0
        },
        tokens: tally.tokens,
        cost_usd: tally.cost,
        missing: ended.missing,
        user_message: ended.user_message,
        answer: ended.answer,
        stale_ms: ended.stale_ms,
        attempts: tally.attempts,
        latency_ms: took.as_millis() as u64,
        key: None,
    }
}

/// The level of an answer from model `answered` after `hops`: a fallback
/// when another model than the route's first choice `primary` answered, or
/// it continued an answer another cut off.
pub(super) fn answered_level(primary: usize, answered: usize, hops: &[Tried]) -> Level {
    let continued = hops
        .iter()
        .any(|h| matches!(h.result, HopResult::Resumed | HopResult::Cut(_)));
    if answered == primary && !continued {
        Level::None
    } else {
        Level::Fallback
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(model: usize, result: HopResult) -> Tried {
        Tried {
            model,
            result,
            tries: 1,
        }
    }

    #[test]
    fn an_answer_is_a_fallback_when_another_model_gave_it_or_it_continued_a_cut_one() {
        let failed = hop(1, HopResult::Failed(crate::provider::ErrorKind::ServerError, Some(503)));
        assert_eq!(answered_level(0, 0, &[]), Level::None);
        // A cheaper tier tried first (budget pressure) and failed: the
        // route's first choice still answered.
        assert_eq!(answered_level(0, 0, std::slice::from_ref(&failed)), Level::None);
        assert_eq!(answered_level(0, 1, &[]), Level::Fallback);
        let cut = hop(
            1,
            HopResult::Cut(Box::new(crate::provider::ProviderError::new(
                crate::provider::ErrorKind::ServerError,
                None,
                "reset",
            ))),
        );
        assert_eq!(answered_level(0, 0, &[cut]), Level::Fallback);
        assert_eq!(
            answered_level(0, 0, &[failed, hop(0, HopResult::Resumed)]),
            Level::Fallback
        );
    }
}
