//! Request ids, from 1 (as in the demo), shared by chat, embeddings and
//! MCP calls so that a recording names each request once; with traces on,
//! each caller's `traceparent` is kept for its request's spans.

use super::{Parents, TraceParent};
use http::HeaderMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// The gateway's request ids.
pub struct RequestIds {
    next: AtomicU64,
    parents: Option<Parents>,
}

impl RequestIds {
    /// Ids from 1; callers' spans are noted in `parents` when traces are on.
    pub fn new(parents: Option<Parents>) -> Self {
        RequestIds {
            next: AtomicU64::new(1),
            parents,
        }
    }

    /// The id of a request that came with `headers`.
    pub fn next(&self, headers: &HeaderMap) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        if let Some(p) = &self.parents {
            let parent = headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .and_then(TraceParent::parse);
            if let Some(tp) = parent {
                p.set(id, tp);
            }
        }
        id
    }
}
