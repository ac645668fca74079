//! The real HTTP clients through real loopback sockets against the mock
//! server: classification of every fault, the breaker/limiter reaction,
//! fallback before the first byte, both OpenAI-compatible modes, and no API
//! key anywhere in what fusebox says.

use fusebox::clock::{Clock, Seed};
use fusebox::command::Issuer;
use fusebox::config::{Config, ProviderConfig, ProviderKind};
use fusebox::mockserver::MockServer;
use fusebox::outcome::Level;
use fusebox::provider::fault::{Fault, FaultSpec, FaultTable};
use fusebox::provider::{ErrorKind, LlmRequest, Message, Provider, ToolSpec};
use fusebox::request::AgentRequest;
use fusebox::runner::{Runner, RunnerParts};
use fusebox::target::Target;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

const SECRET: &str = "sk-test-DO-NOT-LEAK-9f8e7d";

async fn server() -> (Arc<FaultTable>, String) {
    let faults = Arc::new(FaultTable::default());
    let s = MockServer::new(Seed(3), faults.clone());
    let addr = s.spawn("127.0.0.1:0").await.unwrap();
    (faults, format!("http://{addr}"))
}

/// The mock providers as HTTP clients against `base`.
fn clients(cfg: &Config, base: &str) -> HashMap<String, Arc<dyn Provider>> {
    fusebox::provider::http::build(cfg, Clock::system(), Some(base)).unwrap()
}

/// The default config with every provider streaming or not.
fn streaming(stream: bool) -> Config {
    let mut cfg = Config::default();
    for p in cfg.providers.values_mut() {
        p.stream = stream;
    }
    cfg
}

fn quick(cfg: &mut Config) {
    for p in cfg.providers.values_mut() {
        p.timeout_ms = 2_000;
        p.idle_timeout_ms = 1_500;
    }
    cfg.retry.max_retries = 0;
}

fn request(max_tokens: u32, tools: bool) -> LlmRequest {
    let tools: Vec<ToolSpec> = if tools {
        fusebox::tools::specs(&Config::default())
    } else {
        vec![]
    };
    LlmRequest {
        request_id: 7,
        step: 1,
        attempt: 0,
        model: "gpt-4o".into(),
        messages: vec![Message::system("be brief"), Message::user("Where is order #38100?")].into(),
        tools: tools.into(),
        max_tokens,
        ..LlmRequest::default()
    }
}

fn ask(id: u64) -> AgentRequest {
    AgentRequest {
        id,
        user: format!("u{id}").into(),
        session: format!("s{id}").into(),
        route: "default".into(),
        messages: [Message::user(format!("Where is order #381{id:02}?"))].into(),
        max_tokens: 8,
        max_steps: 1,
        ..AgentRequest::default()
    }
}

