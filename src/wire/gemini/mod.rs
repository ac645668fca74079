//! Google's `generateContent` (the Gemini API and Vertex AI): requests
//! rendered from the typed call, answers and stream chunks read, errors
//! (`google.rpc.Status`) read. No client speaks it, so a call is always
//! translated: nothing of a Gemini body reaches a client as sent.
//!
//! Gemini names no tool call ids and carries a model's `thoughtSignature`
//! on the part that calls a tool, to be sent back with it: a call's id is
//! made from its place in the answer, and the signature rides in the id
//! after [`SIGNATURE`], so a client that sends the id back sends it too.

mod embed;
mod reply;
mod request;
mod stream;

pub use embed::{embeddings_reply, render_embed, render_predict};
pub use reply::{parse_reply, Status};
pub use request::render_request;
pub use stream::ChunkReader;

/// What separates a tool call's id from the signature it carries.
pub const SIGNATURE: &str = "__thought__";

/// A tool call's id: `base`, with the model's signature when it gave one.
fn call_id(base: String, signature: Option<&str>) -> String {
    match signature {
        Some(s) if !s.is_empty() => format!("{base}{SIGNATURE}{s}"),
        _ => base,
    }
}

/// The signature a tool call's id carries.
fn signature_of(id: &str) -> Option<&str> {
    id.split_once(SIGNATURE).map(|(_, s)| s).filter(|s| !s.is_empty())
}
