//! The context a tool call, resource read, prompt render or completion runs with: report
//! progress, log to the client, notice cancellation, know the session (negotiated version,
//! client capabilities and info), and ask the client things (its roots, a model completion,
//! input from the user).
//!
//! The context knows nothing of how the request runs: it talks to its session through the
//! session's inbox only. [`RequestContext::test`] makes one without
//! any server, for unit tests of a tool.
//!
//! Progress is throttled here (at most one report per `progress.min_interval_ms`, only
//! strictly increasing values), log lines below the session's level or over the request's
//! budget (`limits.log_lines_per_second`) are dropped here, and a session may have at most
//! `limits.max_in_flight_per_session` requests to the client unanswered, so what
//! reaches the session is bounded at its source. Each progress report that goes out
//! also moves the request's deadline forward, up to the hard maximum.

use crate::mailbox::inbox::{ClientError, ClientRequest, Inbox, RequestSerial, SessionEvent};
use crate::mailbox::throttle::LineBudget;
use crate::model::{
    CreateMessageRequest, CreateMessageResult, ElicitRequest, ElicitResult, Implementation,
    LogLevel, ProtocolVersion, Root,
};
use crate::protocol::jsonrpc::RequestId;
use serde::Serialize;
use serde_json::Value;
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

pub(crate) mod asks;
pub(crate) use asks::{Ask, Input, LogFloor, Rounds, TaskAsks};
use asks::{TestClientFn, TASK_ASK_ATTEMPTS};

/// What a request may know about the session it came from.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The protocol version the session negotiated.
    pub protocol_version: ProtocolVersion,
    /// The capabilities the client declared (`initialize` params' `capabilities`).
    pub client_capabilities: Arc<Value>,
    /// The client's name and version.
    pub client_info: Arc<Implementation>,
    /// Who the client is, as the perimeter established it (anonymous without
    /// authentication).
    pub identity: Identity,
    /// The trace id of the connection (from its `traceparent` / `X-Trace-Id`, or made up),
    /// used for requests that bring none of their own.
    pub trace_id: Arc<str>,
    /// The session as a whole, for state kept per session (`None` for 2026-07-28 requests,
    /// which belong to no session).
    pub scope: Option<SessionScope>,
}

/// One session, as what keeps state per session sees it: a server-unique id, and work to do
/// when the session is over. Clones are the same session.
///
/// The session is over when it ended or was reaped and the last of its requests finished
/// (a request's context holds its session).
///
/// ```
/// use mcp_ws::context::SessionScope;
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// let ended = Arc::new(AtomicBool::new(false));
/// let scope = SessionScope::new(7);
/// let flag = ended.clone();
/// scope.on_end(move || flag.store(true, Ordering::Relaxed));
/// assert_eq!(scope.id(), 7);
/// drop(scope);
/// assert!(ended.load(Ordering::Relaxed));
/// ```
#[derive(Clone)]
pub struct SessionScope(Arc<ScopeInner>);

struct ScopeInner {
    id: u64,
    on_end: std::sync::Mutex<Vec<Box<dyn FnOnce() + Send>>>,
}

impl SessionScope {
    /// The scope of session `id`.
    pub fn new(id: u64) -> Self {
        Self(Arc::new(ScopeInner {
            id,
            on_end: std::sync::Mutex::new(Vec::new()),
        }))
    }

    /// The session's id, unique in this server process.
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// Runs `work` once the session is over (on the thread that drops it last: keep it short
    /// and non-blocking, e.g. a message to a task).
    pub fn on_end(&self, work: impl FnOnce() + Send + 'static) {
        crate::lock(&self.0.on_end).push(Box::new(work));
    }

    /// Whether something waits for the session's end ([`on_end`](Self::on_end)): what the
    /// session holds that ends with it (a `per_session` upstream's child and its state, or
    /// any work a tool left there). A Redis copy of the session holding some is kept for
    /// the whole idle time, not a tenth of it.
    pub fn has_end_work(&self) -> bool {
        !crate::lock(&self.0.on_end).is_empty()
    }
}

impl std::fmt::Debug for SessionScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SessionScope").field(&self.0.id).finish()
    }
}

impl Drop for ScopeInner {
    fn drop(&mut self) {
        let work = std::mem::take(&mut *crate::lock(&self.on_end));
        for work in work {
            work();
        }
    }
}

