//! Whose fault each way a call can end is, and what it may move.
//!
//! Every end of one call (an attempt on a model, an embeddings call, a tool
//! call) is one [`Ending`], classified here and nowhere else: the
//! provider's fault, the caller's, or fusebox's own. Only the provider's
//! feed the shared protections (the provider's and model's breakers, the
//! adaptive concurrency limit, the target's health counts); the caller's
//! end that caller's request with a status naming the cause, and
//! fusebox's own are refused before an upstream is touched. The table in
//! `docs/blame.md` is this module in words, and a test holds the two
//! together.

use crate::provider::ErrorKind;

/// Who caused an ending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Party {
    /// The provider (or tool) called: its status, silence, bytes or pace.
    Provider,
    /// The caller: its deadline, its request, its budget, its connection.
    Caller,
    /// fusebox itself: its descriptors, its credentials, its shutdown.
    Fusebox,
}

impl Party {
    /// Its name in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            Party::Provider => "provider",
            Party::Caller => "caller",
            Party::Fusebox => "fusebox",
        }
    }
}

/// What an ending may move.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Feeds {
    /// The provider's and the model's (or the tool's) breakers count it.
    pub breaker: bool,
    /// The provider's adaptive concurrency limit learns from it.
    pub limit: bool,
    /// The target's health: counted as its failure (or success) and as
    /// letting its request down.
    pub health: bool,
}

impl Feeds {
    const ALL: Feeds = Feeds {
        breaker: true,
        limit: true,
        health: true,
    };
    const NOTHING: Feeds = Feeds {
        breaker: false,
        limit: false,
        health: false,
    };
    const NO_LIMIT: Feeds = Feeds {
        breaker: true,
        limit: false,
        health: true,
    };
}

/// Every way one call can end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It answered (slow when a whole answer took, or a stream's first
    /// token came, later than `slow_call_ms`).
    Answered,
    /// It answered with output slower than `min_tokens_per_s`, measured
    /// from its first token.
    SlowTokens,
    /// It answered with a tool call its tools' schemas do not allow.
    Semantic,
    /// 429.
    RateLimited,
    /// 503 or 529.
    Overloaded,
    /// 500, 502 and other 5xx; an answer that cannot be read.
    ServerError,
    /// No connection: refused or unreachable.
    Refused,
    /// The connection was reset.
    Reset,
    /// The stream ended before its answer did.
    Truncated,
    /// No answer within the provider's `timeout_ms`, or no first token
    /// within the model's `first_token_timeout_ms` and the prompt's share.
    Timeout,
    /// The caller's deadline (`x-fusebox-deadline-ms`) passed first.
    Deadline,
    /// The caller left (closed its connection or cancelled).
    Left,
    /// The caller stopped reading its stream.
    Stalled,
    /// The caller never finished sending its body.
    BodyUnfinished,
    /// The upstream refused the caller's request as malformed (400, 404, 422).
    BadRequest,
    /// The request is too long for the model (413, context length).
    TooLarge,
    /// The model's API cannot carry what the caller asked.
    Unsupported,
    /// Cut or refused at the caller's budget.
    OverBudget,
    /// The provider refused fusebox's credentials (401, 403).
    Credentials,
    /// fusebox's account with the provider is out of funds (402).
    Balance,
    /// fusebox is out of file descriptors: refused before any upstream.
    Descriptors,
    /// Cut by fusebox's drain at shutdown.
    Drained,
    /// A continuation of a cut stream stopped by fusebox: it did not line
    /// up with what the client had (how models write, which fusebox could
    /// not splice).
    Unaligned,
}

impl Ending {
    /// Every ending, in the order of the table.
    pub const ALL: [Ending; 23] = [
        Ending::Answered,
        Ending::SlowTokens,
        Ending::Semantic,
        Ending::RateLimited,
        Ending::Overloaded,
        Ending::ServerError,
        Ending::Refused,
        Ending::Reset,
        Ending::Truncated,
        Ending::Timeout,
        Ending::Deadline,
        Ending::Left,
        Ending::Stalled,
        Ending::BodyUnfinished,
        Ending::BadRequest,
        Ending::TooLarge,
        Ending::Unsupported,
        Ending::OverBudget,
        Ending::Credentials,
        Ending::Balance,
        Ending::Descriptors,
        Ending::Drained,
        Ending::Unaligned,
    ];

