//! `fusebox attach` over two `fusebox serve` processes: the console (its
//! state and drawing on a TestBackend, fed by the attach hub as `fusebox
//! attach` feeds it) shows both instances' rows; a command given on one
//! instance's row reaches that instance alone and shows on the next frame;
//! a killed instance is marked stale within 2 s while the other keeps
//! updating, and is followed again once it is back.

use crate::common::Serve;
use crate::console::{render, text};
use fusebox::attach::Hub;
use fusebox::resilience::breaker::BreakerState;
use fusebox::target::Target;
use fusebox::telemetry::events::{EventKind, InstanceChange};
use fusebox::telemetry::snapshot::{Health, Snapshot};
use fusebox::tui::app::{App, Effect, Mode, Options, Pane};
use fusebox::tui::control::apply;
use fusebox::tui::keymap::KeyMap;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

fn opts() -> Options {
    Options {
        mode: Mode::Attach,
        readonly: None,
        yes: false,
        operator: "ana".into(),
        source: "2 instance(s)".into(),
        replay_length_ms: None,
        replay: None,
    }
}

fn key(c: char) -> crossterm::event::KeyEvent {
    crossterm::event::KeyEvent::new(crossterm::event::KeyCode::Char(c), crossterm::event::KeyModifiers::NONE)
}

fn name(base: &str) -> String {
    base.trim_start_matches("http://").to_string()
}

/// The next combined snapshot for which `ok` holds, within `limit`.
async fn until(
    rx: &mut watch::Receiver<Arc<Snapshot>>,
    limit: Duration,
    ok: impl Fn(&Snapshot) -> bool,
) -> Option<Arc<Snapshot>> {
    tokio::time::timeout(limit, async {
        loop {
            let s = rx.borrow_and_update().clone();
            if ok(&s) {
                return s;
            }
            rx.changed().await.expect("the hub publishes");
        }
    })
    .await
    .ok()
}

