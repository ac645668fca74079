//! The Amazon Bedrock client: `model/{id}/converse`, whole, or
//! `/converse-stream` (AWS event-stream frames), embeddings by `/invoke`;
//! every request signed with AWS Signature V4 (`aws-sigv4`, signing name
//! `bedrock`). Bodies are rendered and read by [`crate::wire::bedrock`].
//! Bedrock sends no rate-limit headers: a `ThrottlingException` is its
//! signal.

use super::http::{open_stream, read_body, stream_error_kind, with_ids, with_request, Endpoint, SseStream, JSON};
use super::upstream::{parse_url, HttpCall};
use super::{EmbedRequest, Embedded, ErrorKind, LlmRequest, LlmResponse, Opened, Provider, ProviderError};
use crate::clock::Clock;
use crate::resilience::limiter::RateFeedback;
use crate::wire::bedrock::{error_type, parse_reply, render_request, EmbedModel};
use crate::wire::openai::embeddings_list;
use aws_credential_types::Credentials;
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::Value;

/// A Bedrock provider.
pub struct BedrockClient {
    http: super::upstream::Upstream,
    ep: Endpoint,
    region: String,
    credentials: Credentials,
    clock: Clock,
}

impl BedrockClient {
    /// A client for `ep` (its URL the runtime's base,
    /// `https://bedrock-runtime.us-east-1.amazonaws.com`) in `region`,
    /// signing as `credentials`.
    pub fn new(
        http: super::upstream::Upstream,
        ep: Endpoint,
        region: String,
        credentials: Credentials,
        clock: Clock,
    ) -> Self {
        Self {
            http,
            ep,
            region,
            credentials,
            clock,
        }
    }

    /// The URL of `op` (`converse`, `converse-stream`, `invoke`) on
    /// `model`: its id one path segment, everything but unreserved
    /// characters escaped (`:` in `…-v1:0` too, as AWS's signing expects;
    /// an inference profile's ARN keeps its `/` escaped).
    fn url(&self, model: &str, op: &str) -> String {
        let mut id = String::with_capacity(model.len() + 8);
        for b in model.bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => id.push(b as char),
                _ => id.push_str(&format!("%{b:02X}")),
            }
        }
        format!("{}/model/{id}/{op}", self.ep.url.trim_end_matches('/'))
    }

    /// A POST of JSON `body` to `url`, accepting `accept`, signed now, with
    /// the headers `ids` adds: the answer, or the error it is.
    async fn call(
        &self,
        url: &str,
        body: Vec<u8>,
        accept: &'static str,
        ids: impl FnOnce(HttpCall<'static>) -> HttpCall<'static>,
    ) -> Result<(super::upstream::Answer, crate::descriptors::Held), ProviderError> {
        let name = &self.ep.name;
        let time = std::time::UNIX_EPOCH + std::time::Duration::from_millis(self.clock.wall_ms());
        let unsigned =
            |e: String| ProviderError::new(ErrorKind::Local, None, format!("{name}: cannot sign the request: {e}"));
        let signed = sign(&self.credentials, &self.region, url, &body, time).map_err(unsigned)?;
        let mut call = HttpCall::post(parse_url(name, url)?)
            .header(reqwest::header::CONTENT_TYPE, JSON)
            .header(reqwest::header::ACCEPT, HeaderValue::from_static(accept))
            .body(body);
        for (k, v) in signed {
            let k = HeaderName::try_from(k).map_err(|e| unsigned(e.to_string()))?;
            let v = HeaderValue::try_from(v).map_err(|e| unsigned(e.to_string()))?;
            call = call.header(k, v);
        }
        let (resp, fd) = self.http.send(name, ids(call)).await?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            let exception = resp
                .headers()
                .get("x-amzn-errortype")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let body = read_body(name, resp).await.unwrap_or_default();
            return Err(status_error(name, status, &exception, &body));
        }
        Ok((resp, fd))
    }

    /// One InvokeModel call of `body` to `url` for `req`: its answer, and
    /// the input tokens Bedrock counted.
    async fn invoke(
        &self,
        url: &str,
        body: Vec<u8>,
        req: &EmbedRequest,
    ) -> Result<(Value, Option<u32>), ProviderError> {
        let (resp, _fd) = self
            .call(url, body, "application/json", |c| with_request(c, req.request_id))
            .await?;
        let tokens = resp
            .headers()
            .get("x-amzn-bedrock-input-token-count")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        Ok((super::http::read_json(&self.ep.name, resp).await?, tokens))
    }
}