/// Who a client is: the subject its credentials name (an API key's name, a JWT's `sub`, a
/// client certificate's subject), how it proved it ([`Proof`]), and the scopes granted.
///
/// Two proofs never name the same client: a JWT with `sub` `alice` is not the API key named
/// `alice`. What the server scopes by identity (whose sessions, tasks, request states and
/// idempotency keys; rate buckets; sessions per identity) goes by [`principal`](Self::principal),
/// which carries the proof (`key:alice`, `jwt:alice`). [`subject`](Self::subject) is the bare
/// name, what `[[auth.policies]]` identities, `signatures.public_keys` and rollouts match on.
///
/// ```
/// use mcp_ws::context::{Identity, Proof};
/// let someone = Identity::anonymous();
/// assert_eq!(someone.subject(), "anonymous");
/// assert!(!someone.is_authenticated());
/// let alice = Identity::proven(Proof::Jwt, "alice", Vec::new());
/// assert_eq!((alice.subject(), alice.principal()), ("alice", "jwt:alice"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    subject: Arc<str>,
    /// `<proof>:<subject>` (`anonymous` for anonymous clients), made once.
    principal: Arc<str>,
    proof: Proof,
    scopes: Arc<[String]>,
}

/// How a client proved its identity; each proof names identities in a namespace of its own
/// (the prefix of [`Identity::principal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Proof {
    /// No credentials: not authenticated.
    Anonymous,
    /// An API key of `auth.api_keys` (`key:<name>`).
    ApiKey,
    /// A JWT (`jwt:<sub>`).
    Jwt,
    /// A client certificate (`cert:<subject>`).
    Certificate,
    /// Credentials checked elsewhere, given to [`Identity::authenticated`] (`id:<subject>`).
    Other,
}

impl Proof {
    /// The prefix of the principals this proof names (`anonymous` for no proof).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Anonymous => "anonymous",
            Self::ApiKey => "key",
            Self::Jwt => "jwt",
            Self::Certificate => "cert",
            Self::Other => "id",
        }
    }

    /// Whether `name` is spelled as a principal (`key:…`, `jwt:…`, `cert:…`, `id:…`): a
    /// policy entry so spelled names that proof's identity only.
    pub fn names(name: &str) -> bool {
        name.split_once(':').is_some_and(|(prefix, _)| {
            [Self::ApiKey, Self::Jwt, Self::Certificate, Self::Other]
                .iter()
                .any(|proof| proof.as_str() == prefix)
        })
    }
}

impl Identity {
    /// A client that presented no credentials.
    pub fn anonymous() -> Self {
        let anonymous: Arc<str> = Arc::from(Proof::Anonymous.as_str());
        Self {
            subject: anonymous.clone(),
            principal: anonymous,
            proof: Proof::Anonymous,
            scopes: Arc::from(Vec::new()),
        }
    }

    /// An authenticated client whose credentials were checked elsewhere ([`Proof::Other`]).
    pub fn authenticated(subject: impl Into<Arc<str>>, scopes: Vec<String>) -> Self {
        Self::proven(Proof::Other, subject, scopes)
    }

    /// A client authenticated by `proof` as `subject`. [`Proof::Anonymous`] gives
    /// [`anonymous`](Self::anonymous) whatever the subject.
    pub fn proven(proof: Proof, subject: impl Into<Arc<str>>, scopes: Vec<String>) -> Self {
        if proof == Proof::Anonymous {
            return Self::anonymous();
        }
        let subject = subject.into();
        Self {
            principal: Arc::from(format!("{}:{subject}", proof.as_str())),
            subject,
            proof,
            scopes: Arc::from(scopes),
        }
    }

    /// The subject as the credentials name it (`anonymous` without credentials): what
    /// policies, signature keys and rollouts match on. Two proofs may name the same subject:
    /// never scope anything by it alone, use [`principal`](Self::principal).
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The subject in the namespace of its proof (`key:alice`, `jwt:alice`, `cert:…`,
    /// `id:…`; `anonymous` without credentials): what is scoped to the identity goes by it.
    pub fn principal(&self) -> &str {
        &self.principal
    }

    /// [`principal`](Self::principal), shared: what keys a session by it holds a count, not
    /// a copy.
    pub(crate) fn shared_principal(&self) -> &Arc<str> {
        &self.principal
    }

    /// How the identity was proven.
    pub fn proof(&self) -> Proof {
        self.proof
    }

    /// The scopes granted.
    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }

    /// Whether credentials were presented and accepted.
    pub fn is_authenticated(&self) -> bool {
        self.proof != Proof::Anonymous
    }
}

impl SessionInfo {
    /// Whether the client declared `capability` (a top-level member of its capabilities).
    pub fn client_has(&self, capability: &str) -> bool {
        self.client_capabilities.get(capability).is_some()
    }
}

