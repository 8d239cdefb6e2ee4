//! The WebSocket session actor: one per connection and the only writer to its socket.
//!
//! It owns the WebSocket plumbing and nothing of the protocol: text messages (read, checked
//! and reassembled by its [`Reader`], within the limits of one message and of all partly
//! received ones) go to the [`Session`] core, whose inbox (worker
//! outcomes, progress, client requests, list changes) is drained by an [`InboxPump`] in this
//! actor's context. It also owns the heartbeat, the close codes, and shutdown.
//!
//! **Resumable sessions.** A session is given an id at `initialize` (in the result's
//! `_meta["mcp-ws/sessionId"]`, and the `Mcp-Session-Id` header of the upgrade). When its
//! socket drops (anything but the client's own close 1000), the session is not ended: its
//! core, with its requests in flight and its inbox, moves into a [`HostedSession`] on this
//! thread, which keeps what the client could not be sent (bounded) for
//! `sessions.resume_grace_ms`. A client that reconnects with the id (the `Mcp-Session-Id`
//! header, or the subprotocol entry `mcp.session.<id>` for browsers) gets the same session,
//! and what it missed, in order; this actor then relays its frames to the hosted session. An
//! older socket still attached to the session is closed (1000, "MCP session reconnected on
//! another connection"). A reconnect may list the ids its client has no answer for
//! (`Mcp-Awaiting-Ids`, see [`super::awaited`]): each one the session neither runs nor kept
//! an answer for is answered -32031. Past the grace, everything is cancelled, as on a
//! disconnect before.
//! With sessions in Redis, the session also keeps a record there
//! ([`super::socket_record`]), so that a client whose node died resumes it on
//! another one.
//!
//! Close codes: 1000 normal or replaced by a reconnect, 1003 binary frames (text only), 1007 a
//! text message that is not UTF-8, 1009 a message over `limits.max_message_bytes` or past the
//! budget of partly received messages (`limits.max_partial_bytes`), 1008 a message not whole
//! within `limits.partial_timeout_ms` or the connection's credential expired, 1002 a
//! WebSocket protocol error, 1001 server shutdown or heartbeat timeout, 1011 a message from
//! the wrong reader (never sent in practice), 4404 the session to resume ended meanwhile (the
//! reader's refusals are [`Refused`]).

