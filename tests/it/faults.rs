//! The provider fault matrix: sixteen ways a provider breaks, each put
//! behind `fusebox serve` (once with every option at its default, once as
//! a careful operator configures it, and with the defaults once with the
//! primary on Azure OpenAI's deployment URLs, on Google's Gemini API, on
//! Vertex AI and on Amazon Bedrock, each fault in that API's own words), asked by the official OpenAI
//! Python SDK with its own retries off, plain and streamed. The client
//! gets the whole answer (or, refused by a content filter, the provider's
//! error as it was sent; blocked by Gemini's safety filter, an answer that
//! says `content_filter`), never an SDK exception or a cut answer
//! presented as whole; the upstreams' logs show Retry-After honoured, no more than
//! three attempts on a failing model, and none against a model that said
//! not to try again; the usage the client is told adds up to what was
//! charged.
//!
//! The upstream is the strict fake (OpenAI's API for the primary
//! `gpt-4o`, Anthropic's for the fallback `claude-haiku`, answering the
//! 60-word [`text`]); a TCP reset and a server that never answers are
//! sockets of their own. Runs in real time (the slowest case, a primary
//! down for 60 s, takes 80 s), every case at once.

use crate::common::strict::{Api, Strict};
use crate::common::Serve;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

/// The sixteen faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    RateLimitedRetryAfter,
    RateLimited,
    ServerErrorOnce,
    Down,
    ResetBeforeHeaders,
    Silent,
    FirstTokenAfter20s,
    CutAfter40,
    Stall30s,
    Malformed,
    NoTerminator,
    ContextLength,
    ContentFilter,
    CutFallbackWithoutPrefill,
    DownFor60s,
    DownAnsweredByFallback,
}

const FAULTS: [Fault; 16] = [
    Fault::RateLimitedRetryAfter,
    Fault::RateLimited,
    Fault::ServerErrorOnce,
    Fault::Down,
    Fault::ResetBeforeHeaders,
    Fault::Silent,
    Fault::FirstTokenAfter20s,
    Fault::CutAfter40,
    Fault::Stall30s,
    Fault::Malformed,
    Fault::NoTerminator,
    Fault::ContextLength,
    Fault::ContentFilter,
    Fault::CutFallbackWithoutPrefill,
    Fault::DownFor60s,
    Fault::DownAnsweredByFallback,
];

/// The answer: 60 words, a stream chunk each.
fn text() -> String {
    (1..=60).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

/// What the content filter says, as OpenAI says it.
fn filtered() -> Value {
    json!({"message": "Your request was rejected as a result of our safety system.", "type": "invalid_request_error",
           "param": "prompt", "code": "content_filter"})
}

/// How long the primary is down in [`Fault::DownFor60s`], and how far
/// apart its 20 requests are.
const DOWN: Duration = Duration::from_secs(60);
const SPACING_S: u64 = 4;

/// The options a careful operator sets (none of them needed for a whole
/// answer: they make the faults cost less time).
const CAREFUL: &str = "timeout_ms = 10000\nidle_timeout_ms = 5000\n";
const CAREFUL_MODEL: &str = "first_token_timeout_ms = 5000\n";
const CAREFUL_REST: &str = "[breaker]\ncooldown_ms = 10000\nmax_cooldown_ms = 20000\n";

/// A listener that resets every connection once it has read the request.
async fn resetter() -> (String, std::sync::Arc<std::sync::atomic::AtomicU32>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", l.local_addr().unwrap());
    let count = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let _ = s.set_zero_linger();
            drop(s);
        }
    });
    (url, count)
}

/// A listener that takes every connection and never answers.
async fn silent() -> (String, std::sync::Arc<std::sync::atomic::AtomicU32>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", l.local_addr().unwrap());
    let count = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(s);
        }
    });
    (url, count)
}

/// The API the primary model is reached by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Primary {
    OpenAi,
    /// Azure OpenAI's deployment URLs.
    Azure,
    /// Google's Gemini API.
    Gemini,
    /// Google's Vertex AI (Gemini's API, signed in with a service account).
    Vertex,
    /// Amazon Bedrock's Converse (SigV4-signed, event-stream frames).
    Bedrock,
}

impl Primary {
    /// The strict fake's endpoint it reaches.
    fn api(self) -> Api {
        match self {
            Primary::OpenAi | Primary::Azure => Api::OpenAi,
            Primary::Gemini | Primary::Vertex => Api::Gemini,
            Primary::Bedrock => Api::Bedrock,
        }
    }
}