/// Set once the request is over: cancelled, timed out, stopped at an ask that ends a
/// 2026-07-28 round, or answered. The request's future is dropped then anyway; the flag is
/// for work handed to other threads (`spawn_blocking`), which should stop when it is set.
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    /// Whether the request was cancelled.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Why a request to the client got no usable answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClientRequestError {
    /// The client did not declare the capability this request needs (or the session's
    /// version does not have it), so it was not sent.
    #[error("the client does not support {capability}")]
    NotSupported {
        /// The missing capability (`roots`, `sampling`, `elicitation.form`, …).
        capability: &'static str,
    },
    /// The client answered with an error.
    #[error("the client refused: {message} ({code})")]
    Rejected {
        /// Its JSON-RPC error code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// No answer within `client_requests.timeout_ms`; the request was cancelled.
    #[error("the client did not answer within {timeout_ms} ms")]
    TimedOut {
        /// The timeout.
        timeout_ms: u64,
    },
    /// The session ended before an answer came.
    #[error("the client disconnected")]
    Disconnected,
    /// The session already has as many requests to the client outstanding as it may
    /// (`limits.max_in_flight_per_session`), so this one was not sent; or, for a 2026-07-28
    /// request, its round (or its task) holds as many asks without an answer.
    #[error("too many requests to the client outstanding (at most {limit})")]
    TooMany {
        /// The limit.
        limit: usize,
    },
    /// The answer does not have the expected shape (or, for a form, does not match the
    /// requested schema).
    #[error("the client's answer is invalid: {0}")]
    InvalidResponse(String),
}

/// A request's deadline: `timeout` from start, moved forward by progress, never past
/// `start + hard_max`.
#[derive(Debug)]
pub(crate) struct Deadline {
    at: Cell<Instant>,
    hard: Instant,
    extension: Duration,
}

impl Deadline {
    /// A deadline `timeout` after `now` (a clock read the caller already made).
    pub(crate) fn new(now: Instant, timeout: Duration, hard_max: Duration) -> Self {
        Self {
            at: Cell::new(now + timeout),
            hard: now + hard_max.max(timeout),
            extension: timeout,
        }
    }

    fn extend(&self) {
        let proposed = (Instant::now() + self.extension).min(self.hard);
        if proposed > self.at.get() {
            self.at.set(proposed);
        }
    }

    /// Resolves once the (possibly extended) deadline has passed.
    pub(crate) async fn expired(&self) {
        loop {
            let at = self.at.get();
            tokio::time::sleep_until(at.into()).await;
            if Instant::now() >= self.at.get() {
                return;
            }
        }
    }
}

/// What a request's context is made of (the worker assembles it).
pub(crate) struct ContextParts {
    pub id: RequestId,
    /// Which request of that id, in its session (what it posts carries it).
    pub serial: RequestSerial,
    /// The trace id of the request's own `_meta.traceparent`, if any.
    pub trace_id: Option<Box<str>>,
    pub inbox: Rc<Inbox>,
    pub session: Rc<SessionInfo>,
    /// Set when the request carries a progress token: the least gap between two reports.
    pub progress_interval: Option<Duration>,
    pub deadline: Deadline,
    pub cancel: CancelFlag,
    pub client_timeout: Duration,
    pub input: Input,
    pub log_floor: LogFloor,
    pub log_budget: LineBudget,
}

/// How progress is reported: only when the client sent a progress token.
#[derive(Debug)]
struct ProgressGate {
    min_interval: Duration,
    last: Cell<Option<(Instant, f64)>>,
}

/// The context of one request (a tool call, a resource read, a prompt render or a
/// completion). Cheap to clone; all clones are the same context.
///
/// ```
/// use mcp_ws::{RequestContext, model::LogLevel};
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let (ctx, probe) = RequestContext::test().progress_token().build();
/// ctx.report_progress(1.0, Some(2.0), None);
/// ctx.log(LogLevel::Info, "halfway");
/// assert_eq!(probe.progress(), vec![(1.0, Some(2.0))]);
/// assert_eq!(probe.logs().len(), 1);
/// # }
/// ```
#[derive(Clone)]
pub struct RequestContext {
    inner: Rc<Inner>,
}

