//! The conversation as fusebox holds it: typed messages carrying what the
//! providers' APIs carry (content parts, assistant tool calls with their
//! ids, tool results answering them, refusals, reasoning), so one
//! conversation can be rendered for either API without losing its meaning.
//!
//! These types are also how conversations are written to traffic logs and
//! the deferred spool; a message of older logs (`{"role", "content":
//! "text"}`) reads as before.

use super::Api;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::sync::{Arc, LazyLock};

/// Who speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions (OpenAI `system`, Anthropic's `system` parameter).
    System,
    /// OpenAI's newer name for system instructions.
    Developer,
    /// The user.
    #[default]
    User,
    /// The model.
    Assistant,
    /// A tool's result, answering an assistant tool call.
    Tool,
}

impl Role {
    /// The role's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// System or developer: instructions rather than a turn.
    pub fn instructs(self) -> bool {
        matches!(self, Role::System | Role::Developer)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an image comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageSource {
    /// An `https:` (or `data:`) URL.
    Url(Arc<str>),
    /// Inline bytes, base64-encoded.
    Base64 {
        /// e.g. `image/png`.
        media_type: Arc<str>,
        /// The base64 text.
        data: Arc<str>,
    },
}

impl ImageSource {
    /// A `data:` URL is inline bytes in URL form: read it as such.
    pub fn from_url(url: &str) -> Self {
        if let Some(rest) = url.strip_prefix("data:") {
            if let Some((media_type, data)) = rest.split_once(";base64,") {
                return ImageSource::Base64 {
                    media_type: media_type.into(),
                    data: data.into(),
                };
            }
        }
        ImageSource::Url(url.into())
    }

    /// The source as a URL (inline bytes as a `data:` URL).
    pub fn to_url(&self) -> Cow<'_, str> {
        match self {
            ImageSource::Url(u) => Cow::Borrowed(u),
            ImageSource::Base64 { media_type, data } => Cow::Owned(format!("data:{media_type};base64,{data}")),
        }
    }
}

/// One part of a message's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    /// Text.
    Text {
        /// The text.
        text: Arc<str>,
    },
    /// An image.
    Image {
        /// Where it comes from.
        source: ImageSource,
        /// OpenAI's `detail` (`auto`, `low`, `high`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<Arc<str>>,
    },
    /// A part fusebox does not read (audio, files, documents, thinking
    /// blocks, …), kept exactly as the client sent it in its API's format:
    /// it reaches an upstream of that API unchanged, and another API only
    /// where [`Part::droppable`] says it may be left out.
    Opaque {
        /// The API whose format `value` is in.
        wire: Api,
        /// The part as sent.
        value: Arc<serde_json::Value>,
    },
}

impl Part {
    /// A text part.
    pub fn text(t: impl Into<Arc<str>>) -> Self {
        Part::Text { text: t.into() }
    }

    /// The part's type as its API names it (for an opaque part), or ours.
    pub fn kind(&self) -> &str {
        match self {
            Part::Text { .. } => "text",
            Part::Image { .. } => "image",
            Part::Opaque { value, .. } => value.get("type").and_then(|t| t.as_str()).unwrap_or("unknown"),
        }
    }

    /// Whether translating to another API may leave this part out: the
    /// model's own reasoning blocks, which only their API can read back.
    pub fn droppable(&self) -> bool {
        matches!(self.kind(), "thinking" | "redacted_thinking" | "reasoning")
    }
}

/// A message's content: plain text, or parts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text (the common case: one allocation, shared on clone).
    Text(Arc<str>),
    /// Parts in order.
    Parts(Arc<[Part]>),
}

impl Default for Content {
    fn default() -> Self {
        Content::Text(empty_str())
    }
}

impl Content {
    /// The text of the content: the text itself, or the text parts joined
    /// (other parts carry no text).
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Content::Text(t) => Cow::Borrowed(t),
            Content::Parts(parts) => {
                let mut texts = parts.iter().filter_map(|p| match p {
                    Part::Text { text } => Some(&**text),
                    _ => None,
                });
                match (texts.next(), texts.next()) {
                    (None, _) => Cow::Borrowed(""),
                    (Some(one), None) => Cow::Borrowed(one),
                    (Some(a), Some(b)) => {
                        let mut s = format!("{a}\n{b}");
                        for t in texts {
                            s.push('\n');
                            s.push_str(t);
                        }
                        Cow::Owned(s)
                    }
                }
            }
        }
    }

    /// The parts (plain text is one text part, none when empty).
    pub fn parts(&self) -> Cow<'_, [Part]> {
        match self {
            Content::Text(t) if t.is_empty() => Cow::Borrowed(&[]),
            Content::Text(t) => Cow::Owned(vec![Part::Text { text: t.clone() }]),
            Content::Parts(p) => Cow::Borrowed(p),
        }
    }

    /// No text and no parts.
    pub fn is_empty(&self) -> bool {
        match self {
            Content::Text(t) => t.is_empty(),
            Content::Parts(p) => p.is_empty(),
        }
    }

    /// Characters a model reads here, for token estimates: the text, and
    /// about 1,000 characters' worth (~250 tokens) per image or other part.
    pub fn weight(&self) -> usize {
        match self {
            Content::Text(t) => t.len(),
            Content::Parts(parts) => parts
                .iter()
                .map(|p| match p {
                    Part::Text { text } => text.len(),
                    _ => 1_000,
                })
                .sum(),
        }
    }
}

