//! The HTTP client providers' and HTTP tools' calls go out on.
//!
//! A call is made as the HTTP request it is ([`HttpCall`]: its pieces typed
//! once, not converted and checked again per call as reqwest's request
//! builder does). Over HTTPS, or through a proxy the environment names,
//! reqwest sends it. Over plain HTTP with no proxy it goes straight to
//! hyper's pooled client, the one reqwest itself runs on, with the same
//! connection settings: reqwest's layers around it
//! (redirects, which fusebox never follows; protocol retries, which
//! HTTP/1.1 cannot need; the request's URL parsed again twice, its headers
//! cloned, its answer's body wrapped thrice) cost about a fifth of a whole
//! proxied answer's work. The bytes on the wire are the same either way
//! (reqwest's default `accept: */*` and hyper's `host` included); the
//! answer is read one way ([`Answer`]).

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

    /// Sends `call` to `provider`, holding one of the process's
    /// descriptors for its socket (the caller keeps the hold while it reads
    /// the answer). None left is fusebox's own refusal, made before the
    /// upstream is touched.
    pub async fn send(&self, provider: &str, call: HttpCall<'_>) -> Result<(Answer, Held), ProviderError> {
        let Some(fd) = descriptors::take(descriptors::Use::Call) else {
            descriptors::refused();
            return Err(super::http::no_descriptor(provider));
        };
        let resp = match &self.direct {
            Some(direct) if call.url().scheme() == "http" => send_direct(direct, provider, call).await?,
            _ => {
                let mut req = reqwest::Request::new(call.method, call.to.into_url());
                *req.headers_mut() = call.headers;
                *req.body_mut() = Some(call.body.into());
                Answer::Reqwest(
                    self.client
                        .execute(req)
                        .await
                        .map_err(|e| super::http::transport_error(provider, &e))?,
                )
            }
        };
        Ok((resp, fd))
    }
}

/// One call: method, URL, headers and body, each already what goes out.
pub struct HttpCall<'a> {
    method: http::Method,
    to: To<'a>,
    headers: http::HeaderMap,
    body: bytes::Bytes,
}

/// Where a call goes.
enum To<'a> {
    /// A provider's usual URL, parsed when the provider was made.
    Known(&'a KnownUrl),
    /// Any other.
    Url(reqwest::Url),
}

impl To<'_> {
    fn into_url(self) -> reqwest::Url {
        match self {
            To::Known(k) => k.url.clone(),
            To::Url(u) => u,
        }
    }
}

impl<'a> HttpCall<'a> {
    /// A `method` call to `url`, with no headers and an empty body.
    pub fn new(method: http::Method, url: reqwest::Url) -> Self {
        Self::to(method, To::Url(url))
    }

    /// A POST to `url`.
    pub fn post(url: reqwest::Url) -> Self {
        Self::new(http::Method::POST, url)
    }

    /// A POST to a provider's usual URL.
    pub fn post_known(url: &'a KnownUrl) -> Self {
        Self::to(http::Method::POST, To::Known(url))
    }

    fn to(method: http::Method, to: To<'a>) -> Self {
        Self {
            method,
            to,
            headers: http::HeaderMap::with_capacity(8),
            body: bytes::Bytes::new(),
        }
    }

    /// With `name: value` added (after any of the same name).
    pub fn header(mut self, name: http::HeaderName, value: http::HeaderValue) -> Self {
        self.headers.append(name, value);
        self
    }

    /// Its headers.
    pub fn headers_mut(&mut self) -> &mut http::HeaderMap {
        &mut self.headers
    }

