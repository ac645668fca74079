//! What the runner shows the world: events and snapshots.

pub mod events;
pub mod snapshot;
