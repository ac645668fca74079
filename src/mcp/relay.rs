//! The client side of a client session's own session with a server: it
//! introduces itself as the client did, and passes what the server asks
//! on to that client ([`Link::ask`]; what it tells goes by `ordered.rs`).
//! A ping is answered here; nothing is answered on the client's behalf.

use super::link::{Link, LinkRef};
use rmcp::model::{ClientConfig, ClientResult, ErrorData, ServerNotification, ServerRequest};
use rmcp::service::{NotificationContext, RequestContext, RoleClient, Service};

/// Passes a server's requests and notifications to one client.
pub struct Relay {
    link: LinkRef,
    server: usize,
    info: ClientConfig,
}

impl Relay {
    /// For server `server` of the session `link`, introduced as `info`.
    pub(super) fn new(link: LinkRef, server: usize, info: ClientConfig) -> Self {
        Self { link, server, info }
    }

    fn link(&self) -> Result<std::sync::Arc<Link>, ErrorData> {
        self.link
            .upgrade()
            .ok_or_else(|| ErrorData::internal_error("the client's session has ended", None))
    }
}

impl Service<RoleClient> for Relay {
    async fn handle_request(
        &self,
        request: ServerRequest,
        context: RequestContext<RoleClient>,
    ) -> Result<ClientResult, ErrorData> {
        if let ServerRequest::PingRequest(_) = request {
            return Ok(ClientResult::empty(()));
        }
        self.link()?.ask(self.server, request, context.ct).await
    }

    /// Only a cancellation arrives here (the rest are passed on in order by
    /// `ordered.rs`); rmcp has withdrawn the request it names.
    async fn handle_notification(
        &self,
        _notification: ServerNotification,
        _context: NotificationContext<RoleClient>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }

    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }
}