use super::awaited::Awaited;
use super::frames::{Inbound, Reader, Refused};
use super::hosted::{
    AttachSocket, Deliver, Detach, DetachSocket, Ending, HandOver, HostedSession,
    NegotiatedVersion, Relayed, SocketHandle, DRAINED_QUIET,
};
use crate::cluster::store::bridge::{self, SessionNote, SessionNoteKind};
use crate::perimeter::{self, Admission, Owner, Refusal};
use crate::protocol::mcp::{Error, ProtocolVersion};
use crate::session::shared::{SessionId, SessionSlot, Shared, Shutdown};
use crate::session::{InboxPump, Outlet, Route, Session, SessionHost};
use crate::transport::directory::Directory;
use crate::transport::hosted::HostedSessions;
use crate::transport::socket_record::{
    self, HoldConfirmed, KeepsRecord, Kept, RecordWritten, RecordsLost, SocketRecord,
};
use actix::prelude::*;
use actix_web::error::PayloadError;
use actix_web::{web, HttpRequest, HttpResponse};
use actix_web_actors::ws::{self, CloseCode, CloseReason, Message as WsMessage, ProtocolError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// The WebSocket subprotocol selected when the client offers it (the official SDKs do).
pub const SUBPROTOCOL: &str = "mcp";

/// An offered subprotocol `mcp.session.<id>` asks to resume session `<id>` (it is never
/// selected, so the id does not come back in the response).
pub const RESUME_SUBPROTOCOL_PREFIX: &str = "mcp.session.";

/// An offered subprotocol `mcp.version.<version>` pins the connection to that protocol
/// version (the WebSocket transport proposal, SEP-1288); it is selected when offered.
pub const VERSION_SUBPROTOCOL_PREFIX: &str = "mcp.version.";

/// Close code for a resume whose session ended before the socket could attach.
const SESSION_GONE: u16 = 4404;

/// How long a shutdown close waits for the client's close frame before the connection is
/// dropped: closing at once could cut a client still reading its last answers.
const CLOSE_REPLY_WAIT: Duration = Duration::from_secs(1);

/// WebSocket sessions with their socket, by the id their client holds.
pub type Sockets = Directory<WsSession>;

/// Delivers the other nodes' notes about sessions (sessions in Redis) to this node's copies
/// ([`hosted::deliver_session_notes`](super::hosted::deliver_session_notes)); a hand-over of
/// a session whose socket is attached here, without a copy, goes to that socket.
pub fn deliver_session_notes(
    hosted: Arc<HostedSessions>,
    sockets: Arc<Sockets>,
) -> bridge::SessionSink {
    let to_copies = super::hosted::deliver_session_notes(hosted.clone());
    Box::new(move |note: SessionNote| {
        if matches!(note.kind, SessionNoteKind::HandOver) && hosted.find_any(&note.id).is_none() {
            if let Some(socket) = sockets.find_any(&note.id) {
                socket.do_send(HandOver);
            }
            return;
        }
        to_copies(note);
    })
}

/// The WebSocket session actor; see the module docs.
pub struct WsSession {
    shared: Arc<Shared>,
    /// Where a reconnecting client finds its session once the socket is gone.
    hosted: Arc<HostedSessions>,
    /// Where a reconnecting client finds its session while this socket holds it.
    sockets: Arc<Sockets>,
    core: Core,
    /// When the heartbeat last saw that the client had sent something.
    last_heard: Instant,
    /// Whether anything (frame or pong) came from the client since the last heartbeat; a
    /// flag rather than a clock read per frame, since heartbeat granularity is enough.
    heard: bool,
    /// Whether a shutdown close is pending until in-flight work finishes.
    closing: bool,
    /// During shutdown: when the client last sent something (the close waits for quiet).
    last_heard_while_closing: Instant,
    /// Whether the shutdown close is armed (waiting for the client to be quiet).
    quiet_close_armed: bool,
    /// Whether the close frame went out: the connection only waits for the client's reply.
    close_sent: bool,
    /// Whether the session ends with the socket rather than waiting for a reconnect, and why.
    ending: Ending,
    /// A resuming connection: what it hands the hosted session when the socket attaches.
    /// Boxed, as the record below: most connections have neither, and every connection's
    /// actor carries the field (see `Session`'s `occasional`).
    resume: Option<Box<Resume>>,
    /// With sessions in Redis (and resumption on), for its own session: the record another
    /// node takes the session up from if this one dies. It goes with the session when the
    /// session is parked.
    record: Option<Box<SocketRecord>>,
}

/// What a resuming connection tells the session it resumes.
struct Resume {
    /// The ids its client says it has no answer for (`Mcp-Awaiting-Ids`), if it said.
    awaiting: Option<Awaited>,
}

/// Where this connection's session is.
// `Local` is the common case and holds the session inline: boxing it would cost every frame an
// indirection to save memory only on the rare relaying sockets.
#[allow(clippy::large_enum_variant)]
enum Core {
    /// In this actor (a connection's own session): frames go straight to the core.
    Local {
        session: Session,
        /// Keeps the session counted and registered for shutdown.
        slot: SessionSlot,
        id: SessionId,
    },
    /// A resumed session, hosted by its own actor: frames are relayed to it.
    Relay(Addr<HostedSession>),
    /// Handed on (to a hosted session, after the socket dropped or was replaced).
    Gone,
}

impl WsSession {
    /// A new session for a connection that holds `slot`, from a client the perimeter
    /// admitted, serving only `pinned` when the client chose a version up front.
    pub fn new(
        shared: Arc<Shared>,
        directory: (Arc<HostedSessions>, Arc<Sockets>),
        slot: SessionSlot,
        admission: Admission,
        pinned: Option<ProtocolVersion>,
    ) -> Self {
        let id = SessionId::generate();
        let mut session = Session::new(shared.clone(), slot.id(), admission);
        if let Some(version) = pinned {
            session.pin_version(version);
        }
        session.set_resume_id(id.clone());
        let record = SocketRecord::new(&shared, &id).map(Box::new);
        Self::with_core(
            shared,
            directory,
            (Core::Local { session, slot, id }, record),
        )
    }

    /// A connection resuming the session hosted by `hosted` (with a credential that covers
    /// the session's: its requests are served with the session's), from a client that awaits
    /// the answers of `awaiting` if it said so.
    pub fn resume(
        shared: Arc<Shared>,
        directory: (Arc<HostedSessions>, Arc<Sockets>),
        hosted: Addr<HostedSession>,
        awaiting: Option<Awaited>,
    ) -> Self {
        let mut socket = Self::with_core(shared, directory, (Core::Relay(hosted), None));
        socket.resume = Some(Box::new(Resume { awaiting }));
        socket
    }

    /// Ends the connection when the credential it was opened with expires (a JWT's `exp`),
    /// through [`credential_expired`](Self::credential_expired). Scheduled as the actor's
    /// context is made, so the actor does not carry the time.
    fn end_at(expires: SystemTime, ctx: &mut ws::WebsocketContext<Self>) {
        let left = expires
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        ctx.run_later(left, |socket, ctx| socket.credential_expired(ctx));
    }

    /// The connection's credential expired: the requests in flight are answered with
    /// -32023, then the connection closes with 1008 and its session ends (a client goes on
    /// with a fresh credential on a new connection).
    fn credential_expired(&mut self, ctx: &mut ws::WebsocketContext<Self>) {
        tracing::debug!(session = %self.log_id(), "closing: the credential expired");
        // A session of this connection ends, its requests answered; a resumed one, hosted
        // elsewhere, waits for a reconnect with a fresh credential, its requests kept for it.
        if let Core::Local { session, .. } = &mut self.core {
            self.ending = Ending::Here;
            session.answer_all_with(&Error::CredentialExpired, ctx);
        }
        self.close(ctx, CloseCode::Policy, "credential expired");
    }

    /// The actor around `core`, with the record of the session when it is its own.
    fn with_core(
        shared: Arc<Shared>,
        (hosted, sockets): (Arc<HostedSessions>, Arc<Sockets>),
        (core, record): (Core, Option<Box<SocketRecord>>),
    ) -> Self {
        Self {
            hosted,
            sockets,
            core,
            last_heard: Instant::now(),
            heard: false,
            closing: false,
            last_heard_while_closing: Instant::now(),
            quiet_close_armed: false,
            close_sent: false,
            ending: Ending::Resumable,
            resume: None,
            record,
            shared,
        }
    }

    /// The session's id, for logs (its `Display` shows a prefix only).
    fn log_id(&self) -> String {
        match &self.core {
            Core::Local { id, .. } => id.to_string(),
            Core::Relay(_) => "relay".into(),
            Core::Gone => "-".into(),
        }
    }

    fn close(&mut self, ctx: &mut ws::WebsocketContext<Self>, code: CloseCode, description: &str) {
        if self.close_sent {
            // The shutdown close went out already: one close frame per connection.
            return ctx.stop();
        }
        tracing::debug!(session = %self.log_id(), ?code, description, "closing");
        ctx.close(Some(CloseReason {
            code,
            description: Some(description.to_owned()),
        }));
        // What is still in the mailbox (a `Detach`, a relayed frame) is handled while the
        // actor stops: nothing follows the close frame (RFC 6455 §5.5.1).
        self.close_sent = true;
        ctx.stop();
    }

    /// Closes as the server shuts down: the close frame, then a wait (bounded) for the
    /// client's own close frame before the connection is dropped.
    fn close_for_shutdown(&mut self, ctx: &mut ws::WebsocketContext<Self>) {
        if self.close_sent {
            return;
        }
        tracing::debug!(session = %self.log_id(), "closing: server shutting down");
        self.close_sent = true;
        ctx.close(Some(CloseReason {
            code: CloseCode::Away,
            description: Some("server shutting down".to_owned()),
        }));
        ctx.run_later(CLOSE_REPLY_WAIT, |_, ctx| ctx.stop());
    }

    fn on_message(&mut self, text: &str, ctx: &mut ws::WebsocketContext<Self>) {
        if self.close_sent {
            // After our close frame, nothing more is taken (RFC 6455 §5.5.1).
            return;
        }
        if self.closing {
            self.last_heard_while_closing = Instant::now();
        }
        match &mut self.core {
            Core::Local { session, .. } => {
                // One socket: every exchange is answered on it, so they need no numbers.
                session.on_text(text, 0, ctx);
                socket_record::keep(self, ctx);
                // A cancel may have taken the last request in flight during a drain.
                self.close_if_drained(ctx);
            }
            Core::Relay(hosted) => {
                // Waiting for the hosted session to take the frame before reading the next
                // one: a client cannot pile frames up between the two actors.
                let relayed = hosted.send(Relayed(text.to_owned()));
                ctx.wait(relayed.into_actor(self).map(|result, session, ctx| {
                    if result.is_err() {
                        session.close(ctx, CloseCode::Other(SESSION_GONE), "session ended");
                    }
                }));
            }
            Core::Gone => {}
        }
    }

    /// Closes the connection for what its reader refused, counted by reason.
    fn refuse(&mut self, refused: Refused, ctx: &mut ws::WebsocketContext<Self>) {
        if let Refused::Protocol(error) = &refused {
            tracing::debug!(session = %self.log_id(), %error, "websocket protocol error");
        }
        if let Some(counter) = refused.rejection(&self.shared.metrics.rejections) {
            counter.inc();
        }
        self.close(ctx, refused.close_code(), refused.description());
    }

    fn heartbeat(&mut self, ctx: &mut ws::WebsocketContext<Self>) {
        if std::mem::take(&mut self.heard) {
            self.last_heard = Instant::now();
        }
        let timeout = Duration::from_millis(self.shared.settings.heartbeat.client_timeout_ms);
        if self.last_heard.elapsed() > timeout {
            tracing::info!(
                session = %self.log_id(),
                "client silent past the heartbeat timeout; disconnecting"
            );
            return self.close(ctx, CloseCode::Away, "heartbeat timeout");
        }
        ctx.ping(b"");
    }

    /// During shutdown: close once nothing is left in flight and the client has been quiet
    /// for [`DRAINED_QUIET`] (the grace's end closes in any case).
    fn close_if_drained(&mut self, ctx: &mut ws::WebsocketContext<Self>) {
        let Core::Local { session, .. } = &self.core else {
            return;
        };
        if !self.closing || session.has_work_in_flight() || self.quiet_close_armed {
            return;
        }
        self.quiet_close_armed = true;
        ctx.run_later(DRAINED_QUIET, |socket, ctx| socket.close_when_quiet(ctx));
    }

    fn close_when_quiet(&mut self, ctx: &mut ws::WebsocketContext<Self>) {
        let busy =
            matches!(&self.core, Core::Local { session, .. } if session.has_work_in_flight());
        let quiet_for = self.last_heard_while_closing.elapsed();
        if busy {
            // A cheap request came in and is still being answered: look again when it is.
            self.quiet_close_armed = false;
        } else if quiet_for >= DRAINED_QUIET {
            self.close_for_shutdown(ctx);
        } else {
            ctx.run_later(DRAINED_QUIET - quiet_for, |socket, ctx| {
                socket.close_when_quiet(ctx)
            });
        }
    }

    /// Hands a local session to a [`HostedSession`] on this thread, which keeps it for a
    /// reconnect; returns its address. `None` when the session ends with the socket (its
    /// client closed it, or the server is shutting down) or is not worth keeping (never
    /// initialized, resume disabled): it then ends here.
    fn park(&mut self, ctx: &mut ws::WebsocketContext<Self>) -> Option<Addr<HostedSession>> {
        let Core::Local { session, slot, id } = std::mem::replace(&mut self.core, Core::Gone)
        else {
            return None;
        };
        let grace = Duration::from_millis(self.shared.settings.sessions.resume_grace_ms);
        if self.ending != Ending::Resumable
            || !session.is_initialized()
            || grace.is_zero()
            || self.shared.is_draining()
        {
            self.sockets.forget(&id, &ctx.address());
            let mut session = session;
            if let Some(record) = self.record.take() {
                // Before the cancel: during a shutdown, what runs here is listed for the
                // node the client may resume the session on (unless the client ended it).
                record.end(&session, false, self.ending == Ending::ByClient, Vec::new);
            }
            // A closed connection cancels all its workers, which returns their pool permits.
            session.cancel_all(ctx);
            return None;
        }
        // What 2026-07-28 requests started is not kept: that revision has no resumption.
        let mut session = session;
        session.end_stateless_requests(ctx);
        tracing::debug!(session = %id, "socket gone; session kept for a reconnect");
        let owner = session.owner();
        let hosted = HostedSession::park(
            self.shared.clone(),
            self.hosted.clone(),
            slot,
            id.clone(),
            session,
            self.record.take().map(|record| *record),
        );
        // Remembered as parked before it is forgotten as this socket's: a resume on this node
        // meanwhile finds it one way or the other, never neither (then it would take the
        // session up again from its record, a second copy).
        self.hosted.remember(id.clone(), hosted.clone(), owner);
        self.sockets.forget(&id, &ctx.address());
        Some(hosted)
    }
}

impl Outlet for ws::WebsocketContext<WsSession> {
    fn send(&mut self, frame: String, _route: Route) {
        // The frame's buffer is handed over, not copied; `bytes` allocates the shared header
        // it keeps a `String`'s buffer under (one allocation per frame).
        self.text(frame);
    }
}

impl SessionHost for WsSession {
    fn drain_inbox(&mut self, ctx: &mut Self::Context) -> bool {
        let Core::Local { session, .. } = &mut self.core else {
            return false;
        };
        // With a record in Redis, after this node may have been taken for dead: the inbox
        // waits until Redis says the session is still this node's (`HoldConfirmed`).
        if let Some(record) = &mut self.record {
            if !socket_record::confirm_held::<Self>(record, ctx) {
                return true;
            }
        }
        session.on_inbox(ctx);
        socket_record::keep(self, ctx);
        // A worker's outcome may have been the last request in flight during a drain.
        self.close_if_drained(ctx);
        true
    }
}

impl Actor for WsSession {
    type Context = ws::WebsocketContext<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        match &mut self.core {
            Core::Local { session, slot, id } => {
                slot.register(ctx.address().recipient());
                self.sockets
                    .remember(id.clone(), ctx.address(), session.owner());
                ctx.spawn(InboxPump::new(session.inbox().clone()));
                if let Some(record) = &self.record {
                    ctx.run_interval(record.refresh_every(), socket_record::keep);
                }
            }
            Core::Relay(hosted) => {
                // What the hosted session may hand this socket before it writes any: all that
                // an attach delivers at once (what was missed, the answers lost) and one drain
                // of the session's inbox. More unwritten (its client stopped reading) ends the
                // session, as missing more than a reconnect can be given does.
                let limits = &self.shared.settings.limits;
                ctx.set_mailbox_capacity(
                    self.shared.settings.sessions.resume_buffer_messages
                        + super::awaited::MAX_IDS
                        + limits.max_queued_notifications
                        + limits.max_in_flight_per_session,
                );
                let resume = self.resume.take().map(|resume| *resume);
                let awaiting = resume.and_then(|r| r.awaiting);
                let attach = hosted.send(AttachSocket {
                    socket: SocketHandle::of(&ctx.address()),
                    awaiting,
                });
                ctx.wait(attach.into_actor(self).map(|attached, session, ctx| {
                    if !matches!(attached, Ok(true)) {
                        session.core = Core::Gone;
                        session.close(ctx, CloseCode::Other(SESSION_GONE), "session ended");
                    }
                }));
            }
            Core::Gone => {}
        }
        // The first beat at a random point of the interval's second half, then every
        // interval. Sessions opened together (a burst of reconnects after a restart) would
        // otherwise be pinged together every interval for as long as they live: thousands of
        // writes in one turn of the event loop, which every other session on it waits out.
        let interval = Duration::from_millis(self.shared.settings.heartbeat.interval_ms);
        let first = interval.mul_f64(0.5 + rand::random::<f64>() / 2.0);
        ctx.run_later(first, move |socket, ctx| {
            ctx.run_interval(interval, Self::heartbeat);
            socket.heartbeat(ctx);
        });
        tracing::debug!(session = %self.log_id(), "socket opened");
    }

    fn stopped(&mut self, ctx: &mut Self::Context) {
        match &self.core {
            Core::Local { .. } => {
                self.park(ctx);
            }
            Core::Relay(hosted) => hosted.do_send(DetachSocket {
                socket: SocketHandle::of(&ctx.address()),
                ending: self.ending,
            }),
            Core::Gone => {}
        }
        tracing::debug!("socket closed");
    }
}

