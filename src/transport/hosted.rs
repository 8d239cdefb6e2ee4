//! A session core hosted by an actor of its own, for sessions that outlive any one connection:
//!
//! - Streamable HTTP sessions, whose messages arrive as separate POSTs and leave on several
//!   SSE streams. The [`HttpOutlet`] routes each frame the core sends by its [`Route`]: the
//!   answer of a POST goes back as that POST's JSON body if nothing came before it, and
//!   otherwise everything of that exchange goes on the POST's SSE stream; messages of the
//!   session as a whole go on the `GET` stream. Every streamed event is also logged, so a
//!   dropped stream can be resumed with `Last-Event-ID`; a dropped stream never cancels its
//!   request (`notifications/cancelled` does).
//! - WebSocket sessions whose socket dropped: the [`SocketOutlet`] keeps what could not be
//!   delivered (bounded by `sessions.resume_buffer_messages` and `resume_buffer_bytes`)
//!   until a new socket attaches and gets it, in order, or until `sessions.resume_grace_ms`
//!   passes and the session ends, its work cancelled; past those bounds the session ends at
//!   once, since a reconnect could not be made whole.
//!
//! What both keep for replay shares the server's budget, `limits.max_replay_bytes`
//! ([`crate::session::replay`]).
//!
//! The actor lives on the thread where the session began (its workers and inbox live there
//! too); handlers and sockets on any thread reach it by its id (the transports'
//! [`HostedSessions`] directory) with messages, and get their answers back through channels.

use super::awaited::{answer_ids, lost_answer, Awaited};
use super::events::{Cursor, EventLog, ReplayError, SseEvent};
use super::feed::{Budget, Feed, FeedHandle, FeedReader, Refused};
use super::socket_record::{
    self, HoldConfirmed, KeepsRecord, Kept, RecordWritten, RecordsLost, SocketRecord,
};
use crate::cluster::rewrite::RecordOwed;
use crate::cluster::store::bridge::{self, SessionNote, SessionNoteKind, SessionSink};
use crate::cluster::Cluster;
use crate::perimeter::{Admission, Owner, Refusal};
use crate::protocol::jsonrpc::RequestId;
use crate::protocol::mcp::Error;
use crate::session::record::SessionRecord;
use crate::session::replay::{Held, ReplayAccount};
use crate::session::shared::{SessionId, SessionSlot, Shared, Shutdown};
use crate::session::{InboxPump, Intake, Outlet, Route, Session, SessionHost};
use crate::transport::directory::Directory;
use crate::transport::mirror::Mirrored;
use crate::transport::stream_end::{self, StreamClaims};
use crate::worker::Yield;
use actix::prelude::*;
use actix_web_actors::ws::CloseCode;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Events a stream's reader may lag behind before it is cut off (it can then resume from the
/// log); the log, not this, is what bounds what a session holds.
const READER_SLACK: usize = 256;

/// How a POST is answered.
#[derive(Debug)]
pub enum PostReply {
    /// Nothing to answer (notifications and responses only, or the request was cancelled):
    /// 202.
    Accepted,
    /// The answer, as a JSON body.
    Json(String),
    /// An SSE stream: what the exchange sends, ending with its answer.
    Stream(FeedReader),
}

/// A message from the client, in a POST: exchange it and answer through `reply`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Post {
    /// The body.
    pub text: String,
    /// Where the answer goes.
    pub reply: oneshot::Sender<PostReply>,
}

/// A `GET`: opens the session's stream, or resumes one after `Last-Event-ID`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct OpenStream {
    /// The parsed `Last-Event-ID`, if any.
    pub resume: Option<Cursor>,
    /// The stream, or why it cannot be served.
    pub reply: oneshot::Sender<Result<FeedReader, ReplayError>>,
}

/// A `DELETE`: the client ends the session. Answered whether it did: a WebSocket session
/// (parked here, or relaying a resumed socket) is not `DELETE`'s to end, as it is not a
/// POST's or a GET's to serve.
#[derive(Message)]
#[rtype(result = "bool")]
pub struct End;

/// Another node changed the session (setLevel, subscriptions): take its record up.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Refresh(pub SessionRecord);

/// Its record, marked as stored (the handler stores it before the session's id is issued:
/// the client may send its next request to another node at once).
#[derive(Message)]
#[rtype(result = "Option<SessionRecord>")]
pub struct TakeRecord;

/// The client deleted the session elsewhere: on another node (its note), or while this
/// copy was taken up or writing its record (found in Redis, or by the DELETE's own node):
/// this copy ends too.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EndedElsewhere;

/// This node's bus subscription was down a while: an HTTP copy reads its record again, and
/// ends if the session was deleted meanwhile, or takes what changed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Recheck;

/// The close reason of a socket whose session its client resumed on a newer connection
/// (on this node or another).
const RECONNECTED_ELSEWHERE: &str = "MCP session reconnected on another connection";

/// The client asks another node to resume this WebSocket session (see
/// [`SessionNoteKind::HandOver`]).
#[derive(Message)]
#[rtype(result = "()")]
pub struct HandOver;

/// Asks a socket to let go of its session (and close with `code`); it answers with the
/// hosted session that now holds it, if the session goes on.
#[derive(Debug, Message)]
#[rtype(result = "Option<Addr<HostedSession>>")]
pub struct Detach {
    /// The close code for the socket.
    pub code: CloseCode,
    /// The close reason.
    pub reason: &'static str,
}

impl Detach {
    /// The client resumed the session on a newer connection (on this node or another), or
    /// another node took it up: the older socket is closed 1000 with
    /// [`RECONNECTED_ELSEWHERE`], as a client expects of a reconnect.
    pub(crate) const RECONNECTED: Self = Self {
        code: CloseCode::Normal,
        reason: RECONNECTED_ELSEWHERE,
    };
}

/// The socket of a WebSocket session, as the session's host reaches it: frames to deliver,
/// and the request to let go.
#[derive(Clone, PartialEq)]
pub struct SocketHandle {
    deliver: Recipient<Deliver>,
    detach: Recipient<Detach>,
}

impl SocketHandle {
    /// The handle of the socket actor `socket`.
    pub fn of<A>(socket: &Addr<A>) -> Self
    where
        A: Actor + Handler<Deliver> + Handler<Detach>,
        A::Context: actix::dev::ToEnvelope<A, Deliver> + actix::dev::ToEnvelope<A, Detach>,
    {
        Self {
            deliver: socket.clone().recipient(),
            detach: socket.clone().recipient(),
        }
    }
}

/// A socket resumes a WebSocket session: it gets what was missed, then every frame. Answers
/// `false` when the session cannot be resumed this way (an HTTP session, or it is ending).
#[derive(Message)]
#[rtype(result = "bool")]
pub struct AttachSocket {
    /// The socket.
    pub socket: SocketHandle,
    /// The ids the client says it has no answer for (`Mcp-Awaiting-Ids`), if it said.
    pub awaiting: Option<Awaited>,
}

/// The version the session negotiated (`None` before `initialize`): a resume's version
/// offer must be that one.
#[derive(Message)]
#[rtype(result = "Option<crate::protocol::mcp::ProtocolVersion>")]
pub struct NegotiatedVersion;

impl Handler<NegotiatedVersion> for HostedSession {
    type Result = Option<crate::protocol::mcp::ProtocolVersion>;

    fn handle(
        &mut self,
        _: NegotiatedVersion,
        _ctx: &mut Self::Context,
    ) -> Option<crate::protocol::mcp::ProtocolVersion> {
        self.core.negotiated_version()
    }
}

/// A resumed session's socket is gone.
#[derive(Message)]
#[rtype(result = "()")]
pub struct DetachSocket {
    /// The socket that went.
    pub socket: SocketHandle,
    /// Whether the session ends with it, and why.
    pub ending: Ending,
}

/// Whether a WebSocket session ends with its socket rather than waiting for a reconnect, and
/// why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// It waits for a reconnect (the socket dropped, or closed with anything but 1000).
    Resumable,
    /// It ends on this node: the server is shutting down (with sessions in Redis its record
    /// is kept, for a resume on another node), or the connection's credential expired.
    Here,
    /// Its client closed it (1000): it ended for good, even while the server shuts down.
    ByClient,
}

/// A text message from a resumed session's socket.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Relayed(pub String);

/// A frame for a resumed session's socket.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Deliver(pub String);

/// During shutdown, a drained session closes (or ends) once its client has been quiet this long: a
/// client reading its last answers may still ask something cheap about them (the Python SDK
/// lists the tools after a call, to check the result's schema), and is answered.
pub(crate) const DRAINED_QUIET: Duration = Duration::from_millis(250);

/// Hosted sessions by the id their client holds.
pub type HostedSessions = Directory<HostedSession>;

/// The copy of session `id` here, if `requester` may use it, or the one `take_up` makes from
/// its record in Redis with a session slot opened for `admission`, the session's own (its
/// identity, and the access its record grants), remembered: requests taking the same session
/// up at once, on several threads, get one copy (see [`Directory::find_or_make`]).
///
/// # Errors
/// The slot's refusal (a session limit), or [`Refusal::SessionNotFound`] when `take_up`
/// finds the record unusable (or the copy here is not one `requester` may use).
pub(crate) fn find_or_take_up(
    directory: &Arc<HostedSessions>,
    shared: &Arc<Shared>,
    id: &str,
    requester: &Owner,
    admission: &Admission,
    take_up: impl FnOnce(SessionSlot, &SessionId) -> Option<Addr<HostedSession>>,
) -> Result<Addr<HostedSession>, Refusal> {
    let owner = Owner::of(admission);
    let mut refused = None;
    let session = directory.find_or_make(SessionId::from_client(id), requester, &owner, |id| {
        let slot = shared
            .open_session(admission)
            .map_err(|refusal| refused = Some(refusal))
            .ok()?;
        take_up(slot, id)
    });
    session.ok_or(refused.unwrap_or(Refusal::SessionNotFound))
}