impl From<&str> for Content {
    fn from(s: &str) -> Self {
        Content::Text(s.into())
    }
}

impl From<String> for Content {
    fn from(s: String) -> Self {
        Content::Text(s.into())
    }
}

impl From<Arc<str>> for Content {
    fn from(s: Arc<str>) -> Self {
        Content::Text(s)
    }
}

/// A tool call the model made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The id its result must answer (`call_…`, `toolu_…`).
    #[serde(default)]
    pub id: String,
    /// Tool name as the model wrote it.
    pub name: String,
    /// Arguments as the model wrote them (a JSON object for a function;
    /// free text for a custom tool).
    pub arguments: String,
    /// A function's call or a custom tool's.
    #[serde(default, skip_serializing_if = "ToolKind::is_function")]
    pub kind: ToolKind,
}

/// How a tool takes its input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolKind {
    /// A function: JSON arguments under a JSON Schema.
    #[default]
    Function,
    /// An OpenAI custom tool: free text, optionally in a grammar. Only
    /// OpenAI's API offers these.
    Custom,
}

impl ToolKind {
    /// Whether this is a function.
    pub fn is_function(&self) -> bool {
        *self == ToolKind::Function
    }
}

impl ToolCall {
    /// Its key in a tool result cache: the same tool with the same
    /// arguments.
    pub fn cache_key(&self) -> u64 {
        use crate::clock::hash_str;
        hash_str(&self.name) ^ hash_str(&self.arguments).rotate_left(17)
    }

    /// Its arguments as the JSON object APIs that take an object want
    /// (none written is an empty one); `Err` names the call whose arguments
    /// are no object.
    pub fn arguments_object(&self) -> Result<serde_json::Value, String> {
        match serde_json::from_str::<serde_json::Value>(&self.arguments) {
            Ok(v @ serde_json::Value::Object(_)) => Ok(v),
            _ if self.arguments.trim().is_empty() => Ok(serde_json::Value::Object(Default::default())),
            _ => Err(format!(
                "cannot honour arguments of {} that are not a JSON object",
                self.name
            )),
        }
    }

    /// A call of `name` with `arguments`, answered by `id`.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
            kind: ToolKind::Function,
        }
    }
}

/// A tool offered to the model. Shared, not copied: every request offers
/// the same specs, so cloning one is three reference-count increments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Name the model must use.
    pub name: Arc<str>,
    /// What it does.
    pub description: Arc<str>,
    /// JSON schema of its arguments (a custom tool's `format`).
    pub schema: Arc<serde_json::Value>,
    /// A function, or a custom tool.
    #[serde(default, skip_serializing_if = "ToolKind::is_function")]
    pub kind: ToolKind,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// What is said (empty for an assistant turn that only calls tools).
    #[serde(default)]
    pub content: Content,
    /// An assistant's tool calls.
    #[serde(default = "no_calls", skip_serializing_if = "calls_empty")]
    pub tool_calls: Arc<[ToolCall]>,
    /// A tool result: the id of the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<Arc<str>>,
    /// A participant's name (OpenAI `name`), or the tool's name on a result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Arc<str>>,
    /// An assistant's refusal (OpenAI `refusal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Arc<str>>,
    /// An assistant's reasoning text, where the provider returns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<Arc<str>>,
    /// A tool result that reports a failure (Anthropic `is_error`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// Where in the client's `messages` it was read from (`None`: fusebox
    /// wrote it), so a body passed on with its conversation changed
    /// keeps every element that remains whole as the client wrote it.
    #[serde(skip)]
    pub origin: Option<Origin>,
}

/// The element of a client's `messages` array a message was read from,
/// and how many messages were read from it (an Anthropic user turn holds
/// tool results and text).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The element's index.
    pub index: u32,
    /// Messages read from it.
    pub pieces: u32,
}

/// The empty string, shared.
fn empty_str() -> Arc<str> {
    static EMPTY: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(""));
    EMPTY.clone()
}

/// No tool calls, shared: most messages have none, and cloning this is a
/// reference count, not an allocation.
pub fn no_calls() -> Arc<[ToolCall]> {
    static NONE: LazyLock<Arc<[ToolCall]>> = LazyLock::new(|| Arc::from(Vec::new()));
    NONE.clone()
}

fn calls_empty(c: &Arc<[ToolCall]>) -> bool {
    c.is_empty()
}

impl Default for Message {
    fn default() -> Self {
        Self::new(Role::User, Content::default())
    }
}

