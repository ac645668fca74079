//! Traffic sources: the demo load generator and its scenarios.

pub mod load;
pub mod pace;
pub mod scenario;
pub mod summary;
