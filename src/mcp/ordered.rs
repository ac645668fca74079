//! What a server tells a client (progress, log messages, resource updates,
//! list changes) passed on in the order the server sent it, and before the
//! answer it preceded: rmcp hands each notification to a task of its own
//! and an answer straight to its waiter, so progress could arrive out of
//! order, after the answer, or be dropped with the request's token. The
//! server's session is read through a [`Tap`] that queues its notifications
//! (one task passes them on, in order) and marks, at each answer, how many
//! came before it; the answer is passed on once those have been
//! ([`NoticeOrder::settled`]).

use ahash::AHashMap as HashMap;
use parking_lot::Mutex;
use rmcp::model::{JsonRpcMessage, RequestId, ServerNotification};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How the notifications of one server session stand.
pub struct NoticeOrder {
    /// Queued so far.
    queued: Mutex<u64>,
    /// At each answer not yet settled: how many had been queued.
    marks: Mutex<HashMap<RequestId, u64>>,
    /// Passed on (or given up on) so far.
    passed: watch::Sender<u64>,
}

impl NoticeOrder {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            queued: Mutex::new(0),
            marks: Mutex::default(),
            passed: watch::Sender::new(0),
        })
    }

    /// One more notification is passed on (or given up on).
    pub fn passed_one(&self) {
        self.passed.send_modify(|p| *p += 1);
    }

    /// Waits, up to `bound`, until what the server told before its answer
    /// to `id` has been passed on.
    pub async fn settled(&self, id: &RequestId, bound: Duration) {
        let Some(mark) = self.marks.lock().remove(id) else {
            return;
        };
        let mut passed = self.passed.subscribe();
        let _ = tokio::time::timeout(bound, passed.wait_for(|&p| p >= mark)).await;
    }

    fn mark(&self, id: RequestId) {
        let queued = *self.queued.lock();
        // All told before it has been passed on: the answer need not wait.
        if *self.passed.borrow() >= queued {
            return;
        }
        let mut marks = self.marks.lock();
        // Bounded by the requests in flight; an answer nobody settles (its
        // waiter gone) is forgotten with the next one past the bound.
        if marks.len() >= MAX_MARKS {
            marks.clear();
        }
        marks.insert(id, queued);
    }
}

/// Answers whose marks are kept at once, at most.
const MAX_MARKS: usize = 1024;

/// A server session's transport, its notifications queued in order (all
/// but cancellation, which rmcp needs to withdraw a request).
pub struct Tap<T> {
    inner: T,
    order: Arc<NoticeOrder>,
    queue: mpsc::Sender<ServerNotification>,
}

impl<T> Tap<T> {
    /// `inner` tapped, at most `capacity` notifications queued (past it
    /// one is dropped, and logged): the order, and the queue to pass on.
    pub fn new(inner: T, capacity: usize) -> (Self, Arc<NoticeOrder>, mpsc::Receiver<ServerNotification>) {
        let (queue, rx) = mpsc::channel(capacity.max(1));
        let order = NoticeOrder::new();
        (
            Self {
                inner,
                order: order.clone(),
                queue,
            },
            order,
            rx,
        )
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Tap<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message = self.inner.receive().await?;
            match message {
                JsonRpcMessage::Notification(n)
                    if !matches!(n.notification, ServerNotification::CancelledNotification(_)) =>
                {
                    // Counted under the lock a mark reads, so a mark never
                    // counts one not yet queued.
                    let mut queued = self.order.queued.lock();
                    match self.queue.try_send(n.notification) {
                        Ok(()) => *queued += 1,
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            tracing::warn!("an MCP client reads too slowly: a notification of its server was dropped")
                        }
                        // Nobody passes them on (the catalog's session).
                        Err(mpsc::error::TrySendError::Closed(_)) => {}
                    }
                }
                JsonRpcMessage::Response(ref r) => {
                    self.order.mark(r.id.clone());
                    return Some(message);
                }
                JsonRpcMessage::Error(ref e) => {
                    if let Some(id) = e.id.clone() {
                        self.order.mark(id);
                    }
                    return Some(message);
                }
                other => return Some(other),
            }
        }
    }

    fn close(&mut self) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
