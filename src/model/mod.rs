//! The protocol's data types that tools, resources and prompts build and read: content
//! blocks, tool results, prompt messages, and what a tool may ask the client (roots,
//! sampling, elicitation).
//!
//! Types sent to clients are written out for each session's negotiated version
//! ([`ProtocolVersion`]): what a version lacks is left out, never sent to a client whose
//! schema would reject it.

mod client;
mod content;
mod results;

pub use crate::protocol::mcp::{LogLevel, ProtocolVersion};
pub use client::{
    CreateMessageRequest, CreateMessageResult, ElicitAction, ElicitRequest, ElicitResult, Root,
    SamplingContent, SamplingMessage,
};
pub use content::{Annotations, Content, Icon, JsonString, ResourceContents, ResourceLink, Role};
pub use results::{
    CallToolResult, Completion, GetPromptResult, Implementation, PromptMessage, ToolAnnotations,
};

use serde::{Serialize, Serializer};

/// A JSON-RPC error another server answered with, passed on to the client as it is (a
/// message over 1 KiB cut there, as every error's): what a gateway's upstream said ([`ToolError::Rpc`](crate::ToolError::Rpc),
/// [`ResourceError::Rpc`](crate::ResourceError::Rpc),
/// [`PromptError::Rpc`](crate::PromptError::Rpc)). The message goes to the client: it must
/// not hold secrets.
pub use crate::client::RpcError;

/// How the server answers it: the same code (one out of JSON-RPC's range becomes -32603),
/// message and data.
impl From<RpcError> for crate::protocol::mcp::Error {
    fn from(error: RpcError) -> Self {
        Self::Passed {
            code: i32::try_from(error.code).unwrap_or(-32603),
            message: error.message,
            data: error.data,
        }
    }
}

/// A type written differently for different protocol versions.
#[doc(hidden)]
pub trait VersionedSerialize {
    /// Serializes `self` as a session on `version` may receive it.
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error>;
}

/// `value` as written for `version`.
#[doc(hidden)]
pub struct ForVersion<'a, T: ?Sized>(pub &'a T, pub ProtocolVersion);

impl<T: VersionedSerialize + ?Sized> Serialize for ForVersion<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_for(self.1, s)
    }
}

impl<T: VersionedSerialize> VersionedSerialize for [T] {
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for item in self {
            seq.serialize_element(&ForVersion(item, version))?;
        }
        seq.end()
    }
}

impl<T: VersionedSerialize> VersionedSerialize for Vec<T> {
    fn serialize_for<S: Serializer>(
        &self,
        version: ProtocolVersion,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize_for(version, s)
    }
}
