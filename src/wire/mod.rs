//! The providers' wire formats: OpenAI chat completions and responses,
//! Anthropic messages, Google's generateContent, Amazon Bedrock's Converse,
//! Server-Sent Events and rate-limit headers, read and written.
//! The HTTP clients, the mock server and the gateway all speak through this
//! module, so what one writes the others read.
//!
//! A conversation is held as typed [`Message`]s (content parts, tool calls
//! with their ids, tool results answering them); a client's own request
//! body is kept as a [`RawBody`] next to them, so a call to an upstream of
//! the client's API passes the body on with only what fusebox must change
//! replaced, and a call to the other API is translated from the types.

pub mod anthropic;
pub mod bedrock;
pub mod fusebox;
pub mod gemini;
pub mod headers;
pub mod message;
pub mod openai;
pub mod raw;
pub mod reply;
pub mod request;
pub mod responses;
pub mod sse;
pub mod text;

pub use message::{Content, ImageSource, Message, Origin, Part, Role, ToolCall, ToolKind, ToolSpec};
pub use raw::RawBody;
pub use reply::{Assembler, Delta, Finish, Reply, Usage};
pub use request::{BadRequest, Outgoing, Params, Request, ToolChoice};

use serde::{Deserialize, Serialize};

/// Which API a body is in: the one a client speaks, and the one an
/// upstream speaks (OpenAI chat completions or Anthropic messages; no
/// upstream speaks Responses, whose clients are always translated).
/// Which OpenAI-compatible server a chat upstream is, is its
/// [`openai::Dialect`], not another API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Api {
    /// OpenAI chat completions (and OpenAI-compatible servers).
    #[default]
    #[serde(rename = "openai")]
    Chat,
    /// Anthropic messages.
    #[serde(rename = "anthropic")]
    Messages,
    /// OpenAI responses.
    #[serde(rename = "responses")]
    Responses,
}

impl Api {
    /// The API's name, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "openai",
            Api::Messages => "anthropic",
            Api::Responses => "responses",
        }
    }
}
