//! The gateway, with upstreams nobody here wrote the servers of: `py`, a FastMCP server of the
//! official Python SDK (tests/interop/gateway_upstream.py, over stdio, over Streamable HTTP,
//! and over the SDK's WebSocket transport), and `every`, the npm package
//! `@modelcontextprotocol/server-everything` (stdio).
//! Clients: the official Python SDK (WebSocket and HTTP) and TypeScript SDK, raw frames where
//! a test needs to see each one, and the `mcp-ws` binary for what concerns processes
//! (`--stdio`, exit codes, children after SIGTERM and SIGKILL).
//!
//! What is checked: lists under prefixes; results, structured content, `isError` and content
//! of every kind unchanged; progress, log lines (at the client's level), elicitation and
//! sampling across the gateway; a cancel reaching the upstream (and no answer after it); a
//! child's crash answered -32030 at once for every call in flight on it, and a fresh child
//! next; garbage lines skipped; a child flooding requests without reading its stdin held
//! back by its own pipe (tests/interop/flooding_child.py), each request answered once; `list_changed` re-listed; one child per session (ended with
//! it, its environment from the identity, its own tool list shown to it alone) or one for
//! all (50 sessions × 20 interleaved calls, every answer its own); a 2026-07-28 client
//! served by a session-era upstream, its elicitation as an `input_required` round; a command
//! that cannot start stops `mcp-ws` with exit 2; no child outlives `mcp-ws`, and what a
//! crashed child started in its group dies with it (tests/interop/scripted_child.py); a
//! list that pages without end (a cursor again, pages past `limits.max_message_bytes`)
//! failed after the page that shows it. An upstream
//! spoken to statelessly (mcp-ws with `protocol_version = "2026-07-28"`) for a session-era
//! client: calls, progress, and its `input_required` elicitation as a request to the client.
//! The client's fall-backs: to `initialize` for servers of the handshake era only, to
//! `server/discover` for a server of 2026-07-28 only (the TypeScript SDK 2.x's
//! `createMcpHandler` with `legacy: 'reject'`). A `ws://` upstream: prefixed list, results,
//! progress, sampling, `isError` and a cancel across it, and its server dying mid-call
//! answered -32030.
//!
//! `mcp_ws::client` over WebSocket on its own, against mcp-ws: calls (concurrent ones each
//! answered their own), a normal close, headers on the upgrade, a request in flight failing
//! `ClientError::Closed` when the server is killed or stops (never hanging), a message over
//! `max_message_bytes` skipped (the connection goes on), and `wss://` with the platform's roots.

use crate::interop_py_sdk::ensure_python_env;
use crate::interop_ts_sdk::{ensure_sdk_1, ensure_sdk_2, ts2_dir};
use crate::support::interop::{
    assert_every_check_passed, interop_dir, run_client, KillOnDrop, Transport,
};
use crate::support::meta::*;
use crate::support::process::{limit_open_files, open_files_limits, ServerProcess};
use crate::support::ws::{call, initialize_with};
use crate::support::*;
use mcp_ws::client::{Client as McpClient, ClientError, ClientOptions};
use mcp_ws::config::{UpstreamMode, UpstreamSettings, UpstreamStart};
use mcp_ws::RunningServer;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The Python script `script` of tests/interop, run by the tests' venv, as upstream `name`.
fn python_upstream(name: &str, script: &str, mode: UpstreamMode) -> UpstreamSettings {
    UpstreamSettings {
        name: name.into(),
        command: ensure_python_env().display().to_string(),
        args: vec![interop_dir().join(script).display().to_string()],
        mode,
        ..Default::default()
    }
}

/// The FastMCP upstream over stdio.
fn py_upstream(mode: UpstreamMode) -> UpstreamSettings {
    UpstreamSettings {
        env_from_identity: [("MCP_USER".to_owned(), "sub".to_owned())].into(),
        ..python_upstream("py", "gateway_upstream.py", mode)
    }
}

/// server-everything over stdio, run by the Node on PATH.
fn everything_upstream(mode: UpstreamMode) -> UpstreamSettings {
    ensure_sdk_1();
    let entry =
        interop_dir().join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    UpstreamSettings {
        name: "every".into(),
        command: "node".into(),
        args: vec![entry.display().to_string(), "stdio".into()],
        mode,
        ..Default::default()
    }
}

/// The Streamable HTTP upstream listening on `port` (at `/mcp`), as `remote`.
fn remote_upstream(port: u16, mode: UpstreamMode) -> UpstreamSettings {
    UpstreamSettings {
        name: "remote".into(),
        url: format!("http://127.0.0.1:{port}/mcp"),
        mode,
        ..Default::default()
    }
}

/// A server of nothing but these upstreams.
fn gateway(
    upstreams: Vec<UpstreamSettings>,
    adjust: impl FnOnce(&mut mcp_ws::Settings),
) -> RunningServer {
    let mut settings = settings();
    settings.upstreams = upstreams;
    adjust(&mut settings);
    start_bare(settings, |builder| builder)
}

/// Sends a `tools/call` of `name` with `id`, its answer left to read later.
async fn start_call(client: &mut Client, id: Value, name: &str, arguments: Value) {
    client
        .send_json(request(
            id,
            "tools/call",
            json!({"name": name, "arguments": arguments}),
        ))
        .await;
}

/// The server's name and version as the 2026-07-28 helpers check them
/// (`support::stateless`).
fn stateless_named(s: &mut mcp_ws::Settings) {
    s.info.name = crate::support::stateless::SERVER_NAME.into();
    s.info.version = crate::support::stateless::SERVER_VERSION.into();
}

/// The two upstreams the SDK clients expect: `py` per session, `every` shared.
fn sdk_gateway() -> RunningServer {
    gateway(
        vec![
            py_upstream(UpstreamMode::PerSession),
            everything_upstream(UpstreamMode::Shared),
        ],
        |_| {},
    )
}

const PY_CHECKS: &[&str] = &[
    "tools of both upstreams listed under their prefixes",
    "a call's result and structured content pass through",
    "server-everything answers through the shared child",
    "upstream progress and log lines reach the client",
    "upstream log lines respect the client's level",
    "an upstream's elicitation reaches the client and back",
    "an upstream's sampling request reaches the client and back",
    "image and resource_link blocks pass through unchanged",
    "an upstream isError result stays one",
    "resources and templates read through the upstream",
    "an upstream's resources/updated reaches the subscribed client",
    "a prompt renders through the upstream",
    "a per-session upstream keeps one child for the session",
    "an upstream's tools/list_changed reaches the client, list updated",
    "a line of garbage from the child is skipped",
    "a crashed child answers -32030 and the next call gets a fresh one, its list too",
    "an unknown prefixed tool is -32602",
];

const TS_CHECKS: &[&str] = &[
    "tools of both upstreams listed under their prefixes",
    "a call and its structured content pass through",
    "server-everything answers through the shared child",
    "upstream progress reaches the client under its own token",
    "an upstream's elicitation reaches the client and back",
    "a crashed child answers -32030",
];

fn python_sdk_through(transport: Transport) {
    let server = sdk_gateway();
    let mut client = Command::new(ensure_python_env());
    client.arg(interop_dir().join("gateway_client.py"));
    let run = run_client(client, &server, transport, "the Python SDK gateway client");
    assert_every_check_passed(&run, PY_CHECKS);
}

#[test]
fn python_sdk_over_websocket_through_the_gateway() {
    python_sdk_through(Transport::WebSocket);
}

#[test]
fn python_sdk_over_http_through_the_gateway() {
    python_sdk_through(Transport::Http);
}

fn typescript_sdk_through(transport: Transport) {
    let server = sdk_gateway();
    let mut client = Command::new("node");
    client.arg(interop_dir().join("gateway_client.mjs"));
    let run = run_client(
        client,
        &server,
        transport,
        "the TypeScript SDK gateway client",
    );
    assert_every_check_passed(&run, TS_CHECKS);
}

#[test]
fn typescript_sdk_over_websocket_through_the_gateway() {
    typescript_sdk_through(Transport::WebSocket);
}

#[test]
fn typescript_sdk_over_http_through_the_gateway() {
    typescript_sdk_through(Transport::Http);
}

/// A file the FastMCP upstream writes what became of its `wait` calls to.
fn events_file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("events");
    (dir, file)
}

fn read_events(file: &Path) -> String {
    std::fs::read_to_string(file).unwrap_or_default()
}