impl StreamHandler<Result<Inbound, Refused>> for WsSession {
    fn handle(&mut self, inbound: Result<Inbound, Refused>, ctx: &mut Self::Context) {
        self.heard = true;
        match inbound {
            Ok(Inbound::Text(text)) => self.on_message(&text, ctx),
            Ok(Inbound::Binary) => self.close(
                ctx,
                CloseCode::Unsupported,
                "binary messages are not supported; send text",
            ),
            Ok(Inbound::Ping(payload)) => ctx.pong(&payload),
            Ok(Inbound::Fragment | Inbound::Pong) => {}
            Ok(Inbound::Close(reason)) => {
                if self.close_sent {
                    // The reply to our shutdown close: the handshake is complete.
                    return ctx.stop();
                }
                // A client that closes normally (1000, or no code: a browser's `close()`)
                // is done with its session, even while the server shuts down; any other
                // close (going away, an error) may be followed by a reconnect.
                if reason.as_ref().is_none_or(|r| r.code == CloseCode::Normal) {
                    self.ending = Ending::ByClient;
                }
                ctx.close(reason);
                ctx.stop();
            }
            Err(refused) => self.refuse(refused, ctx),
        }
    }
}

/// What actix's own reader would deliver: `upgrade` gives it a stream that never yields (the
/// socket is read by a [`Reader`]), and actix requires the handler all the same.
impl StreamHandler<Result<WsMessage, ProtocolError>> for WsSession {
    fn handle(&mut self, _message: Result<WsMessage, ProtocolError>, ctx: &mut Self::Context) {
        self.close(ctx, CloseCode::Error, "unexpected reader");
    }
}

