//! The protocol, with no state and no IO: [`jsonrpc`] is the wire (JSON-RPC 2.0 framing,
//! ids, error objects; it knows nothing of MCP), [`mcp`] gives messages their meaning
//! (versions, methods, capabilities, payload types, error codes), and [`mrtr`] is the signed
//! request state of 2026-07-28 multi round-trip requests. The lowest layer: it imports
//! nothing of the crate.

pub mod jsonrpc;
pub mod mcp;
pub mod mrtr;
pub mod traceparent;
