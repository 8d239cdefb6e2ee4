//! Interop with the official TypeScript MCP SDK: `tests/interop/client.mjs`
//! (`@modelcontextprotocol/sdk` 1.32.2 over its `WebSocketClientTransport`) reports every one
//! of the checks in `tests/interop/harness.rs` passed against the real server, and the server
//! provokes no client-side protocol error (`[client error]` on the client's stderr).
//!
//! Beyond requests and answers, the client answers the server's own requests from inside a
//! tool (`roots/list`, `sampling/createMessage`, `elicitation/create`), hears
//! `notifications/{tools,resources,prompts}/list_changed` when the server's owner changes the
//! registry while the client is connected and idle, and `notifications/resources/updated` for
//! the resources it subscribed to and no others. A server that sends a notification late, never
//! or to the wrong client fails the client-side check, so this test fails.
//!
//! Needs Node 20+ and npm; the dependencies are installed with `npm ci` when missing. A
//! machine without them fails this test: it is never skipped silently.

mod common;
#[path = "interop/harness.rs"]
mod harness;

use harness::{assert_every_check_passed, interop_server, run_client};
use std::path::Path;
use std::process::{Command, Stdio};

fn interop_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop"))
}

/// Installs the locked dependencies unless they are already there.
fn ensure_node_deps() {
    let dir = interop_dir();
    let installed = ["@modelcontextprotocol/sdk", "ws"]
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
            panic!("this test needs npm (Node 20+) on PATH to install tests/interop: {error}")
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

#[test]
fn typescript_sdk_client_passes_every_check() {
    ensure_node_deps();
    let server = interop_server();
    let mut node = Command::new("node");
    node.arg(interop_dir().join("client.mjs"));
    let run = run_client(node, &server, "node (20+, needed on PATH)");
    assert_every_check_passed(&run);
}