impl Handler<Shutdown> for WsSession {
    type Result = ();

    fn handle(&mut self, shutdown: Shutdown, ctx: &mut Self::Context) {
        if self.closing {
            return;
        }
        self.closing = true;
        self.ending = Ending::Here;
        if let Core::Local { session, .. } = &mut self.core {
            session.begin_drain(ctx);
        }
        self.last_heard_while_closing = Instant::now();
        self.close_if_drained(ctx);
        ctx.run_later(shutdown.grace, |session, ctx| {
            if let Core::Local { session: core, .. } = &mut session.core {
                // Every request the session took gets its answer before the close.
                core.answer_all_with(&Error::ShuttingDown, ctx);
            }
            session.close_for_shutdown(ctx);
        });
    }
}

/// A frame of a relayed session, for this socket.
impl Handler<Deliver> for WsSession {
    type Result = ();

    fn handle(&mut self, deliver: Deliver, ctx: &mut Self::Context) {
        if !self.close_sent {
            ctx.text(deliver.0);
        }
    }
}

impl KeepsRecord for WsSession {
    fn record_and_session(&mut self) -> Option<Kept<'_>> {
        match (&mut self.record, &self.core) {
            (Some(record), Core::Local { session, .. }) => Some(Kept {
                record,
                session,
                parked: false,
            }),
            _ => None,
        }
    }

    fn taken_up_elsewhere(&mut self, ctx: &mut Self::Context) {
        self.record = None;
        // Not parked: no reconnect may find this copy.
        self.ending = Ending::Here;
        <Self as Handler<Detach>>::handle(self, Detach::RECONNECTED, ctx);
    }
}