async fn wait_for_event(file: &Path, line: &str) {
    let deadline = Instant::now() + READ_TIMEOUT;
    while !read_events(file).lines().any(|l| l == line) {
        assert!(
            Instant::now() < deadline,
            "no `{line}` in {:?}",
            read_events(file)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_cancel_reaches_the_upstream_and_no_answer_follows() {
    let (_dir, events) = events_file();
    for mode in [UpstreamMode::PerSession, UpstreamMode::Shared] {
        let mut py = py_upstream(mode);
        py.env
            .insert("GATEWAY_EVENTS".into(), events.display().to_string());
        let server = gateway(vec![py], |_| {});
        let mut client = Client::initialized(&server).await;
        assert_cancel_reaches_the_upstream(&mut client, &events, "", &format!("{mode:?}")).await;
    }
}

/// Calls the FastMCP upstream's `wait` (under `prefix`) and cancels it: the upstream's task
/// is cancelled (the SDK cancels it on `notifications/cancelled` under the id the gateway
/// gave it) and never finishes, and no answer follows, late or not.
async fn assert_cancel_reaches_the_upstream(
    client: &mut Client,
    events: &Path,
    prefix: &str,
    tag: &str,
) {
    client
        .send_json(request(
            json!(7),
            "tools/call",
            json!({"name": format!("{prefix}wait"), "arguments": {"ms": 3000, "tag": tag}}),
        ))
        .await;
    // The upstream has the call once a later call on the same connection is answered.
    let whoami = client
        .call_tool(&format!("{prefix}whoami"), json!({}))
        .await;
    assert!(tool_text(&whoami).starts_with("pid="), "{whoami}");
    client.send_json(cancel(json!(7))).await;
    wait_for_event(events, &format!("cancelled {tag}")).await;
    // Past the time the call would have taken: no answer for id 7.
    tokio::time::sleep(Duration::from_millis(3200)).await;
    client.expect_nothing_pending().await;
    assert!(!read_events(events).contains(&format!("finished {tag}")));
}

#[tokio::test]
async fn a_shared_child_serves_50_sessions_with_every_answer_its_own() {
    // 1,000 calls at once are more than the global pool (512): the rest wait for a slot,
    // as long as one Python child takes to answer them on a loaded machine (not refused
    // -32008 after the default 5 s: this test is about whose answer is whose).
    let server = gateway(vec![py_upstream(UpstreamMode::Shared)], |settings| {
        settings.limits.admission_wait_ms = 120_000;
    });
    let url = server.url();
    let mut sessions = Vec::new();
    for session in 0..50u64 {
        let url = url.clone();
        sessions.push(tokio::spawn(async move {
            let mut client = Client::initialized_at(&url, None, "2025-11-25").await;
            // 20 calls sent at once, answered in whatever order; each answer must be this
            // session's own sum for its id.
            for i in 0..20u64 {
                start_call(
                    &mut client,
                    json!(i),
                    "add",
                    json!({"a": session * 1000, "b": i}),
                )
                .await;
            }
            let mut answered = std::collections::HashSet::new();
            for _ in 0..20 {
                let response = client.recv().await;
                let id = response["id"].as_u64().expect("a response with an id");
                let sum = response["result"]["structuredContent"]["sum"].as_f64();
                assert_eq!(
                    sum,
                    Some((session * 1000 + id) as f64),
                    "session {session}: {response}"
                );
                assert!(answered.insert(id), "id {id} answered twice");
            }
            let whoami = client.call_tool("whoami", json!({})).await;
            client.expect_nothing_pending().await;
            tool_text(&whoami)
        }));
    }
    let mut children = std::collections::HashSet::new();
    for session in sessions {
        children.insert(session.await.expect("session task"));
    }
    assert_eq!(children.len(), 1, "one shared child: {children:?}");
    assert_eq!(
        crate::support::http::metric(&server, "mcp_upstream_children{upstream=\"py\"}").await,
        1
    );
    assert!(
        crate::support::http::metric(&server, "mcp_upstream_requests_total{upstream=\"py\"}").await
            >= 50 * 21
    );
}

#[tokio::test]
async fn a_crash_answers_every_call_in_flight_on_the_child_at_once() {
    let server = gateway(vec![py_upstream(UpstreamMode::Shared)], |_| {});
    let mut waiting = Client::initialized(&server).await;
    let mut crashing = Client::initialized(&server).await;
    let before = tool_text(&waiting.call_tool("whoami", json!({})).await);
    start_call(
        &mut waiting,
        json!("long"),
        "wait",
        json!({"ms": 30000, "tag": "x"}),
    )
    .await;
    // The long call is on the child once a later call on it is answered.
    let _ = crashing.call_tool("whoami", json!({})).await;
    let started = Instant::now();
    let crash = crashing.call_tool("crash", json!({})).await;
    let error = assert_error(&crash, &crash["id"], -32030);
    assert!(
        error["message"].as_str().is_some_and(|m| m.contains("py")),
        "{error}"
    );
    assert_eq!(error["data"]["upstream"], "py");
    // The other session's call on the same child: answered too, long before its 30 s.
    let long = waiting.recv_response(&json!("long")).await;
    assert_error(&long, &json!("long"), -32030);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered after {:?}",
        started.elapsed()
    );
    // The next call starts a fresh child.
    let after = tool_text(&waiting.call_tool("whoami", json!({})).await);
    assert!(
        after.starts_with("pid=") && after != before,
        "{before} → {after}"
    );
    assert!(
        crate::support::http::metric(&server, "mcp_upstream_restarts_total{upstream=\"py\"}").await
            >= 1
    );
}

/// A child that sends requests without reading the answers (tests/interop/flooding_child.py).
fn flooding_upstream() -> UpstreamSettings {
    UpstreamSettings {
        name: "flooder".into(),
        command: ensure_python_env().display().to_string(),
        args: vec![interop_dir()
            .join("flooding_child.py")
            .display()
            .to_string()],
        mode: UpstreamMode::Shared,
        ..Default::default()
    }
}

#[tokio::test]
async fn a_child_flooding_requests_without_reading_is_held_back_by_its_pipe_and_each_answered_once()
{
    const COUNT: u64 = 20_000;
    let server = gateway(vec![flooding_upstream()], |_| {});
    let mut client = Client::initialized(&server).await;
    let answer = client.call_tool("flood", json!({ "count": COUNT })).await;
    let report: Value = serde_json::from_str(&tool_text(&answer))
        .unwrap_or_else(|e| panic!("the child's report: {e}: {answer}"));
    // Held back: the gateway stopped reading the child's stdout (before, it read every line
    // at once, a task and an answer kept for each). What it takes first fills its 64
    // answering places, its outgoing queue (1,024), the stdin writer's batch and the two
    // pipes: 2,318 requests when this was written; 10,000 leaves room.
    let held_back_after = report["held_back_after"]
        .as_u64()
        .unwrap_or_else(|| panic!("the child was never held back: {report}"));
    assert!(
        (1_000..10_000).contains(&held_back_after),
        "held back after {held_back_after} requests: {report}"
    );
    // And nothing lost or doubled once the child reads again.
    assert_eq!(report["answered"], COUNT, "{report}");
    assert_eq!(report["answered_twice"], 0, "{report}");
    assert_eq!(report["errors"], 0, "{report}");
    // The gateway serves on.
    let again = client.call_tool("flood", json!({ "count": 10 })).await;
    assert!(tool_text(&again).contains("\"answered\": 10"), "{again}");
}

#[tokio::test]
async fn a_line_that_is_not_utf8_on_stdout_or_stderr_leaves_the_child_serving() {
    let server = gateway(vec![py_upstream(UpstreamMode::Shared)], |_| {});
    let mut client = Client::initialized(&server).await;
    let before = tool_text(&client.call_tool("whoami", json!({})).await);
    for stream in ["stdout", "stderr"] {
        // On stdout: skipped, the connection to the child kept (it closed, and every call
        // on it failed -32030). On stderr: logged, and the pipe still read (it was closed,
        // and the child's next lines to stderr failed it: an `isError` result).
        let answer = client
            .call_tool("not_utf8", json!({"stream": stream}))
            .await;
        assert_eq!(tool_text(&answer), "still here", "{stream}: {answer}");
        assert_ne!(answer["result"]["isError"], true, "{stream}: {answer}");
    }
    let after = tool_text(&client.call_tool("whoami", json!({})).await);
    assert_eq!(before, after, "the same child");
}

fn pid_of(whoami: &str) -> i32 {
    whoami
        .strip_prefix("pid=")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|pid| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {whoami:?}"))
}

fn alive(pid: i32) -> bool {
    // A zombie is not alive: its /proc entry stays until it is reaped.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.split_whitespace().nth(2) != Some("Z"))
}

async fn wait_gone(pid: i32) {
    let deadline = Instant::now() + READ_TIMEOUT;
    while alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} still runs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn each_session_has_its_own_child_ended_with_it_and_told_who_it_serves() {
    let server = gateway(vec![py_upstream(UpstreamMode::PerSession)], |s| {
        *s = with_api_key(std::mem::take(s));
        // A dropped socket ends its session at once (no resume).
        s.sessions.resume_grace_ms = 0;
    });
    let mut alice = Client::initialized_as(&server, TEST_KEY).await;
    let mut anonymous = Client::initialized(&server).await;
    let alice_child = tool_text(&alice.call_tool("whoami", json!({})).await);
    let anonymous_child = tool_text(&anonymous.call_tool("whoami", json!({})).await);
    assert!(alice_child.ends_with("user=tester"), "{alice_child}");
    assert!(
        anonymous_child.ends_with("user=anonymous"),
        "{anonymous_child}"
    );
    assert_ne!(pid_of(&alice_child), pid_of(&anonymous_child));
    assert_eq!(
        crate::support::http::metric(&server, "mcp_upstream_children{upstream=\"py\"}").await,
        2
    );
    alice.hang_up().await;
    wait_gone(pid_of(&alice_child)).await;
    assert!(alive(pid_of(&anonymous_child)));
    let again = tool_text(&anonymous.call_tool("whoami", json!({})).await);
    assert_eq!(again, anonymous_child);
}

/// With sessions in Redis, a session's own child lives as long as its session, through a
/// quiet longer than a copy nobody uses is kept (a tenth of the idle timeout): the state
/// the client built there is still there. (The copy was let go after that tenth, at most
/// 30 s, and the child stopped with it, its state lost while the session lived on; attack
/// run 52c, G2.)
#[tokio::test]
async fn with_sessions_in_redis_a_sessions_own_child_outlives_a_quiet_longer_than_a_copys_time() {
    let redis = crate::support::redis::RedisServer::start();
    let server = gateway(vec![py_upstream(UpstreamMode::PerSession)], |s| {
        s.redis.url = redis.url();
        // A copy nobody uses is let go after 300 ms.
        s.sessions.http_idle_timeout_ms = 3_000;
    });
    // A client of plain POSTs (no GET stream, which would keep the copy busy).
    let http = crate::support::http::client();
    let url = format!("http://{}/mcp", server.addr());
    let post = |session: Option<&str>, body: Value| {
        let post = http
            .post(&url)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(body.to_string());
        match session {
            Some(id) => post
                .header("mcp-session-id", id)
                .header("mcp-protocol-version", "2025-11-25"),
            None => post,
        }
    };
    let initialized = post(
        None,
        request(json!(0), "initialize", initialize_params("2025-11-25")),
    )
    .send()
    .await
    .expect("initialize answered");
    let session = initialized
        .headers()
        .get("mcp-session-id")
        .and_then(|id| id.to_str().ok())
        .expect("a session id")
        .to_owned();
    let notified = post(
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    assert_eq!(notified.send().await.expect("sent").status(), 202);
    // The text of `whoami`'s answer (JSON, or the one message of an SSE stream).
    let whoami = |id: u64| {
        let call = post(
            Some(&session),
            request(
                json!(id),
                "tools/call",
                json!({"name": "whoami", "arguments": {}}),
            ),
        );
        async move {
            let body = call.send().await.expect("sent").text().await.expect("read");
            let json = body
                .lines()
                .find_map(|line| line.strip_prefix("data:"))
                .unwrap_or(&body);
            let answer: Value = serde_json::from_str(json.trim()).expect("JSON");
            tool_text(&answer)
        }
    };
    let child = whoami(1).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        alive(pid_of(&child)),
        "the session's child was stopped in its quiet"
    );
    assert_eq!(whoami(2).await, child, "the same child, its state kept");
}

#[tokio::test]
async fn a_sessions_own_childs_resource_update_reaches_that_session_alone() {
    let server = gateway(vec![py_upstream(UpstreamMode::PerSession)], |_| {});
    let mut toucher = Client::initialized(&server).await;
    let mut other = Client::initialized(&server).await;
    for client in [&mut toucher, &mut other] {
        let subscribed = client
            .request("resources/subscribe", json!({"uri": "mem://motd"}))
            .await;
        assert_result(&subscribed, &subscribed["id"]);
    }
    let touch = toucher
        .call_tool("touch", json!({"uri": "mem://motd"}))
        .await;
    assert_eq!(tool_text(&touch), "touched", "{touch}");
    let updated = json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
                         "params": {"uri": "mem://motd"}});
    let mut frames = toucher.drain_until_barrier().await;
    while !frames.contains(&updated) {
        frames = vec![toucher.recv().await];
    }
    // Marked in the same pass, the other session's would be on its way by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = other.drain_until_barrier().await;
    assert!(
        !seen.contains(&updated),
        "another session's child's resource: {seen:?}"
    );
}

/// The `tools/list` requests the child of `events` has been sent.
fn tool_lists(events: &Path) -> usize {
    read_events(events)
        .lines()
        .filter(|line| *line == "listed tools")
        .count()
}

#[tokio::test]
async fn a_flood_of_list_changed_costs_a_few_lists_not_one_each() {
    let (_dir, events) = events_file();
    let mut py = py_upstream(UpstreamMode::Shared);
    py.env
        .insert("GATEWAY_EVENTS".into(), events.display().to_string());
    let server = gateway(vec![py], |_| {});
    let mut client = Client::initialized(&server).await;
    let before = tool_lists(&events);
    let flood = client.call_tool("flood", json!({"count": 200})).await;
    assert_eq!(tool_text(&flood), "flooded", "{flood}");
    // A change after the flood: once the client is told of it, every re-list the flood
    // made is done (they run one at a time, in order).
    let grow = client.call_tool("grow", json!({"name": "late"})).await;
    assert_eq!(tool_text(&grow), "grew", "{grow}");
    expect_tools_changed(&mut client, "the client").await;
    assert!(listed_tools(&mut client).await.contains(&"late".to_owned()));
    // The first notification's list, held while the other 199 came; one list for those;
    // one for `grow`'s. (A list for each was 201.)
    let lists = tool_lists(&events) - before;
    assert!(
        (2..=4).contains(&lists),
        "{lists} tools/list for 201 notifications"
    );
}

/// A shared upstream whose list goes from N tools to N others: the re-list is one change of
/// the registry's, so a session is told once, and the list it reads then is the whole new
/// one; the next notification is that of the change after. (Each entry was registered and
/// removed on its own, and each told: attack run 52c G1, some 12,000 notifications to every
/// session, and a minute of the gateway's thread, for 8,000 tools replaced by 4,000.)
#[tokio::test]
async fn a_shared_upstreams_list_replaced_whole_is_told_once() {
    const N: usize = 1000;
    let mut py = py_upstream(UpstreamMode::Shared);
    py.env.insert("GATEWAY_MANY".into(), N.to_string());
    let server = gateway(vec![py], |s| s.limits.page_size = 2 * N);
    let mut client = Client::initialized(&server).await;
    let named = |tools: &[String], prefix: &str| {
        tools.iter().filter(|name| name.starts_with(prefix)).count()
    };
    let before = listed_tools(&mut client).await;
    assert_eq!(named(&before, "a_"), N, "{before:?}");

    let renamed = client
        .call_tool("rename_many", json!({"prefix": "b"}))
        .await;
    assert_eq!(tool_text(&renamed), "renamed", "{renamed}");
    expect_tools_changed(&mut client, "the client").await;
    let after = listed_tools(&mut client).await;
    assert_eq!(
        named(&after, "a_"),
        0,
        "told before the last went: {after:?}"
    );
    assert_eq!(named(&after, "b_"), N, "told before the last came");
    assert_eq!(after.len(), before.len());

    // One change more, as a mark: the notification after the first is its own.
    let grow = client.call_tool("grow", json!({"name": "mark"})).await;
    assert_eq!(tool_text(&grow), "grew", "{grow}");
    let mut told = 0;
    loop {
        expect_tools_changed(&mut client, "the client").await;
        told += 1;
        if listed_tools(&mut client).await.contains(&"mark".to_owned()) {
            break;
        }
    }
    assert_eq!(told, 1, "{told} notifications more for the list replaced");
}

/// A session's own child offering tools named like a built-in (`echo`: its upstream's
/// prefix is empty) and like another upstream's (`o_whoami`): those names stay the
/// registry's entries', in the session's list and for its calls; the child's entries are
/// left out of the session's view (with a warning), as they were of the registry at start.
/// (The list showed the built-in while a call went to the child, with the caller's
/// arguments: attack run 52c G4.)
#[tokio::test]
async fn a_sessions_own_child_takes_no_name_the_registry_holds() {
    let mut own = py_upstream(UpstreamMode::PerSession);
    own.prefix = Some(String::new());
    own.env = [
        ("GATEWAY_USER_TOOL".to_owned(), "1".to_owned()),
        (
            "GATEWAY_SESSION_TOOLS".to_owned(),
            "echo,o_whoami".to_owned(),
        ),
    ]
    .into();
    let mut other = python_upstream("other", "gateway_upstream.py", UpstreamMode::Shared);
    other.prefix = Some("o_".into());
    let mut settings = settings();
    settings.upstreams = vec![own, other];
    settings.auth.api_keys = vec![api_key("alice", "alice-key", &[])];
    // The demo set (with `echo`) registered before the upstreams.
    let server = start_with(settings, |builder| builder);

    let mut alice = Client::initialized_as(&server, "alice-key").await;
    // Her child has listed (`for_alice` is hers): her view is in place.
    expect_tools_changed(&mut alice, "alice").await;
    let response = alice.request("tools/list", json!({})).await;
    let tools = response["result"]["tools"].as_array().expect("tools");
    let listed = |name: &str| {
        tools
            .iter()
            .filter(|t| t["name"] == name)
            .collect::<Vec<_>>()
    };
    assert_eq!(listed("for_alice").len(), 1, "{response}");
    let echo = listed("echo");
    assert_eq!(echo.len(), 1, "{response}");
    assert_eq!(
        echo[0]["description"], "Returns the given text unchanged.",
        "{response}"
    );
    assert_eq!(listed("o_whoami").len(), 1, "{response}");

    let echoed = alice.call_tool("echo", json!({"text": "hi"})).await;
    let text = tool_text(&echoed);
    assert!(text.contains("hi") && !text.contains("child"), "{echoed}");
    let who = alice.call_tool("o_whoami", json!({})).await;
    let text = tool_text(&who);
    assert!(
        text.starts_with("pid=") && text.ends_with("user=-"),
        "{who}"
    );
    let hers = alice.call_tool("for_alice", json!({})).await;
    assert_eq!(tool_text(&hers), "for alice", "{hers}");
}

