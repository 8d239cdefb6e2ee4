//! The integration tests, one module per feature, in one test binary (one link instead of
//! one per file; `support` holds what several modules share). Each module starts its own
//! servers on ephemeral ports, so the modules run side by side on the harness's threads.

mod support;

/// The binary's capability sets, as `mcp-ws` serves them (`builtins.set`).
#[path = "../../src/conformance/mod.rs"]
mod conformance;
#[path = "../../src/demo/mod.rs"]
mod demo;

mod access_log;
mod any_node;
mod auth;
mod batch;
mod capabilities;
mod client_conformance;
mod client_requests;
mod client_sse_resume;
mod client_stdio;
mod config_cli;
mod conformance_fixtures;
mod conformance_suite;
mod connection_limits;
mod container;
mod decode_memory;
mod dedup;
mod fuzz_session;
mod gateway;
mod heartbeat;
mod http;
mod interop_py_sdk;
mod interop_rmcp;
mod interop_ts_sdk;
mod jsonrpc_props;
mod jsonrpc_wire;
mod lifecycle;
mod limits;
mod log_writer;
mod memory_transport;
mod observe_metrics;
mod origin;
mod partial_messages;
mod redis_store;
mod registry_changes;
mod request_limits;
mod resource_files;
mod resources;
mod resume;
mod rollout;
mod shutdown;
mod signatures;
mod stateless_http;
mod stateless_mrtr;
mod stateless_ws;
mod tasks;
mod three_nodes;
mod tls;
mod two_nodes;
mod upgraded;
mod versions;
mod workers;
mod ws_subprotocol;
