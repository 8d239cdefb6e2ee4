//! Interop with the official TypeScript MCP SDK: `tests/interop/client.mjs`
//! (`@modelcontextprotocol/sdk` over its `WebSocketClientTransport`) runs every one of its
//! checks against the real server and all of them pass, and the server provokes no
//! client-side protocol error (`[client error]` on the client's stderr).
//!
//! Needs Node 20+ and npm; the dependencies are installed with `npm ci` when missing. A
//! machine without them fails this test: it is never skipped silently.

mod common;
use common::*;

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The checks `client.mjs` runs; it may grow, never shrink.
const MIN_CHECKS: u64 = 13;
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

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

fn read_all(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text);
        text
    })
}

/// Kills the client if the test ends while it still runs.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `N passed, M failed`.
fn parse_summary(line: &str) -> Option<(u64, u64)> {
    let (passed, failed) = line.split_once(", ")?;
    let passed = passed.strip_suffix(" passed")?.parse().ok()?;
    let failed = failed.strip_suffix(" failed")?.parse().ok()?;
    Some((passed, failed))
}

#[test]
fn typescript_sdk_client_passes_every_check() {
    ensure_node_deps();
    let server = start(settings());

    let child = Command::new("node")
        .arg(interop_dir().join("client.mjs"))
        .arg(server.url())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("this test needs node (20+) on PATH: {error}"));
    let mut child = KillOnDrop(child);
    let stdout = read_all(child.0.stdout.take().expect("piped stdout"));
    let stderr = read_all(child.0.stderr.take().expect("piped stderr"));

    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.0.kill();
            let _ = child.0.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = stdout.join().expect("stdout reader");
    let stderr = stderr.join().expect("stderr reader");
    let report = format!("--- stdout ---\n{stdout}--- stderr ---\n{stderr}");

    let status = status.unwrap_or_else(|| {
        panic!(
            "the client did not finish within {} s\n{report}",
            CLIENT_TIMEOUT.as_secs()
        )
    });
    assert!(status.success(), "client exit status {status}\n{report}");

    let last = stdout
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .unwrap_or_default();
    let (passed, failed) = parse_summary(last)
        .unwrap_or_else(|| panic!("last line is not `N passed, M failed`: {last:?}\n{report}"));
    assert_eq!(failed, 0, "failed checks\n{report}");
    assert!(
        passed >= MIN_CHECKS,
        "only {passed} checks ran, expected at least {MIN_CHECKS}\n{report}"
    );
    let ok_lines = stdout.lines().filter(|l| l.starts_with("ok ")).count() as u64;
    assert_eq!(ok_lines, passed, "one `ok` line per passed check\n{report}");
    assert!(
        !stdout.lines().any(|l| l.starts_with("FAIL")),
        "a check failed\n{report}"
    );
    let client_errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("client error") || l.contains("close error"))
        .collect();
    assert!(
        client_errors.is_empty(),
        "the server provoked client-side errors: {client_errors:?}\n{report}"
    );
}