/// See the module docs.
pub struct HostedSession {
    core: Session,
    shared: Arc<Shared>,
    /// Where its client finds it by id.
    directory: Arc<HostedSessions>,
    /// Counts the session against the cap and registers it for shutdown.
    slot: SessionSlot,
    id: SessionId,
    out: Outlets,
    next_exchange: u64,
    /// Counts detachments of a WebSocket session, so a grace timer knows whether the socket
    /// it waited for came back meanwhile.
    detached: u64,
    /// When a client last did something (a POST, a GET): idle sessions are reaped.
    last_active: Instant,
    closing: bool,
    /// During shutdown: whether a check for the client's quiet is scheduled.
    quiet_end_armed: bool,
    /// Whether the pool may ask it to give up its work ([`Yield`]): parked with work in
    /// flight.
    yields: bool,
    /// Sessions live in Redis (`cluster.sessions`): changes and client messages that need no
    /// answer are told to the other nodes.
    in_redis: bool,
    /// The revision of the record last stored, and when.
    stored: (u64, Instant),
    /// The last write of the record failed: it is written again, as a change.
    record_unwritten: bool,
    /// A write again of the record is due after `redis.retry_after_ms`.
    record_retry_armed: bool,
    /// Redis lost the record (it restarted empty): owed until a write of it lands, the
    /// node saying meanwhile that it writes its records again (`cluster::rewrite`).
    record_owed: Option<RecordOwed>,
    /// A read again of the record ([`Recheck`]) is due after `redis.retry_after_ms`: the
    /// last went unanswered.
    recheck_armed: bool,
    /// A WebSocket session's record, with sessions in Redis and resumption on (an HTTP
    /// session's is `stored` above).
    socket_record: Option<SocketRecord>,
    /// An HTTP session's claims of its POST streams' ends, with sessions in Redis: made
    /// before it answers on them after its node may have been taken for dead
    /// ([`super::stream_end`]). Boxed: only sessions in Redis have them, and every HTTP
    /// session and parked WebSocket session is this actor.
    stream_claims: Option<Box<StreamClaims>>,
}

impl HostedSession {
    /// A new HTTP session (awaiting its `initialize`) on the current thread.
    pub fn start_http(
        shared: Arc<Shared>,
        directory: Arc<HostedSessions>,
        slot: SessionSlot,
        id: SessionId,
        admission: Admission,
    ) -> Addr<Self> {
        let core = Session::new(shared.clone(), slot.id(), admission);
        Self::http_host(shared, directory, slot, id, core).start()
    }

    /// Keeps a WebSocket session whose socket dropped, on the current thread (its own), with
    /// its record in Redis (`record`, kept by its socket until now) when it has one.
    pub(crate) fn park(
        shared: Arc<Shared>,
        directory: Arc<HostedSessions>,
        slot: SessionSlot,
        id: SessionId,
        core: Session,
        record: Option<SocketRecord>,
    ) -> Addr<Self> {
        let out = Outlets::Socket(SocketOutlet::new(&shared, core.peer(), None));
        let mut host = Self::host(shared, directory, slot, id, core, out);
        host.socket_record = record;
        host.start()
    }

    fn host(
        shared: Arc<Shared>,
        directory: Arc<HostedSessions>,
        slot: SessionSlot,
        id: SessionId,
        core: Session,
        out: Outlets,
    ) -> Self {
        Self {
            core,
            shared,
            directory,
            slot,
            id,
            out,
            next_exchange: 1,
            detached: 0,
            last_active: Instant::now(),
            closing: false,
            quiet_end_armed: false,
            yields: false,
            in_redis: false,
            stored: (0, Instant::now()),
            record_unwritten: false,
            record_owed: None,
            recheck_armed: false,
            record_retry_armed: false,
            socket_record: None,
            stream_claims: None,
        }
    }

    /// A WebSocket session another node began and lost (sessions in Redis), parked here for
    /// the socket that resumes it: its requests that were in flight there are answered
    /// -32031 when the socket attaches. `None` if the record is unusable.
    pub fn take_up_socket(
        shared: Arc<Shared>,
        directory: Arc<HostedSessions>,
        slot: SessionSlot,
        id: SessionId,
        admission: Admission,
        record: &SessionRecord,
    ) -> Option<Addr<Self>> {
        let mut core = Session::new(shared.clone(), slot.id(), admission);
        if !core.restore(record) {
            return None;
        }
        core.set_resume_id(id.clone());
        core.inbox().offset_server_ids(shared.cluster.node_base());
        // Answered -32031 as a socket attaches, unless its client says what it awaits
        // (`SocketOutlet::lost_answers`).
        let lost_on_node = record
            .in_flight
            .iter()
            .filter_map(|id| RequestId::from_raw(id))
            .collect();
        let out = Outlets::Socket(SocketOutlet::new(&shared, core.peer(), Some(lost_on_node)));
        let record = SocketRecord::new(&shared, &id);
        let mut host = Self::host(shared, directory, slot, id, core, out);
        host.in_redis = true;
        // Written afresh: what was in flight on the lost node is answered here, once.
        host.socket_record = record;
        Some(host.start())
    }

    /// An HTTP session on the current thread; with sessions in Redis, its requests to the
    /// client get ids from a range of this node's own.
    fn http_host(
        shared: Arc<Shared>,
        directory: Arc<HostedSessions>,
        slot: SessionSlot,
        id: SessionId,
        mut core: Session,
    ) -> Self {
        core.set_shared_id(id.clone());
        let sessions = &shared.settings.sessions;
        let out = Outlets::Http(HttpOutlet {
            log: EventLog::new(
                sessions.event_buffer_messages,
                sessions.event_buffer_bytes,
                Duration::from_millis(sessions.event_buffer_age_ms),
                shared.replay.account(core.peer()),
            ),
            streams: HashMap::new(),
            prime: false,
            session_stream: 0,
            mirror: None,
            // Room for a few answers of the largest size at once: a client that reads is not
            // let go for a burst.
            budget: Budget::new(
                sessions
                    .event_buffer_bytes
                    .max(shared.settings.limits.max_message_bytes.saturating_mul(4)),
            ),
            ended: Vec::new(),
            followers: Vec::new(),
            new_streams: false,
            found_lost: VecDeque::new(),
        });
        let in_redis = shared.settings.sessions_in_redis();
        let base = shared.cluster.node_base();
        if in_redis {
            core.inbox().offset_server_ids(base);
        }
        let mut host = Self::host(shared, directory, slot, id, core, out);
        host.in_redis = in_redis;
        if in_redis {
            host.stream_claims = Some(Box::new(StreamClaims::new(&host.shared.cluster)));
            // Its streams' numbers are this node's own too (a Last-Event-ID names the node
            // whose stream it was), and this copy's alone.
            if let Outlets::Http(http) = &mut host.out {
                http.session_stream = host.shared.cluster.next_stream(true);
                http.mirror = Some(super::mirror::Mirror::start(
                    host.shared.cluster.clone(),
                    host.id.as_str(),
                ));
            }
        }
        host
    }

    /// A session another node began, from its record (`None` if the record is unusable).
    pub fn adopt_http(
        shared: Arc<Shared>,
        directory: Arc<HostedSessions>,
        slot: SessionSlot,
        id: SessionId,
        admission: Admission,
        record: &SessionRecord,
    ) -> Option<Addr<Self>> {
        let mut core = Session::new(shared.clone(), slot.id(), admission);
        if !core.restore(record) {
            return None;
        }
        let mut host = Self::http_host(shared, directory, slot, id, core);
        host.stored = (host.core.revision(), Instant::now());
        Some(host.start())
    }

    /// With sessions in Redis: stores the session's record when it changed (or a quarter of
    /// its time to live ago, so that a session busy on one node stays there for the others)
    /// and tells the other nodes' copies.
    fn store_record(&mut self, ctx: &mut Context<Self>) {
        // Never stored: the HTTP handler stores a new session's first record itself, before
        // it gives the client the id.
        if !self.in_redis || self.stored.0 == 0 {
            return;
        }
        let ttl = Duration::from_millis(self.shared.settings.sessions.http_idle_timeout_ms);
        let revision = self.core.revision();
        // A write that failed is made again as a change: the note to the other nodes'
        // copies that went with it may have failed too (review 55 #2: they kept serving
        // the session as it was).
        let changed = revision != self.stored.0 || self.record_unwritten;
        if !changed && self.stored.1.elapsed() < ttl / 4 {
            return;
        }
        self.write_record(changed, ctx);
    }

