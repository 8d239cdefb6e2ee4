//! Every error condition the server can answer a request with, the codes it uses, and the
//! one place where each becomes a JSON-RPC error object (`code`, `message`, `data`).
//!
//! The error table of `docs/protocol.md` lists exactly these codes. Messages are written for the model
//! that reads them: short, actionable, and never carrying internals. Tool failures are not
//! here: they are results with `isError: true` (see `ToolError`). Server-defined conditions
//! use -32000..-32099 (never -32002 or -32042, which MCP assigns); -32603 is kept for bugs
//! and carries no details.

use crate::protocol::jsonrpc::{ErrorCode, ErrorObject, WireError};
use crate::protocol::mcp::ProtocolVersion;
use serde_json::json;
use std::borrow::Cow;

/// The longest error message sent, in bytes. Messages quote what the client sent (a tool's
/// name, the value serde could not read), and a client that sent megabytes was answered
/// with them, three times their size once escaped, past `limits.max_message_bytes`.
const MAX_MESSAGE_BYTES: usize = 1024;

/// The longest client string (a method, a tool's name, a URI) an error's `data` carries back.
const MAX_DATA_STRING_BYTES: usize = 1024;

/// The most of a client's string a message quotes, in characters ([`quoted`]).
const MAX_QUOTED_CHARS: usize = 128;

/// The rest of -32022's message on a connection pinned to a session-era version: no
/// version may be named in `_meta` there.
fn pinned_to_a_session_era(pinned: Option<ProtocolVersion>) -> String {
    match pinned {
        Some(pinned) if !ProtocolVersion::STATELESS.contains(&pinned) => format!(
            ": this connection speaks {pinned} (its subprotocol); send its requests without a version in _meta"
        ),
        _ => String::new(),
    }
}

/// `text` cut to at most `max` bytes on a character boundary, `…` after a cut.
pub fn clipped(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let end = crate::floor_char_boundary(text, max);
    Cow::Owned(format!("{}…", &text[..end]))
}

/// A client's string as a message quotes it: its first 128 characters, escaped as `Debug`
/// writes a string (`…` after a cut). The values are the client's, as long as its request
/// (a header may take 128 KiB, a body value megabytes): quoted whole, escaping cost about
/// 200 ns a character that needs it (a 3 MB request held its event loop half a second), and
/// the answer was three times the request.
pub fn quoted(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((end, _)) => format!("{:?}…", &text[..end]),
        None => format!("{text:?}"),
    }
}

/// The codes MCP and this server add to JSON-RPC's own ([`ErrorCode`]'s consts).
pub mod codes {
    use crate::protocol::jsonrpc::ErrorCode;

