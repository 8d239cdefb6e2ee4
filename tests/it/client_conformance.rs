//! `mcp_ws::client` judged by the official conformance suite's client scenarios: the suite
//! (`@modelcontextprotocol/conformance` 0.2.0-alpha.12, as in `conformance_suite.rs`) starts
//! each scenario's server and runs `examples/conformance_client.rs` against it, in the era
//! of the scenario's version. Each run must exit 0 with every check passed and none failed
//! or warned.
//!
//! Run: every client scenario of the suite that is not about authorization (the client has
//! no OAuth; `auth/*` is left out), under each version it applies to.

use crate::conformance_suite::{ensure_installed, node, suite};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The example, built by `cargo test` beside the test binaries.
fn client_example() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let examples = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .join("examples/conformance_client");
    assert!(
        examples.is_file(),
        "{} is missing: `cargo test` builds the examples",
        examples.display()
    );
    examples
}

/// Runs `scenario` at `version` and asserts that it passed with `checks` checks.
fn passes(scenario: &str, version: &str, checks: usize) {
    ensure_installed();
    let output = Command::new(node())
        .arg(suite("0.2.0-alpha.12"))
        .args(["client", "--command"])
        .arg(client_example())
        .args(["--scenario", scenario, "--spec-version", version])
        .stdin(Stdio::null())
        .output()
        .expect("node runs");
    // The suite writes its results to stderr.
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let expected = format!("Passed: {checks}/{checks}, 0 failed, 0 warnings");
    assert!(
        output.status.success() && log.contains(&expected) && log.contains("OVERALL: PASSED"),
        "{scenario} at {version}: expected {expected:?}\n{log}"
    );
}

#[test]
fn initialize_2025_11_25() {
    passes("initialize", "2025-11-25", 1);
}

#[test]
fn tools_call_in_both_eras() {
    passes("tools_call", "2025-11-25", 2);
    passes("tools_call", "2026-07-28", 2);
}

/// A response stream closed before its answer (SEP-1699): the client reconnects with a GET
/// carrying `Last-Event-ID`, no sooner than the server's `retry`, and gets the answer there.
#[test]
fn sse_retry_2025_11_25() {
    passes("sse-retry", "2025-11-25", 3);
}

#[test]
fn elicitation_defaults_2025_11_25() {
    passes("elicitation-sep1034-client-defaults", "2025-11-25", 5);
}

#[test]
fn json_schema_is_passed_on_as_listed_in_both_eras() {
    passes("json-schema-2020-12-preservation", "2025-11-25", 9);
    passes("json-schema-2020-12-preservation", "2026-07-28", 9);
    passes("json-schema-ref-no-deref", "2026-07-28", 1);
}

/// `_meta` on every request, the version header, and a retry with the version a refusal
/// lists.
#[test]
fn request_metadata_2026_07_28() {
    passes("request-metadata", "2026-07-28", 8);
}

/// `input_required`: the answers and the exact `requestState` sent again under a new id.
#[test]
fn input_required_rounds_2026_07_28() {
    passes("sep-2322-client-request-state", "2026-07-28", 5);
}

/// `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*` (with their encoding), and tools with invalid
/// annotations left out.
#[test]
fn http_headers_2026_07_28() {
    passes("http-standard-headers", "2026-07-28", 9);
    passes("http-custom-headers", "2026-07-28", 18);
    passes("http-invalid-tool-headers", "2026-07-28", 12);
}
