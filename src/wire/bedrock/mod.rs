//! Amazon Bedrock's Converse API: requests rendered from the typed call,
//! answers read, and ConverseStream's AWS event-stream frames read as
//! events; embeddings by InvokeModel. No client speaks it, so a call is
//! always translated.

mod embed;
mod frames;
mod reply;
mod request;

pub use embed::EmbedModel;
pub use frames::EventFrames;
pub use reply::{error_type, parse_reply, ConverseEventReader};
pub use request::render_request;
