//! The WebSocket session actor: one per connection and the only writer to its socket.
//!
//! It owns the WebSocket plumbing and nothing of the protocol: text frames (continuations
//! reassembled up to the message limit) go to the [`Session`] core, whose inbox (worker
//! outcomes, progress, client requests, list changes) is drained by an [`InboxPump`] in this
//! actor's context. It also owns the heartbeat, the close codes, and shutdown.
//!
//! Close codes: 1003 binary frames (text only), 1007 a reassembled message that is not
//! UTF-8, 1009 a message over `limits.max_message_bytes`, 1002 a WebSocket protocol error,
//! 1001 server shutdown or heartbeat timeout.

use crate::session::{InboxPump, Outlet, Route, Session, SessionHost};
use crate::shared::{SessionSlot, Shared, Shutdown};
use actix::prelude::*;
use actix_http::ws::Item;
use actix_web_actors::ws::{self, CloseCode, CloseReason, Message as WsMessage, ProtocolError};
use bytes::BytesMut;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The WebSocket session actor; see the module docs.
pub struct WsSession {
    core: Session,
    shared: Arc<Shared>,
    /// Keeps the session counted and registered for shutdown until the actor is gone.
    slot: SessionSlot,
    /// When the heartbeat last saw that the client had sent something.
    last_heard: Instant,
    /// Whether anything (frame or pong) came from the client since the last heartbeat; a
    /// flag rather than a clock read per frame, since heartbeat granularity is enough.
    heard: bool,
    /// A text message arriving in continuation frames, until its last frame.
    fragments: Option<BytesMut>,
    /// Whether a shutdown close is pending until in-flight work finishes.
    closing: bool,
}

impl WsSession {
    /// A session for a connection that holds `slot`.
    pub fn new(shared: Arc<Shared>, slot: SessionSlot) -> Self {
        Self {
            core: Session::new(shared.clone(), slot.id()),
            shared,
            slot,
            last_heard: Instant::now(),
            heard: false,
            fragments: None,
            closing: false,
        }
    }

    fn close(&mut self, ctx: &mut ws::WebsocketContext<Self>, code: CloseCode, description: &str) {
        tracing::debug!(session = self.slot.id(), ?code, description, "closing");
        ctx.close(Some(CloseReason {
            code,
            description: Some(description.to_owned()),
        }));
        ctx.stop();
    }

    fn on_message(&mut self, text: &str, ctx: &mut ws::WebsocketContext<Self>) {
        // One socket: every exchange is answered on it, so they need no numbers.
        self.core.on_text(text, 0, ctx);
        // A cancel may have taken the last request in flight during a drain.
        self.close_if_drained(ctx);
    }

    fn on_fragment(&mut self, item: Item, ctx: &mut ws::WebsocketContext<Self>) {
        let max = self.shared.settings.limits.max_message_bytes;
        let (bytes, last) = match item {
            Item::FirstText(bytes) => {
                self.fragments = Some(BytesMut::new());
                (bytes, false)
            }
            Item::FirstBinary(_) => {
                return self.close(
                    ctx,
                    CloseCode::Unsupported,
                    "binary messages are not supported; send text",
                );
            }
            Item::Continue(bytes) => (bytes, false),
            Item::Last(bytes) => (bytes, true),
        };
        let Some(buffer) = self.fragments.as_mut() else {
            return self.close(
                ctx,
                CloseCode::Protocol,
                "continuation frame without a first frame",
            );
        };
        if buffer.len() + bytes.len() > max {
            self.fragments = None;
            return self.close(ctx, CloseCode::Size, "message too big");
        }
        buffer.extend_from_slice(&bytes);
        if last {
            let Some(message) = self.fragments.take() else {
                return;
            };
            match std::str::from_utf8(&message) {
                Ok(text) => self.on_message(text, ctx),
                Err(_) => self.close(ctx, CloseCode::Invalid, "text message is not valid UTF-8"),
            }
        }
    }