    /// Writes the session's record now, and tells the other nodes' copies when it
    /// `changed` (a record written again unchanged tells them nothing). A write that fails
    /// is made again after `redis.retry_after_ms` ([`RecordUnwritten`]): until then the
    /// record in Redis may be an older one, or none after Redis restarted empty, and the
    /// other nodes would not find the session (a quiet one's record is otherwise written
    /// again only a quarter of its time to live later, and only on a request here).
    fn write_record(&mut self, changed: bool, ctx: &mut Context<Self>) {
        // Held by the write, and given back should it fail; a record that cannot be made
        // owes nothing (it would be owed for good).
        let owed = self.record_owed.take();
        let ttl = Duration::from_millis(self.shared.settings.sessions.http_idle_timeout_ms);
        let revision = self.core.revision();
        let Some(record) = self.core.record() else {
            return;
        };
        let Ok(json) = serde_json::to_string(&record) else {
            return;
        };
        self.stored = (revision, Instant::now());
        self.record_unwritten = false;
        let cluster = self.shared.cluster.clone();
        let id = self.id.as_str().to_owned();
        let host = ctx.address();
        actix::spawn(async move {
            let written = match cluster.store.redis() {
                Some(redis) => {
                    redis
                        .put_session(&cluster.metrics, &id, json.clone(), ttl)
                        .await
                }
                None => None,
            };
            match written {
                Some(true) => drop(owed),
                // Deleted (on another node, or by a DELETE this write was sent before): the
                // copy ends, whether or not the note of the end reached it.
                Some(false) => {
                    host.do_send(EndedElsewhere);
                    return;
                }
                None => host.do_send(RecordUnwritten(owed)),
            }
            if changed {
                let note = SessionNote {
                    id,
                    kind: SessionNoteKind::Record(json),
                };
                bridge::send_session_note(&cluster, note).await;
            }
        });
    }

    /// Resumes, after `cursor`, a stream another node served (sessions in Redis): its
    /// mirrored events, then, for a session's `GET` stream, this node's own session stream
    /// live; for a POST's stream still running there, what that node goes on mirroring until
    /// the answer, or errors for its requests once that node is found dead.
    fn resume_from_mirror(
        &mut self,
        cursor: Cursor,
        reply: oneshot::Sender<Result<FeedReader, ReplayError>>,
        ctx: &mut Context<Self>,
    ) {
        let cluster = self.shared.cluster.clone();
        let Some(key) = cluster
            .store
            .redis()
            .map(|r| r.events_key(self.id.as_str()))
        else {
            let _ = reply.send(Err(ReplayError::Gone));
            return;
        };
        let read_key = key.clone();
        let read_cluster = cluster.clone();
        let read = async move {
            let redis = read_cluster.store.redis()?;
            let metrics = &read_cluster.metrics;
            let mut mirrored = Mirrored::default();
            // The stream's node mirrors a moment after it sends: a client quick to resume
            // elsewhere may be ahead of the mirror. While that node lives, wait for it (a
            // little); past that, what the mirror lacks is a gap.
            let patience = Instant::now() + MIRROR_PATIENCE;
            let mut wait = Duration::ZERO;
            loop {
                let entries = redis
                    .read_events(metrics, &read_key, mirrored.after(), wait)
                    .await?;
                mirrored.take(cursor, entries);
                if mirrored.caught_up(cursor) || Instant::now() >= patience {
                    break;
                }
                let node = super::mirror::node_of(cursor.stream);
                if redis.is_alive(metrics, node).await != Some(true) {
                    break;
                }
                wait = Duration::from_millis(100);
            }
            Some(mirrored)
        };
        ctx.spawn(read.into_actor(self).map(move |mirrored, host, _ctx| {
            let Outlets::Http(http) = &mut host.out else {
                return;
            };
            let Some(mirrored) = mirrored else {
                let _ = reply.send(Err(ReplayError::Unavailable));
                return;
            };
            let Some(mut mirrored) = Some(mirrored).filter(|m| m.known) else {
                let _ = reply.send(Err(ReplayError::Gone));
                return;
            };
            // Events after the cursor that the mirror lacks (trimmed, or a write dropped) are
            // gone: refused, never a silent gap.
            if mirrored.gap {
                let _ = reply.send(Err(ReplayError::Gone));
                return;
            }
            let backlog = std::mem::take(&mut mirrored.events);
            let (feed, rx) = http.reader(cursor.stream, Some(cursor), backlog.len());
            // A replay is not counted (the mirror is read for it, and it bounds what it
            // keeps): the queue has room for all of it.
            for event in backlog {
                feed.push_uncounted(event);
            }
            // A stream whose node ended it with requests unanswered may have been answered
            // -32031 by another node, which that node found out after (see
            // `super::stream_end`): a follower looks, and answers so again.
            let unanswered = mirrored.finished && mirrored.unanswered().next().is_some();
            if !mirrored.finished || unanswered {
                if super::mirror::is_get_stream(cursor.stream) {
                    // Another node's GET stream: what the session hears from now on comes
                    // on this node's own.
                    let stream = http.session_stream;
                    let state = http.streams.entry(stream).or_default();
                    // The older reader let go at once, as `open` lets one go (review 51 #4).
                    if let Some(replaced) = state.reader.replace(feed) {
                        replaced.cut();
                    }
                } else {
                    http.followers.retain(|follower| !follower.is_over());
                    http.followers.push(feed.handle());
                    let followed = Followed {
                        cluster,
                        key,
                        session: host.id.as_str().to_owned(),
                        stream: cursor.stream,
                    };
                    actix::spawn(follow_mirror(followed, mirrored, feed));
                }
            }
            let _ = reply.send(Ok(rx));
        }));
    }

    /// With sessions in Redis: a client message that needed no answer here (a response to a
    /// request of the server, a cancel) may be for another node's copy: it gets it too.
    fn relay(&self, text: &str) {
        if !self.in_redis || !travels(text) {
            return;
        }
        let cluster = self.shared.cluster.clone();
        let note = SessionNote {
            id: self.id.as_str().to_owned(),
            kind: SessionNoteKind::Relay(text.to_owned()),
        };
        actix::spawn(async move { bridge::send_session_note(&cluster, note).await });
    }

    /// Parked with work in flight: the pool may ask for it (oldest parked first) when a
    /// connected client needs a slot.
    fn offer_work(&mut self, ctx: &mut Context<Self>) {
        if self.core.has_work_in_flight() {
            self.shared
                .pool
                .park(self.slot.id(), ctx.address().recipient());
            self.yields = true;
        }
    }

    /// Resumed, ended, or its work is done: the pool no longer asks for it.
    fn withdraw_work(&mut self) {
        if self.yields {
            self.yields = false;
            self.shared.pool.unpark(self.slot.id());
        }
    }

    /// What a WebSocket session's copy owes its client and takes along if it ends here
    /// before a socket attaches (see [`SocketOutlet::owed_elsewhere`]).
    fn owed_elsewhere(&self) -> Vec<RequestId> {
        match &self.out {
            Outlets::Socket(out) => out.owed_elsewhere(),
            Outlets::Http(_) => Vec::new(),
        }
    }

    /// A socket still attached is let go as when its client reconnects elsewhere: its
    /// session went on another connection, here or on another node.
    fn let_socket_go(&mut self) {
        if let Outlets::Socket(out) = &mut self.out {
            if let Some(socket) = out.socket.take() {
                socket.detach.do_send(Detach::RECONNECTED);
            }
        }
    }

    /// Ends the session: cancels its work, closes its streams or socket, forgets its id.
    fn end(&mut self, ctx: &mut Context<Self>, why: &str) {
        tracing::debug!(session = self.slot.id(), id = %self.id, why, "session ended");
        if let Some(record) = self.socket_record.take() {
            // Before the cancel: during a shutdown, what runs here (and what this copy owes
            // its client) is listed for the node the client may resume the session on.
            record.end(&self.core, self.is_parked(), false, || {
                self.owed_elsewhere()
            });
        }
        self.core.cancel_all(&mut self.out);
        match &mut self.out {
            Outlets::Http(http) => http.close_all(),
            Outlets::Socket(socket) => {
                if let Some(socket) = socket.socket.take() {
                    let code = if self.closing {
                        CloseCode::Away
                    } else {
                        CloseCode::Normal
                    };
                    socket.detach.do_send(Detach {
                        code,
                        reason: "session ended",
                    });
                }
            }
        }
        self.directory.forget(&self.id, &ctx.address());
        ctx.stop();
    }

    /// How long an HTTP session is kept here without a request: `http_idle_timeout_ms`; a
    /// copy of a session that lives in Redis is let go sooner (any node takes it up again),
    /// so that a node does not hold every session it ever served: after a tenth of that, at
    /// most [`COPY_IDLE`], unless it holds what ends with it.
    fn idle_limit(&self) -> Duration {
        let idle = Duration::from_millis(self.shared.settings.sessions.http_idle_timeout_ms);
        // A copy holding what ends with it (a `per_session` upstream's child) keeps the
        // session's whole idle time: let go, it stopped the child and lost its state while
        // the session lived on (attack run 52c, G2: after 30 s of a client's quiet).
        if self.in_redis && !self.core.holds_what_ends_with_it() {
            (idle / 10).min(COPY_IDLE)
        } else {
            idle
        }
    }

    fn reap_if_idle(&mut self, ctx: &mut Context<Self>) {
        let idle = self.idle_limit();
        let Outlets::Http(http) = &mut self.out else {
            return;
        };
        // Events past their age give their share of the replay budget back now, not at the
        // session's next event.
        http.log.expire();
        if self.last_active.elapsed() >= idle && http.is_idle() && !self.core.has_work_in_flight() {
            self.end(ctx, "idle");
        }
    }

