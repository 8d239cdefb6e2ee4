//! Three `mcp-ws` processes (the real binary) sharing one real `redis-server`, behind a real
//! nginx running the repository's `config/nginx-three-nodes.conf` (round-robin, no affinity;
//! only its addresses replaced). The official Python SDK (tests/interop/any_node_client.py)
//! runs many Streamable HTTP sessions through it at once, each request landing on whichever
//! node nginx picks: initialize, tools/list, a resource subscription, `echo` calls with a
//! text unique to the session and call, DELETE.
//!
//! - With every node up: every session completes, no failure, no cross-talk.
//! - With one node SIGKILLed in the middle of the run: every session still completes, its
//!   next requests served by the other nodes from the session's record in Redis; a call that
//!   was on the dead node is retried by the client with its idempotency key (counted).

use crate::interop_py_sdk::ensure_python_env;
use crate::support::interop::{interop_dir, KillOnDrop};
use crate::support::nginx::Nginx;
use crate::support::process::ServerProcess;
use crate::support::redis::RedisServer;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SAMPLE_NODES: [&str; 3] = ["127.0.0.1:8765", "127.0.0.1:8766", "127.0.0.1:8767"];
const SAMPLE_LISTEN: &str = "127.0.0.1:8080";
const SESSIONS: usize = 100;
const CALLS: usize = 20;

fn start_node(dir: &Path, name: &str, redis: &RedisServer) -> ServerProcess {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nworkers = 1\ntrusted_proxies = [\"127.0.0.1\"]\n\n\
             [redis]\nurl = \"{}\"\n",
            redis.url(),
        ),
    )
    .expect("node config written");
    ServerProcess::spawn(
        &["--config", config.to_str().expect("utf-8 path")],
        &[("RUST_LOG", "warn,mcp_ws::server=info")],
    )
}