    /// A method other than `ping` arrived before `initialize`.
    pub const NOT_INITIALIZED: ErrorCode = ErrorCode(-32000);
    /// The request ran longer than its timeout and was stopped.
    pub const REQUEST_TIMED_OUT: ErrorCode = ErrorCode(-32001);
    /// MCP: `resources/read` of a URI the server does not have.
    pub const RESOURCE_NOT_FOUND: ErrorCode = ErrorCode(-32002);
    /// A request reused the id of a request of this session that is still in flight.
    pub const DUPLICATE_REQUEST_ID: ErrorCode = ErrorCode(-32003);
    /// The server stopped the request before it finished: it is shutting down, or the
    /// request's WebSocket session was parked (its connection gone) while a connected client
    /// needed its worker slot. Send it again.
    pub const SHUTTING_DOWN: ErrorCode = ErrorCode(-32004);
    /// The credential the connection was opened with expired (a JWT's `exp`): the request
    /// was stopped and the connection closes; reconnect with a fresh credential.
    pub const CREDENTIAL_EXPIRED: ErrorCode = ErrorCode(-32023);
    /// No slot in the server-wide worker pool became free within the admission wait (or no
    /// file read within `resources.read_wait_ms`, or the file bytes in flight are at their
    /// limit, or the idempotency store cannot be reached for a keyed call).
    pub const SERVER_BUSY: ErrorCode = ErrorCode(-32008);
    /// A resource is larger than the server sends (`max_file_bytes` of its
    /// `[[resources.directories]]` entry), or its answer would not fit in one message
    /// (`limits.max_message_bytes`).
    pub const RESOURCE_TOO_LARGE: ErrorCode = ErrorCode(-32005);
    /// A resource read or prompt render failed; the message says why.
    pub const HANDLER_FAILED: ErrorCode = ErrorCode(-32006);
    /// The session already has its maximum number of requests in flight.
    pub const SESSION_BUSY: ErrorCode = ErrorCode(-32009);
    /// 2026-07-28: an HTTP header disagrees with the body, or is missing.
    pub const HEADER_MISMATCH: ErrorCode = ErrorCode(-32020);
    /// 2026-07-28: the request needs a client capability its `_meta` did not declare.
    pub const MISSING_CLIENT_CAPABILITY: ErrorCode = ErrorCode(-32021);
    /// 2026-07-28: the request names a protocol version this server does not speak.
    pub const UNSUPPORTED_PROTOCOL_VERSION: ErrorCode = ErrorCode(-32022);
    /// A request's Ed25519 signature is missing, malformed, outside the clock skew,
    /// replayed or invalid (its identity must sign).
    pub const SIGNATURE_REFUSED: ErrorCode = ErrorCode(-32018);
    /// An idempotency key (or a finished request's id) came again with other params.
    pub const IDEMPOTENCY_CONFLICT: ErrorCode = ErrorCode(-32019);
    /// The client's identity sent more requests than its rate allows; `data.retryAfterMs`
    /// says when the next one will be served.
    pub const RATE_LIMITED: ErrorCode = ErrorCode(-32017);
    /// The request's answer was lost: the node running it died (sessions in Redis), or,
    /// for a WebSocket resume that lists it as awaited, it or its answer was lost with the
    /// connection. Send it again.
    pub const ANSWER_LOST: ErrorCode = ErrorCode(-32031);
    /// A keyed request ran, and its result was not kept (this node's share of the shared
    /// de-duplication store was full): it is not run again under its key within the window.
    pub const RESULT_NOT_KEPT: ErrorCode = ErrorCode(-32032);
}

/// What an idempotency conflict was keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictScope {
    /// `params._meta.idempotencyKey`, for the client's identity.
    IdempotencyKey,
    /// The id of a request the session finished.
    RequestId,
}

impl ConflictScope {
    /// How the request differs from the one that came first, as the message says it.
    fn unlike(self) -> &'static str {
        match self {
            Self::IdempotencyKey => {
                "with other params, or for an answer of another shape (another protocol version, tasks declared or not)"
            }
            Self::RequestId => "with other params",
        }
    }

    /// The name in the error's `data`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::IdempotencyKey => "idempotencyKey",
            Self::RequestId => "requestId",
        }
    }
}

/// Which limit on file reads a read found reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadLimit {
    /// `resources.max_concurrent_reads`, for `resources.read_wait_ms`.
    Reads,
    /// `resources.max_read_bytes_in_flight`.
    Bytes,
}

impl ReadLimit {
    /// The name in the error's `data.scope`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Reads => "fileReads",
            Self::Bytes => "fileBytes",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Self::Reads => "too many file reads at once",
            Self::Bytes => "too many bytes of files being read at once",
        }
    }
}

/// Which limit on tasks a new task, or a task's result, found reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskLimit {
    /// `tasks.max_running` or `tasks.max_stored`: the tasks of this node.
    Node,
    /// `tasks.max_running_per_identity`: the tasks of the caller's identity running on
    /// this node.
    Identity,
    /// `tasks.max_stored_bytes`: the bytes of the task records this node keeps.
    Bytes,
    /// `tasks.max_stored_per_identity` or `tasks.max_stored_bytes_per_identity`: the task
    /// records of the caller's identity this node keeps (running or done, until they
    /// expire), by count or by bytes.
    IdentityStored,
}