/// Redis said whether this node still holds the session, after it may have been taken for
/// dead: the inbox is drained now, or the copy here ends, unanswered (the node that took the
/// session up answered its requests).
impl Handler<HoldConfirmed> for WsSession {
    type Result = ();

    fn handle(&mut self, done: HoldConfirmed, ctx: &mut Self::Context) {
        socket_record::hold_confirmed(self, &done, ctx);
    }
}

/// Redis lost this session's record: written again now, so that a resume on another node
/// finds the session.
impl Handler<RecordsLost> for WsSession {
    type Result = ();

    fn handle(&mut self, RecordsLost(owed): RecordsLost, ctx: &mut Self::Context) {
        socket_record::rewrite_lost(self, owed, ctx);
    }
}

/// A write of the session's record is done: a change made meanwhile is written now.
impl Handler<RecordWritten> for WsSession {
    type Result = ();

    fn handle(&mut self, done: RecordWritten, ctx: &mut Self::Context) {
        socket_record::written(self, ctx, done);
    }
}

/// The session wants this socket gone: another one resumed it, its session ended, or the
/// server is shutting down.
/// The client resumed this socket's session on another node (sessions in Redis): the
/// socket is let go, as when a client reconnects on this node (it is the older connection:
/// half-open, or one its client gave up on), and the session, parked, is handed over.
impl Handler<HandOver> for WsSession {
    type Result = ();

    fn handle(&mut self, _: HandOver, ctx: &mut Self::Context) {
        if let Some(hosted) = <Self as Handler<Detach>>::handle(self, Detach::RECONNECTED, ctx) {
            hosted.do_send(HandOver);
        }
    }
}

