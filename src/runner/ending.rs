//! How a request ends: what every kind's own ending converts into
//! ([`Ended`]), the one place its level is decided ([`answered_level`];
//! unanswered requests are failed or deferred), and where its outcome is
//! built.

use super::calls::{EmbedEnd, HopResult, Tally, Tried};
use super::chat::ChatEnd;
use super::tool_call::ToolEnd;
use crate::outcome::{Level, Outcome};
use std::sync::Arc;
use std::time::Duration;

/// How a request ended, before its outcome is built: what an agent's
/// loop, a [`ChatEnd`], an [`EmbedEnd`], a [`ToolEnd`] and a request
/// dropped before its end each convert into.
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
    /// Answered with `answer` (where it is kept): partial where part of
    /// what it needed was missing, a fallback where it came from another
    /// than its first choice.
    pub fn answered(answer: Option<Arc<str>>, fallback: bool, partial: bool) -> Self {
        Self {
            answer,
            ..Self::at(answered_level(fallback, partial))
        }
    }

    /// Queued for later, its user told `told`.
    pub fn deferred(told: String) -> Self {
        Self {
            user_message: Some(told),
            ..Self::at(Level::Deferred)
        }
    }

    /// Not answered, its user told `told`.
    pub fn failed(told: Option<String>) -> Self {
        Self {
            user_message: told,
            ..Self::at(Level::Failed)
        }
    }

    /// Ended at `level`, with nothing else to say.
    fn at(level: Level) -> Self {
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

/// The level of an answer: partial where part of what it needed was
/// missing, else a fallback where it came from another than its first
/// choice, else none.
pub(super) fn answered_level(fallback: bool, partial: bool) -> Level {
    if partial {
        Level::Partial
    } else if fallback {
        Level::Fallback
    } else {
        Level::None
    }
}

/// Whether an answer from model `answered` after `hops` is a fallback:
/// another model than the route's first choice `primary` answered, or it
/// continued an answer another cut off.
pub(super) fn is_fallback(primary: usize, answered: usize, hops: &[Tried]) -> bool {
    let continued = hops
        .iter()
        .any(|h| matches!(h.result, HopResult::Resumed | HopResult::Cut(_)));
    answered != primary || continued
}

impl From<&EmbedEnd> for Ended {
    fn from(end: &EmbedEnd) -> Self {
        match end {
            EmbedEnd::Answer(_) => Ended::answered(None, false, false),
            EmbedEnd::Refused(e) => Ended::failed(Some(format!("Request refused: {e}."))),
            EmbedEnd::Unavailable(why) => Ended::failed(Some(why.clone())),
            EmbedEnd::Failed(e) => Ended::failed(Some(e.message.clone())),
        }
    }
}

impl From<&ToolEnd> for Ended {
    /// A stale answer is partial: the tool could not give today's.
    fn from(end: &ToolEnd) -> Self {
        match end {
            ToolEnd::Answer(_) => Ended::answered(None, false, false),
            ToolEnd::Stale { age, .. } => Ended {
                stale_ms: Some(age.as_millis() as u64),
                ..Ended::answered(None, false, true)
            },
            ToolEnd::Unavailable(_) | ToolEnd::Refused(_) => Ended::failed(None),
        }
    }
}

impl From<&ChatEnd> for Ended {
    /// A stream cut after its first byte is a partial answer, the rest of
    /// it missing. The answer's text and quality are the chat's to add.
    fn from(end: &ChatEnd) -> Self {
        let failed = |told| Ended::failed(Some(told));
        match end {
            ChatEnd::Answer { fallback, .. } | ChatEnd::Streamed { fallback, .. } => {
                Ended::answered(None, *fallback, false)
            }
            ChatEnd::Cut { reason, .. } => Ended {
                quality: 0.5,
                missing: vec!["rest of the answer".into()],
                user_message: Some(format!("The answer was cut off: {reason}.")),
                ..Ended::answered(None, true, true)
            },
            ChatEnd::Refused { reason, .. }
            | ChatEnd::RateLimited { reason, .. }
            | ChatEnd::Unservable { reason, .. } => failed(format!("Request refused: {reason}.")),
            ChatEnd::Unavailable { message } => failed(message.clone()),
            ChatEnd::Deadline { reason } => failed(format!("Request timed out: {reason}.")),
            ChatEnd::Upstream(e) => failed(format!("The provider refused the request: {}", e.message)),
        }
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
        let answered_level =
            |primary, answered, hops: &[Tried]| super::answered_level(is_fallback(primary, answered, hops), false);
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
