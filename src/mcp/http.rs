//! The HTTP client of a `url` server's sessions: rmcp's own reqwest client
//! settings, one client per server (no idle connection pooled: a reused one can stall 40 ms on a delayed
//! ACK where a stream was left unread; same-origin 307/308 followed), and
//! a signal once the session's general stream (the GET stream) is up. A
//! server sends what it asks unrelated to a request there (the reference
//! server's elicitations and sampling requests), and drops it while no
//! such stream is open, so a session opened for a call is used once it is
//! up (or once the server says it has none).

use futures_util::stream::BoxStream;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse, StreamableHttpResponseLimits,
};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::watch;

type Headers = HashMap<http::HeaderName, http::HeaderValue>;
type Failed = StreamableHttpError<reqwest_mcp::Error>;

/// rmcp's reqwest client, telling when the general stream is up.
#[derive(Clone)]
pub struct Watched {
    inner: reqwest_mcp::Client,
    up: Arc<watch::Sender<bool>>,
}

/// The most redirects followed for one request.
const MAX_REDIRECTS: usize = 10;

/// The HTTP client a server's sessions share (its TLS roots are loaded
/// once; it keeps no connection to share).
pub fn client() -> Result<reqwest_mcp::Client, reqwest_mcp::Error> {
    // As rmcp's own: only same-origin 307 and 308 keep the message and do
    // not replay the session's headers to another host.
    let redirects = reqwest_mcp::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(attempt.status().as_u16(), 307 | 308);
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
        } else {
            attempt.follow()
        }
    });
    reqwest_mcp::Client::builder()
        .pool_max_idle_per_host(0)
        .redirect(redirects)
        .build()
}

impl Watched {
    /// One session's use of `inner`, and what turns true once its general
    /// stream is up (or the server said it has none).
    pub fn new(inner: reqwest_mcp::Client) -> (Self, watch::Receiver<bool>) {
        let (up, seen) = watch::channel(false);
        (
            Self {
                inner,
                up: Arc::new(up),
            },
            seen,
        )
    }

    /// The general stream's opening ended (up, or refused): say so.
    fn opened<T>(&self, last_event_id: &Option<String>, r: T) -> T {
        if last_event_id.is_none() {
            self.up.send_replace(true);
        }
        r
    }
}

impl StreamableHttpClient for Watched {
    type Error = reqwest_mcp::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<StreamableHttpPostResponse, Failed> {
        self.inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> Result<StreamableHttpPostResponse, Failed> {
        self.inner
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: Headers,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, Failed> {
        self.inner
            .post_message_with_response_limits(uri, message, session_id, auth_header, custom_headers, limits)
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<(), Failed> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
    ) -> Result<BoxStream<'static, Result<sse_stream::Sse, SseError>>, Failed> {
        let r = self
            .inner
            .get_stream(uri, session_id, last_event_id.clone(), auth_header, custom_headers)
            .await;
        self.opened(&last_event_id, r)
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: Headers,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<sse_stream::Sse, SseError>>, Failed> {
        let r = self
            .inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id.clone(),
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await;
        self.opened(&last_event_id, r)
    }
}
