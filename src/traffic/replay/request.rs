//! Recorded lines made into what the runner runs: agent requests, gateway
//! calls, operator commands.

use crate::provider::{Message, ToolKind, ToolSpec};
use crate::request::{AgentRequest, Via};
use crate::runner::chat::ChatRequest;
use crate::runner::embed::EmbedCall;
use crate::runner::tool_call::ToolRequest;
use crate::runner::Runner;
use crate::traffic::log::RequestRec;
use crate::wire::{Params, RawBody};
use std::sync::Arc;

/// The agent request a recorded request line stands for.
pub fn agent_request(q: RequestRec) -> AgentRequest {
    let messages = q.messages.map_or_else(
        // A tool call recorded without its arguments has none.
        || {
            if q.via == Via::Tool {
                Arc::from([])
            } else {
                // Without recorded content, a prompt of the recorded size. It names
                // no order, so every replayed tool call has the same arguments and
                // content-keyed tool results are shared: with recorded traffic that
                // asks about few orders this is closer to the recording than unique
                // prompts, which would turn every recorded cache hit into a miss
                // (a deferral, under a fault). Exact replay needs recorded content.
                const XS: &str = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
                // Its length depends on the prompt size alone, not on how the id is written.
                let len = q.prompt_tokens as usize * 4;
                let mut text = String::with_capacity(len.max(40));
                text.push_str("replayed request ");
                text.push_str(itoa::Buffer::new().format(q.id.n()));
                text.push(' ');
                let mut pad = len.saturating_sub(text.len());
                while pad > 0 {
                    let n = pad.min(XS.len());
                    text.push_str(&XS[..n]);
                    pad -= n;
                }
                Arc::from([Message::user(text)])
            }
        },
        Arc::from,
    );
    AgentRequest {
        id: q.id.n(),
        user: q.user,
        sub_user: q.sub_user,
        session: q.session,
        route: q.route,
        messages,
        tools: q.tools,
        critical_tools: q.critical_tools,
        max_tokens: q.max_tokens,
        max_steps: q.max_steps.unwrap_or(0),
        priority: q.priority,
        tenant: q.tenant,
        choices: q.choices,
        reach: q.reach,
        stream: q.stream,
    }
}

/// A recorded gateway chat call, as the gateway made it: the recorded
/// tools offered by name (the config's spec, or any arguments for a tool
/// it does not know), no agent loop.
pub fn gateway_call(runner: &Runner, req: &AgentRequest) -> ChatRequest {
    let tools: Vec<ToolSpec> = req
        .tools
        .iter()
        .map(|name| match runner.catalog().tools().iter().find(|t| t.name == *name) {
            Some(t) => t.spec.clone(),
            None => ToolSpec {
                name: name.as_str().into(),
                description: "".into(),
                schema: Arc::new(serde_json::json!({"type": "object"})),
                kind: ToolKind::Function,
            },
        })
        .collect();
    // A call that named no session was recorded in one of its own.
    let own_session = crate::request::own_session(&req.user, req.id);
    ChatRequest {
        id: req.id,
        user: req.user.to_string(),
        sub_user: req.sub_user.as_deref().map(str::to_string),
        session: (req.session != own_session).then(|| req.session.to_string()),
        route: req.route.to_string(),
        messages: req.messages.clone(),
        tools: tools.into(),
        max_tokens: req.max_tokens,
        params: Arc::new(Params {
            from_client: true,
            choices: req.choices,
            ..Params::default()
        }),
        stream: req.stream,
        fallback: true,
        // Models of this config the recorded key reached, by name.
        reach: req.reach.as_ref().map(|names| {
            let models = runner.catalog().models();
            (0..models.len())
                .filter(|&m| names.iter().any(|n| *n == *models[m].name))
                .collect()
        }),
        deadline_ms: None,
        key: None,
        priority: req.priority,
        tenant: req.tenant.as_deref().map(str::to_string),
    }
}

/// A recorded embeddings call.
pub fn embeddings_call(req: &AgentRequest) -> EmbedCall {
    let chars = req.messages.iter().map(Message::weight).sum();
    EmbedCall {
        id: req.id,
        user: req.user.to_string(),
        sub_user: req.sub_user.as_deref().map(str::to_string),
        model: req.route.to_string(),
        body: Arc::new(RawBody::default()),
        chars,
    }
}

/// A recorded MCP tool call, under the cache key it was recorded with; its
/// arguments are checked again only where the recording kept them.
pub fn tool_call(req: &AgentRequest, key: u64) -> ToolRequest {
    let args = req.messages.first().map(|m| m.content.text().to_string());
    ToolRequest {
        key,
        check: args.is_some(),
        ..ToolRequest::new(
            req.id,
            req.user.to_string(),
            Some(req.session.to_string()).filter(|s| !s.is_empty()),
            &req.route,
            args.unwrap_or_else(|| "{}".into()),
        )
    }
}