struct Inner {
    id: RequestId,
    serial: RequestSerial,
    /// The trace id from the request's own `_meta.traceparent`, when it had one.
    trace_id: Option<Box<str>>,
    inbox: Rc<Inbox>,
    /// Shared with the session's other requests: made once per session (for 2026-07-28
    /// requests, once per change of version, capabilities or client), not copied member by
    /// member into every request.
    session: Rc<SessionInfo>,
    progress: Option<ProgressGate>,
    deadline: Deadline,
    cancel: CancelFlag,
    client_timeout: Duration,
    /// How the request's asks reach the client.
    input: Input,
    /// Which log lines go out.
    log_floor: LogFloor,
    /// Log lines this request may still send (a token bucket).
    log_budget: LineBudget,
}

impl RequestContext {
    pub(crate) fn new(parts: ContextParts) -> Self {
        let ContextParts {
            id,
            serial,
            trace_id,
            inbox,
            session,
            progress_interval,
            deadline,
            cancel,
            client_timeout,
            input,
            log_floor,
            log_budget,
        } = parts;
        // One allocation per request: the context is cloned into whatever the tool spawns,
        // and the clones share its progress gate, log budget and deadline.
        Self {
            inner: Rc::new(Inner {
                id,
                serial,
                trace_id,
                inbox,
                session,
                progress: progress_interval.map(|min_interval| ProgressGate {
                    min_interval,
                    last: Cell::new(None),
                }),
                deadline,
                cancel,
                client_timeout,
                input,
                log_floor,
                log_budget,
            }),
        }
    }

    /// A context for unit tests, with no server behind it; see [`TestContextBuilder`].
    pub fn test() -> TestContextBuilder {
        TestContextBuilder::default()
    }

    /// The id of the request, as the client sent it (JSON text).
    pub fn request_id(&self) -> &str {
        self.inner.id.as_json()
    }

    /// The session the request came from.
    pub fn session(&self) -> &SessionInfo {
        &self.inner.session
    }

    /// The session's negotiated protocol version.
    pub fn protocol_version(&self) -> ProtocolVersion {
        self.inner.session.protocol_version
    }

    /// Who the client is.
    pub fn identity(&self) -> &Identity {
        &self.inner.session.identity
    }

    /// The request's trace id (W3C, 32 hex digits, or what the client's `X-Trace-Id` said):
    /// the request's own `_meta.traceparent` if it had one, else its connection's (its
    /// upgrade's `traceparent` or `X-Trace-Id`), else one made up for the connection. It is
    /// on every server log line of the request and in its access-log line.
    ///
    /// Pass it on to what the tool calls, so their logs join the request's: as a
    /// `traceparent` with a span id of the tool's own when it is a W3C id (32 hex digits),
    /// else as `X-Trace-Id`.
    ///
    /// ```
    /// use mcp_ws::RequestContext;
    /// /// The tracing headers of a downstream HTTP call made for this request.
    /// fn downstream_headers(ctx: &RequestContext, span_id: u64) -> (&'static str, String) {
    ///     let trace = ctx.trace_id();
    ///     if trace.len() == 32 && trace.bytes().all(|b| b.is_ascii_hexdigit()) {
    ///         ("traceparent", format!("00-{trace}-{span_id:016x}-01"))
    ///     } else {
    ///         ("X-Trace-Id", trace.to_owned())
    ///     }
    /// }
    /// let (ctx, _probe) = RequestContext::test().build();
    /// let (name, value) = downstream_headers(&ctx, 0xabc);
    /// assert_eq!(name, "traceparent");
    /// assert!(value.starts_with("00-") && value.ends_with("-0000000000000abc-01"));
    /// ```
    pub fn trace_id(&self) -> &str {
        self.inner
            .trace_id
            .as_deref()
            .unwrap_or(&self.inner.session.trace_id)
    }

    /// Whether the client asked for progress (its request carried a progress token): a
    /// tool that passes progress on from elsewhere asks for it only then.
    pub fn wants_progress(&self) -> bool {
        self.inner.progress.is_some()
    }

    /// The level below which [`log`](Self::log) sends nothing for this request: the
    /// session's (`logging.client_level` until the client sets one with
    /// `logging/setLevel`), or the request's own; `None` when the request's lines go
    /// nowhere. What a tool that passes log lines on from elsewhere may ask of its source.
    pub fn log_level(&self) -> Option<LogLevel> {
        match self.inner.log_floor {
            LogFloor::Session => Some(self.inner.inbox.log_level()),
            LogFloor::Request(level) => level,
        }
    }