impl Message {
    /// A message of `role` saying `content`.
    pub fn new(role: Role, content: impl Into<Content>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: no_calls(),
            tool_call_id: None,
            name: None,
            refusal: None,
            reasoning: None,
            is_error: false,
            origin: None,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<Content>) -> Self {
        Self::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<Content>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant message saying `text` and calling `calls`.
    pub fn assistant(text: impl Into<Content>, calls: Vec<ToolCall>) -> Self {
        Self {
            tool_calls: if calls.is_empty() { no_calls() } else { calls.into() },
            ..Self::new(Role::Assistant, text)
        }
    }

    /// The result of tool call `call` (its id and name), saying `content`.
    pub fn tool_result(call: &ToolCall, content: impl Into<Content>, is_error: bool) -> Self {
        Self {
            tool_call_id: Some(call.id.as_str().into()),
            name: Some(call.name.as_str().into()),
            is_error,
            ..Self::new(Role::Tool, content)
        }
    }

    /// Characters a model reads in this message, for token estimates.
    pub fn weight(&self) -> usize {
        self.content.weight()
            + self
                .tool_calls
                .iter()
                .map(|c| c.name.len() + c.arguments.len())
                .sum::<usize>()
    }
}

/// Checks that tool results answer tool calls as the providers require:
/// every tool result answers a call of the assistant turn just before it
/// (other results in between), and every call of an assistant turn is
/// answered before the next turn. The problem, in the words OpenAI uses.
pub fn check_tool_turns(messages: &[Message]) -> Result<(), String> {
    // Ids of the last assistant turn's calls not answered yet; None when
    // the previous message was neither that turn nor one of its results.
    let mut open: Option<Vec<&str>> = None;
    for (i, m) in messages.iter().enumerate() {
        match m.role {
            Role::Tool => {
                let id = m.tool_call_id.as_deref().unwrap_or("");
                let Some(ids) = open.as_mut() else {
                    return Err(format!(
                        "messages[{i}]: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'"
                    ));
                };
                let Some(at) = ids.iter().position(|x| *x == id) else {
                    return Err(format!(
                        "messages[{i}]: tool_call_id `{id}` does not answer a tool call of the preceding assistant message"
                    ));
                };
                ids.remove(at);
            }
            _ => {
                if let Some(ids) = open.take().filter(|ids| !ids.is_empty()) {
                    return Err(format!(
                        "messages[{i}]: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                        ids.join(", ")
                    ));
                }
                if m.role == Role::Assistant && !m.tool_calls.is_empty() {
                    open = Some(m.tool_calls.iter().map(|c| c.id.as_str()).collect());
                }
            }
        }
    }
    match open.filter(|ids| !ids.is_empty()) {
        Some(ids) => Err(format!(
            "an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
            ids.join(", ")
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_log_message_reads_as_text() {
        let m: Message = serde_json::from_str(r#"{"role":"tool","content":"ok"}"#).unwrap();
        assert_eq!(m.role, Role::Tool);
        assert_eq!(m.content.text(), "ok");
        assert!(m.tool_calls.is_empty() && m.tool_call_id.is_none());
    }

    #[test]
    fn a_typed_message_round_trips() {
        let call = ToolCall::new("call_1", "get_order", r#"{"order_id":"7"}"#);
        let parts: Arc<[Part]> = vec![
            Part::text("look"),
            Part::Image {
                source: ImageSource::from_url("data:image/png;base64,AAAA"),
                detail: Some("low".into()),
            },
        ]
        .into();
        for m in [
            Message::assistant("", vec![call.clone()]),
            Message::tool_result(&call, "shipped", false),
            Message::user(Content::Parts(parts)),
        ] {
            let text = serde_json::to_string(&m).unwrap();
            let back: Message = serde_json::from_str(&text).unwrap();
            assert_eq!(back, m, "{text}");
        }
    }

    #[test]
    fn tool_results_must_answer_the_calls_before_them() {
        let call = ToolCall::new("call_1", "get_order", "{}");
        let ask = Message::user("where is it?");
        let asked = Message::assistant("", vec![call.clone()]);
        let answer = Message::tool_result(&call, "shipped", false);
        assert!(check_tool_turns(&[ask.clone(), asked.clone(), answer.clone(), Message::user("thanks")]).is_ok());
        // A tool result without the call before it.
        let e = check_tool_turns(&[ask.clone(), answer.clone()]).unwrap_err();
        assert!(e.contains("must be a response to a preceeding message"), "{e}");
        // A result answering another id.
        let other = Message::tool_result(&ToolCall::new("call_2", "get_order", "{}"), "x", false);
        assert!(check_tool_turns(&[ask.clone(), asked.clone(), other]).is_err());
        // A call never answered.
        let e = check_tool_turns(&[ask, asked, Message::user("hm")]).unwrap_err();
        assert!(e.contains("call_1"), "{e}");
    }

    #[test]
    fn data_urls_are_inline_images() {
        let s = ImageSource::from_url("data:image/jpeg;base64,/9j/");
        assert_eq!(
            s,
            ImageSource::Base64 {
                media_type: "image/jpeg".into(),
                data: "/9j/".into()
            }
        );
        assert_eq!(s.to_url(), "data:image/jpeg;base64,/9j/");
        assert_eq!(
            ImageSource::from_url("https://x/y.png"),
            ImageSource::Url("https://x/y.png".into())
        );
    }
}