    /// With `body` as its body.
    pub fn body(mut self, body: impl Into<bytes::Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Its URL.
    pub fn url(&self) -> &reqwest::Url {
        match &self.to {
            To::Known(k) => &k.url,
            To::Url(u) => u,
        }
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

/// Sends `call` on hyper's client.
async fn send_direct(direct: &Direct, provider: &str, call: HttpCall<'_>) -> Result<Answer, ProviderError> {
    use http::header::{Entry, HeaderValue, ACCEPT, HOST};
    let uri = match &call.to {
        To::Known(k) => k.uri.clone(),
        To::Url(u) => u
            .as_str()
            .parse()
            .map_err(|e| Unsendable::new(provider, u.as_str(), e))?,
    };
    let mut out = http::Request::new(reqwest::Body::from(call.body));
    *out.method_mut() = call.method;
    *out.uri_mut() = uri;
    *out.headers_mut() = call.headers;
    // What reqwest sends unless told otherwise.
    out.headers_mut()
        .entry(ACCEPT)
        .or_insert(HeaderValue::from_static("*/*"));
    // hyper's client writes a call's `host` after the rest, formatting it
    // anew each time; a known URL's is made once.
    if let (To::Known(KnownUrl { host: Some(host), .. }), Entry::Vacant(e)) = (&call.to, out.headers_mut().entry(HOST))
    {
        e.insert(host.clone());
    }
    let resp = direct
        .request(out)
        .await
        .map_err(|e| super::http::transport_error(provider, &e))?;
    Ok(Answer::Direct(resp))
}

/// `url` parsed for a call to `provider`.
pub fn parse_url(provider: &str, url: &str) -> Result<reqwest::Url, Unsendable> {
    reqwest::Url::parse(url).map_err(|e| Unsendable::new(provider, url, e))
}

/// A call to a URL no client can take (a model's name in it, say): no
/// fault of the provider's, the model is skipped.
#[derive(Debug)]
pub struct Unsendable(String);

impl Unsendable {
    fn new(provider: &str, url: &str, why: impl std::fmt::Display) -> Self {
        Self(format!(
            "{provider}: cannot send to {}: {why}",
            super::http::without_query(url)
        ))
    }
}

impl From<Unsendable> for ProviderError {
    fn from(u: Unsendable) -> Self {
        ProviderError::new(super::ErrorKind::Unsupported, None, u.0)
    }
}

/// A URL parsed once for either client: reqwest's `Url`, hyper's `Uri`,
/// and the `host` header calls to it carry.
#[derive(Clone, Debug)]
pub struct KnownUrl {
    /// reqwest's.
    pub url: reqwest::Url,
    uri: http::Uri,
    host: Option<http::HeaderValue>,
}

impl KnownUrl {
    /// `s` parsed, if it is a URL both take.
    pub fn parse(s: &str) -> Option<Self> {
        let url = reqwest::Url::parse(s).ok()?;
        let uri: http::Uri = url.as_str().parse().ok()?;
        Some(Self {
            host: host_header(&uri),
            url,
            uri,
        })
    }
}

/// The `host` header hyper's client writes for `uri`: its host, and its
/// port unless the scheme's own.
fn host_header(uri: &http::Uri) -> Option<http::HeaderValue> {
    let host = uri.host()?;
    let secure = matches!(uri.scheme_str(), Some("https" | "wss"));
    let port = uri
        .port()
        .filter(|p| !matches!((p.as_u16(), secure), (443, true) | (80, false)));
    let value = match port {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    http::HeaderValue::try_from(value).ok()
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
            let host = format!("\r\nhost: 127.0.0.1:{port}\r\n");
            assert!(
                String::from_utf8_lossy(&got).contains(&host),
                "{host:?} not in what came"
            );
            got
        });
        use http::header::{HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
        let call = match &known {
            Some(k) => HttpCall::post_known(k),
            None => HttpCall::post(parse_url("p", &url).unwrap()),
        };
        let call = call
            .header(HeaderName::from_static("x-one"), HeaderValue::from_static("1"))
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(AUTHORIZATION, HeaderValue::from_static("Bearer k"))
            .body(r#"{"a":1}"#);
        let (answer, _fd) = up.send("p", call).await.unwrap();
        assert_eq!(answer.status(), 200);
        let body = super::super::http::read_body("p", answer).await.unwrap();
        (server.await.unwrap(), body)
    }

    /// A known URL's `host` is what hyper's client would write for it.
    #[test]
    fn a_known_url_s_host_drops_only_its_scheme_s_own_port() {
        let host = |s: &str| KnownUrl::parse(s).unwrap().host.unwrap();
        assert_eq!(host("http://h.example:80/v1"), "h.example");
        assert_eq!(host("http://h.example:443/v1"), "h.example:443");
        assert_eq!(host("https://h.example:443/v1"), "h.example");
        assert_eq!(host("https://h.example:80/v1"), "h.example:80");
        assert_eq!(host("http://127.0.0.1:8080/v1/chat/completions"), "127.0.0.1:8080");
        assert_eq!(host("http://[::1]:8080/v1"), "[::1]:8080");
        assert_eq!(host("http://user:pw@h.example/v1"), "h.example");
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
        // The port differs between the servers (each `host` is checked
        // where it came); nothing else may, the headers' order included.
        let same = |x: &[u8]| {
            let t = String::from_utf8_lossy(x).to_string();
            let host = t.find("host: ").unwrap();
            let end = host + t[host..].find("\r\n").unwrap();
            format!("{}host: HOST{}", &t[..host], &t[end..])
        };
        assert_eq!(same(&a), same(&b));
        assert_eq!(same(&a), same(&c));
        assert_eq!((body_a.as_ref(), body_b.as_ref()), (&b"ok"[..], &b"ok"[..]));
    }
}
