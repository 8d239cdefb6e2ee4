//! The protocol core of one session, independent of how frames travel: it takes text
//! messages in, drains its [`Inbox`] (worker outcomes, progress, log lines, client requests,
//! list changes), and writes frames out through an [`Outlet`]. The WebSocket actor
//! (`transport::ws`) and the in-memory actor (`transport::memory`) host this same core.
//!
//! It owns the session's lifecycle (awaiting `initialize`, then ready with the negotiated
//! version and the client's capabilities), the map of requests in flight (each in a worker
//! actor), the batches still being collected, and the requests it sent the client on behalf
//! of its tools. A worker's outcome or progress for an id that is no longer in flight
//! (cancelled, or the session is gone) is dropped here, which is what makes "no response
//! after cancel" hold.
//!
//! Every incoming message is an *exchange* (the host numbers them): a frame on a WebSocket,
//! a POST over HTTP. Each outgoing frame names its [`Route`]: the final answer of an
//! exchange, a message during one (progress, a log line, a client request of a tool the
//! exchange started), or a message of the session as a whole (list changes). A host with one
//! socket writes them all to it; a host with several streams routes them.

mod dispatch;
mod era;
mod pump;
pub mod record;
pub mod replay;
pub mod shape;
pub mod shared;
mod stateless;

pub use pump::{InboxPump, SessionHost};

use crate::cluster::dedup::recent::{RecentResponses, RequestHash};
use crate::context::SessionInfo;
use crate::mailbox::inbox::{
    Changes, ClientError, ClientRequest, Inbox, RequestSerial, SessionEvent,
};
use crate::observe::access::{Clean, Outcome, RequestRecord, SessionFields};
use crate::perimeter::rate::SessionBucket;
use crate::perimeter::Admission;
use crate::protocol::jsonrpc::{
    self, decode_with, encode_batch, encode_error, encode_notification, encode_result, Decoded,
    Notification, RequestId,
};
use crate::protocol::mcp::{
    bound_answer, notifications, CallToolParams, CancelledParams, Error, LoggingMessageParams,
    Method, ProgressParams, ProgressToken, ProtocolVersion, RawParamsHead, RequestMeta,
};
use crate::registry::bus::BusRegistration;
use crate::session::shared::{SessionId, Shared};
use crate::worker::WorkerHandle;
use era::Era;
use serde::Serialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::{hash_map, HashMap};
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::oneshot;

use crate::FastHash;

/// Messages as this server decodes them: `tools/call` params parsed in the envelope's pass.
pub type Message<'a> = jsonrpc::Decoded<'a, CallToolParams<'a>>;
/// One entry of a [`Message`].
pub type Entry<'a> = jsonrpc::Entry<'a, CallToolParams<'a>>;
/// A request of a [`Message`].
pub type Request<'a> = jsonrpc::Request<'a, CallToolParams<'a>>;

/// A request with the head of its raw params read ([`RawParamsHead`]): `_meta`, what it
/// acts on, a `tools/call`'s arguments. A host that looks at a request before the session
/// does (a 2026-07-28 POST, whose headers must agree with its body) reads it once with
/// [`of`](Self::of) and hands it to [`Session::on_read_request`].
pub struct ReadRequest<'a> {
    /// The request.
    pub request: Request<'a>,
    /// The head of its params, as far as it reads.
    head: Head<'a>,
}

/// What a [`ReadRequest`] read of its params' head. Whether it did not read is kept, the
/// reason read again when it is asked for: a `serde_json::Error` kept here gave every
/// request's drop a branch and a call (+16 instructions a request), and a flag beside the
/// head made every request's move longer. This takes no more room than an `Option` of the
/// head.
enum Head<'a> {
    /// Params not kept raw, none, or not an object.
    None,
    /// Raw params, an object whose head reads.
    Read(RawParamsHead<'a>),
    /// Raw params, an object whose head does not read ([`RawParamsHead::read`]).
    Unreadable,
}

const _: () = assert!(size_of::<Head<'_>>() == size_of::<Option<RawParamsHead<'_>>>());

/// Longest text a client may describe itself with: an `initialize`'s params, and each of a
/// 2026-07-28 request's `clientInfo` and `clientCapabilities`. What it says is kept for as
/// long as its session or connection lives (and in a session's record in Redis), so it is
/// bounded well below the message limit; real clients send a few hundred bytes.
pub(crate) const MAX_CLIENT_DESCRIPTION_BYTES: usize = 64 * 1024;

impl<'a> ReadRequest<'a> {
    /// Reads the head of `request`'s params, if the decoder kept them raw.
    pub fn of(request: Request<'a>) -> Self {
        let head = match request.params {
            jsonrpc::Params::Raw(raw) => match RawParamsHead::read(raw) {
                Ok(Some(head)) => Head::Read(head),
                Ok(None) => Head::None,
                Err(_) => Head::Unreadable,
            },
            jsonrpc::Params::Parsed(_) => Head::None,
        };
        Self { request, head }
    }

    /// Its `_meta`, if it has one that reads.
    pub fn meta(&self) -> Option<&RequestMeta<'a>> {
        match &self.request.params {
            jsonrpc::Params::Parsed(call) => call.meta.as_deref(),
            jsonrpc::Params::Raw(_) => self.head().and_then(|head| head.meta.as_ref()),
        }
    }

    /// Why its params, an object, do not read (a member named twice), if they do not.
    pub fn unreadable(&self) -> Option<serde_json::Error> {
        match (&self.head, &self.request.params) {
            (Head::Unreadable, jsonrpc::Params::Raw(raw)) => RawParamsHead::read(*raw).err(),
            _ => None,
        }
    }

    fn head(&self) -> Option<&RawParamsHead<'a>> {
        match &self.head {
            Head::Read(head) => Some(head),
            Head::None | Head::Unreadable => None,
        }
    }

    /// What it acts on (the tool, prompt, resource or task), if its method names one
    /// ([`Method::target`]) and the member is a string.
    pub fn target(&self) -> Option<Cow<'_, str>> {
        match &self.request.params {
            jsonrpc::Params::Parsed(call) => Some(Cow::Borrowed(call.name.as_ref())),
            jsonrpc::Params::Raw(_) => {
                let method = Method::parse(&self.request.method)?;
                self.head()?.target(method)
            }
        }
    }

    /// A `tools/call`'s arguments, raw.
    pub fn arguments(&self) -> Option<&'a RawValue> {
        match &self.request.params {
            jsonrpc::Params::Parsed(call) => call.arguments,
            jsonrpc::Params::Raw(_) => self.head().and_then(|head| head.arguments),
        }
    }
}