#[tokio::test]
async fn a_child_that_never_answers_its_list_holds_up_no_other_sessions_list() {
    let mut py = py_upstream(UpstreamMode::PerSession);
    py.initialize_timeout_ms = 3000;
    let server = gateway(vec![py], |_| {});
    let mut stalled = Client::initialized(&server).await;
    let mut other = Client::initialized(&server).await;
    // Each session's own child listed at its start (a change from what the gateway
    // registered would be told): both are past it before one stalls.
    let _ = tool_text(&stalled.call_tool("whoami", json!({})).await);
    let _ = tool_text(&other.call_tool("whoami", json!({})).await);
    let stall = stalled.call_tool("stall_lists", json!({})).await;
    assert_eq!(tool_text(&stall), "stalled", "{stall}");
    // The stalled child's re-list runs first and never ends on its own; the other child's,
    // after it, comes once that one is given up (3 s), within the client's 10 s.
    let grow = other.call_tool("grow", json!({"name": "mine"})).await;
    assert_eq!(tool_text(&grow), "grew", "{grow}");
    expect_tools_changed(&mut other, "the other session").await;
    assert!(listed_tools(&mut other).await.contains(&"mine".to_owned()));
}

/// What an upstream lists that clients cannot use (a prompt naming an argument twice, one
/// with a control character in its name, a template naming a variable twice) is left out,
/// of what the gateway registers (one child for all) and of each session's view of its own
/// child. (A session's view listed them: review 54 #4; the template matched no read.)
#[tokio::test]
async fn what_an_upstream_lists_that_clients_cannot_use_is_left_out_of_every_view() {
    for mode in [UpstreamMode::Shared, UpstreamMode::PerSession] {
        let mut upstream = py_upstream(mode);
        upstream.env = [
            ("GATEWAY_USER_TOOL".to_owned(), "1".to_owned()),
            ("GATEWAY_UNUSABLE".to_owned(), "1".to_owned()),
        ]
        .into();
        let server = gateway(vec![upstream], |s| {
            s.auth.api_keys = vec![api_key("alice", "alice-key", &[])];
        });
        let mut alice = Client::initialized_as(&server, "alice-key").await;
        if mode == UpstreamMode::PerSession {
            // Her child has listed: her view is in place (her tool is in it).
            expect_tools_changed(&mut alice, "alice").await;
            let hers = listed_tools(&mut alice).await;
            assert!(hers.contains(&"for_alice".to_owned()), "{hers:?}");
        }
        let prompts = alice.request("prompts/list", json!({})).await;
        let names: Vec<&str> = prompts["result"]["prompts"]
            .as_array()
            .expect("prompts")
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(names, ["greet"], "{mode:?}: {prompts}");
        let templates = alice.request("resources/templates/list", json!({})).await;
        let listed: Vec<&str> = templates["result"]["resourceTemplates"]
            .as_array()
            .expect("templates")
            .iter()
            .filter_map(|t| t["uriTemplate"].as_str())
            .collect();
        assert_eq!(listed, ["mem://items/{id}"], "{mode:?}: {templates}");
    }
}

/// Reads the next messages until a `notifications/tools/list_changed` (from the backlog
/// first), and fails if none comes in time.
async fn expect_tools_changed(client: &mut Client, who: &str) {
    loop {
        let message = client.recv().await;
        if message["method"] == "notifications/tools/list_changed" {
            return;
        }
        assert!(
            message.get("id").is_none() || message.get("method").is_some(),
            "{who}: an answer nobody waits for: {message}"
        );
    }
}

/// `py` per session, with a tool named for each child's client (`for_<sub>`), and API keys
/// for alice and bob.
fn user_tool_gateway(start: UpstreamStart) -> RunningServer {
    let mut upstream = py_upstream(UpstreamMode::PerSession);
    upstream.env = [("GATEWAY_USER_TOOL".to_owned(), "1".to_owned())].into();
    upstream.start = start;
    gateway(vec![upstream], |s| {
        s.auth.api_keys = vec![
            api_key("alice", "alice-key", &[]),
            api_key("bob", "bob-key", &[]),
        ];
        stateless_named(s);
    })
}

/// The tool names of a session's `tools/list`.
async fn listed_tools(client: &mut Client) -> Vec<String> {
    let response = client.request("tools/list", json!({})).await;
    tool_names(&response)
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// A per-session child that lists other tools than the one the gateway listed at start
/// (here a tool named for its client, whom the start-time child did not know). The child
/// starts at the session's `initialize` (the default); once it has listed, the session is
/// told its list changed and sees its own child's list. Another session neither lists nor
/// calls that tool, nor hears of the change; a change the child announces later reaches
/// its own session alone. A 2026-07-28 identity sees its own child's list the same way.
#[tokio::test]
async fn a_session_sees_the_tools_of_its_own_child() {
    let server = user_tool_gateway(UpstreamStart::Initialize);
    let metric = crate::support::http::metric;

    // Alice's initialize starts her child, whose list has her tool.
    let mut alice = Client::initialized_as(&server, "alice-key").await;
    expect_tools_changed(&mut alice, "alice").await;
    assert_eq!(
        metric(&server, "mcp_upstream_children{upstream=\"py\"}").await,
        1
    );
    let hers = listed_tools(&mut alice).await;
    assert!(hers.contains(&"for_alice".to_owned()), "{hers:?}");
    assert!(hers.contains(&"whoami".to_owned()), "{hers:?}");
    let mine = alice.call_tool("for_alice", json!({})).await;
    assert_eq!(tool_text(&mine), "for alice", "{mine}");
    let who = alice.call_tool("whoami", json!({})).await;
    assert!(tool_text(&who).ends_with("user=alice"), "{who}");

    // Bob's own child: his tool, not hers; she hears nothing of it.
    let mut bob = Client::initialized_as(&server, "bob-key").await;
    expect_tools_changed(&mut bob, "bob").await;
    let his = listed_tools(&mut bob).await;
    assert!(his.contains(&"for_bob".to_owned()), "{his:?}");
    assert!(!his.contains(&"for_alice".to_owned()), "{his:?}");
    let refused = bob.call_tool("for_alice", json!({})).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    alice.expect_nothing_pending().await;
    assert_eq!(
        listed_tools(&mut alice).await,
        hers,
        "alice's list is her child's still"
    );

    // A change Alice's child announces is hers alone.
    let grew = alice.call_tool("grow", json!({"name": "grown"})).await;
    assert_eq!(tool_text(&grew), "grew", "{grew}");
    expect_tools_changed(&mut alice, "alice").await;
    assert!(listed_tools(&mut alice).await.contains(&"grown".to_owned()));
    bob.expect_nothing_pending().await;
    assert!(!listed_tools(&mut bob).await.contains(&"grown".to_owned()));

    // A 2026-07-28 client of Alice's: her identity's own child (started at its first
    // request), her identity's list, and her identity's listen stream told of it.
    let mut listener = Client::connect_url_as(&server.url(), Some("alice-key")).await;
    listen_for_tools(&mut listener).await;
    let mut modern = alices_2026_client(&server).await;
    let mut seen = Vec::new();
    for _ in 0..50 {
        let (_, response) = call(&mut modern, "tools/list", stateless(json!({}))).await;
        seen = response["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        if seen.contains(&"for_alice".to_owned()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen.contains(&"for_alice".to_owned()), "{seen:?}");
    assert!(
        !seen.contains(&"grown".to_owned()),
        "another child's: {seen:?}"
    );
    let changed = listener.recv().await;
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed}"
    );
}

/// A connection that speaks both eras (an initialized session that also opens a
/// 2026-07-28 listen) hears on its listen of its identity's own child's list, as a
/// 2026-07-28-only connection does: its registration for its session's views does not
/// hide its identity's. (It heard nothing: `initialize` had registered the connection as
/// its session's viewer alone.)
#[tokio::test]
async fn a_listen_on_an_initialized_connection_hears_of_its_identitys_views() {
    let server = user_tool_gateway(UpstreamStart::Initialize);
    let mut mixed = Client::initialized_as(&server, "alice-key").await;
    expect_tools_changed(&mut mixed, "alice").await;
    listen_for_tools(&mut mixed).await;
    // The other order: a listen, then `initialize` on the same connection.
    let mut listened_first = Client::connect_url_as(&server.url(), Some("alice-key")).await;
    listen_for_tools(&mut listened_first).await;
    crate::support::ws::initialize_with(&mut listened_first, json!({})).await;
    // Its session's child's list: told to its session and its listen alike, now.
    expect_tools_changed(&mut listened_first, "alice").await;
    listened_first.drain_until_barrier().await;

    // Her identity's child starts at a 2026-07-28 request of another connection of hers.
    let mut modern = alices_2026_client(&server).await;
    for connection in [&mut mixed, &mut listened_first] {
        loop {
            let message = connection.recv().await;
            assert_eq!(
                message["method"], "notifications/tools/list_changed",
                "{message}"
            );
            if message["params"]["_meta"][SUBSCRIPTION_ID] == "listen" {
                break;
            }
        }
    }

    // Its listen cancelled, the connection no longer hears of its identity's views: its
    // session is not told of a list that is not its own.
    mixed
        .send_json(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": "listen"}}),
        )
        .await;
    mixed.drain_until_barrier().await;
    let (id, response) = call(
        &mut modern,
        "tools/call",
        stateless(json!({"name": "grow", "arguments": {"name": "grown"}})),
    )
    .await;
    assert_eq!(text_of(&assert_complete(&response, &id)), "grew");
    // Heard where it is listened for (`listened_first` still listens).
    loop {
        let message = listened_first.recv().await;
        if message["params"]["_meta"][SUBSCRIPTION_ID] == "listen" {
            break;
        }
    }
    mixed.expect_nothing_pending().await;
}

/// A 2026-07-28 connection of Alice's, whose first call (`whoami`, answered as hers) starts
/// her identity's own child.
async fn alices_2026_client(server: &RunningServer) -> Client {
    let mut modern = Client::connect_url_as(&server.url(), Some("alice-key")).await;
    let (id, response) = call(
        &mut modern,
        "tools/call",
        stateless(json!({"name": "whoami", "arguments": {}})),
    )
    .await;
    let result = assert_complete(&response, &id);
    assert!(text_of(&result).ends_with("user=alice"), "{response}");
    modern
}

/// Opens a 2026-07-28 listen (id `"listen"`) for tool list changes on `client`, and reads
/// its acknowledgement.
async fn listen_for_tools(client: &mut Client) {
    client
        .send_json(request(
            json!("listen"),
            "subscriptions/listen",
            stateless(json!({"notifications": {"toolsListChanged": true}})),
        ))
        .await;
    let ack = client.recv().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
}

/// With `start = "first_use"` a session's child starts at its first request for the
/// upstream, not at `initialize`: until then the session lists what the upstream offered at
/// start, and no process runs for it.
#[tokio::test]
async fn a_child_started_at_first_use_runs_only_once_the_session_uses_the_upstream() {
    let server = user_tool_gateway(UpstreamStart::FirstUse);
    let metric = crate::support::http::metric;
    let mut alice = Client::initialized_as(&server, "alice-key").await;
    let at_start = listed_tools(&mut alice).await;
    assert!(
        !at_start.iter().any(|n| n.starts_with("for_")),
        "{at_start:?}"
    );
    alice.expect_nothing_pending().await;
    assert_eq!(
        metric(&server, "mcp_upstream_children{upstream=\"py\"}").await,
        0
    );

    let who = alice.call_tool("whoami", json!({})).await;
    assert!(tool_text(&who).ends_with("user=alice"), "{who}");
    assert_eq!(
        metric(&server, "mcp_upstream_children{upstream=\"py\"}").await,
        1
    );
    expect_tools_changed(&mut alice, "alice").await;
    assert!(listed_tools(&mut alice)
        .await
        .contains(&"for_alice".to_owned()));
}

/// A `per_session` upstream that starts a child at every `initialize` and runs
/// `max_children` refuses a new session with 503 and `Retry-After`, over WebSocket (the
/// upgrade) and HTTP (the `initialize` POST), and admits one again once a child is gone.
#[tokio::test]
async fn a_new_session_beyond_max_children_is_refused_503() {
    let mut upstream = py_upstream(UpstreamMode::PerSession);
    upstream.max_children = 1;
    let server = gateway(vec![upstream], |s| {
        // A dropped socket ends its session at once (no resume).
        s.sessions.resume_grace_ms = 0;
    });
    let children = "mcp_upstream_children{upstream=\"py\"}";
    let first = Client::initialized(&server).await;
    crate::support::http::wait_metric(&server, children, 1).await;

    let body = crate::support::ws::assert_upgrade_refused(&server.url(), 503, "5").await;
    assert!(body.contains("max_children"), "{body}");

    let http = crate::support::http::Http::new(&server);
    let initialize = request(
        json!(1),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "t", "version": "1"}}),
    );
    let response = crate::support::http::send(http.bare(&initialize)).await;
    assert_eq!(response.status(), 503);
    assert_eq!(
        crate::support::http::header(&response, "retry-after"),
        Some("5")
    );
    assert_eq!(
        crate::support::http::metric(&server, "mcp_rejected_total{reason=\"upstream_children\"}")
            .await,
        2
    );

    first.hang_up().await;
    crate::support::http::wait_metric(&server, children, 0).await;
    let mut next = Client::initialized(&server).await;
    let who = next.call_tool("whoami", json!({})).await;
    assert!(tool_text(&who).starts_with("pid="), "{who}");
}