fn set(faults: &FaultTable, target: &str, fault: Fault) {
    faults.set(&target.parse().expect("a target"), FaultSpec::always(fault));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_answers_in_every_format_and_mode() {
    let (_faults, base) = server().await;
    for stream in [true, false] {
        let cfg = streaming(stream);
        let c = clients(&cfg, &base);
        for name in ["openai", "anthropic", "deepseek"] {
            let r = c[name]
                .complete(&request(6, false))
                .await
                .unwrap_or_else(|e| panic!("{name} stream={stream}: {e}"));
            assert!(!r.text.is_empty(), "{name} stream={stream}");
            assert!(
                r.usage.input > 0 && r.usage.output > 0,
                "{name} stream={stream}: {:?}",
                r.usage
            );
            assert!(r.tokens_per_s.is_some());
        }
        // Rate-limit headers calibrate OpenAI and Anthropic.
        let r = c["openai"].complete(&request(6, false)).await.unwrap();
        let rate = r.rate.expect("openai's answer says its limits");
        assert!(
            rate.remaining_tokens.is_some() && rate.remaining_requests.is_some(),
            "{rate:?}"
        );
        let r = c["anthropic"].complete(&request(6, false)).await.unwrap();
        let rate = r.rate.expect("anthropic's answer says its limits");
        assert!(rate.remaining_input_tokens.is_some(), "{rate:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_are_assembled_streamed_and_not() {
    let (_faults, base) = server().await;
    for stream in [true, false] {
        let cfg = streaming(stream);
        let c = clients(&cfg, &base);
        for name in ["openai", "anthropic"] {
            let mut req = request(64, true);
            req.step = 0;
            // Step 0 with tools: the mock calls get_order most of the time; try a few requests.
            let mut found = None;
            for id in 0..12 {
                req.request_id = id;
                let r = c[name].complete(&req).await.unwrap();
                if let Some(call) = r.tool_calls.first() {
                    found = Some(call.clone());
                    break;
                }
            }
            let call = found.unwrap_or_else(|| panic!("{name} stream={stream}: no tool call in 12 tries"));
            assert_eq!(call.name, "get_order");
            let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
            assert!(
                args["order_id"].is_string(),
                "{name} stream={stream}: {}",
                call.arguments
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_is_classified() {
    let (faults, base) = server().await;
    for stream in [true, false] {
        let mut cfg = streaming(stream);
        for p in cfg.providers.values_mut() {
            p.idle_timeout_ms = 1_000;
        }
        let c = clients(&cfg, &base);
        for name in ["openai", "anthropic", "deepseek"] {
            let target = format!("provider:{name}");
            let cases: Vec<(Fault, ErrorKind)> = vec![
                (
                    Fault::Status {
                        code: 429,
                        retry_after_ms: Some(2_000),
                    },
                    ErrorKind::RateLimited,
                ),
                (
                    Fault::Status {
                        code: 500,
                        retry_after_ms: None,
                    },
                    ErrorKind::ServerError,
                ),
                (
                    Fault::Status {
                        code: 503,
                        retry_after_ms: None,
                    },
                    ErrorKind::Overloaded,
                ),
                (
                    Fault::Status {
                        code: 529,
                        retry_after_ms: None,
                    },
                    ErrorKind::Overloaded,
                ),
                (
                    Fault::Status {
                        code: 400,
                        retry_after_ms: None,
                    },
                    ErrorKind::BadRequest,
                ),
                (
                    Fault::Status {
                        code: 402,
                        retry_after_ms: None,
                    },
                    ErrorKind::InsufficientBalance,
                ),
                (Fault::ConnectionRefused, ErrorKind::Connect),
                (Fault::Truncated, ErrorKind::Truncated),
            ];
            for (fault, kind) in cases {
                set(&faults, &target, fault.clone());
                let e = c[name]
                    .complete(&request(6, false))
                    .await
                    .expect_err(&format!("{name} {fault:?}"));
                let ok = e.kind == kind || (fault == Fault::ConnectionRefused && e.kind == ErrorKind::Reset);
                assert!(ok, "{name} stream={stream} {fault:?}: got {:?} ({})", e.kind, e.message);
                if kind == ErrorKind::RateLimited {
                    assert_eq!(e.retry_after, Some(Duration::from_secs(2)), "{name}: {e:?}");
                }
            }
            // Timeout: nothing comes back; the caller's deadline decides.
            set(&faults, &target, Fault::Timeout);
            let r = tokio::time::timeout(Duration::from_millis(800), c[name].complete(&request(6, false))).await;
            assert!(r.is_err(), "{name}: a timeout fault must not answer");
            set(&faults, &target, Fault::Healthy);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semantic_faults_reach_the_runner_as_semantic_failures() {
    let (faults, base) = server().await;
    let mut cfg = Config::default();
    quick(&mut cfg);
    let mut parts = RunnerParts::mock(Clock::system(), Seed(3));
    parts.faults = faults.clone();
    parts.providers = clients(&cfg, &base);
    let r = Runner::new(cfg, parts).unwrap();
    set(&faults, "provider:openai", Fault::Hallucinate);
    let mut req = ask(1);
    req.tools = vec!["get_order".into()];
    req.max_tokens = 64;
    let o = r.run(&req).await;
    assert_eq!(o.path()[0], "gpt-4o ✗semantic", "{:?}", o.path());
    assert!(
        r.catalog()
            .registry()
            .find(&Target::model("gpt-4o"))
            .unwrap()
            .stats
            .view()
            .semantic
            >= 1
    );
    set(&faults, "provider:openai", Fault::BadArguments);
    let mut req = ask(2);
    req.tools = vec!["get_order".into()];
    req.max_tokens = 64;
    let o = r.run(&req).await;
    assert_eq!(o.path()[0], "gpt-4o ✗semantic", "{:?}", o.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_keeps_traffic_off_the_provider_and_headers_calibrate_the_limiter() {
    let (faults, base) = server().await;
    let mut cfg = Config::default();
    quick(&mut cfg);
    let mut parts = RunnerParts::mock(Clock::system(), Seed(3));
    parts.faults = faults.clone();
    parts.providers = clients(&cfg, &base);
    let r = Runner::new(cfg, parts).unwrap();
    let openai = |r: &Runner| {
        r.catalog()
            .registry()
            .find(&Target::provider("openai"))
            .unwrap()
            .stats
            .view()
            .attempts
    };
    // Rate-limit headers calibrate the local limiter. (What a calibration
    // does to the buckets is held on a paused clock in `limiter_props`:
    // here the bucket is full again a few ms after the call, at the reset
    // the provider announced.)
    let o = r.run(&ask(1)).await;
    assert_eq!(o.level, Level::None, "{:?}", o.path());
    let lim = &r
        .catalog()
        .providers()
        .iter()
        .find(|p| p.name == "openai")
        .unwrap()
        .limiter;
    let v = lim.view(tokio::time::Instant::now());
    assert!(v.calibrated_ms_ago.is_some(), "{v:?}");
    // A 429 with retry-after: 2 freezes the limiter: no request reaches openai for 2 s.
    set(
        &faults,
        "provider:openai",
        Fault::Status {
            code: 429,
            retry_after_ms: Some(2_000),
        },
    );
    let o = r.run(&ask(2)).await;
    assert_eq!(o.level, Level::Fallback, "{:?}", o.path());
    set(&faults, "provider:openai", Fault::Healthy);
    let before = openai(&r);
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_millis(1_500) {
        let o = r.run(&ask(3)).await;
        assert_ne!(o.level, Level::Failed);
        assert_eq!(o.path()[0], "gpt-4o ⏳rate", "{:?}", o.path());
    }
    assert_eq!(openai(&r), before, "no call reached openai during its Retry-After");
    tokio::time::sleep(Duration::from_millis(700)).await;
    let o = r.run(&ask(4)).await;
    assert_eq!(
        o.path()[0],
        "gpt-4o ✓",
        "after the Retry-After openai is used again: {:?}",
        o.path()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failure_before_the_first_byte_falls_back() {
    let (faults, base) = server().await;
    let mut cfg = Config::default();
    quick(&mut cfg);
    let mut parts = RunnerParts::mock(Clock::system(), Seed(3));
    parts.faults = faults.clone();
    parts.providers = clients(&cfg, &base);
    let r = Runner::new(cfg, parts).unwrap();
    for (fault, label) in [
        (
            Fault::Status {
                code: 503,
                retry_after_ms: None,
            },
            "gpt-4o ✗503",
        ),
        (Fault::ConnectionRefused, "gpt-4o ✗"),
        (Fault::Truncated, "gpt-4o ✗truncated"),
    ] {
        set(&faults, "provider:openai", fault);
        let o = r.run(&ask(9)).await;
        assert_eq!(o.level, Level::Fallback, "{:?}", o.path());
        assert!(o.path()[0].starts_with(label), "{:?}", o.path());
        assert_eq!(o.path()[1], "claude-haiku ✓");
        r.operations()
            .apply(
                &fusebox::command::Command::Reset {
                    target: Target::provider("openai"),
                },
                &Issuer::operator("t"),
            )
            .unwrap();
        r.operations()
            .apply(
                &fusebox::command::Command::Reset {
                    target: Target::model("gpt-4o"),
                },
                &Issuer::operator("t"),
            )
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_compatible_server_streamed_and_not_and_no_key_leaks() {
    let (faults, base) = server().await;
    // SAFETY of the test: the variable name is unique to this test.
    unsafe { std::env::set_var("FUSEBOX_TEST_LOCAL_KEY", SECRET) };
    let mut seen = Vec::new();
    for stream in [true, false] {
        let mut cfg = Config::default();
        quick(&mut cfg);
        cfg.providers.insert(
            "local".into(),
            ProviderConfig {
                kind: ProviderKind::OpenaiCompatible,
                base_url: Some(format!("{base}/v1")),
                api_key_env: Some("FUSEBOX_TEST_LOCAL_KEY".into()),
                stream,
                ..ProviderConfig::mock(0, 0, 0, 0, 0, 4.0)
            },
        );
        let mut m = cfg.models["gpt-4o"].clone();
        m.provider = "local".into();
        m.api_name = Some("llama3.1:8b".into());
        cfg.models.insert("llama".into(), m);
        cfg.routes.get_mut("default").unwrap().chain = vec!["llama".into(), "claude-haiku".into()];
        let mut parts = RunnerParts::mock(Clock::system(), Seed(3));
        parts.faults = faults.clone();
        parts.providers = fusebox::provider::http::build(&cfg, Clock::system(), None).unwrap();
        parts
            .providers
            .extend(clients(&cfg, &base).into_iter().filter(|(k, _)| k != "local"));
        let r = Runner::new(cfg, parts).unwrap();
        let mut rx = r.events().subscribe();
        let o = r.run(&ask(1)).await;
        assert_eq!(o.level, Level::None, "stream={stream}: {:?}", o.path());
        assert_eq!(o.path(), vec!["llama ✓".to_string()]);
        // The openai-compatible path is the mock's /v1/chat/completions: fail it too.
        set(
            &faults,
            "provider:openai",
            Fault::Status {
                code: 401,
                retry_after_ms: None,
            },
        );
        let o = r.run(&ask(2)).await;
        set(&faults, "provider:openai", Fault::Healthy);
        seen.push(format!("{o:?}"));
        while let Ok(e) = rx.try_recv() {
            seen.push(serde_json::to_string(&e).unwrap());
        }
        let e = r
            .catalog()
            .providers()
            .iter()
            .find(|p| p.name == "local")
            .unwrap()
            .client
            .complete(&request(4, false))
            .await;
        seen.push(format!("{e:?}"));
    }
    let all = seen.join("\n");
    assert!(!all.contains(SECRET), "the API key leaked: {all}");
    assert!(!all.contains("DO-NOT-LEAK"));
}

/// Azure OpenAI, at its deployment URLs (`api_version`) and by its v1
/// API, streamed and not: answered with the key in `api-key` (the mock
/// refuses a call without one, and a deployment URL without an
/// api-version); its 429 moves the route to the next model; the key is
/// nowhere in what fusebox says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_openai_by_deployment_and_by_v1_answers_and_falls_back() {
    let (faults, base) = server().await;
    // SAFETY of the test: the variable name is unique to this test.
    unsafe { std::env::set_var("FUSEBOX_TEST_AZURE_KEY", SECRET) };
    let mut seen = Vec::new();
    for (api_version, stream) in [
        (Some("2024-10-21"), true),
        (Some("2024-10-21"), false),
        (None, true),
        (None, false),
    ] {
        let mut cfg = Config::default();
        quick(&mut cfg);
        cfg.providers.insert(
            "azure".into(),
            ProviderConfig {
                kind: ProviderKind::AzureOpenai,
                base_url: Some(format!("{base}/")),
                api_key_env: Some("FUSEBOX_TEST_AZURE_KEY".into()),
                api_version: api_version.map(str::to_string),
                stream,
                ..ProviderConfig::mock(450_000, 0, 0, 2_700, 0, 4.0)
            },
        );
        let mut m = cfg.models["gpt-4o"].clone();
        m.provider = "azure".into();
        m.api_name = Some("prod-gpt-4o".into());
        cfg.models.insert("azure-4o".into(), m);
        cfg.routes.get_mut("default").unwrap().chain = vec!["azure-4o".into(), "claude-haiku".into()];
        cfg.validate("test").unwrap();
        let mut parts = RunnerParts::mock(Clock::system(), Seed(3));
        parts.faults = faults.clone();
        parts.providers = fusebox::provider::http::build(&cfg, Clock::system(), None).unwrap();
        parts
            .providers
            .extend(clients(&cfg, &base).into_iter().filter(|(k, _)| k != "azure"));
        let r = Runner::new(cfg, parts).unwrap();
        let mut rx = r.events().subscribe();
        let case = format!("api_version {api_version:?}, stream {stream}");
        let o = r.run(&ask(1)).await;
        assert_eq!(o.path(), vec!["azure-4o ✓".to_string()], "{case}");
        let azure = &r
            .catalog()
            .providers()
            .iter()
            .find(|p| p.name == "azure")
            .unwrap()
            .client;
        let body = fusebox::wire::RawBody::parse(br#"{"model": "embed", "input": ["refund"]}"#).unwrap();
        let embed = fusebox::provider::EmbedRequest {
            request_id: 1,
            model: "prod-embed".into(),
            body: Arc::new(body),
            chars: 6,
        };
        let e = azure.embed(&embed).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&e.body).unwrap();
        assert_eq!(v["data"].as_array().map(Vec::len), Some(1), "{case}: {v}");
        // Its rate-limit headers calibrate the limiter, as OpenAI's do.
        let lim = &r
            .catalog()
            .providers()
            .iter()
            .find(|p| p.name == "azure")
            .unwrap()
            .limiter;
        let v = lim.view(tokio::time::Instant::now());
        assert!(v.calibrated_ms_ago.is_some(), "{case}: {v:?}");
        set(
            &faults,
            "provider:azure",
            Fault::Status {
                code: 429,
                retry_after_ms: Some(20_000),
            },
        );
        let o = r.run(&ask(2)).await;
        set(&faults, "provider:azure", Fault::Healthy);
        assert_eq!(o.level, Level::Fallback, "{case}: {:?}", o.path());
        assert!(o.path()[0].starts_with("azure-4o ✗429"), "{case}: {:?}", o.path());
        assert_eq!(o.path()[1], "claude-haiku ✓", "{case}");
        // Its retry-after keeps the next call off it.
        let o = r.run(&ask(3)).await;
        assert_eq!(o.path()[0], "azure-4o ⏳rate", "{case}: {:?}", o.path());
        seen.push(format!("{o:?}"));
        while let Ok(e) = rx.try_recv() {
            seen.push(serde_json::to_string(&e).unwrap());
        }
    }
    let all = seen.join("\n");
    assert!(!all.contains(SECRET), "the API key leaked: {all}");
}

/// An Azure OpenAI provider's settings are checked where they are read.
#[test]
fn azure_openai_settings_are_checked() {
    let azure = |f: &dyn Fn(&mut ProviderConfig)| {
        let mut cfg = Config::default();
        let mut p = ProviderConfig {
            kind: ProviderKind::AzureOpenai,
            base_url: Some("https://my-resource.openai.azure.com".into()),
            api_key_env: Some("AZURE_OPENAI_API_KEY".into()),
            ..ProviderConfig::mock(0, 0, 0, 0, 0, 4.0)
        };
        f(&mut p);
        cfg.providers.insert("azure".into(), p);
        cfg.validate("t.toml").err().map(|e| e.to_string()).unwrap_or_default()
    };
    assert_eq!(azure(&|_| {}), "");
    assert_eq!(azure(&|p| p.api_version = Some("2024-10-21".into())), "");
    type Change<'a> = &'a dyn Fn(&mut ProviderConfig);
    let cases: [(Change, &str); 6] = [
        (&|p| p.base_url = None, "providers.azure.base_url"),
        (&|p| p.base_url = Some("https://".into()), "providers.azure.base_url"),
        (&|p| p.api_key_env = None, "providers.azure.api_key_env"),
        (
            &|p| p.entra_token_env = Some("T".into()),
            "providers.azure.entra_token_env",
        ),
        (
            &|p| p.api_version = Some("2024 10 21".into()),
            "providers.azure.api_version",
        ),
        (
            &|p| {
                p.kind = ProviderKind::Openai;
                p.api_version = Some("2024-10-21".into());
            },
            "providers.azure.api_version",
        ),
    ];
    for (change, field) in cases {
        let err = azure(change);
        assert!(err.contains(field), "{field}: {err}");
    }
}

#[test]
fn a_missing_key_names_the_variable() {
    let mut cfg = Config::default();
    cfg.providers.get_mut("openai").unwrap().kind = ProviderKind::Openai;
    cfg.providers.get_mut("openai").unwrap().api_key_env = Some("FUSEBOX_TEST_SURELY_UNSET".into());
    let err = fusebox::provider::http::build(&cfg, Clock::with_wall_anchor(0), None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("FUSEBOX_TEST_SURELY_UNSET") && err.contains("`openai`"),
        "{err}"
    );
}

/// A key no HTTP header can carry (a line break pasted into it) is never
/// sent: each call ends as a credentials failure, fusebox's own, which
/// moves no breaker, and the key is not in what it says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_no_header_can_carry_is_fusebox_s_own_credentials_failure() {
    let (_faults, base) = server().await;
    // SAFETY of the test: the variable name is unique to this test.
    unsafe { std::env::set_var("FUSEBOX_TEST_BROKEN_KEY", format!("{SECRET}\n")) };
    for kind in [ProviderKind::Openai, ProviderKind::AzureOpenai, ProviderKind::Anthropic] {
        let mut cfg = Config::default();
        quick(&mut cfg);
        let base_url = match kind {
            ProviderKind::Anthropic => base.clone(),
            _ => format!("{base}/v1"),
        };
        cfg.providers.insert(
            "broken".into(),
            ProviderConfig {
                kind,
                base_url: Some(base_url),
                api_key_env: Some("FUSEBOX_TEST_BROKEN_KEY".into()),
                ..ProviderConfig::mock(0, 0, 0, 0, 0, 4.0)
            },
        );
        let clients = fusebox::provider::http::build(&cfg, Clock::system(), None).unwrap();
        let e = clients["broken"].complete(&request(4, false)).await.unwrap_err();
        assert_eq!((e.kind, e.status), (ErrorKind::Auth, None), "{kind:?}: {e:?}");
        assert_eq!(e.kind.failure(), fusebox::resilience::breaker::FailureKind::Blameless);
        assert!(
            e.message.contains("broken") && !e.message.contains("DO-NOT-LEAK"),
            "{e:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_streams_stalls_resets_and_blowups_through_the_real_clients() {
    let (faults, base) = server().await;
    let mut cfg = Config::default();
    for p in cfg.providers.values_mut() {
        p.idle_timeout_ms = 5_000;
    }
    let c = clients(&cfg, &base);
    for name in ["openai", "anthropic", "deepseek"] {
        let target = format!("provider:{name}");
        // Reset mid-call: a transport failure, never a success.
        set(&faults, &target, Fault::Reset);
        let e = c[name].complete(&request(6, false)).await.expect_err(name);
        assert!(
            matches!(e.kind, ErrorKind::Reset | ErrorKind::Connect | ErrorKind::Truncated),
            "{name}: {e:?}"
        );
        // Slow tokens: the call succeeds but its measured rate is far below normal.
        set(&faults, &target, Fault::SlowTokens { tokens_per_s: 20.0 });
        let r = c[name].complete(&request(10, false)).await.unwrap();
        let tps = r.tokens_per_s.unwrap();
        assert!(tps < 20.0, "{name}: {tps} tokens/s");
        // Keep-alive stall: keep-alives are not progress, so the rate collapses.
        set(&faults, &target, Fault::KeepAliveStall { ms: 1_500 });
        let t0 = std::time::Instant::now();
        let r = c[name].complete(&request(6, false)).await.unwrap();
        assert!(
            t0.elapsed() >= Duration::from_millis(1_500),
            "{name}: the stall happened"
        );
        assert!(r.tokens_per_s.unwrap() < 6.0 / 1.5, "{name}: {:?}", r.tokens_per_s);
        // Token blow-up: usage says so, for the cost breaker to see.
        set(&faults, &target, Fault::TokenBlowup { factor: 20 });
        let mut req = request(6, false);
        req.max_tokens = 4;
        let r = c[name].complete(&req).await.unwrap();
        assert!(r.usage.output >= 4 * 20, "{name}: {:?}", r.usage);
        set(&faults, &target, Fault::Healthy);
    }
}
