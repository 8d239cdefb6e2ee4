//! An in-memory transport: a session driven by messages instead of a socket, with outgoing
//! frames delivered to a channel. For in-process tests of the protocol core (the seed's
//! "InMemoryTransport": assert on frames without a network).

use crate::perimeter::Admission;
use crate::session::shared::Shared;
use crate::session::{InboxPump, Outlet, Route, Session, SessionHost};
use actix::prelude::*;
use std::sync::Arc;
use tokio::sync::mpsc;

/// A text frame from the client.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ClientFrame(pub String);

/// A session hosted by an actor with no socket; see the module docs.
pub struct MemorySession {
    core: Session,
    /// Frames the server sends. Unbounded because the test reading them is the only
    /// consumer and the session's own limits bound what it can produce.
    outgoing: mpsc::UnboundedSender<String>,
}

impl MemorySession {
    /// Starts a session on the current arbiter; returns its address and the frames it sends.
    pub fn start(shared: Arc<Shared>) -> (Addr<Self>, mpsc::UnboundedReceiver<String>) {
        Self::start_as(shared, Admission::anonymous())
    }

    /// Starts a session for a client admitted as `admission` (an identity the perimeter
    /// would have established: tests of what depends on who the client is).
    pub fn start_as(
        shared: Arc<Shared>,
        admission: Admission,
    ) -> (Addr<Self>, mpsc::UnboundedReceiver<String>) {
        let (outgoing, frames) = mpsc::unbounded_channel();
        let core = Session::new(shared, 0, admission);
        (Self { core, outgoing }.start(), frames)
    }
}

impl Outlet for mpsc::UnboundedSender<String> {
    fn send(&mut self, frame: String, _route: Route) {
        // A closed receiver means the test is done with this session.
        let _ = mpsc::UnboundedSender::send(self, frame);
    }
}

impl SessionHost for MemorySession {
    fn drain_inbox(&mut self, _ctx: &mut Self::Context) -> bool {
        self.core.on_inbox(&mut self.outgoing);
        true
    }
}

impl Actor for MemorySession {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.spawn(InboxPump::new(self.core.inbox().clone()));
    }

    fn stopped(&mut self, _ctx: &mut Self::Context) {
        self.core.cancel_all(&mut self.outgoing);
    }
}

impl Handler<ClientFrame> for MemorySession {
    type Result = ();

    fn handle(&mut self, frame: ClientFrame, _ctx: &mut Self::Context) {
        self.core.on_text(&frame.0, 0, &mut self.outgoing);
    }
}