/// Sessions that arrive while the first children are still starting start no more than
/// `max_children` (the count of children running was read before any had started: every
/// one of them passed it, and started its own).
#[tokio::test]
async fn sessions_arriving_together_start_no_more_than_max_children() {
    let (_dir, events) = events_file();
    let mut upstream = py_upstream(UpstreamMode::PerSession);
    upstream.max_children = 2;
    upstream
        .env
        .insert("GATEWAY_EVENTS".into(), events.display().to_string());
    upstream
        .env
        .insert("GATEWAY_START_DELAY_MS".into(), "1500".into());
    let server = gateway(vec![upstream], |_| {});
    let http = crate::support::http::Http::new(&server);
    let initialize = request(
        json!(1),
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
               "clientInfo": {"name": "t", "version": "1"}}),
    );
    // Six `initialize` at once, each starting its session's child; a session the gateway
    // has no place for is refused (503) or gets -32030 at its calls.
    let statuses: Vec<u16> = futures_util::future::join_all(
        (0..6).map(|_| crate::support::http::send(http.bare(&initialize))),
    )
    .await
    .iter()
    .map(|response| response.status().as_u16())
    .collect();
    assert!(
        statuses.iter().all(|status| matches!(status, 200 | 503)),
        "{statuses:?}"
    );
    assert!(
        statuses.iter().filter(|status| **status == 200).count() >= 2,
        "{statuses:?}"
    );
    // Once two children have answered `initialize` (1.5 s after their start), every child
    // that was started at the same time as they were has said so.
    crate::support::http::wait_metric(&server, "mcp_upstream_children{upstream=\"py\"}", 2).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let started = read_events(&events)
        .lines()
        .filter(|line| line.starts_with("started ") && line.ends_with(" session"))
        .count();
    assert_eq!(started, 2, "children started:\n{}", read_events(&events));
}

/// A session's log level reaches its own child before the session's first call to it
/// (`logging.client_level`, `info`, until the client sets one) and again before the next
/// call after each `logging/setLevel`; a shared child, serving sessions of several levels,
/// is never told one.
#[tokio::test]
async fn a_sessions_log_level_is_passed_on_to_its_own_child_only() {
    let server = gateway(
        vec![
            py_upstream(UpstreamMode::PerSession),
            UpstreamSettings {
                name: "shared".into(),
                ..py_upstream(UpstreamMode::Shared)
            },
        ],
        |_| {},
    );
    let mut client = Client::initialized(&server).await;
    assert_eq!(
        tool_text(&client.call_tool("py__level", json!({})).await),
        "info"
    );
    for level in ["warning", "error"] {
        let set = client
            .request("logging/setLevel", json!({"level": level}))
            .await;
        assert!(set.get("result").is_some(), "{set}");
        let seen = client.call_tool("py__level", json!({})).await;
        assert_eq!(tool_text(&seen), level, "{seen}");
        let shared = client.call_tool("shared__level", json!({})).await;
        assert_eq!(tool_text(&shared), "-", "{shared}");
    }
}

#[tokio::test]
async fn a_stateless_client_is_served_by_a_session_era_upstream() {
    let server = gateway(vec![py_upstream(UpstreamMode::PerSession)], stateless_named);
    let mut client = Client::connect(&server).await;
    let (id, response) = call(
        &mut client,
        "tools/call",
        stateless(json!({"name": "add", "arguments": {"a": 1, "b": 2}})),
    )
    .await;
    let result = assert_complete(&response, &id);
    assert_eq!(
        result["structuredContent"],
        json!({"sum": 3.0}),
        "{response}"
    );

    // The upstream's elicitation becomes an input_required round; the retry carries the
    // answer, and the upstream's ask is answered from it.
    let params = stateless_with(
        json!({"elicitation": {}}),
        json!({"name": "ask_name", "arguments": {}}),
    );
    let (id, response) = call(&mut client, "tools/call", params.clone()).await;
    let result = assert_stateless_result(&response, &id, "input_required");
    let asks = result["inputRequests"]
        .as_object()
        .expect("inputRequests")
        .clone();
    assert_eq!(asks.len(), 1, "{response}");
    let (key, ask) = asks.iter().next().expect("one ask");
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    let state = result["requestState"].as_str().expect("requestState");
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(
            &params,
            json!({ key.as_str(): accept_name("Lin") }),
            Some(state),
        ),
    )
    .await;
    let result = assert_complete(&response, &id);
    assert_eq!(text_of(&result), "hello Lin", "{response}");
}

/// Serves `server`'s `tools/call` of `name` on `client` and answers the one elicitation that
/// crosses before the result with `content`; returns the result.
#[tokio::test]
async fn a_childs_question_goes_with_the_call_that_began_first() {
    let server = gateway(vec![py_upstream(UpstreamMode::PerSession)], |_| {});
    let mut client = Client::connect(&server).await;
    initialize_with(&mut client, json!({"sampling": {}})).await;
    // The session's child runs two calls: one asks its client 0.5 s in, the other, begun
    // after it, ends at 0.8 s. The child's question names no call: it goes with the first
    // one's, which is still there to take the answer after the other ended.
    start_call(
        &mut client,
        json!("asks"),
        "ask_model_after",
        json!({"ms": 500}),
    )
    .await;
    start_call(
        &mut client,
        json!("quick"),
        "wait",
        json!({"ms": 800, "tag": "quick"}),
    )
    .await;
    let mut ask = None;
    let mut quick_done = false;
    while ask.is_none() || !quick_done {
        let message = client.recv().await;
        if message["method"] == "sampling/createMessage" {
            ask = Some(message);
        } else if message["id"] == "quick" {
            assert_eq!(tool_text(&message), "waited quick", "{message}");
            quick_done = true;
        } else {
            assert!(message.get("id").is_none(), "{message}");
        }
    }
    let ask = ask.expect("asked");
    client
        .send_json(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
            "role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"}}))
        .await;
    let asks = client.recv_response(&json!("asks")).await;
    assert_eq!(tool_text(&asks), "model said 4", "{asks}");
}

