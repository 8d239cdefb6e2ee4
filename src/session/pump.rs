//! Runs a session's inbox inside the actor that hosts the session: an actor future that, each
//! time it is woken, lets the host hand the inbox's contents to its session core.
//!
//! It sits in the host's context beside the host's other streams (a WebSocket's frames), so
//! a worker that finishes while its frame is being handled is answered in the same poll of
//! the actor, without a message of its own.

use crate::mailbox::inbox::Inbox;
use actix::fut::ActorFuture;
use actix::Actor;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

/// An actor that hosts a session core.
pub trait SessionHost: Actor {
    /// Hands whatever waits in the inbox to the session core. Returns `false` once the host
    /// no longer holds the session (the pump then ends).
    fn drain_inbox(&mut self, ctx: &mut Self::Context) -> bool;
}

/// The actor future that drains a session's inbox; spawn it in the host's context.
pub struct InboxPump {
    inbox: Rc<Inbox>,
}

impl InboxPump {
    /// A pump for `inbox`.
    pub fn new(inbox: Rc<Inbox>) -> Self {
        Self { inbox }
    }
}

impl<A: SessionHost> ActorFuture<A> for InboxPump {
    type Output = ();

    fn poll(
        self: Pin<&mut Self>,
        act: &mut A,
        ctx: &mut A::Context,
        task: &mut Context<'_>,
    ) -> Poll<()> {
        // Registered first: whatever is posted after the drain below wakes us again.
        self.inbox.register(task.waker());
        if act.drain_inbox(ctx) {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }
}
