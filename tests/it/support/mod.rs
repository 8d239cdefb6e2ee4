//! What the integration tests share, by concern:
//!
//! - here: starting the real server in-process on `127.0.0.1:0` (its own thread and actix
//!   system), JSON-RPC messages and the checks of their answers;
//! - [`ws`]: a WebSocket client; [`http`]: HTTP (metrics, the 2026-07-28 client, SSE);
//! - [`meta`]: the per-request `_meta` of 2026-07-28 and the checks of its results;
//!   [`stateless`]: the 2026-07-28 server under test;
//! - [`process`]: the `mcp-ws` binary as a child process; [`redis`]: a `redis-server`;
//!   [`nginx`]: nginx; [`ports`]: ports for the programs the tests start, checked to be
//!   theirs;
//!   [`interop`]: the server the SDK clients drive; [`alone`]: a test in a process of its own.
//!
//! Every receive has a timeout, so a missing answer fails the test instead of hanging it.

pub mod alone;
pub mod http;
pub mod interop;
pub mod meta;
pub mod nginx;
pub mod ports;
pub mod process;
pub mod redis;
pub mod stateless;
pub mod ws;

pub use ws::Client;

use mcp_ws::model::CallToolResult;
use mcp_ws::tool::{Arguments, ToolFuture, ToolHandler};
use mcp_ws::{RequestContext, RunningServer, Server, ServerBuilder, Settings, Tool, ToolError};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Defaults, on an ephemeral port, one worker thread, quiet logs.
pub fn settings() -> Settings {
    let mut s = Settings::default();
    s.server.listen = "127.0.0.1:0".parse().expect("addr");
    s.server.workers = 1;
    s
}

/// The API key [`with_api_key`] adds, named `tester`.
pub const TEST_KEY: &str = "tester-5c1d9e2a7b3f4c6d8e0a1b2c3d4e5f60";

/// `settings` with the API key [`TEST_KEY`] (authentication stays optional): for what is
/// scoped to an identity across sessions (an anonymous client is its session alone).
pub fn with_api_key(mut settings: Settings) -> Settings {
    settings
        .auth
        .api_keys
        .push(api_key("tester", TEST_KEY, &[]));
    settings
}

/// The SHA-256 of [`TEST_KEY`] in hex, as `auth.api_keys` takes it.
pub fn test_key_sha256() -> String {
    sha256_hex(TEST_KEY)
}

/// The SHA-256 of `key` in hex, as `auth.api_keys` takes it.
pub fn sha256_hex(key: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// An `auth.api_keys` entry: `key` known as `name`, with `scopes`.
pub fn api_key(name: &str, key: &str, scopes: &[&str]) -> mcp_ws::config::ApiKeySettings {
    mcp_ws::config::ApiKeySettings {
        name: name.into(),
        sha256: sha256_hex(key),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
    }
}

/// The demo set, as the binary serves it by default.
pub fn start(settings: Settings) -> RunningServer {
    start_with(settings, |builder| builder)
}

/// The demo set plus whatever `extra` adds, through the public builder.
pub fn start_with(
    settings: Settings,
    extra: impl FnOnce(ServerBuilder) -> ServerBuilder,
) -> RunningServer {
    start_bare(settings, |builder| extra(crate::demo::demo(builder)))
}

/// A server with nothing but what `extra` registers (no demo set): every list is known in
/// full.
pub fn start_bare(
    settings: Settings,
    extra: impl FnOnce(ServerBuilder) -> ServerBuilder,
) -> RunningServer {
    // One subscriber for the whole test binary, at the same level for every test: the first
    // call installs it, later ones leave it in place.
    mcp_ws::telemetry::init("warn");
    extra(Server::builder().settings(settings))
        .build()
        .expect("server builds")
        .spawn()
        .expect("server starts")
}

/// The conformance profile: the configuration the official suite runs against.
pub const CONFORMANCE_TOML: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/config/conformance.toml");

/// The conformance profile, on an ephemeral port and one worker thread.
pub fn profile_settings() -> Settings {
    let mut settings =
        Settings::from_file(Path::new(CONFORMANCE_TOML)).expect("conformance.toml is valid");
    settings.server.listen = "127.0.0.1:0".parse().expect("addr");
    settings.server.workers = 1;
    settings
}

/// A server as the binary builds it from the conformance profile: only the set
/// `builtins.set` names.
pub fn start_profile() -> RunningServer {
    let settings = profile_settings();
    let set = settings.builtins.set.clone();
    start_bare(settings, |builder| builtins(&set, builder))
}

/// Adds the set `builtins.set` names, as the binary does (`demo`, `conformance` or `none`).
pub fn builtins(set: &str, builder: ServerBuilder) -> ServerBuilder {
    match set {
        "demo" => crate::demo::demo(builder),
        "conformance" => crate::conformance::fixtures(builder),
        _ => builder,
    }
}

/// The built-in tools plus `hold` (see [`Hold`]); returns the server and the gate.
pub fn start_with_gate(settings: Settings) -> (RunningServer, Arc<Semaphore>) {
    let gate = Arc::new(Semaphore::new(0));
    let hold = Tool::from_handler(
        "hold",
        "Waits until the test opens the gate.",
        json!({"type": "object"}),
        Hold(gate.clone()),
    );
    (start_with(settings, |b| b.tool(hold)), gate)
}

/// A tool that finishes only when the test adds a permit to its gate: work "in flight" for
/// exactly as long as the test wants, with no timing involved.
pub struct Hold(pub Arc<Semaphore>);

impl ToolHandler for Hold {
    fn call(&self, _arguments: Arguments, _ctx: RequestContext) -> ToolFuture {
        let gate = self.0.clone();
        Box::pin(async move {
            let _permit = gate
                .acquire()
                .await
                .map_err(|_| ToolError::Failed("gate closed".into()))?;
            Ok(CallToolResult::text("released"))
        })
    }
}

pub fn initialize_params(version: &str) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": {"roots": {"listChanged": true}, "sampling": {}},
        "clientInfo": {"name": "mcp-ws-tests", "version": "1.0.0"}
    })
}