async fn call_answering_elicitation(
    client: &mut Client,
    name: &str,
    arguments: Value,
    content: Value,
) -> Value {
    let id = client.fresh_id();
    client
        .send_json(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": name, "arguments": arguments}}))
        .await;
    let ask = client.recv().await;
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    client
        .send_json(json!({"jsonrpc": "2.0", "id": ask["id"],
                          "result": {"action": "accept", "content": content}}))
        .await;
    client.recv_response(&id).await
}

/// Methods `upstream` served, by the count of its latency histogram.
async fn served(upstream: &RunningServer, method: &str) -> u64 {
    let (status, body) = crate::support::http::http_get(upstream.addr(), "/metrics").await;
    assert_eq!(status, 200);
    let key = format!("mcp_request_duration_seconds_count{{method=\"{method}\"}} ");
    body.lines()
        .find_map(|line| line.strip_prefix(&key)?.trim().parse().ok())
        .unwrap_or(0)
}

/// An upstream spoken to in the stateless era (mcp-ws itself, serving the conformance set
/// over Streamable HTTP, with `protocol_version = "2026-07-28"`), in both modes, for a
/// client of the session era: lists and calls pass, progress reaches the client under its
/// token, and the upstream's elicitation (an `input_required` round) reaches the client as
/// an `elicitation/create` request whose answer completes the call; a tool added to the
/// upstream reaches the client's list (`list_changed` on the gateway's listen stream). The
/// upstream saw `server/discover` and never `initialize`.
#[tokio::test]
async fn a_stateless_upstream_serves_a_session_era_client() {
    for mode in [UpstreamMode::Shared, UpstreamMode::PerSession] {
        let upstream = start_profile();
        let remote = UpstreamSettings {
            name: "modern".into(),
            url: format!("http://{}/mcp", upstream.addr()),
            protocol_version: "2026-07-28".into(),
            mode,
            ..Default::default()
        };
        let server = gateway(vec![remote], |_| {});
        let mut client = Client::connect(&server).await;
        initialize_with(&mut client, json!({"elicitation": {}})).await;

        let listed = client.request("tools/list", json!({})).await;
        let names = tool_names(&listed);
        for name in [
            "test_simple_text",
            "test_tool_with_progress",
            "test_elicitation",
        ] {
            assert!(
                names.contains(&name),
                "{mode:?}: {name} is not listed: {names:?}"
            );
        }

        let simple = client.call_tool("test_simple_text", json!({})).await;
        assert_eq!(
            tool_text(&simple),
            "This is a simple text response for testing.",
            "{mode:?}: {simple}"
        );

        let (response, before) = crate::support::ws::exchange(
            &mut client,
            "tools/call",
            json!({"name": "test_tool_with_progress", "arguments": {},
                   "_meta": {"progressToken": "mine"}}),
        )
        .await;
        assert_eq!(
            tool_text(&response),
            "Tool with progress executed successfully",
            "{mode:?}: {response}"
        );
        let progress: Vec<f64> = before
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .inspect(|m| assert_eq!(m["params"]["progressToken"], "mine", "{m}"))
            .filter_map(|m| m["params"]["progress"].as_f64())
            .collect();
        assert_eq!(progress, [0.0, 50.0, 100.0], "{mode:?}: {before:?}");

        let answered = call_answering_elicitation(
            &mut client,
            "test_elicitation",
            json!({"message": "Who are you?"}),
            json!({"username": "lin", "email": "lin@example.com"}),
        )
        .await;
        let text = tool_text(&answered);
        assert!(
            text.starts_with("User response: action=accept")
                && text.contains(r#""username":"lin""#),
            "{mode:?}: {answered}"
        );

        // A change of the upstream's list comes on the gateway's subscriptions/listen
        // stream: the gateway lists again and tells the client once.
        let added = format!("added_{mode:?}").to_lowercase();
        assert_a_tool_added_upstream_reaches(&mut client, &upstream, &added).await;

        assert!(served(&upstream, "server/discover").await >= 1, "{mode:?}");
        assert_eq!(served(&upstream, "initialize").await, 0, "{mode:?}");
        server.stop();
        upstream.stop();
    }
}

/// Adds tool `name` to `upstream` (mcp-ws, a stateless upstream of the gateway `client` is
/// on) and checks that the client's next message says its tools changed, and that its list
/// then holds the tool.
async fn assert_a_tool_added_upstream_reaches(
    client: &mut Client,
    upstream: &RunningServer,
    name: &str,
) {
    upstream
        .registry()
        .add_tool(crate::support::stateless::plain_tool(name))
        .expect("added");
    let changed = client.recv().await;
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{name}: {changed}"
    );
    let listed = listed_tools(client).await;
    assert!(listed.iter().any(|n| n == name), "{name}: {listed:?}");
}

/// A stateless upstream that restarts ends the gateway's listen stream: the gateway opens
/// it again (and lists the upstream again for what changed meanwhile), so a tool added to
/// the restarted upstream still reaches the client's list.
#[tokio::test]
async fn a_stateless_upstreams_listen_stream_is_opened_again_after_a_restart() {
    let upstream = start_profile();
    let addr = upstream.addr();
    let remote = UpstreamSettings {
        name: "modern".into(),
        url: format!("http://{addr}/mcp"),
        protocol_version: "2026-07-28".into(),
        mode: UpstreamMode::Shared,
        ..Default::default()
    };
    let server = gateway(vec![remote], |_| {});
    let mut client = Client::initialized(&server).await;
    let simple = client.call_tool("test_simple_text", json!({})).await;
    assert!(simple.get("result").is_some(), "{simple}");

    upstream.stop();
    let mut settings = profile_settings();
    settings.server.listen = addr;
    let restarted = start_bare(settings, |builder| builtins("conformance", builder));
    assert_a_tool_added_upstream_reaches(&mut client, &restarted, "added_after_restart").await;
    server.stop();
    restarted.stop();
}

/// `mcp_ws::client` takes an `initialize` answered with a version of the handshake era it
/// speaks (older than the one asked: the server's choice), and refuses one it does not speak,
/// or one of the stateless era (which has no `initialize`), as the spec
/// has a client disconnect. (Any answer was taken, its version sent on with every request;
/// attack run 52c.)
#[tokio::test]
async fn the_client_refuses_an_initialize_answered_in_a_version_it_does_not_speak() {
    let scripted = scripted_upstream(UpstreamMode::Shared);
    let connect = |version: &str| {
        let command = mcp_ws::client::StdioCommand::new(&scripted.command)
            .args(scripted.args.clone())
            .env("SCRIPTED_VERSION", version);
        McpClient::stdio(command, ClientOptions::default())
    };
    let older = connect("2025-03-26").await.expect("an older version taken");
    assert_eq!(older.server().protocol_version, "2025-03-26");
    older.shutdown(Duration::from_secs(2)).await;
    for unknown in ["1999-01-01", "2026-07-28"] {
        match connect(unknown).await {
            Err(ClientError::InvalidAnswer(why)) => {
                assert!(why.contains(unknown), "{why}");
            }
            other => panic!("{unknown}: expected the answer refused, got {other:?}"),
        }
    }
}

/// `mcp_ws::client` asked for 2026-07-28 of servers that speak only the handshake era (the
/// Python SDK's FastMCP and server-everything, over stdio) falls back to `initialize`; the
/// same client asked of mcp-ws over HTTP or WebSocket stays stateless.
#[tokio::test]
async fn a_stateless_client_falls_back_to_the_handshake_where_it_must() {
    let options = || ClientOptions {
        protocol_version: "2026-07-28".into(),
        ..ClientOptions::default()
    };
    let py = py_upstream(UpstreamMode::Shared);
    let every = everything_upstream(UpstreamMode::Shared);
    for upstream in [py, every] {
        let command = mcp_ws::client::StdioCommand::new(&upstream.command).args(upstream.args);
        let client = McpClient::stdio(command, options())
            .await
            .expect("connects");
        assert_eq!(client.server().protocol_version, "2025-11-25");
        assert!(!client.is_stateless());
        let tools = client.list_all("tools/list", "tools").await.expect("tools");
        assert!(!tools.is_empty(), "{}", upstream.name);
        client.shutdown(Duration::from_secs(2)).await;
    }
    let server = start(settings());
    let url = format!("http://{}/mcp", server.addr());
    let client = McpClient::http(&url, &[], options())
        .await
        .expect("connects");
    assert_eq!(client.server().protocol_version, "2026-07-28");
    assert!(client.is_stateless());
    let sum = client
        .call_tool("add", json!({"a": 2, "b": 3}))
        .await
        .expect("add");
    assert_eq!(sum["content"][0]["text"], "5", "{sum}");
    assert_eq!(sum["resultType"], "complete", "{sum}");
    let url = format!("ws://{}/mcp", server.addr());
    let client = McpClient::websocket(&url, &[], options())
        .await
        .expect("connects");
    assert!(client.is_stateless());
    let sum = client
        .call_tool("add", json!({"a": 4, "b": 5}))
        .await
        .expect("add");
    assert_eq!(sum["content"][0]["text"], "9", "{sum}");
    assert_eq!(sum["resultType"], "complete", "{sum}");
}

/// A stream the HTTP client reads (here a stateless `subscriptions/listen`, which the server
/// holds open) ends with the client: shut down, or dropped, the client leaves no request
/// open on the server (a 2026-07-28 request holds a session place there while it runs).
#[tokio::test]
async fn the_http_clients_open_streams_end_with_the_client() {
    let mut s = settings();
    // The server notices a client that went away at its next keep-alive comment.
    s.sessions.sse_keep_alive_ms = 100;
    let server = start(s);
    let url = format!("http://{}/mcp", server.addr());
    let sessions = "mcp_sessions";
    for shut_down in [true, false] {
        let client = McpClient::http(
            &url,
            &[],
            ClientOptions {
                protocol_version: "2026-07-28".into(),
                ..ClientOptions::default()
            },
        )
        .await
        .expect("connects");
        let listening = client.clone();
        let listen = tokio::spawn(async move {
            let params = json!({"notifications": {"toolsListChanged": true}});
            listening
                .request("subscriptions/listen", Some(params))
                .await
        });
        crate::support::http::wait_metric(&server, sessions, 1).await;
        if shut_down {
            client.shutdown(Duration::from_secs(2)).await;
        } else {
            client.kill();
            drop(client);
        }
        let ended = tokio::time::timeout(READ_TIMEOUT, listen)
            .await
            .expect("the listen request ends with its client")
            .expect("the task");
        assert!(ended.is_err(), "{ended:?}");
        crate::support::http::wait_metric(&server, sessions, 0).await;
    }
}

/// A Streamable HTTP server of the handshake era, by hand, that streams every `tools/call`
/// and never answers it (nor ends the stream); each such POST's connection, once its client
/// closes it, is said on `closes`. Every response closes its connection. It stops accepting
/// when dropped.
struct HoldingServer {
    url: String,
    closes: std::sync::mpsc::Receiver<()>,
    _stop: crate::support::http::StopAccepting,
}

fn holding_server() -> HoldingServer {
    use std::io::{BufReader, Read, Write};
    let (closed, closes) = std::sync::mpsc::channel();
    let (addr, _stop) = crate::support::http::serve_each(move |mut stream| {
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let Some((head, body)) = crate::support::http::read_request(&mut reader) else {
            return;
        };
        let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let reply = |status: &str, headers: &str, body: &str| {
            format!(
                "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            )
        };
        let json = "Content-Type: application/json\r\n";
        let answer = |result: Value| {
            json!({"jsonrpc": "2.0", "id": message["id"], "result": result}).to_string()
        };
        let text = if !head.starts_with("POST") {
            reply("405 Method Not Allowed", "", "")
        } else if message.get("id").is_none() {
            reply("202 Accepted", "", "")
        } else if message["method"] == "initialize" {
            let result = json!({"protocolVersion": "2025-11-25",
                                "capabilities": {"tools": {}},
                                "serverInfo": {"name": "holding", "version": "1"}});
            reply(
                "200 OK",
                &format!("{json}Mcp-Session-Id: s-1\r\n"),
                &answer(result),
            )
        } else if message["method"] == "tools/call" {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                        Connection: close\r\n\r\n";
            if stream.write_all(head.as_bytes()).is_err() {
                return;
            }
            // Held open, silent, until the client closes it.
            let mut rest = [0u8; 256];
            while matches!(reader.read(&mut rest), Ok(n) if n > 0) {}
            let _ = closed.send(());
            return;
        } else {
            reply("200 OK", json, &answer(json!({})))
        };
        let _ = stream.write_all(text.as_bytes());
    });
    HoldingServer {
        url: format!("http://{addr}/mcp"),
        closes,
        _stop,
    }
}

/// A request the caller stopped waiting for (cancelled) ends its POST's stream on the
/// server, even one the server holds open without an answer: it held a connection and a
/// task for as long as the client lived.
#[tokio::test]
async fn the_http_client_closes_the_stream_of_a_request_it_gave_up() {
    let server = holding_server();
    let client = McpClient::http(&server.url, &[], ClientOptions::default())
        .await
        .expect("connects");
    let call = tokio::time::timeout(
        Duration::from_millis(300),
        client.request("tools/call", Some(json!({"name": "hold", "arguments": {}}))),
    )
    .await;
    assert!(call.is_err(), "no answer comes: {call:?}");
    let deadline = Instant::now() + READ_TIMEOUT;
    while server.closes.try_recv().is_err() {
        assert!(Instant::now() < deadline, "the POST's stream is still open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(client);
}

/// The FastMCP upstream as a server of its own on a free port (`--http` or `--ws`), with
/// `env`; returns it (killed when dropped) and its port once it listens.
/// A server of the 2026-07-28 revision only (the TypeScript SDK 2.x's `createMcpHandler`
/// with `legacy: 'reject'`, tests/interop/ts2/modern_only_server.mjs), listening; every
/// method it is sent is appended to `methods`.
fn modern_only_listening(methods: &Path) -> (KillOnDrop, u16) {
    ensure_sdk_2();
    let mut upstream = KillOnDrop(
        Command::new("node")
            .arg(ts2_dir().join("modern_only_server.mjs"))
            .arg(methods)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("node runs the 2026-only server"),
    );
    let stdout = upstream.0.stdout.take().expect("its stdout");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line)
        .expect("it says where it listens");
    let port = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("not a port: {line:?}"));
    (upstream, port)
}

/// A server that speaks only 2026-07-28 and refuses `initialize` (-32022, naming the
/// revisions it serves, as that revision says it should) is reached by an upstream asked
/// for the handshake era (the default `protocol_version`): the gateway's client falls back
/// to `server/discover` and speaks to it statelessly, in both modes, for clients of both
/// eras.
#[tokio::test]
async fn a_server_of_2026_only_is_reached_through_the_fall_back_to_discover() {
    for mode in [UpstreamMode::Shared, UpstreamMode::PerSession] {
        let dir = tempfile::tempdir().expect("a temp dir");
        let methods = dir.path().join("methods");
        let (_upstream, port) = modern_only_listening(&methods);
        let remote = UpstreamSettings {
            name: "modern".into(),
            url: format!("http://127.0.0.1:{port}/mcp"),
            mode,
            ..Default::default()
        };
        let server = gateway(vec![remote], stateless_named);
        let mut client = Client::initialized(&server).await;
        let listed = client.request("tools/list", json!({})).await;
        assert_eq!(tool_names(&listed), ["shout"], "{mode:?}: {listed}");
        let shout = client.call_tool("shout", json!({"text": "hi"})).await;
        assert_eq!(tool_text(&shout), "HI", "{mode:?}: {shout}");

        let mut modern = Client::connect(&server).await;
        let (id, response) = call(
            &mut modern,
            "tools/call",
            stateless(json!({"name": "shout", "arguments": {"text": "hey"}})),
        )
        .await;
        let result = assert_complete(&response, &id);
        assert_eq!(text_of(&result), "HEY", "{mode:?}: {response}");

        let seen = std::fs::read_to_string(&methods).expect("the methods it was sent");
        let seen: Vec<&str> = seen.lines().collect();
        assert_eq!(seen.first(), Some(&"initialize"), "{mode:?}: {seen:?}");
        assert!(seen.contains(&"server/discover"), "{mode:?}: {seen:?}");
        assert_eq!(
            seen.iter().filter(|m| **m == "tools/call").count(),
            2,
            "{mode:?}: {seen:?}"
        );
        assert!(
            !seen.contains(&"notifications/initialized"),
            "{mode:?}: {seen:?}"
        );
        server.stop();
    }
}

fn fastmcp_listening(transport: &str, env: &[(&str, &Path)]) -> (KillOnDrop, u16) {
    crate::support::ports::listening_child(&format!("the {transport} upstream"), |port| {
        Command::new(ensure_python_env())
            .arg(interop_dir().join("gateway_upstream.py"))
            .args([transport, &port.to_string()])
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the FastMCP upstream starts")
    })
}

/// Log lines a shared HTTP upstream sends on a call's own stream reach that call's client,
/// while calls of two sessions are in flight on it, each its own lines only. (They went to
/// whichever session alone had calls in flight, or, as here, nowhere: the gateway could
/// not tell which session they were for; attack run 52c.)
#[tokio::test]
async fn a_shared_http_upstreams_log_lines_reach_the_call_they_came_with() {
    let (_upstream, port) = fastmcp_listening("--http", &[]);
    let remote = remote_upstream(port, UpstreamMode::Shared);
    let server = gateway(vec![remote], |_| {});
    let mut three = Client::initialized(&server).await;
    let mut four = Client::initialized(&server).await;
    // Both in flight at once: the one of four steps outlasts the other.
    for (client, steps) in [(&mut three, 3), (&mut four, 4)] {
        client
            .send_json(
                json!({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
                "params": {"name": "slow", "arguments": {"steps": steps, "delay_ms": 300}}}),
            )
            .await;
    }
    for (client, steps) in [(&mut three, 3), (&mut four, 4)] {
        let done = client.recv_response(&json!("slow")).await;
        assert_eq!(tool_text(&done), "done", "{done}");
        let lines: Vec<String> = client
            .backlog
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .map(|m| m["params"]["data"].as_str().unwrap_or_default().to_owned())
            .collect();
        let own: Vec<String> = (1..=steps)
            .map(|step| format!("step {step} of {steps}"))
            .collect();
        assert_eq!(lines, own, "the lines of the call of {steps} steps");
    }
}

#[tokio::test]
async fn an_http_upstream_is_served_like_a_stdio_one() {
    // FastMCP over Streamable HTTP, on a free port.
    let (_upstream, port) = fastmcp_listening("--http", &[]);
    for mode in [UpstreamMode::PerSession, UpstreamMode::Shared] {
        let remote = remote_upstream(port, mode);
        let server = gateway(vec![remote], |_| {});
        let mut client = Client::initialized(&server).await;
        let sum = client.call_tool("add", json!({"a": 4, "b": 5})).await;
        assert_eq!(
            sum["result"]["structuredContent"],
            json!({"sum": 9.0}),
            "{sum}"
        );
        let slow = client
            .request("tools/call", json!({"name": "slow", "arguments": {"steps": 2, "delay_ms": 50}, "_meta": {"progressToken": "p"}}))
            .await;
        assert_eq!(tool_text(&slow), "done", "{slow}");
        let failed = client.call_tool("fail", json!({})).await;
        assert_eq!(failed["result"]["isError"], true, "{failed}");
        let motd = client.read_resource("mem://motd").await;
        assert_eq!(
            motd["result"]["contents"][0]["text"], "hello from upstream",
            "{motd}"
        );
    }
}

/// Waits until `count` lines of `file` begin with `what`.
async fn events_reach(file: &Path, what: &str, count: usize) {
    let deadline = Instant::now() + READ_TIMEOUT;
    loop {
        let events = read_events(file);
        if events.lines().filter(|line| line.starts_with(what)).count() >= count {
            return;
        }
        assert!(Instant::now() < deadline, "{what} x{count}: {events:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A `shared` WebSocket upstream's answer over `limits.max_message_bytes` fails that one
/// call, at once, with -32030 saying why. Another session's call in flight on the same
/// connection is answered, and the connection is not opened again: it used to close,
/// failing every session's calls and sending the upstream into its restart backoff, at the
/// will of any client that could make a tool's answer grow.
#[tokio::test]
async fn a_shared_websocket_upstreams_answer_over_the_limit_fails_only_its_call() {
    let (_dir, events) = events_file();
    let (_upstream, port) = fastmcp_listening("--ws", &[("GATEWAY_EVENTS", &events)]);
    let mut settings = settings();
    settings.upstreams = vec![UpstreamSettings {
        name: "ws".into(),
        url: format!("ws://127.0.0.1:{port}/ws"),
        mode: UpstreamMode::Shared,
        ..Default::default()
    }];
    settings.limits.max_message_bytes = 256 << 10;
    let server = start(settings);
    let mut asker = Client::initialized(&server).await;
    let mut other = Client::initialized(&server).await;
    let connections = || {
        read_events(&events)
            .lines()
            .filter(|line| *line == "ws connection")
            .count()
    };
    let opened = connections();
    assert!(opened >= 1, "{:?}", read_events(&events));

    let waiting = other.fresh_id();
    other
        .send_json(request(
            waiting.clone(),
            "tools/call",
            json!({"name": "ws__wait", "arguments": {"ms": 1500, "tag": "other"}}),
        ))
        .await;
    let big = tokio::time::timeout(
        READ_TIMEOUT,
        asker.call_tool("ws__big", json!({"bytes": 1 << 20})),
    )
    .await
    .expect("answered at once, not at its deadline");
    assert_error(&big, &big["id"], -32030);
    let message = big["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("an answer longer than max_message_bytes (262144 bytes)"),
        "{big}"
    );
    let waited = other.recv_response(&waiting).await;
    assert_eq!(tool_text(&waited), "waited other", "{waited}");
    let sum = asker.call_tool("ws__add", json!({"a": 1, "b": 2})).await;
    assert_eq!(
        sum["result"]["structuredContent"],
        json!({"sum": 3.0}),
        "{sum}"
    );
    assert_eq!(connections(), opened, "{:?}", read_events(&events));
}

/// A call to an HTTP upstream that holds its POST without a response head (a server that
/// sends its head only with its answer) holds no connection once it is cancelled: its POST
/// is dropped at once, and the upstream is told by a `notifications/cancelled` of its own.
/// (Each cancelled or timed-out call held its connection until the upstream answered: 3,000
/// cancels, 3,000 connections, and the gateway out of file descriptors.)
#[tokio::test]
async fn a_cancelled_call_to_an_http_upstream_holds_no_connection() {
    let (_dir, events) = events_file();
    let (_upstream, port) = crate::support::ports::listening_child("the silent upstream", |port| {
        Command::new(ensure_python_env())
            .arg(interop_dir().join("silent_http_upstream.py"))
            .arg(port.to_string())
            .arg(&events)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the silent upstream starts")
    });
    let remote = remote_upstream(port, UpstreamMode::Shared);
    let server = gateway(vec![remote], |_| {});
    let mut client = Client::initialized(&server).await;
    const CALLS: usize = 8;
    for n in 0..CALLS {
        client
            .send_json(request(
                json!(n),
                "tools/call",
                json!({"name": "wait", "arguments": {}}),
            ))
            .await;
    }
    events_reach(&events, "held", CALLS).await;
    for n in 0..CALLS {
        client.send_json(cancel(json!(n))).await;
    }
    // Each held POST's connection is closed, and the upstream is told of each cancel.
    events_reach(&events, "dropped", CALLS).await;
    events_reach(&events, "cancelled ", CALLS).await;
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn a_websocket_upstream_is_served_like_a_stdio_one() {
    // FastMCP over the Python SDK's own WebSocket transport (which requires the `mcp`
    // subprotocol), on a free port.
    let (_dir, events) = events_file();
    let (_upstream, port) = fastmcp_listening("--ws", &[("GATEWAY_EVENTS", &events)]);
    for mode in [UpstreamMode::PerSession, UpstreamMode::Shared] {
        let remote = UpstreamSettings {
            name: "ws".into(),
            url: format!("ws://127.0.0.1:{port}/ws"),
            mode,
            ..Default::default()
        };
        // Beside the demo tools: the upstream's names get its prefix.
        let mut settings = settings();
        settings.upstreams = vec![remote];
        let server = start(settings);
        let mut client = Client::initialized(&server).await;

        let listed = client.request("tools/list", json!({})).await;
        let names = tool_names(&listed);
        for name in ["echo", "add", "ws__add", "ws__slow", "ws__wait", "ws__fail"] {
            assert!(names.contains(&name), "{name} is not listed: {names:?}");
        }

        let sum = client.call_tool("ws__add", json!({"a": 4, "b": 5})).await;
        assert_eq!(
            sum["result"]["structuredContent"],
            json!({"sum": 9.0}),
            "{sum}"
        );

        // Progress crosses under the client's own token (150 ms apart: none throttled).
        let id = client.fresh_id();
        client
            .send_json(request(
                id.clone(),
                "tools/call",
                json!({"name": "ws__slow", "arguments": {"steps": 3, "delay_ms": 150},
                       "_meta": {"progressToken": "p"}}),
            ))
            .await;
        let slow = client.recv_response(&id).await;
        assert_eq!(tool_text(&slow), "done", "{slow}");
        let progress: Vec<Value> = client
            .backlog
            .drain(..)
            .filter(|m| m["method"] == "notifications/progress")
            .map(|m| m["params"].clone())
            .collect();
        let steps: Vec<f64> = progress
            .iter()
            .map(|p| {
                assert_eq!(p["progressToken"], "p", "{p}");
                p["progress"].as_f64().expect("progress")
            })
            .collect();
        assert_eq!(steps, [1.0, 2.0, 3.0], "{progress:?}");
        assert_eq!(progress[2]["total"], 3.0);

        // The upstream's request to the client (sampling) crosses both WebSockets and back.
        let id = client.fresh_id();
        client
            .send_json(request(
                id.clone(),
                "tools/call",
                json!({"name": "ws__ask_model", "arguments": {}}),
            ))
            .await;
        let ask = loop {
            let message = client.recv().await;
            if message["method"] == "sampling/createMessage" {
                break message;
            }
            assert!(
                message.get("id") != Some(&id),
                "answered before asking: {message}"
            );
        };
        client
            .send_json(json!({"jsonrpc": "2.0", "id": ask["id"], "result": {
                "role": "assistant", "model": "test",
                "content": {"type": "text", "text": "4"}}}))
            .await;
        let asked = client.recv_response(&id).await;
        assert_eq!(tool_text(&asked), "model said 4", "{asked}");

        let failed = client.call_tool("ws__fail", json!({})).await;
        assert_eq!(failed["result"]["isError"], true, "{failed}");
        assert!(tool_text(&failed).contains("always fails"), "{failed}");

        // A cancel reaches the upstream's task, and no answer follows it.
        let tag = format!("ws-{mode:?}");
        assert_cancel_reaches_the_upstream(&mut client, &events, "ws__", &tag).await;

        if mode == UpstreamMode::Shared {
            // The upstream server dies mid-call (its process exits): the WebSocket ends and the
            // call is answered -32030 at once; the next cannot connect (refused, or reset if
            // it came while the process's sockets were being closed).
            let crash = client.call_tool("ws__crash", json!({})).await;
            let error = assert_error(&crash, &crash["id"], -32030);
            assert_eq!(error["data"]["upstream"], "ws", "{error}");
            assert!(
                error["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("WebSocket")),
                "{error}"
            );
            // Where it could not connect to is the operator's: the log has it, the client
            // is not told the upstream's address.
            let next = client.call_tool("ws__whoami", json!({})).await;
            let error = assert_error(&next, &next["id"], -32030);
            let message = error["message"].as_str().unwrap_or_default();
            assert!(message.contains("cannot connect"), "{error}");
            assert!(
                !message.contains("127.0.0.1") && !message.contains(&port.to_string()),
                "{error}"
            );
        }
    }
}

/// Options of `mcp_ws::client` for the tests of its WebSocket transport.
fn ws_client_options() -> ClientOptions {
    ClientOptions {
        initialize_timeout: READ_TIMEOUT,
        label: "test".into(),
        ..ClientOptions::default()
    }
}

/// Fails unless `request` ends within READ_TIMEOUT with `ClientError::Closed`; returns why.
async fn assert_closed<T: std::fmt::Debug>(
    request: impl std::future::Future<Output = Result<T, ClientError>>,
) -> String {
    match tokio::time::timeout(READ_TIMEOUT, request).await {
        Ok(Err(ClientError::Closed(reason))) => reason.to_string(),
        Ok(other) => panic!("expected ClientError::Closed, got {other:?}"),
        Err(_) => panic!("the request hangs after the connection ended"),
    }
}

#[tokio::test]
async fn the_websocket_client_talks_to_mcp_ws() {
    let server = start(settings());
    let client = McpClient::websocket(&server.url(), &[], ws_client_options())
        .await
        .expect("connects and initializes");
    assert_eq!(client.server().protocol_version, "2025-11-25");
    let tools = client
        .list_all("tools/list", "tools")
        .await
        .expect("tools/list");
    assert!(tools.iter().any(|tool| tool["name"] == "echo"), "{tools:?}");
    let echo = client
        .call_tool("echo", json!({"text": "over a WebSocket"}))
        .await
        .expect("echo");
    assert_eq!(text_of(&echo), "over a WebSocket", "{echo}");
    // Concurrent calls each get their own answer.
    let calls = (0..20).map(|i| {
        let client = client.clone();
        async move { client.call_tool("add", json!({"a": i, "b": 1000})).await }
    });
    for (i, answer) in futures_util::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        let answer = answer.expect("add");
        assert_eq!(text_of(&answer), (i + 1000).to_string(), "{answer}");
    }
    // An error of the server is its error, not the connection's.
    let unknown = client.call_tool("nope", json!({})).await;
    assert!(
        matches!(unknown, Err(ClientError::Rpc { .. })),
        "{unknown:?}"
    );

    // A normal close: the server answers it, and the connection is over.
    client.shutdown(READ_TIMEOUT).await;
    let reason = tokio::time::timeout(READ_TIMEOUT, client.closed())
        .await
        .expect("closed");
    assert_eq!(&*reason, "the WebSocket was closed by the client");
    assert_closed(client.request("ping", None)).await;
}

#[tokio::test]
async fn the_websocket_client_sends_its_headers_with_the_upgrade() {
    let mut settings = with_api_key(settings());
    settings.auth.required = true;
    let server = start(settings);
    let refused = McpClient::websocket(&server.url(), &[], ws_client_options()).await;
    match refused {
        Err(ClientError::Connect(why)) => assert!(why.contains("401"), "{why}"),
        other => panic!("connected without credentials: {other:?}"),
    }
    let headers = [("Authorization".to_owned(), format!("Bearer {TEST_KEY}"))];
    let client = McpClient::websocket(&server.url(), &headers, ws_client_options())
        .await
        .expect("connects with the API key");
    let echo = client
        .call_tool("echo", json!({"text": "authorized"}))
        .await
        .expect("echo");
    assert_eq!(text_of(&echo), "authorized");
}

#[tokio::test]
async fn the_websocket_client_fails_what_is_in_flight_when_the_server_goes() {
    // Killed: the TCP connection ends without a close frame.
    let server = ServerProcess::spawn(&["--listen", "127.0.0.1:0"], &[]);
    let url = format!("ws://{}/mcp", server.wait_listening());
    let client = McpClient::websocket(&url, &[], ws_client_options())
        .await
        .expect("connects");
    let sleeping = {
        let client = client.clone();
        tokio::spawn(async move { client.call_tool("sleep", json!({"ms": 60_000})).await })
    };
    // The sleep is on the server once a later request on the same connection is answered.
    client.request("ping", None).await.expect("ping");
    let mut server = server;
    server.kill();
    let why = assert_closed(async { sleeping.await.expect("the call's task") }).await;
    assert!(why.contains("WebSocket"), "{why}");
    assert!(client.is_closed());
    assert_closed(client.request("ping", None)).await;

    // Stopped: the server answers what it was running (-32004 past its grace) and closes
    // with 1001; the connection is over, and a request after it fails at once.
    let mut settings = settings();
    settings.shutdown.grace_ms = 100;
    let (server, _gate) = start_with_gate(settings);
    let client = McpClient::websocket(&server.url(), &[], ws_client_options())
        .await
        .expect("connects");
    let held = {
        let client = client.clone();
        tokio::spawn(async move { client.call_tool("hold", json!({})).await })
    };
    client.request("ping", None).await.expect("ping");
    let stopper = stop_in_background(server);
    let answer = tokio::time::timeout(READ_TIMEOUT, held)
        .await
        .expect("the held call is answered")
        .expect("the call's task");
    assert!(
        matches!(
            &answer,
            Err(ClientError::Rpc {
                code: SHUTTING_DOWN,
                ..
            } | ClientError::Closed(_))
        ),
        "{answer:?}"
    );
    let reason = tokio::time::timeout(READ_TIMEOUT, client.closed())
        .await
        .expect("the server closes the connection");
    assert!(
        reason.starts_with("the server closed the WebSocket (1001"),
        "{reason}"
    );
    assert_closed(client.request("ping", None)).await;
    assert_stopped(stopper).await;
}

/// A WebSocket server that floods the client with requests and reads nothing: the client's
/// reader is held back (64 answers waiting to be written), and still, once the client is
/// shut down and dropped, its socket closes. (The held-back reader watched neither the
/// close nor the last handle going, and the writer waited for the reader: the socket stayed
/// open for as long as the server kept it.)
#[tokio::test]
async fn the_websocket_client_held_back_by_a_flooding_server_still_closes() {
    use futures_util::SinkExt;
    use tokio_tungstenite::tungstenite::Message;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bound");
    let url = format!("ws://{}/", listener.local_addr().expect("address"));
    let (held_tx, held_rx) = tokio::sync::oneshot::channel::<()>();
    let (dropped_tx, dropped_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let (mut sink, stream) = accept_initialized(listener, "flood").await;
        // Reads nothing more; pings until its own writes block for 2 s.
        let mut sent = 0u64;
        loop {
            for _ in 0..1000 {
                sent += 1;
                let ping = format!(r#"{{"jsonrpc":"2.0","id":{sent},"method":"ping"}}"#);
                sink.feed(Message::text(ping)).await.expect("fed");
            }
            match tokio::time::timeout(Duration::from_secs(2), sink.flush()).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => panic!("the client went before it was held back: {error}"),
                Err(_blocked) => break,
            }
        }
        let _ = held_tx.send(());
        let _ = dropped_rx.await;
        // The client's socket closed: the blocked flush fails at once.
        let flushed = tokio::time::timeout(Duration::from_secs(8), sink.flush()).await;
        drop(stream);
        flushed.is_ok()
    });
    let client = McpClient::websocket(&url, &[], ClientOptions::default())
        .await
        .expect("connected");
    held_rx.await.expect("held back");
    client.shutdown(Duration::from_millis(500)).await;
    drop(client);
    let _ = dropped_tx.send(());
    assert!(
        server.await.expect("the server task"),
        "the client's socket was still open 8 s after its shutdown and drop"
    );
}

/// An answer over the client's `max_message_bytes` is read past: its call fails at once as
/// too long, and the connection goes on (tungstenite, which cannot read past a message over
/// its limit, closed it, failing every call on it).
#[tokio::test]
async fn the_websocket_client_skips_a_message_over_its_limit_and_goes_on() {
    let server = start(settings());
    let options = ClientOptions {
        max_message_bytes: 4096,
        ..ws_client_options()
    };
    let client = McpClient::websocket(&server.url(), &[], options)
        .await
        .expect("connects");
    let fits = client
        .call_tool("echo", json!({"text": "x".repeat(1000)}))
        .await
        .expect("an answer under the limit");
    assert_eq!(text_of(&fits).len(), 1000);
    // The echo of 8 KiB is over the client's 4 KiB.
    let too_long = tokio::time::timeout(
        READ_TIMEOUT,
        client.call_tool("echo", json!({"text": "x".repeat(8192)})),
    )
    .await
    .expect("failed at once");
    match too_long {
        Err(ClientError::InvalidAnswer(why)) => assert!(
            why.contains("an answer longer than max_message_bytes (4096 bytes)"),
            "{why}"
        ),
        other => panic!("expected the answer refused as too long, got {other:?}"),
    }
    assert!(!client.is_closed());
    let after = client
        .call_tool("echo", json!({"text": "after"}))
        .await
        .expect("the connection goes on");
    assert_eq!(text_of(&after), "after");
}

/// An answer over the limit sent in fragments, a ping between them, the id last: the client
/// reads past it, fails its call at once, answers the ping, and the next call's answer, sent
/// in fragments that fit, is read.
#[tokio::test]
async fn the_websocket_client_reads_past_a_fragmented_answer_over_its_limit() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    use tokio_tungstenite::tungstenite::Message;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bound");
    let url = format!("ws://{}/", listener.local_addr().expect("address"));
    let server = tokio::spawn(async move {
        let (mut sink, mut stream) = accept_initialized(listener, "fragments").await;
        let mut ponged = false;
        let fragments = |answer: String, pieces: usize| {
            let size = answer.len().div_ceil(pieces);
            let chunks: Vec<Vec<u8>> = answer.as_bytes().chunks(size).map(<[u8]>::to_vec).collect();
            let last = chunks.len() - 1;
            chunks
                .into_iter()
                .enumerate()
                .map(|(n, chunk)| {
                    let opcode = OpCode::Data(if n == 0 { Data::Text } else { Data::Continue });
                    Message::Frame(Frame::message(chunk, opcode, n == last))
                })
                .collect::<Vec<_>>()
        };
        // The first call: 10 kB in three fragments (each under the client's 4 KiB), a ping
        // after the first; the id comes last, as the TypeScript SDK writes it.
        let call = next_request(&mut stream, &mut ponged).await;
        let long = format!(
            r#"{{"result":{{"content":[{{"type":"text","text":"{}"}}]}},"jsonrpc":"2.0","id":{}}}"#,
            "x".repeat(10_000),
            call["id"]
        );
        let mut frames = fragments(long, 3).into_iter();
        sink.feed(frames.next().expect("a fragment"))
            .await
            .expect("fed");
        sink.feed(Message::Ping("held?".into())).await.expect("fed");
        for frame in frames {
            sink.feed(frame).await.expect("fed");
        }
        sink.flush().await.expect("flushed");
        let call = next_request(&mut stream, &mut ponged).await;
        let short = json!({"jsonrpc": "2.0", "id": call["id"], "result": {
            "content": [{"type": "text", "text": "after"}]}});
        for frame in fragments(short.to_string(), 2) {
            sink.feed(frame).await.expect("fed");
        }
        sink.flush().await.expect("flushed");
        // Held open until the client goes; the ping was answered on the way.
        while let Some(Ok(message)) = stream.next().await {
            ponged |= matches!(message, Message::Pong(_));
        }
        ponged
    });
    let options = ClientOptions {
        max_message_bytes: 4096,
        ..ws_client_options()
    };
    let client = McpClient::websocket(&url, &[], options)
        .await
        .expect("connects");
    let too_long = tokio::time::timeout(READ_TIMEOUT, client.call_tool("long", json!({})))
        .await
        .expect("failed at once");
    assert!(
        matches!(&too_long, Err(ClientError::InvalidAnswer(why)) if why.contains("longer than max_message_bytes (4096 bytes)")),
        "{too_long:?}"
    );
    let after = tokio::time::timeout(READ_TIMEOUT, client.call_tool("short", json!({})))
        .await
        .expect("answered")
        .expect("the connection goes on");
    assert_eq!(text_of(&after), "after");
    client.shutdown(Duration::from_millis(500)).await;
    drop(client);
    let ponged = tokio::time::timeout(READ_TIMEOUT, server)
        .await
        .expect("the server's connection ended")
        .expect("the server task");
    assert!(ponged, "the ping between the fragments was not answered");
}

/// A raw WebSocket server's end of the one connection `listener` takes: upgraded with the
/// `mcp` subprotocol, the client's `initialize` answered as server `name`, and its
/// `notifications/initialized` read.
async fn accept_initialized(
    listener: tokio::net::TcpListener,
    name: &str,
) -> (
    futures_util::stream::SplitSink<
        tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
        tokio_tungstenite::tungstenite::Message,
    >,
    futures_util::stream::SplitStream<tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>>,
) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
    use tokio_tungstenite::tungstenite::Message;
    let (tcp, _) = listener.accept().await.expect("accepted");
    // The callback's type is tungstenite's, error response and all.
    #[allow(clippy::result_large_err)]
    let with_mcp = |_: &Request, mut response: Response| {
        let mcp = "mcp".parse().expect("a header value");
        response.headers_mut().insert("sec-websocket-protocol", mcp);
        Ok(response)
    };
    let ws = tokio_tungstenite::accept_hdr_async(tcp, with_mcp)
        .await
        .expect("upgraded");
    let (mut sink, mut stream) = ws.split();
    let init = stream.next().await.expect("initialize").expect("a frame");
    let init: Value = serde_json::from_str(init.to_text().expect("text")).expect("JSON");
    let reply = json!({"jsonrpc": "2.0", "id": init["id"], "result": {
        "protocolVersion": init["params"]["protocolVersion"], "capabilities": {"tools": {}},
        "serverInfo": {"name": name, "version": "1"}}});
    sink.send(Message::text(reply.to_string()))
        .await
        .expect("sent");
    let _initialized = stream.next().await;
    (sink, stream)
}

/// The next request (a message with an id) the client sent; a pong on the way is noted.
async fn next_request(
    stream: &mut futures_util::stream::SplitStream<
        tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    >,
    ponged: &mut bool,
) -> Value {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        match stream.next().await.expect("a message").expect("read") {
            Message::Text(text) => {
                let value: Value = serde_json::from_str(&text).expect("JSON");
                if value.get("id").is_some() {
                    return value;
                }
            }
            Message::Pong(_) => *ponged = true,
            _ => {}
        }
    }
}

#[test]
fn the_websocket_client_speaks_wss_with_the_platform_roots() {
    const TEST: &str = "gateway::the_websocket_client_speaks_wss_with_the_platform_roots";
    // Alone in a process: the trust roots come from this process's environment.
    if !crate::support::alone::in_own_process(TEST) {
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (_pki, settings) = crate::tls::make_pki();
    let ca_file = settings.tls.client_ca_file.clone();
    let server = start(settings);
    let url = server.url();
    assert!(url.starts_with("wss://"), "{url}");
    runtime.block_on(async {
        // The test CA is no root of the platform's: the certificate is refused.
        match McpClient::websocket(&url, &[], ws_client_options()).await {
            Err(ClientError::Connect(why)) => assert!(why.contains("TLS"), "{why}"),
            other => panic!("a certificate of an unknown CA was accepted: {other:?}"),
        }
        // The platform's roots on Linux are read from SSL_CERT_FILE when it is set
        // (rustls-native-certs, under rustls-platform-verifier): now the test CA is one.
        std::env::set_var("SSL_CERT_FILE", &ca_file);
        let client = McpClient::websocket(&url, &[], ws_client_options())
            .await
            .expect("connects over wss:// trusting the test CA");
        let echo = client
            .call_tool("echo", json!({"text": "over TLS"}))
            .await
            .expect("echo");
        assert_eq!(text_of(&echo), "over TLS");
        client.shutdown(READ_TIMEOUT).await;
    });
}

#[test]
fn a_command_that_cannot_start_stops_mcp_ws_with_exit_2() {
    let mut server = ServerProcess::spawn(
        &[
            "--listen",
            "127.0.0.1:0",
            "--stdio",
            "--",
            "/nonexistent/mcp-server",
        ],
        &[],
    );
    let (status, stderr) = server.wait_exit();
    assert_eq!(status.code(), Some(2), "{stderr}");
    let reason: Vec<String> = stderr
        .lines()
        .filter(|l| l.starts_with("mcp-ws: "))
        .map(str::to_owned)
        .collect();
    assert_eq!(reason.len(), 1, "{stderr}");
    assert!(reason[0].contains("/nonexistent/mcp-server"), "{reason:?}");
}

/// `mcp-ws --mode MODE --stdio -- python tests/interop/SCRIPT`, and a client of it.
async fn stdio_server(mode: &str, script: &str) -> (ServerProcess, Client) {
    let python = ensure_python_env().display().to_string();
    let script = interop_dir().join(script).display().to_string();
    let server = ServerProcess::spawn(
        &[
            "--listen",
            "127.0.0.1:0",
            "--mode",
            mode,
            "--stdio",
            "--",
            &python,
            &script,
        ],
        &[],
    );
    let addr = server.wait_listening();
    let client = Client::initialized_at(&format!("ws://{addr}/mcp"), None, "2025-11-25").await;
    (server, client)
}

/// `mcp-ws --stdio -- python gateway_upstream.py`, and the pid of the child of one session.
async fn stdio_binary(mode: &str) -> (ServerProcess, Client, i32) {
    let (server, mut client) = stdio_server(mode, "gateway_upstream.py").await;
    // Under its own name: a single upstream alone keeps its names.
    let whoami = tool_text(&client.call_tool("whoami", json!({})).await);
    (server, client, pid_of(&whoami))
}

/// A child starts with the soft limit on open files the binary was started with, not the
/// hard one the binary raises its own to (as Go's children do): programs not written for a
/// large limit can fail under one.
#[tokio::test]
async fn a_stdio_child_starts_with_the_open_files_limit_the_binary_was_given() {
    let hard = open_files_limits(std::process::id()).1;
    assert!(
        hard > 256,
        "the hard limit ({hard}) leaves nothing to raise"
    );
    let python = ensure_python_env().display().to_string();
    let script = interop_dir()
        .join("gateway_upstream.py")
        .display()
        .to_string();
    let args = ["--listen", "127.0.0.1:0", "--stdio", "--", &python, &script];
    let mut command = ServerProcess::command(&args, &[]);
    limit_open_files(&mut command, 256, hard);
    let server = ServerProcess::start(command);
    let addr = server.wait_listening();
    let mut client = Client::initialized_at(&format!("ws://{addr}/mcp"), None, "2025-11-25").await;
    let child = pid_of(&tool_text(&client.call_tool("whoami", json!({})).await));
    assert_eq!(open_files_limits(server.pid()), (hard, hard), "raised");
    let child = u32::try_from(child).expect("a pid");
    assert_eq!(
        open_files_limits(child),
        (256, hard),
        "the child's, as given"
    );
}

/// A child's stderr is logged at most 100 lines a second; the rest are counted and said in
/// one line. (Each line was logged: a child writing 2 MiB of one-character lines made 135
/// MiB of the server's log.)
#[tokio::test]
async fn a_childs_stderr_is_logged_at_a_bounded_rate() {
    let (server, mut client) = stdio_server("shared", "scripted_child.py").await;
    let said = client.call_tool("chatter", json!({"lines": 5000})).await;
    assert_eq!(tool_text(&said), "said", "{said}");
    // The next second's first line says how many were skipped.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let said = client.call_tool("chatter", json!({"lines": 1})).await;
    assert_eq!(tool_text(&said), "said", "{said}");
    let deadline = Instant::now() + READ_TIMEOUT;
    let log = loop {
        let log = server.stderr_text();
        if log.contains("lines skipped") {
            break log;
        }
        assert!(Instant::now() < deadline, "no skipped lines said:\n{log}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let logged = log.lines().filter(|l| l.contains("stderr=\"line ")).count();
    assert!(
        (100..=101).contains(&logged),
        "{logged} stderr lines logged: {}",
        log.lines()
            .filter(|l| l.contains("upstream stderr"))
            .take(3)
            .collect::<Vec<_>>()
            .join("\n")
    );
    let skipped = log
        .lines()
        .find(|l| l.contains("lines skipped"))
        .and_then(|l| l.split("skipped=").nth(1))
        .and_then(|n| n.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok());
    assert_eq!(skipped, Some(4900), "{log}");
}

/// Lines of a child's stdout that are not JSON-RPC are skipped with a warning, at most 10
/// a second; the rest are counted and said in one line. (Each was a warning of its own: a
/// child writing short lines without end, or made to through a tool, filled the server's
/// log many times faster; attack run 52c.)
#[tokio::test]
async fn a_childs_lines_that_are_not_json_rpc_are_warned_of_at_a_bounded_rate() {
    let (server, mut client) = stdio_server("shared", "scripted_child.py").await;
    let said = client
        .call_tool("chatter", json!({"lines": 5000, "stream": "stdout"}))
        .await;
    assert_eq!(tool_text(&said), "said", "{said}");
    // The next second's first skipped line says how many were not.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let said = client
        .call_tool("chatter", json!({"lines": 1, "stream": "stdout"}))
        .await;
    assert_eq!(tool_text(&said), "said", "{said}");
    // Every line is either warned of or counted in a line saying so, once the second
    // call's line came (the count of the second before is said with it).
    let deadline = Instant::now() + READ_TIMEOUT;
    let (warned, unsaid) = loop {
        let log = server.stderr_text();
        let warned = log
            .lines()
            .filter(|l| l.contains("skipped a message that is not JSON-RPC"))
            .count() as u64;
        let unsaid: u64 = log
            .lines()
            .filter(|l| l.contains("skipped messages not logged"))
            .filter_map(|l| l.split("skipped=").nth(1))
            .filter_map(|n| n.split_whitespace().next()?.parse::<u64>().ok())
            .sum();
        if warned + unsaid == 5001 {
            break (warned, unsaid);
        }
        assert!(
            Instant::now() < deadline,
            "{warned} warned and {unsaid} counted of 5001:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // 10 in the first second, and the one of the second call (the 5000 lines may take a
    // second or two to pass: 10 a second they span).
    assert!((11..=31).contains(&warned), "{warned} warnings");
    assert!(unsaid > 0);
}

#[tokio::test]
async fn no_child_outlives_mcp_ws_killed() {
    for mode in ["per_session", "shared"] {
        let (mut server, _client, child) = stdio_binary(mode).await;
        assert!(alive(child));
        server.kill();
        wait_gone(child).await;
    }
}

#[tokio::test]
async fn children_are_stopped_when_mcp_ws_stops() {
    let (mut server, _client, child) = stdio_binary("per_session").await;
    server.terminate();
    let (status, stderr) = server.wait_exit();
    assert!(status.success(), "{status}\n{stderr}");
    assert!(!alive(child), "the child outlived mcp-ws");
}

/// The rmcp 3.11 server of benches/peers/rmcp (one `echo` tool over Streamable HTTP, written
/// with the official Rust SDK), built once per test binary.
fn rmcp_server() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR"));
            let target = root.join("target/peers");
            let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args(["build", "--quiet", "--manifest-path"])
                .arg(root.join("benches/peers/rmcp/Cargo.toml"))
                .env("CARGO_TARGET_DIR", &target)
                .status()
                .expect("cargo builds the rmcp peer");
            assert!(status.success(), "building benches/peers/rmcp failed");
            target.join("debug/bench-rmcp")
        })
        .clone()
}

#[tokio::test]
async fn an_rmcp_server_over_http_is_an_upstream() {
    let binary = rmcp_server();
    // Its session mode (Mcp-Session-Id, SSE answers) and its stateless JSON mode.
    for (rmcp_mode, mode) in [
        ("sessions", UpstreamMode::PerSession),
        ("stateless-json", UpstreamMode::Shared),
    ] {
        let (_upstream, port) = crate::support::ports::listening_child("the rmcp server", |port| {
            Command::new(&binary)
                .arg(format!("127.0.0.1:{port}"))
                .env("MODE", rmcp_mode)
                .spawn()
                .expect("the rmcp server starts")
        });
        let rust = UpstreamSettings {
            name: "rust".into(),
            url: format!("http://127.0.0.1:{port}/mcp"),
            mode,
            ..Default::default()
        };
        let server = gateway(vec![rust], |_| {});
        let mut client = Client::initialized(&server).await;
        let listed = client.request("tools/list", json!({})).await;
        assert_eq!(listed["result"]["tools"][0]["name"], "echo", "{listed}");
        let echo = client.call_tool("echo", json!({"text": rmcp_mode})).await;
        assert_eq!(tool_text(&echo), rmcp_mode, "{echo}");
        // Its own error for an argument that does not fit passes through as its error.
        let wrong = client.call_tool("echo", json!({"text": 5})).await;
        assert!(
            wrong.get("error").is_some() || wrong["result"]["isError"] == true,
            "{wrong}"
        );
    }
}

/// Also: the server stops without waiting out its shutdown grace for that child. (The child
/// runs on the worker thread of the connection that started it; its pipes and the watch
/// over its exit went with that thread at shutdown, and the gateway waited the whole grace,
/// 10 s by default, for an exit nothing was left to see, then killed it. Now the watch,
/// dropped, kills it.)
#[tokio::test]
async fn an_identitys_child_is_not_reaped_while_a_call_runs_on_it() {
    let mut py = py_upstream(UpstreamMode::PerSession);
    py.idle_timeout_ms = 200;
    let server = gateway(vec![py], |s| {
        stateless_named(s);
        s.shutdown.grace_ms = 60_000;
    });
    // A 2026-07-28 call runs on its identity's own child. It began more than 200 ms before
    // the reaper (every 5 s) looks: idle by the clock, but with a call in flight.
    let mut client = Client::connect(&server).await;
    let (id, response) = call(
        &mut client,
        "tools/call",
        stateless(json!({"name": "wait", "arguments": {"ms": 6000, "tag": "long"}})),
    )
    .await;
    let result = assert_complete(&response, &id);
    assert_eq!(text_of(&result), "waited long", "{response}");
    drop(client);
    let stopping = Instant::now();
    tokio::task::spawn_blocking(move || server.stop())
        .await
        .expect("stopped");
    assert!(
        stopping.elapsed() < Duration::from_secs(30),
        "the stop waited out the 60 s grace: {:?}",
        stopping.elapsed()
    );
}

#[tokio::test]
async fn an_idle_shared_child_is_stopped_and_started_again_on_demand() {
    let mut py = py_upstream(UpstreamMode::Shared);
    py.idle_timeout_ms = 200;
    let server = gateway(vec![py], |_| {});
    let mut client = Client::initialized(&server).await;
    let first = tool_text(&client.call_tool("whoami", json!({})).await);
    // The reaper looks every 5 s: the child idle for longer than 200 ms is stopped.
    wait_gone(pid_of(&first)).await;
    let second = tool_text(&client.call_tool("whoami", json!({})).await);
    assert_ne!(
        pid_of(&first),
        pid_of(&second),
        "a fresh child: {first} → {second}"
    );
}

/// tests/interop/scripted_child.py, an upstream that misbehaves on purpose, as `scripted`.
fn scripted_upstream(mode: UpstreamMode) -> UpstreamSettings {
    python_upstream("scripted", "scripted_child.py", mode)
}

/// A session's own child is listed (for the session's view) while other sessions' children
/// have not answered theirs: re-lists take turns per child, not per upstream. (Each child
/// that did not answer held every later session's view for `initialize_timeout_ms`: ten
/// such sessions, ten minutes without a new session's own tools.)
#[tokio::test]
async fn a_child_that_does_not_answer_its_listing_holds_up_no_other_sessions() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let stall = dir.path().join("stall");
    let events = dir.path().join("events");
    let mut upstream = scripted_upstream(UpstreamMode::PerSession);
    upstream.env.insert("SCRIPTED_LIST".into(), "own".into());
    upstream
        .env
        .insert("SCRIPTED_STALL_LIST".into(), stall.display().to_string());
    upstream
        .env
        .insert("SCRIPTED_EVENTS".into(), events.display().to_string());
    // Far longer than the test waits: a stalled listing is never given up while it runs.
    upstream.initialize_timeout_ms = 600_000;
    let server = gateway(vec![upstream], |_| {});
    std::fs::write(&stall, "").expect("the stall file");
    let mut stalled = Vec::new();
    for _ in 0..2 {
        stalled.push(Client::initialized(&server).await);
    }
    let deadline = Instant::now() + READ_TIMEOUT;
    while read_events(&events).matches("stalled a listing").count() < 2 {
        assert!(Instant::now() < deadline, "{:?}", read_events(&events));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::remove_file(&stall).expect("the stall ends");
    let mut client = Client::initialized(&server).await;
    let whoami = client.call_tool("whoami", json!({})).await;
    let own = format!("own_{}", pid_of(&tool_text(&whoami)));
    let deadline = Instant::now() + READ_TIMEOUT;
    loop {
        let listed = client.request("tools/list", json!({})).await;
        if tool_names(&listed).contains(&own.as_str()) {
            break;
        }
        assert!(Instant::now() < deadline, "no {own} in {listed}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(stalled);
}

/// A session's own child is told the client's capabilities, but not that its roots list
/// changes are announced: the client's `notifications/roots/list_changed` is not passed on,
/// so the child asks `roots/list` when it needs them.
#[tokio::test]
async fn a_sessions_child_is_not_promised_roots_list_changes() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let events = dir.path().join("events");
    let mut upstream = scripted_upstream(UpstreamMode::PerSession);
    upstream
        .env
        .insert("SCRIPTED_EVENTS".into(), events.display().to_string());
    let server = gateway(vec![upstream], |_| {});
    let mut client = Client::connect(&server).await;
    let mut params = initialize_params("2025-11-25");
    params["capabilities"] = json!({"roots": {"listChanged": true}, "sampling": {}});
    let answer = client.request_with_id(json!(0), "initialize", params).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let told = r#"capabilities {"roots":{},"sampling":{}}"#;
    let deadline = Instant::now() + READ_TIMEOUT;
    while !read_events(&events).lines().any(|line| line == told) {
        assert!(Instant::now() < deadline, "{:?}", read_events(&events));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An upstream tool's arguments are an object, as a library tool's are: anything else is
/// refused as invalid arguments before it reaches the child (which would guess).
#[tokio::test]
async fn arguments_that_are_not_an_object_do_not_reach_the_child() {
    let server = gateway(vec![scripted_upstream(UpstreamMode::Shared)], |_| {});
    let mut client = Client::initialized(&server).await;
    for arguments in [json!("x"), json!([1, 2]), json!(5)] {
        let response = client.call_tool("whoami", arguments.clone()).await;
        assert_eq!(
            response["result"]["isError"], true,
            "{arguments}: {response}"
        );
        assert_eq!(
            tool_text(&response),
            "Invalid arguments: must be a JSON object",
            "{arguments}"
        );
    }
    let whoami = client.call_tool("whoami", json!({})).await;
    assert!(tool_text(&whoami).starts_with("pid="), "{whoami}");
}

/// A child that crashes leaves nothing it started in its group behind: the group is killed
/// as the child is reaped. (What it started outlived it, its session and `mcp-ws`,
/// reparented to init: only a child still running had its group killed.)
#[tokio::test]
async fn what_a_crashed_child_started_in_its_group_dies_with_it() {
    for mode in [UpstreamMode::PerSession, UpstreamMode::Shared] {
        let server = gateway(vec![scripted_upstream(mode)], |_| {});
        let mut client = Client::initialized(&server).await;
        let orphan = client.call_tool("orphan", json!({})).await;
        let sleep = pid_of(&tool_text(&orphan));
        assert!(alive(sleep), "{mode:?}: {orphan}");
        let crash = client.call_tool("crash", json!({})).await;
        assert_error(&crash, &crash["id"], -32030);
        wait_gone(sleep).await;
    }
}

/// A child's answer over `limits.max_message_bytes` is skipped, and answers its call at once
/// with -32030 saying so (its id, after the result, read as the line streams past): the
/// call waited for its deadline. The child goes on serving.
#[tokio::test]
async fn a_childs_answer_over_the_message_limit_answers_its_call_at_once() {
    let server = gateway(vec![scripted_upstream(UpstreamMode::Shared)], |s| {
        s.limits.max_message_bytes = 256 << 10;
    });
    let mut client = Client::initialized(&server).await;
    let answer = tokio::time::timeout(
        READ_TIMEOUT,
        client.call_tool("too_long", json!({"bytes": 1 << 20})),
    )
    .await
    .expect("answered at once, not at its deadline");
    assert_error(&answer, &answer["id"], -32030);
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("an answer longer than max_message_bytes (262144 bytes)"),
        "{answer}"
    );
    let whoami = client.call_tool("whoami", json!({})).await;
    assert!(tool_text(&whoami).starts_with("pid="), "{whoami}");
}

/// A list is bounded as a whole: an upstream that hands out the same cursor again, or new
/// pages without end, fails its list (here at start: `mcp-ws` stops with exit 2, saying
/// why) after the pages it took to see it, not after a thousand pages kept whole.
#[test]
fn a_list_that_never_ends_fails_at_a_repeated_cursor_or_max_message_bytes() {
    let python = ensure_python_env().display().to_string();
    let script = interop_dir()
        .join("scripted_child.py")
        .display()
        .to_string();
    // 4 tools of 20 kB a page: 4 MiB (limits.max_message_bytes) is 53 pages.
    for (list, why, most_pages) in [
        ("same_cursor", "a nextCursor came a second time", 2),
        ("new_cursor", "its pages came to over 4194304 bytes", 80),
    ] {
        let (_dir, events) = events_file();
        let events_path = events.display().to_string();
        let mut server = ServerProcess::spawn(
            &["--listen", "127.0.0.1:0", "--stdio", "--", &python, &script],
            &[
                ("SCRIPTED_LIST", list),
                ("SCRIPTED_PAGE_BYTES", "20000"),
                ("SCRIPTED_EVENTS", &events_path),
            ],
        );
        let (status, stderr) = server.wait_exit();
        assert_eq!(status.code(), Some(2), "{list}: {stderr}");
        let reason = stderr
            .lines()
            .find(|l| l.starts_with("mcp-ws: "))
            .unwrap_or_else(|| panic!("{list}: no reason given: {stderr}"));
        assert!(reason.contains(why), "{list}: {reason}");
        let pages = tool_lists(&events);
        assert!(
            (2..=most_pages).contains(&pages),
            "{list}: {pages} pages asked for"
        );
    }
}