impl TaskLimit {
    /// The name in the error's `data.scope`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Node => "tasks",
            Self::Identity => "identityTasks",
            Self::Bytes => "taskBytes",
            Self::IdentityStored => "identityStoredTasks",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Self::Node => "Too many tasks: retry later",
            Self::Identity => {
                "Too many tasks of this identity running: retry once one of them ends"
            }
            Self::Bytes => "Too many bytes of task results kept on this node: retry later",
            Self::IdentityStored => {
                "Too many tasks of this identity kept on this node: retry once some expire"
            }
        }
    }
}

/// Why a request's signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureProblem {
    /// The identity must sign, and `params._meta.signature` is absent.
    Missing,
    /// `params._meta.signature` is not `{timestamp, nonce, value}` as documented.
    Malformed,
    /// The timestamp is further from the server's clock than `signatures.max_skew_ms`.
    Skew,
    /// The nonce was used before, within its lifetime, on this node or another.
    Replayed,
    /// The signature does not verify with the identity's keys.
    Invalid,
    /// The nonce cache is full of live nonces; retry later.
    Busy,
}

impl SignatureProblem {
    /// The name in the error's `data`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::Skew => "skew",
            Self::Replayed => "replayed",
            Self::Invalid => "invalid",
            Self::Busy => "busy",
        }
    }

    fn message(self) -> &'static str {
        match self {
            Self::Missing => "Signature required: params._meta.signature is missing",
            Self::Malformed => {
                "Signature malformed: params._meta.signature must be {timestamp, nonce, value}"
            }
            Self::Skew => "Signature refused: the timestamp is outside the allowed clock skew",
            Self::Replayed => "Signature refused: the nonce was used before",
            Self::Invalid => "Signature refused: it does not verify",
            Self::Busy => "Signature refused: too many recent nonces, retry later",
        }
    }
}

