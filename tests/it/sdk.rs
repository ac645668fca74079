//! The official Python SDKs against the gateway, as agents use them: the
//! scripts in `tests/sdk/` (OpenAI: plain, streaming, tools, a tool loop;
//! Anthropic: plain, streaming, a tool loop; the OpenAI Agents SDK running
//! an agent with a function tool to completion in its Responses and chat
//! completions modes) against `fusebox serve`'s routes over the mock providers;
//! the MCP SDK and an Agents SDK agent with MCP tools against its `/mcp`.
//!
//! The Python comes from FUSEBOX_SDK_PYTHON (`.ci/run` makes a venv with
//! `tests/sdk/requirements.txt` and sets it); without it the test prints a
//! notice and passes, unless FUSEBOX_REQUIRE_SDK is set, as in CI.

use fusebox::clock::{Clock, Seed};
use fusebox::config::Config;
use fusebox::gateway::GatewayOptions;
use fusebox::mcp::{McpTools, Upstreams};
use fusebox::mockserver::MockServer;
use fusebox::runner::{Runner, RunnerParts};
use std::path::Path;
use std::process::Command;

pub(crate) fn python() -> Option<String> {
    match std::env::var("FUSEBOX_SDK_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ if std::env::var_os("FUSEBOX_REQUIRE_SDK").is_some() => {
            panic!("FUSEBOX_REQUIRE_SDK is set but FUSEBOX_SDK_PYTHON names no Python")
        }
        _ => {
            eprintln!("notice: FUSEBOX_SDK_PYTHON is not set; the Python SDK checks were skipped");
            None
        }
    }
}

/// A gateway over the instant mock providers, offering at `/mcp` the tools of
/// `cfg`'s MCP servers; its root URL and the runner.
async fn gateway(cfg: Config) -> (String, std::sync::Arc<Runner>) {
    gateway_on(cfg, |_, _| {}).await
}

/// [`gateway`] with `cfg` changed by `edit` once the mock server's root
/// URL (its second argument) is known.
async fn gateway_on(mut cfg: Config, edit: impl FnOnce(&mut Config, &str)) -> (String, std::sync::Arc<Runner>) {
    let clock = Clock::system();
    let mut parts = RunnerParts::mock(clock, Seed(11));
    let mock = MockServer::instant(Seed(11), parts.faults.clone());
    let mock_addr = mock.spawn("127.0.0.1:0").await.unwrap();
    edit(&mut cfg, &format!("http://{mock_addr}"));
    parts.providers = fusebox::provider::http::build(&cfg, clock, Some(&format!("http://{mock_addr}"))).unwrap();
    let mcp = if cfg.mcp.is_empty() {
        None
    } else {
        let upstreams = Upstreams::connect(&cfg.mcp).await.unwrap();
        cfg.tools = upstreams.tool_configs(&Default::default());
        parts.tools = Some(std::sync::Arc::new(McpTools(upstreams.clone())));
        Some(upstreams)
    };
    let runner = Runner::new(cfg, parts).unwrap();
    let opts = GatewayOptions {
        mcp,
        ..GatewayOptions::default()
    };
    let addr = fusebox::gateway::spawn(runner.clone(), "127.0.0.1:0", opts)
        .await
        .unwrap()
        .addr;
    (format!("http://{addr}"), runner)
}

/// Runs `script` of `tests/sdk/` against the gateway at `base`; each of
/// `checks` must print `ok CHECK`.
async fn run_script(python: &str, script: &str, base: &str, checks: &[&str]) {
    run_script_with(python, script, base, &[], checks).await;
}

/// [`run_script`] with the environment variables `env` set too.
pub async fn run_script_with(python: &str, script: &str, base: &str, env: &[(&str, &str)], checks: &[&str]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk");
    let (python, script_path, base) = (python.to_string(), dir.join(script), base.to_string());
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&python)
            .arg(script_path)
            .env("FUSEBOX_BASE_URL", base)
            .envs(env)
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {python}: {e}"))
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    for c in checks {
        assert!(
            stdout.lines().any(|l| l == format!("ok {c}")),
            "{script}: no `ok {c}` in\n{stdout}"
        );
    }
}

