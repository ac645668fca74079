//! Anthropic messages: requests read and written, answers and stream
//! events read and written, error bodies.

mod reply;
mod request;
mod stream;

pub use reply::*;
pub use request::*;
pub use stream::*;

/// The API version fusebox speaks.
pub const VERSION: &str = "2023-06-01";