    /// Ends the session if it must: drained during shutdown, or it missed more than a
    /// reconnect could be given.
    fn end_if_due(&mut self, ctx: &mut Context<Self>) {
        if self.closing && !self.core.has_work_in_flight() {
            self.end_when_quiet(ctx);
        } else if matches!(&self.out, Outlets::Socket(s) if s.overflowed) {
            self.end(
                ctx,
                "missed more messages (or bytes) than a reconnect can be given",
            );
        }
    }

    /// During shutdown, once drained: ends the session when its client has been quiet for
    /// [`DRAINED_QUIET`] (a client reading its last answers may still ask something cheap
    /// about them, or be reading a stream); the grace's end ends it in any case.
    fn end_when_quiet(&mut self, ctx: &mut Context<Self>) {
        if self.quiet_end_armed {
            return;
        }
        let quiet_for = self.last_active.elapsed();
        if quiet_for >= DRAINED_QUIET {
            self.end(ctx, "server shutting down");
            return;
        }
        self.quiet_end_armed = true;
        ctx.run_later(DRAINED_QUIET - quiet_for, |session, ctx| {
            session.quiet_end_armed = false;
            session.end_if_due(ctx);
        });
    }

    /// A WebSocket session without a socket: what it sends waits for its client's
    /// reconnect.
    fn is_parked(&self) -> bool {
        matches!(&self.out, Outlets::Socket(out) if out.socket.is_none())
    }

    /// Counts the session in `mcp_parked_sessions` while it has no socket.
    fn set_waiting(&mut self, waiting: bool) {
        if let Outlets::Socket(out) = &mut self.out {
            if out.waiting != waiting {
                out.waiting = waiting;
                let gauge = &self.shared.metrics.parked_sessions;
                if waiting {
                    gauge.inc();
                } else {
                    gauge.dec();
                }
            }
        }
    }

    /// A parked WebSocket session waits `resume_grace_ms` for a socket.
    fn wait_for_socket(&mut self, ctx: &mut Context<Self>) {
        self.set_waiting(true);
        self.offer_work(ctx);
        self.detached += 1;
        let detached = self.detached;
        let grace = Duration::from_millis(self.shared.settings.sessions.resume_grace_ms);
        ctx.run_later(grace, move |session, ctx| {
            if session.detached == detached && session.is_parked() {
                session.end(ctx, "not resumed within the grace");
            }
        });
    }

    /// Whether an HTTP session's inbox waits for the claims of its POST streams' ends, with
    /// sessions in Redis ([`super::stream_end`]): after its node may have been taken for
    /// dead, each stream a node following it elsewhere may have answered -32031 is claimed
    /// for this node before anything more is sent on it. A node not stalled costs a look at
    /// its beats.
    fn streams_wait_for_claims(&mut self, ctx: &mut Context<Self>) -> bool {
        let (Some(claims), Outlets::Http(http)) = (&mut self.stream_claims, &mut self.out) else {
            return false;
        };
        let cluster = &self.shared.cluster;
        match claims.due(cluster, || http.new_streams) {
            stream_end::Due::No => false,
            stream_end::Due::Wait => true,
            stream_end::Due::Claim => {
                let streams = http.claimable();
                let Some(claims) = claims.begin(cluster, self.id.as_str(), streams) else {
                    return false;
                };
                ctx.spawn(claims.into_actor(self).map(|claimed, host, ctx| {
                    host.streams_claimed(claimed, ctx);
                }));
                true
            }
        }
    }

    /// The claims of the session's streams are done: the streams another node answered
    /// -32031 end here without their answers, and the inbox is drained.
    fn streams_claimed(&mut self, claimed: stream_end::Claimed, ctx: &mut Context<Self>) {
        let Some(claims) = &mut self.stream_claims else {
            return;
        };
        let (lost, again) = claims.settle(claimed);
        if let (Outlets::Http(http), false) = (&mut self.out, lost.is_empty()) {
            tracing::info!(
                session = self.slot.id(),
                id = %self.id,
                streams = lost.len(),
                "streams answered by another node while this one was taken for dead; they end here without their answers"
            );
            for stream in lost {
                http.lose(stream);
            }
        }
        if again {
            ctx.run_later(stream_end::CLAIM_AGAIN_AFTER, |host, ctx| {
                if let Some(claims) = &mut host.stream_claims {
                    claims.wait_over();
                }
                host.drain_inbox(ctx);
            });
            return;
        }
        self.drain_inbox(ctx);
    }
}

impl Actor for HostedSession {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        self.slot.register(ctx.address().recipient());
        ctx.spawn(InboxPump::new(self.core.inbox().clone()));
        match self.out {
            Outlets::Http(_) => {
                let idle = self.idle_limit();
                ctx.run_interval(
                    (idle / 4).max(Duration::from_millis(10)),
                    Self::reap_if_idle,
                );
            }
            Outlets::Socket(_) => {
                if let Some(record) = &mut self.socket_record {
                    record.adopt::<Self>(ctx);
                    ctx.run_interval(record.refresh_every(), socket_record::keep);
                }
                socket_record::keep(self, ctx);
                self.wait_for_socket(ctx);
            }
        }
    }

    fn stopped(&mut self, ctx: &mut Self::Context) {
        self.withdraw_work();
        self.core.cancel_all(&mut self.out);
        self.directory.forget(&self.id, &ctx.address());
        self.set_waiting(false);
    }
}

impl SessionHost for HostedSession {
    fn drain_inbox(&mut self, ctx: &mut Self::Context) -> bool {
        // A WebSocket session's, after this node may have been taken for dead: the inbox
        // waits until Redis says the session is still this node's (as a socket's own
        // session's does; review 52 #2: a session resumed here answered twice).
        if let Some(record) = &mut self.socket_record {
            if !socket_record::confirm_held::<Self>(record, ctx) {
                return true;
            }
        }
        // An HTTP session's, after this node may have been taken for dead: the inbox waits
        // for the claims of its POST streams (attack run 51, N3).
        if self.stream_claims.is_some() && self.streams_wait_for_claims(ctx) {
            return true;
        }
        let busy = self.core.has_work_in_flight();
        self.core.on_inbox(&mut self.out);
        socket_record::keep(self, ctx);
        if !self.core.has_work_in_flight() {
            self.withdraw_work();
        }
        if self.closing && busy && !self.core.has_work_in_flight() {
            // The last answer just went out: the client's quiet is counted from here (it
            // may still ask something about that answer before the session ends).
            self.last_active = Instant::now();
        }
        self.end_if_due(ctx);
        true
    }
}

impl Handler<Post> for HostedSession {
    type Result = ();

    fn handle(&mut self, post: Post, ctx: &mut Self::Context) {
        self.last_active = Instant::now();
        let Outlets::Http(http) = &mut self.out else {
            // A WebSocket session's id is never in the HTTP handlers' hands; dropping the
            // reply answers as for an unknown session.
            return;
        };
        // With sessions in Redis, a number no other copy of the session has used (see
        // `Cluster::next_stream`).
        let exchange = if self.in_redis {
            self.shared.cluster.next_stream(false)
        } else {
            self.next_exchange += 1;
            self.next_exchange - 1
        };
        let ids = http.mirror.as_ref().map(|_| request_ids(&post.text));
        http.streams.insert(
            exchange,
            StreamState {
                waiting: Some(post.reply),
                ids,
                ..StreamState::default()
            },
        );
        let intake = self.core.on_text(&post.text, exchange, http);
        // Priming events (SEP-1699) only for sessions whose version knows them.
        http.prime = self
            .core
            .negotiated_version()
            .is_some_and(|v| v.has_icons());
        match intake {
            Intake::Silent => {
                http.close(exchange);
                self.relay(&post.text);
            }
            Intake::Pending => http.owes_answer(exchange),
            Intake::Answered => {}
        }
        if !self.core.is_initialized() {
            // Only an `initialize` starts an HTTP session, and it was answered inline: if it
            // failed, the session ends before its id is issued and holds no slot.
            self.end(ctx, "initialize failed");
            return;
        }
        self.store_record(ctx);
        self.end_if_due(ctx);
    }
}

impl Handler<OpenStream> for HostedSession {
    type Result = ();

    fn handle(&mut self, open: OpenStream, ctx: &mut Self::Context) {
        self.last_active = Instant::now();
        let Outlets::Http(http) = &mut self.out else {
            return;
        };
        // A stream this node found lost: served as another node would (see `found_lost`).
        if let Some(cursor) = open.resume.filter(|c| http.found_lost.contains(&c.stream)) {
            self.resume_from_mirror(cursor, open.reply, ctx);
            return;
        }
        match (http.open(open.resume), open.resume) {
            // Not a stream of this node's: with sessions in Redis, its node mirrored it.
            (Err(ReplayError::Gone), Some(cursor)) if http.mirror.is_some() => {
                self.resume_from_mirror(cursor, open.reply, ctx);
            }
            (opened, _) => {
                let _ = open.reply.send(opened);
            }
        }
    }
}

impl Handler<End> for HostedSession {
    type Result = bool;

    fn handle(&mut self, _end: End, ctx: &mut Self::Context) -> bool {
        if !matches!(self.out, Outlets::Http(_)) {
            return false;
        }
        // With sessions in Redis, the DELETE's handler ends its record and the other copies
        // (`http::end_in_store`), and says whether they could be.
        self.end(ctx, "deleted by the client");
        true
    }
}

/// Redis lost this session's record: written again now (an HTTP session's, or a parked
/// WebSocket session's), so that the other nodes find the session.
impl Handler<RecordsLost> for HostedSession {
    type Result = ();

