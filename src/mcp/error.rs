//! Every error condition the server can answer a request with, the codes it uses, and the
//! one place where each becomes a JSON-RPC error object (`code`, `message`, `data`).
//!
//! The README's error table lists exactly these codes. Messages are written for the model
//! that reads them: short, actionable, and never carrying internals. Tool failures are not
//! here: they are results with `isError: true` (see `ToolError`). Server-defined conditions
//! use -32000..-32099 (never -32002 or -32042, which MCP assigns); -32603 is kept for bugs
//! and carries no details.

use crate::jsonrpc::{ErrorCode, ErrorObject, WireError};
use serde_json::json;

/// The codes MCP and this server add to JSON-RPC's own ([`ErrorCode`]'s consts).
pub mod codes {
    use crate::jsonrpc::ErrorCode;

    /// A method other than `ping` arrived before `initialize`.
    pub const NOT_INITIALIZED: ErrorCode = ErrorCode(-32000);
    /// The request ran longer than its timeout and was stopped.
    pub const REQUEST_TIMED_OUT: ErrorCode = ErrorCode(-32001);
    /// MCP: `resources/read` of a URI the server does not have.
    pub const RESOURCE_NOT_FOUND: ErrorCode = ErrorCode(-32002);
    /// A request reused the id of a request of this session that is still in flight.
    pub const DUPLICATE_REQUEST_ID: ErrorCode = ErrorCode(-32003);
    /// The server is shutting down and takes no new requests.
    pub const SHUTTING_DOWN: ErrorCode = ErrorCode(-32004);
    /// No slot in the server-wide worker pool became free within the admission wait.
    pub const SERVER_BUSY: ErrorCode = ErrorCode(-32008);
    /// A resource is larger than the server sends (`resources.max_bytes`).
    pub const RESOURCE_TOO_LARGE: ErrorCode = ErrorCode(-32005);
    /// A resource read or prompt render failed; the message says why.
    pub const HANDLER_FAILED: ErrorCode = ErrorCode(-32006);
    /// The session already has its maximum number of requests in flight.
    pub const SESSION_BUSY: ErrorCode = ErrorCode(-32009);
    /// The client's identity sent more requests than its rate allows; `data.retryAfterMs`
    /// says when the next one will be served.
    pub const RATE_LIMITED: ErrorCode = ErrorCode(-32019);
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
    #[error("{0}")]
    HandlerFailed(String),
    #[error("Too many subscriptions: the session may hold {limit}")]
    TooManySubscriptions { limit: usize },
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
    #[error("Server busy: no worker slot became free in time, retry later")]
    ServerBusy { limit: usize, waited_ms: u64 },
    #[error("Session busy: too many requests in flight, wait for some to finish")]
    SessionBusy { limit: usize },
    #[error("Internal error")]
    Internal,
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
            Self::ResourceTooLarge { .. } => codes::RESOURCE_TOO_LARGE,
            Self::HandlerFailed(_) => codes::HANDLER_FAILED,
            Self::TooManySubscriptions { .. } | Self::SubscriptionUriTooLong { .. } => {
                ErrorCode::INVALID_PARAMS
            }
            Self::NotInitialized => codes::NOT_INITIALIZED,
            Self::TimedOut { .. } => codes::REQUEST_TIMED_OUT,
            Self::DuplicateRequestId => codes::DUPLICATE_REQUEST_ID,
            Self::ShuttingDown => codes::SHUTTING_DOWN,
            Self::ServerBusy { .. } => codes::SERVER_BUSY,
            Self::SessionBusy { .. } => codes::SESSION_BUSY,
            Self::Internal => ErrorCode::INTERNAL_ERROR,
        }
    }

    /// The wire form. This is the only place an [`Error`] becomes an error object.
    pub fn to_wire(&self) -> ErrorObject {
        let object = ErrorObject::new(self.code(), self.to_string());
        match self {
            Self::Wire(wire) => wire.to_object(),
            Self::MethodNotFound { method } | Self::MethodNotAllowed { method } => {
                object.with_data(json!({ "method": method }))
            }
            Self::RateLimited { retry_after_ms } => {
                object.with_data(json!({ "scope": "identity", "retryAfterMs": retry_after_ms }))
            }
            Self::UnknownTool { name } => object.with_data(json!({ "tool": name })),
            Self::UnknownPrompt { name } => object.with_data(json!({ "prompt": name })),
            Self::MissingPromptArgument { argument, .. } => {
                object.with_data(json!({ "argument": argument }))
            }
            Self::ResourceNotFound { uri } => object.with_data(json!({ "uri": uri })),
            Self::ResourceTooLarge { uri, size, limit } => {
                object.with_data(json!({ "uri": uri, "size": size, "limit": limit }))
            }
            Self::TooManySubscriptions { limit } | Self::SubscriptionUriTooLong { limit } => {
                object.with_data(json!({ "limit": limit }))
            }
            Self::TimedOut { timeout_ms } => object.with_data(json!({ "timeoutMs": timeout_ms })),
            Self::ServerBusy { limit, waited_ms } => object
                .with_data(json!({ "scope": "server", "limit": limit, "waitedMs": waited_ms })),
            Self::SessionBusy { limit } => {
                object.with_data(json!({ "scope": "session", "limit": limit }))
            }
            _ => object,
        }
    }
}