/// Asserts a JSON-RPC error response with this id and code; returns the error object.
pub fn assert_error(response: &Value, id: &Value, code: i64) -> Value {
    assert_eq!(response["jsonrpc"], "2.0", "{response}");
    assert_eq!(&response["id"], id, "{response}");
    assert!(
        response.get("result").is_none(),
        "error and result together: {response}"
    );
    assert_eq!(response["error"]["code"], code, "{response}");
    assert!(response["error"]["message"].is_string(), "{response}");
    response["error"].clone()
}

/// Asserts the refusal of a subscription past `limits.max_subscriptions_per_session`
/// (`resources/subscribe` or `subscriptions/listen`): -32602 "Too many subscriptions" with
/// `{limit}`, under this id.
pub fn assert_too_many_subscriptions(response: &Value, id: &Value, limit: u64) {
    let error = assert_error(response, id, -32602);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Too many subscriptions")),
        "{response}"
    );
    assert_eq!(error["data"], json!({ "limit": limit }), "{response}");
}

/// Asserts a success response with this id; returns the result.
pub fn assert_result(response: &Value, id: &Value) -> Value {
    assert_eq!(response["jsonrpc"], "2.0", "{response}");
    assert_eq!(&response["id"], id, "{response}");
    assert!(
        response.get("error").is_none(),
        "unexpected error: {response}"
    );
    response["result"].clone()
}

/// Stops `server` on a blocking thread (`stop()` waits for the server thread to end), so the
/// test goes on talking to it meanwhile; [`assert_stopped`] waits for the end.
pub fn stop_in_background(server: RunningServer) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_blocking(move || server.stop())
}

/// Fails unless the stop begun by [`stop_in_background`] ends within READ_TIMEOUT.
pub async fn assert_stopped(stopper: tokio::task::JoinHandle<()>) {
    tokio::time::timeout(READ_TIMEOUT, stopper)
        .await
        .expect("stop() returns: the server thread ends")
        .expect("stop() does not panic");
}

/// Arguments of test tools that take none.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct NoArgs {}

/// The session-era versions, oldest first.
pub const VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The JSON-RPC error code of a request refused while the server drains.
pub const SHUTTING_DOWN: i64 = -32004;

pub fn request(id: Value, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A session-era `notifications/cancelled` for the request `id`.
pub fn cancel(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
           "params": {"requestId": id, "reason": "test"}})
}

/// The text of a tool result's first content block.
pub fn text_of(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text result: {result}"))
}

/// The text of a tool call's answer (its result's first content block).
pub fn tool_text(response: &Value) -> String {
    text_of(&response["result"]).to_owned()
}

/// The names in a `tools/list` answer.
pub fn tool_names(response: &Value) -> Vec<&str> {
    response["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("a tools/list answer: {response}"))
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect()
}

/// The text of a successful tool call's answer with this id.
pub fn result_text(response: &Value, id: &Value) -> String {
    text_of(&assert_result(response, id)).to_owned()
}