    fn handle(&mut self, RecordsLost(owed): RecordsLost, ctx: &mut Self::Context) {
        let Some(owed) = socket_record::rewrite_lost(self, owed, ctx) else {
            return;
        };
        if self.in_redis && self.stored.0 != 0 {
            self.record_owed = Some(owed);
            // Unchanged: the other nodes' copies are not told (review 52 #7: every copy
            // of every session told every node).
            self.write_record(false, ctx);
        }
    }
}

/// A write of an HTTP session's record failed ([`HostedSession::write_record`]); with what
/// it owed Redis, owed still.
#[derive(Message)]
#[rtype(result = "()")]
struct RecordUnwritten(Option<RecordOwed>);

impl Handler<RecordUnwritten> for HostedSession {
    type Result = ();

    fn handle(&mut self, RecordUnwritten(owed): RecordUnwritten, ctx: &mut Self::Context) {
        self.record_unwritten = true;
        self.record_owed = self.record_owed.take().or(owed);
        if std::mem::replace(&mut self.record_retry_armed, true) {
            return;
        }
        let wait = Duration::from_millis(self.shared.settings.redis.retry_after_ms);
        ctx.run_later(wait, |host, ctx| {
            host.record_retry_armed = false;
            host.store_record(ctx);
        });
    }
}

impl Handler<Refresh> for HostedSession {
    type Result = ();

    fn handle(&mut self, refresh: Refresh, _ctx: &mut Self::Context) {
        if self.core.restore(&refresh.0) {
            self.stored = (self.core.revision(), self.stored.1);
        }
    }
}

impl Handler<TakeRecord> for HostedSession {
    type Result = Option<SessionRecord>;

    fn handle(&mut self, _take: TakeRecord, _ctx: &mut Self::Context) -> Option<SessionRecord> {
        let record = self.core.record()?;
        self.stored = (record.revision, Instant::now());
        Some(record)
    }
}

impl Handler<EndedElsewhere> for HostedSession {
    type Result = ();

    fn handle(&mut self, _ended: EndedElsewhere, ctx: &mut Self::Context) {
        self.end(ctx, "deleted by the client elsewhere");
    }
}

impl Handler<Recheck> for HostedSession {
    type Result = ();

    fn handle(&mut self, _: Recheck, ctx: &mut Self::Context) {
        // An HTTP copy in Redis whose record this node wrote: one whose write failed is
        // about to be written again, and is not read back.
        if !matches!(self.out, Outlets::Http(_))
            || !self.in_redis
            || self.stored.0 == 0
            || self.record_unwritten
        {
            return;
        }
        let cluster = self.shared.cluster.clone();
        let id = self.id.as_str().to_owned();
        let ttl = Duration::from_millis(self.shared.settings.sessions.http_idle_timeout_ms);
        let read = async move {
            // Without Redis there is no record to read, now or later (review 58 #15: it was
            // asked again every `retry_after_ms` for good).
            let Some(redis) = cluster.store.redis() else {
                return Reread::Unreadable;
            };
            match redis.get_session(&cluster.metrics, &id, ttl).await {
                Some(Some(json)) => match serde_json::from_str::<SessionRecord>(&json) {
                    Ok(record) => Reread::Record(Box::new(record)),
                    // Not a record (written by something else): refused as unreadable
                    // wherever it is read, and left to its time to live.
                    Err(_) => Reread::Unreadable,
                },
                // Gone, unless Redis may have lost it (restarted empty, its copies about to
                // write it again, or writing it: asked again after).
                Some(None) if cluster.absent_may_be_lost(redis).await => Reread::Undecided,
                Some(None) => Reread::Gone,
                None => Reread::Undecided,
            }
        };
        ctx.spawn(read.into_actor(self).map(|read, host, ctx| match read {
            Reread::Gone => host.end(ctx, "deleted on another node while this one's bus was down"),
            Reread::Record(record) => {
                if host.core.restore(&record) {
                    host.stored = (host.core.revision(), host.stored.1);
                }
            }
            Reread::Unreadable => {}
            // Skipped (the node skips Redis after a failure, as it often does when its bus
            // comes back), failed or timed out: read again later, until Redis answers (review
            // 57 #2: it was dropped, and the copy served a session deleted meanwhile).
            Reread::Undecided => {
                if host.recheck_armed {
                    return;
                }
                host.recheck_armed = true;
                let after = Duration::from_millis(host.shared.settings.redis.retry_after_ms);
                ctx.run_later(after, |host, ctx| {
                    host.recheck_armed = false;
                    <Self as Handler<Recheck>>::handle(host, Recheck, ctx);
                });
            }
        }));
    }
}

/// What a [`Recheck`]'s read of the record found.
enum Reread {
    /// The session was deleted.
    Gone,
    /// The record, to take what changed.
    Record(Box<SessionRecord>),
    /// Not a record, or no Redis to read one from: nothing to take.
    Unreadable,
    /// Redis did not answer, or may have lost the record for a moment: asked again.
    Undecided,
}

impl Handler<HandOver> for HostedSession {
    type Result = ();

    /// The session goes to the node its client reconnected to: a socket still attached here
    /// is let go first (the client's older connection, half-open or given up on, as when it
    /// reconnects on this node). Its record is written a last time, listing what runs here
    /// (which ends here unanswered: that node answers it -32031), and no longer names this
    /// node; the copy ends.
    fn handle(&mut self, _: HandOver, ctx: &mut Self::Context) {
        self.let_socket_go();
        if !self.is_parked() {
            return;
        }
        let Some(record) = self.socket_record.take() else {
            return;
        };
        let owed = self.owed_elsewhere();
        record.hand_over(&self.core, true, owed);
        self.end(ctx, "handed over to the node its client reconnected to");
    }
}

/// Delivers the other nodes' notes about sessions to this node's copies (sessions in Redis).
pub fn deliver_session_notes(directory: Arc<HostedSessions>) -> SessionSink {
    Box::new(move |note: SessionNote| {
        let Some(session) = directory.find_any(&note.id) else {
            return;
        };
        match note.kind {
            SessionNoteKind::Relay(text) => session.do_send(Relayed(text)),
            SessionNoteKind::Record(json) => {
                if let Ok(record) = serde_json::from_str::<SessionRecord>(&json) {
                    session.do_send(Refresh(record));
                }
            }
            SessionNoteKind::End => session.do_send(EndedElsewhere),
            SessionNoteKind::HandOver => session.do_send(HandOver),
        }
    })
}

impl Handler<Shutdown> for HostedSession {
    type Result = ();

    fn handle(&mut self, shutdown: Shutdown, ctx: &mut Self::Context) {
        if self.closing {
            return;
        }
        self.closing = true;
        self.core.begin_drain(&mut self.out);
        self.end_if_due(ctx);
        ctx.run_later(shutdown.grace, |session, ctx| {
            // Every request the session took gets its answer before the end.
            session
                .core
                .answer_all_with(&Error::ShuttingDown, &mut session.out);
            session.end(ctx, "server shutting down");
        });
    }
}

impl Handler<AttachSocket> for HostedSession {
    type Result = bool;

    fn handle(&mut self, attach: AttachSocket, ctx: &mut Self::Context) -> bool {
        let Outlets::Socket(out) = &mut self.out else {
            return false;
        };
        if self.closing {
            return false;
        }
        if let Some(older) = out.socket.replace(attach.socket.clone()) {
            older.detach.do_send(Detach::RECONNECTED);
            // What 2026-07-28 requests the older connection began end with it, as when it
            // drops (that revision has no resumption): the new one did not open its listens.
            self.core.end_stateless_requests(&mut self.out);
        }
        let Outlets::Socket(out) = &mut self.out else {
            return false;
        };
        // The answers lost with a node or a connection, then what the client missed, in
        // order, before anything new. Each gives its share of the replay budget back as it
        // is handed over.
        let lost = out.lost_answers(&self.core, attach.awaiting.as_ref());
        let missed = out.missed.drain(..).map(|missed| missed.frame);
        for frame in lost.into_iter().chain(missed) {
            // Within the socket's mailbox, which holds a whole attach (see `WsSession`).
            attach.socket.deliver.do_send(Deliver(frame));
        }
        out.missed_bytes = 0;
        self.detached += 1;
        self.set_waiting(false);
        self.withdraw_work();
        // The answers it kept for the client are on their way: the record lets them go.
        socket_record::keep(self, ctx);
        tracing::debug!(session = self.slot.id(), id = %self.id, "session resumed");
        true
    }
}

/// A connected client needs a worker slot and none is free: a session still parked gives
/// up its work. Each request still in flight is stopped and answered -32004 (`reclaimed`),
/// kept with what the client missed for its resume.
impl Handler<Yield> for HostedSession {
    type Result = ();

    fn handle(&mut self, _yield: Yield, ctx: &mut Self::Context) {
        // The pool forgot it when it asked.
        self.yields = false;
        if !self.is_parked() || self.closing || !self.core.has_work_in_flight() {
            return;
        }
        let stopped = self.core.requests_in_flight();
        tracing::info!(
            session = self.slot.id(),
            id = %self.id,
            stopped,
            "parked session's work stopped: a connected client needs its worker slots"
        );
        self.shared.metrics.reclaimed.add(stopped as u64);
        self.core.answer_all_with(&Error::Reclaimed, &mut self.out);
        socket_record::keep(self, ctx);
        self.end_if_due(ctx);
    }
}

impl Handler<DetachSocket> for HostedSession {
    type Result = ();

