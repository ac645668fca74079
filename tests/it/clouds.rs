//! What the cloud kinds (Azure OpenAI, Gemini, Vertex AI, Bedrock) share with every
//! provider: a model its provider keeps throttling is skipped by its
//! breaker, and the route's next model answers every request; and what a
//! client sends beyond text (an image, structured output) reaches the
//! provider in its own words.

use crate::common::strict::{Api, Strict};
use fusebox::clock::{Clock, Seed};
use fusebox::config::{Config, ProviderKind};
use fusebox::outcome::Level;
use fusebox::request::AgentRequest;
use fusebox::resilience::breaker::BreakerState;
use fusebox::runner::{Runner, RunnerParts};
use std::sync::Arc;

/// A runner whose route tries `kind`'s model on `cloud` first, then
/// gpt-4o on `fallback`'s OpenAI endpoint.
fn runner(kind: ProviderKind, cloud: &Strict, fallback: &Strict, dir: &std::path::Path) -> Arc<Runner> {
    let key = crate::common::strict_vertex::key_file(dir, &cloud.base());
    // SAFETY of the test: the variables are this module's, their values the same in every test.
    unsafe {
        std::env::set_var("FUSEBOX_TEST_CLOUDS_KEY", "sk-test");
        std::env::set_var("AWS_ACCESS_KEY_ID", crate::common::strict_bedrock::KEY_ID);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", crate::common::strict_bedrock::SECRET);
    }
    let cloud_cfg = match kind {
        ProviderKind::Gemini => format!(
            "kind = \"gemini\"\nbase_url = \"{}/v1beta\"\napi_key_env = \"FUSEBOX_TEST_CLOUDS_KEY\"",
            cloud.base()
        ),
        ProviderKind::Vertex => {
            // SAFETY of the test: each test's key file is named for its fake.
            unsafe { std::env::set_var(format!("FUSEBOX_TEST_CLOUDS_VERTEX_{}", cloud.addr.port()), &key) };
            format!(
                "kind = \"vertex\"\nbase_url = \"{}/v1\"\ncredentials_env = \"FUSEBOX_TEST_CLOUDS_VERTEX_{}\"\nproject = \"p\"\nlocation = \"us-central1\"",
                cloud.base(),
                cloud.addr.port()
            )
        }
        ProviderKind::AzureOpenai => format!(
            "kind = \"azure-openai\"\nbase_url = \"{}\"\napi_key_env = \"FUSEBOX_TEST_CLOUDS_KEY\"\napi_version = \"2024-10-21\"",
            cloud.base()
        ),
        ProviderKind::Bedrock => format!(
            "kind = \"bedrock\"\nbase_url = \"{}\"\nregion = \"us-east-1\"",
            cloud.base()
        ),
        other => panic!("{other:?} is not a cloud kind"),
    };
    // Each cloud's embedding model: Vertex AI's embeds by `predict`, Bedrock's by InvokeModel.
    let embedder = match kind {
        ProviderKind::Vertex => "text-embedding-005",
        ProviderKind::Bedrock => "amazon.titan-embed-text-v2:0",
        _ => "embed-1",
    };
    let text = format!(
        "[providers.cloud]\n{cloud_cfg}\n\
         [providers.openai]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\napi_key_env = \"FUSEBOX_TEST_CLOUDS_KEY\"\n\
         [models.cloud-model]\nprovider = \"cloud\"\napi_name = \"model-1\"\ninput_per_m = 1.0\noutput_per_m = 1.0\n\
         [models.cloud-embed]\nprovider = \"cloud\"\napi_name = \"{embedder}\"\ninput_per_m = 0.1\noutput_per_m = 0.0\n\
         [models.gpt-4o]\nprovider = \"openai\"\ninput_per_m = 2.5\noutput_per_m = 10.0\n\
         [routes.default]\nchain = [\"cloud-model\", \"gpt-4o\"]\n",
        fallback.base()
    );
    let cfg = Config::parse(&text, "clouds.toml").unwrap();
    let mut parts = RunnerParts::mock(Clock::system(), Seed(9));
    parts.providers = fusebox::provider::http::build(&cfg, Clock::system(), None).unwrap();
    Runner::new(cfg, parts).unwrap()
}

