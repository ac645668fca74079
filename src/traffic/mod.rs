//! Traffic sources: the demo load generator and its scenarios.

pub mod load;
pub mod log;
pub mod pace;
pub mod prefetch;
pub mod record;
pub mod replay;
pub mod scenario;
pub mod summary;
pub mod synth;
