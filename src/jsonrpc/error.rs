//! The JSON-RPC error object and every error code this server can put on the wire.
//!
//! The codes are the one enumerable list that clients (and models) branch on; the README's
//! error table mirrors [`ErrorCode`]. Server-defined conditions use -32000..-32099 and never
//! -32603, which is kept for bugs (a panicking handler) and carries no details.

use serde::Serialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// A JSON-RPC error code. Associated consts name every code the server emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct ErrorCode(pub i32);

impl ErrorCode {
    /// The frame is not valid JSON.
    pub const PARSE_ERROR: Self = Self(-32700);
    /// Valid JSON, but not a valid JSON-RPC request (or a request not allowed where it is).
    pub const INVALID_REQUEST: Self = Self(-32600);
    /// Unknown method, or a method of a capability the session did not negotiate.
    pub const METHOD_NOT_FOUND: Self = Self(-32601);
    /// The method exists but its params are wrong.
    pub const INVALID_PARAMS: Self = Self(-32602);
    /// A bug in the server (a handler panicked). The message never carries details.
    pub const INTERNAL_ERROR: Self = Self(-32603);

    /// A method other than `ping` arrived before `initialize`.
    pub const NOT_INITIALIZED: Self = Self(-32000);
    /// The request ran longer than its timeout and was stopped.
    pub const REQUEST_TIMED_OUT: Self = Self(-32001);
    /// MCP: `resources/read` of a URI the server does not have.
    pub const RESOURCE_NOT_FOUND: Self = Self(-32002);
    /// A request reused the id of a request of this session that is still in flight.
    pub const DUPLICATE_REQUEST_ID: Self = Self(-32003);
    /// The server is shutting down and takes no new requests.
    pub const SHUTTING_DOWN: Self = Self(-32004);
    /// No slot in the server-wide worker pool became free within the admission wait.
    pub const SERVER_BUSY: Self = Self(-32008);
    /// The session already has its maximum number of requests in flight.
    pub const SESSION_BUSY: Self = Self(-32009);
    /// A batch holds more entries than the configured maximum.
    pub const BATCH_TOO_LARGE: Self = Self(-32010);
}

/// A JSON-RPC error object: `{"code", "message", "data"?}`.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorObject {
    pub code: ErrorCode,
    pub message: Cow<'static, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Box<RawValue>>,
}

impl ErrorObject {
    pub fn new(code: ErrorCode, message: impl Into<Cow<'static, str>>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Attaches `data`, serialized from any value. Serialization of the plain values used
    /// here cannot fail; if it ever did, the error is still sent, without data.
    pub fn with_data(mut self, data: impl Serialize) -> Self {
        self.data = serde_json::value::to_raw_value(&data).ok();
        self
    }
}