/// Runs the SDK client through `proxy`; `on_ready` is called once half the sessions are
/// initialized. Returns its summary.
fn run_sessions(proxy: &Nginx, on_ready: impl FnOnce()) -> Value {
    let mut client = KillOnDrop(
        Command::new(ensure_python_env())
            .arg(interop_dir().join("any_node_client.py"))
            .arg(proxy.http_url())
            .args([SESSIONS.to_string(), CALLS.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the Python SDK client starts"),
    );
    let stdout = client.0.stdout.take().expect("piped stdout");
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut on_ready = Some(on_ready);
    let mut summary = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("a line");
        assert!(Instant::now() < deadline, "the client took too long");
        if let Some(ready) = line.strip_prefix("ready ") {
            if ready.parse::<usize>().unwrap_or(0) >= SESSIONS / 2 {
                if let Some(on_ready) = on_ready.take() {
                    on_ready();
                }
            }
        } else if line.starts_with('{') {
            summary = Some(serde_json::from_str(&line).expect("a JSON summary"));
        }
    }
    let status = client.0.wait().expect("the client exits");
    assert!(status.success(), "client exit status {status}");
    summary.expect("the client printed its summary")
}

/// The `tools/call` requests a node answered (its `/metrics`, read directly).
fn tools_calls(addr: std::net::SocketAddr) -> u64 {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("the node answers");
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("request sent");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("metrics read");
    text.lines()
        .filter(|line| {
            line.starts_with("mcp_request_duration_seconds_count{method=\"tools/call\"}")
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn assert_all_completed(summary: &Value) {
    assert_eq!(summary["failures"], serde_json::json!([]), "{summary}");
    assert_eq!(summary["crosstalk"], 0, "{summary}");
    assert_eq!(summary["sessions_ok"], SESSIONS, "{summary}");
    assert_eq!(summary["calls_ok"], SESSIONS * CALLS, "{summary}");
}

#[test]
fn sessions_go_on_through_round_robin_and_a_node_killed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start();
    let mut nodes: Vec<ServerProcess> = ["node-a", "node-b", "node-c"]
        .iter()
        .map(|name| start_node(dir.path(), name, &redis))
        .collect();
    let addrs: Vec<_> = nodes.iter().map(ServerProcess::wait_listening).collect();
    let placeholders: Vec<(&str, std::net::SocketAddr)> = SAMPLE_NODES
        .iter()
        .copied()
        .zip(addrs.iter().copied())
        .collect();
    let proxy = Nginx::start(
        &dir.path().join("nginx"),
        "config/nginx-three-nodes.conf",
        &placeholders,
        SAMPLE_LISTEN,
    );

    let summary = run_sessions(&proxy, || {});
    println!("all nodes up: {summary}");
    assert_all_completed(&summary);
    assert_eq!(summary["retried"], 0, "{summary}");
    // Round-robin spread the requests: every node served a share of the calls of sessions
    // most of which it did not begin.
    for addr in &addrs {
        let calls = tools_calls(*addr);
        assert!(
            calls >= (SESSIONS * CALLS / 6) as u64,
            "{addr} served {calls} calls"
        );
    }

    let victim = &mut nodes[1];
    let summary = run_sessions(&proxy, || {
        victim.child.kill().expect("SIGKILL a node");
    });
    println!("a node killed mid-run: {summary}");
    assert_all_completed(&summary);
}

/// A request running on a node that dies is answered, on the node its stream is resumed on,
/// with an error saying the node was lost (-32031), never left unanswered; the session goes
/// on there.
#[tokio::test]
async fn a_request_on_a_node_that_died_is_answered_where_its_stream_resumes() {
    use futures_util::StreamExt;
    use reqwest::header::{ACCEPT, CONTENT_TYPE};
    use serde_json::json;
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start();
    let mut a = start_node(dir.path(), "node-a", &redis);
    let b = start_node(dir.path(), "node-b", &redis);
    let (a_addr, b_addr) = (a.wait_listening(), b.wait_listening());
    let http = reqwest::Client::new();
    let post = |addr: std::net::SocketAddr, session: Option<&str>, body: Value| {
        let mut post = http
            .post(format!("http://{addr}/mcp"))
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(session) = session {
            post = post
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-11-25");
        }
        post.send()
    };
    let init = post(
        a_addr,
        None,
        crate::support::request(
            json!(0),
            "initialize",
            crate::support::initialize_params("2025-11-25"),
        ),
    )
    .await
    .expect("initialize");
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .expect("id")
        .to_owned();
    let call =
        json!({"name": "sleep", "arguments": {"ms": 60000}, "_meta": {"progressToken": "p"}});
    let running = post(
        a_addr,
        Some(&session),
        crate::support::request(json!(9), "tools/call", call),
    )
    .await
    .expect("the call");
    let mut stream = sse_stream::SseStream::from_bytes_stream(running.bytes_stream());
    // A few progress events in (every 50 ms): the mirror, written a moment after each,
    // holds the first of them when the node dies.
    let mut progress_ids = Vec::new();
    while progress_ids.len() < 4 {
        let event = tokio::time::timeout(crate::support::READ_TIMEOUT, stream.next())
            .await
            .expect("an event in time")
            .expect("an event")
            .expect("well-formed");
        if event
            .data
            .as_deref()
            .is_some_and(|d| d.contains("notifications/progress"))
        {
            progress_ids.push(event.id.expect("an id"));
        }
    }
    let first_id = progress_ids[0].clone();
    a.child.kill().expect("SIGKILL node A");
    let _ = a.child.wait();
    drop(stream);
    let resumed = http
        .get(format!("http://{b_addr}/mcp"))
        .header(ACCEPT, "text/event-stream")
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .header("last-event-id", &first_id)
        .send()
        .await
        .expect("resumed on B");
    assert_eq!(
        resumed.status(),
        200,
        "resuming after {first_id}: keys {:?}",
        redis.keys("*")
    );
    let mut events = sse_stream::SseStream::from_bytes_stream(resumed.bytes_stream());
    let answer = loop {
        let event = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .expect("answered once node A is found dead")
            .unwrap_or_else(|| {
                panic!(
                    "the stream ended without an answer; node B's log:\n{}",
                    b.stderr_text()
                )
            })
            .expect("well-formed");
        let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
            continue;
        };
        let message: Value = serde_json::from_str(&data).expect("JSON");
        if message.get("id").is_some() {
            break message;
        }
    };
    assert_eq!(answer["id"], 9, "{answer}");
    assert_eq!(answer["error"]["code"], -32031, "{answer}");
    assert_eq!(answer["error"]["data"]["reason"], "nodeLost", "{answer}");
    let ping = post(
        b_addr,
        Some(&session),
        crate::support::request(json!(10), "ping", json!({})),
    )
    .await
    .expect("ping on B");
    assert_eq!(ping.status(), 200);
}

/// A WebSocket session resumes on another node after its node died: its request that was
/// running there is answered -32031 (the node was lost), and the session goes on.
#[tokio::test]
async fn a_websocket_session_resumes_on_another_node_after_its_node_died() {
    use crate::support::Client;
    use serde_json::json;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start();
    let mut a = start_node(dir.path(), "node-a", &redis);
    let b = start_node(dir.path(), "node-b", &redis);
    let (a_addr, b_addr) = (a.wait_listening(), b.wait_listening());
    let mut client = Client::connect_url(&format!("ws://{a_addr}/mcp")).await;
    let init = client
        .request_with_id(
            json!(0),
            "initialize",
            crate::support::initialize_params("2025-11-25"),
        )
        .await;
    let resume_id = init["result"]["_meta"]["mcp-ws/sessionId"]
        .as_str()
        .expect("a resume id")
        .to_owned();
    client
        .send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    client
        .send_json(crate::support::request(
            json!(9),
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 60000}}),
        ))
        .await;
    // The node writes what is in flight every half second.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    a.child.kill().expect("SIGKILL node A");
    let _ = a.child.wait();

    let mut request = format!("ws://{b_addr}/mcp")
        .into_client_request()
        .expect("request");
    request
        .headers_mut()
        .insert("Mcp-Session-Id", resume_id.parse().expect("header"));
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "mcp".parse().expect("header"));
    let (ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("the session resumes on node B");
    let mut resumed = Client::from_ws(ws);
    let lost = resumed.recv_response(&json!(9)).await;
    assert_eq!(lost["error"]["code"], -32031, "{lost}");
    assert_eq!(lost["error"]["data"]["reason"], "nodeLost", "{lost}");
    let echo = resumed.call_tool("echo", json!({"text": "on b"})).await;
    assert_eq!(crate::support::tool_text(&echo), "on b");
}