    fn heartbeat(&mut self, ctx: &mut ws::WebsocketContext<Self>) {
        if std::mem::take(&mut self.heard) {
            self.last_heard = Instant::now();
        }
        let timeout = Duration::from_millis(self.shared.settings.heartbeat.client_timeout_ms);
        if self.last_heard.elapsed() > timeout {
            tracing::info!(
                session = self.slot.id(),
                "client silent past the heartbeat timeout; disconnecting"
            );
            return self.close(ctx, CloseCode::Away, "heartbeat timeout");
        }
        ctx.ping(b"");
    }

    /// During shutdown: close once nothing is left in flight.
    fn close_if_drained(&mut self, ctx: &mut ws::WebsocketContext<Self>) {
        if self.closing && !self.core.has_work_in_flight() {
            self.close(ctx, CloseCode::Away, "server shutting down");
        }
    }
}

impl Outlet for ws::WebsocketContext<WsSession> {
    fn send(&mut self, frame: String, _route: Route) {
        self.text(frame);
    }
}

impl SessionHost for WsSession {
    fn drain_inbox(&mut self, ctx: &mut Self::Context) -> bool {
        self.core.on_inbox(ctx);
        // A worker's outcome may have been the last request in flight during a drain.
        self.close_if_drained(ctx);
        true
    }
}

impl Actor for WsSession {
    type Context = ws::WebsocketContext<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.slot.register(ctx.address().recipient());
        ctx.spawn(InboxPump::new(self.core.inbox().clone()));
        let interval = Duration::from_millis(self.shared.settings.heartbeat.interval_ms);
        ctx.run_interval(interval, Self::heartbeat);
        tracing::debug!(session = self.slot.id(), "session opened");
    }

    fn stopped(&mut self, ctx: &mut Self::Context) {
        // A closed connection cancels all its workers, which returns their pool permits.
        self.core.cancel_all(ctx);
        let (client, client_version) = self.core.client_info().unwrap_or(("-", "-"));
        tracing::debug!(
            session = self.slot.id(),
            client,
            client_version,
            "session closed"
        );
    }
}

impl StreamHandler<Result<WsMessage, ProtocolError>> for WsSession {
    fn handle(&mut self, message: Result<WsMessage, ProtocolError>, ctx: &mut Self::Context) {
        self.heard = true;
        match message {
            Ok(WsMessage::Text(text)) => {
                if self.fragments.is_some() {
                    return self.close(
                        ctx,
                        CloseCode::Protocol,
                        "text frame inside a fragmented message",
                    );
                }
                self.on_message(&text, ctx);
            }
            Ok(WsMessage::Binary(_)) => self.close(
                ctx,
                CloseCode::Unsupported,
                "binary messages are not supported; send text",
            ),
            Ok(WsMessage::Continuation(item)) => self.on_fragment(item, ctx),
            Ok(WsMessage::Ping(payload)) => ctx.pong(&payload),
            Ok(WsMessage::Pong(_)) | Ok(WsMessage::Nop) => {}
            Ok(WsMessage::Close(reason)) => {
                ctx.close(reason);
                ctx.stop();
            }
            Err(ProtocolError::Overflow) => self.close(ctx, CloseCode::Size, "message too big"),
            Err(error) => {
                tracing::debug!(session = self.slot.id(), %error, "websocket protocol error");
                self.close(ctx, CloseCode::Protocol, "websocket protocol error");
            }
        }
    }
}

impl Handler<Shutdown> for WsSession {
    type Result = ();

    fn handle(&mut self, shutdown: Shutdown, ctx: &mut Self::Context) {
        if self.closing {
            return;
        }
        self.closing = true;
        self.core.begin_drain();
        self.close_if_drained(ctx);
        ctx.run_later(shutdown.grace, |session, ctx| {
            session.core.cancel_all(ctx);
            session.close(ctx, CloseCode::Away, "server shutting down");
        });
    }
}