/// What `openai_sdk.py` checks: an agent's calls, plain and streamed, with tools.
const OPENAI_SDK_CHECKS: &[&str] = &[
    "plain completion + headers",
    "stream with usage",
    "tool loop",
    "streamed tool call",
];

/// What `anthropic_sdk.py` checks.
const ANTHROPIC_SDK_CHECKS: &[&str] = &[
    "plain message",
    "streamed message",
    "tool_use loop",
    "streamed tool_use",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_sdks_run_their_agents_through_the_gateway() {
    let Some(python) = python() else { return };
    let (base, runner) = gateway(Config::default()).await;
    for (script, checks) in [
        ("openai_sdk.py", OPENAI_SDK_CHECKS),
        ("anthropic_sdk.py", ANTHROPIC_SDK_CHECKS),
        (
            "agents_sdk.py",
            &[
                "agent run (responses)",
                "agent run (responses, streamed)",
                "agent run (chat_completions)",
            ],
        ),
    ] {
        run_script(&python, script, &base, checks).await;
    }
    let [.., failed] = runner.by_level();
    assert_eq!(failed, 0, "every SDK call was answered");
}

/// The mock server's Azure OpenAI routes answer what the official SDK's
/// Azure clients send (deployment URLs with `api-version` and `api-key`;
/// the v1 API) and refuse what Azure refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_azure_fake_speaks_what_the_official_azure_clients_send() {
    let Some(python) = python() else { return };
    let mock = MockServer::new(Seed(5), Default::default());
    let addr = mock.spawn("127.0.0.1:0").await.unwrap();
    let checks = [
        "deployments plain",
        "deployments streamed",
        "deployments tool call",
        "v1 plain",
        "v1 streamed",
        "v1 tool call",
        "deployments embeddings",
        "v1 embeddings",
        "no api-version refused",
        "no key refused",
    ];
    run_script(&python, "azure_fake.py", &format!("http://{addr}"), &checks).await;
}

/// The strict fake's Gemini API answers what Google's official
/// `google-genai` SDK sends, and refuses what Google refuses, in words the
/// SDK reads (its errors' code, status and details).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gemini_fake_speaks_what_the_official_google_sdk_sends() {
    let Some(python) = python() else { return };
    let fake = crate::common::strict::Strict::start().await;
    fake.state.faults.lock().rate_limited = (1, Some(7));
    let checks = [
        "quota error with its retry delay",
        "plain",
        "streamed",
        "tool loop",
        "call without its signature refused",
        "v1 path",
        "invalid key refused",
    ];
    run_script(&python, "gemini_fake.py", &fake.base(), &checks).await;
}

/// The strict fake's Vertex AI answers Google's official `google-genai`
/// SDK signed in with a service account's key (its JWT verified by the
/// fake's token endpoint, its token checked on every call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vertex_fake_speaks_what_the_official_google_sdk_sends() {
    let Some(python) = python() else { return };
    let fake = crate::common::strict::Strict::start().await;
    let dir = tempfile::tempdir().unwrap();
    let key = crate::common::strict_vertex::key_file(dir.path(), &fake.base());
    let key = key.display().to_string();
    let checks = ["plain", "streamed", "tool loop", "embeddings", "v1beta1 path"];
    run_script_with(
        &python,
        "vertex_fake.py",
        &fake.base(),
        &[("FUSEBOX_VERTEX_KEY", &key)],
        &checks,
    )
    .await;
    assert!(
        fake.state.vertex.lock().requests >= 1,
        "the SDK's tokens came from the fake"
    );
    assert!(fake.received().iter().all(|r| r.status == 200));
}