/// Why a request is answered with a JSON-RPC error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The frame or entry is not valid JSON-RPC.
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("Method not found")]
    MethodNotFound { method: String },
    /// A method outside `limits.allowed_methods`: answered exactly as an unknown method, told
    /// apart only in metrics.
    #[error("Method not found")]
    MethodNotAllowed { method: String },
    #[error("Rate limit exceeded: retry after {retry_after_ms} ms")]
    RateLimited { retry_after_ms: u64 },
    #[error("Invalid params: {0}")]
    InvalidParams(String),
    #[error("Unknown tool: {name}")]
    UnknownTool { name: String },
    #[error("Unknown prompt: {name}")]
    UnknownPrompt { name: String },
    #[error("Missing required argument \"{argument}\" for prompt \"{prompt}\"")]
    MissingPromptArgument { prompt: String, argument: String },
    #[error("Resource not found")]
    ResourceNotFound { uri: String },
    #[error("Resource too large: {size} bytes, the limit is {limit}")]
    ResourceTooLarge { uri: String, size: u64, limit: u64 },
    /// A resource whose answer would not fit in one message.
    #[error("Resource too large: its answer would take {encoded} bytes, over limits.max_message_bytes ({limit})")]
    ResourceOverMessageLimit {
        uri: String,
        size: u64,
        encoded: u64,
        limit: u64,
    },
    /// The server reads as many files, or bytes of files, as it may at once.
    #[error("Server busy: {}, retry later", .scope.message())]
    ReadsBusy { scope: ReadLimit, limit: u64 },
    #[error("{0}")]
    HandlerFailed(String),
    #[error("Too many subscriptions: the session may hold {limit}")]
    TooManySubscriptions { limit: usize },
    /// 2026-07-28 tasks: no task with this id is visible to the client (never created,
    /// expired, or another identity's).
    #[error("Unknown task")]
    UnknownTask { task_id: String },
    /// 2026-07-28 tasks: this node holds as many tasks, or bytes of tasks, as it may (a new
    /// task is refused; a task whose result does not fit fails with it).
    #[error("{}", .scope.message())]
    TooManyTasks { scope: TaskLimit, limit: u64 },
    /// 2026-07-28: a request's `_meta` lacks a required key or has a malformed one, or its
    /// params do not read (a member named twice), so that its `_meta` cannot be believed.
    #[error("Invalid params: {0}")]
    MalformedMeta(String),
    /// 2026-07-28: the request's `_meta` names a version this server does not speak.
    #[error("Unsupported protocol version{}", pinned_to_a_session_era(*.pinned))]
    UnsupportedProtocolVersion {
        /// The version asked for (cut to 64 characters).
        requested: String,
        /// The one version the connection serves, when its client chose one (`data.supported`
        /// then names it alone when `_meta` may name it, none when it is a session-era
        /// version; otherwise the 2026-era versions).
        pinned: Option<ProtocolVersion>,
    },
    /// 2026-07-28: the request needs client capabilities its `_meta` did not declare.
    #[error("Missing required client capability")]
    MissingClientCapability { required: serde_json::Value },
    /// 2026-07-28: an HTTP header disagrees with the body, or a required one is missing.
    #[error("Header mismatch: {0}")]
    HeaderMismatch(String),
    /// 2026-07-28: a `requestState` that is forged, altered, foreign or expired.
    #[error("Invalid params: {0}")]
    InvalidRequestState(crate::protocol::mrtr::StateError),
    /// 2026-07-28: the answers a multi round-trip request gathered make a `requestState`
    /// that, with the request's target and arguments, takes `retry_bytes` at the least: the
    /// next round would not fit in a message.
    #[error("Invalid params: the answers gathered make a requestState too large to send back: the next round would take at least {retry_bytes} bytes, over limits.max_message_bytes ({limit})")]
    RequestStateTooLarge { retry_bytes: usize, limit: usize },
    #[error("Invalid params: uri: a subscribed URI may have at most {limit} bytes")]
    SubscriptionUriTooLong { limit: usize },
    #[error("Server not initialized: send \"initialize\" first")]
    NotInitialized,
    #[error("Request timed out")]
    TimedOut { timeout_ms: u64 },
    #[error("Duplicate request id: a request with this id is still in flight")]
    DuplicateRequestId,
    #[error("Server is shutting down")]
    ShuttingDown,
    /// The request's session was parked (its WebSocket connection gone) and a connected
    /// client needed the request's worker slot: it was stopped, unfinished.
    #[error("Request stopped: its connection was gone and a connected client needed its worker slot; send it again")]
    Reclaimed,
    #[error("The connection's credential expired: reconnect with a fresh one")]
    CredentialExpired,
    /// The node running the request died before it answered (sessions in Redis: its
    /// session went on on another node).
    #[error("The node running this request was lost: retry it (a tools/call with its idempotency key that finished there is answered, not run again)")]
    NodeLost,
    /// A WebSocket resume lists the request as awaited, and its session neither runs it nor
    /// holds its answer: it, or its answer, was lost with the connection that dropped.
    #[error("This request or its answer was lost with the connection: retry it (a tools/call with its idempotency key that finished is answered, not run again)")]
    ConnectionLost,
    #[error("Server busy: no worker slot became free in time, retry later")]
    ServerBusy { limit: usize, waited_ms: u64 },
    /// A `tools/call` with an idempotency key while the store every node shares (Redis)
    /// cannot be reached (`cluster.on_store_error = "refuse"`): it did not run.
    #[error("Server busy: the idempotency store cannot be reached, retry later")]
    StoreUnavailable { retry_after_ms: u64 },
    /// A task looked up (`tasks/get`, `tasks/result`, `tasks/cancel`, `tasks/update`) that
    /// this node does not hold, while the store every node shares (Redis) cannot be asked:
    /// whether it exists is not known.
    #[error("Server busy: the task store cannot be reached, retry later")]
    TaskStoreUnavailable { retry_after_ms: u64 },
    /// A `tasks/update` or `tasks/cancel` whose answers or cancel the task's runner (on this
    /// node) had no room for within the acknowledgement's wait: not taken, and the client
    /// may send it again.
    #[error("Server busy: the task took nothing more in time, send it again")]
    TaskBusy { waited_ms: u64 },
    #[error("Session busy: too many requests in flight, wait for some to finish")]
    SessionBusy { limit: usize },
    #[error("{}", reason.message())]
    SignatureRefused { reason: SignatureProblem },
    #[error("Conflict: this {} was used before {}", scope.as_str(), scope.unlike())]
    IdempotencyConflict { scope: ConflictScope },
    /// A retry of a keyed request that ran, whose result the store did not keep.
    #[error("This idempotencyKey's request ran, and its result was not kept: it is not run again under this key within the de-duplication window")]
    ResultNotKept,
    /// An error another server answered with (a gateway's upstream), passed on as it is
    /// (its message cut at 1 KiB in [`Error::to_wire`], as every error's).
    #[error("{message}")]
    Passed {
        code: i32,
        message: String,
        data: Option<serde_json::Value>,
    },
    /// An answer (a tool's result, a prompt, a completion…) that would not fit in one
    /// message: the server sends none larger than it reads.
    #[error("Internal error: the answer would take {encoded} bytes, over limits.max_message_bytes ({limit})")]
    AnswerOverMessageLimit { encoded: usize, limit: usize },
    #[error("Internal error")]
    Internal,
}

