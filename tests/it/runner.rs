//! The runner's request lifecycle, end to end on virtual time: fallback,
//! retries, retry budget, open breakers, semantic failures, budgets, tool
//! degradation, defer and restart, drill mode and operator commands.

use crate::common;
use fusebox::command::Issuer;
use fusebox::target::Target;
use fusebox::telemetry::events::Transition;

use common::{ask, ask_with_tools, get_order_call, runner, Scripted, Step};
use fusebox::command::Command;
use fusebox::config::Config;
use fusebox::outcome::Level;
use fusebox::provider::fault::{Fault, FaultSpec};
use fusebox::provider::{Provider, ToolCall};
use fusebox::resilience::breaker::BreakerState;
use fusebox::telemetry::events::EventKind;
use std::sync::Arc;
use std::time::Duration;

fn stats(r: &fusebox::runner::Runner, target: &str) -> fusebox::telemetry::stats::StatsView {
    crate::common::entry(r, target).stats.view()
}

#[tokio::test(start_paused = true)]
async fn failed_primary_falls_back_with_metadata() {
    let openai = Scripted::new(vec![], Step::status(503));
    let r = runner(
        Config::default(),
        vec![("openai", openai.clone() as Arc<dyn Provider>)],
        None,
    );
    let o = r.run(&ask(1, "alice")).await;
    assert_eq!(o.level, Level::Fallback);
    // 1 attempt + 2 retries on gpt-4o, then claude-haiku answers.
    assert_eq!(openai.calls(), 3);
    assert_eq!(
        o.path(),
        vec!["gpt-4o ✗503×3".to_string(), "claude-haiku ✓".to_string()]
    );
    assert_eq!(o.quality, 0.85);
    assert_eq!(o.attempts, 4);
    assert_eq!(stats(&r, "model:gpt-4o").retries, 2);
    assert_eq!(r.by_level()[Level::Fallback.index()], 1);
}

#[tokio::test(start_paused = true)]
async fn fallback_hops_reduce_max_tokens() {
    let openai = Scripted::new(vec![], Step::status(400));
    let anthropic = Scripted::new(vec![], Step::ok());
    let r = runner(
        Config::default(),
        vec![
            ("openai", openai.clone() as Arc<dyn Provider>),
            ("anthropic", anthropic.clone() as Arc<dyn Provider>),
        ],
        None,
    );
    let o = r.run(&ask(1, "alice")).await;
    assert_eq!(o.level, Level::Fallback);
    assert_eq!(openai.seen.lock().clone(), vec![(0, 256)], "400 is never retried");
    assert_eq!(
        anthropic.seen.lock().clone(),
        vec![(0, 128)],
        "max_tokens halves on the fallback hop"
    );
}

#[tokio::test(start_paused = true)]
async fn never_retries_client_errors() {
    for code in [400, 401, 402, 403, 404, 413, 422] {
        let openai = Scripted::new(vec![], Step::status(code));
        let r = runner(
            Config::default(),
            vec![("openai", openai.clone() as Arc<dyn Provider>)],
            None,
        );
        let o = r.run(&ask(1, "alice")).await;
        assert_eq!(openai.calls(), 1, "HTTP {code} must not be retried");
        assert_eq!(o.level, Level::Fallback, "HTTP {code}");
        // Client errors do not count against the provider's breaker.
        assert_eq!(
            crate::common::entry(&r, "provider:openai")
                .breaker
                .view(tokio::time::Instant::now())
                .calls_in_window,
            0
        );
    }
}

#[tokio::test(start_paused = true)]
async fn retry_honours_retry_after() {
    let openai = Scripted::new(
        vec![Step::Status {
            code: 429,
            retry_after_ms: Some(7_000),
            delay_ms: 10,
        }],
        Step::Ok {
            delay_ms: 10,
            output: 10,
            tool_calls: vec![],
        },
    );
    let r = runner(
        Config::default(),
        vec![("openai", openai.clone() as Arc<dyn Provider>)],
        None,
    );
    let t0 = tokio::time::Instant::now();
    let o = r.run(&ask(1, "alice")).await;
    assert_eq!(o.level, Level::None);
    assert_eq!(o.path(), vec!["gpt-4o ✓×2".to_string()]);
    assert_eq!(
        t0.elapsed(),
        Duration::from_millis(7_020),
        "waited exactly the Retry-After between attempts"
    );
    // The 429's Retry-After also froze the limiter's refills.
    let lim = crate::common::provider_slot(&r, "openai")
        .limiter
        .view(tokio::time::Instant::now());
    assert_eq!(lim.rate_limited, 1);
}