    fn handle(&mut self, detach: DetachSocket, ctx: &mut Self::Context) {
        let Outlets::Socket(out) = &mut self.out else {
            return;
        };
        if out.socket.as_ref() != Some(&detach.socket) {
            return;
        }
        out.socket = None;
        match detach.ending {
            Ending::Resumable => {
                // As at the first socket's park (`ws`): that revision has no resumption.
                self.core.end_stateless_requests(&mut self.out);
                self.wait_for_socket(ctx);
            }
            Ending::Here => self.end(ctx, "ended with its socket"),
            Ending::ByClient => {
                if let Some(record) = self.socket_record.take() {
                    record.end(&self.core, self.is_parked(), true, Vec::new);
                }
                self.end(ctx, "closed by the client");
            }
        }
    }
}

impl Handler<Relayed> for HostedSession {
    type Result = ();

    fn handle(&mut self, relayed: Relayed, ctx: &mut Self::Context) {
        self.last_active = Instant::now();
        // The attached socket's credential covers the session's (it could not have resumed
        // the session otherwise): served with the session's.
        self.core.on_text(&relayed.0, 0, &mut self.out);
        socket_record::keep(self, ctx);
        self.end_if_due(ctx);
    }
}

impl KeepsRecord for HostedSession {
    fn record_and_session(&mut self) -> Option<Kept<'_>> {
        let parked = self.is_parked();
        Some(Kept {
            record: self.socket_record.as_mut()?,
            session: &self.core,
            parked,
        })
    }

    fn taken_up_elsewhere(&mut self, ctx: &mut Context<Self>) {
        self.socket_record = None;
        self.let_socket_go();
        self.end(ctx, "taken up by another node");
    }
}

/// Redis said whether this node still holds the session, after it may have been taken for
/// dead: the inbox is drained now, or the copy here ends, unanswered.
impl Handler<HoldConfirmed> for HostedSession {
    type Result = ();

    fn handle(&mut self, done: HoldConfirmed, ctx: &mut Self::Context) {
        socket_record::hold_confirmed(self, &done, ctx);
    }
}

/// A write of the session's record is done: a change made meanwhile is written now.
impl Handler<RecordWritten> for HostedSession {
    type Result = ();

    fn handle(&mut self, done: RecordWritten, ctx: &mut Self::Context) {
        socket_record::written(self, ctx, done);
    }
}

/// How a hosted session's frames leave it.
enum Outlets {
    Http(HttpOutlet),
    Socket(SocketOutlet),
}

impl Outlet for Outlets {
    fn send(&mut self, frame: String, route: Route) {
        match self {
            Self::Http(http) => http.send(frame, route),
            Self::Socket(socket) => socket.send(frame, route),
        }
    }

    fn close(&mut self, exchange: u64) {
        if let Self::Http(http) = self {
            http.close(exchange);
        }
    }

    fn owes_answer(&mut self, exchange: u64) {
        if let Self::Http(http) = self {
            http.owes_answer(exchange);
        }
    }
}

/// A WebSocket session's way out: its current socket, or what it missed while it had none.
pub struct SocketOutlet {
    socket: Option<SocketHandle>,
    missed: VecDeque<Missed>,
    /// The bytes of `missed`.
    missed_bytes: usize,
    /// `sessions.resume_buffer_messages`.
    max_missed: usize,
    /// `sessions.resume_buffer_bytes`.
    max_missed_bytes: usize,
    /// Its client's account with what all sessions hold for replay, this one's missed
    /// messages among them.
    budget: ReplayAccount,
    /// It missed more than `max_missed` messages or `max_missed_bytes`, or the server's
    /// replay budget had no room for what it missed: a reconnect could not be made whole, so
    /// the session ends rather than resume with a gap (its reconnect is refused, 404).
    overflowed: bool,
    /// Whether it is counted as waiting for a socket.
    waiting: bool,
    /// Taken up from a dead node's record, until a socket attaches: the ids of the
    /// requests that record listed as running there.
    lost_on_node: Option<Vec<RequestId>>,
}

/// A message a parked WebSocket session keeps for its reconnect, with its share of the
/// server's replay budget.
struct Missed {
    frame: String,
    _held: Held,
}

impl SocketOutlet {
    /// The outlet of a session of the client at `peer` parked without a socket;
    /// `lost_on_node`, for a session taken up from a dead node's record, lists the requests
    /// that were running there.
    fn new(
        shared: &Shared,
        peer: Option<std::net::IpAddr>,
        lost_on_node: Option<Vec<RequestId>>,
    ) -> Self {
        let sessions = &shared.settings.sessions;
        Self {
            socket: None,
            missed: VecDeque::new(),
            missed_bytes: 0,
            max_missed: sessions.resume_buffer_messages,
            max_missed_bytes: sessions.resume_buffer_bytes,
            budget: shared.replay.account(peer),
            overflowed: false,
            waiting: false,
            lost_on_node,
        }
    }

    /// Keeps `frame` for the reconnect, or, past the session's bounds or the server's
    /// replay budget, marks the session overflowed (it ends: giving up an older message
    /// would leave a gap, and one not kept would be lost in silence).
    fn keep(&mut self, frame: String) {
        if self.overflowed {
            // Ending: nothing more is worth holding.
            return;
        }
        let fits = self.missed.len() < self.max_missed
            && self.missed_bytes + frame.len() <= self.max_missed_bytes;
        if !fits {
            self.overflowed = true;
            return;
        }
        match self.budget.hold(frame.len()) {
            Some(held) => {
                self.missed_bytes += frame.len();
                self.missed.push_back(Missed { frame, _held: held });
            }
            None => {
                self.budget.dropped(1);
                self.overflowed = true;
            }
        }
    }

    /// What the session owes its client that goes with this copy if it ends before a socket
    /// attaches: the answers it kept, and the requests of a lost node it was to answer
    /// -32031. Listed in the record for the node that takes the session up next.
    fn owed_elsewhere(&self) -> Vec<RequestId> {
        let kept = self
            .missed
            .iter()
            .flat_map(|missed| answer_ids(&missed.frame))
            .filter_map(RequestId::from_json);
        self.lost_on_node
            .iter()
            .flatten()
            .cloned()
            .chain(kept)
            .collect()
    }

    /// The -32031 answers a socket attaching now is owed. Without `awaiting`, one for each
    /// request a dead node's record listed (none on the session's own node). With it, one
    /// for each awaited request the session neither runs nor holds an answer for: the
    /// client's word settles what the record could not (see [`super::awaited`]).
    fn lost_answers(&mut self, core: &Session, awaiting: Option<&Awaited>) -> Vec<String> {
        let on_node = self.lost_on_node.take();
        let lost = if on_node.is_some() {
            Error::NodeLost
        } else {
            Error::ConnectionLost
        };
        match awaiting {
            None => on_node
                .unwrap_or_default()
                .iter()
                .map(|id| lost_answer(id, &lost))
                .collect(),
            Some(awaited) => {
                // A batch's entries are answered with it: running, or answered and held
                // until its last entry is; and a batch's answer kept is an array.
                let running = core
                    .in_flight_ids()
                    .chain(core.batched_answer_ids())
                    .map(RequestId::as_json);
                let kept = self
                    .missed
                    .iter()
                    .flat_map(|missed| answer_ids(&missed.frame));
                awaited.owed(running.chain(kept), &lost)
            }
        }
    }
}

impl Outlet for SocketOutlet {
    fn send(&mut self, frame: String, _route: Route) {
        match &self.socket {
            // The socket's mailbox is bounded (see `WsSession`'s start): full, its client
            // has stopped reading, and what it is sent would pile up there without end.
            Some(socket) => {
                if let Err(SendError::Full(_)) = socket.deliver.try_send(Deliver(frame)) {
                    self.overflowed = true;
                }
            }
            None => self.keep(frame),
        }
    }
}

/// One open stream: a POST waiting for its first frame, and the SSE reader once there is one.
#[derive(Default)]
struct StreamState {
    waiting: Option<oneshot::Sender<PostReply>>,
    reader: Option<Feed>,
    /// With sessions in Redis: the ids of the POST's requests (JSON array), told to the
    /// mirror when the POST becomes a stream; `None` once told (or never needed).
    ids: Option<String>,
    /// Whether the mirror knows the stream (it became SSE): its end is mirrored too.
    mirrored: bool,
    /// Whether the POST had a request to answer: closed without an answer (cancelled, the
    /// session ended), it still gets a stream, an empty one, as a POST of requests must
    /// (`text/event-stream` or `application/json`, never 202).
    owes_answer: bool,
    /// Another node answered its requests -32031 while this one was taken for dead
    /// ([`super::stream_end`]): it ended, and what the session sends on it is dropped, until
    /// its answer (then it is forgotten).
    lost: bool,
}

