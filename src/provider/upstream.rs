//! The HTTP client providers' and HTTP tools' calls go out on.
//!
//! Calls are built as reqwest requests. Over HTTPS, or through a proxy the
//! environment names, reqwest sends them. Over plain HTTP with no proxy
//! they go straight to hyper's pooled client, the one reqwest itself runs
//! on, with the same connection settings: reqwest's layers around it
//! (redirects, which fusebox never follows; protocol retries, which
//! HTTP/1.1 cannot need; the request's URL parsed again twice, its headers
//! cloned, its answer's body wrapped thrice) cost about a fifth of a whole
//! proxied answer's work. The bytes on the wire are the same either way
//! (reqwest's default `accept: */*` included); the answer is read one way
//! ([`Answer`]).

use super::ProviderError;
use crate::descriptors::{self, Held};
use hyper_util::client::legacy::connect::HttpConnector;
use std::task::Poll;
use std::time::Duration;

type Direct = hyper_util::client::legacy::Client<HttpConnector, reqwest::Body>;

/// The providers' and tools' client (see the module docs); clones share
/// its connection pools.
#[derive(Clone)]
pub struct Upstream {
    client: reqwest::Client,
    /// Plain-HTTP calls' client, when no proxy is in the way.
    direct: Option<Direct>,
}

/// How long a connection may take to open.
const CONNECT: Duration = Duration::from_secs(10);
/// How long an idle connection is kept.
const IDLE: Duration = Duration::from_secs(90);
/// Idle sockets are descriptors no call counts: kept few (see
/// `descriptors`), enough for a steady load's reuse.
const IDLE_PER_HOST: usize = 64;

impl Upstream {
    /// The client; plain-HTTP calls go to hyper's unless a proxy is named.
    pub fn new() -> Result<Self, super::http::SetupError> {
        Ok(Self {
            client: client()?,
            direct: (!proxied()).then(direct),
        })
    }

    /// A POST to `url`.
    pub fn post(&self, url: impl reqwest::IntoUrl) -> reqwest::RequestBuilder {
        self.client.post(url)
    }

    /// A `method` request to `url`.
    pub fn request(&self, method: reqwest::Method, url: impl reqwest::IntoUrl) -> reqwest::RequestBuilder {
        self.client.request(method, url)
    }

    /// Sends `b` to `provider`, holding one of the process's descriptors
    /// for its socket (the caller keeps the hold while it reads the
    /// answer). None left is fusebox's own refusal, made before the
    /// upstream is touched. `known` is the provider's usual URL, parsed
    /// once: a call to it is not parsed again.
    pub async fn send(
        &self,
        provider: &str,
        b: reqwest::RequestBuilder,
        known: Option<&KnownUrl>,
    ) -> Result<(Answer, Held), ProviderError> {
        let Some(fd) = descriptors::take(descriptors::Use::Call) else {
            descriptors::refused();
            return Err(super::http::no_descriptor(provider));
        };
        let req = b.build().map_err(|e| super::http::transport_error(provider, &e))?;
        let resp = match &self.direct {
            Some(direct) if req.url().scheme() == "http" => send_direct(direct, provider, req, known).await?,
            _ => Answer::Reqwest(
                self.client
                    .execute(req)
                    .await
                    .map_err(|e| super::http::transport_error(provider, &e))?,
            ),
        };
        Ok((resp, fd))
    }
}

/// reqwest's client, for what goes over HTTPS (and so perhaps HTTP/2,
/// whose refused streams and graceful shutdowns reqwest retries) or
/// through a proxy.
fn client() -> Result<reqwest::Client, super::http::SetupError> {
    reqwest::Client::builder()
        // A provider's redirect is passed back as it came, not followed.
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(CONNECT)
        .pool_idle_timeout(IDLE)
        .pool_max_idle_per_host(IDLE_PER_HOST)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| super::http::SetupError::Client(e.to_string()))
}

/// Whether the environment names a proxy for plain HTTP, as reqwest reads
/// it (then reqwest sends those calls, through it).
fn proxied() -> bool {
    ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()))
}

/// hyper's client as reqwest configures it for `http://` (reqwest's
/// defaults for keep-alive probes, fusebox's for the rest).
fn direct() -> Direct {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.set_connect_timeout(Some(CONNECT));
    http.set_keepalive(Some(Duration::from_secs(15)));
    http.set_keepalive_interval(Some(Duration::from_secs(15)));
    http.set_keepalive_retries(Some(3));
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .pool_idle_timeout(IDLE)
        .pool_max_idle_per_host(IDLE_PER_HOST)
        .build(http)
}

/// Sends `req` on hyper's client.
async fn send_direct(
    direct: &Direct,
    provider: &str,
    mut req: reqwest::Request,
    known: Option<&KnownUrl>,
) -> Result<Answer, ProviderError> {
    use reqwest::header::{HeaderValue, ACCEPT};
    let uri = match known.filter(|t| t.url == *req.url()) {
        Some(t) => t.uri.clone(),
        None => req.url().as_str().parse().map_err(|e| {
            let why = format!(
                "{provider}: cannot send to {}: {e}",
                super::http::without_query(req.url().as_str())
            );
            // A URL hyper cannot take (a model's name in it, say) is no
            // fault of the provider's: the model is skipped.
            ProviderError::new(super::ErrorKind::Unsupported, None, why)
        })?,
    };
    let mut out = http::Request::new(req.body_mut().take().unwrap_or_else(|| bytes::Bytes::new().into()));
    *out.method_mut() = req.method().clone();
    *out.uri_mut() = uri;
    *out.headers_mut() = std::mem::take(req.headers_mut());
    // What reqwest sends unless told otherwise.
    out.headers_mut()
        .entry(ACCEPT)
        .or_insert(HeaderValue::from_static("*/*"));
    let resp = direct
        .request(out)
        .await
        .map_err(|e| super::http::transport_error(provider, &e))?;
    Ok(Answer::Direct(resp))
}

