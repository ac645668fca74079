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
