//! A `generateContent` request rendered from the typed call.

use crate::wire::message::{ImageSource, Message, Part, Role};
use crate::wire::request::{Obj, Outgoing, ToolChoice};
use serde_json::{json, Value};

/// What a client may ask of another API that Gemini can also do (OpenAI's
/// structured output); anything else only its own API can, and the model
/// is skipped.
const HONOURED: [&str; 2] = ["response_format", "text.format"];

/// The body of a `generateContent` call. `Err` names what Gemini cannot
/// carry (the model is then skipped, not blamed).
pub fn render_request(o: &Outgoing) -> Result<Vec<u8>, String> {
    if let Some((n, _)) = o.params.needs.iter().find(|(n, _)| !HONOURED.contains(n)) {
        return Err(format!("cannot honour {n}"));
    }
    o.functions_only()?;
    let (system, contents) = render_messages(o.messages)?;
    let p = o.params;
    let mut b = Obj::new();
    b.insert("contents".into(), Value::Array(contents));
    if let Some(s) = system {
        b.insert("systemInstruction".into(), json!({"parts": [{"text": s}]}));
    }
    if !o.tools.is_empty() {
        // `parametersJsonSchema` takes a tool's JSON Schema as clients
        // write it (`parameters` is an OpenAPI subset that refuses, e.g.,
        // `additionalProperties`).
        let decls: Vec<Value> = o
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "parametersJsonSchema": t.schema}))
            .collect();
        b.insert("tools".into(), json!([{"functionDeclarations": decls}]));
        let config = match &p.tool_choice {
            None => None,
            Some(ToolChoice::Auto) => Some(json!({"mode": "AUTO"})),
            Some(ToolChoice::None) => Some(json!({"mode": "NONE"})),
            Some(ToolChoice::Required) => Some(json!({"mode": "ANY"})),
            Some(ToolChoice::Tool(name)) => Some(json!({"mode": "ANY", "allowedFunctionNames": [name]})),
        };
        if let Some(c) = config {
            b.insert("toolConfig".into(), json!({"functionCallingConfig": c}));
        }
    }
    let mut g = Obj::new();
    if p.sends_cap() {
        g.insert("maxOutputTokens".into(), json!(o.max_tokens));
    }
    if let Some(t) = p.temperature {
        g.insert("temperature".into(), json!(t));
    }
    if let Some(t) = p.top_p {
        g.insert("topP".into(), json!(t));
    }
    if !p.stop.is_empty() {
        g.insert("stopSequences".into(), json!(p.stop));
    }
    if let Some(f) = &p.response_format {
        match f.get("type").and_then(Value::as_str) {
            Some("json_object") => {
                g.insert("responseMimeType".into(), json!("application/json"));
            }
            Some("json_schema") => {
                g.insert("responseMimeType".into(), json!("application/json"));
                if let Some(s) = f.pointer("/json_schema/schema") {
                    g.insert("responseJsonSchema".into(), s.clone());
                }
            }
            _ => {}
        }
    }
    if !g.is_empty() {
        b.insert("generationConfig".into(), Value::Object(g));
    }
    Ok(Value::Object(b).to_string().into_bytes())
}

/// A part of a turn, `None` for what is left out (empty text, reasoning).
fn part_of(p: &Part) -> Result<Option<Value>, String> {
    Ok(Some(match p {
        Part::Text { text } if text.is_empty() => return Ok(None),
        Part::Text { text } => json!({"text": text}),
        Part::Image {
            source: ImageSource::Base64 { media_type, data },
            ..
        } => json!({"inlineData": {"mimeType": media_type, "data": data}}),
        Part::Image { .. } => return Err("cannot honour image URLs (Gemini takes images inline)".into()),
        p if p.droppable() => return Ok(None),
        p => return Err(format!("cannot honour {} content", p.kind())),
    }))
}