    /// Reports progress. Does nothing when the client sent no progress token; drops values
    /// that do not increase, and reports closer than `progress.min_interval_ms` to the last.
    pub fn report_progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let inner = &self.inner;
        let Some(gate) = &inner.progress else {
            return;
        };
        if !progress.is_finite() {
            return;
        }
        let now = Instant::now();
        if let Some((at, last)) = gate.last.get() {
            if progress <= last || now.duration_since(at) < gate.min_interval {
                return;
            }
        }
        gate.last.set(Some((now, progress)));
        inner.deadline.extend();
        inner.inbox.post(SessionEvent::Progress {
            id: inner.id.clone(),
            serial: inner.serial,
            progress,
            total,
            message: message.map(str::to_owned),
        });
    }

    /// Sends a log line to the client (`notifications/message`) if it is at or above the
    /// session's level and within the request's budget (`limits.log_lines_per_second`,
    /// `log_lines_burst`); otherwise nothing is sent or queued.
    pub fn log(&self, level: LogLevel, data: impl Serialize) {
        self.log_to(level, None, data);
    }

    /// [`log`](Self::log) naming the logger.
    pub fn log_to(&self, level: LogLevel, logger: Option<&str>, data: impl Serialize) {
        let inner = &self.inner;
        let floor = match inner.log_floor {
            LogFloor::Session => inner.inbox.log_level(),
            LogFloor::Request(Some(level)) => level,
            LogFloor::Request(None) => return,
        };
        // The budget is taken only by lines that would go out.
        if level < floor || !inner.log_budget.take(&inner.inbox) {
            return;
        }
        // Written here, once: the session's queue bounds the bytes it holds (see `Inbox`).
        let Ok(data) = serde_json::value::to_raw_value(&data) else {
            return;
        };
        inner.inbox.post(SessionEvent::Log {
            id: inner.id.clone(),
            serial: inner.serial,
            level,
            logger: logger.map(str::to_owned),
            data,
        });
    }

    /// A flag set once the request is over (see [`CancelFlag`]), for work on other threads.
    pub fn cancel_flag(&self) -> CancelFlag {
        self.inner.cancel.clone()
    }

    /// Whether the request was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_set()
    }

    /// Resolves once the request's (possibly extended) deadline has passed.
    pub(crate) async fn deadline_expired(&self) {
        self.inner.deadline.expired().await;
    }

    /// Asks the client for its roots (`roots/list`).
    ///
    /// # Errors
    /// [`ClientRequestError::NotSupported`] when the client did not declare `roots`; the
    /// other variants when it answers with an error, late, wrongly, or not at all.
    pub async fn list_roots(&self) -> Result<Vec<Root>, ClientRequestError> {
        self.list_roots_as(None).await
    }

    /// [`list_roots`](Self::list_roots), naming the ask `key` (for a 2026-07-28 client, the
    /// key of its entry in `inputRequests`; unnamed asks are numbered in the order they are
    /// made, so a tool whose asks depend on earlier answers should name them). Two asks of
    /// one request never share a key: a key asked again (a form asked again after a
    /// decline), or a number an unnamed ask may take, is sent as `key.n`.
    ///
    /// # Errors
    /// As for [`list_roots`](Self::list_roots).
    pub async fn list_roots_as(
        &self,
        key: impl Into<Option<&str>>,
    ) -> Result<Vec<Root>, ClientRequestError> {
        #[derive(serde::Deserialize)]
        struct ListRootsResult {
            roots: Vec<Root>,
        }
        self.require("roots", true)?;
        let params = Value::Object(Default::default());
        let result: ListRootsResult = self
            .request(key.into(), "roots/list", params, parse)
            .await?;
        Ok(result.roots)
    }

    /// Asks the client for a model completion (`sampling/createMessage`).
    ///
    /// # Errors
    /// As for [`list_roots`](Self::list_roots); the capability is `sampling`, and
    /// `sampling.tools` on a 2025-11-25 session for a request offering the model tools
    /// (`tools` or `toolChoice` among its extra members: servers must not send those to
    /// other clients).
    pub async fn create_message(
        &self,
        request: CreateMessageRequest,
    ) -> Result<CreateMessageResult, ClientRequestError> {
        self.create_message_as(None, request).await
    }

    /// [`create_message`](Self::create_message), naming the ask `key` (see
    /// [`list_roots_as`](Self::list_roots_as)).
    ///
    /// # Errors
    /// As for [`create_message`](Self::create_message).
    pub async fn create_message_as(
        &self,
        key: impl Into<Option<&str>>,
        request: CreateMessageRequest,
    ) -> Result<CreateMessageResult, ClientRequestError> {
        self.require("sampling", true)?;
        if request.extra.contains_key("tools") || request.extra.contains_key("toolChoice") {
            let session = &self.inner.session;
            let tools = session
                .client_capabilities
                .get("sampling")
                .is_some_and(|s| s.get("tools").is_some());
            if !tools || !session.protocol_version.has_icons() {
                return Err(ClientRequestError::NotSupported {
                    capability: "sampling.tools",
                });
            }
        }
        let params = serde_json::to_value(&request)
            .map_err(|e| ClientRequestError::InvalidResponse(e.to_string()))?;
        self.request(key.into(), "sampling/createMessage", params, parse)
            .await
    }

    /// Asks the user for input (`elicitation/create`): a form, whose answer is checked
    /// against the requested schema, or (2025-11-25) a URL to visit.
    ///
    /// # Errors
    /// As for [`list_roots`](Self::list_roots); the capability is `elicitation` (form mode)
    /// or `elicitation.url` on a 2025-11-25 session (URL mode). An accepted form whose
    /// content does not match the schema is [`ClientRequestError::InvalidResponse`].
    pub async fn elicit(&self, request: ElicitRequest) -> Result<ElicitResult, ClientRequestError> {
        self.elicit_as(None, request).await
    }

    /// [`elicit`](Self::elicit), naming the ask `key` (see
    /// [`list_roots_as`](Self::list_roots_as)).
    ///
    /// # Errors
    /// As for [`elicit`](Self::elicit).
    pub async fn elicit_as(
        &self,
        key: impl Into<Option<&str>>,
        request: ElicitRequest,
    ) -> Result<ElicitResult, ClientRequestError> {
        let session = &self.inner.session;
        let elicitation = session.client_capabilities.get("elicitation");
        match &request {
            ElicitRequest::Form { .. } => {
                // An empty `elicitation: {}` declares form mode (2025-11-25 compatibility rule).
                let form =
                    elicitation.is_some_and(|e| e.get("form").is_some() || e.get("url").is_none());
                if !form || !session.protocol_version.has_titles_and_meta() {
                    return Err(ClientRequestError::NotSupported {
                        capability: "elicitation.form",
                    });
                }
            }
            ElicitRequest::Url { .. } => {
                let url = elicitation.is_some_and(|e| e.get("url").is_some());
                if !url || !session.protocol_version.has_icons() {
                    return Err(ClientRequestError::NotSupported {
                        capability: "elicitation.url",
                    });
                }
            }
        }
        let params = request.to_params(session.protocol_version);
        let check = |answer: Value| -> Result<ElicitResult, ClientRequestError> {
            let result: ElicitResult = parse(answer)?;
            if let (
                ElicitRequest::Form {
                    requested_schema, ..
                },
                crate::model::ElicitAction::Accept,
            ) = (&request, result.action)
            {
                let content = Value::Object(result.content.clone().unwrap_or_default());
                crate::schema::check(requested_schema, &content)
                    .map_err(ClientRequestError::InvalidResponse)?;
            }
            Ok(result)
        };
        self.request(key.into(), "elicitation/create", params, check)
            .await
    }

    /// Sends the client a request of the protocol's own (`roots/list`,
    /// `sampling/createMessage`, `elicitation/create`) with `params` as they are, and
    /// returns its answer unchecked: for requests made elsewhere and passed on, such as an
    /// upstream server's (the gateway). Typed tools use [`list_roots`](Self::list_roots),
    /// [`create_message`](Self::create_message) and [`elicit`](Self::elicit), which check
    /// the answer.
    ///
    /// # Errors
    /// [`ClientRequestError::NotSupported`] for another method, or when the client did not
    /// declare the capability (`roots`, `sampling`, `elicitation`); as for
    /// [`list_roots`](Self::list_roots) otherwise.
    pub async fn ask_client(
        &self,
        method: &str,
        params: Value,
    ) -> Result<Value, ClientRequestError> {
        let (method, capability) = match method {
            "roots/list" => ("roots/list", "roots"),
            "sampling/createMessage" => ("sampling/createMessage", "sampling"),
            "elicitation/create" => ("elicitation/create", "elicitation"),
            _ => {
                return Err(ClientRequestError::NotSupported {
                    capability: "requests other than roots, sampling and elicitation",
                })
            }
        };
        self.require(capability, true)?;
        self.request(None, method, params, Ok).await
    }

    /// Asks the client and checks its answer. In a session, the ask is a request to the
    /// client; under 2026-07-28 it is answered from the request's `inputResponses`, and an
    /// ask without an answer that passes `check` is recorded and never resolves: the worker
    /// then answers the request with what it asked (`InputRequiredResult`), and the client
    /// runs it again with the answers.
    async fn request<T>(
        &self,
        key: Option<&str>,
        method: &'static str,
        params: Value,
        check: impl Fn(Value) -> Result<T, ClientRequestError>,
    ) -> Result<T, ClientRequestError> {
        if matches!(self.inner.input, Input::Refused) {
            return Err(ClientRequestError::NotSupported {
                capability: "requests to the client within completion/complete",
            });
        }
        let rounds = match &self.inner.input {
            Input::Rounds(rounds) => Some(rounds),
            Input::Task(task) if !task.detached.get() => Some(&task.rounds),
            _ => None,
        };
        if let Some(rounds) = rounds {
            let key = rounds.key(key);
            if let Some(answer) = rounds.answers.get(&key) {
                // An answer that does not fit is asked for again, never trusted.
                if let Ok(value) = check(answer.clone()) {
                    return Ok(value);
                }
            }
            rounds
                .ask(Ask {
                    key,
                    method,
                    params,
                })
                .map_err(|limit| {
                    self.inner.inbox.count_refused_client_request();
                    ClientRequestError::TooMany { limit }
                })?;
            return std::future::pending().await;
        }
        if let Input::Task(task) = &self.inner.input {
            // An answer that does not fit is asked for again (under a new key), a few times.
            let mut refused = None;
            for _ in 0..TASK_ASK_ATTEMPTS {
                let parked = task.park(key, method, params.clone()).await;
                if let Err(ClientRequestError::TooMany { .. }) = &parked {
                    self.inner.inbox.count_refused_client_request();
                }
                match check(parked?) {
                    Ok(value) => return Ok(value),
                    Err(error) => refused = Some(error),
                }
            }
            return Err(refused.unwrap_or(ClientRequestError::Disconnected));
        }
        check(self.ask(method, params).await?)
    }

    fn require(&self, capability: &'static str, gate: bool) -> Result<(), ClientRequestError> {
        if gate && self.inner.session.client_has(capability) {
            Ok(())
        } else {
            Err(ClientRequestError::NotSupported { capability })
        }
    }

    /// Sends a request to the client and waits for its answer, at most
    /// `client_requests.timeout_ms`. If this future is dropped first (the request was
    /// cancelled, or the tool stopped waiting), the client is told with
    /// `notifications/cancelled`.
    async fn ask(&self, method: &'static str, params: Value) -> Result<Value, ClientRequestError> {
        let inner = &self.inner;
        if let Input::Test(client) = &inner.input {
            return client(method, &params).map_err(client_error);
        }
        inner.inbox.begin_client_request().map_err(|limit| {
            inner.inbox.count_refused_client_request();
            ClientRequestError::TooMany { limit }
        })?;
        let server_id = inner.inbox.next_server_id();
        let (reply, answer) = oneshot::channel();
        inner.inbox.post(SessionEvent::ClientRequest(ClientRequest {
            server_id,
            on_behalf_of: inner.id.clone(),
            serial: inner.serial,
            method,
            params,
            reply,
        }));
        let mut guard = AbandonOnDrop {
            inbox: &inner.inbox,
            server_id,
            reason: Some("the request that asked was cancelled"),
        };
        match tokio::time::timeout(inner.client_timeout, answer).await {
            Ok(Ok(outcome)) => {
                guard.reason = None;
                outcome.map_err(client_error)
            }
            Ok(Err(_session_gone)) => {
                guard.reason = None;
                Err(ClientRequestError::Disconnected)
            }
            Err(_elapsed) => {
                guard.reason = Some("timed out");
                Err(ClientRequestError::TimedOut {
                    timeout_ms: inner.client_timeout.as_millis() as u64,
                })
            }
        }
    }
}

