//! Amazon Bedrock against the strict fake, which verifies every request's
//! SigV4 signature: calls whole and streamed answered; a wrong secret
//! refused and reported as the provider's credential error, not retried; an
//! exception inside a stream ends that attempt as its type says;
//! credentials from a shared file's profile, and a missing one said at
//! start.

use crate::common::strict::{Api, Strict, ANSWER};
use crate::common::strict_bedrock::{KEY_ID, SECRET};
use fusebox::clock::Clock;
use fusebox::config::Config;
use fusebox::provider::{ErrorKind, LlmRequest, Message, Provider};
use std::sync::Arc;

fn config(base: &str, profile: Option<&str>) -> Config {
    let profile = profile.map(|p| format!("aws_profile = \"{p}\"\n")).unwrap_or_default();
    let text = format!(
        "[providers.bedrock]\nkind = \"bedrock\"\nbase_url = \"{base}\"\nregion = \"us-east-1\"\n{profile}\
         [models.claude]\nprovider = \"bedrock\"\napi_name = \"anthropic.claude-3-5-haiku-20241022-v1:0\"\n\
         input_per_m = 0.8\noutput_per_m = 4.0\n[routes.default]\nchain = [\"claude\"]\n"
    );
    Config::parse(&text, "bedrock.toml").unwrap()
}

/// The Bedrock client of `cfg`, signing with the credentials of a shared
/// file's profile `[fusebox]` whose secret is `secret`.
fn client(cfg: &Config, dir: &std::path::Path, secret: &str) -> Result<Arc<dyn Provider>, String> {
    // The variable is the process's: one test at a time sets it and reads it.
    static ENV: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    let _one = ENV.lock();
    let file = dir.join("credentials");
    let text = format!("[default]\naws_access_key_id = NOPE\n\n[fusebox]\naws_access_key_id = {KEY_ID}\naws_secret_access_key = {secret}\n");
    std::fs::write(&file, text).unwrap();
    // SAFETY of the test: only the Bedrock tests read it, each naming a profile.
    unsafe { std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", &file) };
    let mut built = fusebox::provider::http::build(cfg, Clock::system(), None).map_err(|e| e.to_string())?;
    Ok(built.remove("bedrock").unwrap())
}

fn ask(stream: bool) -> LlmRequest {
    LlmRequest {
        model: "anthropic.claude-3-5-haiku-20241022-v1:0".into(),
        messages: Arc::from(vec![
            Message::system("Be brief."),
            Message::user("Where is order #38100?"),
        ]),
        stream: Some(stream),
        ..LlmRequest::default()
    }
}

#[tokio::test]
async fn signed_calls_are_answered_whole_and_streamed_and_a_wrong_secret_is_not_retried() {
    let fake = Strict::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&fake.base(), Some("fusebox"));
    let bedrock = client(&cfg, dir.path(), SECRET).unwrap();
    for stream in [false, true] {
        let r = bedrock.complete(&ask(stream)).await.unwrap();
        assert_eq!(&*r.text, ANSWER, "stream {stream}");
        assert_eq!((r.usage.input, r.usage.output), (25, 12));
    }
    let wrong = client(&cfg, dir.path(), "not-the-secret").unwrap();
    let e = wrong.complete(&ask(false)).await.unwrap_err();
    assert_eq!((e.kind, e.status), (ErrorKind::Auth, Some(403)), "{e:?}");
    assert!(
        e.message.starts_with("bedrock: HTTP 403: InvalidSignatureException"),
        "{}",
        e.message
    );
    assert!(
        !e.kind.retryable() && !e.client_fault(),
        "the operator's to fix, not the caller's"
    );
    let received = fake.received();
    assert_eq!(received.iter().map(|r| r.status).collect::<Vec<_>>(), [200, 200, 403]);
    assert!(received.iter().all(|r| r.api == Api::Bedrock));
    // A profile the file lacks is said at start, naming where to look.
    let e = client(&config(&fake.base(), Some("absent")), dir.path(), SECRET)
        .err()
        .unwrap();
    assert!(
        e.contains("provider `bedrock`") && e.contains("no profile [absent]") && e.contains("AWS_ACCESS_KEY_ID"),
        "{e}"
    );
}

#[tokio::test]
async fn an_exception_inside_a_stream_ends_the_attempt_as_its_type_says() {
    let fake = Strict::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&fake.base(), Some("fusebox"));
    let bedrock = client(&cfg, dir.path(), SECRET).unwrap();
    *fake.state.bedrock_exception.lock() = Some((3, "throttlingException"));
    let e = bedrock.complete(&ask(true)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::RateLimited, "{e:?}");
    assert!(e.message.contains("throttlingException"), "{}", e.message);
    assert!(e.usage.output > 0, "what came before the exception is counted");
    *fake.state.bedrock_exception.lock() = Some((3, "validationException"));
    let e = bedrock.complete(&ask(true)).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadRequest, "{e:?}");
}