/// A URL parsed once for either client: reqwest's `Url`, hyper's `Uri`.
#[derive(Clone, Debug)]
pub struct KnownUrl {
    /// reqwest's.
    pub url: reqwest::Url,
    uri: http::Uri,
}

impl KnownUrl {
    /// `s` parsed, if it is a URL both take.
    pub fn parse(s: &str) -> Option<Self> {
        let url = reqwest::Url::parse(s).ok()?;
        let uri = url.as_str().parse().ok()?;
        Some(Self { url, uri })
    }
}

/// A failed read of an answer's body.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// A provider's answer, as the client that sent its call got it.
pub enum Answer {
    /// reqwest's.
    Reqwest(reqwest::Response),
    /// hyper's, read as it comes off the connection.
    Direct(http::Response<hyper::body::Incoming>),
}

impl Answer {
    /// Its status.
    pub fn status(&self) -> http::StatusCode {
        match self {
            Answer::Reqwest(r) => r.status(),
            Answer::Direct(r) => r.status(),
        }
    }

    /// Its headers.
    pub fn headers(&self) -> &http::HeaderMap {
        match self {
            Answer::Reqwest(r) => r.headers(),
            Answer::Direct(r) => r.headers(),
        }
    }

    /// Its body.
    pub fn into_body(self) -> AnswerBody {
        match self {
            Answer::Reqwest(r) => AnswerBody::Reqwest(Box::pin(r.bytes_stream())),
            Answer::Direct(r) => AnswerBody::Direct(r.into_body()),
        }
    }
}

/// An answer's body, read chunk by chunk.
pub enum AnswerBody {
    /// reqwest's.
    Reqwest(std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>),
    /// hyper's.
    Direct(hyper::body::Incoming),
}

impl AnswerBody {
    /// The next chunk of the body; `None` at its end.
    pub fn poll_data(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<Result<bytes::Bytes, BodyError>>> {
        use http_body::Body;
        match self {
            AnswerBody::Reqwest(s) => s.as_mut().poll_next(cx).map(|c| c.map(|c| c.map_err(Into::into))),
            AnswerBody::Direct(b) => loop {
                match std::task::ready!(std::pin::Pin::new(&mut *b).poll_frame(cx)) {
                    // Trailers carry no data.
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => return Poll::Ready(Some(Ok(data))),
                        Err(_) => continue,
                    },
                    Some(Err(e)) => return Poll::Ready(Some(Err(e.into()))),
                    None => return Poll::Ready(None),
                }
            },
        }
    }

    /// The next chunk of the body; `None` at its end.
    pub async fn next(&mut self) -> Option<Result<bytes::Bytes, BodyError>> {
        std::future::poll_fn(|cx| self.poll_data(cx)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// One request's bytes as a loopback server got them, answered `ok`;
    /// its URL `known` beforehand or not.
    async fn received(up: Upstream, known: bool) -> (Vec<u8>, bytes::Bytes) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/v1/chat/completions?x=1");
        let known = known.then(|| KnownUrl::parse(&url).unwrap());
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            // The head, then the body its length names.
            while !got.windows(4).any(|w| w == b"\r\n\r\n") || !got.ends_with(b"{\"a\":1}") {
                let n = sock.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended early: {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&buf[..n]);
            }
            sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .unwrap();
            got
        });
        let b = up
            .post(url.as_str())
            .header("x-one", "1")
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .bearer_auth("k")
            .body(r#"{"a":1}"#);
        let (answer, _fd) = up.send("p", b, known.as_ref()).await.unwrap();
        assert_eq!(answer.status(), 200);
        let body = super::super::http::read_body("p", answer).await.unwrap();
        (server.await.unwrap(), body)
    }

    #[tokio::test]
    async fn hyper_sends_the_bytes_reqwest_sends_and_reads_the_same_answer() {
        let via_reqwest = Upstream {
            client: client().unwrap(),
            direct: None,
        };
        let direct = Upstream {
            client: client().unwrap(),
            direct: Some(direct()),
        };
        assert!(direct.direct.is_some());
        let (a, body_a) = received(via_reqwest, false).await;
        let (b, body_b) = received(direct.clone(), false).await;
        // The URL known beforehand, as a provider's own.
        let (c, _) = received(direct, true).await;
        let text = String::from_utf8_lossy(&a);
        assert!(
            text.starts_with("POST /v1/chat/completions?x=1 HTTP/1.1\r\n") && text.contains("accept: */*\r\n"),
            "{text}"
        );
        // The port differs between the servers; nothing else may.
        let same = |x: &[u8]| {
            let t = String::from_utf8_lossy(x).to_string();
            let host = t.find("host: ").unwrap();
            let end = host + t[host..].find("\r\n").unwrap();
            format!("{}{}", &t[..host], &t[end..])
        };
        assert_eq!(same(&a), same(&b));
        assert_eq!(same(&a), same(&c));
        assert_eq!((body_a.as_ref(), body_b.as_ref()), (&b"ok"[..], &b"ok"[..]));
    }
}