/// Ends the count of a client request once it is no longer waited for, and tells the
/// session so when it was abandoned (unless disarmed: answered, or the session is gone).
struct AbandonOnDrop<'a> {
    inbox: &'a Inbox,
    server_id: u64,
    reason: Option<&'static str>,
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        self.inbox.end_client_request();
        if let Some(reason) = self.reason {
            self.inbox.post(SessionEvent::ClientRequestAbandoned {
                server_id: self.server_id,
                reason,
            });
        }
    }
}

fn client_error(error: ClientError) -> ClientRequestError {
    match error {
        ClientError::Rejected { code, message, .. } => {
            ClientRequestError::Rejected { code, message }
        }
        ClientError::Disconnected => ClientRequestError::Disconnected,
    }
}

fn parse<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ClientRequestError> {
    serde_json::from_value(value).map_err(|e| ClientRequestError::InvalidResponse(e.to_string()))
}

/// Builds a [`RequestContext`] for a unit test, and a [`ContextProbe`] to look at what it
/// sent.
///
/// ```
/// use mcp_ws::RequestContext;
/// use serde_json::json;
/// let (ctx, _probe) = RequestContext::test()
///     .client_capabilities(json!({"roots": {}}))
///     .client(|method, _params| match method {
///         "roots/list" => Ok(json!({"roots": [{"uri": "file:///work"}]})),
///         _ => Err("not in this test".into()),
///     })
///     .build();
/// # let _ = ctx;
/// ```
pub struct TestContextBuilder {
    version: ProtocolVersion,
    capabilities: Value,
    progress: bool,
    client: Option<Rc<TestClientFn>>,
}

