//! What a client holding the gateway's door costs others, over real
//! sockets: a body that does not arrive in time is answered 408, and
//! connections that wait on their clients (a body dripping in) give their
//! slots to new connections, so every other client is served.

use fusebox::config::Config;
use fusebox::gateway::{ConnLimits, GatewayOptions};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A client that sends a chat call's head and the first byte of a body
/// it says is 1,000 bytes long, then nothing more.
async fn dripper(base: &str) -> TcpStream {
    let addr = base.trim_start_matches("http://");
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{{"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp
}

/// What the server sent `tcp` until it closed it.
async fn read_all(tcp: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tcp.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(start_paused = true)]
async fn a_body_that_does_not_arrive_in_time_is_refused_408_and_closed() {
    let opts = GatewayOptions {
        conns: ConnLimits {
            body_timeout: Duration::from_secs(30),
            ..ConnLimits::default()
        },
        ..GatewayOptions::default()
    };
    let f = crate::gateway::gateway(Config::default(), opts).await;
    let mut tcp = dripper(&f.base).await;
    let start = tokio::time::Instant::now();
    let said = tokio::time::timeout(Duration::from_secs(120), read_all(&mut tcp))
        .await
        .expect("answered within two minutes");
    assert!(said.starts_with("HTTP/1.1 408"), "{said}");
    assert!(
        said.contains("within 30 s") && said.contains("--body-timeout-s"),
        "{said}"
    );
    assert!(said.to_ascii_lowercase().contains("connection: close"), "{said}");
    assert_eq!(start.elapsed().as_secs(), 30);
}

#[tokio::test]
async fn connections_waiting_on_their_clients_give_their_slots_to_new_ones() {
    let opts = GatewayOptions {
        conns: ConnLimits {
            max_connections: 64,
            body_timeout: Duration::from_secs(3600),
            header_timeout: Duration::from_secs(3600),
        },
        ..GatewayOptions::default()
    };
    let f = crate::gateway::gateway(Config::default(), opts).await;
    // 64 connections, each holding a request whose body never comes.
    let mut drippers = Vec::new();
    for _ in 0..64 {
        drippers.push(dripper(&f.base).await);
    }
    // Every other client is still served, each on a connection of its own
    // that it keeps open.
    let mut victims = Vec::new();
    for i in 0..80 {
        let client = reqwest::Client::new();
        let r = client
            .post(format!("{}/v1/chat/completions", f.base))
            .json(&crate::gateway::ask("default", "victim"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("victim {i} was not served: {e}"));
        assert_eq!(r.status(), 200, "victim {i}");
        victims.push(client);
    }
    // The drippers waited longest: they were closed, unanswered.
    for mut d in drippers {
        assert_eq!(read_all(&mut d).await, "");
    }
    // 80 victims and this scrape: each took the slot of the oldest waiting.
    let metrics = f.get("/metrics").await;
    assert!(
        metrics.contains("fusebox_connections_evicted_total 81\n"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("connections"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A counter or gauge's value on the gateway at `base`'s `/metrics`.
async fn metric(base: &str, name: &str) -> u64 {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics")) as u64
}

#[tokio::test]
async fn under_a_low_open_file_limit_the_door_closes_before_any_call_runs_out() {
    use crate::common::strict::{Api, Strict};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let upstream = Strict::start().await;
    let hold = Arc::new(tokio::sync::Notify::new());
    upstream.state.stream.lock().hold = Some(hold.clone());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fusebox.toml");
    let cfg = format!(
        "[providers.openai]\nkind = \"openai-compatible\"\nbase_url = \"{0}\"\napi_key_env = \"STRICT_KEY\"\n\
         [providers.anthropic]\nkind = \"anthropic\"\nbase_url = \"{0}\"\napi_key_env = \"STRICT_KEY\"\n\
         [models.gpt-4o]\nprovider = \"openai\"\ninput_per_m = 2.5\noutput_per_m = 10.0\n\
         [models.claude-haiku]\nprovider = \"anthropic\"\napi_name = \"claude-3-5-haiku-latest\"\n\
         input_per_m = 0.8\noutput_per_m = 4.0\n\
         [routes.default]\nchain = [\"gpt-4o\", \"claude-haiku\"]\n",
        upstream.base()
    );
    std::fs::write(&path, cfg).unwrap();
    let config = path.display().to_string();
    let serve = tokio::task::spawn_blocking(move || {
        crate::common::Serve::start_with_open_files(256, &["--config", &config], &[("STRICT_KEY", "sk-test")])
    })
    .await
    .unwrap();
    // 150 calls the upstream holds, each on a connection of its own.
    let ended = Arc::new(AtomicUsize::new(0));
    let calls: Vec<_> = (0..150)
        .map(|i| {
            let (base, ended) = (serve.base.clone(), ended.clone());
            tokio::spawn(async move {
                let r = reqwest::Client::new()
                    .post(format!("{base}/v1/chat/completions"))
                    .json(&crate::gateway::ask("default", &format!("flood-{i}")))
                    .send()
                    .await;
                ended.fetch_add(1, Ordering::SeqCst);
                match r {
                    Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                    Err(_) => (0, String::new()),
                }
            })
        })
        .collect();
    // Until each is held upstream or has ended.
    let held = || upstream.received().iter().filter(|r| r.api == Api::OpenAi).count();
    for _ in 0..1_000 {
        if held() + ended.load(Ordering::SeqCst) >= 150 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // 256 open files leave 112 for connections and calls: 56 connections,
    // each with its call held upstream; the rest closed at accept.
    assert_eq!((held(), ended.load(Ordering::SeqCst)), (56, 94));
    let open = serve.open_files();
    assert!(open < 256, "{open} files open");
    // The upstream answers; the flood ends.
    upstream.state.stream.lock().hold = None;
    hold.notify_waiters();
    let mut statuses = std::collections::BTreeMap::new();
    for c in calls {
        *statuses.entry(c.await.unwrap().0).or_insert(0) += 1;
    }
    assert_eq!(statuses, [(0, 94), (200, 56)].into(), "refused at accept, or answered");
    // Nothing was the provider's fault.
    let text = reqwest::get(format!("{}/metrics", serve.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let closed = text
        .lines()
        .filter(|l| l.starts_with("fusebox_breaker_state{") && l.contains("state=\"closed\"") && l.ends_with(" 1"));
    assert_eq!(closed.count(), 4, "every breaker closed");
    let failures = text.lines().filter(|l| l.starts_with("fusebox_failures_total{"));
    assert!(
        failures.clone().all(|l| l.ends_with(" 0")),
        "{:?}",
        failures.collect::<Vec<_>>()
    );
    assert_eq!(metric(&serve.base, "fusebox_descriptors_usable").await, 112);
    // Everyone is served again, by the first model.
    for i in 0..20 {
        let r = reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", serve.base))
            .json(&crate::gateway::ask("default", "victim"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "victim {i}");
        let chain = r.headers()["x-fusebox-chain"].to_str().unwrap().to_string();
        assert_eq!(chain, "gpt-4o ok", "victim {i}");
    }
}