impl Handler<NegotiatedVersion> for WsSession {
    type Result = ResponseFuture<Option<ProtocolVersion>>;

    /// Its session's version: the core's own, or that of the hosted session it relays to.
    fn handle(&mut self, ask: NegotiatedVersion, _ctx: &mut Self::Context) -> Self::Result {
        let version = match &self.core {
            Core::Local { session, .. } => session.negotiated_version(),
            Core::Relay(hosted) => {
                let hosted = hosted.clone();
                return Box::pin(async move { hosted.send(ask).await.ok().flatten() });
            }
            Core::Gone => None,
        };
        Box::pin(std::future::ready(version))
    }
}

impl Handler<Detach> for WsSession {
    type Result = Option<Addr<HostedSession>>;

    fn handle(&mut self, detach: Detach, ctx: &mut Self::Context) -> Self::Result {
        let hosted = match &self.core {
            Core::Local { .. } => self.park(ctx),
            Core::Relay(hosted) => Some(hosted.clone()),
            Core::Gone => None,
        };
        self.core = Core::Gone;
        self.close(ctx, detach.code, detach.reason);
        hosted
    }
}

/// `GET /mcp` asking for a WebSocket: the perimeter's checks, then a new session (or the
/// resumed one the client names) on the upgraded connection.
///
/// # Errors
/// The perimeter's refusal, or the handshake's.
pub async fn upgrade(
    req: HttpRequest,
    stream: web::Payload,
    shared: web::Data<Shared>,
    hosted: web::Data<HostedSessions>,
    sockets: web::Data<Sockets>,
) -> Result<HttpResponse, actix_web::Error> {
    let shared = shared.into_inner();
    let directory = (hosted.into_inner(), sockets.into_inner());
    let admission = perimeter::admit(&shared.perimeter, &req)?;
    let pinned = pinned_version(&req)?;
    let expires = admission.expires;
    // The handshake is checked before a session is touched: a resume that then failed it
    // (no `Sec-WebSocket-Key`) would have let go of the client's live socket, or claimed its
    // record and made a copy no socket ever attaches to.
    // The selected subprotocol must be one the client offered: the version it pinned, else
    // plain `mcp`; never its `mcp.auth.<token>` or `mcp.session.<id>` (secrets). (actix
    // takes the first offer the list holds, so a pin is the list's only entry.)
    let version_protocol = pinned.map(|v| format!("{VERSION_SUBPROTOCOL_PREFIX}{v}"));
    let protocols = [version_protocol.as_deref().unwrap_or(SUBPROTOCOL)];
    if let Some(refused) = refuse_handshake(req.headers()) {
        return Err(refused.into());
    }
    let mut response = ws::handshake_with_protocols(&req, &protocols)?;
    let limits = &shared.settings.limits;
    let reader = Reader::new(
        stream,
        limits.max_message_bytes,
        shared
            .perimeter
            .partial
            .reservation(admission.peer.map(perimeter::connections::client_key)),
        Duration::from_millis(limits.partial_timeout_ms),
    );
    let session = match resumed_session_id(&req) {
        // A resumed session keeps what it negotiated; a version offer is checked against it.
        Some(id) => {
            // A node shutting down resumes nothing: a socket still attached here is drained
            // (its requests answered before its close), and a parked copy is ended, or
            // handed over to the node the client resumes on next (sessions in Redis).
            if shared.is_draining() {
                return Err(Refusal::ShuttingDown.into());
            }
            let awaiting = Awaited::of(&req)?;
            let owner = Owner::of(&admission);
            let hosted = match claim_session(&directory, &id, &owner, pinned).await {
                Err(Refusal::SessionNotFound) if shared.settings.sessions_in_redis() => {
                    take_up(&shared, &directory.0, &id, &admission, pinned).await?
                }
                claimed => claimed?,
            };
            WsSession::resume(shared.clone(), directory, hosted, awaiting)
        }
        None => {
            let slot = shared.open_new_session(&admission)?;
            WsSession::new(shared, directory, slot, admission, pinned)
        }
    };
    // actix's reader is given a stream that never yields: this one reads the socket.
    let never = futures_util::stream::pending::<Result<bytes::Bytes, PayloadError>>();
    let stream = ws::WebsocketContext::with_factory(never, move |ctx| {
        ctx.add_stream(reader);
        if let Some(expires) = expires {
            WsSession::end_at(expires, ctx);
        }
        session
    });
    Ok(response.streaming(stream))
}

/// The protocol version the upgrade pins with an `mcp.version.<version>` offer: the first
/// offered one this server speaks.
///
/// # Errors
/// HTTP 400 (with the supported versions) when versions are offered and none is spoken.
fn pinned_version(req: &HttpRequest) -> Result<Option<ProtocolVersion>, Refusal> {
    let mut offered = perimeter::offered_subprotocols(req.headers())
        .filter_map(|offer| offer.strip_prefix(VERSION_SUBPROTOCOL_PREFIX))
        .peekable();
    let Some(first) = offered.peek().map(|v| (*v).to_owned()) else {
        return Ok(None);
    };
    offered
        .find_map(ProtocolVersion::parse)
        .map(Some)
        .ok_or_else(|| Refusal::UnsupportedProtocolVersion(first.chars().take(64).collect()))
}

