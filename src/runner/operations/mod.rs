//! What an operator may do to a running runner: apply a command and
//! announce it with who issued it ([`command`]), read the config file again
//! and take what can change in place ([`reload`]). [`Operations`] borrows
//! the parts it acts on, and no more.

pub mod command;
pub mod reload;

use super::Catalog;
use crate::clock::Clock;
use crate::config::Config;
use crate::provider::fault::FaultTable;
use crate::resilience::budget::Budgets;
use crate::telemetry::events::EventBus;
use std::sync::atomic::AtomicBool;
use std::sync::OnceLock;

/// The runner's parts an operator acts on.
pub struct Operations<'r> {
    pub(super) cfg: &'r Config,
    pub(super) catalog: &'r Catalog,
    pub(super) clock: &'r Clock,
    pub(super) events: &'r EventBus,
    pub(super) faults: &'r FaultTable,
    pub(super) budgets: &'r Budgets,
    /// Fault-drill mode.
    pub(super) drill: &'r AtomicBool,
    /// The config file a reload reads again, once set.
    pub(super) source: &'r OnceLock<reload::Source>,
}