/// Typed messages as system instruction text and `contents`: tool calls
/// are `functionCall` parts of a `model` turn (with the signature their id
/// carries), tool results `functionResponse` parts of a `user` turn (named
/// by the call they answer), and consecutive turns of one role merged.
fn render_messages(messages: &[Message]) -> Result<(Option<String>, Vec<Value>), String> {
    let mut system: Vec<String> = Vec::new();
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, parts) = match m.role {
            Role::System | Role::Developer => {
                system.push(m.content.text().into_owned());
                continue;
            }
            Role::User => ("user", content_parts(m)?),
            Role::Assistant => {
                let mut parts = content_parts(m)?;
                for c in m.tool_calls.iter() {
                    let args = c.arguments_object()?;
                    let mut part = json!({"functionCall": {"name": c.name, "args": args}});
                    if let Some(s) = super::signature_of(&c.id) {
                        part["thoughtSignature"] = json!(s);
                    }
                    parts.push(part);
                }
                ("model", parts)
            }
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or("");
                let name = messages
                    .iter()
                    .flat_map(|m| m.tool_calls.iter())
                    .find(|c| c.id == id)
                    .map(|c| c.name.clone())
                    .ok_or_else(|| format!("cannot honour a tool result for a call not in the conversation ({id})"))?;
                let text = m.content.text();
                // `response` is an object: the result's own when it is
                // one, else the text under `result` (or `error`).
                let response = match serde_json::from_str::<Value>(&text) {
                    Ok(v @ Value::Object(_)) if !m.is_error => v,
                    _ if m.is_error => json!({"error": text}),
                    _ => json!({"result": text}),
                };
                (
                    "user",
                    vec![json!({"functionResponse": {"name": name, "response": response}})],
                )
            }
        };
        if parts.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((r, b)) if *r == role => b.extend(parts),
            _ => turns.push((role, parts)),
        }
    }
    let contents = turns
        .into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect();
    let system = (!system.is_empty()).then(|| system.join("\n\n"));
    Ok((system, contents))
}

fn content_parts(m: &Message) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for p in m.content.parts().iter() {
        out.extend(part_of(p)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::message::{ToolCall, ToolKind, ToolSpec};
    use crate::wire::request::Params;
    use crate::wire::Api;
    use std::sync::Arc;

    fn render(messages: &[Message], tools: &[ToolSpec], params: &Params) -> Result<Value, String> {
        let o = Outgoing {
            model: "gemini-2.5-flash",
            messages,
            own_messages: true,
            tools,
            params,
            max_tokens: 100,
            stream: false,
        };
        render_request(&o).map(|b| serde_json::from_slice(&b).unwrap())
    }

    /// A tool loop as Gemini reads it: the system instruction apart, the
    /// call a `functionCall` part with its signature, the result a
    /// `functionResponse` named for the call it answers.
    #[test]
    fn a_tool_loop_is_rendered_with_its_signature_and_the_calls_name() {
        let call = ToolCall {
            id: format!("call_0{}sig-123", super::super::SIGNATURE),
            name: "get_weather".into(),
            arguments: r#"{"city":"Paris"}"#.into(),
            kind: ToolKind::Function,
        };
        let messages = [
            Message::system("be terse"),
            Message::user("weather?"),
            Message::assistant("", vec![call.clone()]),
            Message::tool_result(&call, "21C", false),
        ];
        let tools = [ToolSpec {
            name: "get_weather".into(),
            description: "w".into(),
            schema: Arc::new(json!({"type": "object"})),
            kind: ToolKind::Function,
        }];
        let params = Params {
            tool_choice: Some(ToolChoice::Tool("get_weather".into())),
            ..Params::default()
        };
        let b = render(&messages, &tools, &params).unwrap();
        assert_eq!(b["systemInstruction"], json!({"parts": [{"text": "be terse"}]}));
        assert_eq!(
            b["contents"],
            json!([
                {"role": "user", "parts": [{"text": "weather?"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "sig-123"}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"result": "21C"}}}]},
            ])
        );
        assert_eq!(
            b["toolConfig"],
            json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}})
        );
        assert_eq!(
            b["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"],
            json!({"type": "object"})
        );
    }

    /// What only another API can do is refused by name; structured output
    /// is carried.
    #[test]
    fn what_gemini_cannot_carry_is_named_and_structured_output_is_carried() {
        let params = Params {
            needs: vec![("logprobs", Api::Chat)],
            ..Params::default()
        };
        assert_eq!(
            render(&[Message::user("hi")], &[], &params).unwrap_err(),
            "cannot honour logprobs"
        );
        let params = Params {
            needs: vec![("response_format", Api::Chat)],
            response_format: Some(
                json!({"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}),
            ),
            ..Params::default()
        };
        let b = render(&[Message::user("hi")], &[], &params).unwrap();
        assert_eq!(b["generationConfig"]["responseMimeType"], "application/json");
        assert_eq!(b["generationConfig"]["responseJsonSchema"], json!({"type": "object"}));
        let url = Message::user(crate::wire::Content::Parts(Arc::from(vec![Part::Image {
            source: ImageSource::Url("https://x/y.png".into()),
            detail: None,
        }])));
        assert!(render(&[url], &[], &Params::default())
            .unwrap_err()
            .contains("image URLs"));
    }
}
