//! What the console shows of a replay: how it ended, and each request's
//! recorded outcome.

use super::driver::Replayed;
use crate::traffic::log::{LogError, OutcomeRec};
use parking_lot::Mutex;

/// How a replay under the console ended, for its header: what it did, or
/// why it stopped.
#[derive(Debug, Default)]
pub struct ReplayEnd(Mutex<Option<Result<String, String>>>);

impl ReplayEnd {
    /// Notes the replay's result.
    pub fn set(&self, result: &Result<Replayed, LogError>) {
        *self.0.lock() = Some(match result {
            Ok(r) => Ok(format!(
                "{} requests, {} lost{}{}",
                r.requests,
                r.lost,
                r.skipped(),
                match r.operator_refused.len() {
                    0 => String::new(),
                    n => format!(", {n} recorded operator action(s) not applicable"),
                }
            )),
            Err(e) => Err(e.to_string()),
        });
    }

    /// The result, once the replay ended.
    pub fn get(&self) -> Option<Result<String, String>> {
        self.0.lock().clone()
    }
}

/// The recorded outcomes of the requests being replayed, for the console's
/// recorded-vs-replayed view: the most recent ones, bounded.
pub struct RecordedOutcomes {
    inner: Mutex<lru::LruCache<u64, OutcomeRec>>,
}

impl std::fmt::Debug for RecordedOutcomes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordedOutcomes")
            .field("kept", &self.inner.lock().len())
            .finish()
    }
}

impl Default for RecordedOutcomes {
    fn default() -> Self {
        Self {
            inner: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(100_000).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
        }
    }
}

impl RecordedOutcomes {
    /// Keeps an outcome read from the log.
    pub fn add(&self, o: OutcomeRec) {
        self.inner.lock().put(o.request.n(), o);
    }

    /// The recorded outcome of `request`, if read and still kept.
    pub fn get(&self, request: u64) -> Option<OutcomeRec> {
        self.inner.lock().peek(&request).cloned()
    }
}
