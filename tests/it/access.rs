//! Who may do what, over real sockets: a caller is who its key says and
//! goes only where the key may, within the key's budgets; operator tokens
//! grant `view` or `operate`; wrong credentials get an OpenAI-shaped 401;
//! no secret shows in an answer or an event.

use crate::gateway::{ask, gateway, Fleet};
use fusebox::config::access::{Grant, Instant, OperatorConfig, SecretHash, UserBudgets};
use fusebox::config::Config;
use fusebox::gateway::GatewayOptions;
use fusebox::telemetry::events::EventKind;
use serde_json::{json, Value};
use std::time::{Duration, SystemTime};

const ALICE: &str = "sk-alice-0123456789";
const BOB: &str = "sk-bob-0123456789";
const OLD: &str = "sk-old-0123456789";
const ANA: &str = "op-ana-0123456789";
const VIC: &str = "op-vic-0123456789";
const TEAM: &str = "sk-team-0123456789";
const SECRETS: [&str; 6] = [ALICE, BOB, OLD, ANA, VIC, TEAM];

use crate::common::caller_key as key;

fn config() -> Config {
    let mut cfg = Config::default();
    let mut alice = key(ALICE, "alice");
    alice.routes = vec!["default".into()];
    let mut bob = key(BOB, "bob");
    bob.budgets = Some(UserBudgets {
        tokens_per_minute: Some(100),
        ..UserBudgets::default()
    });
    let mut old = key(OLD, "carol");
    old.expires = Some(Instant(SystemTime::now() - Duration::from_secs(60)));
    let mut team = key(TEAM, "team");
    team.sub_users = true;
    cfg.keys = [
        ("alice-app", alice),
        ("bob-app", bob),
        ("old-app", old),
        ("team-app", team),
    ]
    .map(|(n, k)| (n.to_string(), k))
    .into();
    cfg.operators = [("ana", ANA, Grant::Operate), ("vic", VIC, Grant::View)]
        .map(|(n, s, scope)| {
            let op = OperatorConfig {
                hash: SecretHash::of(s),
                scope,
            };
            (n.to_string(), op)
        })
        .into();
    cfg.validate("test").unwrap();
    cfg
}

impl Fleet {
    /// `GET path` with `secret` as the bearer credential.
    async fn get_with(&self, path: &str, secret: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(secret)
            .send()
            .await
            .unwrap()
    }

    /// Sends `body` to `path` with `secret` as the bearer credential (and
    /// `headers`); the status and the JSON answer.
    async fn send(&self, path: &str, secret: Option<&str>, headers: &[(&str, &str)], body: &Value) -> (u16, Value) {
        let mut r = self.http.post(format!("{}{path}", self.base)).json(body);
        if let Some(s) = secret {
            r = r.bearer_auth(s);
        }
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        let r = r.send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }
}

/// No secret is in `text`.
fn keeps_no_secret(text: &str) {
    for s in SECRETS {
        assert!(!text.contains(s), "a secret leaked: {text}");
    }
}

#[tokio::test]
async fn a_caller_is_billed_to_its_keys_user_whatever_it_says() {
    let f = gateway(config(), GatewayOptions::default()).await;
    let mut events = f.runner.events().subscribe();
    let spoof = [("x-fusebox-user", "eve")];
    let (status, v) = f
        .send("/v1/chat/completions", Some(ALICE), &spoof, &ask("default", "mallory"))
        .await;
    assert_eq!(status, 200, "{v}");
    let users: Vec<String> = f
        .runner
        .budgets()
        .top_users(10, f.runner.clock().elapsed_ms())
        .into_iter()
        .map(|u| u.user)
        .collect();
    assert_eq!(users, ["alice"], "billed to the key's user only");
    let mut seen = String::new();
    while let Ok(e) = events.try_recv() {
        if let EventKind::Outcome(o) = &e.kind {
            assert_eq!(o.user, "alice");
        }
        seen.push_str(&serde_json::to_string(&e).unwrap());
    }
    keeps_no_secret(&seen);
}

