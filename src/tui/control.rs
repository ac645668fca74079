//! What the console runs over: where its snapshots and events come from and
//! where its commands go. In process that is the runner itself; attached
//! to running gateways, their live streams and command endpoints.

use super::app::{App, Dispatch};
use super::{SNAPSHOT_EVENTS, SNAPSHOT_USERS};
use crate::command::Issuer;
use crate::runner::Runner;
use crate::telemetry::events::Event;
use crate::telemetry::snapshot::Snapshot;
use futures_util::future::BoxFuture;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// A command's answer: a line for the status bar, and the snapshot after
/// it, so its effect is on the very next frame.
#[derive(Debug, Default)]
pub struct CommandReply {
    /// What to say (None: the "sent" line stays).
    pub status: Option<String>,
    /// The view after the command.
    pub snapshot: Option<Arc<Snapshot>>,
}

/// Where the console's commands go.
pub trait Control: Send + Sync {
    /// Carries out `order` as `by`. The console does not wait for the
    /// answer: a slow instance never freezes it.
    fn send(&self, order: Dispatch, by: Issuer) -> BoxFuture<'static, CommandReply>;
}

/// Everything the console reads and where it writes.
pub struct Feed {
    /// Snapshots, newest only.
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    /// Events (outcome records feed the chains pane).
    pub events: mpsc::UnboundedReceiver<Event>,
    /// Where commands go.
    pub control: Arc<dyn Control>,
}

impl Feed {
    /// The runner's own, in this process.
    pub fn local(runner: &Arc<Runner>) -> Self {
        Self {
            snapshots: runner.spawn_publisher(super::FRAME, SNAPSHOT_USERS, SNAPSHOT_EVENTS),
            events: runner.events().subscribe(),
            control: runner.clone(),
        }
    }
}

impl Control for Runner {
    fn send(&self, order: Dispatch, by: Issuer) -> BoxFuture<'static, CommandReply> {
        let status = self
            .operations()
            .apply(&order.command, &by)
            .err()
            .map(|e| e.to_string());
        let snapshot = Some(Arc::new(self.snapshot(SNAPSHOT_USERS, SNAPSHOT_EVENTS)));
        Box::pin(std::future::ready(CommandReply { status, snapshot }))
    }
}

/// Sends `order` through `control` and shows its answer: what the console
/// does for a command, waited for (tests; the console itself does not wait).
pub async fn apply(control: &dyn Control, app: &mut App, order: Dispatch) {
    let reply = control.send(order, Issuer::operator(&app.opts.operator)).await;
    app.on_reply(reply);
}

impl App {
    /// Shows a command's answer.
    pub fn on_reply(&mut self, reply: CommandReply) {
        if let Some(s) = reply.status {
            self.status = s;
        }
        if let Some(s) = reply.snapshot {
            self.on_snapshot(s);
        }
    }
}