/// `target`'s state on the instance at `base`, asked directly.
async fn state_on(base: &str, target: &Target) -> Option<BreakerState> {
    let s: Snapshot = reqwest::get(format!("{base}/_fusebox/snapshot"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    s.breakers.iter().find(|b| &b.target == target)?.breaker.state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_shows_both_gateways_commands_the_owner_and_marks_a_lost_one_stale() {
    let a = Serve::start();
    let mut b = Serve::start();
    let (na, nb) = (name(&a.base), name(&b.base));
    let (hub, mut feed) = Hub::start(&[a.base.clone(), b.base.clone()], None).unwrap();
    let both = |s: &Snapshot| {
        [&na, &nb]
            .iter()
            .all(|n| s.breakers.iter().any(|r| r.instance.as_deref() == Some(n.as_str())))
    };
    let snap = until(&mut feed.snapshots, Duration::from_secs(10), both)
        .await
        .expect("both instances' rows");
    assert_eq!(hub.readonly(), None, "without tokens both may be commanded");
    let mut app = App::new(opts(), snap);
    let frame = text(&render(&app, 140, 45));
    assert!(
        frame.contains(&format!("{na} live")) && frame.contains(&format!("{nb} live")),
        "{frame}"
    );
    assert!(
        frame.contains(&format!("↳ {na}")) && frame.contains(&format!("↳ {nb}")),
        "{frame}"
    );

    // Select instance b's row of provider:openai and force it open.
    let openai = Target::provider("openai");
    let keys = KeyMap::defaults();
    app.on_key(key('1'), &keys);
    let on_b = |app: &App| {
        let rows = app.breaker_rows();
        let r = rows[app.selection(Pane::Breakers)];
        r.target == openai && r.instance.as_deref() == Some(nb.as_str())
    };
    for _ in 0..app.breaker_rows().len() {
        if on_b(&app) {
            break;
        }
        app.on_key(key('j'), &keys);
    }
    assert!(on_b(&app), "b's row of provider:openai is there to select");
    assert_eq!(app.on_key(key('o'), &keys), Effect::None, "asks first");
    let Effect::Send(order) = app.on_key(key('y'), &keys) else {
        panic!("y sends the command")
    };
    assert_eq!(order.to.as_deref(), Some(nb.as_str()), "to the row's owner");
    apply(&*feed.control, &mut app, order).await;
    assert!(app.status.contains(&format!("applied on {nb}")), "{}", app.status);
    // The next frame shows it, on b's row only.
    let frame = text(&render(&app, 140, 45));
    let row = |n: &str| {
        frame
            .lines()
            .find(|l| l.contains(&format!("↳ {n}")) && l.contains("forced_open"))
            .map(str::to_string)
    };
    assert!(row(&nb).is_some_and(|r| r.contains('▶')), "{frame}");
    assert!(row(&na).is_none(), "a's row is untouched: {frame}");
    assert_eq!(state_on(&b.base, &openai).await, Some(BreakerState::ForcedOpen));
    assert_eq!(state_on(&a.base, &openai).await, Some(BreakerState::Closed));

    // Kill b: stale within 2 s, while a keeps updating.
    b.kill();
    let killed = Instant::now();
    let stale = |s: &Snapshot| {
        s.instances
            .iter()
            .any(|i| i.name == nb && matches!(i.health, Health::Stale { .. }))
    };
    let snap = until(&mut feed.snapshots, Duration::from_secs(2), stale)
        .await
        .unwrap_or_else(|| panic!("b not stale {:?} after it was killed", killed.elapsed()));
    app.on_snapshot(snap);
    let frame = text(&render(&app, 140, 45));
    assert!(frame.contains(&format!("{nb} STALE")), "{frame}");
    assert!(frame.contains(&format!("↳ {nb} stale")), "b's rows are marked: {frame}");
    assert!(frame.contains(&format!("{na} live")), "{frame}");
    let before = app.snap.requests;
    let chat = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", a.base))
        .json(&json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 200);
    let snap = until(&mut feed.snapshots, Duration::from_secs(5), |s| s.requests > before)
        .await
        .expect("a's request counts in the combined view");
    assert!(snap.instances.iter().any(|i| i.name == na && i.health == Health::Live));
}

/// What a gateway's live view sends is what the console draws: a snapshot
/// in an incident (open breakers, frozen refills, latencies, events) reads
/// back from its JSON unchanged.
#[tokio::test(start_paused = true)]
async fn a_snapshot_reads_back_from_its_json() {
    let (runner, _) = crate::console::incident(false).await;
    let snap = runner.snapshot(100, 100);
    assert!(snap.breakers.iter().any(|b| b.stats.latency.count() > 0));
    assert!(snap.limiters.iter().any(|l| l.limiter.frozen.is_some()));
    assert!(!snap.events.is_empty());
    let back: Snapshot = serde_json::from_str(&serde_json::to_string(&snap).unwrap()).unwrap();
    assert_eq!(back, snap);
}

/// Two instances combined: each target's row has the worst state and the
/// summed counters and is followed by each instance's row; limiters of
/// instances apart add up; events are named by instance on one time line.
#[tokio::test(start_paused = true)]
async fn two_instances_combine_worst_state_first_with_their_own_rows() {
    use fusebox::attach::merge::{combine, Member};
    use fusebox::telemetry::snapshot::InstanceView;
    let (sick, _) = crate::console::incident(false).await;
    let (calm, _) = crate::console::incident(false).await;
    calm.operations()
        .apply(
            &fusebox::command::Command::Reset {
                target: Target::provider("openai"),
            },
            &fusebox::command::Issuer::operator("t"),
        )
        .unwrap();
    let (a, b) = (sick.snapshot(100, 100), calm.snapshot(100, 100));
    let part = |name: &str, snap| Member {
        view: InstanceView {
            name: name.into(),
            health: Health::Live,
            error: None,
        },
        snap: Some(snap),
        live: true,
    };
    let t = a.t_ms;
    let s = combine(&[part("a", &a), part("b", &b)], &[], t, a.wall_ms, 300);
    let openai = Target::provider("openai");
    let rows: Vec<_> = s.breakers.iter().filter(|r| r.target == openai).collect();
    let state = |snap: &Snapshot| snap.breakers.iter().find(|r| r.target == openai).unwrap().breaker.state;
    assert_eq!(state(&b), Some(BreakerState::Closed));
    assert_ne!(state(&a), Some(BreakerState::Closed));
    assert_eq!(
        rows.iter().map(|r| r.instance.as_deref()).collect::<Vec<_>>(),
        [None, Some("a"), Some("b")]
    );
    assert_eq!(rows[0].breaker.state, state(&a), "the worst state");
    let attempts = |snap: &Snapshot| {
        snap.breakers
            .iter()
            .find(|r| r.target == openai)
            .unwrap()
            .stats
            .attempts
    };
    assert_eq!(rows[0].stats.attempts, attempts(&a) + attempts(&b));
    assert_eq!(
        rows[0].stats.latency.count(),
        rows[1].stats.latency.count() + rows[2].stats.latency.count()
    );
    assert_eq!(s.requests, a.requests + b.requests);
    let rpm = |snap: &Snapshot| {
        let l = snap
            .limiters
            .iter()
            .find(|l| l.provider == "anthropic" && l.instance.is_none());
        l.unwrap().limiter.rpm.unwrap().1
    };
    assert_eq!(rpm(&s), rpm(&a) * 2.0, "apart, capacities add up");
    assert!(s.events.iter().all(|e| e.instance.is_some()));
    assert!(s.events.windows(2).all(|w| w[0].t_ms <= w[1].t_ms), "one time line");
    assert_eq!(s.events.len(), a.events.len() + b.events.len());
    // The console lists each combined row with its instances' rows under it.
    let app = App::new(opts(), Arc::new(s));
    let listed: Vec<_> = app
        .breaker_rows()
        .iter()
        .filter(|r| r.target == openai)
        .map(|r| r.instance.clone())
        .collect();
    assert_eq!(listed, [None, Some("a".into()), Some("b".into())]);
    let at = app.breaker_rows().iter().position(|r| r.target == openai).unwrap();
    assert_eq!(app.breaker_rows()[at + 1].instance.as_deref(), Some("a"));
}

/// A fake instance on loopback: it accepts connections and, if `first` is
/// given, answers the snapshot stream with that one snapshot; then it says
/// nothing more, holding every connection open.
async fn silent_instance(first: Option<Snapshot>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut head = vec![0u8; 4096];
            let n = conn.read(&mut head).await.unwrap_or(0);
            let asked = String::from_utf8_lossy(&head[..n]).into_owned();
            if let (Some(s), true) = (&first, asked.starts_with("GET /_fusebox/snapshots")) {
                let frame = format!("data: {}\n\n", serde_json::to_string(s).unwrap());
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{frame}\r\n",
                    frame.len()
                );
                conn.write_all(answer.as_bytes()).await.unwrap();
            }
            held.push(conn);
        }
    });
    base
}

