//! Vertex AI's credentials against the strict fake: a service-account key
//! turned into access tokens, each kept while it is far from its end and
//! replaced before it expires (the fake refuses an expired one), and a key
//! or location that cannot work said at start, naming what to fix.

use crate::common::strict::{Api, Strict};
use crate::common::strict_vertex::key_file;
use fusebox::clock::Clock;
use fusebox::config::Config;
use fusebox::provider::{ErrorKind, LlmRequest, Message, Provider};
use std::sync::Arc;
use std::time::Duration;

/// The config of a Vertex AI provider at the fake `base`, its key file's
/// path in `var`.
fn config(base: &str, var: &str) -> Config {
    let text = format!(
        "[providers.vertex]\nkind = \"vertex\"\nbase_url = \"{base}/v1\"\ncredentials_env = \"{var}\"\n\
         project = \"fusebox-test\"\nlocation = \"us-central1\"\n\
         [models.gemini-flash]\nprovider = \"vertex\"\napi_name = \"gemini-2.5-flash\"\ninput_per_m = 0.3\noutput_per_m = 2.5\n\
         [routes.default]\nchain = [\"gemini-flash\"]\n"
    );
    Config::parse(&text, "vertex.toml").unwrap()
}

/// The Vertex AI client of a config whose key file is at `path`.
fn client(base: &str, var: &str, path: &std::path::Path) -> Arc<dyn Provider> {
    // SAFETY of the test: each test names its own variable.
    unsafe { std::env::set_var(var, path) };
    let mut built = fusebox::provider::http::build(&config(base, var), Clock::system(), None).unwrap();
    built.remove("vertex").unwrap()
}

fn ask() -> LlmRequest {
    LlmRequest {
        model: "gemini-2.5-flash".into(),
        messages: Arc::from(vec![Message::user("Where is order #38100?")]),
        stream: Some(false),
        ..LlmRequest::default()
    }
}

#[tokio::test]
async fn a_token_is_kept_while_fresh_and_replaced_before_it_expires() {
    let fake = Strict::start().await;
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), &fake.base());
    // An hour's token serves every call.
    let vertex = client(&fake.base(), "FUSEBOX_TEST_VERTEX_KEY_FRESH", &key);
    for _ in 0..4 {
        vertex.complete(&ask()).await.unwrap();
    }
    assert_eq!(fake.state.vertex.lock().requests, 1, "one token for four calls");
    // Tokens that live 20 s are within the client's margin from the start:
    // each call replaces the one before it, and each arrives valid.
    fake.state.vertex.lock().lifetime = Duration::from_secs(20);
    let vertex = client(&fake.base(), "FUSEBOX_TEST_VERTEX_KEY_FRESH", &key);
    for _ in 0..3 {
        vertex.complete(&ask()).await.unwrap();
    }
    assert_eq!(fake.state.vertex.lock().requests, 1 + 3, "a new token before each call");
    let received = fake.received();
    assert_eq!(received.len(), 7);
    assert!(
        received.iter().all(|r| r.api == Api::Gemini && r.status == 200),
        "{received:?}"
    );
    let tokens: std::collections::HashSet<_> = received.iter().map(|r| r.headers["authorization"].clone()).collect();
    assert_eq!(tokens.len(), 4, "the hour's token, then three of 20 s");
}

#[tokio::test]
async fn an_expired_token_is_refused_and_reported_as_a_credential_error() {
    let fake = Strict::start().await;
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), &fake.base());
    // Tokens that are over when issued: the fake refuses every one.
    fake.state.vertex.lock().lifetime = Duration::ZERO;
    let vertex = client(&fake.base(), "FUSEBOX_TEST_VERTEX_KEY_EXPIRED", &key);
    let e = vertex.complete(&ask()).await.unwrap_err();
    assert_eq!((e.kind, e.status), (ErrorKind::Auth, Some(401)), "{e:?}");
    assert!(e.message.contains("UNAUTHENTICATED"), "{}", e.message);
    assert!(!e.kind.retryable());
}

#[tokio::test]
async fn a_key_signed_by_another_is_refused_by_the_token_endpoint() {
    let fake = Strict::start().await;
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), &fake.base());
    // The same account, another private key: its JWTs do not verify.
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&key).unwrap()).unwrap();
    let other = std::process::Command::new("openssl")
        .args(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"])
        .output()
        .expect("openssl makes a second key");
    assert!(other.status.success(), "openssl made no key");
    json["private_key"] = serde_json::json!(String::from_utf8(other.stdout).unwrap());
    std::fs::write(&key, json.to_string()).unwrap();
    let vertex = client(&fake.base(), "FUSEBOX_TEST_VERTEX_KEY_OTHER", &key);
    let e = vertex.complete(&ask()).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Auth, "{e:?}");
    assert!(e.message.contains("no access token"), "{}", e.message);
    assert_eq!(fake.state.vertex.lock().requests, 0);
    assert!(fake.received().is_empty(), "no call without a token");
}

#[test]
fn a_vertex_provider_says_what_it_lacks() {
    let bad = |toml: &str| Config::parse(toml, "v.toml").unwrap_err().to_string();
    let base = "[providers.v]\nkind = \"vertex\"\ncredentials_env = \"K\"\nproject = \"p\"\nlocation = \"us-central1\"\n\
                [models.m]\nprovider = \"v\"\ninput_per_m = 1.0\noutput_per_m = 1.0\n[routes.default]\nchain = [\"m\"]\n";
    let e = bad(&base.replace("project = \"p\"\n", ""));
    assert!(e.contains("providers.v.project") && e.contains("needs it"), "{e}");
    let e = bad(&base.replace("us-central1", "US Central"));
    assert!(e.contains("providers.v.location"), "{e}");
    let e = bad(&base.replace("kind = \"vertex\"", "kind = \"openai\"\napi_key_env = \"K\""));
    assert!(
        e.contains("providers.v.") && e.contains("only a vertex provider"),
        "{e}"
    );
    // SAFETY of the test: the variable name is unique to this test.
    unsafe { std::env::set_var("FUSEBOX_TEST_VERTEX_KEY_MISSING", "/nonexistent/key.json") };
    let cfg = Config::parse(&base.replace("\"K\"", "\"FUSEBOX_TEST_VERTEX_KEY_MISSING\""), "v.toml").unwrap();
    let e = fusebox::provider::http::build(&cfg, Clock::system(), None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("/nonexistent/key.json") && e.contains("credentials_env"),
        "{e}"
    );
}
