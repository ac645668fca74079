//! Every answer names its request: `x-fusebox-request-id` on whole,
//! streamed and refused answers (the caller's `x-request-id` kept), in a
//! stream's last chunk, in the recording and in the trace; the console
//! finds a request by it.

use crate::common::otlp::{attr, Receiver};
use crate::common::Serve;
use fusebox::traffic::log::{LogReader, Record};
use serde_json::{json, Value};

const ID: &str = "x-fusebox-request-id";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_names_its_request_in_the_recording_and_the_trace_too() {
    let rx = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec.jsonl");
    let args = [
        "--record".to_string(),
        rec.display().to_string(),
        "--otlp-endpoint".into(),
        rx.url.clone(),
    ];
    let mut serve = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Serve::start_with(&args)
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let url = format!("{}/v1/chat/completions", serve.base);
    let ask = |stream: bool| json!({"model": "default", "stream": stream, "messages": [{"role": "user", "content": "Where is order #38100?"}]});
    // Whole, the caller's id kept.
    let whole = http
        .post(&url)
        .header("x-request-id", "caller-77")
        .json(&ask(false))
        .send()
        .await
        .unwrap();
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.headers()[ID], "caller-77");
    let upstream = whole.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    assert!(upstream.starts_with("chatcmpl-"), "{upstream}");
    // Streamed, one made here; the last chunk says it too.
    let streamed = http.post(&url).json(&ask(true)).send().await.unwrap();
    let made = streamed.headers()[ID].to_str().unwrap().to_string();
    assert!(made.starts_with("fb-"), "{made}");
    let body = streamed.text().await.unwrap();
    let last = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .last()
        .unwrap();
    assert_eq!(last["fusebox"]["request_id"], made.as_str(), "{last}");
    // Refused at the door or by the handler: named all the same; an id
    // that is not usable is replaced.
    let unknown = http
        .post(&url)
        .header("x-request-id", "has space")
        .json(&json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    assert!(unknown.headers()[ID].to_str().unwrap().starts_with("fb-"));
    let broken = http.post(&url).body("{nope").send().await.unwrap();
    assert_eq!(broken.status(), 400);
    let other = broken.headers()[ID].to_str().unwrap();
    assert!(other.starts_with("fb-") && other != made, "{other}");
    // The trace names it.
    let spans = rx.wait_for(|s| s.iter().any(|s| attr(&s.attributes, "fusebox.request.key").is_some()));
    let keys: Vec<String> = spans
        .iter()
        .filter_map(|s| attr(&s.attributes, "fusebox.request.key"))
        .collect();
    assert!(keys.contains(&"caller-77".to_string()), "{keys:?}");
    let answered = rx.wait_for(|s| s.iter().any(|s| attr(&s.attributes, "gen_ai.response.id").is_some()));
    let ids: Vec<String> = answered
        .iter()
        .filter_map(|s| attr(&s.attributes, "gen_ai.response.id"))
        .collect();
    assert!(
        ids.contains(&upstream),
        "the upstream's id on its attempt's span: {ids:?}"
    );
    // The recording names both requests.
    serve.signal("TERM");
    tokio::task::spawn_blocking(move || serve.wait()).await.unwrap();
    let mut r = LogReader::open(&rec, false).unwrap();
    let (mut recorded, mut answers) = (Vec::new(), Vec::new());
    while let Some(rec) = r.next_record().unwrap() {
        match rec {
            Record::Outcome(o) => recorded.extend(o.key.map(|k| k.to_string())),
            Record::Attempt(a) => answers.extend(a.response_id),
            _ => {}
        }
    }
    assert_eq!(recorded, vec!["caller-77".to_string(), made]);
    assert_eq!(
        answers.first(),
        Some(&upstream),
        "the upstream's id recorded: {answers:?}"
    );
    assert_eq!(answers.len(), 2, "the streamed answer's too: {answers:?}");
}
