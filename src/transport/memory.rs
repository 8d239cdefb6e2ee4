//! An in-memory transport: a session driven by messages instead of a socket, with outgoing
//! frames delivered to a channel. For in-process tests of the protocol core (the seed's
//! "InMemoryTransport": assert on frames without a network).

use crate::session::{Session, Transport};
use crate::shared::Shared;
use crate::worker::{SessionInbox, WorkerEvent};
use actix::prelude::*;
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::mpsc;

/// A text frame from the client.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct ClientFrame(pub String);

pub struct MemorySession {
    core: Session,
    /// Frames the server sends. Unbounded because the test reading them is the only
    /// consumer and the session's own limits bound what it can produce.
    outgoing: mpsc::UnboundedSender<String>,
}

impl MemorySession {
    /// Starts a session on the current arbiter; returns its address and the frames it sends.
    pub fn start(shared: Arc<Shared>) -> (Addr<Self>, mpsc::UnboundedReceiver<String>) {
        let (outgoing, frames) = mpsc::unbounded_channel();
        let core = Session::new(shared, 0);
        (Self { core, outgoing }.start(), frames)
    }
}

struct ChannelTransport<'a> {
    outgoing: &'a mpsc::UnboundedSender<String>,
    address: Addr<MemorySession>,
}

impl Transport for ChannelTransport<'_> {
    fn send_text(&mut self, frame: String) {
        // A closed receiver means the test is done with this session.
        let _ = self.outgoing.send(frame);
    }

    fn worker_events(&self) -> SessionInbox {
        Rc::new(self.address.clone().recipient())
    }
}

impl Actor for MemorySession {
    type Context = Context<Self>;

    fn stopped(&mut self, ctx: &mut Self::Context) {
        let mut tx = ChannelTransport {
            outgoing: &self.outgoing,
            address: ctx.address(),
        };
        self.core.cancel_all(&mut tx);
    }
}

impl Handler<ClientFrame> for MemorySession {
    type Result = ();

    fn handle(&mut self, frame: ClientFrame, ctx: &mut Self::Context) {
        let mut tx = ChannelTransport {
            outgoing: &self.outgoing,
            address: ctx.address(),
        };
        self.core.on_text(&frame.0, &mut tx);
    }
}

impl Handler<WorkerEvent> for MemorySession {
    type Result = ();

    fn handle(&mut self, event: WorkerEvent, ctx: &mut Self::Context) {
        let mut tx = ChannelTransport {
            outgoing: &self.outgoing,
            address: ctx.address(),
        };
        self.core.on_worker_event(event, &mut tx);
    }
}
