//! What the runner shows the world: events, the snapshot views read, the
//! counters behind them and the shared store's status.

pub mod counter;
pub mod events;
pub mod histogram;
pub mod snapshot;
pub mod stats;
pub mod store;
