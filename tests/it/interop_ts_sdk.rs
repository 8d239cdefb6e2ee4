//! Interop with the official TypeScript MCP SDK, run with Node against the real server:
//!
//! - `tests/interop/client.mjs` (`@modelcontextprotocol/sdk` 1.32.2) reports every one of the
//!   checks in `tests/it/support/interop.rs` passed over each transport: its
//!   `WebSocketClientTransport`, and its `StreamableHTTPClientTransport` (a 2025-11-25 session
//!   with `Mcp-Session-Id`), where the list changes and resource updates arrive on the
//!   session's `GET` stream and `DELETE` ends the session (its id is then 404).
//! - `tests/interop/ts2/client2026.mjs` (`@modelcontextprotocol/client` 2.4.0, the 2.x client,
//!   pinned to 2026-07-28) reports every one of [`TS2_CHECKS`] passed over its
//!   `StreamableHTTPClientTransport`: `server/discover` and no `initialize`, results of tools,
//!   resources and prompts, a multi round-trip request (`input_required` answered by the
//!   client's handler, retried with `inputResponses`, the `requestState` and a new id), list
//!   changes and resource updates on a `subscriptions/listen` stream, and a stateless wire (no
//!   session id, only POSTs, headers repeating the body).
//!
//! In every run the server provokes no client-side protocol error (`[client error]` on the
//! client's stderr). Beyond requests and answers, the clients answer what a tool asks them
//! (`roots/list`, `sampling/createMessage`, `elicitation/create`: requests from the server in
//! a 2025-11-25 session, `inputRequests` in 2026-07-28), and hear
//! `notifications/{tools,resources,prompts}/list_changed` when the server's owner changes the
//! registry while they are idle, and `notifications/resources/updated` for the resources they
//! subscribed to and no others. A server that sends a notification late, never or to the wrong
//! client fails the client-side check, so this test fails.
//!
//! Needs Node 20+ and npm; the dependencies are installed with `npm ci` when missing (1.x in
//! `tests/interop`, 2.x in `tests/interop/ts2`, each with its own lockfile). A machine without
//! them fails this test: it is never skipped silently.

use crate::support::interop::{
    assert_every_check_passed, interop_dir, interop_server, run_client, Transport,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Once;

/// Every check `tests/interop/ts2/client2026.mjs` runs; each must pass.
const TS2_CHECKS: &[&str] = &[
    "connect pinned to 2026-07-28",
    "server-info",
    "tools/list",
    "tools/call echo, add, fail",
    "tools/call sleep with progress",
    "tools/call unknown tool -> -32602",
    "input_required: elicitation answered, request retried with requestState",
    "input_required: sampling and roots answered",
    "resources/read",
    "prompts/get greet",
    "subscriptions/listen acknowledged",
    "list_changed on the listen stream after additions and removals",
    "resources/updated on the listen stream for the subscribed resource only",
    "stateless: no session id, no GET, no DELETE; headers repeat the body",
];

pub(crate) fn ts2_dir() -> PathBuf {
    interop_dir().join("ts2")
}

/// Installs the locked dependencies of `dir` unless `packages` are already there.
fn npm_ci(dir: &Path, packages: &[&str]) {
    let installed = packages
        .iter()
        .all(|package| dir.join("node_modules").join(package).is_dir());
    if installed {
        return;
    }
    let output = Command::new("npm")
        .arg("ci")
        .arg("--prefix")
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "this test needs npm (Node 20+) on PATH to install {}: {error}",
                dir.display()
            )
        });
    assert!(
        output.status.success(),
        "npm ci --prefix {} failed ({}):\n{}\n{}",
        dir.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The 1.x SDK (once per test binary: its tests run in parallel, and two `npm ci` in one
/// directory would trip over each other).
pub(crate) fn ensure_sdk_1() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        npm_ci(
            &interop_dir(),
            &[
                "@modelcontextprotocol/sdk",
                "@modelcontextprotocol/server-everything",
                "ws",
            ],
        )
    });
}

/// The 2.x client and server.
pub(crate) fn ensure_sdk_2() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        npm_ci(
            &ts2_dir(),
            &[
                "@modelcontextprotocol/client",
                "@modelcontextprotocol/server",
            ],
        )
    });
}

fn run_sdk_1(transport: Transport) {
    ensure_sdk_1();
    let server = interop_server();
    let mut node = Command::new("node");
    node.arg(interop_dir().join("client.mjs"));
    let run = run_client(node, &server, transport, "node (20+, needed on PATH)");
    assert_every_check_passed(&run, &transport.expected_checks());
}

#[test]
fn typescript_sdk_client_passes_every_check() {
    run_sdk_1(Transport::WebSocket);
}

#[test]
fn typescript_sdk_client_passes_every_check_over_streamable_http() {
    run_sdk_1(Transport::Http);
}

#[test]
fn typescript_sdk_2_client_passes_every_check_on_2026_07_28_over_streamable_http() {
    ensure_sdk_2();
    let server = interop_server();
    let mut node = Command::new("node");
    node.arg(ts2_dir().join("client2026.mjs"));
    let run = run_client(node, &server, Transport::Http, "node (20+, needed on PATH)");
    assert_every_check_passed(&run, TS2_CHECKS);
}
