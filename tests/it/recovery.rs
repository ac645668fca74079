//! A primary that was down comes back: with the defaults, a model down
//! 60 s and then healthy serves again within one base cooldown (30 s) of
//! recovering, while requests keep arriving, in paused time.

use crate::common::{runner, Scripted, Step};
use fusebox::config::Config;
use fusebox::outcome::Level;
use fusebox::provider::{LlmRequest, LlmResponse, Provider, ProviderError};
use fusebox::runner::chat::ChatRequest;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Answers 503 until `healthy_at`, then as `Step::ok()` does.
struct DownUntil {
    healthy_at: Instant,
    ok: Arc<Scripted>,
}

#[async_trait::async_trait]
impl Provider for DownUntil {
    async fn complete(&self, req: &LlmRequest) -> Result<LlmResponse, ProviderError> {
        if Instant::now() < self.healthy_at {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let kind = fusebox::provider::ErrorKind::from_status(503);
            return Err(ProviderError::new(kind, Some(503), "HTTP 503"));
        }
        self.ok.complete(req).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_primary_down_60_s_serves_again_within_one_base_cooldown() {
    let start = Instant::now();
    let primary = Arc::new(DownUntil {
        healthy_at: start + Duration::from_secs(60),
        ok: Scripted::new(vec![], Step::ok()),
    });
    let r = runner(Config::default(), vec![("openai", primary as Arc<dyn Provider>)], None);
    let mut served_by_primary = Vec::new();
    for i in 0..20u64 {
        tokio::time::sleep_until(start + Duration::from_secs(4 * i)).await;
        let req = ChatRequest {
            user: format!("u{i}"),
            ..crate::common::chat_request(i + 1)
        };
        let chat = r.chat(req, None).await;
        assert_ne!(
            chat.outcome.level,
            Level::Failed,
            "request {i} failed: {:?}",
            chat.outcome.path()
        );
        if chat.outcome.level == Level::None {
            served_by_primary.push(4 * i);
        }
    }
    let back = served_by_primary.iter().copied().find(|&t| t >= 60);
    eprintln!("the primary answered the requests sent at {served_by_primary:?} s");
    assert!(
        back.is_some_and(|t| t <= 60 + 30),
        "the primary served again at {back:?} s (it answered the requests sent at {served_by_primary:?} s)"
    );
}