/// The session a WebSocket upgrade asks to resume: the `Mcp-Session-Id` header, or (browsers
/// cannot set headers) an `mcp.session.<id>` entry among the offered subprotocols.
fn resumed_session_id(req: &HttpRequest) -> Option<String> {
    let headers = req.headers();
    if let Some(id) = headers
        .get(&crate::transport::http::SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        return Some(id.to_owned());
    }
    perimeter::offered_subprotocols(headers)
        .find_map(|offer| offer.strip_prefix(RESUME_SUBPROTOCOL_PREFIX))
        .map(str::to_owned)
}

/// A WebSocket session another node began (sessions in Redis), taken up from its record to
/// be resumed here: its requests that were in flight there are answered -32031 (the node was
/// lost) as soon as the socket attaches.
///
/// The record is first claimed in Redis, in one step with the read it was released by
/// ([`claim_record`]): of two nodes that resume the same session at once (two reconnects of
/// a client, each to another node), one takes it up, and the other's resume gets 503 (a
/// retry of it then has the session handed over, as any later reconnect would).
///
/// # Errors
/// [`Refusal::SessionNotFound`] when there is no such session of the client's;
/// [`Refusal::SessionStoreUnavailable`] when Redis cannot be asked;
/// [`Refusal::SessionHeldElsewhere`] when another node holds it, or claimed it first;
/// as [`Shared::open_session`] when this node cannot host another session.
async fn take_up(
    shared: &Arc<Shared>,
    hosted: &Arc<HostedSessions>,
    id: &str,
    admission: &Admission,
    pinned: Option<ProtocolVersion>,
) -> Result<Addr<HostedSession>, Refusal> {
    let stored = released_record(shared, id, admission, pinned).await?;
    let (record, read) = (&stored.record, &stored.read);
    // The session's own admission: the client's identity, with what the session was opened
    // with (which the client's credential covers).
    let session_admission = &stored.admission;
    let requester = Owner::of(admission);
    // The copy's slot before the claim: a node that cannot host the session (at its cap,
    // or shutting down) refuses without claiming it, so that the claim is never left
    // standing when its give-back fails (other nodes would refuse the session until the
    // record's time to live ended).
    let slot = shared.open_session(session_admission)?;
    let Some(claimed) = claim_record(shared, id, record, read).await? else {
        // Claimed first by another upgrade: on this node (a client that retried its upgrade)
        // its copy is here to resume; on another, 503, and a retry asks that node for it.
        return hosted
            .find(id, &requester)
            .ok_or(Refusal::SessionHeldElsewhere);
    };
    // Another upgrade of the same session on this node may have made its copy meanwhile:
    // one copy, whose in-flight requests are answered once.
    let owner = Owner::of(session_admission);
    let taken = hosted
        .find_or_make(SessionId::from_client(id), &requester, &owner, |id| {
            HostedSession::take_up_socket(
                shared.clone(),
                hosted.clone(),
                slot,
                id.clone(),
                session_admission.clone(),
                record,
            )
        })
        .ok_or(Refusal::SessionNotFound);
    if taken.is_err() {
        // No copy was made here (its record cannot be restored): the record is given back
        // as it was, or no node would take the session up while this one lives.
        if let Some(redis) = shared.cluster.store.redis() {
            redis
                .swap_session(&shared.metrics, id, &claimed, read)
                .await;
        }
    }
    taken
}

/// Claims a released record (`read`, as Redis held it) for this node: the record naming
/// this node replaces it if it is unchanged since it was read. Returns what it wrote, or
/// `None` when the record had changed (another node claimed it, or its holder wrote).
///
/// # Errors
/// [`Refusal::SessionStoreUnavailable`] when Redis cannot be asked.
async fn claim_record(
    shared: &Shared,
    id: &str,
    record: &crate::session::record::SessionRecord,
    read: &str,
) -> Result<Option<String>, Refusal> {
    let redis = shared
        .cluster
        .store
        .redis()
        .ok_or(Refusal::SessionStoreUnavailable)?;
    let mut claimed = record.clone();
    claimed.node = Some(shared.cluster.node_number());
    let claimed = serde_json::to_string(&claimed).map_err(|_| Refusal::SessionNotFound)?;
    match redis
        .swap_session(&shared.metrics, id, read, &claimed)
        .await
    {
        Some(true) => Ok(Some(claimed)),
        Some(false) => Ok(None),
        None => Err(Refusal::SessionStoreUnavailable),
    }
}

/// How long a resume waits for the node that holds its session to hand it over.
const HAND_OVER_WAIT: Duration = Duration::from_secs(1);