/// Routes a hosted HTTP session's frames (see the module docs).
pub struct HttpOutlet {
    log: EventLog,
    /// The number of the session's `GET` stream: 0, or this node's base with sessions in
    /// Redis (stream numbers then name their node).
    session_stream: u64,
    /// With sessions in Redis: where streamed events are mirrored.
    mirror: Option<super::mirror::Mirror>,
    /// Open streams: exchanges not yet answered, and 0, the session's `GET` stream.
    streams: HashMap<u64, StreamState>,
    /// Whether new streams start with a priming event (2025-11-25 sessions).
    prime: bool,
    /// What the live events its streams hold for their readers may come to:
    /// `sessions.event_buffer_bytes`, and at least four times `limits.max_message_bytes`
    /// (16 MiB by default), and one event more for each stream that holds none (see
    /// [`Feed::offer`]).
    budget: Arc<Budget>,
    /// Streams over (answered, or closed) whose readers still hold live events: let go as
    /// open ones are when the session's streams hold their budget.
    ended: Vec<Feed>,
    /// Streams followed from another node's mirror (their feeds are their followers'):
    /// let go as the others are (review 51 #9).
    followers: Vec<FeedHandle>,
    /// With sessions in Redis: the mirror came to know a POST stream since the session's
    /// streams were last claimed ([`super::stream_end`]).
    new_streams: bool,
    /// The last streams found lost ([`lose`](Self::lose)), at most [`FOUND_LOST_KEPT`]: a
    /// resume of one is served from the mirror, as on another node (answered -32031 again),
    /// not from this node's log (what it sent, without an answer).
    found_lost: VecDeque<u64>,
}

/// How many streams found lost a session remembers (see `HttpOutlet::found_lost`): one
/// forgotten is resumed from the node's log, without an answer.
const FOUND_LOST_KEPT: usize = 16;

/// A stream whose reader holds live events.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// An open stream, by number.
    Open(u64),
    /// One over, by its place in `HttpOutlet::ended`.
    Ended(usize),
    /// One followed from another node's mirror, by its place in `HttpOutlet::followers`.
    Follower(usize),
}

impl HttpOutlet {
    /// Hands `event` to `stream`'s reader, if it has one. A reader that holds its most
    /// events is let go (its client reads too slowly), as one gone is. One that holds events
    /// when the session's streams hold their budget is let go too, or rather the stream
    /// that holds the most is, its events dropped at once, and this one's offered again: a
    /// client that does not read held every event of every stream, of any size (a tool's
    /// 64 KiB log lines pinned 1 GiB in one session). A stream let go ends; its client
    /// resumes it from the session's log with `Last-Event-ID`.
    fn offer(&mut self, stream: u64, mut event: SseEvent) {
        loop {
            let Some(feed) = self.streams.get(&stream).and_then(|s| s.reader.as_ref()) else {
                return;
            };
            let refused = match feed.offer(event) {
                Ok(()) => return,
                Err((Refused::OverBudget, refused)) => refused,
                Err((Refused::Full | Refused::Unread, _)) => {
                    self.let_go(stream);
                    return;
                }
            };
            let open = self
                .streams
                .iter()
                .filter_map(|(id, state)| Some((Holder::Open(*id), state.reader.as_ref()?.held())));
            let ended = self
                .ended
                .iter()
                .enumerate()
                .map(|(at, feed)| (Holder::Ended(at), feed.held()));
            self.followers.retain(|follower| !follower.is_over());
            let followers = self
                .followers
                .iter()
                .enumerate()
                .map(|(at, follower)| (Holder::Follower(at), follower.held()));
            let largest = open
                .chain(ended)
                .chain(followers)
                .max_by_key(|(_, held)| *held)
                .map_or(Holder::Open(stream), |(holder, _)| holder);
            match largest {
                Holder::Open(largest) => {
                    self.let_go(largest);
                    if largest == stream {
                        return;
                    }
                }
                Holder::Ended(at) => self.ended.swap_remove(at).cut(),
                Holder::Follower(at) => self.followers.swap_remove(at).cut(),
            }
            event = refused;
        }
    }

    /// Lets `stream`'s reader go: what it holds is dropped, and it ends.
    fn let_go(&mut self, stream: u64) {
        if let Some(feed) = self.streams.get_mut(&stream).and_then(|s| s.reader.take()) {
            feed.cut();
        }
    }

    /// A stream is over: its reader ends after what it holds, and until it has taken that,
    /// the stream may still be let go (see [`offer`](Self::offer)).
    fn end_reader(&mut self, feed: Feed) {
        feed.end();
        self.ended.retain(|f| f.held() > 0 && !f.is_unread());
        if feed.held() > 0 {
            self.ended.push(feed);
        }
    }

    /// Whether no stream is open and no POST waits: nothing holds the session.
    fn is_idle(&self) -> bool {
        self.streams
            .values()
            .all(|s| s.waiting.is_none() && s.reader.as_ref().is_none_or(Feed::is_unread))
    }

    /// A fresh reader queue for `stream`, primed when the session's version wants it.
    /// A resumed stream is primed with its cursor, not the stream's newest id: the backlog
    /// follows, and a client that loses it must be able to ask for it again.
    fn reader(
        &mut self,
        stream: u64,
        resumed_from: Option<Cursor>,
        backlog: usize,
    ) -> (Feed, FeedReader) {
        let (feed, reader) = super::feed::feed(backlog + READER_SLACK + 1, self.budget.clone());
        if self.prime {
            let id = match resumed_from {
                Some(cursor) => format!("{}_{}", cursor.stream, cursor.count),
                None => self.log.current_id(stream),
            };
            feed.push_uncounted(SseEvent {
                id,
                data: Arc::from(""),
            });
        }
        (feed, reader)
    }

    /// Logs an event of `stream` and hands it to its reader, if it has one that keeps up.
    fn stream_event(&mut self, stream: u64, frame: String) {
        let event = self.log.push(stream, Arc::from(frame));
        if let Some(mirror) = &self.mirror {
            let count = event
                .id
                .rsplit('_')
                .next()
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            mirror.event(stream, count, event.data.clone());
        }
        // Gone or too slow, its reader is let go: the client resumes from the log with
        // Last-Event-ID.
        self.offer(stream, event);
    }

    /// Opens the session stream, or resumes a stream after `resume`.
    fn open(&mut self, resume: Option<Cursor>) -> Result<FeedReader, ReplayError> {
        let stream = resume.map_or(self.session_stream, |c| c.stream);
        if resume.is_none() {
            if let Some(mirror) = &self.mirror {
                mirror.begin(stream, String::new());
            }
        }
        let backlog = match resume {
            Some(cursor) => self.log.replay(cursor)?,
            None => Vec::new(),
        };
        let (feed, rx) = self.reader(stream, resume, backlog.len());
        // A replay is not counted (the log holds its events anyway, and bounds them): the
        // queue has room for all of it.
        for event in backlog {
            feed.push_uncounted(event);
        }
        // A finished stream (its answer is in the backlog) ends after the replay; an open
        // one goes on live, replacing any reader it had (let go: what it held is in the
        // replay).
        if stream == self.session_stream || !self.log.is_finished(stream) {
            if let Some(replaced) = self.streams.entry(stream).or_default().reader.replace(feed) {
                replaced.cut();
            }
        }
        Ok(rx)
    }

    /// The exchange is over without an answer (notifications only, or cancelled).
    fn close(&mut self, exchange: u64) {
        if let Some(mut state) = self.streams.remove(&exchange) {
            if let Some(feed) = state.reader.take() {
                self.end_reader(feed);
            }
            if let Some(waiting) = state.waiting.take() {
                let reply = if state.owes_answer {
                    // Its sender dropped at once: a stream that ends with no event.
                    PostReply::Stream(FeedReader::ended())
                } else {
                    PostReply::Accepted
                };
                let _ = waiting.send(reply);
            }
            self.finish_mirrored(exchange, state.mirrored);
        }
        self.log.finish(exchange);
    }

    /// Tells the mirror a stream it knows is over.
    fn finish_mirrored(&self, stream: u64, mirrored: bool) {
        if let (Some(mirror), true) = (&self.mirror, mirrored) {
            mirror.finish(stream);
        }
    }

    /// Closes every stream (the session ended).
    fn close_all(&mut self) {
        let streams: Vec<u64> = self.streams.keys().copied().collect();
        for stream in streams {
            self.close(stream);
        }
    }

    /// The streams a node following them from the mirror may answer -32031 should this one
    /// be found dead: the POST streams the mirror knows, still open
    /// ([`super::stream_end`]). They count as claimed from here.
    fn claimable(&mut self) -> Vec<u64> {
        self.new_streams = false;
        self.streams
            .iter()
            .filter(|(_, state)| state.mirrored && !state.lost)
            .map(|(stream, _)| *stream)
            .collect()
    }

    /// Another node answered `stream`'s requests -32031 while this one was taken for dead
    /// ([`super::stream_end`]): the stream ends now (its reader after what it holds, sent
    /// before), its end mirrored, and what the session sends on it until its answer is
    /// dropped.
    fn lose(&mut self, stream: u64) {
        let Some(state) = self.streams.get_mut(&stream) else {
            return;
        };
        state.lost = true;
        if self.found_lost.len() == FOUND_LOST_KEPT {
            self.found_lost.pop_front();
        }
        self.found_lost.push_back(stream);
        let reader = state.reader.take();
        let mirrored = std::mem::take(&mut state.mirrored);
        if let Some(feed) = reader {
            self.end_reader(feed);
        }
        self.finish_mirrored(stream, mirrored);
        self.log.finish(stream);
    }
}

impl Outlet for HttpOutlet {
    fn owes_answer(&mut self, exchange: u64) {
        if let Some(state) = self.streams.get_mut(&exchange) {
            state.owes_answer = true;
        }
    }