impl Default for TestContextBuilder {
    fn default() -> Self {
        Self {
            version: ProtocolVersion::NEWEST_SESSION,
            capabilities: Value::Object(Default::default()),
            progress: false,
            client: None,
        }
    }
}

impl TestContextBuilder {
    /// The session's protocol version (default: the newest).
    pub fn version(mut self, version: ProtocolVersion) -> Self {
        self.version = version;
        self
    }

    /// The client's declared capabilities (default: none).
    pub fn client_capabilities(mut self, capabilities: Value) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// The request carries a progress token, so progress is reported.
    pub fn progress_token(mut self) -> Self {
        self.progress = true;
        self
    }

    /// Answers the context's client requests: `(method, params)` to the result, or an error
    /// message (answered as a client error with code -32603).
    pub fn client(
        mut self,
        answer: impl Fn(&str, &Value) -> Result<Value, String> + 'static,
    ) -> Self {
        self.client = Some(Rc::new(move |method, params| {
            answer(method, params).map_err(|message| ClientError::Rejected {
                code: -32603,
                message,
                data: None,
            })
        }));
        self
    }

    /// The context and its probe.
    pub fn build(self) -> (RequestContext, ContextProbe) {
        let inbox = Rc::new(Inbox::default());
        inbox.set_log_level(LogLevel::Debug);
        let id = RequestId::from_number(1);
        let session = Rc::new(SessionInfo {
            protocol_version: self.version,
            client_capabilities: Arc::new(self.capabilities),
            client_info: Arc::new(Implementation::new("test", "0")),
            identity: Identity::anonymous(),
            trace_id: Arc::from("00000000000000000000000000000000"),
            scope: None,
        });
        let hour = Duration::from_secs(3600);
        let client = self
            .client
            .unwrap_or_else(|| Rc::new(|_: &str, _: &Value| Err(ClientError::Disconnected)));
        let ctx = RequestContext::new(ContextParts {
            id,
            serial: 0,
            trace_id: None,
            inbox: inbox.clone(),
            session,
            progress_interval: self.progress.then_some(Duration::ZERO),
            deadline: Deadline::new(Instant::now(), hour, hour),
            cancel: CancelFlag::default(),
            client_timeout: hour,
            input: Input::Test(client),
            log_floor: LogFloor::Session,
            log_budget: LineBudget::unlimited(),
        });
        (ctx, ContextProbe { inbox })
    }
}

/// What a test context sent: its progress reports and log lines.
pub struct ContextProbe {
    inbox: Rc<Inbox>,
}

impl ContextProbe {
    /// Progress reports so far, as `(progress, total)`; reading takes them.
    pub fn progress(&self) -> Vec<(f64, Option<f64>)> {
        self.take(|event| match event {
            SessionEvent::Progress {
                progress, total, ..
            } => Some((*progress, *total)),
            _ => None,
        })
    }

    /// Log lines so far, as `(level, data)`; reading takes them.
    pub fn logs(&self) -> Vec<(LogLevel, Value)> {
        self.take(|event| match event {
            SessionEvent::Log { level, data, .. } => Some((
                *level,
                serde_json::from_str(data.get()).unwrap_or(Value::Null),
            )),
            _ => None,
        })
    }

    fn take<T>(&self, pick: impl Fn(&SessionEvent) -> Option<T>) -> Vec<T> {
        let mut picked = Vec::new();
        let mut others = Vec::new();
        while let Some(event) = self.inbox.take_event() {
            match pick(&event) {
                Some(value) => picked.push(value),
                None => others.push(event),
            }
        }
        for event in others {
            self.inbox.post(event);
        }
        picked
    }
}