#[tokio::test(start_paused = true)]
async fn retry_budget_caps_retries_during_an_outage() {
    let mut cfg = Config::default();
    cfg.retry.budget_ratio = 0.2;
    cfg.retry.budget_min_per_s = 0;
    let openai = Scripted::new(vec![], Step::status(500));
    let r = runner(cfg, vec![("openai", openai.clone() as Arc<dyn Provider>)], None);
    // Keep the breakers out of the way: only the retry budget may stop retries.
    for t in ["provider:openai", "model:gpt-4o"] {
        r.operations()
            .apply(
                &Command::ForceClosed {
                    target: t.parse().unwrap(),
                },
                &Issuer::operator("t"),
            )
            .unwrap();
    }
    let mut set = tokio::task::JoinSet::new();
    for i in 0..50 {
        let r = r.clone();
        set.spawn(async move { r.run(&ask(i, &format!("u{i}"))).await });
    }
    while set.join_next().await.is_some() {}
    let s = stats(&r, "model:gpt-4o");
    // Without a budget these 50 requests would make 100 retries.
    assert_eq!(s.retries, 10, "retries must stay within 20% of 50 requests");
    assert_eq!(openai.calls(), 60);
}

#[tokio::test(start_paused = true)]
async fn open_breaker_skips_the_model_and_its_retries() {
    let openai = Scripted::new(vec![], Step::ok());
    let r = runner(
        Config::default(),
        vec![("openai", openai.clone() as Arc<dyn Provider>)],
        None,
    );
    r.operations()
        .apply(
            &Command::ForceOpen {
                target: Target::provider("openai"),
            },
            &Issuer::operator("tester"),
        )
        .unwrap();
    let o = r.run(&ask(1, "alice")).await;
    assert_eq!(openai.calls(), 0);
    assert_eq!(o.path()[0], "gpt-4o ⊘open");
    assert_eq!(o.level, Level::Fallback);
    assert_eq!(stats(&r, "provider:openai").rejected_open, 1);
    assert_eq!(
        stats(&r, "model:gpt-4o").rejected_open,
        1,
        "the model's call, refused by its provider's breaker"
    );
}

#[tokio::test(start_paused = true)]
async fn breaker_opens_after_consecutive_failures_then_recovers_with_a_ramp() {
    let openai = Scripted::new(vec![], Step::status(503));
    let mut cfg = Config::default();
    cfg.retry.max_retries = 0;
    let r = runner(cfg, vec![("openai", openai.clone() as Arc<dyn Provider>)], None);
    for i in 0..5 {
        r.run(&ask(i, "alice")).await;
    }
    let b = &crate::common::entry(&r, "provider:openai").breaker;
    assert_eq!(b.state(), BreakerState::Open);
    let before = openai.calls();
    r.run(&ask(10, "alice")).await;
    assert_eq!(openai.calls(), before, "no call while open");
    tokio::time::advance(Duration::from_secs(31)).await;
    b.tick(tokio::time::Instant::now());
    assert_eq!(b.state(), BreakerState::HalfOpen);
}