/// The strict fake's Bedrock answers AWS's official SDK (boto3's
/// `bedrock-runtime` client), every request signed by botocore and its
/// signature verified by the fake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bedrock_fake_speaks_what_the_official_aws_sdk_sends() {
    use crate::common::strict_bedrock::{KEY_ID, SECRET};
    let Some(python) = python() else { return };
    let fake = crate::common::strict::Strict::start().await;
    let checks = [
        "converse",
        "converse stream",
        "tool loop",
        "image",
        "titan embeddings",
        "cohere embeddings",
        "wrong secret refused",
    ];
    let env = [("FUSEBOX_AWS_KEY_ID", KEY_ID), ("FUSEBOX_AWS_SECRET", SECRET)];
    run_script_with(&python, "bedrock_fake.py", &fake.base(), &env, &checks).await;
}

/// The OpenAI and Anthropic SDKs' agent loops through the gateway to
/// models on Azure OpenAI (the route's first provider made an
/// `azure-openai` one at the strict fake's deployment URLs, which want an
/// `api-version` and the key in `api-key`), every call answered there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_sdks_run_their_agents_through_the_gateway_to_azure() {
    agents_through_the_gateway_to_a_cloud(fusebox::config::ProviderKind::AzureOpenai).await;
}

/// The OpenAI and Anthropic SDKs' agent loops through the gateway to a
/// model on Google's Gemini API (the route's first provider made a
/// `gemini` one on the strict fake, which refuses a call sent back without
/// its thought signature), every call answered there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_sdks_run_their_agents_through_the_gateway_to_gemini() {
    agents_through_the_gateway_to_a_cloud(fusebox::config::ProviderKind::Gemini).await;
}

/// The same to Vertex AI: the provider signs in with a service account's
/// key at the fake's token endpoint, and every call carries its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_sdks_run_their_agents_through_the_gateway_to_vertex() {
    agents_through_the_gateway_to_a_cloud(fusebox::config::ProviderKind::Vertex).await;
}

/// The same to Amazon Bedrock: every call signed with the environment's
/// AWS keys, its signature verified by the fake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_sdks_run_their_agents_through_the_gateway_to_bedrock() {
    agents_through_the_gateway_to_a_cloud(fusebox::config::ProviderKind::Bedrock).await;
}

/// The OpenAI and Anthropic SDKs' agent loops through the gateway to a
/// strict fake's cloud API (`kind`), every call answered there.
async fn agents_through_the_gateway_to_a_cloud(kind: fusebox::config::ProviderKind) {
    use fusebox::config::ProviderKind;
    let Some(python) = python() else { return };
    let fake = crate::common::strict::Strict::start().await;
    let dir = tempfile::tempdir().unwrap();
    let key = crate::common::strict_vertex::key_file(dir.path(), &fake.base());
    // SAFETY of the test: the variables' names are unique to this test.
    unsafe {
        std::env::set_var("FUSEBOX_TEST_SDK_CLOUD_KEY", "cloud-key");
        std::env::set_var("FUSEBOX_TEST_SDK_VERTEX_KEY", &key);
        std::env::set_var("AWS_ACCESS_KEY_ID", crate::common::strict_bedrock::KEY_ID);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", crate::common::strict_bedrock::SECRET);
    }
    let (base, runner) = gateway_on(Config::default(), |cfg, _| {
        let p = cfg.providers.get_mut("openai").unwrap();
        p.kind = kind;
        if kind == ProviderKind::AzureOpenai {
            p.base_url = Some(fake.base());
            p.api_key_env = Some("FUSEBOX_TEST_SDK_CLOUD_KEY".into());
            p.api_version = Some("2024-10-21".into());
        } else if kind == ProviderKind::Bedrock {
            p.base_url = Some(fake.base());
            p.region = Some("us-east-1".into());
            p.api_key_env = None;
        } else if kind == ProviderKind::Vertex {
            p.base_url = Some(format!("{}/v1", fake.base()));
            p.credentials_env = Some("FUSEBOX_TEST_SDK_VERTEX_KEY".into());
            p.project = Some("fusebox-test".into());
            p.location = Some("us-central1".into());
        } else {
            p.base_url = Some(format!("{}/v1beta", fake.base()));
            p.api_key_env = Some("FUSEBOX_TEST_SDK_CLOUD_KEY".into());
        }
    })
    .await;
    for (script, checks) in [
        ("openai_sdk.py", OPENAI_SDK_CHECKS),
        ("anthropic_sdk.py", ANTHROPIC_SDK_CHECKS),
    ] {
        run_script(&python, script, &base, checks).await;
    }
    let [.., failed] = runner.by_level();
    assert_eq!(failed, 0, "every SDK call was answered");
    let received = fake.received();
    assert!(
        received.iter().all(|r| r.status == 200),
        "the fake refused a call: {:?}",
        received.iter().find(|r| r.status != 200)
    );
    let loops = received
        .iter()
        .filter(|r| {
            let body = r.body.to_string();
            ["functionResponse", "toolResult", r#""role":"tool""#]
                .iter()
                .any(|t| body.contains(t))
        })
        .count();
    assert!(
        loops >= 2,
        "both SDKs' tool loops reached the cloud ({loops} calls with a tool result)"
    );
    let cloud = crate::common::provider_slot(&runner, "openai");
    let stats = &runner.catalog().registry().get(cloud.target).stats;
    assert!(stats.ok.get() > 0, "the calls reached the cloud");
    if kind == ProviderKind::Vertex {
        assert!(fake.state.vertex.lock().requests >= 1, "tokens came from the fake");
    }
}

/// The MCP Python SDK and an Agents SDK agent with MCP tools, through
/// `/mcp` in front of the stdio orders server (`cargo test` builds it):
/// every tool call answered, and no SDK warning (a session ends cleanly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_sdks_run_an_agent_with_tools_behind_fusebox() {
    let Some(python) = python() else { return };
    let cfg = crate::common::mcp::with_orders(None, Config::default());
    let (base, runner) = gateway(cfg).await;
    let checks = ["mcp client session", "agents mcp server", "agent run with mcp"];
    run_script(&python, "mcp_sdk.py", &base, &checks).await;
    let [.., failed] = runner.by_level();
    assert_eq!(failed, 0, "every call was answered");
}

