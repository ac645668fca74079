//! Shared protections isolate tenants: what one tenant does to a
//! protection every tenant shares (the adaptive concurrency limit, the
//! global spend-rate breaker) moves it for that tenant, not for all.

use crate::common::runner;
use fusebox::config::Config;
use fusebox::outcome::Level;
use fusebox::provider::{ErrorKind, LlmRequest, LlmResponse, Provider, ProviderError, Usage};
use fusebox::runner::chat::ChatRequest;
use fusebox::runner::Runner;
use fusebox::wire::{Message, Role};
use std::sync::Arc;
use std::time::Duration;

/// A provider that refuses one tenant's prompts (those naming `NOISY`)
/// with a 429 at once, as a provider's per-user quota does, and answers
/// everyone else's in a second.
struct Picky;

#[async_trait::async_trait]
impl Provider for Picky {
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        let noisy = req.messages.iter().any(|m| m.content.text().contains("NOISY"));
        if noisy {
            tokio::time::sleep(Duration::from_millis(20)).await;
            return Err(ProviderError::new(
                ErrorKind::RateLimited,
                Some(429),
                "quota of this user",
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok(LlmResponse {
            text: "answer".into(),
            usage: Usage {
                input: 20,
                output: 10,
                cached_input: 0,
            },
            ..LlmResponse::default()
        })
    }
}

fn adaptive_runner() -> Arc<Runner> {
    let mut cfg = Config::default();
    cfg.limiter.adaptive.enabled = true;
    cfg.breaker.count_rate_limited = false;
    cfg.retry.max_retries = 0;
    runner(
        cfg,
        ["openai", "anthropic", "deepseek"]
            .into_iter()
            .map(|n| (n, Arc::new(Picky) as Arc<dyn Provider>))
            .collect(),
        None,
    )
}

fn request(id: u64, user: &str, text: &str) -> ChatRequest {
    ChatRequest {
        user: user.into(),
        messages: vec![Message::new(Role::User, text)].into(),
        ..crate::common::chat_request(id)
    }
}

/// `n` calls of `user` at once; how many the route's first model answered.
async fn at_once(r: &Arc<Runner>, first_id: u64, n: u64, user: &str, text: &str) -> usize {
    let calls: Vec<_> = (first_id..first_id + n)
        .map(|id| {
            let (r, req) = (r.clone(), request(id, user, text));
            tokio::spawn(async move { r.chat(req, None).await.outcome.level })
        })
        .collect();
    let mut first = 0;
    for c in calls {
        first += usize::from(c.await.unwrap() == Level::None);
    }
    first
}

fn openai_limit(r: &Runner) -> u32 {
    let now = tokio::time::Instant::now();
    let openai = r
        .catalog()
        .providers()
        .iter()
        .find(|p| p.name == "openai")
        .expect("openai");
    openai.limiter.view(now).adaptive.expect("adaptive").limit
}

#[tokio::test(start_paused = true)]
async fn one_tenants_429s_leave_the_shared_adaptive_limit_to_the_others() {
    let r = adaptive_runner();
    assert_eq!(openai_limit(&r), 16);
    // The noisy tenant alone: its 429s cut the limit (nothing tells them
    // from the provider's)...
    for round in 0..25 {
        at_once(&r, round * 4, 4, "noisy", "NOISY: summarise this").await;
    }
    assert!(openai_limit(&r) < 8, "{}", openai_limit(&r));
    // ...and the limit it cut from is everyone else's as they come.
    assert_eq!(at_once(&r, 1_000, 8, "quiet", "Where is order #38100?").await, 8);
    assert_eq!(openai_limit(&r), 16);
    // With others about and answered, its 429s are its own: no cut.
    let noisy = {
        let r = r.clone();
        tokio::spawn(async move {
            for round in 0..25 {
                at_once(&r, 2_000 + round * 4, 4, "noisy", "NOISY: again").await;
            }
        })
    };
    for round in 0..5 {
        assert_eq!(at_once(&r, 3_000 + round * 8, 8, "quiet", "And order #38101?").await, 8);
    }
    noisy.await.unwrap();
    assert_eq!(openai_limit(&r), 16);
}

/// A provider whose answers to prompts naming `LONG` stream for 40 s (200
/// pieces 200 ms apart), others for 400 ms.
fn lengthy() -> Arc<dyn Provider> {
    struct Lengthy;
    #[async_trait::async_trait]
    impl Provider for Lengthy {
        async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
            self.open(req).await?.whole().await
        }
        async fn open(&self, req: &LlmRequest) -> Result<fusebox::provider::Opened, ProviderError> {
            let long = req.messages.iter().any(|m| m.content.text().contains("LONG"));
            let pieces = if long { 200 } else { 2 };
            crate::blame::Paced::new(100, pieces, 200).open(req).await
        }
    }
    Arc::new(Lengthy)
}

#[tokio::test(start_paused = true)]
async fn one_tenants_long_streams_hold_no_more_than_its_share_of_the_slots() {
    // openai takes two calls at once; calls queue by fair shares; the
    // route has no other model to go to.
    let mut cfg = Config::default();
    cfg.providers.get_mut("openai").unwrap().concurrency = 2;
    cfg.limiter.queue.enabled = true;
    cfg.routes.get_mut("default").unwrap().chain = vec!["gpt-4o".into()];
    let r = runner(cfg, vec![("openai", lengthy())], None);
    let stream = |id: u64, user: &str, text: &str| {
        let (r, req) = (r.clone(), request(id, user, text));
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            let mut sink = crate::blame::Reader::default();
            let chat = r.chat(ChatRequest { stream: true, ..req }, Some(&mut sink)).await;
            (chat.outcome.level, start.elapsed())
        })
    };
    // The reader calls now and then; the storyteller opens two long streams.
    assert_eq!(stream(1, "reader", "Where is order #1?").await.unwrap().0, Level::None);
    let long = [
        stream(2, "storyteller", "LONG story"),
        stream(3, "storyteller", "LONG saga"),
    ];
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (level, took) = stream(4, "reader", "And order #2?").await.unwrap();
    assert_eq!(level, Level::None, "the reader is served at once");
    assert!(took < Duration::from_secs(2), "{took:?}");
    // The storyteller held one slot: its second stream was refused for
    // its share (the route had no other model), not queued for the slot.
    let mut levels = Vec::new();
    for l in long {
        levels.push(l.await.unwrap().0);
    }
    levels.sort();
    assert_eq!(levels, vec![Level::None, Level::Failed]);
}
