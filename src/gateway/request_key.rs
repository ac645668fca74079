//! Every answer names its request (`x-fusebox-request-id`), so a client's
//! log line, the console, a recording and a trace can be matched up: the
//! caller's own `x-request-id` when it sent a usable one, else one made
//! here, unique across instances and restarts.
//!
//! A name in the form made here (`fb-…`) is only ever one fusebox made,
//! so it names one request: a caller's id in that form (another request's
//! guessed, or made up) is not taken. A caller's own id is its label,
//! kept as sent even where it repeats (a retry, another caller's): fusebox
//! keeps requests apart by its own request number, which every place the
//! name is shown carries beside it (the recording's `id`, the trace's
//! `fusebox.request.id`, the console's `#N`).

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tower::{Layer, Service};

/// The caller's own id, kept when usable.
const H_CALLER_ID: &str = "x-request-id";
/// The longest caller's id kept.
pub const MAX_LEN: usize = 128;
/// How the names made here begin (in any case, not a caller's).
const MADE: &[u8] = b"fb-";

/// A request's name, in its extensions.
#[derive(Clone, Debug)]
pub struct RequestKey(pub Arc<str>);

/// Makes request names: this process's mark, then a count.
pub struct Keys {
    mark: String,
    next: AtomicU64,
}

impl Default for Keys {
    /// Names for this process: its mark from the start time and pid, so
    /// two instances, or one restarted, do not name two requests alike.
    fn default() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mark = nanos ^ (u64::from(std::process::id()) << 40);
        Self {
            mark: format!("fb-{:010x}", mark & 0xff_ffff_ffff),
            next: AtomicU64::new(1),
        }
    }
}

impl Keys {
    /// The name of a request sent with `caller`'s `x-request-id` (kept
    /// when it is 1 to [`MAX_LEN`] visible ASCII characters, not in the
    /// form of the names made here).
    fn name(&self, caller: Option<&HeaderValue>) -> Arc<str> {
        match caller.map(HeaderValue::as_bytes) {
            Some(b)
                if (1..=MAX_LEN).contains(&b.len())
                    && b.iter().all(|c| (0x21..=0x7e).contains(c))
                    && !b.get(..MADE.len()).is_some_and(|p| p.eq_ignore_ascii_case(MADE)) =>
            {
                Arc::from(String::from_utf8_lossy(b).as_ref())
            }
            _ => {
                let mut n = itoa::Buffer::new();
                let n = n.format(self.next.fetch_add(1, Ordering::Relaxed));
                // Put together in place (up to 24 bytes, nearly always): the
                // name is allocated once, as itself.
                let mut name = compact_str::CompactString::const_new("");
                name.push_str(&self.mark);
                name.push('-');
                name.push_str(n);
                Arc::from(name.as_str())
            }
        }
    }
}

/// The layer naming each request (in its extensions, for the handlers)
/// and its answer, whatever the answer is. A layer of its own rather than
/// a middleware function, which would box every request's future.
#[derive(Clone, Default)]
pub struct Tag(Arc<Keys>);

impl<S> Layer<S> for Tag {
    type Service = Tagged<S>;

    fn layer(&self, inner: S) -> Tagged<S> {
        Tagged {
            inner,
            keys: self.0.clone(),
        }
    }
}

/// A service whose requests and answers are named.
#[derive(Clone)]
pub struct Tagged<S> {
    inner: S,
    keys: Arc<Keys>,
}

impl<S, E> Service<Request> for Tagged<S>
where
    S: Service<Request, Response = Response, Error = E>,
{
    type Response = Response;
    type Error = E;
    type Future = Named<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), E>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        let key = self.keys.name(req.headers().get(H_CALLER_ID));
        req.extensions_mut().insert(RequestKey(key.clone()));
        Named {
            answer: self.inner.call(req),
            key,
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's answer, to be named.
    pub struct Named<F> {
        #[pin]
        answer: F,
        key: Arc<str>,
    }
}

impl<F, E> Future for Named<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut resp = std::task::ready!(this.answer.poll(cx))?;
        if let Ok(v) = HeaderValue::try_from(this.key.as_ref()) {
            const NAME: HeaderName = HeaderName::from_static(crate::wire::fusebox::REQUEST_ID);
            resp.headers_mut().insert(NAME, v);
        }
        Poll::Ready(Ok(resp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usable_caller_id_is_kept_and_any_other_replaced() {
        let keys = Keys::default();
        let kept = keys.name(Some(&HeaderValue::from_static("req-abc_123")));
        assert_eq!(&*kept, "req-abc_123");
        let long = "x".repeat(MAX_LEN + 1);
        for bad in [
            HeaderValue::from_static("has space"),
            HeaderValue::try_from(long).unwrap(),
        ] {
            assert!(keys.name(Some(&bad)).starts_with("fb-"), "{bad:?}");
        }
        let (a, b) = (keys.name(None), keys.name(None));
        assert_ne!(a, b);
        assert!(a.starts_with(&keys.mark));
    }

    /// An id in fusebox's own form names only the request fusebox gave it
    /// to: a caller sending one (another request's, or made up) gets one
    /// made here. A caller's own id is its label, kept as sent, even twice.
    #[test]
    fn a_caller_s_id_in_fusebox_s_form_is_replaced_and_its_own_kept_as_sent() {
        let keys = Keys::default();
        let made = keys.name(None);
        for forged in [&*made, "fb-0123456789-7", "FB-anything"] {
            let named = keys.name(Some(&HeaderValue::from_str(forged).unwrap()));
            assert!(
                named.starts_with(&keys.mark) && &*named != forged && named != made,
                "{forged}: {named}"
            );
        }
        let own = HeaderValue::from_static("req-1");
        assert_eq!((&*keys.name(Some(&own)), &*keys.name(Some(&own))), ("req-1", "req-1"));
    }
}