/// Makes `outcome`, an answer encoded, an error when it is longer than `limit`
/// (`limits.max_message_bytes`): the server sends no answer larger than it reads, whatever
/// made it (a tool's result of tens of MB queued for a client that does not read was held
/// whole, once per request in flight).
/// Checked where a worker's answer leaves its session (a keyed call's result over the limit
/// is also settled as not kept, `cluster::dedup`, so that no retry gets it or runs again).
///
/// In place: the outcome is every request's, and moved through a combinator it cost 29
/// instructions a request (callgrind), against a comparison.
pub fn bound_answer(outcome: &mut Result<String, Error>, limit: usize) {
    if let Ok(frame) = outcome {
        let encoded = frame.len();
        if encoded > limit {
            *outcome = Err(Error::AnswerOverMessageLimit { encoded, limit });
        }
    }
}

impl Error {
    /// A request that is not allowed where it is (JSON-RPC's -32600).
    pub fn invalid_request(reason: &'static str) -> Self {
        Self::Wire(WireError::InvalidRequest(reason))
    }

    /// The code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Wire(wire) => wire.code(),
            Self::MethodNotFound { .. } | Self::MethodNotAllowed { .. } => {
                ErrorCode::METHOD_NOT_FOUND
            }
            Self::RateLimited { .. } => codes::RATE_LIMITED,
            Self::InvalidParams(_)
            | Self::UnknownTool { .. }
            | Self::UnknownPrompt { .. }
            | Self::MissingPromptArgument { .. } => ErrorCode::INVALID_PARAMS,
            Self::ResourceNotFound { .. } => codes::RESOURCE_NOT_FOUND,
            Self::ResourceTooLarge { .. } | Self::ResourceOverMessageLimit { .. } => {
                codes::RESOURCE_TOO_LARGE
            }
            Self::ReadsBusy { .. } => codes::SERVER_BUSY,
            Self::MalformedMeta(_)
            | Self::InvalidRequestState(_)
            | Self::RequestStateTooLarge { .. } => ErrorCode::INVALID_PARAMS,
            Self::UnsupportedProtocolVersion { .. } => codes::UNSUPPORTED_PROTOCOL_VERSION,
            Self::MissingClientCapability { .. } => codes::MISSING_CLIENT_CAPABILITY,
            Self::HeaderMismatch(_) => codes::HEADER_MISMATCH,
            Self::HandlerFailed(_) => codes::HANDLER_FAILED,
            Self::TooManySubscriptions { .. }
            | Self::SubscriptionUriTooLong { .. }
            | Self::UnknownTask { .. } => ErrorCode::INVALID_PARAMS,
            Self::TooManyTasks { .. } => codes::SERVER_BUSY,
            Self::NotInitialized => codes::NOT_INITIALIZED,
            Self::TimedOut { .. } => codes::REQUEST_TIMED_OUT,
            Self::DuplicateRequestId => codes::DUPLICATE_REQUEST_ID,
            Self::ShuttingDown | Self::Reclaimed => codes::SHUTTING_DOWN,
            Self::CredentialExpired => codes::CREDENTIAL_EXPIRED,
            Self::NodeLost | Self::ConnectionLost => codes::ANSWER_LOST,
            Self::ServerBusy { .. }
            | Self::StoreUnavailable { .. }
            | Self::TaskStoreUnavailable { .. }
            | Self::TaskBusy { .. } => codes::SERVER_BUSY,
            Self::SessionBusy { .. } => codes::SESSION_BUSY,
            Self::SignatureRefused { .. } => codes::SIGNATURE_REFUSED,
            Self::IdempotencyConflict { .. } => codes::IDEMPOTENCY_CONFLICT,
            Self::ResultNotKept => codes::RESULT_NOT_KEPT,
            Self::Passed { code, .. } => ErrorCode(*code),
            Self::Internal | Self::AnswerOverMessageLimit { .. } => ErrorCode::INTERNAL_ERROR,
        }
    }

    /// The wire form for a request of the 2026-07-28 revision, where a missing resource is
    /// -32602 (not -32002, which that revision forbids). See [`to_wire`](Self::to_wire).
    pub fn to_wire_stateless(&self) -> ErrorObject {
        match self {
            Self::ResourceNotFound { uri } => {
                ErrorObject::new(ErrorCode::INVALID_PARAMS, "Resource not found")
                    .with_data(json!({ "uri": clipped(uri, MAX_DATA_STRING_BYTES) }))
            }
            other => other.to_wire(),
        }
    }

    /// The HTTP status a 2026-07-28 request answered with this error gets (its Streamable
    /// HTTP binding: 400 for header, capability and version errors and malformed `_meta`,
    /// 404 for an unknown method; 200 with the error in the body otherwise).
    pub fn http_status_stateless(&self) -> u16 {
        match self {
            Self::MalformedMeta(_)
            | Self::UnsupportedProtocolVersion { .. }
            | Self::MissingClientCapability { .. }
            | Self::HeaderMismatch(_) => 400,
            Self::MethodNotFound { .. } => 404,
            _ => 200,
        }
    }

    /// The wire form. This is the only place an [`Error`] becomes an error object.
    ///
    /// The message is cut at 1 KiB, and each client string in `data` (a method, a tool's or
    /// prompt's name, a URI, a task id) at 1 KiB: an error answers what the client sent,
    /// never more than that of it.
    pub fn to_wire(&self) -> ErrorObject {
        let message = self.to_string();
        let message = match clipped(&message, MAX_MESSAGE_BYTES) {
            Cow::Borrowed(_) => message,
            Cow::Owned(cut) => cut,
        };
        let object = ErrorObject::new(self.code(), message);
        let client = |text: &str| -> String { clipped(text, MAX_DATA_STRING_BYTES).into_owned() };
        match self {
            Self::Wire(wire) => wire.to_object(),
            Self::MethodNotFound { method } | Self::MethodNotAllowed { method } => {
                object.with_data(json!({ "method": client(method) }))
            }
            Self::RateLimited { retry_after_ms } => {
                object.with_data(json!({ "scope": "identity", "retryAfterMs": retry_after_ms }))
            }
            Self::UnknownTool { name } => object.with_data(json!({ "tool": client(name) })),
            Self::UnknownPrompt { name } => object.with_data(json!({ "prompt": client(name) })),
            Self::MissingPromptArgument { argument, .. } => {
                object.with_data(json!({ "argument": client(argument) }))
            }
            Self::ResourceNotFound { uri } => object.with_data(json!({ "uri": client(uri) })),
            Self::ResourceTooLarge { uri, size, limit } => {
                object.with_data(json!({ "uri": client(uri), "size": size, "limit": limit }))
            }
            Self::ResourceOverMessageLimit {
                uri,
                size,
                encoded,
                limit,
            } => object.with_data(json!({
                "uri": client(uri),
                "size": size,
                "encodedSize": encoded,
                "limit": limit,
                "setting": "limits.max_message_bytes",
            })),
            Self::AnswerOverMessageLimit { encoded, limit } => object.with_data(json!({
                "encodedSize": encoded,
                "limit": limit,
                "setting": "limits.max_message_bytes",
            })),
            Self::RequestStateTooLarge { retry_bytes, limit } => object.with_data(json!({
                "retryBytes": retry_bytes,
                "limit": limit,
                "setting": "limits.max_message_bytes",
            })),
            Self::ReadsBusy { scope, limit } => {
                object.with_data(json!({ "scope": scope.as_str(), "limit": limit }))
            }
            Self::TooManySubscriptions { limit } | Self::SubscriptionUriTooLong { limit } => {
                object.with_data(json!({ "limit": limit }))
            }
            Self::UnknownTask { task_id } => object.with_data(json!({ "taskId": client(task_id) })),
            Self::TooManyTasks { scope, limit } => {
                object.with_data(json!({ "scope": scope.as_str(), "limit": limit }))
            }
            Self::UnsupportedProtocolVersion { requested, pinned } => {
                // What `_meta` may name here: on a connection pinned to a session-era version,
                // none (naming the pin as supported, a client retrying with it looped).
                let supported: Vec<&str> = match pinned {
                    Some(pinned) if ProtocolVersion::STATELESS.contains(pinned) => {
                        vec![pinned.as_str()]
                    }
                    Some(_) => Vec::new(),
                    None => ProtocolVersion::STATELESS
                        .iter()
                        .map(|v| v.as_str())
                        .collect(),
                };
                match pinned {
                    // The connection's own version, which `_meta` may not name.
                    Some(pinned) if supported.is_empty() => object.with_data(
                        json!({ "supported": supported, "requested": requested, "pinned": pinned.as_str() }),
                    ),
                    _ => object
                        .with_data(json!({ "supported": supported, "requested": requested })),
                }
            }
            Self::MissingClientCapability { required } => {
                object.with_data(json!({ "requiredCapabilities": required }))
            }
            Self::TimedOut { timeout_ms } => object.with_data(json!({ "timeoutMs": timeout_ms })),
            Self::ServerBusy { limit, waited_ms } => object
                .with_data(json!({ "scope": "server", "limit": limit, "waitedMs": waited_ms })),
            Self::StoreUnavailable { retry_after_ms } => object
                .with_data(json!({ "scope": "idempotencyStore", "retryAfterMs": retry_after_ms })),
            Self::TaskStoreUnavailable { retry_after_ms } => {
                object.with_data(json!({ "scope": "taskStore", "retryAfterMs": retry_after_ms }))
            }
            Self::TaskBusy { waited_ms } => {
                object.with_data(json!({ "scope": "task", "waitedMs": waited_ms }))
            }
            Self::SessionBusy { limit } => {
                object.with_data(json!({ "scope": "session", "limit": limit }))
            }
            Self::SignatureRefused { reason } => {
                object.with_data(json!({ "reason": reason.as_str() }))
            }
            Self::IdempotencyConflict { scope } => {
                object.with_data(json!({ "scope": scope.as_str() }))
            }
            Self::ResultNotKept => object.with_data(json!({ "scope": "idempotencyKey" })),
            Self::Passed {
                data: Some(data), ..
            } => object.with_data(data.clone()),
            Self::Reclaimed => object.with_data(json!({ "reason": "reclaimed" })),
            Self::NodeLost => object.with_data(json!({ "reason": "nodeLost" })),
            Self::ConnectionLost => object.with_data(json!({ "reason": "connectionLost" })),
            _ => object,
        }
    }
}
