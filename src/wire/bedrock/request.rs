//! A Converse request rendered from the typed call.

use crate::wire::message::{ImageSource, Message, Part, Role};
use crate::wire::request::{Obj, Outgoing, ToolChoice};
use serde_json::{json, Value};

/// The body of a Converse call (the model is in its URL). `Err` names what
/// Converse cannot carry (the model is then skipped, not blamed).
pub fn render_request(o: &Outgoing) -> Result<Vec<u8>, String> {
    if let Some((n, _)) = o.params.needs.first() {
        return Err(format!("cannot honour {n}"));
    }
    o.functions_only()?;
    let (system, messages) = render_messages(o.messages)?;
    let p = o.params;
    let mut b = Obj::new();
    b.insert("messages".into(), Value::Array(messages));
    if let Some(s) = system {
        b.insert("system".into(), json!([{ "text": s }]));
    }
    let history_has_tools = o
        .messages
        .iter()
        .any(|m| !m.tool_calls.is_empty() || m.role == Role::Tool);
    // Converse has no "none": tools are left out instead, which a
    // conversation that has used them cannot be.
    let none = p.tool_choice == Some(ToolChoice::None);
    if none && history_has_tools {
        return Err("cannot honour tool_choice none in a conversation with tool calls".into());
    }
    if o.tools.is_empty() && history_has_tools {
        return Err("cannot honour tool calls in the conversation without tools offered".into());
    }
    if !o.tools.is_empty() && !none {
        let tools: Vec<Value> = o
            .tools
            .iter()
            .map(|t| {
                json!({"toolSpec": {"name": t.name, "description": t.description, "inputSchema": {"json": t.schema}}})
            })
            .collect();
        let mut config = json!({ "tools": tools });
        match &p.tool_choice {
            Some(ToolChoice::Required) => config["toolChoice"] = json!({"any": {}}),
            Some(ToolChoice::Tool(name)) => config["toolChoice"] = json!({"tool": {"name": name}}),
            _ => {}
        }
        b.insert("toolConfig".into(), config);
    }
    let mut inference = Obj::new();
    if p.sends_cap() {
        inference.insert("maxTokens".into(), json!(o.max_tokens));
    }
    if let Some(t) = p.temperature {
        inference.insert("temperature".into(), json!(t));
    }
    if let Some(t) = p.top_p {
        inference.insert("topP".into(), json!(t));
    }
    if !p.stop.is_empty() {
        inference.insert("stopSequences".into(), json!(p.stop));
    }
    if !inference.is_empty() {
        b.insert("inferenceConfig".into(), Value::Object(inference));
    }
    Ok(Value::Object(b).to_string().into_bytes())
}

fn block_of(p: &Part) -> Result<Option<Value>, String> {
    Ok(Some(match p {
        Part::Text { text } if text.is_empty() => return Ok(None),
        Part::Text { text } => json!({ "text": text }),
        Part::Image {
            source: ImageSource::Base64 { media_type, data },
            ..
        } => {
            let format = media_type.strip_prefix("image/").unwrap_or(media_type);
            if !["png", "jpeg", "gif", "webp"].contains(&format) {
                return Err(format!("cannot honour {media_type} images"));
            }
            json!({"image": {"format": format, "source": {"bytes": data}}})
        }
        Part::Image { .. } => return Err("cannot honour image URLs (Bedrock takes images inline)".into()),
        p if p.droppable() => return Ok(None),
        p => return Err(format!("cannot honour {} content", p.kind())),
    }))
}

/// Typed messages as system text and alternating turns of content blocks:
/// tool calls `toolUse` blocks, tool results user turns of `toolResult`
/// blocks (first in their turn), consecutive turns of one role merged.
fn render_messages(messages: &[Message]) -> Result<(Option<String>, Vec<Value>), String> {
    let mut system: Vec<String> = Vec::new();
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.role {
            Role::System | Role::Developer => {
                system.push(m.content.text().into_owned());
                continue;
            }
            Role::Tool => {
                let text = m.content.text();
                let content = match serde_json::from_str::<Value>(&text) {
                    Ok(v @ Value::Object(_)) => json!([{ "json": v }]),
                    _ => json!([{ "text": text }]),
                };
                let mut r = json!({"toolUseId": m.tool_call_id.as_deref().unwrap_or(""), "content": content});
                if m.is_error {
                    r["status"] = json!("error");
                }
                ("user", vec![json!({ "toolResult": r })])
            }
            Role::User | Role::Assistant => {
                let mut blocks = Vec::new();
                for p in m.content.parts().iter() {
                    blocks.extend(block_of(p)?);
                }
                for c in m.tool_calls.iter() {
                    let input = c.arguments_object()?;
                    blocks.push(json!({"toolUse": {"toolUseId": c.id, "name": c.name, "input": input}}));
                }
                let role = if m.role == Role::User { "user" } else { "assistant" };
                (role, blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((r, b)) if *r == role => {
                let results = b.iter().take_while(|x| x.get("toolResult").is_some()).count();
                if m.role == Role::Tool {
                    b.splice(results..results, blocks);
                } else {
                    b.extend(blocks);
                }
            }
            _ => turns.push((role, blocks)),
        }
    }
    let messages = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let system = (!system.is_empty()).then(|| system.join("\n\n"));
    Ok((system, messages))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::message::{ToolCall, ToolKind, ToolSpec};
    use crate::wire::request::Params;
    use std::sync::Arc;

    #[test]
    fn a_tool_loop_is_rendered_as_converse_takes_it() {
        let call = ToolCall::new("tooluse_1", "get_order", r#"{"order_id":"38100"}"#);
        let messages = [
            Message::system("be terse"),
            Message::user("where?"),
            Message::assistant("", vec![call.clone()]),
            Message::tool_result(&call, r#"{"status":"shipped"}"#, false),
        ];
        let tools = [ToolSpec {
            name: "get_order".into(),
            description: "d".into(),
            schema: Arc::new(json!({"type": "object"})),
            kind: ToolKind::Function,
        }];
        let params = Params {
            tool_choice: Some(ToolChoice::Required),
            ..Params::default()
        };
        let o = Outgoing {
            model: "m",
            messages: &messages,
            own_messages: true,
            tools: &tools,
            params: &params,
            max_tokens: 64,
            stream: false,
        };
        let b: Value = serde_json::from_slice(&render_request(&o).unwrap()).unwrap();
        assert_eq!(b["system"], json!([{"text": "be terse"}]));
        assert_eq!(
            b["messages"],
            json!([
                {"role": "user", "content": [{"text": "where?"}]},
                {"role": "assistant", "content": [{"toolUse": {"toolUseId": "tooluse_1", "name": "get_order", "input": {"order_id": "38100"}}}]},
                {"role": "user", "content": [{"toolResult": {"toolUseId": "tooluse_1", "content": [{"json": {"status": "shipped"}}]}}]},
            ])
        );
        assert_eq!(b["toolConfig"]["toolChoice"], json!({"any": {}}));
        assert_eq!(
            b["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"],
            json!({"json": {"type": "object"}})
        );
    }
}
