//! OpenAI chat completions (also DeepSeek's and other OpenAI-compatible
//! servers'): requests read and written, answers and stream chunks read
//! and written, error bodies.

mod embeddings;
mod reply;
mod request;
mod stream;

pub use embeddings::{embed_dimensions, embed_texts, embeddings_list};
pub use reply::*;
pub use request::*;
pub use stream::*;

/// Which OpenAI-compatible server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI itself: the output cap fusebox writes is
    /// `max_completion_tokens` (its reasoning models refuse `max_tokens`).
    OpenAi,
    /// Other OpenAI-compatible servers (vLLM, llama.cpp, Ollama, …): the
    /// long-standing `max_tokens`, and `system` for the `developer` role
    /// OpenAI introduced.
    Compatible,
    /// DeepSeek: prompt-cache hit/miss counts in usage, `reasoning_content`,
    /// `max_tokens`, no `developer` role.
    DeepSeek,
}

impl Dialect {
    /// The output cap's name when fusebox writes the request itself (the
    /// client wrote `max_completion_tokens`, or the server is OpenAI's).
    fn cap_key(self, client_wrote_completion: bool) -> &'static str {
        if client_wrote_completion || self == Dialect::OpenAi {
            "max_completion_tokens"
        } else {
            "max_tokens"
        }
    }
}

const ROLES: [&str; 6] = ["system", "developer", "user", "assistant", "tool", "function"];