/// An instance that never answers, and one that stops talking after its
/// first snapshot, are both marked stale (and say why) within 2 s: the
/// console is never held up by them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_instance_is_stale_within_two_seconds() {
    let runner = fusebox::runner::Runner::new(
        fusebox::config::Config::default(),
        fusebox::runner::RunnerParts::mock(fusebox::clock::Clock::system(), fusebox::clock::Seed(1)),
    )
    .unwrap();
    let mute = silent_instance(None).await;
    let quiet = silent_instance(Some(runner.snapshot(10, 10))).await;
    let (_hub, mut feed) = Hub::start(&[mute.clone(), quiet.clone()], None).unwrap();
    let started = Instant::now();
    let why = |s: &Snapshot, base: &str| {
        s.instances
            .iter()
            .find(|i| base.ends_with(&i.name) && matches!(i.health, Health::Stale { .. }))
            .and_then(|i| i.error.clone())
    };
    let snap = until(&mut feed.snapshots, Duration::from_secs(2), |s| {
        why(s, &mute).is_some() && why(s, &quiet).is_some()
    })
    .await
    .unwrap_or_else(|| panic!("not both stale after {:?}", started.elapsed()));
    assert_eq!(why(&snap, &mute).as_deref(), Some("no answer in 1.5 s"));
    assert_eq!(why(&snap, &quiet).as_deref(), Some("silent for 1.5 s"));
    assert!(
        snap.breakers.iter().any(|b| b.instance.is_some()),
        "the quiet one's last word stays on screen"
    );
}

/// Beyond three instances the header counts them; only those not live are
/// named, as badges.
#[test]
fn many_instances_are_counted_in_the_header() {
    use fusebox::attach::merge::{combine, Member};
    use fusebox::telemetry::snapshot::InstanceView;
    let view = |name: &str, health| InstanceView {
        name: name.into(),
        health,
        error: Some("cannot connect".into()),
    };
    let stale = Health::Stale {
        for_ms: 3_000,
        retry_ms: 1_000,
    };
    let parts: Vec<Member> = ["10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080", "10.0.0.4:8080"]
        .iter()
        .enumerate()
        .map(|(i, n)| Member {
            view: view(n, if i == 2 { stale } else { Health::Live }),
            snap: None,
            live: i != 2,
        })
        .collect();
    let app = App::new(opts(), Arc::new(combine(&parts, &[], 0, 0, 10)));
    let frame = text(&render(&app, 140, 45));
    let mut lines = frame.lines();
    let (header, second) = (lines.next().unwrap(), lines.next().unwrap());
    assert!(header.contains("4 instances, 3 live"), "{header}");
    // One not live is a badge, first on the second line, as a narrow
    // terminal keeps it.
    assert!(
        second.starts_with(" 10.0.0.3:8080 STALE 3s (cannot connect) retry 1.0s"),
        "{second}"
    );
    assert!(!frame.contains("10.0.0.1:8080"), "{frame}");
    let narrow = text(&render(&app, 80, 24));
    assert!(
        narrow.lines().nth(1).unwrap().contains("10.0.0.3:8080 STALE"),
        "{narrow}"
    );
}

