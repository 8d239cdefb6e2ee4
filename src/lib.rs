//! mcp-ws: Model Context Protocol sessions over WebSocket, for many clients at once.
//!
//! # Layout
//!
//! A text frame travels down this list and its answer back up:
//!
//! - [`server`]: HTTP routes (`/mcp` upgrade, `/healthz`, `/metrics`), start, shutdown.
//! - [`perimeter`]: what is checked before a session exists (Origin/Host, session cap).
//! - [`transport`]: the WebSocket session actor (one per connection, the only writer to
//!   its socket) and an in-memory twin for tests.
//! - [`session`]: the protocol core of a connection: lifecycle, negotiated version and
//!   capabilities, requests in flight, batches. Independent of the transport.
//! - [`worker`]: one actor per long request: global pool admission, deadline,
//!   cancellation, progress.
//! - [`mcp`]: what messages mean: versions, method table, payload types.
//! - [`jsonrpc`]: the wire: decoding and classifying frames, encoding answers, ids kept
//!   byte-exact.
//! - [`registry`] and [`builtins`]: the tools, resources and prompts offered.
//! - [`shared`], [`metrics`], [`config`], [`error`], [`telemetry`]: the rest.

pub mod builtins;
pub mod config;
pub mod error;
pub mod jsonrpc;
pub mod mcp;
pub mod metrics;
pub mod perimeter;
pub mod registry;
pub mod server;
pub mod session;
pub mod shared;
pub mod telemetry;
pub mod transport;
pub mod worker;
