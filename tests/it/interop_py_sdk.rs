//! Interop with the official Python MCP SDK: `tests/interop/client.py` (`mcp[ws]` 1.30.0, a
//! `ClientSession`) reports every one of the checks in `tests/it/support/interop.rs` passed
//! against the real server, the same checks as the TypeScript client's, and the server
//! provokes no client-side protocol error (the SDK's warnings and errors, printed as
//! `[client error]` on the client's stderr), over each transport:
//! `mcp.client.websocket.websocket_client`, and `mcp.client.streamable_http.streamable_http_client`
//! (a 2025-11-25 session with `Mcp-Session-Id`), where the list changes and resource updates
//! arrive on the session's `GET` stream and `DELETE` ends the session (its id is then 404).
//!
//! The client answers the server's own requests from inside a tool (roots, sampling and
//! elicitation callbacks), hears `notifications/{tools,resources,prompts}/list_changed` when the
//! server's owner changes the registry while it is connected and idle, and
//! `notifications/resources/updated` for the resources it subscribed to and no others. A server
//! that sends a notification late, never or to the wrong client fails the client-side check, so
//! this test fails.
//!
//! Needs Python 3.10+ with `venv` and `pip` (Debian: `python3-venv`); `python3` on PATH, or the
//! interpreter named by `MCP_WS_PYTHON`. The test creates `tests/interop/.venv` and installs
//! `tests/interop/requirements.txt` into it when missing or out of date. A machine without
//! Python fails this test: it is never skipped silently.

use crate::support::interop::{
    assert_every_check_passed, interop_dir, interop_server, run_client, KillOnDrop, Transport,
};
use crate::support::process::ServerProcess;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

/// Runs `command` to the end; panics with its output and `hint` if it cannot start or fails.
fn run_setup_step(command: &mut Command, hint: &str) {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("{hint}: cannot run {command:?}: {error}"));
    assert!(
        output.status.success(),
        "{hint}: {command:?} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The venv's interpreter, with `requirements.txt` installed (made once per test binary: its
/// tests run in parallel, and two would trip over each other making one venv).
pub(crate) fn ensure_python_env() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(make_python_env)
}

/// A venv is reused only if it was made from the current `requirements.txt` (a copy is kept in
/// it once the install succeeded).
fn make_python_env() -> PathBuf {
    let dir = interop_dir();
    let requirements_file = dir.join("requirements.txt");
    let requirements = std::fs::read_to_string(&requirements_file).expect("requirements.txt");
    let venv = dir.join(".venv");
    let python = venv.join("bin").join("python");
    let stamp = venv.join("installed-requirements.txt");
    if python.is_file() && std::fs::read_to_string(&stamp).ok() == Some(requirements.clone()) {
        return python;
    }

    let base = std::env::var_os("MCP_WS_PYTHON").unwrap_or_else(|| "python3".into());
    run_setup_step(
        Command::new(&base)
            .args(["-m", "venv", "--clear"])
            .arg(&venv),
        "this test needs Python 3.10+ with venv and pip (`python3` on PATH or MCP_WS_PYTHON; \
         Debian: apt-get install python3-venv)",
    );
    run_setup_step(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg("-r")
            .arg(&requirements_file),
        "installing tests/interop/requirements.txt (mcp[ws]==1.30.0) into tests/interop/.venv",
    );
    std::fs::write(&stamp, requirements).expect("write the venv's requirements stamp");
    python
}

fn run_checks(transport: Transport) {
    let python = ensure_python_env();
    let server = interop_server();
    let mut client = Command::new(python);
    client.arg(interop_dir().join("client.py"));
    let run = run_client(client, &server, transport, "the venv's python");
    assert_every_check_passed(&run, &transport.expected_checks());
}

#[test]
fn python_sdk_client_passes_every_check() {
    run_checks(Transport::WebSocket);
}

#[test]
fn python_sdk_client_passes_every_check_over_streamable_http() {
    run_checks(Transport::Http);
}

/// Graceful shutdown as the Python SDK lives it (`tests/interop/shutdown_client.py`): the
/// real binary gets SIGTERM while the client's `tools/call` (`sleep`, 1.5 s) runs. The call
/// returns its result, the SDK's own `tools/list` after it (to check the result's schema) is
/// answered although the server is draining, nothing raises on the client, and the binary
/// exits 0. Before the drain answered cheap requests and waited for a quiet client, the SDK
/// raised "Connection closed" (WebSocket) or "Session terminated" (HTTP) here.
fn python_sdk_call_survives_sigterm(transport: Transport) {
    let python = ensure_python_env();
    let mut server = ServerProcess::spawn(&["--listen", "127.0.0.1:0"], &[]);
    let addr = server.wait_listening();
    let url = match transport {
        Transport::WebSocket => format!("ws://{addr}/mcp"),
        Transport::Http => format!("http://{addr}/mcp"),
    };
    let mut client = KillOnDrop(
        Command::new(python)
            .arg(interop_dir().join("shutdown_client.py"))
            .args(["--transport", transport.flag(), &url])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the venv's python starts"),
    );
    let stdout = client.0.stdout.take().expect("piped stdout");
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut transcript = Vec::new();
    let next_line = |transcript: &mut Vec<String>| {
        let line = lines.recv_timeout(Duration::from_secs(30)).ok();
        transcript.extend(line.clone());
        line
    };
    while next_line(&mut transcript).as_deref() != Some("CALLING") {
        assert!(
            transcript.last().is_some(),
            "the client ended before calling: {transcript:?}\n{}",
            server.stderr_text()
        );
    }
    // SIGTERM once the call runs on the server (its worker is counted).
    let deadline = Instant::now() + Duration::from_secs(10);
    while workers_running(addr) != 1 {
        assert!(Instant::now() < deadline, "the call never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    server.terminate();

    while next_line(&mut transcript).is_some() {}
    let status = client.0.wait().expect("the client exits");
    let mut stderr = String::new();
    if let Some(mut pipe) = client.0.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    assert!(
        transcript.iter().any(|line| line == "RESULT slept 1500 ms"),
        "the call returned its result: {transcript:?}\nstderr: {stderr}"
    );
    assert!(
        status.success(),
        "the client raised nothing ({status}): {transcript:?}\nstderr: {stderr}"
    );
    let (exit, log) = server.wait_exit();
    assert_eq!(exit.code(), Some(0), "the server exits 0; its log:\n{log}");
}

/// The server's pid, for `kill`.
/// `mcp_workers` of the server at `addr`, over a plain blocking GET of `/metrics`.
fn workers_running(addr: std::net::SocketAddr) -> u64 {
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text.lines()
        .find_map(|line| line.strip_prefix("mcp_workers "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn python_sdk_call_in_flight_at_sigterm_returns_its_result_over_websocket() {
    python_sdk_call_survives_sigterm(Transport::WebSocket);
}

#[test]
fn python_sdk_call_in_flight_at_sigterm_returns_its_result_over_streamable_http() {
    python_sdk_call_survives_sigterm(Transport::Http);
}