/// Alice's one-step question `id`, on the default route.
fn ask(id: u64) -> AgentRequest {
    AgentRequest {
        id,
        user: "alice".into(),
        session: "alice/s".into(),
        route: "default".into(),
        messages: [fusebox::provider::Message::user("Where is order #38100?")].into(),
        max_tokens: 64,
        max_steps: 1,
        ..AgentRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_cloud_model_is_skipped_by_its_breaker_and_the_fallback_answers() {
    for kind in [
        ProviderKind::AzureOpenai,
        ProviderKind::Gemini,
        ProviderKind::Vertex,
        ProviderKind::Bedrock,
    ] {
        let (cloud, fallback) = (Strict::start().await, Strict::start().await);
        cloud.state.faults.lock().rate_limited = (u32::MAX, None);
        let dir = tempfile::tempdir().unwrap();
        let runner = runner(kind, &cloud, &fallback, dir.path());
        let requests = 12;
        for id in 1..=requests {
            let o = runner.run(&ask(id)).await;
            assert!(
                o.answer.is_some() && o.level != Level::Failed,
                "{kind:?} request {id}: {o:?}"
            );
        }
        let breaker = &crate::common::entry(&runner, "model:cloud-model").breaker;
        assert_eq!(
            breaker.state(),
            BreakerState::Open,
            "{kind:?}: the throttled model's breaker"
        );
        let tried = cloud.received().iter().filter(|r| r.status == 429).count();
        assert!(
            tried > 0 && tried < 3 * requests as usize / 2,
            "{kind:?}: {tried} calls to a throttled model for {requests} requests"
        );
        let answered = fallback
            .received()
            .iter()
            .filter(|r| r.api == Api::OpenAi && r.status == 200)
            .count();
        assert_eq!(answered, requests as usize, "{kind:?}: the fallback answered each");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_structured_output_tool_calls_and_usage_reach_each_cloud_in_its_words() {
    let Some(python) = crate::sdk::python() else { return };
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    for kind in [
        ProviderKind::AzureOpenai,
        ProviderKind::Gemini,
        ProviderKind::Vertex,
        ProviderKind::Bedrock,
    ] {
        let (cloud, fallback) = (Strict::start().await, Strict::start().await);
        let dir = tempfile::tempdir().unwrap();
        let runner = runner(kind, &cloud, &fallback, dir.path());
        let addr = fusebox::gateway::spawn(runner.clone(), "127.0.0.1:0", Default::default())
            .await
            .unwrap()
            .addr;
        let structured = if kind == ProviderKind::Bedrock { "0" } else { "1" };
        let mut checks = vec!["image", "openai tool call", "anthropic tool use"];
        if structured == "1" {
            checks.push("structured output");
        }
        checks.push("embeddings");
        let base = format!("http://{addr}");
        // Titan takes 256, 512 or 1024 dimensions; the others any.
        let dims = if kind == ProviderKind::Bedrock { "256" } else { "4" };
        let env = [("FUSEBOX_STRUCTURED", structured), ("FUSEBOX_DIMENSIONS", dims)];
        crate::sdk::run_script_with(&python, "cloud_fidelity.py", &base, &env, &checks).await;
        let fell: Vec<_> = fallback.received().iter().map(|r| r.body.to_string()).collect();
        assert!(
            fell.is_empty(),
            "{kind:?}: every call answered by the cloud, not {fell:?}"
        );
        let bodies: Vec<String> = cloud.received().iter().map(|r| r.body.to_string()).collect();
        let image = match kind {
            ProviderKind::AzureOpenai => {
                format!(r#"{{"image_url":{{"url":"data:image/png;base64,{png}"}},"type":"image_url"}}"#)
            }
            ProviderKind::Bedrock => format!(r#"{{"image":{{"format":"png","source":{{"bytes":"{png}"}}}}}}"#),
            _ => format!(r#"{{"inlineData":{{"data":"{png}","mimeType":"image/png"}}}}"#),
        };
        assert!(
            bodies.iter().any(|b| b.contains(&image)),
            "{kind:?}: the image as sent, in {bodies:?}"
        );
        if structured == "1" {
            let schema = match kind {
                ProviderKind::AzureOpenai => r#""response_format":{"json_schema""#,
                _ => r#""responseJsonSchema""#,
            };
            assert!(bodies.iter().any(|b| b.contains(schema)), "{kind:?}: the schema sent");
        }
        let embedded = match kind {
            ProviderKind::AzureOpenai => r#""input":["where is my order","refund"]"#,
            ProviderKind::Gemini => r#""requests":[{"content":{"parts":[{"text":"where is my order"}]}"#,
            ProviderKind::Vertex => r#""instances":[{"content":"where is my order"},{"content":"refund"}]"#,
            _ => r#""inputText":"where is my order""#,
        };
        assert!(
            bodies.iter().any(|b| b.contains(embedded)),
            "{kind:?}: the inputs sent in the cloud's words, in {bodies:?}"
        );
    }
}

/// A key mounted as a file (`api_key_file`, as a Kubernetes secret is)
/// reaches the provider without the file's newline; an empty or missing
/// file stops the set-up with the file's path and the config key.
#[tokio::test]
async fn a_key_mounted_as_a_file_reaches_the_provider() {
    let upstream = Strict::start().await;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("openai-key");
    std::fs::write(&key, "  sk-from-a-file\n").unwrap();
    let text = |path: &std::path::Path| {
        format!(
            "[providers.openai]\nkind = \"openai-compatible\"\nbase_url = \"{}/v1\"\napi_key_file = \"{}\"\n\
             [models.gpt-4o]\nprovider = \"openai\"\ninput_per_m = 2.5\noutput_per_m = 10.0\n\
             [routes.default]\nchain = [\"gpt-4o\"]\n",
            upstream.base(),
            path.display()
        )
    };
    let cfg = Config::parse(&text(&key), "key-file.toml").unwrap();
    let mut parts = RunnerParts::mock(Clock::system(), Seed(9));
    parts.providers = fusebox::provider::http::build(&cfg, Clock::system(), None).unwrap();
    let runner = Runner::new(cfg, parts).unwrap();
    assert_eq!(runner.run(&ask(1)).await.level, Level::None);
    let sent: Vec<String> = upstream
        .received()
        .iter()
        .map(|r| r.headers["authorization"].to_str().unwrap().to_string())
        .collect();
    assert_eq!(sent, ["Bearer sk-from-a-file"]);

    std::fs::write(&key, "\n").unwrap();
    let missing = dir.path().join("no-such-key");
    let folder = dir.path().to_path_buf();
    for (path, why) in [
        (&key, "it is empty"),
        (&missing, "No such file"),
        (&folder, "not a regular file"),
    ] {
        let cfg = Config::parse(&text(path), "key-file.toml").unwrap();
        let e = fusebox::provider::http::build(&cfg, Clock::system(), None)
            .err()
            .expect("no key, no provider")
            .to_string();
        assert!(
            e.contains(&path.display().to_string()) && e.contains("providers.openai.api_key_file") && e.contains(why),
            "{e}"
        );
    }
    let both = text(&key).replace("api_key_file", "api_key_env = \"OPENAI_API_KEY\"\napi_key_file");
    let e = Config::parse(&both, "key-file.toml").unwrap_err().to_string();
    assert!(
        e.contains("providers.openai.api_key_file") && e.contains("not both"),
        "{e}"
    );
}