#[tokio::test(start_paused = true)]
async fn hallucinated_tool_is_a_semantic_failure_and_falls_back() {
    let bad = ToolCall::new("call_bad", "get_odrer", r#"{"order_id":"1"}"#);
    let openai = Scripted::new(
        vec![],
        Step::Ok {
            delay_ms: 10,
            output: 40,
            tool_calls: vec![bad],
        },
    );
    let r = runner(
        Config::default(),
        vec![("openai", openai.clone() as Arc<dyn Provider>)],
        None,
    );
    let o = r.run(&ask_with_tools(1, "alice")).await;
    assert!(o.path()[0] == "gpt-4o ✗semantic", "{:?}", o.path());
    assert_eq!(stats(&r, "model:gpt-4o").semantic, 1);
    assert_eq!(openai.calls(), 1, "semantic failures are not retried on the same model");
    assert_ne!(o.level, Level::Failed);
}

#[tokio::test(start_paused = true)]
async fn budget_rejection_names_the_budget_and_costs_nothing() {
    let mut cfg = Config::default();
    cfg.budgets.user_tokens_per_minute = 100;
    let openai = Scripted::new(vec![], Step::ok());
    let r = runner(cfg, vec![("openai", openai.clone() as Arc<dyn Provider>)], None);
    let o = r.run(&ask(1, "alice")).await;
    assert_eq!(o.level, Level::Failed);
    let msg = o.user_message.unwrap();
    // The call alone is more than the minute allows: said so.
    assert!(
        msg.contains("user alice budget") && msg.contains("tokens/minute") && msg.contains("can never be served"),
        "{msg}"
    );
    assert_eq!(openai.calls(), 0);
    assert_eq!(r.totals().budget_rejections.get("alice").map(|v| *v), Some(1));
}

#[tokio::test(start_paused = true)]
async fn concurrent_requests_cannot_overshoot_a_budget() {
    let mut cfg = Config::default();
    // Each call reserves its estimate (~10 prompt + 256 max_tokens).
    cfg.budgets.user_tokens_per_minute = 2_700;
    let openai = Scripted::new(
        vec![],
        Step::Ok {
            delay_ms: 5_000,
            output: 10,
            tool_calls: vec![],
        },
    );
    let r = runner(cfg, vec![("openai", openai.clone() as Arc<dyn Provider>)], None);
    let mut set = tokio::task::JoinSet::new();
    for i in 0..40 {
        let r = r.clone();
        let mut req = ask(i, "alice");
        req.session = format!("alice/{i}").into();
        set.spawn(async move { r.run(&req).await });
    }
    let mut admitted = 0;
    while let Some(o) = set.join_next().await {
        if o.unwrap().level != Level::Failed {
            admitted += 1;
        }
    }
    assert_eq!(openai.calls(), admitted);
    assert!(
        admitted <= 10,
        "at most 2700/266 reservations fit at once, got {admitted}"
    );
    assert!(admitted >= 9);
}

#[tokio::test(start_paused = true)]
async fn failing_optional_tool_is_skipped_and_critical_tool_uses_the_cache() {
    let calls = vec![
        get_order_call(),
        ToolCall::new("call_search", "search_docs", r#"{"query":"x"}"#),
    ];
    let openai = Scripted::new(
        vec![
            Step::Ok {
                delay_ms: 10,
                output: 20,
                tool_calls: calls.clone(),
            },
            Step::ok(),
            Step::Ok {
                delay_ms: 10,
                output: 20,
                tool_calls: calls.clone(),
            },
        ],
        Step::ok(),
    );
    let r = runner(
        Config::default(),
        vec![("openai", openai.clone() as Arc<dyn Provider>)],
        None,
    );
    // First request fills the cache.
    let o = r.run(&ask_with_tools(1, "alice")).await;
    assert_eq!(o.level, Level::None, "{:?}", o.path());
    // Then both tools fail.
    for t in ["tool:get_order", "tool:search_docs"] {
        r.operations()
            .apply(
                &Command::SetFault {
                    target: t.parse().unwrap(),
                    fault: FaultSpec::always(Fault::Status {
                        code: 503,
                        retry_after_ms: None,
                    }),
                },
                &Issuer::operator("t"),
            )
            .unwrap();
    }
    tokio::time::advance(Duration::from_secs(60)).await;
    let o = r.run(&ask_with_tools(2, "alice")).await;
    assert!(o.path().contains(&"tool:get_order cache".to_string()), "{:?}", o.path());
    assert!(o.stale_ms.unwrap() >= 60_000);
    // search_docs was cached too (cache_ttl_s = 3600), so nothing is missing.
    assert!(o.missing.is_empty(), "{:?}", o.missing);
    assert_eq!(o.level, Level::Fallback);
    assert!(o.user_message.unwrap().contains("minutes ago"));
    // Both requests needed both tools (once each, whatever the steps); the
    // second was degraded by them, not by the model that answered.
    for t in ["tool:get_order", "tool:search_docs"] {
        assert_eq!((stats(&r, t).needed, stats(&r, t).degraded), (2, 1), "{t}");
    }
    let p = stats(&r, "provider:openai");
    assert_eq!((p.needed, p.degraded), (2, 0));
}

#[tokio::test(start_paused = true)]
async fn critical_tool_down_defers_and_the_request_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let spool = dir.path().join("spool.jsonl");
    let tool_step = Step::Ok {
        delay_ms: 10,
        output: 20,
        tool_calls: vec![get_order_call()],
    };
    let openai = Scripted::new(vec![tool_step.clone()], Step::ok());
    let r = runner(
        Config::default(),
        vec![("openai", openai as Arc<dyn Provider>)],
        Some(spool.clone()),
    );
    r.operations()
        .apply(
            &Command::ForceOpen {
                target: Target::tool("get_order"),
            },
            &Issuer::operator("t"),
        )
        .unwrap();
    let o = r.run(&ask_with_tools(1, "alice")).await;
    assert_eq!(o.level, Level::Deferred);
    assert!(o.user_message.unwrap().contains("queued"));
    assert_eq!(r.spool().unwrap().len(), 1);
    drop(r);

    // "Restart": a new runner on the same spool finds the request.
    let openai = Scripted::new(vec![tool_step], Step::ok());
    let r = runner(
        Config::default(),
        vec![("openai", openai as Arc<dyn Provider>)],
        Some(spool.clone()),
    );
    assert_eq!(r.spool().unwrap().len(), 1);
    let mut events = r.events().subscribe();
    assert_eq!(r.redrive_deferred(false).await, 1, "get_order is healthy again");
    assert_eq!(r.spool().unwrap().len(), 0);
    let mut done = None;
    while let Ok(e) = events.try_recv() {
        if let EventKind::DeferredDone { request, level } = e.kind {
            done = Some((request, level.as_str()));
        }
    }
    assert_eq!(done, Some((1, "none")));
}

#[tokio::test(start_paused = true)]
async fn all_models_down_without_cache_defers_or_fails_gracefully() {
    let mut cfg = Config::default();
    cfg.retry.max_retries = 0;
    let down = || Scripted::new(vec![], Step::status(503)) as Arc<dyn Provider>;
    let r = runner(
        cfg.clone(),
        vec![("openai", down()), ("anthropic", down()), ("deepseek", down())],
        None,
    );
    let o = r.run(&ask(1, "alice")).await;
    assert_eq!(o.level, Level::Failed);
    assert_eq!(o.user_message.as_deref(), Some(cfg.degradation.user_message.as_str()));
    assert_eq!(o.path().len(), 3);
    assert_eq!(o.quality, 0.0);
}

#[tokio::test(start_paused = true)]
async fn drill_mode_sends_optional_tools_down_their_degradation_branch() {
    let openai = Scripted::new(
        vec![Step::Ok {
            delay_ms: 10,
            output: 20,
            tool_calls: vec![get_order_call()],
        }],
        Step::ok(),
    );
    let r = runner(Config::default(), vec![("openai", openai as Arc<dyn Provider>)], None);
    r.operations()
        .apply(&Command::DrillOn, &Issuer::operator("tester"))
        .unwrap();
    let o = r.run(&ask_with_tools(1, "alice")).await;
    assert_eq!(o.level, Level::Partial);
    assert_eq!(o.missing, vec!["lookup_shipping", "search_docs", "send_notification"]);
    assert_eq!(stats(&r, "tool:get_order").ok, 1, "the critical tool still runs");
    r.operations()
        .apply(&Command::DrillOff, &Issuer::operator("tester"))
        .unwrap();
    assert!(!r.drill());
}

#[tokio::test(start_paused = true)]
async fn operator_commands_apply_and_are_announced() {
    let r = runner(Config::default(), vec![], None);
    let mut events = r.events().subscribe();
    let now = tokio::time::Instant::now;
    let b = |n: &str| {
        r.catalog()
            .registry()
            .find(&n.parse().unwrap())
            .unwrap()
            .breaker
            .state()
    };
    r.operations()
        .apply(
            &Command::ForceOpen {
                target: Target::model("gpt-4o"),
            },
            &Issuer::operator("ana"),
        )
        .unwrap();
    assert_eq!(b("model:gpt-4o"), BreakerState::ForcedOpen);
    r.operations()
        .apply(
            &Command::ForceClosed {
                target: Target::model("gpt-4o"),
            },
            &Issuer::operator("ana"),
        )
        .unwrap();
    assert_eq!(b("model:gpt-4o"), BreakerState::ForcedClosed);
    r.operations()
        .apply(
            &Command::Disable {
                target: Target::tool("search_docs"),
            },
            &Issuer::operator("ana"),
        )
        .unwrap();
    assert_eq!(b("tool:search_docs"), BreakerState::Disabled);
    r.operations()
        .apply(
            &Command::Reset {
                target: Target::model("gpt-4o"),
            },
            &Issuer::operator("ana"),
        )
        .unwrap();
    assert_eq!(b("model:gpt-4o"), BreakerState::Closed);
    r.operations()
        .apply(
            &Command::FreezeRefill {
                target: Target::provider("openai"),
            },
            &Issuer::operator("ana"),
        )
        .unwrap();
    let lim = &crate::common::provider_slot(&r, "openai").limiter;
    assert!(lim.is_frozen(now()));
    r.operations()
        .apply(
            &Command::UnfreezeRefill {
                target: Target::provider("openai"),
            },
            &Issuer::operator("ana"),
        )
        .unwrap();
    assert!(!lim.is_frozen(now()));
    let err = r
        .operations()
        .apply(
            &Command::ForceOpen {
                target: Target::tool("nope"),
            },
            &Issuer::operator("ana"),
        )
        .unwrap_err();
    assert!(err.to_string().contains("unknown target `tool:nope`"), "{err}");
    let mut ops = Vec::new();
    while let Ok(e) = events.try_recv() {
        if let EventKind::Operator {
            command, by, applied, ..
        } = e.kind
        {
            ops.push((command.action().to_string(), by.to_string(), !applied));
        }
    }
    assert_eq!(ops.len(), 7);
    assert!(ops.iter().all(|(_, by, _)| by == "ana"));
    assert_eq!(
        ops.last().unwrap(),
        &("force_open".to_string(), "ana".to_string(), true)
    );
}

/// Every command a second time changes nothing (no transition, the same
/// trips and cooldown) and says so in its announcement.
#[tokio::test(start_paused = true)]
async fn a_repeated_operator_command_changes_nothing_and_says_so() {
    let r = runner(Config::default(), vec![], None);
    let target = || Target::model("gpt-4o");
    let commands = [
        Command::ForceOpen { target: target() },
        Command::ForceClosed { target: target() },
        Command::Disable { target: target() },
        Command::Reset { target: target() },
        Command::FreezeRefill {
            target: Target::provider("openai"),
        },
        Command::UnfreezeRefill {
            target: Target::provider("openai"),
        },
    ];
    let breaker = &crate::common::entry(&r, "model:gpt-4o").breaker;
    for cmd in &commands {
        r.operations().apply(cmd, &Issuer::operator("ana")).unwrap();
        let now = tokio::time::Instant::now();
        let before = breaker.view(now);
        let mut events = r.events().subscribe();
        r.operations().apply(cmd, &Issuer::operator("ana")).unwrap();
        let after = breaker.view(now);
        assert_eq!(
            (after.state, after.trips, after.next_probe_ms),
            (before.state, before.trips, before.next_probe_ms),
            "{cmd:?}"
        );
        let mut said = Vec::new();
        while let Ok(e) = events.try_recv() {
            match e.kind {
                EventKind::Operator { result, .. } => said.push(result),
                EventKind::Transition(Transition { .. }) => panic!("{cmd:?} again moved the breaker"),
                _ => {}
            }
        }
        assert_eq!(said.len(), 1, "{cmd:?}");
        assert!(said[0].contains("nothing changed"), "{cmd:?}: {}", said[0]);
    }
}

#[tokio::test(start_paused = true)]
async fn exhausted_limiter_waits_then_degrades() {
    let mut cfg = Config::default();
    for p in cfg.providers.values_mut() {
        p.tpm = 0;
        p.itpm = 0;
        p.otpm = 0;
        p.rpm = 1;
        p.concurrency = 0;
    }
    cfg.routes.get_mut("default").unwrap().chain = vec!["gpt-4o".into()];
    cfg.routes.get_mut("default").unwrap().defer = false;
    let r = runner(
        cfg,
        vec![("openai", Scripted::new(vec![], Step::ok()) as Arc<dyn Provider>)],
        None,
    );
    assert_eq!(r.run(&ask(1, "a")).await.level, Level::None);
    let t0 = tokio::time::Instant::now();
    let mut second = ask(2, "b");
    Arc::make_mut(&mut second.messages)[1].content = "A different question, so no cached answer".into();
    let o = r.run(&second).await;
    assert_eq!(o.level, Level::Failed);
    assert_eq!(o.path(), vec!["gpt-4o ⏳rate".to_string()]);
    assert_eq!(
        t0.elapsed(),
        Duration::from_millis(2_000),
        "waited limiter.wait_timeout_ms, no longer"
    );
}

#[tokio::test(start_paused = true)]
async fn slow_model_is_skipped_under_a_latency_sla() {
    let mut cfg = Config::default();
    cfg.routes.get_mut("default").unwrap().latency_sla_ms = 1_000;
    let openai = Scripted::new(
        vec![],
        Step::Ok {
            delay_ms: 3_000,
            output: 10,
            tool_calls: vec![],
        },
    );
    let anthropic = Scripted::new(vec![], Step::ok());
    let r = runner(
        cfg,
        vec![
            ("openai", openai.clone() as Arc<dyn Provider>),
            ("anthropic", anthropic.clone() as Arc<dyn Provider>),
        ],
        None,
    );
    assert_eq!(r.run(&ask(1, "a")).await.level, Level::None, "no latency known yet");
    let o = r.run(&ask(2, "b")).await;
    assert_eq!(o.path(), vec!["gpt-4o ⌛sla".to_string(), "claude-haiku ✓".to_string()]);
    assert_eq!((openai.calls(), anthropic.calls()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn budget_pressure_prefers_the_cheapest_tier() {
    let mut cfg = Config::default();
    cfg.budgets.global_tokens_per_hour = 1_000;
    let quick = || {
        Scripted::new(
            vec![],
            Step::Ok {
                delay_ms: 10,
                output: 5,
                tool_calls: vec![],
            },
        )
    };
    let (openai, deepseek) = (quick(), quick());
    let r = runner(
        cfg,
        vec![
            ("openai", openai.clone() as Arc<dyn Provider>),
            ("deepseek", deepseek.clone() as Arc<dyn Provider>),
        ],
        None,
    );
    let mut first = Vec::new();
    for i in 0..36 {
        let mut req = ask(i, &format!("u{i}"));
        req.max_tokens = 16;
        first.push(r.run(&req).await.path()[0].clone());
    }
    // Each call uses 25 tokens; past 80 % of 1000 the budget tier goes first.
    assert!(first[..30].iter().all(|c| c == "gpt-4o ✓"), "{first:?}");
    assert_eq!(first.last().unwrap(), "deepseek-chat ✓", "{first:?}");
    assert!(r.budgets().pressure() > 0.8);
}

#[tokio::test(start_paused = true)]
async fn endless_tool_loop_degrades_to_a_direct_answer() {
    let openai = Scripted::new(
        vec![],
        Step::Ok {
            delay_ms: 10,
            output: 20,
            tool_calls: vec![get_order_call()],
        },
    );
    let r = runner(
        Config::default(),
        vec![("openai", openai.clone() as Arc<dyn Provider>)],
        None,
    );
    let mut req = ask_with_tools(1, "alice");
    req.max_steps = 3;
    let o = r.run(&req).await;
    assert_eq!(o.level, Level::Partial);
    assert_eq!(o.missing, vec!["multi_step"]);
    assert_eq!(openai.calls(), 4, "3 tool-using steps, then one direct answer");
    assert_eq!(o.answer.as_deref(), Some("answer"), "{:?}", o.path());
}

/// A 401 or 403 is the caller's (or its key's) fault: counted as a client
/// error of the target, neither a success nor a failure, and it never trips
/// the breaker.
#[tokio::test(start_paused = true)]
async fn auth_errors_are_counted_apart_from_failures() {
    for code in [401, 403] {
        let openai = Scripted::new(vec![], Step::status(code));
        let r = runner(
            Config::default(),
            vec![("openai", openai.clone() as Arc<dyn Provider>)],
            None,
        );
        for i in 0..12 {
            r.run(&ask(i, "alice")).await;
        }
        let s = stats(&r, "provider:openai");
        assert_eq!((s.client_errors, s.failed, s.ok), (12, 0, 0), "{code}: {s:?}");
        assert_eq!(
            crate::common::entry(&r, "provider:openai").breaker.state(),
            BreakerState::Closed,
            "{code}"
        );
    }
}

/// A model turned slow trips its breaker on the calls still in flight,
/// once ten have run past `slow_call_ms`, not when they end.
#[tokio::test(start_paused = true)]
async fn a_model_turned_slow_trips_while_its_calls_still_run() {
    let mut cfg = Config::default();
    cfg.breaker.slow_call_ms = 4_000;
    let openai = Scripted::new(
        vec![],
        Step::Ok {
            delay_ms: 5_000,
            output: 10,
            tool_calls: vec![],
        },
    );
    let r = runner(cfg, vec![("openai", openai.clone() as Arc<dyn Provider>)], None);
    let runs: Vec<_> = (0..12)
        .map(|i| {
            let r = r.clone();
            tokio::spawn(async move { r.run(&ask(i, &format!("user-{i}"))).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(4_100)).await;
    assert_eq!(openai.calls(), 12, "all still running");
    let breaker = &crate::common::entry(&r, "provider:openai").breaker;
    assert_eq!(breaker.state(), BreakerState::Open);
    let trip = r
        .events()
        .recent(100)
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::Transition(Transition {
                breaker, to, reason, ..
            }) if breaker == Target::provider("openai") && to == BreakerState::Open => Some(reason),
            _ => None,
        })
        .expect("a trip");
    assert!(
        trip.contains("over 10 calls") && trip.contains("10 of them still running"),
        "{trip}"
    );
    for run in runs {
        assert_eq!(run.await.unwrap().level, Level::None, "the calls made still answer");
    }
    assert_eq!(
        breaker.view(r.clock().now()).calls_in_window,
        0,
        "their ends judge nothing anew"
    );
}

/// A tool's retries follow the one retry decision: an idempotent tool is
/// retried after a Retry-After within the backoff cap, and not at all after
/// one beyond it (as a model call is not).
#[tokio::test(start_paused = true)]
async fn a_tool_is_not_retried_past_the_retry_after_cap() {
    let mut retries = Vec::new();
    for retry_after_ms in [500, 600_000] {
        let openai = Scripted::new(
            vec![Step::Ok {
                delay_ms: 10,
                output: 20,
                tool_calls: vec![get_order_call()],
            }],
            Step::ok(),
        );
        let r = runner(
            Config::default(),
            vec![("openai", openai.clone() as Arc<dyn Provider>)],
            None,
        );
        r.operations()
            .apply(
                &Command::SetFault {
                    target: Target::tool("get_order"),
                    fault: FaultSpec::always(Fault::Status {
                        code: 503,
                        retry_after_ms: Some(retry_after_ms),
                    }),
                },
                &Issuer::operator("t"),
            )
            .unwrap();
        r.run(&ask_with_tools(1, "alice")).await;
        retries.push(stats(&r, "tool:get_order").retries);
    }
    assert!(retries[0] >= 1, "retried within the cap: {retries:?}");
    assert_eq!(retries[1], 0, "not retried past the cap: {retries:?}");
}

/// A tool call through the MCP path is a request like any other: it pays
/// into the retry budget, so its retries are bounded by the calls made
/// (none could retry when tool calls only withdrew).
#[tokio::test(start_paused = true)]
async fn tool_calls_pay_into_the_retry_budget_they_draw_from() {
    use fusebox::runner::tool_call::ToolRequest;
    let mut cfg = Config::default();
    cfg.retry.budget_ratio = 0.5;
    cfg.retry.budget_min_per_s = 0;
    cfg.tools.get_mut("get_order").unwrap().cache_ttl_s = 0;
    let r = runner(cfg, vec![], None);
    let target: Target = "tool:get_order".parse().unwrap();
    r.operations()
        .apply(&Command::ForceClosed { target: target.clone() }, &Issuer::operator("t"))
        .unwrap();
    r.operations()
        .apply(
            &Command::SetFault {
                target,
                fault: FaultSpec::always(Fault::Status {
                    code: 503,
                    retry_after_ms: None,
                }),
            },
            &Issuer::operator("t"),
        )
        .unwrap();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..20 {
        let r = r.clone();
        let req = ToolRequest::new(i, format!("u{i}"), None, "get_order", r#"{"order_id":"1"}"#.into());
        set.spawn(async move { r.tool(&req).await.1.level });
    }
    while let Some(level) = set.join_next().await {
        assert_eq!(level.unwrap(), Level::Failed);
    }
    assert_eq!(stats(&r, "tool:get_order").retries, 10, "half of 20 calls");
}

/// A tool call dropped before its answer (the MCP client went away, the
/// gateway shut down) still ends in one failed outcome, counted apart.
#[tokio::test(start_paused = true)]
async fn a_tool_call_dropped_midway_ends_failed_once() {
    use fusebox::runner::tool_call::ToolRequest;
    use std::sync::atomic::Ordering;
    let r = runner(Config::default(), vec![], None);
    let mut outcomes = r.events().subscribe();
    let req = ToolRequest::new(7, "ann".into(), None, "get_order", r#"{"order_id":"1"}"#.into());
    let cut = tokio::time::timeout(Duration::from_millis(1), r.tool(&req)).await;
    assert!(cut.is_err(), "the mock tool takes longer than 1 ms");
    assert_eq!(r.totals().abandoned.load(Ordering::Relaxed), 1);
    assert_eq!(r.by_level()[Level::Failed.index()], 1);
    let mut ended = Vec::new();
    while let Ok(e) = outcomes.try_recv() {
        if let EventKind::Outcome(o) = e.kind {
            ended.push((o.request, o.level, o.user_message));
        }
    }
    assert_eq!(
        ended,
        vec![(7, Level::Failed, Some("The client went away before the answer.".into()))]
    );
}

/// A provider whose embeddings never answer.
struct StalledEmbeddings;

#[async_trait::async_trait]
impl Provider for StalledEmbeddings {
    async fn complete(
        &self,
        _: &fusebox::provider::LlmRequest,
    ) -> Result<fusebox::provider::LlmResponse, fusebox::provider::ProviderError> {
        unreachable!("only embeddings are asked for")
    }

    async fn embed(
        &self,
        _: &fusebox::provider::EmbedRequest,
    ) -> Result<fusebox::provider::Embedded, fusebox::provider::ProviderError> {
        tokio::time::sleep(Duration::from_secs(3_600)).await;
        unreachable!("the call times out first")
    }
}

#[tokio::test(start_paused = true)]
async fn an_embeddings_call_that_times_out_counts_as_a_timeout_like_any_attempt() {
    let r = runner(
        Config::default(),
        vec![("openai", Arc::new(StalledEmbeddings) as Arc<dyn Provider>)],
        None,
    );
    let body = fusebox::wire::RawBody::parse(br#"{"model":"gpt-4o","input":"hello"}"#).unwrap();
    let done = r
        .embed(fusebox::runner::embed::EmbedCall {
            id: 1,
            user: "alice".into(),
            sub_user: None,
            model: "gpt-4o".into(),
            body: Arc::new(body),
            chars: 5,
        })
        .await;
    assert_eq!(done.outcome.level, Level::Failed);
    assert_eq!(done.outcome.path(), vec!["gpt-4o ✗timeout".to_string()]);
    for target in ["provider:openai", "model:gpt-4o"] {
        let s = stats(&r, target);
        assert_eq!((s.attempts, s.failed, s.timeouts, s.ok), (1, 1, 1, 0), "{target}");
    }
}

/// An embeddings call is watched as every attempt is: a model whose
/// embeddings turned slow trips its breakers on the calls still in flight,
/// once ten have run past `slow_call_ms`.
#[tokio::test(start_paused = true)]
async fn embeddings_turned_slow_trip_while_their_calls_still_run() {
    let mut cfg = Config::default();
    cfg.breaker.slow_call_ms = 4_000;
    let r = runner(
        cfg,
        vec![("openai", Arc::new(StalledEmbeddings) as Arc<dyn Provider>)],
        None,
    );
    let body = Arc::new(fusebox::wire::RawBody::parse(br#"{"model":"gpt-4o","input":"hello"}"#).unwrap());
    let calls: Vec<_> = (0..12)
        .map(|id| {
            let (r, body) = (r.clone(), body.clone());
            tokio::spawn(async move {
                r.embed(fusebox::runner::embed::EmbedCall {
                    id,
                    user: format!("user-{id}"),
                    sub_user: None,
                    model: "gpt-4o".into(),
                    body,
                    chars: 5,
                })
                .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(4_100)).await;
    for target in ["provider:openai", "model:gpt-4o"] {
        assert_eq!(
            crate::common::entry(&r, target).breaker.state(),
            BreakerState::Open,
            "{target}"
        );
    }
    assert!(calls.iter().all(|c| !c.is_finished()), "all still running");
    for call in calls {
        assert_eq!(call.await.unwrap().outcome.path(), vec!["gpt-4o ✗timeout".to_string()]);
    }
}

/// An operator closes a user's spend-rate breaker before its cooldown;
/// the command says whether it was open, and refuses a user no budget
/// could be kept for.
#[tokio::test(start_paused = true)]
async fn an_operator_closes_a_spend_rate_breaker() {
    let mut cfg = Config::default();
    cfg.budgets.spend_rate.enabled = true;
    (
        cfg.budgets.user_tokens_per_minute,
        cfg.budgets.user_tokens_per_hour,
        cfg.budgets.user_tokens_per_day,
    ) = (0, 0, 0);
    let r = runner(cfg, vec![], None);
    let b = r.budgets();
    // An hour steady, then three times the rate until it is refused.
    let mut refused = false;
    for step in 0..700u64 {
        tokio::time::advance(Duration::from_secs(6)).await;
        let now = r.clock().elapsed_ms();
        let tokens = if step < 600 { 1_000 } else { 3_000 };
        match b.reserve("loop", tokens, 0.0, now) {
            Ok(res) => b.settle(res, tokens, 0.0, now),
            Err(_) => {
                refused = true;
                break;
            }
        }
    }
    assert!(refused, "the tripled rate opens the breaker");
    let mut events = r.events().subscribe();
    let reset = |user: &str| Command::ResetSpendRate {
        user: Some(user.into()),
    };
    r.operations().apply(&reset("loop"), &Issuer::operator("ana")).unwrap();
    let now = r.clock().elapsed_ms();
    assert!(b.reserve("loop", 10, 0.0, now).is_ok(), "served again at once");
    r.operations().apply(&reset("loop"), &Issuer::operator("ana")).unwrap();
    r.operations()
        .apply(&Command::ResetSpendRate { user: None }, &Issuer::operator("ana"))
        .unwrap();
    let results: Vec<String> = std::iter::from_fn(|| events.try_recv().ok())
        .filter_map(|e| match e.kind {
            EventKind::Operator { command, result, .. } => Some(format!("{}: {result}", command.describe())),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            "reset_spend_rate user loop: spend-rate breaker closed",
            "reset_spend_rate user loop: already closed: nothing changed",
            "reset_spend_rate global: already closed: nothing changed",
        ]
    );
    let e = r
        .operations()
        .apply(&reset(&"x".repeat(300)), &Issuer::operator("ana"))
        .unwrap_err();
    assert_eq!(e.field(), "user");
}

#[tokio::test(start_paused = true)]
async fn a_slow_call_is_hedged_and_the_first_answer_taken() {
    let (r, openai, anthropic) = common::hedging(500);
    let mut events = r.events().subscribe();
    let o = r.run(&ask(1, "alice")).await;
    assert_eq!(o.path(), vec!["gpt-4o ⏱outrun", "claude-haiku ✓"]);
    // The cancelled call is recorded, as cut by the hedge that outran it.
    let mut attempts = Vec::new();
    while let Ok(e) = events.try_recv() {
        if let fusebox::telemetry::events::EventKind::Attempt(a) = e.kind {
            attempts.push((a.model.unwrap_or_default(), a.cut));
        }
    }
    let outrun = Some(fusebox::telemetry::events::Cut::Outrun);
    assert_eq!(
        attempts,
        vec![("claude-haiku".to_string(), None), ("gpt-4o".to_string(), outrun)]
    );
    assert_eq!(o.latency_ms, 600, "the hedge's answer, not the slow one's");
    assert_eq!((openai.calls(), anthropic.calls()), (1, 1));
    assert_eq!(stats(&r, "model:gpt-4o").hedged, 1);
    assert_eq!(o.attempts, 2);
    // Both calls are charged: the cancelled one at its estimate.
    let now = r.clock().elapsed_ms();
    let alice = r.budgets().top_users(1, now).remove(0);
    assert!(alice.tokens[0] > 70.0 + 256.0, "{:?}", alice.tokens);
    assert_eq!(
        r.catalog().providers()[0]
            .limiter
            .view(tokio::time::Instant::now())
            .concurrency
            .0,
        0
    );
}

#[tokio::test(start_paused = true)]
async fn hedges_stay_within_their_budget_and_skip_tool_calls() {
    let (r, openai, anthropic) = common::hedging(500);
    let asks: Vec<_> = (0..20).map(|id| ask(id, &format!("user-{id}"))).collect();
    futures_util::future::join_all(asks.iter().map(|a| r.run(a))).await;
    // A tenth of the 20 requests.
    assert_eq!((openai.calls(), anthropic.calls()), (20, 2));
    assert_eq!(stats(&r, "model:gpt-4o").hedged, 2);
    // A call that offers tools is not hedged.
    tokio::time::advance(Duration::from_secs(60)).await;
    let o = r.run(&ask_with_tools(30, "alice")).await;
    assert!(o.latency_ms >= 5_000 && anthropic.calls() == 2, "{:?}", o.path());
}
