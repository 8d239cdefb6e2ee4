//! What the messages mean in MCP: protocol versions and their negotiation, the method table
//! (which capability each method belongs to and since which version), log levels, and the
//! payload types of the methods this server serves.
//!
//! Spec: <https://modelcontextprotocol.io/specification/2025-11-25> and the three earlier
//! revisions this server also speaks.

mod bounded;
mod capabilities;
mod error;
mod header_params;
mod methods;
mod types;
mod version;

pub use capabilities::{
    required_capabilities, required_tasks_extension, server_capabilities, Offers,
};
pub use error::{
    bound_answer, clipped, codes, quoted, ConflictScope, Error, ReadLimit, SignatureProblem,
    TaskLimit,
};
pub use header_params::{
    decode_header_value, encode as encode_header_value, header_params, HeaderParam,
};
pub use methods::{notifications, Capability, Method};
pub use types::*;
pub use version::ProtocolVersion;

/// The tasks extension of 2026-07-28: its name in `capabilities.extensions`.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
