//! The providers' wire formats: OpenAI chat completions and responses,
//! Anthropic messages, Server-Sent Events and rate-limit headers, read and
//! written.
//! The HTTP clients, the mock server and the gateway all speak through this
//! module, so what one writes the others read.
//!
//! A conversation is held as typed [`Message`]s (content parts, tool calls
//! with their ids, tool results answering them); a client's own request
//! body is kept as a [`RawBody`] next to them, so a call to an upstream of
//! the client's API passes the body on with only what fusebox must change
//! replaced, and a call to the other API is translated from the types.

pub mod anthropic;
pub mod fusebox;
pub mod headers;
pub mod message;
pub mod openai;
pub mod raw;
pub mod reply;
pub mod request;
pub mod responses;
pub mod sse;

pub use message::{Content, ImageSource, Message, Origin, Part, Role, ToolCall, ToolKind, ToolSpec};
pub use raw::RawBody;
pub use reply::{Assembler, Delta, Finish, Reply, Usage};
pub use request::{BadRequest, Outgoing, Params, Request, ToolChoice};

use serde::{Deserialize, Serialize};

/// Which API a body is in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WireKind {
    /// OpenAI chat completions (and OpenAI-compatible servers).
    #[default]
    OpenAi,
    /// Anthropic messages.
    Anthropic,
}

impl WireKind {
    /// The API's name, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            WireKind::OpenAi => "openai",
            WireKind::Anthropic => "anthropic",
        }
    }
}
