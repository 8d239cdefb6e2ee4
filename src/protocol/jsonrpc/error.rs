//! The JSON-RPC error object, the codes JSON-RPC 2.0 itself defines, and [`WireError`]: what
//! can be wrong with a frame before any method means anything.
//!
//! Codes of the layers above (MCP's, and the server's own in -32000..-32099) are defined
//! there (`mcp::codes`); this layer only carries them.

use super::limits::Exceeded;
use serde::Serialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// A JSON-RPC error code. The associated consts are JSON-RPC 2.0's own.
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
    /// A batch holds more entries than the configured maximum (implementation-defined, in
    /// the range JSON-RPC reserves for servers; jsonrpsee uses the same code).
    pub const BATCH_TOO_LARGE: Self = Self(-32010);
}

/// A JSON-RPC error object: `{"code", "message", "data"?}`.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorObject {
    /// What kind of error, for the client to branch on.
    pub code: ErrorCode,
    /// A short description, written for the model that reads it.
    pub message: Cow<'static, str>,
    /// Structured details (a limit, the offending field), already JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Box<RawValue>>,
}

impl ErrorObject {
    /// An error object without `data`.
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

/// What can be wrong with a frame at the JSON-RPC level, before any method means anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The frame is not JSON.
    #[error("Parse error: the message is not valid JSON")]
    Parse,
    /// Valid JSON, but not a valid JSON-RPC request; the reason names the rule.
    #[error("Invalid Request: {0}")]
    InvalidRequest(&'static str),
    /// The frame exceeds a limit on its JSON's shape (nesting, a string, an array, an
    /// object); it was not parsed.
    #[error("Invalid Request: {0}")]
    LimitExceeded(Exceeded),
    /// A batch with more entries than allowed.
    #[error("Batch too large")]
    BatchTooLarge {
        /// The configured maximum.
        limit: usize,
        /// How many entries the batch had.
        received: usize,
    },
}

impl WireError {
    /// The code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Parse => ErrorCode::PARSE_ERROR,
            Self::InvalidRequest(_) | Self::LimitExceeded(_) => ErrorCode::INVALID_REQUEST,
            Self::BatchTooLarge { .. } => ErrorCode::BATCH_TOO_LARGE,
        }
    }

    /// The wire form.
    pub fn to_object(&self) -> ErrorObject {
        let object = ErrorObject::new(self.code(), self.to_string());
        match self {
            Self::BatchTooLarge { limit, received } => {
                #[derive(Serialize)]
                struct Data {
                    limit: usize,
                    received: usize,
                }
                object.with_data(Data {
                    limit: *limit,
                    received: *received,
                })
            }
            Self::LimitExceeded(exceeded) => {
                #[derive(Serialize)]
                struct Data {
                    kind: &'static str,
                    limit: usize,
                }
                object.with_data(Data {
                    kind: exceeded.kind.name(),
                    limit: exceeded.limit,
                })
            }
            _ => object,
        }
    }
}