/// Where an outgoing frame belongs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The final answer of this exchange (a response, or a batch's array).
    Answer(u64),
    /// A message sent while this exchange's requests run (progress, a log line, a request
    /// to the client).
    During(u64),
    /// A message of the session, tied to no exchange (list changes, resource updates).
    Session,
}

/// What carries the session's frames out. Implemented by each host.
pub trait Outlet {
    /// Sends one frame.
    fn send(&mut self, frame: String, route: Route);

    /// Exchange `exchange` is over without an answer (its requests were cancelled): hosts that
    /// answer each exchange on its own close it. Hosts with one socket have nothing to do.
    fn close(&mut self, _exchange: u64) {}

    /// Batch exchange `exchange` has requests: it owes an answer even if each is cancelled
    /// before the batch's message is read to its end (an HTTP host then closes it with an
    /// empty stream, not 202). A single request's host knows it from [`Intake::Pending`].
    fn owes_answer(&mut self, _exchange: u64) {}

    /// The answer about to be sent for `exchange` is an error of a 2026-07-28 request that its
    /// HTTP binding gives this status (400, 404). Hosts without statuses ignore it.
    fn status(&mut self, _exchange: u64, _status: u16) {}
}

/// What became of an incoming message, for hosts that answer each message on its own
/// (HTTP: 202, a JSON body, or a stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intake {
    /// It needs no answer (notifications and responses only).
    Silent,
    /// Its answer was sent already (`Route::Answer`).
    Answered,
    /// Its answer comes later, as `Route::Answer`, unless a cancel drops it.
    Pending,
}

/// The protocol core of one session; see the module docs.
pub struct Session {
    shared: Arc<Shared>,
    /// Server-unique, for logs.
    id: u64,
    phase: Phase,
    inbox: Rc<Inbox>,
    /// Bounded by `max_in_flight_per_session`, so a fast hasher is safe from flooding.
    in_flight: HashMap<RequestId, InFlight, FastHash>,
    /// The serial of the last request started in a worker (see [`RequestSerial`]).
    last_serial: RequestSerial,
    /// Batches, requests to the client, subscriptions and listen streams, once there is one.
    occasional: Option<Box<Occasional>>,
    /// Set on shutdown: no new requests, in-flight ones may finish.
    draining: bool,
    /// Whether `shared_id` is a WebSocket resume id, announced in the `initialize` result
    /// (an HTTP session's is in a header).
    announce_id: bool,
    /// The session's place in the change fan-out, once initialized.
    bus: Option<BusRegistration>,
    /// The id every node knows this session by (an HTTP session's `Mcp-Session-Id`, a
    /// resumable WebSocket session's resume id): an anonymous client's idempotency keys are
    /// scoped to it, so its retry on another node finds its key.
    shared_id: Option<SessionId>,
    /// Who the client is and where from, as the perimeter admitted it.
    admission: Admission,
    /// The admission's fields of this session's access lines, rendered once.
    access_fields: SessionFields,
    /// The rate limiter's bucket for that client, kept from its first request on.
    rate_bucket: SessionBucket,
    /// Serves 2026-07-28 requests only (a host for one HTTP request of that revision): a
    /// request without its `_meta` is malformed, not a session-era one.
    stateless_only: bool,
    /// The one protocol version the connection's client chose up front (a WebSocket
    /// `mcp.version.<v>` subprotocol): requests of any other version are refused.
    pinned: Option<ProtocolVersion>,
    /// Whether every request's params are kept raw by the decoder (its requests are signed).
    raw_params: bool,
    /// The `tools/call` requests this session finished, by id, for retries.
    recent: RecentResponses,
    /// Changes of what a [`record::SessionRecord`] holds (initialize, setLevel,
    /// subscriptions), so its host knows when to tell the other nodes.
    revision: u64,
    /// The tools this session called (its identity's versions), while the tools stand still;
    /// none for a session of one request.
    tool_cache: Option<crate::registry::ToolCache>,
    /// The `clientInfo` of the last 2026-07-28 request.
    last_client_info: stateless::LastParsed<crate::model::Implementation>,
    /// The `clientCapabilities` of the last 2026-07-28 request.
    last_client_capabilities: stateless::LastParsed<serde_json::Value>,
    /// The `SessionInfo` of the last 2026-07-28 request.
    last_stateless_info: std::cell::Cell<Option<Rc<SessionInfo>>>,
    /// The slots of the global pool its requests hold (its fair share, see `worker::Pool`).
    pool_share: crate::worker::PoolShare,
}

/// What few sessions hold, allocated on first use: every WebSocket connection's actor holds
/// its [`Session`] inline, and an idle one's actor fits a smaller size class of the
/// allocator without these (benches/README.md, "An idle session's actor in 1 KiB").
#[derive(Default)]
struct Occasional {
    /// Batches not yet answered in full, by the session's own number.
    batches: HashMap<u64, PendingBatch, FastHash>,
    /// The number the next batch gets.
    next_batch: u64,
    /// Requests sent to the client for tools, by the server's id.
    client_requests: HashMap<u64, PendingClientRequest, FastHash>,
    /// The resource URIs a session-era client subscribed to.
    subscriptions: std::collections::HashSet<String>,
    /// Open `subscriptions/listen` streams (2026-07-28), by the listen request's id. Their
    /// resource URIs and task ids count with `subscriptions` against
    /// `limits.max_subscriptions_per_session`.
    listeners: HashMap<RequestId, Listener, FastHash>,
    /// On a connection that speaks both eras: its identity's view changes, for its
    /// 2026-07-28 listens, beside `bus` (the session's views).
    identity_views: Option<BusRegistration>,
}

