//! What the runner shows the world: events and snapshots.

pub mod counter;
pub mod events;
pub mod snapshot;