    /// Its name in the table.
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Answered => "answered",
            Ending::SlowTokens => "slow tokens",
            Ending::Semantic => "semantic",
            Ending::RateLimited => "rate limited",
            Ending::Overloaded => "overloaded",
            Ending::ServerError => "server error",
            Ending::Refused => "refused",
            Ending::Reset => "reset",
            Ending::Truncated => "truncated",
            Ending::Timeout => "timeout",
            Ending::Deadline => "deadline",
            Ending::Left => "left",
            Ending::Stalled => "stalled",
            Ending::BodyUnfinished => "body unfinished",
            Ending::BadRequest => "bad request",
            Ending::TooLarge => "too large",
            Ending::Unsupported => "unsupported",
            Ending::OverBudget => "over budget",
            Ending::Credentials => "credentials",
            Ending::Balance => "balance",
            Ending::Descriptors => "descriptors",
            Ending::Drained => "drained",
            Ending::Unaligned => "unaligned",
        }
    }

    /// Whose fault it is.
    pub fn party(self) -> Party {
        match self {
            Ending::Answered
            | Ending::SlowTokens
            | Ending::Semantic
            | Ending::RateLimited
            | Ending::Overloaded
            | Ending::ServerError
            | Ending::Refused
            | Ending::Reset
            | Ending::Truncated
            | Ending::Timeout => Party::Provider,
            Ending::Deadline
            | Ending::Left
            | Ending::Stalled
            | Ending::BodyUnfinished
            | Ending::BadRequest
            | Ending::TooLarge
            | Ending::Unsupported
            | Ending::OverBudget => Party::Caller,
            Ending::Credentials | Ending::Balance | Ending::Descriptors | Ending::Drained | Ending::Unaligned => {
                Party::Fusebox
            }
        }
    }

    /// What it may move: only the provider's endings move anything; of
    /// those, only an answer (its response time) and an overload (429,
    /// 503, 529) say something of the provider's capacity.
    pub fn feeds(self) -> Feeds {
        match (self.party(), self) {
            (Party::Provider, Ending::Answered | Ending::RateLimited | Ending::Overloaded) => Feeds::ALL,
            (Party::Provider, _) => Feeds::NO_LIMIT,
            _ => Feeds::NOTHING,
        }
    }

    /// How a failed call ends, by its error's kind.
    pub fn of(kind: ErrorKind) -> Ending {
        match kind {
            ErrorKind::RateLimited => Ending::RateLimited,
            ErrorKind::Overloaded => Ending::Overloaded,
            ErrorKind::ServerError => Ending::ServerError,
            ErrorKind::Timeout => Ending::Timeout,
            ErrorKind::Connect => Ending::Refused,
            ErrorKind::Reset => Ending::Reset,
            ErrorKind::Truncated => Ending::Truncated,
            ErrorKind::BadRequest | ErrorKind::NotFound | ErrorKind::Unprocessable => Ending::BadRequest,
            ErrorKind::Auth => Ending::Credentials,
            ErrorKind::InsufficientBalance => Ending::Balance,
            ErrorKind::TooLarge => Ending::TooLarge,
            ErrorKind::Unsupported => Ending::Unsupported,
            ErrorKind::Deadline => Ending::Deadline,
            ErrorKind::Local => Ending::Descriptors,
            ErrorKind::Left => Ending::Left,
            ErrorKind::Drained => Ending::Drained,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_providers_endings_move_anything() {
        for e in Ending::ALL {
            let f = e.feeds();
            assert_eq!(
                f.breaker || f.limit || f.health,
                e.party() == Party::Provider,
                "{}",
                e.as_str()
            );
        }
    }
}