/// The SigV4 headers (`authorization`, `x-amz-date`, and
/// `x-amz-security-token` with temporary keys) that sign a JSON POST of
/// `body` to `url` for Bedrock in `region` at `time`; `Err` says why it
/// cannot be signed.
pub fn sign(
    credentials: &Credentials,
    region: &str,
    url: &str,
    body: &[u8],
    time: std::time::SystemTime,
) -> Result<Vec<(String, String)>, String> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings};
    let identity = credentials.clone().into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("bedrock")
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let headers = [("content-type", "application/json")];
    let signable =
        SignableRequest::new("POST", url, headers.into_iter(), SignableBody::Bytes(body)).map_err(|e| e.to_string())?;
    let (instructions, _) = aws_sigv4::http_request::sign(signable, &params)
        .map_err(|e| e.to_string())?
        .into_parts();
    Ok(instructions
        .headers()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

#[async_trait::async_trait]
impl Provider for BedrockClient {
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        self.open(req).await?.whole().await
    }

    /// InvokeModel with an embedding model's own body: Titan's a text a
    /// call (four at a time), Cohere's all at once.
    async fn embed(&self, req: &EmbedRequest) -> Result<Embedded, ProviderError> {
        use futures_util::{StreamExt, TryStreamExt};
        let name = &self.ep.name;
        let unsupported = |why: String| ProviderError::new(ErrorKind::Unsupported, None, format!("{name}: {why}"));
        let family = EmbedModel::of(&req.model).ok_or_else(|| {
            unsupported(format!(
                "{} is no embedding model fusebox reads (Amazon Titan or Cohere)",
                req.model
            ))
        })?;
        let calls = family.render(&req.body).map_err(unsupported)?;
        let url = self.url(&req.model, "invoke");
        let answers: Vec<_> = futures_util::stream::iter(calls)
            .map(|body| self.invoke(&url, body, req))
            .buffered(4)
            .try_collect()
            .await?;
        let (mut vectors, mut counted) = (Vec::new(), Some(0));
        for (v, tokens) in answers {
            let (read, said) = family
                .read(v)
                .map_err(|why| ProviderError::new(ErrorKind::Truncated, None, format!("{name}: {why}")))?;
            vectors.extend(read);
            counted = counted.zip(said.or(tokens)).map(|(a, b)| a + b);
        }
        let tokens = counted.unwrap_or_else(|| crate::request::tokens_in_chars(req.chars));
        let body = embeddings_list(vectors.iter().map(Vec::as_slice), &req.body, &req.model, tokens);
        Ok(Embedded::translated(body, tokens))
    }

    async fn open(&self, req: &LlmRequest) -> Result<Opened, ProviderError> {
        let name = &self.ep.name;
        let start = self.clock.now();
        let out = req.outgoing(self.ep.stream);
        let body = render_request(&out).map_err(|why| ProviderError::new(ErrorKind::Unsupported, None, why))?;
        let (op, accept) = match out.stream {
            true => ("converse-stream", "application/vnd.amazon.eventstream"),
            false => ("converse", "application/json"),
        };
        let url = self.url(&req.model, op);
        let (resp, fd) = self.call(&url, body, accept, |b| with_ids(b, req)).await?;
        if out.stream {
            let stream = SseStream::bedrock(name, (resp, fd), self.ep.idle);
            return open_stream(stream, RateFeedback::default(), req, &self.clock, start).await;
        }
        let v = super::http::read_json(name, resp).await?;
        Ok(Opened::Whole(super::http::translated(
            parse_reply(&v),
            &self.clock,
            start,
        )))
    }
}

/// An error answer: its kind from the exception Bedrock names
/// (`x-amzn-ErrorType`, else the body's `__type`), made precise where the
/// message says a prompt is too long. A signature or key Bedrock refuses is
/// a credential error, not retried and not the caller's.
fn status_error(name: &str, status: u16, exception: &str, body: &[u8]) -> ProviderError {
    let v: Option<Value> = serde_json::from_slice(body).ok();
    let s = |k: &str| {
        v.as_ref()
            .and_then(|v| v.get(k))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let exception = match exception {
        "" => s("__type").unwrap_or_default(),
        e => e.to_string(),
    };
    let message = s("message")
        .or_else(|| s("Message"))
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(300)]).trim().to_string());
    let mut kind = match error_type(&exception) {
        "api_error" => ErrorKind::from_status(status),
        t => stream_error_kind(t),
    };
    let long = ["too long", "too many input tokens", "context window"];
    if kind == ErrorKind::BadRequest && long.iter().any(|l| message.to_lowercase().contains(l)) {
        kind = ErrorKind::TooLarge;
    }
    let named = exception.split(':').next().unwrap_or("");
    ProviderError::new(kind, Some(status), format!("{name}: HTTP {status}: {named}: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exceptions_are_classified_by_their_name() {
        let e = status_error(
            "b",
            429,
            "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/",
            br#"{"message":"Too many requests"}"#,
        );
        assert_eq!(e.kind, ErrorKind::RateLimited);
        assert_eq!(e.message, "b: HTTP 429: ThrottlingException: Too many requests");
        let e = status_error(
            "b",
            403,
            "InvalidSignatureException",
            br#"{"message":"The request signature we calculated does not match"}"#,
        );
        assert_eq!(e.kind, ErrorKind::Auth);
        assert!(!e.kind.retryable());
        let e = status_error(
            "b",
            400,
            "ValidationException",
            br#"{"message":"Input is too long for requested model."}"#,
        );
        assert_eq!(e.kind, ErrorKind::TooLarge);
        assert_eq!(
            status_error("b", 429, "ModelNotReadyException", b"{}").kind,
            ErrorKind::RateLimited
        );
        assert_eq!(
            status_error(
                "b",
                503,
                "",
                br#"{"__type":"ServiceUnavailableException","message":"x"}"#
            )
            .kind,
            ErrorKind::Overloaded
        );
    }

    #[test]
    fn a_model_id_is_one_escaped_path_segment() {
        let ep = Endpoint {
            name: "b".into(),
            url: "https://bedrock-runtime.us-east-1.amazonaws.com/".into(),
            key: None,
            stream: false,
            idle: std::time::Duration::from_secs(1),
        };
        let c = BedrockClient::new(
            super::super::upstream::Upstream::new().unwrap(),
            ep,
            "us-east-1".into(),
            Credentials::new("a", "b", None, None, "test"),
            Clock::system(),
        );
        assert_eq!(
            c.url("anthropic.claude-3-5-haiku-20241022-v1:0", "converse-stream"),
            "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream"
        );
        assert!(c
            .url("arn:aws:bedrock:us-east-1:1:inference-profile/x", "converse")
            .contains("arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx"));
    }
}