/// One fault behind one gateway, asked plainly or streamed.
struct Case {
    fault: Fault,
    primary: Primary,
    careful: bool,
    stream: bool,
    upstream: Strict,
    /// Connections to the reset or silent socket.
    sockets: Option<std::sync::Arc<std::sync::atomic::AtomicU32>>,
    serve: Serve,
}

impl Case {
    fn id(&self) -> String {
        format!(
            "{}{:?}/{}/{}",
            match self.primary {
                Primary::OpenAi => "",
                Primary::Azure => "azure/",
                Primary::Gemini => "gemini/",
                Primary::Vertex => "vertex/",
                Primary::Bedrock => "bedrock/",
            },
            self.fault,
            if self.careful { "careful" } else { "defaults" },
            if self.stream { "streamed" } else { "plain" }
        )
    }

    async fn start(fault: Fault, to: Primary, careful: bool, stream: bool, dir: &std::path::Path) -> Case {
        let upstream = Strict::start().await;
        *upstream.state.text.lock() = text();
        *upstream.state.continues.lock() = true;
        let mut primary = match to {
            Primary::OpenAi => format!("{}/v1", upstream.base()),
            Primary::Azure => upstream.base(),
            Primary::Gemini => format!("{}/v1beta", upstream.base()),
            Primary::Vertex => format!("{}/v1", upstream.base()),
            Primary::Bedrock => upstream.base(),
        };
        let google = matches!(to, Primary::Gemini | Primary::Vertex);
        let api = to.api();
        let mut sockets = None;
        {
            let mut plan = upstream.state.stream.lock();
            let mut faults = upstream.state.faults.lock();
            match fault {
                Fault::RateLimitedRetryAfter => faults.rate_limited = (1, Some(2)),
                Fault::RateLimited => faults.rate_limited = (1, None),
                Fault::ServerErrorOnce => faults.server_errors = 1,
                Fault::Down | Fault::DownAnsweredByFallback => upstream.set_down(api, true),
                Fault::ResetBeforeHeaders | Fault::Silent => {}
                Fault::FirstTokenAfter20s => plan.pauses = vec![(0, Duration::from_secs(20))],
                Fault::CutAfter40 | Fault::CutFallbackWithoutPrefill => plan.reset_after = Some((api, 40)),
                Fault::Stall30s => plan.pauses = vec![(20, Duration::from_secs(30))],
                Fault::Malformed => plan.malformed_after = Some(10),
                Fault::NoTerminator => plan.no_terminator = true,
                Fault::ContextLength if to == Primary::Bedrock => {
                    faults.refuse = Some(json!({"message": "Input is too long for requested model."}))
                }
                Fault::ContextLength if google => {
                    faults.refuse = Some(
                        json!({"message": "The input token count (1130412) exceeds the maximum number of tokens allowed (1048576)."}),
                    )
                }
                Fault::ContextLength => {
                    faults.refuse = Some(
                        json!({"message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens.",
                                                "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}),
                    )
                }
                // Gemini's safety block, Bedrock's guardrail: answers, filtered.
                Fault::ContentFilter if to != Primary::OpenAi && to != Primary::Azure => {
                    *upstream.state.blocked.lock() = true
                }
                Fault::ContentFilter => faults.refuse = Some(filtered()),
                Fault::DownFor60s => faults.down_until = Some(Instant::now() + DOWN),
            }
            if fault == Fault::CutFallbackWithoutPrefill {
                *upstream.state.no_prefill.lock() = true;
            }
        }
        if matches!(fault, Fault::ResetBeforeHeaders | Fault::Silent) {
            let (url, count) = if fault == Fault::Silent {
                silent().await
            } else {
                resetter().await
            };
            primary = url;
            sockets = Some(count);
        }
        let (p, m, rest) = if careful {
            (CAREFUL, CAREFUL_MODEL, CAREFUL_REST)
        } else {
            ("", "", "")
        };
        let kind = match to {
            Primary::OpenAi => "kind = \"openai-compatible\"\napi_key_env = \"STRICT_KEY\"",
            Primary::Azure => "kind = \"azure-openai\"\napi_version = \"2024-10-21\"\napi_key_env = \"STRICT_KEY\"",
            Primary::Gemini => "kind = \"gemini\"\napi_key_env = \"STRICT_KEY\"",
            Primary::Vertex => {
                "kind = \"vertex\"\ncredentials_env = \"VERTEX_KEY\"\nproject = \"fusebox-test\"\nlocation = \"us-central1\""
            }
            Primary::Bedrock => "kind = \"bedrock\"\nregion = \"us-east-1\"",
        };
        let key = crate::common::strict_vertex::key_file(dir, &upstream.base());
        let cfg = format!(
            "[providers.openai]\n{kind}\nbase_url = \"{primary}\"\n{p}\
             [providers.anthropic]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"STRICT_KEY\"\n{p}\
             [models.gpt-4o]\nprovider = \"openai\"\ninput_per_m = 2.5\noutput_per_m = 10.0\n{m}\
             [models.claude-haiku]\nprovider = \"anthropic\"\napi_name = \"claude-3-5-haiku-latest\"\n\
             input_per_m = 0.8\noutput_per_m = 4.0\n{m}\
             [routes.default]\nchain = [\"gpt-4o\", \"claude-haiku\"]\n{rest}",
            upstream.base()
        );
        let path = dir.join(format!("{fault:?}-{to:?}-{careful}-{stream}.toml"));
        std::fs::write(&path, cfg).unwrap();
        let serve = tokio::task::spawn_blocking(move || {
            let key = key.display().to_string();
            Serve::start_with_env(
                &["--config", &path.display().to_string()],
                &[
                    ("STRICT_KEY", "sk-test"),
                    ("VERTEX_KEY", &key),
                    ("AWS_ACCESS_KEY_ID", crate::common::strict_bedrock::KEY_ID),
                    ("AWS_SECRET_ACCESS_KEY", crate::common::strict_bedrock::SECRET),
                ],
            )
        })
        .await
        .unwrap();
        Case {
            fault,
            primary: to,
            careful,
            stream,
            upstream,
            sockets,
            serve,
        }
    }

    /// What the client is asked to do.
    fn spec(&self) -> Value {
        let count = if self.fault == Fault::DownFor60s { 20 } else { 1 };
        json!({"id": self.id(), "base": self.serve.base, "stream": self.stream, "count": count, "spacing_s": SPACING_S})
    }

    /// The primary's attempts, as its upstream saw them.
    fn primary_attempts(&self) -> usize {
        match &self.sockets {
            Some(c) => c.load(std::sync::atomic::Ordering::SeqCst) as usize,
            None => self
                .upstream
                .received()
                .iter()
                .filter(|r| r.api == self.primary.api())
                .count(),
        }
    }

    /// The tokens the gateway charged.
    async fn charged(&self) -> u64 {
        let metrics = reqwest::get(format!("{}/metrics", self.serve.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metrics
            .lines()
            .find_map(|l| l.strip_prefix("fusebox_tokens_total "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no fusebox_tokens_total in {metrics}"))
    }

    /// Checks what the client got for this case; `got` holds its answers
    /// in order.
    async fn check(&self, got: &[Value]) -> Result<(), String> {
        let id = self.id();
        let fail = |why: String| Err(format!("{id}: {why}; the client got {}", brief(got)));
        let expected = text();
        let requests = got.len();
        if self.fault == Fault::ContentFilter && self.primary.api() != Api::OpenAi {
            // A blocked prompt is Gemini's (Bedrock's guardrail's) answer,
            // not an error: the client is told so, and no other model is asked.
            let [g] = got else { return fail("one answer".into()) };
            let said = g["text"].as_str().unwrap_or("");
            let filtered = said.is_empty() || said == crate::common::strict_bedrock::BLOCKED;
            if g.get("error").is_some() || g["finish"] != "content_filter" || !filtered {
                return fail("not an answer filtered".into());
            }
            if !self.upstream.bodies(Api::Anthropic).is_empty() || self.primary_attempts() != 1 {
                return fail("a blocked prompt was asked again, or of another model".into());
            }
            return Ok(());
        }
        if self.fault == Fault::ContentFilter {
            let [g] = got else { return fail("one answer".into()) };
            let body = if g["body"]["error"].is_object() {
                &g["body"]["error"]
            } else {
                &g["body"]
            };
            if g["status"] != 400 || *body != filtered() {
                return fail("not the provider's refusal, unchanged".into());
            }
            if !self.upstream.bodies(Api::Anthropic).is_empty() || self.primary_attempts() != 1 {
                return fail("a model that said not to retry was tried again, or another asked".into());
            }
            return Ok(());
        }
        let mut told = 0u64;
        for g in got {
            if g.get("error").is_some() {
                return fail("an error, not the answer".into());
            }
            if g["text"] != expected.as_str() || g["finish"] != "stop" {
                return fail("not the whole answer, finished".into());
            }
            let u = &g["usage"];
            let (p, c, t) = (u[0].as_u64(), u[1].as_u64(), u[2].as_u64());
            let (Some(p), Some(c), Some(t)) = (p, c, t) else {
                return fail("no usage".into());
            };
            if p + c != t || c == 0 {
                return fail("usage that does not add up".into());
            }
            told += t;
        }
        let charged = self.charged().await;
        if charged != told {
            return fail(format!("{charged} tokens charged, {told} told"));
        }
        let attempts = self.primary_attempts();
        if attempts > 3 * requests {
            return fail(format!("{attempts} attempts on the failing model"));
        }
        let openai: Vec<_> = self
            .upstream
            .received()
            .into_iter()
            .filter(|r| r.api == self.primary.api())
            .collect();
        match self.fault {
            // Bedrock says no time to wait: a throttled call is retried as
            // any rate-limited one is.
            Fault::RateLimitedRetryAfter if self.primary == Primary::Bedrock && openai.len() != 2 => {
                return fail(format!("{} calls to the primary, not a retry", openai.len()));
            }
            Fault::RateLimitedRetryAfter if self.primary != Primary::Bedrock => {
                let gap = openai.get(1).map(|r| r.at.duration_since(openai[0].at));
                if openai.len() != 2 || gap.is_none_or(|g| g < Duration::from_secs(2)) {
                    return fail(format!(
                        "Retry-After: 2 not honoured: {gap:?} between {} calls",
                        openai.len()
                    ));
                }
            }
            Fault::ServerErrorOnce | Fault::RateLimited if openai.len() != 2 => {
                return fail(format!("{} calls to the primary, not a retry", openai.len()));
            }
            Fault::ContextLength if attempts != 1 => {
                return fail("a prompt too long for the model was sent to it again".into());
            }
            Fault::Silent if attempts != 1 => {
                return fail(format!("a silent model was tried {attempts} times"));
            }
            Fault::DownAnsweredByFallback if charged != 37 => {
                return fail("the fallback's 37 tokens are not all that was charged".into());
            }
            Fault::DownFor60s => {
                // Served again within one base cooldown of its recovery
                // (the longest, as the careful config caps it below twice
                // the base), and the time to the next request.
                let cooldown = if self.careful { 20 } else { 30 };
                let Some(up) = self.upstream.state.faults.lock().down_until else {
                    return fail("no recovery".into());
                };
                let served = openai.iter().find(|r| r.status == 200).map(|r| r.at);
                if served.is_none_or(|at| at > up + Duration::from_secs(cooldown + SPACING_S + 1)) {
                    return fail(format!(
                        "the recovered primary served first {:?} after it recovered",
                        served.map(|s| s.saturating_duration_since(up))
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// What the client got, in short: each error whole, each answer's
/// length, finish, usage and time.
fn brief(got: &[Value]) -> String {
    let one = |g: &Value| match g.get("error") {
        Some(_) => g.to_string(),
        None => format!(
            "{} chars, {}, usage {}, model {}, {} s",
            g["text"].as_str().map_or(0, str::len),
            g["finish"],
            g["usage"],
            g["model"],
            g["elapsed"]
        ),
    };
    got.iter().map(one).collect::<Vec<_>>().join("; ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_provider_fault_ends_in_a_whole_answer_for_the_official_sdk() {
    let Some(python) = crate::sdk::python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut cases = Vec::new();
    for fault in FAULTS {
        // OpenAI with the defaults and as a careful operator configures
        // it; Azure OpenAI (its deployment URLs), Gemini and Vertex AI with
        // the defaults.
        for (to, careful) in [
            (Primary::OpenAi, false),
            (Primary::OpenAi, true),
            (Primary::Azure, false),
            (Primary::Gemini, false),
            (Primary::Vertex, false),
            (Primary::Bedrock, false),
        ] {
            for stream in [false, true] {
                cases.push(Case::start(fault, to, careful, stream, dir.path()).await);
            }
        }
    }
    let specs: Vec<Value> = cases.iter().map(Case::spec).collect();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/fault_matrix.py");
    let specs = serde_json::to_string(&specs).unwrap();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&python)
            .arg(script)
            .env("FUSEBOX_FAULT_CASES", specs)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {python}: {e}"))
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the matrix script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut failures = Vec::new();
    for case in &cases {
        let mut got: Vec<Value> = lines
            .iter()
            .filter(|l| l["id"] == case.id().as_str())
            .cloned()
            .collect();
        got.sort_by_key(|l| l["i"].as_u64());
        eprintln!("{}: {}", case.id(), brief(&got[..got.len().min(1)]));
        if let Err(why) = case.check(&got).await {
            failures.push(why);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