/// An instance that left the fleet's heartbeats and has been lost for
/// longer than the grace is dropped; a live one, or one still beating, is
/// kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_left_is_dropped_after_its_grace() {
    let a = Serve::start();
    let gone = "http://127.0.0.1:1".to_string();
    let (hub, mut feed) = Hub::start(&[a.base.clone(), gone.clone()], None).unwrap();
    until(&mut feed.snapshots, Duration::from_secs(5), |s| {
        s.instances.iter().any(|i| matches!(i.health, Health::Stale { .. }))
            && s.instances.iter().any(|i| i.health == Health::Live)
    })
    .await
    .expect("one live, one lost");
    hub.forget_lost(std::slice::from_ref(&gone), Duration::ZERO);
    assert_eq!(hub.instances().len(), 2, "still beating: kept");
    hub.forget_lost(&[], Duration::from_secs(60));
    assert_eq!(hub.instances().len(), 2, "within its grace: kept");
    hub.forget_lost(&[], Duration::ZERO);
    let left: Vec<String> = hub.instances().iter().map(|i| i.base.clone()).collect();
    assert_eq!(
        left,
        std::slice::from_ref(&a.base),
        "the lost one is dropped, the live one kept"
    );
    let s = until(&mut feed.snapshots, Duration::from_secs(2), |s| s.instances.len() == 1).await;
    assert!(s.is_some(), "and leaves the screen");
}

/// A hostile instance: every answer is a 401 with a 1.5 GB body
/// (`huge`), or a 200 stream that drips one byte a second. Counts what
/// it managed to send.
fn hostile(huge: bool, sent: Arc<std::sync::atomic::AtomicU64>) -> String {
    use std::sync::atomic::Ordering;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let app = axum::Router::new().fallback(move || {
                let sent = sent.clone();
                async move {
                    let chunk = bytes::Bytes::from(vec![b'x'; 64 << 10]);
                    let body = if huge {
                        let total = 1_500_000_000u64;
                        let s = futures_util::stream::unfold(0u64, move |at| {
                            let (chunk, sent) = (chunk.clone(), sent.clone());
                            async move {
                                (at < total).then(|| {
                                    sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                                    (Ok::<_, std::convert::Infallible>(chunk), at + (64 << 10))
                                })
                            }
                        });
                        axum::body::Body::from_stream(s)
                    } else {
                        let s = futures_util::stream::unfold((), move |()| {
                            let sent = sent.clone();
                            async move {
                                tokio::time::sleep(Duration::from_secs(1)).await; // the drip's own pace
                                sent.fetch_add(1, Ordering::Relaxed);
                                Some((Ok::<_, std::convert::Infallible>(bytes::Bytes::from_static(b"d")), ()))
                            }
                        });
                        axum::body::Body::from_stream(s)
                    };
                    let status = if huge { 401 } else { 200 };
                    axum::response::Response::builder()
                        .status(status)
                        .header(
                            "content-type",
                            if huge { "application/json" } else { "text/event-stream" },
                        )
                        .body(body)
                        .unwrap()
                }
            });
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    format!("http://{addr}")
}

/// The resident memory (kB) at its peak of the process `pid`, if it runs.
fn peak_rss_kb(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// `fusebox attach` in front of an instance answering a 1.5 GB error body
/// and one dripping a byte a second reads a bounded part of the first and
/// gives up on the second, stays small, and says what is wrong with each.
#[test]
fn attach_to_a_hostile_instance_stays_small_and_says_what_is_wrong() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let (big, drip) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let urls = [hostile(true, big.clone()), hostile(false, drip.clone())];
    let dir = tempfile::tempdir().unwrap();
    let typescript = dir.path().join("typescript");
    let cmd = format!(
        "stty rows 45 cols 140; exec {} attach {} {} --log-dir {}",
        env!("CARGO_BIN_EXE_fusebox"),
        urls[0],
        urls[1],
        dir.path().display()
    );
    let started = Instant::now();
    let mut script = crate::common::in_a_terminal(&cmd, &typescript);
    let children = format!("/proc/{0}/task/{0}/children", script.id());
    let (mut attach, mut peak) = (None, 0);
    let status = loop {
        if let Some(status) = script.try_wait().unwrap() {
            break status;
        }
        attach = attach.or_else(|| {
            std::fs::read_to_string(&children)
                .ok()?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        });
        if let Some(kb) = attach.and_then(peak_rss_kb) {
            peak = peak.max(kb);
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "attach did not give up in 10 s"
        );
        std::thread::sleep(Duration::from_millis(20)); // sampling the child's memory as it runs
    };
    let shown = String::from_utf8_lossy(&std::fs::read(&typescript).unwrap()).into_owned();
    eprintln!(
        "attach gave up in {:?}, peak RSS {peak} kB; the 1.5 GB instance sent {} bytes, the dripping one {}",
        started.elapsed(),
        big.load(Ordering::Relaxed),
        drip.load(Ordering::Relaxed)
    );
    assert!(!status.success(), "{shown}");
    assert!(shown.contains("no instance answered"), "{shown}");
    assert!(
        shown.contains("401 no reason given (its body is over 64 KiB)"),
        "{shown}"
    );
    assert!(shown.contains("too slow: "), "{shown}");
    assert!(peak > 0 && peak < 100 << 10, "peak RSS {peak} kB");
    // What the huge instance sent is what the sockets' buffers took, not 1.5 GB.
    let sent = big.load(Ordering::Relaxed);
    assert!(sent < 32 << 20, "the 1.5 GB body was read: {sent} bytes sent");
    assert!(drip.load(Ordering::Relaxed) < 10);
}

