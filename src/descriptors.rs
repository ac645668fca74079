//! File descriptors as a bounded resource. At start the soft limit is
//! raised to the hard one ([`raise`]); from then on every client connection
//! and every upstream call holds one of the process's descriptors
//! ([`take`]), all but a reserve kept for what is not counted (the
//! listener, logs, the recorder, Redis, idle pooled upstream sockets).
//! Connections and calls each have half, so that every connection open can
//! make its call. When they run out fusebox refuses the work itself — a
//! connection closed at accept, a call answered 503 before any upstream is
//! touched — rather than have the kernel refuse it a socket (EMFILE), which
//! would look like the provider's failure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Descriptors held back from the counted ones: a fixed part, and a
/// sixteenth of the limit.
const RESERVE: u64 = 128;

/// What holds a descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::Display)]
pub enum Use {
    /// A client's connection.
    #[strum(to_string = "client connections")]
    Connection,
    /// An upstream call's socket.
    #[strum(to_string = "upstream calls")]
    Call,
}

/// The descriptors counted under one open-file limit: each use's half.
#[derive(Debug)]
pub struct Descriptors {
    halves: [Arc<Semaphore>; 2],
    usable: u64,
    limit: u64,
    refused: AtomicU64,
}

/// One descriptor held, given back on drop.
#[derive(Debug)]
#[must_use = "the descriptor is given back when this is dropped"]
pub struct Held(#[allow(dead_code, reason = "held for its drop")] Option<OwnedSemaphorePermit>);

/// The descriptors as `/metrics` shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct View {
    /// Held now (connections and upstream calls).
    pub in_use: u64,
    /// The most that may be held (0: not bounded).
    pub usable: u64,
    /// The process's soft limit on open files (0: not read).
    pub limit: u64,
    /// Upstream calls refused for want of one.
    pub refused: u64,
}

impl Descriptors {
    /// The descriptors of `limit` open files, less the reserve.
    pub fn new(limit: u64) -> Self {
        let usable = limit
            .saturating_sub(RESERVE + limit / 16)
            .min(Semaphore::MAX_PERMITS as u64);
        let half = || Arc::new(Semaphore::new((usable / 2) as usize));
        Self {
            halves: [half(), half()],
            usable: usable / 2 * 2,
            limit,
            refused: AtomicU64::new(0),
        }
    }

    /// One descriptor for `what`, or none when its half is all held.
    pub fn take(&self, what: Use) -> Option<Held> {
        let sem = &self.halves[what as usize];
        sem.clone().try_acquire_owned().ok().map(|p| Held(Some(p)))
    }

    /// One descriptor for `what`, waiting up to `within` for one.
    pub async fn take_within(&self, what: Use, within: Duration) -> Option<Held> {
        let sem = self.halves[what as usize].clone();
        match tokio::time::timeout(within, sem.acquire_owned()).await {
            Ok(Ok(p)) => Some(Held(Some(p))),
            _ => None,
        }
    }

    /// Counts an upstream call refused for want of one; how many so far.
    pub fn refuse(&self) -> u64 {
        self.refused.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// What it has no descriptor left for, if anything.
    pub fn spent(&self) -> Option<Use> {
        [Use::Connection, Use::Call]
            .into_iter()
            .find(|&u| self.halves[u as usize].available_permits() == 0)
    }

    /// The descriptors now.
    pub fn view(&self) -> View {
        let free: u64 = self.halves.iter().map(|h| h.available_permits() as u64).sum();
        View {
            in_use: self.usable.saturating_sub(free),
            usable: self.usable,
            limit: self.limit,
            refused: self.refused.load(Ordering::Relaxed),
        }
    }
}

/// The process's descriptors, once bounded (unbounded before).
static PROCESS: OnceLock<Descriptors> = OnceLock::new();

/// Raises the soft limit on open files to the hard one and counts the
/// process's descriptors under it; the limit now. Once, at start.
pub fn raise() -> std::io::Result<u64> {
    let soft = rlimit::increase_nofile_limit(u64::MAX)?;
    let _ = PROCESS.set(Descriptors::new(soft));
    Ok(soft)
}

/// How many client connections the process's descriptors leave room for
/// (each beside its upstream call), once bounded.
pub fn connection_room() -> Option<u64> {
    PROCESS.get().map(|d| d.usable / 2).filter(|&n| n > 0)
}

/// One of the process's descriptors for `what`, or none.
pub fn take(what: Use) -> Option<Held> {
    match PROCESS.get() {
        Some(d) => d.take(what),
        None => Some(Held(None)),
    }
}

/// One of the process's descriptors for `what`, waiting up to `within`.
pub async fn take_within(what: Use, within: Duration) -> Option<Held> {
    match PROCESS.get() {
        Some(d) => d.take_within(what, within).await,
        None => Some(Held(None)),
    }
}

/// Counts an upstream call refused for want of a descriptor, and says so
/// in the log at most once a second.
pub fn refused() {
    static SAID_AT: AtomicU64 = AtomicU64::new(0);
    let Some(d) = PROCESS.get() else { return };
    let n = d.refuse();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_secs());
    if SAID_AT.swap(now, Ordering::Relaxed) != now {
        let v = d.view();
        tracing::warn!(
            in_use = v.in_use,
            usable = v.usable,
            limit = v.limit,
            refused = n,
            "out of file descriptors: calls refused before any upstream (raise `ulimit -n`, or lower --max-connections)"
        );
    }
}

/// The process's descriptors now.
pub fn view() -> View {
    PROCESS.get().map(Descriptors::view).unwrap_or_default()
}

/// What the process has no descriptor left for (its half all held), if
/// anything: it refuses such work until one is given back.
pub fn spent() -> Option<Use> {
    PROCESS.get().and_then(Descriptors::spent)
}

/// Whether `e`, or an error it was caused by, is the kernel refusing a
/// descriptor (EMFILE, ENFILE).
pub fn exhausted(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |e| e.source()).any(|e| {
        e.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::raw_os_error)
            .is_some_and(|code| code == 24 || code == 23)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_and_calls_each_have_half_of_the_limit_less_the_reserve() {
        // 256 open files: 128 and a sixteenth held back, 56 a use.
        let d = Descriptors::new(256);
        assert_eq!(d.spent(), None);
        let conns: Vec<_> = std::iter::from_fn(|| d.take(Use::Connection)).collect();
        assert_eq!(conns.len(), 56);
        assert_eq!(d.spent(), Some(Use::Connection), "what readiness refuses on");
        let calls: Vec<_> = std::iter::from_fn(|| d.take(Use::Call)).collect();
        assert_eq!(calls.len(), 56, "connections take none of the calls' half");
        assert_eq!(d.view().in_use, 112);
        drop(calls);
        assert_eq!(
            d.view(),
            View {
                in_use: 56,
                usable: 112,
                limit: 256,
                refused: 0
            }
        );
        assert!(d.take(Use::Call).is_some());
        drop(conns);
        assert_eq!(d.spent(), None);
        assert_eq!(Use::Call.to_string(), "upstream calls");
    }

    #[test]
    fn the_kernel_refusing_a_descriptor_is_told_from_other_io_errors() {
        let emfile = std::io::Error::from_raw_os_error(24);
        assert!(exhausted(&emfile));
        let refused = std::io::Error::from_raw_os_error(111);
        assert!(!exhausted(&refused));
    }
}
