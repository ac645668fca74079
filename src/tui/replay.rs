//! What the console shows of a replay, read through an interface whatever
//! drives the replay implements: the console knows nothing of how.

use crate::outcome::Level;

/// A replay's progress, as the console reads it.
pub trait ReplayView: Send + Sync {
    /// How the replay ended (None while it runs): what it did, or why it
    /// stopped.
    fn ended(&self) -> Option<Result<String, String>>;

    /// The recorded outcome of `request`, if read and still kept.
    fn recorded(&self, request: u64) -> Option<Recorded>;
}

/// A request's outcome as the log recorded it.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// Its level.
    pub level: Level,
    /// Its quality.
    pub quality: f64,
    /// Tokens it used.
    pub tokens: u64,
    /// Its chain, hop by hop.
    pub chain: Vec<String>,
}