#[tokio::test]
async fn a_key_goes_only_where_it_may_and_within_its_budgets() {
    let f = gateway(config(), GatewayOptions::default()).await;
    let (status, v) = f
        .send("/v1/chat/completions", Some(ALICE), &[], &ask("gpt-4o", "a"))
        .await;
    assert_eq!(status, 403, "{v}");
    assert_eq!(v["error"]["param"], "model");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("may call: default"),
        "{v}"
    );
    // Bob's own budget (100 tokens a minute) refuses what the default allows.
    let mut big = ask("default", "bob");
    big["max_tokens"] = json!(200);
    let (status, v) = f.send("/v1/chat/completions", Some(BOB), &[], &big).await;
    assert_eq!(status, 400, "more than bob's limit can ever hold: {v}");
    let why = v["error"]["message"].as_str().unwrap();
    assert!(why.contains("user bob budget") && why.contains("limit of 100"), "{v}");
    let (status, v) = f.send("/v1/chat/completions", Some(ALICE), &[], &big).await;
    assert_eq!(status, 200, "the default budget allows it: {v}");
    keeps_no_secret(&v.to_string());
}

#[tokio::test]
async fn wrong_missing_and_expired_credentials_are_refused_and_said_so() {
    let f = gateway(config(), GatewayOptions::default()).await;
    for secret in [None, Some("sk-guess"), Some(OLD), Some(ANA)] {
        let (status, v) = f.send("/v1/chat/completions", secret, &[], &ask("default", "x")).await;
        assert_eq!(status, 401, "{secret:?}: {v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "OpenAI-shaped: {v}");
        keeps_no_secret(&v.to_string());
    }
    let (_, v) = f
        .send("/v1/chat/completions", Some(OLD), &[], &ask("default", "x"))
        .await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`old-app` has expired"),
        "{v}"
    );
}

