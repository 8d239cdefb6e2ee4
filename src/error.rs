//! Every error condition the server can answer a request with, and the one place where each
//! becomes a JSON-RPC error object (`code`, `message`, `data`).
//!
//! The README's error table lists exactly these variants. Messages are written for the model
//! that reads them: short, actionable, and never carrying internals. Tool failures are not
//! here: they are results with `isError: true` (see `registry::ToolError`).

use crate::jsonrpc::{ErrorCode, ErrorObject};
use serde_json::json;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    #[error("Parse error: the message is not valid JSON")]
    Parse,
    #[error("Invalid Request: {0}")]
    InvalidRequest(&'static str),
    #[error("Batch too large")]
    BatchTooLarge { limit: usize, received: usize },
    #[error("Method not found")]
    MethodNotFound { method: String },
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
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Parse => ErrorCode::PARSE_ERROR,
            Self::InvalidRequest(_) => ErrorCode::INVALID_REQUEST,
            Self::BatchTooLarge { .. } => ErrorCode::BATCH_TOO_LARGE,
            Self::MethodNotFound { .. } => ErrorCode::METHOD_NOT_FOUND,
            Self::InvalidParams(_)
            | Self::UnknownTool { .. }
            | Self::UnknownPrompt { .. }
            | Self::MissingPromptArgument { .. } => ErrorCode::INVALID_PARAMS,
            Self::ResourceNotFound { .. } => ErrorCode::RESOURCE_NOT_FOUND,
            Self::NotInitialized => ErrorCode::NOT_INITIALIZED,
            Self::TimedOut { .. } => ErrorCode::REQUEST_TIMED_OUT,
            Self::DuplicateRequestId => ErrorCode::DUPLICATE_REQUEST_ID,
            Self::ShuttingDown => ErrorCode::SHUTTING_DOWN,
            Self::ServerBusy { .. } => ErrorCode::SERVER_BUSY,
            Self::SessionBusy { .. } => ErrorCode::SESSION_BUSY,
            Self::Internal => ErrorCode::INTERNAL_ERROR,
        }
    }

    /// The wire form. This is the only place an [`Error`] becomes an error object.
    pub fn to_wire(&self) -> ErrorObject {
        let object = ErrorObject::new(self.code(), self.to_string());
        match self {
            Self::BatchTooLarge { limit, received } => {
                object.with_data(json!({ "limit": limit, "received": received }))
            }
            Self::MethodNotFound { method } => object.with_data(json!({ "method": method })),
            Self::UnknownTool { name } => object.with_data(json!({ "tool": name })),
            Self::UnknownPrompt { name } => object.with_data(json!({ "prompt": name })),
            Self::MissingPromptArgument { argument, .. } => {
                object.with_data(json!({ "argument": argument }))
            }
            Self::ResourceNotFound { uri } => object.with_data(json!({ "uri": uri })),
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

/// Failures to start the server (not sent to any client).
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("server failed: {0}")]
    Io(#[from] std::io::Error),
}