enum Phase {
    AwaitingInit,
    Ready(Negotiated),
}

/// What `initialize` settled for this session.
struct Negotiated {
    version: ProtocolVersion,
    /// The kinds declared to this session in `initialize`.
    offers: crate::protocol::mcp::Offers,
    /// What every request of the session knows of it, shared by them.
    info: Rc<SessionInfo>,
}

/// A request's progress token as its entry in flight holds it. Boxed, with the request's
/// idempotency key, rather than the key kept in every entry: few requests carry a token,
/// and an entry's size is moved on every request (a key in each entry cost every request
/// 17 instructions, callgrind).
struct HeldToken {
    token: ProgressToken,
    /// The request's idempotency key (scoped), if it carries one: a request of the same key
    /// joins this one's run, and may share its token.
    key: Option<crate::cluster::store::Key>,
}

/// A request running in a worker.
struct InFlight {
    worker: WorkerHandle,
    /// Which request of its id (the events of an earlier one of the same id are not its).
    serial: RequestSerial,
    progress_token: Option<Box<HeldToken>>,
    /// The exchange the request came in.
    exchange: u64,
    /// The batch whose response array this request's response joins.
    batch: Option<u64>,
    /// A 2026-07-28 request (its log lines were filtered by its own level already).
    stateless: bool,
    /// Set when its response is to be remembered by id (see `RecentResponses`).
    replay: Option<RequestHash>,
    /// Its latency and access-log line, finished with its answer or cancel.
    record: RequestRecord,
}

/// An open `subscriptions/listen` stream (2026-07-28).
struct Listener {
    /// The exchange it came in, where its notifications go.
    exchange: u64,
    /// What it asked for and the server honours.
    filter: stateless::ListenFilter,
    /// `{"io.modelcontextprotocol/subscriptionId":<id>}`, tagging its notifications.
    tag: String,
}

/// A batch answered once all its requests are done.
struct PendingBatch {
    pending: usize,
    responses: Vec<String>,
    /// The ids of the entries in `responses`: requests answered, the answer not yet sent
    /// (a record lists them, and a resume counts them as awaited, like requests running).
    answered: Vec<RequestId>,
    exchange: u64,
}

/// A request sent to the client on behalf of a tool, waiting for the client's response.
struct PendingClientRequest {
    reply: oneshot::Sender<Result<serde_json::Value, ClientError>>,
    exchange: u64,
}

/// How a request was answered.
enum Reply {
    Now(String),
    /// A worker runs it; its response comes as a `SessionEvent::Finished`.
    Later,
    Silent,
}

impl Session {
    /// The client's address (after the trusted proxies), as admitted.
    pub fn peer(&self) -> Option<std::net::IpAddr> {
        self.admission.peer
    }

    /// A new session for a client the perimeter admitted, awaiting `initialize`.
    pub fn new(shared: Arc<Shared>, id: u64, admission: Admission) -> Self {
        Self::with_parse_caches(shared, id, admission, stateless::ParseCaches::default())
    }

    /// A session for one stateless 2026-07-28 request (its host ends with it). Its `_meta`
    /// parse caches are its thread's, shared with the other such sessions, so a client that
    /// repeats its `clientInfo` and capabilities (all do) has them parsed once, not per
    /// request.
    pub fn stateless(shared: Arc<Shared>, id: u64, admission: Admission) -> Self {
        let mut session =
            Self::with_parse_caches(shared, id, admission, stateless::stateless_parse_caches());
        session.stateless_only = true;
        // Its one request is never followed by another: nothing to cache or replay (an
        // idempotency key still works: that store is the server's, not the session's).
        session.tool_cache = None;
        session.recent = RecentResponses::disabled();
        session
    }

    fn with_parse_caches(
        shared: Arc<Shared>,
        id: u64,
        admission: Admission,
        (last_client_info, last_client_capabilities): stateless::ParseCaches,
    ) -> Self {
        let limits = &shared.settings.limits;
        let inbox = Rc::new(Inbox::new(
            limits.max_queued_notifications,
            limits.max_queued_notification_bytes,
        ));
        inbox.set_log_level(shared.client_log_level);
        inbox.set_client_request_limit(shared.settings.limits.max_in_flight_per_session);
        let raw_params = shared.guard.needs_raw_params(&admission);
        let recent = RecentResponses::new(&shared.settings.dedup);
        let admission_peer = admission.peer;
        Self {
            shared,
            id,
            phase: Phase::AwaitingInit,
            inbox,
            in_flight: HashMap::default(),
            last_serial: 0,
            occasional: None,
            draining: false,
            announce_id: false,
            bus: None,
            shared_id: None,
            admission,
            access_fields: SessionFields::default(),
            rate_bucket: SessionBucket::default(),
            stateless_only: false,
            pinned: None,
            raw_params,
            recent,
            tool_cache: Some(Default::default()),
            revision: 0,
            last_client_info,
            last_client_capabilities,
            last_stateless_info: Default::default(),
            pool_share: crate::worker::PoolShare::of_client(
                admission_peer.map(crate::perimeter::connections::client_key),
            ),
        }
    }

    /// Serves `version` only, as the client chose when it connected: a 2026-07-28 pin makes
    /// every request a 2026-07-28 one (as a [`stateless`](Self::stateless) session serves), a
    /// session-era pin is what `initialize` negotiates, whatever the client asks, and
    /// refuses 2026-07-28 requests (-32022).
    pub fn pin_version(&mut self, version: ProtocolVersion) {
        self.pinned = Some(version);
        if version.is_stateless() {
            self.stateless_only = true;
        }
    }

    /// Sets the id the client resumes this session with (announced in `initialize`).
    pub fn set_resume_id(&mut self, id: SessionId) {
        self.shared_id = Some(id);
        self.announce_id = true;
    }

    /// Sets the id every node knows this session by (an HTTP session's).
    pub fn set_shared_id(&mut self, id: SessionId) {
        self.shared_id = Some(id);
    }

    /// The session's inbox, for its host's [`InboxPump`].
    pub fn inbox(&self) -> &Rc<Inbox> {
        &self.inbox
    }