    fn send(&mut self, frame: String, route: Route) {
        let (stream, answer) = match route {
            Route::Answer(exchange) => (exchange, true),
            Route::During(exchange) => (exchange, false),
            Route::Session => (self.session_stream, false),
        };
        // A message during an exchange whose POST is gone from the map (it cannot happen
        // while its requests run) still reaches the client, on the session stream.
        let stream = match self.streams.get(&stream) {
            // Answered -32031 elsewhere: nothing more of it is sent.
            Some(state) if state.lost => {
                if answer {
                    self.streams.remove(&stream);
                }
                return;
            }
            Some(_) => stream,
            None => self.session_stream,
        };
        let waiting = self.streams.get_mut(&stream).and_then(|s| s.waiting.take());
        match waiting {
            // The answer comes first: a plain JSON body, nothing to stream or log.
            Some(waiting) if answer => {
                let _ = waiting.send(PostReply::Json(frame));
                self.streams.remove(&stream);
                self.log.finish(stream);
                return;
            }
            // Something comes before the answer: the POST becomes an SSE stream.
            Some(waiting) => {
                let (feed, rx) = self.reader(stream, None, 0);
                if waiting.send(PostReply::Stream(rx)).is_ok() {
                    if let Some(state) = self.streams.get_mut(&stream) {
                        state.reader = Some(feed);
                    }
                }
                if let (Some(mirror), Some(state)) = (&self.mirror, self.streams.get_mut(&stream)) {
                    mirror.begin(stream, state.ids.take().unwrap_or_default());
                    state.mirrored = true;
                    self.new_streams = true;
                }
            }
            None => {}
        }
        self.stream_event(stream, frame);
        if answer {
            // The stream ends after its answer: dropping the reader closes the response.
            let mut mirrored = false;
            if let Some(state) = self.streams.remove(&stream) {
                mirrored = state.mirrored;
                if let Some(feed) = state.reader {
                    self.end_reader(feed);
                }
            }
            self.finish_mirrored(stream, mirrored);
            self.log.finish(stream);
        }
    }

    fn close(&mut self, exchange: u64) {
        HttpOutlet::close(self, exchange);
    }
}

/// The ids of the requests in a POST's body, as a JSON array (for the mirror: a resume on
/// another node answers them if the node running them is lost).
fn request_ids(text: &str) -> String {
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(borrow, default)]
        id: Option<&'a serde_json::value::RawValue>,
        // Only whether it is there: a method written with escapes (`"tools\/call"`) is
        // not a borrowed `&str`, and failed the whole parse.
        #[serde(default)]
        method: Option<serde::de::IgnoredAny>,
    }
    let ids: Vec<&serde_json::value::RawValue> = match text.trim_start().as_bytes().first() {
        Some(b'[') => serde_json::from_str::<Vec<Message<'_>>>(text)
            .map(|all| {
                all.into_iter()
                    .filter(|m| m.method.is_some())
                    .filter_map(|m| m.id)
                    .collect()
            })
            .unwrap_or_default(),
        _ => serde_json::from_str::<Message<'_>>(text)
            .ok()
            .filter(|m| m.method.is_some())
            .and_then(|m| m.id)
            .into_iter()
            .collect(),
    };
    serde_json::to_string(&ids).unwrap_or_default()
}

/// A POST's stream another node runs, followed here from the session's mirror.
struct Followed {
    cluster: Arc<Cluster>,
    /// The session's mirror's key.
    key: String,
    /// The session's id.
    session: String,
    /// The stream's number.
    stream: u64,
}

/// Follows a POST's stream another node runs, from its mirror, until its answer; if that
/// node is found dead first, answers each of the stream's requests with an error saying so,
/// once it claimed the stream's end in Redis ([`super::stream_end`]: that node, going on,
/// answers nothing more on it; if that node claimed the stream first, it lives, and the
/// follower goes on following). A stream its node ended unanswered (`mirrored.finished`)
/// is answered so only if another node did (that node found it out after). Its events are
/// counted in the session's budget as a live stream's are; where a live stream would be let
/// go, this one waits for its reader to take what it holds (the mirror keeps the rest).
async fn follow_mirror(followed: Followed, mut mirrored: Mirrored, reader: Feed) {
    let Followed {
        cluster,
        key,
        session,
        stream,
    } = &followed;
    let Some(redis) = cluster.store.redis() else {
        return;
    };
    if mirrored.finished {
        if redis.stream_lost(&cluster.metrics, session, *stream).await != Some(true) {
            return;
        }
    } else if !follow_until_lost(&followed, &mut mirrored, &reader).await {
        return;
    }
    // The requests whose answers the mirror held before their node went (an answer and the
    // stream's end may be mirrored apart) are answered already. The others' answers are
    // events of a stream of this node's own: numbered in the followed stream's count, they
    // would share their ids with what its node sent on it, going on (attack run 51, N3).
    // Mirrored as one whole stream, so that a resume from one of them is served anywhere.
    let own = cluster.next_stream(false);
    let unanswered: Vec<&RequestId> = mirrored.unanswered().collect();
    let events: Vec<SseEvent> = (1..)
        .zip(&unanswered)
        .map(|(count, id)| SseEvent {
            id: format!("{own}_{count}"),
            data: Arc::from(lost_answer(id, &Error::NodeLost)),
        })
        .collect();
    super::mirror::write_whole(cluster, key, own, &unanswered, &events).await;
    for event in events {
        if !hand_on(&reader, event).await {
            return;
        }
    }
}

/// Follows `followed` until its answer (false) or until its node is found dead and the
/// stream's end is claimed lost here, or found claimed lost by another follower (true; see
/// [`follow_mirror`]).
async fn follow_until_lost(followed: &Followed, mirrored: &mut Mirrored, reader: &Feed) -> bool {
    let Followed {
        cluster,
        key,
        session,
        stream,
    } = followed;
    let cursor = Cursor {
        stream: *stream,
        count: mirrored.count,
    };
    let node = super::mirror::node_of(*stream);
    loop {
        let Some(redis) = cluster.store.redis() else {
            return false;
        };
        let sent = mirrored.events.len();
        let Some(entries) = redis
            .read_events(&cluster.metrics, key, &mirrored.last, bridge::BEAT)
            .await
        else {
            // Redis away: the stream ends; the client may resume it again later.
            return false;
        };
        let quiet = entries.is_empty();
        mirrored.take(cursor, entries);
        for event in mirrored.events.drain(sent..) {
            if !hand_on(reader, event).await {
                return false;
            }
        }
        if mirrored.gap {
            // A mirror write was dropped: the stream ends here, and the client's resume
            // from its last event is refused rather than given the events after the gap.
            return false;
        }
        if reader.is_unread() {
            return false;
        }
        if mirrored.finished {
            // Finished with requests unanswered: by its node's end of a stream another
            // follower claimed lost. Those are answered -32031 here too, as on a resume of
            // the stream finished (review 55 #9: this follower ended without an answer).
            return mirrored.unanswered().next().is_some()
                && redis.stream_lost(&cluster.metrics, session, *stream).await == Some(true);
        }
        if quiet && cluster.found_dead(node).await {
            let ttl = stream_end::lost_ttl(&cluster.settings);
            match redis
                .claim_stream_lost(&cluster.metrics, session, *stream, ttl)
                .await
            {
                Some(true) => return true,
                // Its node claimed it since its stall: it lives, and mirrors its answers.
                Some(false) => {}
                // Redis away: no answer here (its node may go on and answer); the stream
                // ends, and the client may resume it again later.
                None => return false,
            }
        }
    }
}

/// How often a follower whose reader has no room for its next event looks again.
const FOLLOWER_WAIT: Duration = Duration::from_millis(50);

/// Hands a followed stream's `event` to its reader once there is room for it; false once
/// the reader is gone.
async fn hand_on(reader: &Feed, mut event: SseEvent) -> bool {
    loop {
        match reader.offer(event) {
            Ok(()) => return true,
            Err((Refused::Unread, _)) => return false,
            Err((Refused::Full | Refused::OverBudget, refused)) => event = refused,
        }
        tokio::time::sleep(FOLLOWER_WAIT).await;
    }
}

/// How long a node keeps an idle copy of a session that lives in Redis, at most (a tenth
/// of `http_idle_timeout_ms`, 300 s by default, below it).
const COPY_IDLE: Duration = Duration::from_secs(30);

/// How long a resume on another node waits for the stream's node to mirror what the client
/// already has.
const MIRROR_PATIENCE: Duration = Duration::from_secs(1);

/// Whether a client message that needed no answer may concern another node (sessions in
/// Redis): an answer to a server's request (`result` or `error`), or a cancel. Other
/// notifications (`notifications/initialized`, roots changes) are served where they land.
fn travels(text: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Message<'a> {
        #[serde(default)]
        method: Option<&'a str>,
    }
    let concerns = |m: Message<'_>| m.method.is_none_or(|m| m == "notifications/cancelled");
    match text.trim_start().as_bytes().first() {
        Some(b'[') => serde_json::from_str::<Vec<Message<'_>>>(text)
            .map(|all| all.into_iter().any(concerns))
            .unwrap_or(true),
        _ => serde_json::from_str::<Message<'_>>(text).map_or(true, concerns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_ids_of_a_post_are_read_whatever_its_escapes() {
        assert_eq!(
            request_ids(r#"{"jsonrpc":"2.0","id":4,"method":"tools\/call","params":{}}"#),
            "[4]"
        );
        assert_eq!(
            request_ids(
                r#"[{"jsonrpc":"2.0","id":"a","method":"ping"},
                    {"jsonrpc":"2.0","method":"notifications\/initialized"},
                    {"jsonrpc":"2.0","id":9,"result":{}}]"#
            ),
            r#"["a"]"#
        );
    }
}
