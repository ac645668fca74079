//! OpenAI's Responses API as agents use it without server-side state:
//! `input` items (messages, `function_call`, `function_call_output`),
//! `instructions`, function tools, whole or streamed answers. No upstream
//! speaks it here: a request is read into the typed conversation and served
//! by chat-completions or messages models; the answer is written back as a
//! `response` object or its stream of semantic events.

mod reply;
mod request;
mod stream;

pub use reply::*;
pub use request::*;
pub use stream::*;