/// The record of WebSocket session `id` once no live node holds it, with its JSON as read:
/// at once when none does (or the one named is dead); else that node is asked to hand it
/// over (it does, letting go of a socket still attached there: the client reconnected
/// here), and the record is read again until it did, for [`HAND_OVER_WAIT`]. Taken up while
/// another node holds it, its requests running there would be answered -32031 here while
/// that node still runs them.
///
/// # Errors
/// As [`fetch_record`](crate::transport::http::fetch_record), and
/// [`Refusal::SessionHeldElsewhere`] when the node holding it did not hand it over in time
/// (dead: its heartbeat ends within seconds, and a retry takes the session up; or shutting
/// down).
async fn released_record(
    shared: &Arc<Shared>,
    id: &str,
    admission: &Admission,
    pinned: Option<ProtocolVersion>,
) -> Result<crate::transport::http::StoredSession, Refusal> {
    let deadline = tokio::time::Instant::now() + HAND_OVER_WAIT;
    // Asked again every 100 ms: the holder hands over a parked copy only, and may notice its
    // socket gone a moment after the client reconnected here.
    let mut next_ask = tokio::time::Instant::now();
    loop {
        let stored = crate::transport::http::fetch_record(id, admission, shared, true).await?;
        // Before its holder is asked to let go of it.
        check_pin(pinned, ProtocolVersion::parse(&stored.record.version))?;
        let Some(holder) = stored
            .record
            .node
            .filter(|node| *node != shared.cluster.node_number())
        else {
            return Ok(stored);
        };
        if shared.cluster.store.redis().is_none() {
            return Err(Refusal::SessionStoreUnavailable);
        }
        // Not known (Redis did not answer), or this node unfit to judge: as alive.
        if shared.cluster.found_dead(holder).await {
            return Ok(stored);
        }
        if tokio::time::Instant::now() >= next_ask {
            next_ask += Duration::from_millis(100);
            let note = SessionNote {
                id: id.to_owned(),
                kind: SessionNoteKind::HandOver,
            };
            bridge::send_session_note(&shared.cluster, note).await;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Refusal::SessionHeldElsewhere);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What RFC 6455 (§4.2.1, §4.4) requires of a handshake beyond what actix checks (it also
/// takes versions 7 and 8, and any key): version 13, else 426 naming it; a key that is 16
/// bytes in base64, else 400. `None` for a handshake that passes, or is not one (actix's
/// check answers that).
fn refuse_handshake(headers: &actix_web::http::header::HeaderMap) -> Option<Refusal> {
    use actix_web::http::header::{SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_VERSION};
    let version = headers.get(SEC_WEBSOCKET_VERSION)?;
    if version.as_bytes() != b"13" {
        return Some(Refusal::WebSocketVersion);
    }
    let key = headers.get(SEC_WEBSOCKET_KEY)?;
    let sixteen = data_encoding::BASE64
        .decode(key.as_bytes())
        .is_ok_and(|key| key.len() == 16);
    (!sixteen).then_some(Refusal::BadWebSocketKey)
}

/// A resume's version pin against the version its session negotiated (`None` before its
/// `initialize`): the session keeps its version, and a pin for another would be echoed by
/// the handshake and not honoured. Checked before the session is touched (attack run 58,
/// F1: checked after, a refused resume had closed the socket attached, or taken the session
/// over from another node, losing what ran there).
///
/// # Errors
/// [`Refusal::ResumeVersionMismatch`] (HTTP 400), naming the session's version.
fn check_pin(
    pinned: Option<ProtocolVersion>,
    negotiated: Option<ProtocolVersion>,
) -> Result<(), Refusal> {
    match (pinned, negotiated) {
        (Some(pin), Some(version)) if pin != version => {
            Err(Refusal::ResumeVersionMismatch(version.as_str()))
        }
        _ => Ok(()),
    }
}

/// The hosted session to resume: one waiting for a reconnect, or one whose (older) socket is
/// still attached, which is told to let go of it, once the resume's version pin matches the
/// session's ([`check_pin`]). Only its owner may resume it.
async fn claim_session(
    (hosted, sockets): &(Arc<HostedSessions>, Arc<Sockets>),
    id: &str,
    owner: &Owner,
    pinned: Option<ProtocolVersion>,
) -> Result<Addr<HostedSession>, Refusal> {
    if let Some(hosted) = hosted.find(id, owner) {
        if pinned.is_some() {
            check_pin(pinned, hosted.send(NegotiatedVersion).await.ok().flatten())?;
        }
        return Ok(hosted);
    }
    let socket = sockets.find(id, owner).ok_or(Refusal::SessionNotFound)?;
    // Bounded, as the detach below: a stalled socket does not answer.
    if pinned.is_some() {
        match tokio::time::timeout(HAND_OVER_WAIT, socket.send(NegotiatedVersion)).await {
            Ok(negotiated) => check_pin(pinned, negotiated.ok().flatten())?,
            Err(_) => return Err(Refusal::SessionHeldByStalledSocket),
        }
    }
    // Bounded: a socket whose client stopped reading no longer runs (its writes blocked),
    // and would never answer.
    match tokio::time::timeout(HAND_OVER_WAIT, socket.send(Detach::RECONNECTED)).await {
        // The socket had let go already: parked for an earlier resume that gave up waiting
        // (the socket stalled, then its connection closed), or as it closed by itself.
        Ok(Ok(None) | Err(_)) => hosted.find(id, owner).ok_or(Refusal::SessionNotFound),
        Ok(Ok(Some(hosted))) => Ok(hosted),
        Err(_) => Err(Refusal::SessionHeldByStalledSocket),
    }
}