    /// Handles one complete text message (a single JSON-RPC message or a batch), which is
    /// exchange `exchange` of its host.
    pub fn on_text(&mut self, text: &str, exchange: u64, out: &mut dyn Outlet) -> Intake {
        let message = decode_with(text, self.shared.guard.frame_limits(), !self.raw_params);
        self.on_message(message, exchange, out)
    }

    /// Decodes a text message as a session of a client admitted as `admission` does, for a
    /// host that looks at it before the session takes it with [`on_message`](Self::on_message)
    /// (a 2026-07-28 POST, whose headers must agree with its body), so it is read once.
    pub fn decode<'t>(shared: &Shared, admission: &Admission, text: &'t str) -> Message<'t> {
        decode_with(
            text,
            shared.guard.frame_limits(),
            !shared.guard.needs_raw_params(admission),
        )
    }

    /// Handles a message [`decode`](Self::decode)d for this session's client, as
    /// [`on_text`](Self::on_text) handles its text.
    pub fn on_message(
        &mut self,
        message: Message<'_>,
        exchange: u64,
        out: &mut dyn Outlet,
    ) -> Intake {
        match message {
            Decoded::Rejected(error) => {
                self.shared.metrics.rejections.count_wire(&error);
                out.send(
                    encode_error(None, &error.to_object()),
                    Route::Answer(exchange),
                );
                Intake::Answered
            }
            Decoded::Single(entry) => {
                let reply = self.on_entry(entry, exchange, None, out);
                Self::intake(reply, exchange, out)
            }
            Decoded::Batch(entries) => self.on_batch(entries, exchange, out),
        }
    }

    /// Handles a single request its host has [read](ReadRequest::of) already, as
    /// [`on_message`](Self::on_message) handles it decoded.
    pub fn on_read_request(
        &mut self,
        read: ReadRequest<'_>,
        exchange: u64,
        out: &mut dyn Outlet,
    ) -> Intake {
        let reply = self.on_request(read, exchange, None, out);
        Self::intake(reply, exchange, out)
    }

    /// What became of a single message, given its reply: an answer now goes out.
    fn intake(reply: Reply, exchange: u64, out: &mut dyn Outlet) -> Intake {
        match reply {
            Reply::Now(frame) => {
                out.send(frame, Route::Answer(exchange));
                Intake::Answered
            }
            Reply::Later => Intake::Pending,
            Reply::Silent => Intake::Silent,
        }
    }

    /// Entries run concurrently (inline ones answer at once, others start workers); the
    /// array goes out when the last one is done, and not at all if none needs an answer.
    ///
    /// The batch is registered before its first entry runs, holding one count for the loop
    /// itself, so an entry that settles another at once (a cancel of a request earlier in the
    /// same batch) finds it; the loop's own count is released last, the same way.
    fn on_batch(&mut self, entries: Vec<Entry<'_>>, exchange: u64, out: &mut dyn Outlet) -> Intake {
        let occasional = self.occasional_mut();
        let batch = occasional.next_batch;
        occasional.next_batch += 1;
        occasional.batches.insert(
            batch,
            PendingBatch {
                pending: 1,
                responses: Vec::new(),
                answered: Vec::new(),
                exchange,
            },
        );
        if entries
            .iter()
            .any(|entry| matches!(entry, Entry::Request(_)))
        {
            out.owes_answer(exchange);
        }
        let mut answers = false;
        for entry in entries {
            let id = match &entry {
                Entry::Request(request) => Some(request.id.clone()),
                Entry::Invalid { id, .. } => id.clone(),
                Entry::Notification(_) | Entry::Response { .. } | Entry::Dropped { .. } => None,
            };
            let reply = self.on_entry(entry, exchange, Some(batch), out);
            let pending = self
                .occasional_mut()
                .batches
                .get_mut(&batch)
                .expect("the loop's own count keeps its batch registered");
            match reply {
                Reply::Now(frame) => {
                    answers = true;
                    pending.responses.push(frame);
                    pending.answered.extend(id);
                }
                Reply::Later => {
                    answers = true;
                    pending.pending += 1;
                }
                Reply::Silent => {}
            }
        }
        let done = self.batch_entry_done(batch, None, out);
        match (answers, done) {
            (false, _) => Intake::Silent,
            (true, true) => Intake::Answered,
            (true, false) => Intake::Pending,
        }
    }

    fn on_entry(
        &mut self,
        entry: Entry<'_>,
        exchange: u64,
        batch: Option<u64>,
        out: &mut dyn Outlet,
    ) -> Reply {
        match entry {
            Entry::Request(request) => {
                self.on_request(ReadRequest::of(request), exchange, batch, out)
            }
            Entry::Notification(notification) => {
                self.on_notification(notification, out);
                Reply::Silent
            }
            Entry::Response { id, outcome } => {
                self.on_client_response(id, outcome);
                Reply::Silent
            }
            Entry::Invalid { id, error } => {
                self.shared.metrics.rejections.count_wire(&error);
                Reply::Now(encode_error(id.as_ref(), &error.to_object()))
            }
            Entry::Dropped { error } => {
                self.shared.metrics.rejections.count_wire(&error);
                tracing::debug!(session = self.id, %error, "a message that gets no answer; dropped");
                Reply::Silent
            }
        }
    }

    fn on_request(
        &mut self,
        read: ReadRequest<'_>,
        exchange: u64,
        batch: Option<u64>,
        out: &mut dyn Outlet,
    ) -> Reply {
        let request = &read.request;
        self.shared.metrics.requests.inc();
        let span = tracing::debug_span!(
            "request",
            session = self.id,
            id = %request.id,
            method = %request.method,
            identity = %Clean(self.admission.identity.subject()),
            trace = tracing::field::Empty,
        );
        let _entered = span.enter();
        // Its `_meta`, read once: the access line's trace id and the era both need it.
        let meta = read.meta();
        // Its latency and access-log line; taken by the worker's entry if one runs it.
        let record = RequestRecord::begin(
            &self.shared.redaction,
            &self.admission,
            &self.access_fields,
            request,
            meta,
            &span,
        );
        let started = record.started();
        let mut record = Some(record);
        let raw_params = match request.params {
            jsonrpc::Params::Raw(raw) => raw,
            jsonrpc::Params::Parsed(_) => None,
        };
        // A request naming a version in `_meta` is a 2026-07-28 one, served from its own
        // `_meta`; errors answering it take that revision's form.
        let era = self.stateless_request(request, meta, || read.unreadable());
        let is_stateless = !matches!(era, Ok(Era::Session));
        // A batch's entry counts as in flight until the batch's array is sent, its own
        // answer done or not: a request of its id meanwhile would be answered twice.
        let in_flight = self.in_flight.contains_key(&request.id)
            || self.is_listening(&request.id)
            || self.is_batched(&request.id);
        let outcome = if in_flight {
            Err(Error::DuplicateRequestId)
        } else if self.draining
            && !Method::parse(&request.method).is_some_and(Method::answered_while_draining)
        {
            // Only new work is refused: what starts none is still answered.
            Err(Error::ShuttingDown)
        } else {
            let metrics = &self.shared.metrics;
            match self.shared.guard.check(
                &self.admission,
                &request.method,
                raw_params,
                metrics,
                started,
                &self.rate_bucket,
            ) {
                Err(refused) => Err(refused),
                // A session-era request only: a 2026-07-28 request is its own (its `_meta`
                // checked, its rounds carried by `inputResponses` and `requestState`, its
                // answer in that revision's form), and its retries are keyed.
                Ok(passed) => match (!is_stateless)
                    .then(|| self.recent.replay(request))
                    .flatten()
                {
                    // A retry of a request this session finished: its response again.
                    Some(replayed) => {
                        match &replayed {
                            Ok(_) => metrics.dedup_hits.inc(),
                            Err(_) => metrics.dedup_conflicts.inc(),
                        }
                        replayed.map(Some)
                    }
                    None => match era.and_then(|era| self.route(request, era, exchange, batch)) {
                        Ok(dispatch::Dispatch::Inline(result)) => Ok(Some(result)),
                        Ok(dispatch::Dispatch::Worker(job)) => self
                            .start_worker(
                                request.id.clone(),
                                job,
                                passed,
                                exchange,
                                batch,
                                &mut record,
                            )
                            .map(|()| None),
                        Ok(dispatch::Dispatch::Listening(ack)) => {
                            out.send(ack, Route::During(exchange));
                            Ok(None)
                        }
                        Err(error) => Err(error),
                    },
                },
            }
        };
        if tracing::enabled!(tracing::Level::DEBUG) {
            tracing::debug!(
                elapsed_us = started.elapsed().as_micros() as u64,
                outcome = match &outcome {
                    Ok(Some(_)) => "ok",
                    Ok(None) => "started worker",
                    Err(_) => "error",
                },
                "request handled"
            );
        }
        let answered = Outcome::of(&outcome);
        let reply = match outcome {
            Ok(Some(result)) => Reply::Now(encode_result(&request.id, &result)),
            Ok(None) => Reply::Later,
            Err(error) if is_stateless => {
                if batch.is_none() {
                    out.status(exchange, error.http_status_stateless());
                }
                Reply::Now(encode_error(Some(&request.id), &error.to_wire_stateless()))
            }
            Err(error) => Reply::Now(encode_error(Some(&request.id), &error.to_wire())),
        };
        // Answered here (a worker took the record otherwise).
        if let Some(record) = record {
            record.finish(
                &self.shared.metrics,
                &self.admission,
                &self.access_fields,
                self.id,
                answered,
            );
        }
        reply
    }

    fn on_notification(&mut self, notification: Notification<'_>, out: &mut dyn Outlet) {
        match notification.method.as_ref() {
            // Requests are served once `initialize` is answered; the server sends no requests
            // of its own before the client's tools ask for them.
            notifications::INITIALIZED => {
                tracing::debug!(session = self.id, "notifications/initialized received")
            }
            notifications::CANCELLED => {
                match crate::protocol::mcp::parse_object::<CancelledParams<'_>>(notification.params)
                {
                    Ok(params) => match RequestId::from_raw(params.request_id) {
                        Some(id) => self.cancel(&id, out),
                        None => tracing::debug!(
                            session = self.id,
                            "cancel with an invalid requestId; ignored"
                        ),
                    },
                    Err(reason) => {
                        tracing::debug!(session = self.id, %reason, "malformed cancel; ignored")
                    }
                }
            }
            notifications::ROOTS_LIST_CHANGED => {
                tracing::debug!(session = self.id, "the client's roots changed");
            }
            other => tracing::debug!(session = self.id, method = other, "notification ignored"),
        }
    }

    /// A client's response to a request the server sent for a tool.
    fn on_client_response(&mut self, id: RequestId, outcome: Result<&RawValue, &RawValue>) {
        let pending = id
            .as_json()
            .parse::<u64>()
            .ok()
            .and_then(|server_id| self.occasional.as_mut()?.client_requests.remove(&server_id));
        let Some(pending) = pending else {
            tracing::debug!(session = self.id, id = %id, "response to no request of ours; dropped");
            return;
        };
        let answer = match outcome {
            // Already checked to be JSON by the decoder.
            Ok(result) => Ok(serde_json::from_str(result.get()).unwrap_or_default()),
            Err(error) => Err(client_error(error)),
        };
        // The tool may have stopped waiting meanwhile; then nobody needs the answer.
        let _ = pending.reply.send(answer);
    }

    /// Stops a request in flight; no response will be sent for it. Unknown or finished ids
    /// are ignored, as the spec asks (the cancel may cross the response on the wire).
    fn cancel(&mut self, id: &RequestId, out: &mut dyn Outlet) {
        if let Some(listener) = self
            .occasional
            .as_mut()
            .and_then(|o| o.listeners.remove(id))
        {
            self.forget_listener(&listener);
            tracing::debug!(session = self.id, id = %id, "listen stream cancelled");
            out.close(listener.exchange);
            return;
        }
        let Some(entry) = self.in_flight.remove(id) else {
            tracing::debug!(session = self.id, id = %id, "cancel for a request not in flight; ignored");
            return;
        };
        entry.worker.cancel();
        self.shared.metrics.workers.dec();
        self.shared.metrics.cancelled.inc();
        entry.record.finish(
            &self.shared.metrics,
            &self.admission,
            &self.access_fields,
            self.id,
            Outcome::Cancelled,
        );
        tracing::debug!(session = self.id, id = %id, "cancelled");
        match entry.batch {
            Some(batch) => {
                self.batch_entry_done(batch, None, out);
            }
            None => out.close(entry.exchange),
        }
    }

    /// Handles everything waiting in the inbox: worker events in order, then list changes
    /// and resource updates (one notification each, however many marks piled up).
    ///
    /// A list change is sent only for a kind declared to this session at `initialize`: a
    /// kind registered later is one the session cannot list (-32601), so its changes are
    /// none of its business.
    pub fn on_inbox(&mut self, out: &mut dyn Outlet) {
        while let Some(event) = self.inbox.take_event() {
            self.on_event(event, out);
        }
        self.inbox.flush_dropped(&self.shared.metrics);
        let changes = self.inbox.take_changes();
        let updated = self.inbox.take_updated();
        if self.inbox.take_tasks_missed() {
            self.reread_followed_tasks();
        }
        let tasks = self.inbox.take_task_notes();
        if !tasks.is_empty() {
            self.tasks_changed(&tasks, out);
        }
        if changes.is_empty() && updated.is_empty() {
            return;
        }
        // The session-era session: unsolicited, for the kinds declared to it.
        if let Phase::Ready(negotiated) = &self.phase {
            let offers = negotiated.offers;
            for (change, declared, method) in [
                (
                    Changes::TOOLS,
                    offers.tools,
                    notifications::TOOLS_LIST_CHANGED,
                ),
                (
                    Changes::RESOURCES,
                    offers.resources,
                    notifications::RESOURCES_LIST_CHANGED,
                ),
                (
                    Changes::PROMPTS,
                    offers.prompts,
                    notifications::PROMPTS_LIST_CHANGED,
                ),
            ] {
                if declared && changes.contains(change) {
                    out.send(encode_notification(method, &EmptyParams {}), Route::Session);
                }
            }
            for uri in updated.iter().filter(|u| self.is_subscribed(u)) {
                #[derive(Serialize)]
                struct Updated<'a> {
                    uri: &'a str,
                }
                out.send(
                    encode_notification(notifications::RESOURCES_UPDATED, &Updated { uri }),
                    Route::Session,
                );
            }
        }
        // 2026-07-28 listen streams: what each asked for, tagged with its id.
        for (_, listener) in self.listeners() {
            for method in listener.filter.changed(changes) {
                let frame = stateless::tagged(method, &listener.tag, None);
                out.send(frame, Route::During(listener.exchange));
            }
            for uri in updated.iter().filter(|u| listener.filter.watches(u)) {
                let frame =
                    stateless::tagged(notifications::RESOURCES_UPDATED, &listener.tag, Some(uri));
                out.send(frame, Route::During(listener.exchange));
            }
        }
    }

    fn on_event(&mut self, event: SessionEvent, out: &mut dyn Outlet) {
        match event {
            SessionEvent::Finished {
                id,
                serial,
                mut outcome,
            } => {
                // The entry of this request, not of a later one of the same id (one lookup:
                // this is every worker's answer).
                let (id, entry) = match self.in_flight.entry(id) {
                    hash_map::Entry::Occupied(entry) if entry.get().serial == serial => {
                        entry.remove_entry()
                    }
                    other => {
                        tracing::debug!(session = self.id, id = %other.key(), "dropping the result of a request no longer in flight");
                        return;
                    }
                };
                self.shared.metrics.workers.dec();
                bound_answer(&mut outcome, self.shared.settings.limits.max_message_bytes);
                let finished = entry.record.finish(
                    &self.shared.metrics,
                    &self.admission,
                    &self.access_fields,
                    self.id,
                    Outcome::of(&outcome),
                );
                // The id kept for a batch's list of answered entries (a copy, batches only).
                let batched = entry.batch.map(|batch| (batch, id.clone()));
                let frame = match outcome {
                    Ok(frame) => {
                        if let Some(fingerprint) = entry.replay {
                            let dedup = &self.shared.settings.dedup;
                            self.recent
                                .remember(dedup, id, fingerprint, &frame, finished);
                        }
                        frame
                    }
                    Err(error) if entry.stateless => {
                        if entry.batch.is_none() {
                            out.status(entry.exchange, error.http_status_stateless());
                        }
                        encode_error(Some(&id), &error.to_wire_stateless())
                    }
                    Err(error) => encode_error(Some(&id), &error.to_wire()),
                };
                match batched {
                    None => out.send(frame, Route::Answer(entry.exchange)),
                    Some((batch, id)) => {
                        self.batch_entry_done(batch, Some((id, frame)), out);
                    }
                }
            }
            SessionEvent::Progress {
                id,
                serial,
                progress,
                total,
                message,
            } => {
                // Only for a request still in flight that asked for progress: never after
                // its response, never after a cancel.
                if let Some(InFlight {
                    progress_token: Some(held),
                    exchange,
                    stateless,
                    ..
                }) = self.in_flight.get(&id).filter(|e| e.serial == serial)
                {
                    // `message` appeared in 2025-03-26; a 2026-07-28 request has it whatever
                    // the connection's session negotiated (or whether it has one).
                    let has_message = *stateless
                        || self
                            .negotiated_version()
                            .is_some_and(|v| v.has_progress_messages());
                    let params = ProgressParams {
                        progress_token: held.token.as_raw(),
                        progress,
                        total,
                        message: message.as_deref().filter(|_| has_message),
                    };
                    let frame = encode_notification(notifications::PROGRESS, &params);
                    self.send_notification(frame, Route::During(*exchange), out);
                }
            }
            SessionEvent::Log {
                id,
                serial,
                level,
                logger,
                data,
            } => {
                if let Some(entry) = self.in_flight.get(&id).filter(|e| e.serial == serial) {
                    // A 2026-07-28 request's lines were filtered by its own level.
                    if entry.stateless || level >= self.inbox.log_level() {
                        let params = LoggingMessageParams {
                            level,
                            logger: logger.as_deref(),
                            data: &data,
                        };
                        let frame = encode_notification(notifications::MESSAGE, &params);
                        self.send_notification(frame, Route::During(entry.exchange), out);
                    }
                }
            }
            SessionEvent::ClientRequest(request) => self.send_client_request(request, out),
            SessionEvent::ClientRequestAbandoned { server_id, reason } => {
                let abandoned = self
                    .occasional
                    .as_mut()
                    .and_then(|o| o.client_requests.remove(&server_id));
                if let Some(pending) = abandoned {
                    #[derive(Serialize)]
                    #[serde(rename_all = "camelCase")]
                    struct Cancelled<'a> {
                        request_id: u64,
                        reason: &'a str,
                    }
                    out.send(
                        encode_notification(
                            notifications::CANCELLED,
                            &Cancelled {
                                request_id: server_id,
                                reason,
                            },
                        ),
                        Route::During(pending.exchange),
                    );
                }
            }
        }
    }

    /// Sends a tool's request to the client, on the stream of the exchange the tool runs
    /// for, and remembers where its answer goes.
    fn send_client_request(&mut self, request: ClientRequest, out: &mut dyn Outlet) {
        let ClientRequest {
            server_id,
            on_behalf_of,
            serial,
            method,
            params,
            reply,
        } = request;
        let Some(entry) = self
            .in_flight
            .get(&on_behalf_of)
            .filter(|entry| entry.serial == serial)
        else {
            // The tool's own request is over; nobody waits for this answer.
            let _ = reply.send(Err(ClientError::Disconnected));
            return;
        };
        #[derive(Serialize)]
        struct Outgoing<'a> {
            jsonrpc: &'static str,
            id: u64,
            method: &'a str,
            params: &'a serde_json::Value,
        }
        let frame = serde_json::to_string(&Outgoing {
            jsonrpc: "2.0",
            id: server_id,
            method,
            params: &params,
        })
        .unwrap_or_default();
        let exchange = entry.exchange;
        self.occasional_mut()
            .client_requests
            .insert(server_id, PendingClientRequest { reply, exchange });
        out.send(frame, Route::During(exchange));
    }

    /// Sends a request's notification (a log line, a progress report), or drops it, counted,
    /// when its message would be over `limits.max_message_bytes`: a tool's data or message
    /// of any size went out, past what clients take (the official Python SDK closes its
    /// connection past 1 MiB; this server's own gateway client refuses a message over its
    /// limit), and past what a client that does not read should make the server hold.
    fn send_notification(&self, frame: String, route: Route, out: &mut dyn Outlet) {
        if frame.len() > self.shared.settings.limits.max_message_bytes {
            self.shared.metrics.dropped.oversized_notifications.inc();
            return;
        }
        out.send(frame, route);
    }

    /// Settles one entry of a batch; sends the array when it was the last. Says whether the
    /// batch is done.
    fn batch_entry_done(
        &mut self,
        batch: u64,
        answer: Option<(RequestId, String)>,
        out: &mut dyn Outlet,
    ) -> bool {
        let Some(occasional) = self.occasional.as_mut() else {
            return true;
        };
        let hash_map::Entry::Occupied(mut slot) = occasional.batches.entry(batch) else {
            return true;
        };
        let pending = slot.get_mut();
        pending.pending -= 1;
        if let Some((id, frame)) = answer {
            pending.answered.push(id);
            pending.responses.push(frame);
        }
        if pending.pending > 0 {
            return false;
        }
        let done = slot.remove();
        if done.responses.is_empty() {
            out.close(done.exchange);
        } else {
            out.send(encode_batch(&done.responses), Route::Answer(done.exchange));
        }
        true
    }

    /// Shutdown began: refuse new work (what starts none is still answered), let the
    /// requests in flight finish, and end the listen streams gracefully (their result says
    /// so, and that they closed cleanly).
    pub fn begin_drain(&mut self, out: &mut dyn Outlet) {
        self.draining = true;
        for (id, listener) in self.take_listeners() {
            self.forget_listener(&listener);
            let result = self.stateless_result("{}", "", Some(&stateless::tag_value(&id)));
            out.send(
                encode_result(&id, &result),
                Route::Answer(listener.exchange),
            );
        }
    }

    /// The connection is gone while its session-era session is kept for a reconnect: the
    /// 2026-07-28 requests it carried are not kept with it (that revision has no resumption:
    /// a lost connection loses its requests and listens, and the client sends them again).
    /// Their workers are cancelled and their listen streams end, without an answer.
    pub fn end_stateless_requests(&mut self, out: &mut dyn Outlet) {
        let stateless: Vec<RequestId> = self
            .in_flight
            .iter()
            .filter(|(_, entry)| entry.stateless)
            .map(|(id, _)| id.clone())
            .collect();
        for id in stateless {
            self.cancel(&id, out);
        }
        for (_, listener) in self.take_listeners() {
            self.forget_listener(&listener);
        }
    }

    /// Whether `id` is a request of a batch still collecting its answers (see
    /// [`batched_answer_ids`](Self::batched_answer_ids)): one load for a session without
    /// batches under way.
    fn is_batched(&self, id: &RequestId) -> bool {
        let batching = self
            .occasional
            .as_ref()
            .is_some_and(|occasional| !occasional.batches.is_empty());
        batching && self.batched_answer_ids().any(|answered| answered == id)
    }

    /// The requests of batches still collecting their answers whose own answer is done
    /// and waits for the others': owed to the client as surely as one still running.
    pub fn batched_answer_ids(&self) -> impl Iterator<Item = &RequestId> {
        self.occasional
            .iter()
            .flat_map(|occasional| occasional.batches.values())
            .flat_map(|batch| batch.answered.iter())
    }

    /// Whether requests are still running.
    pub fn has_work_in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// How many requests are running.
    pub fn requests_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The ids of the requests running, each to be answered in time.
    pub fn in_flight_ids(&self) -> impl Iterator<Item = &RequestId> {
        self.in_flight.keys()
    }

    /// Whose session this is: its client's principal, with the access its credential grants
    /// (what another connection must cover to resume it).
    pub fn owner(&self) -> crate::perimeter::Owner {
        crate::perimeter::Owner::of(&self.admission)
    }

    /// Whether `initialize` was answered.
    pub fn is_initialized(&self) -> bool {
        matches!(self.phase, Phase::Ready(_))
    }

    /// Whether the session holds something that ends with it on this node (a `per_session`
    /// upstream's child, whose state its client counts on: see
    /// [`SessionScope::has_end_work`](crate::context::SessionScope::has_end_work)).
    pub fn holds_what_ends_with_it(&self) -> bool {
        match &self.phase {
            Phase::Ready(n) => n.info.scope.as_ref().is_some_and(|s| s.has_end_work()),
            Phase::AwaitingInit => false,
        }
    }

    /// The version `initialize` settled, once it was answered.
    pub fn negotiated_version(&self) -> Option<ProtocolVersion> {
        match &self.phase {
            Phase::Ready(n) => Some(n.version),
            Phase::AwaitingInit => None,
        }
    }

    /// The session's connection is about to close (the shutdown grace ran out, or its
    /// credential expired): every request still in flight is stopped and answered with
    /// `error` (a batch's entry joins its batch's answer), so that no request the session
    /// accepted goes unanswered before the close. Requests sent to the client fail first, as
    /// in [`cancel_all`](Self::cancel_all).
    pub fn answer_all_with(&mut self, error: &Error, out: &mut dyn Outlet) {
        // What workers posted and the session has not taken yet goes first: a request whose
        // work is done (its effects made) gets its own answer, not `error`.
        while let Some(event) = self.inbox.take_event() {
            self.on_event(event, out);
        }
        self.fail_client_requests();
        // Open listen streams are requests too: each gets the error as its answer.
        for (id, listener) in self.take_listeners() {
            self.forget_listener(&listener);
            out.send(
                encode_error(Some(&id), &error.to_wire_stateless()),
                Route::Answer(listener.exchange),
            );
        }
        let running: Vec<(RequestId, RequestSerial)> = self
            .in_flight
            .iter()
            .map(|(id, entry)| (id.clone(), entry.serial))
            .collect();
        for (id, serial) in running {
            if let Some(entry) = self.in_flight.get(&id) {
                entry.worker.cancel();
                self.shared.metrics.cancelled.inc();
            }
            // Answered as the worker would have been; what the worker still posts for this
            // id finds it no longer in flight and is dropped.
            self.on_event(
                SessionEvent::Finished {
                    id,
                    serial,
                    outcome: Err(error.clone()),
                },
                out,
            );
        }
    }

    /// Fails every request sent to the client for a tool with "disconnected": the connection
    /// is going, no answer can come.
    fn fail_client_requests(&mut self) {
        let Some(occasional) = self.occasional.as_mut() else {
            return;
        };
        for (_, pending) in occasional.client_requests.drain() {
            let _ = pending.reply.send(Err(ClientError::Disconnected));
        }
    }

    /// What few sessions hold, made on first use.
    fn occasional_mut(&mut self) -> &mut Occasional {
        self.occasional.get_or_insert_with(Box::default)
    }

    /// The open listen streams (2026-07-28), by the listen request's id.
    fn listeners(&self) -> impl Iterator<Item = (&RequestId, &Listener)> {
        self.occasional.iter().flat_map(|o| o.listeners.iter())
    }

    /// Whether `id` is an open listen stream's request.
    fn is_listening(&self, id: &RequestId) -> bool {
        self.occasional
            .as_ref()
            .is_some_and(|o| o.listeners.contains_key(id))
    }

    /// The open listen streams, taken out of the session.
    fn take_listeners(&mut self) -> HashMap<RequestId, Listener, FastHash> {
        self.occasional
            .as_mut()
            .map(|o| std::mem::take(&mut o.listeners))
            .unwrap_or_default()
    }

    /// The resource URIs a session-era client subscribed to.
    fn subscriptions(&self) -> impl Iterator<Item = &String> {
        self.occasional.iter().flat_map(|o| o.subscriptions.iter())
    }

    /// Whether a session-era client subscribed to `uri`.
    fn is_subscribed(&self, uri: &str) -> bool {
        self.occasional
            .as_ref()
            .is_some_and(|o| o.subscriptions.contains(uri))
    }

    /// Cancels every request in flight (the connection closed, or the grace ran out), each
    /// the way a client's cancel would: a batch cut short still sends the answers it
    /// collected. Requests sent to the client fail first, with "disconnected": a cancelled
    /// worker runs once more before it stops, so a tool waiting for the client learns why.
    pub fn cancel_all(&mut self, out: &mut dyn Outlet) {
        self.fail_client_requests();
        let ids: Vec<RequestId> = self.in_flight.keys().cloned().collect();
        for id in ids {
            self.cancel(&id, out);
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Subscriptions end with the session, and so do those of listens still open (an
        // HTTP listen's core is dropped with its stream).
        let listened: usize = self.listeners().map(|(_, l)| l.filter.watched()).sum();
        self.shared.metrics.subscriptions.sub(
            (self
                .occasional
                .as_ref()
                .map_or(0, |o| o.subscriptions.len())
                + listened) as u64,
        );
        // Workers may outlive the session by a moment; what they post now goes nowhere.
        self.inbox.flush_dropped(&self.shared.metrics);
        self.inbox.close();
    }
}

#[derive(Serialize)]
struct EmptyParams {}

fn client_error(error: &RawValue) -> ClientError {
    #[derive(serde::Deserialize)]
    struct ErrorObject {
        code: i64,
        message: String,
        #[serde(default)]
        data: Option<serde_json::Value>,
    }
    match serde_json::from_str::<ErrorObject>(error.get()) {
        Ok(e) => ClientError::Rejected {
            code: e.code,
            message: e.message,
            data: e.data,
        },
        Err(_) => ClientError::Rejected {
            code: crate::protocol::jsonrpc::ErrorCode::INVALID_REQUEST.0 as i64,
            message: "malformed error object".into(),
            data: None,
        },
    }
}