#[tokio::test]
async fn operator_tokens_grant_their_scope_and_caller_keys_none() {
    let f = gateway(config(), GatewayOptions::default()).await;
    let open = json!({"action": "force_open", "target": "provider:openai"});
    let metrics = |secret| {
        let f = &f;
        async move { f.get_with("/metrics", secret).await.status().as_u16() }
    };
    // A caller key opens neither the admin endpoints nor the metrics.
    assert_eq!(f.send("/_fusebox/commands", Some(ALICE), &[], &open).await.0, 401);
    assert_eq!(metrics(ALICE).await, 401);
    // A view token watches but does not command.
    assert_eq!(metrics(VIC).await, 200);
    let (status, v) = f.send("/_fusebox/commands", Some(VIC), &[], &open).await;
    assert_eq!(status, 403, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("may view, not operate"),
        "{v}"
    );
    // An operate token commands, as its holder whatever a header says.
    let mut events = f.runner.events().subscribe();
    let (status, v) = f
        .send(
            "/_fusebox/commands",
            Some(ANA),
            &[("x-fusebox-operator", "mallory")],
            &open,
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let by: Vec<String> = std::iter::from_fn(|| events.try_recv().ok())
        .filter_map(|e| match e.kind {
            EventKind::Operator { by, .. } => Some(by.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(by, ["ana"]);
    keeps_no_secret(&v.to_string());
}

/// The live view (a snapshot, its stream, the events) is for operators:
/// a `view` token reads it, a caller key does not; the stream's snapshots
/// are the console's, as JSON.
#[tokio::test]
async fn the_live_view_is_for_operators() {
    let f = gateway(config(), GatewayOptions::default()).await;
    let get = |path, secret| f.get_with(path, secret);
    for path in ["/_fusebox/snapshot", "/_fusebox/snapshots", "/_fusebox/events"] {
        assert_eq!(get(path, ALICE).await.status(), 401, "{path}");
    }
    let one: Value = get("/_fusebox/snapshot", VIC).await.json().await.unwrap();
    assert!(one["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["target"] == "provider:openai"));
    let mut stream = get("/_fusebox/snapshots", VIC).await;
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let mut got = String::new();
    while !got.contains("\n\n") {
        got.push_str(&String::from_utf8_lossy(&stream.chunk().await.unwrap().unwrap()));
    }
    let first: Value = serde_json::from_str(got.strip_prefix("data: ").unwrap().trim()).unwrap();
    assert_eq!(first["breakers"], one["breakers"]);
    keeps_no_secret(&got);
    // An operator's command shows on the events stream.
    let mut events = get("/_fusebox/events", VIC).await;
    let open = json!({"action": "force_open", "target": "provider:openai"});
    assert_eq!(f.send("/_fusebox/commands", Some(ANA), &[], &open).await.0, 200);
    // The breaker's transition comes first, then the command that made it.
    let mut got = String::new();
    while !got.contains("\"kind\":\"operator\"") {
        got.push_str(&String::from_utf8_lossy(&events.chunk().await.unwrap().unwrap()));
    }
    let kinds: Vec<Value> = got
        .split("\n\n")
        .filter_map(|e| serde_json::from_str(e.strip_prefix("data: ")?).ok())
        .collect();
    assert_eq!(kinds[0]["kind"], "transition");
    let op = kinds.iter().find(|e| e["kind"] == "operator").unwrap();
    assert_eq!(
        (op["action"].as_str(), op["by"]["name"].as_str()),
        (Some("force_open"), Some("ana"))
    );
}

/// An attached console sends the operator's token: with a `view` token it
/// watches and its command keys say why they are off; with an `operate`
/// token its commands are issued as the token's operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attached_console_may_do_what_its_token_may() {
    use fusebox::tui::app::{App, Effect, Mode, Options};
    let f = gateway(config(), GatewayOptions::default()).await;
    let opts = |readonly| Options {
        mode: Mode::Attach,
        readonly,
        yes: true,
        operator: "someone-else".into(),
        source: "1 instance(s)".into(),
        replay_length_ms: None,
        replay: None,
    };
    let (hub, feed) = fusebox::attach::Hub::start(std::slice::from_ref(&f.base), Some(VIC.into())).unwrap();
    hub.settled(Duration::from_secs(5)).await;
    let why = hub.readonly();
    assert_eq!(why.as_deref(), Some("the operator token may view, not operate"));
    let mut app = App::new(opts(why), feed.snapshots.borrow().clone());
    assert!(app
        .snap
        .breakers
        .iter()
        .any(|b| b.target.to_string() == "provider:openai"));
    let keys = fusebox::tui::keymap::KeyMap::defaults();
    let o = crossterm::event::KeyEvent::new(
        crossterm::event::KeyCode::Char('o'),
        crossterm::event::KeyModifiers::NONE,
    );
    assert_eq!(app.on_key(o, &keys), Effect::None);
    assert_eq!(
        app.status,
        "read-only: force-open is disabled (the operator token may view, not operate)"
    );

    let (hub, feed) = fusebox::attach::Hub::start(std::slice::from_ref(&f.base), Some(ANA.into())).unwrap();
    hub.settled(Duration::from_secs(5)).await;
    assert_eq!(hub.readonly(), None);
    let mut app = App::new(opts(None), feed.snapshots.borrow().clone());
    let Effect::Send(order) = app.on_key(o, &keys) else {
        panic!("o sends (--yes)")
    };
    let mut events = f.runner.events().subscribe();
    fusebox::tui::control::apply(&*feed.control, &mut app, order).await;
    assert!(app.status.contains("applied on"), "{}", app.status);
    let by = std::iter::from_fn(|| events.try_recv().ok()).find_map(|e| match e.kind {
        EventKind::Operator { by, .. } => Some(by.name),
        _ => None,
    });
    assert_eq!(by.as_deref(), Some("ana"), "issued as the token's operator");
}

/// A key that allows sub-users records the one a call names, and bills
/// its own user all the same; a key that does not ignores the name.
#[tokio::test]
async fn a_sub_user_is_reported_where_the_key_allows_it_and_never_billed() {
    let f = gateway(config(), GatewayOptions::default()).await;
    let mut events = f.runner.events().subscribe();
    for secret in [TEAM, ALICE] {
        let (status, v) = f
            .send("/v1/chat/completions", Some(secret), &[], &ask("default", "dora"))
            .await;
        assert_eq!(status, 200, "{v}");
    }
    let arrivals: Vec<(String, Option<String>)> = std::iter::from_fn(|| events.try_recv().ok())
        .filter_map(|e| match e.kind {
            EventKind::Request(a) => Some((a.request.user.to_string(), a.request.sub_user.map(|s| s.to_string()))),
            _ => None,
        })
        .collect();
    assert_eq!(
        arrivals,
        [
            ("team".to_string(), Some("dora".to_string())),
            ("alice".to_string(), None)
        ]
    );
    let mut users: Vec<String> = f
        .runner
        .budgets()
        .top_users(10, f.runner.clock().elapsed_ms())
        .into_iter()
        .map(|u| u.user)
        .collect();
    users.sort();
    assert_eq!(users, ["alice", "team"], "dora is billed nothing");
}