/// Two MCP Python SDK client sessions at once, each with its own caller
/// key, through `/mcp` in front of a Python SDK stdio server that asks its
/// client things back (elicitation, sampling) and tells it things (logs,
/// progress): each session gets its own answers and its own notifications,
/// nothing of one reaches the other; resources, templates and prompts pass
/// through with their names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_mcp_sdk_sessions_each_get_only_what_their_own_calls_caused() {
    let Some(python) = python() else { return };
    // A stdio server starts with a clean environment (PATH and HOME): the
    // Python by its full path where it is given by one (not canonical: a
    // venv's Python is a link, and knows its venv by the link's path).
    let python = match python.contains('/') {
        true => std::path::absolute(&python).map_or(python, |p| p.to_string_lossy().into_owned()),
        false => python,
    };
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/mcp_people_server.py");
    let people = fusebox::config::mcp::McpServerConfig {
        url: None,
        command: vec![python.clone(), server.to_string_lossy().into_owned()],
        env: Default::default(),
        input_timeout_s: 60,
    };
    const ALICE: &str = "sk-people-alice-0123456789";
    const BOB: &str = "sk-people-bob-0123456789";
    let key = crate::common::caller_key;
    let mut cfg = Config {
        mcp: [("people".to_string(), people)].into(),
        ..Config::default()
    };
    cfg.keys = [
        ("alice".to_string(), key(ALICE, "alice")),
        ("bob".to_string(), key(BOB, "bob")),
    ]
    .into();
    cfg.validate("test").unwrap();
    let (base, runner) = gateway(cfg).await;
    let checks = [
        "elicitation per session",
        "sampling per session",
        "elicitation and sampling at once",
        "progress and logs to the caller",
        "resources",
        "prompts",
    ];
    let env = [("FUSEBOX_KEY_A", ALICE), ("FUSEBOX_KEY_B", BOB)];
    run_script_with(&python, "mcp_people.py", &base, &env, &checks).await;
    let [.., failed] = runner.by_level();
    assert_eq!(failed, 0, "every call was answered");
}