/// One instance's breaker forced open marks the combined row `≠` and
/// names that instance in the REFILL FROZEN badge; an instance killed and
/// started again on its port is said in the events pane (lost, back,
/// restarted) and its totals run on through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_says_an_instance_was_lost_and_restarted_and_marks_drift() {
    let a = Serve::start();
    let mut b = Serve::start();
    let (na, nb) = (name(&a.base), name(&b.base));
    let http = reqwest::Client::new();
    let command =
        |base: &str, body: serde_json::Value| http.post(format!("{base}/_fusebox/commands")).json(&body).send();
    let open = json!({"action": "force_open", "target": "provider:openai"});
    assert!(command(&a.base, open).await.unwrap().status().is_success());
    let freeze = json!({"action": "freeze_refill", "target": "anthropic"});
    assert!(command(&a.base, freeze).await.unwrap().status().is_success());
    for _ in 0..3 {
        let chat = http
            .post(format!("{}/v1/chat/completions", b.base))
            .json(&json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(chat.status(), 200);
    }
    let (_hub, mut feed) = Hub::start(&[a.base.clone(), b.base.clone()], None).unwrap();
    let ready = |s: &Snapshot| s.requests >= 3 && s.instances.iter().all(|i| i.health == Health::Live);
    let snap = until(&mut feed.snapshots, Duration::from_secs(10), ready)
        .await
        .expect("both instances, b's requests counted");
    let mut app = App::new(opts(), snap);
    let frame = text(&render(&app, 140, 45));
    let combined = frame
        .lines()
        .find(|l| l.contains("provider:openai") && !l.contains('↳'))
        .unwrap_or_else(|| panic!("no combined openai row: {frame}"));
    assert!(combined.contains("forced_open ≠"), "{combined}");
    assert!(frame.contains(&format!("REFILL FROZEN: anthropic on {na}")), "{frame}");

    b.kill();
    let lost = |s: &Snapshot| {
        s.events.iter().any(|e| {
            e.instance.as_deref() == Some(nb.as_str())
                && matches!(
                    &e.kind,
                    EventKind::Instance {
                        change: InstanceChange::Lost,
                        ..
                    }
                )
        })
    };
    let snap = until(&mut feed.snapshots, Duration::from_secs(3), lost)
        .await
        .expect("b's loss is an event");
    assert!(
        snap.requests >= 3,
        "b's totals stay while it is away: {}",
        snap.requests
    );
    let b = Serve::start_on(&nb);
    let restarted = |s: &Snapshot| {
        s.events.iter().any(|e| {
            matches!(
                &e.kind,
                EventKind::Instance {
                    change: InstanceChange::Restarted,
                    ..
                }
            )
        })
    };
    let snap = until(&mut feed.snapshots, Duration::from_secs(10), restarted)
        .await
        .expect("b's restart is an event");
    assert!(snap.requests >= 3, "b's totals run on: {}", snap.requests);
    app.on_snapshot(snap);
    app.on_key(key('5'), &KeyMap::defaults());
    app.zoomed = true;
    let frame = text(&render(&app, 140, 45));
    for said in [
        format!("[{nb}] instance lost:"),
        format!("[{nb}] instance back: answers again after"),
        format!("[{nb}] instance restarted: a new process"),
    ] {
        assert!(frame.contains(&said), "{said}: {frame}");
    }
    drop(b);
}
