//! Three `mcp-ws` processes (the real binary) sharing one real `redis-server`, behind a real
//! nginx running the repository's `config/nginx-three-nodes.conf` (round-robin, no affinity;
//! only its addresses replaced). The official Python SDK (tests/interop/any_node_client.py)
//! and the official TypeScript SDK (tests/interop/any_node_client.mjs) each run many
//! Streamable HTTP sessions through it at once, each request landing on whichever node nginx
//! picks: initialize, tools/list, a resource subscription, `echo` calls with a text unique to
//! the session and call and an idempotency key, DELETE.
//!
//! - With every node up: every session completes, no failure, no retry, no cross-talk, and
//!   each keyed call ran exactly once (the nodes' `mcp_idempotent_runs_total` add up to the
//!   calls).
//! - With one node SIGKILLed in the middle of the run: every session still completes, its
//!   next requests served by the other nodes from the session's record in Redis; a call that
//!   was on the dead node is retried by the client with its idempotency key (counted).
//! - With Redis SIGKILLed in the middle of the run and restarted (from its append-only file)
//!   a moment later: every session completes; what failed meanwhile failed with a clear,
//!   retryable answer (503, -32008) and was retried by the client; each keyed call ran
//!   exactly once.
//! - The same 100 sessions with the nodes on a three-master Redis Cluster.
//! - A tool asking the client (the conformance set's `test_elicitation`): the SDK's answer
//!   goes through nginx, usually to another node than the one running the tool, and reaches
//!   it through Redis; each result carries the name given for that session and call.

use crate::interop_py_sdk::ensure_python_env;
use crate::interop_ts_sdk::ensure_sdk_1;
use crate::support::interop::{interop_dir, KillOnDrop};
use crate::support::nginx::Nginx;
use crate::support::process::ServerProcess;
use crate::support::redis::{RedisCluster, RedisServer};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SAMPLE_NODES: [&str; 3] = ["127.0.0.1:8765", "127.0.0.1:8766", "127.0.0.1:8767"];
const SAMPLE_LISTEN: &str = "127.0.0.1:8080";
const SESSIONS: usize = 100;
const CALLS: usize = 20;

fn start_node(dir: &Path, name: &str, redis: &RedisServer) -> ServerProcess {
    start_node_with(dir, name, &redis.url(), "")
}

/// A node whose config file adds `extra` (TOML sections) to the shared ones.
fn start_node_with(dir: &Path, name: &str, redis_url: &str, extra: &str) -> ServerProcess {
    start_node_configured(dir, name, redis_url, "", extra)
}

/// A node whose config file adds `server` (keys) to its `[server]` section and `extra`
/// (TOML sections) to the shared ones.
fn start_node_configured(
    dir: &Path,
    name: &str,
    redis_url: &str,
    server: &str,
    extra: &str,
) -> ServerProcess {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nworkers = 1\ntrusted_proxies = [\"127.0.0.1\"]\n{server}\n\n\
             [redis]\nurl = \"{}\"\n\n{extra}",
            redis_url,
        ),
    )
    .expect("node config written");
    ServerProcess::spawn(
        &["--config", config.to_str().expect("utf-8 path")],
        &[("RUST_LOG", "warn,mcp_ws::server=info")],
    )
}

/// Node A (its configuration with `a_config` added) and node B on one fresh Redis, both
/// listening: the WebSocket resume tests' cluster. Dropped, it kills both nodes, then Redis.
struct TwoNodes {
    a: ServerProcess,
    b: ServerProcess,
    a_addr: SocketAddr,
    b_addr: SocketAddr,
    redis: RedisServer,
    _dir: tempfile::TempDir,
}

impl TwoNodes {
    fn start(a_config: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let redis = RedisServer::start();
        let a = start_node_with(dir.path(), "node-a", &redis.url(), a_config);
        let b = start_node(dir.path(), "node-b", &redis);
        let (a_addr, b_addr) = (a.wait_listening(), b.wait_listening());
        Self {
            a,
            b,
            a_addr,
            b_addr,
            redis,
            _dir: dir,
        }
    }
}

/// Three nodes on the Redis at `redis_url` (each with `extra` in its config) behind nginx.
fn three_nodes(
    dir: &Path,
    redis_url: &str,
    extra: &str,
) -> (Vec<ServerProcess>, Vec<SocketAddr>, Nginx) {
    let nodes: Vec<ServerProcess> = ["node-a", "node-b", "node-c"]
        .iter()
        .map(|name| start_node_with(dir, name, redis_url, extra))
        .collect();
    let addrs: Vec<_> = nodes.iter().map(ServerProcess::wait_listening).collect();
    let placeholders: Vec<(&str, SocketAddr)> = SAMPLE_NODES
        .iter()
        .copied()
        .zip(addrs.iter().copied())
        .collect();
    let proxy = Nginx::start(
        &dir.join("nginx"),
        "config/nginx-three-nodes.conf",
        &placeholders,
        SAMPLE_LISTEN,
    );
    (nodes, addrs, proxy)
}

/// Which official SDK runs the sessions.
#[derive(Clone, Copy)]
enum Sdk {
    Python,
    TypeScript,
}

/// Runs `sessions` sessions of `calls` calls of the `sdk` client (in `mode`: `echo` or, for
/// the Python one, `elicit`) through `proxy`; `on_ready` is called once half the sessions
/// are initialized. Returns its summary.
fn run_sessions(
    proxy: &Nginx,
    sdk: Sdk,
    mode: &str,
    sessions: usize,
    calls: usize,
    on_ready: impl FnOnce(),
) -> Value {
    run_sessions_as(proxy, sdk, mode, sessions, calls, None, on_ready)
}

/// [`run_sessions`], the client presenting `token` (a bearer API key) when given.
fn run_sessions_as(
    proxy: &Nginx,
    sdk: Sdk,
    mode: &str,
    sessions: usize,
    calls: usize,
    token: Option<&str>,
    on_ready: impl FnOnce(),
) -> Value {
    let mut command = match sdk {
        Sdk::Python => {
            let mut command = Command::new(ensure_python_env());
            command.arg(interop_dir().join("any_node_client.py"));
            command
        }
        Sdk::TypeScript => {
            ensure_sdk_1();
            let mut command = Command::new("node");
            command.arg(interop_dir().join("any_node_client.mjs"));
            command
        }
    };
    command
        .arg(proxy.http_url())
        .args([sessions.to_string(), calls.to_string()]);
    if let Sdk::Python = sdk {
        command.arg(mode);
    }
    if let Some(token) = token {
        command.env("MCP_TOKEN", token);
    }
    let mut client = KillOnDrop(
        command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the SDK client starts"),
    );
    let stdout = client.0.stdout.take().expect("piped stdout");
    // Read on a thread of its own, so that a client that hangs without a word (a proxy
    // that is not there) fails the test at the deadline: killed as `client` drops, its
    // stdout ends and the thread with it.
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut on_ready = Some(on_ready);
    let mut summary = None;
    loop {
        let line = match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => line.expect("a line"),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("the client took too long")
            }
        };
        if let Some(ready) = line.strip_prefix("ready ") {
            if ready.parse::<usize>().unwrap_or(0) >= sessions / 2 {
                if let Some(on_ready) = on_ready.take() {
                    on_ready();
                }
            }
        } else if line.starts_with('{') {
            summary = Some(serde_json::from_str(&line).expect("a JSON summary"));
        }
    }
    // Its stdout ended; the process may still be on its way out (or hung there).
    let status = loop {
        if let Some(status) = client.0.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the client closed its stdout but did not exit"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "client exit status {status}");
    summary.expect("the client printed its summary")
}

/// The sum of a node's `/metrics` samples whose line starts with `series` (read directly).
fn metric(addr: SocketAddr, series: &str) -> u64 {
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
        .filter(|line| line.starts_with(series))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|value| value as u64)
        .sum()
}

/// The `tools/call` requests a node answered.
fn tools_calls(addr: SocketAddr) -> u64 {
    metric(
        addr,
        "mcp_request_duration_seconds_count{method=\"tools/call\"}",
    )
}

/// The keyed calls the nodes ran (the first of each key), all nodes together.
fn keyed_runs(addrs: &[SocketAddr]) -> u64 {
    addrs
        .iter()
        .map(|addr| metric(*addr, "mcp_idempotent_runs_total"))
        .sum()
}

fn assert_all_completed(summary: &Value, sessions: usize, calls: usize) {
    let failures = summary["failures"].as_array().cloned().unwrap_or_default();
    assert!(
        failures.is_empty(),
        "{} sessions failed, the first: {:?}; {}",
        failures.len(),
        &failures[..failures.len().min(3)],
        summary["retried"]
    );
    assert_eq!(summary["crosstalk"], 0, "{summary}");
    assert_eq!(summary["sessions_ok"], sessions, "{summary}");
    assert_eq!(summary["calls_ok"], sessions * calls, "{summary}");
}

/// A run with every node and Redis up: everything completed at the first try (no step
/// retried, no session begun again), and each keyed call ran exactly once on the nodes.
fn assert_clean_run(summary: &Value, addrs: &[SocketAddr], sessions: usize, calls: usize) {
    assert_all_completed(summary, sessions, calls);
    assert_eq!(summary["retried"], 0, "{summary}");
    assert_eq!(summary["restarts"], 0, "{summary}");
    assert_eq!(
        keyed_runs(addrs),
        (sessions * calls) as u64,
        "each keyed call ran once"
    );
}

/// All nodes up, then one killed mid-run, with the `sdk` client.
fn round_robin_and_a_node_killed(sdk: Sdk) {
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start();
    let (mut nodes, addrs, proxy) = three_nodes(dir.path(), &redis.url(), "");

    let summary = run_sessions(&proxy, sdk, "echo", SESSIONS, CALLS, || {});
    println!("all nodes up: {summary}");
    assert_clean_run(&summary, &addrs, SESSIONS, CALLS);
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
    let summary = run_sessions(&proxy, sdk, "echo", SESSIONS, CALLS, || {
        victim.kill();
    });
    println!("a node killed mid-run: {summary}");
    assert_all_completed(&summary, SESSIONS, CALLS);
}

#[test]
fn sessions_go_on_through_round_robin_and_a_node_killed() {
    round_robin_and_a_node_killed(Sdk::Python);
}

#[test]
fn typescript_sdk_sessions_go_on_through_round_robin_and_a_node_killed() {
    round_robin_and_a_node_killed(Sdk::TypeScript);
}

#[test]
fn sessions_go_on_through_round_robin_on_a_redis_cluster() {
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisCluster::start();
    let (_nodes, addrs, proxy) = three_nodes(dir.path(), &redis.url(), "");
    let summary = run_sessions(&proxy, Sdk::Python, "echo", SESSIONS, CALLS, || {});
    println!("on a Redis Cluster: {summary}");
    assert_clean_run(&summary, &addrs, SESSIONS, CALLS);
    // The keyed calls' entries spread over the masters (each key on its own slot's).
    let records = redis.keys_per_master("mcp-ws:idem:*");
    assert!(
        records.iter().all(|keys| !keys.is_empty()),
        "idempotency entries on every master: {:?}",
        records.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

/// An API key the Redis-outage test's client presents (its SHA-256 is in the nodes' config):
/// idempotency keys are then scoped to the client's identity, so a key outlives a session
/// the SDK ended.
const RUNNER_KEY: &str = "outage-runner-key";
const RUNNER_KEY_SHA256: &str = "652eb77e3776f559d34bd2bfbb7874c6a0be54b04cbee5e5c298bac0d022190e";

#[test]
fn sessions_go_on_when_redis_is_killed_and_restarted_mid_run() {
    redis_killed_and_restarted_mid_run(Sdk::Python);
}

#[test]
fn typescript_sdk_sessions_go_on_when_redis_is_killed_and_restarted_mid_run() {
    redis_killed_and_restarted_mid_run(Sdk::TypeScript);
}

/// SESSIONS × CALLS keyed calls of `sdk` through round-robin while Redis (with its
/// append-only file) is SIGKILLed and restarted 1.5 s later, every request with an API key.
fn redis_killed_and_restarted_mid_run(sdk: Sdk) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut redis = RedisServer::start_persistent(&dir.path().join("redis"));
    let auth = format!("[[auth.api_keys]]\nname = \"runner\"\nsha256 = \"{RUNNER_KEY_SHA256}\"\n");
    let (nodes, addrs, proxy) = three_nodes(dir.path(), &redis.url(), &auth);
    let redis = &mut redis;
    let summary = run_sessions_as(
        &proxy,
        sdk,
        "echo",
        SESSIONS,
        CALLS,
        Some(RUNNER_KEY),
        || {
            redis.kill();
            std::thread::sleep(Duration::from_millis(1500));
            redis.restart();
        },
    );
    println!("Redis killed and restarted mid-run: {summary}");
    if summary["failures"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
    {
        for node in &nodes {
            let log = node.stderr_text();
            let lines: Vec<&str> = log.lines().collect();
            println!(
                "--- a node's log:\n{}",
                lines[lines.len().saturating_sub(25)..].join("\n")
            );
        }
    }
    assert_all_completed(&summary, SESSIONS, CALLS);
    // The outage was felt, and only as the server's clear, retryable refusals: 503 for a
    // session (or a new one) a node could not look up (the Python SDK then ends the session
    // and the client begins another; the TypeScript SDK's request fails and is sent again),
    // and -32008 for a keyed call; no request was left unanswered (a timeout) or failed
    // otherwise.
    let reasons = summary["retry_reasons"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert!(!reasons.is_empty(), "the outage was not felt: {summary}");
    for reason in reasons.keys() {
        assert!(
            ["503", "sessionEnded", "-32008"].contains(&reason.as_str()),
            "retried for {reason}: {summary}"
        );
    }
    let http_errors = summary["http_errors"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert!(
        http_errors.keys().all(|status| status == "503"),
        "{summary}"
    );
    assert_eq!(
        keyed_runs(&addrs),
        (SESSIONS * CALLS) as u64,
        "each keyed call ran once, none again after Redis came back"
    );
}

#[test]
fn an_elicitation_answer_reaches_the_node_running_the_tool_through_round_robin() {
    const ASKING_SESSIONS: usize = 30;
    const ASKS: usize = 3;
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start();
    let (_nodes, addrs, proxy) = three_nodes(
        dir.path(),
        &redis.url(),
        "[builtins]\nset = \"conformance\"\n",
    );
    let summary = run_sessions(&proxy, Sdk::Python, "elicit", ASKING_SESSIONS, ASKS, || {});
    println!("elicitation through round-robin: {summary}");
    assert_clean_run(&summary, &addrs, ASKING_SESSIONS, ASKS);
    // Answers that landed on another node than the tool's reached it through Redis.
    let relayed: u64 = addrs
        .iter()
        .map(|addr| metric(*addr, "mcp_bus_bridge_received_total"))
        .sum();
    assert!(relayed > 0, "no answer crossed between nodes");
}

/// A request running on a node that dies is answered, on the node its stream is resumed on,
/// with an error saying the node was lost (-32031), never left unanswered; the session goes
/// on there, and the request's retry under the same idempotency key runs there.
#[tokio::test]
async fn a_request_on_a_node_that_died_is_answered_where_its_stream_resumes() {
    use futures_util::StreamExt;
    use reqwest::header::{ACCEPT, CONTENT_TYPE};
    use serde_json::json;
    let mut nodes = TwoNodes::start("");
    let http = crate::support::http::client();
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
        nodes.a_addr,
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
    // A long call under one idempotency key; each attempt with its own progress token.
    let keyed_sleep = |token: &str| {
        json!({"name": "sleep", "arguments": {"ms": 60000},
            "_meta": {"progressToken": token, "idempotencyKey": "dead-run"}})
    };
    let running = post(
        nodes.a_addr,
        Some(&session),
        crate::support::request(json!(9), "tools/call", keyed_sleep("p")),
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
    nodes.a.kill();
    drop(stream);
    let resumed = http
        .get(format!("http://{}/mcp", nodes.b_addr))
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
        nodes.redis.keys("*")
    );
    let mut events = sse_stream::SseStream::from_bytes_stream(resumed.bytes_stream());
    let answer = loop {
        let event = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .expect("answered once node A is found dead")
            .unwrap_or_else(|| {
                panic!(
                    "the stream ended without an answer; node B's log:\n{}",
                    nodes.b.stderr_text()
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
        nodes.b_addr,
        Some(&session),
        crate::support::request(json!(10), "ping", json!({})),
    )
    .await
    .expect("ping on B");
    assert_eq!(ping.status(), 200);

    // Its retry with the same idempotency key runs on B: the dead node's claim is freed, not
    // waited out (it would hold the key for limits.max_request_timeout_ms). Its first
    // progress report shows it runs.
    let rerun = post(
        nodes.b_addr,
        Some(&session),
        crate::support::request(json!(11), "tools/call", keyed_sleep("p2")),
    )
    .await
    .expect("the retry");
    let mut events = sse_stream::SseStream::from_bytes_stream(rerun.bytes_stream());
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("the retry runs at once, node A being dead")
            .expect("an event")
            .expect("well-formed");
        // The stream's priming event (an id, no data) comes first.
        match event.data.as_deref() {
            Some("") | None => continue,
            Some(data) => {
                assert!(data.contains("notifications/progress"), "{data}");
                break;
            }
        }
    }
    assert_eq!(metric(nodes.b_addr, "mcp_dedup_orphans_total"), 1);
}

/// A WebSocket session resumes on another node after its node died: its request that was
/// running there is answered -32031 (the node was lost), and the session goes on.
#[tokio::test]
async fn a_websocket_session_resumes_on_another_node_after_its_node_died() {
    use serde_json::json;
    let mut nodes = TwoNodes::start("");
    let (_client, resume_id) = session_running(nodes.a_addr, &nodes.redis, 9, 60_000).await;
    nodes.a.kill();

    let mut resumed = resume_websocket(nodes.b_addr, &resume_id).await;
    let lost = resumed.recv_response(&json!(9)).await;
    assert_eq!(lost["error"]["code"], -32031, "{lost}");
    assert_eq!(lost["error"]["data"]["reason"], "nodeLost", "{lost}");
    let echo = resumed.call_tool("echo", json!({"text": "on b"})).await;
    assert_eq!(crate::support::tool_text(&echo), "on b");
}

/// A WebSocket session resumed on another node while its own node lives and keeps it parked:
/// that node hands it over (what runs there ends unanswered), and the request it ran is
/// answered once, -32031, where the session resumed, never also by the first node. Resumed
/// on the first node again while the second has its socket attached, the second lets that
/// socket go (closed 1000, as a reconnect on one node closes the older socket) and hands
/// the session back.
#[tokio::test]
async fn a_websocket_session_resumed_elsewhere_while_its_node_lives_is_handed_over() {
    let nodes = TwoNodes::start("");
    let (client, resume_id) = session_running(nodes.a_addr, &nodes.redis, 9, 1500).await;
    // The socket drops (no close): node A keeps the session for a reconnect.
    drop(client);
    let mut on_b = resume_websocket(nodes.b_addr, &resume_id).await;
    assert_eq!(lost_on_resume(&mut on_b).await, [9]);
    // Past the end of the sleep node A ran: its answer comes nowhere.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    on_b.expect_nothing_pending().await;

    start_sleep(&mut on_b, 20, 60_000).await;
    record_listing(&nodes.redis, &resume_id, &[20]).await;
    let mut on_a = try_resume(nodes.a_addr, &resume_id, None)
        .await
        .unwrap_or_else(|status| panic!("node A refused the resume: {status}"));
    assert_older_socket_closed(&mut on_b).await;
    assert_eq!(lost_on_resume(&mut on_a).await, [20]);
    let echo = on_a
        .call_tool("echo", serde_json::json!({"text": "back on a"}))
        .await;
    assert_eq!(crate::support::tool_text(&echo), "back on a");
}

/// A socket's session resumed elsewhere while the socket is still attached (half-open: its
/// client gone without a close, the node not yet aware) is handed over at once, not held
/// until the heartbeat finds the socket dead: the socket is closed 1000, and what ran on it
/// is answered -32031 where the session resumed. (The resume was refused, 503, until then.)
#[tokio::test]
async fn a_websocket_session_resumed_elsewhere_from_a_socket_still_attached_is_handed_over() {
    let nodes = TwoNodes::start("");
    let (mut old, resume_id) = session_running(nodes.a_addr, &nodes.redis, 9, 60_000).await;
    // `old` stays open and attached: node A sees a live socket.
    let mut resumed = try_resume(nodes.b_addr, &resume_id, None)
        .await
        .unwrap_or_else(|status| panic!("node B refused the resume: {status}"));
    assert_older_socket_closed(&mut old).await;
    assert_eq!(lost_on_resume(&mut resumed).await, [9]);
    let echo = resumed
        .call_tool("echo", serde_json::json!({"text": "on b"}))
        .await;
    assert_eq!(crate::support::tool_text(&echo), "on b");
}

/// A resume offering a version pin its session did not negotiate is refused (400) before
/// the session is touched, on another node as on its own: the socket attached on node A
/// keeps the session, and the call running there is answered on it. (The refused resume
/// took the session first: node B made a copy of it, node A closed its socket, 1000, and
/// what ran there was answered -32031 at the next resume; attack run 58, F1.)
#[tokio::test]
async fn a_resume_pinning_another_version_leaves_the_session_where_it_is() {
    use serde_json::json;
    let nodes = TwoNodes::start("");
    let (mut old, resume_id) = session_running(nodes.a_addr, &nodes.redis, 9, 1_500).await;
    for addr in [nodes.b_addr, nodes.a_addr] {
        let refused = try_resume_offering(addr, &resume_id, None, "mcp.version.2025-03-26").await;
        assert_eq!(refused.err(), Some(400), "the resume on {addr}");
    }
    let slept = old.recv_response(&json!(9)).await;
    assert!(slept.get("result").is_some(), "{slept}");
    let echo = old.call_tool("echo", json!({"text": "still on a"})).await;
    assert_eq!(crate::support::tool_text(&echo), "still on a");
    for addr in [nodes.a_addr, nodes.b_addr] {
        assert_eq!(metric(addr, "mcp_parked_sessions "), 0, "on {addr}");
    }
    assert_eq!(metric(nodes.b_addr, "mcp_sessions "), 0);
}

/// Redis restarts empty while a WebSocket session's socket is attached on one node: that
/// node writes the session's record again as soon as its beat finds Redis lost what it held,
/// so a resume on another node (the socket half-open) takes the session over, answered 503
/// meanwhile, never 404 ("session ended"), which lasted longer than the resume grace
/// (attack run 50c, F2).
#[tokio::test]
async fn a_websocket_session_resumes_elsewhere_after_redis_restarted_empty() {
    let mut nodes = TwoNodes::start("");
    let (mut old, resume_id) = session_running(nodes.a_addr, &nodes.redis, 9, 60_000).await;
    // Both nodes' beats have read Redis's epoch before it is lost.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    nodes.redis.kill();
    nodes.redis.restart();
    let mut resumed = resume_once_taken_up(nodes.b_addr, &resume_id).await;
    assert_older_socket_closed(&mut old).await;
    assert_eq!(lost_on_resume(&mut resumed).await, [9]);
}

/// A node that stalled (SIGSTOP) past its alive time has its WebSocket session taken up
/// elsewhere, where the request it ran is answered -32031; going on, it answers nothing more
/// on the socket it still has (it first checks that it still holds the session, and finds
/// it does not), and lets the socket go. (It sent the request's real answer on that socket
/// before it let go: two answers to one request; attack run 50c, F5.)
#[tokio::test]
async fn a_node_that_stalled_while_its_session_was_taken_up_does_not_answer_again() {
    let nodes = TwoNodes::start("");
    let (mut old, resume_id) = session_running(nodes.a_addr, &nodes.redis, 9, 1500).await;
    stall_while_taken_up(&nodes, &mut old, &resume_id).await;
}

/// A WebSocket session whose record is in Redis is answered while Redis is away, past the
/// time without a beat that makes its node ask Redis whether it still holds it: Redis out of
/// reach, the answers go on. (Once the node had gone 2 s without a beat, every answer waited
/// for a question Redis could not answer, asked again without end; review 52 #1.)
#[tokio::test]
async fn a_websocket_session_is_answered_while_redis_is_away() {
    use serde_json::json;
    let mut nodes = TwoNodes::start("");
    let (mut client, _resume_id) = resumable_session(nodes.a_addr).await;
    start_sleep(&mut client, 1, 10).await;
    let first = client.recv_response(&json!(1)).await;
    assert!(first.get("result").is_some(), "{first}");
    nodes.redis.kill();
    // Past `SUSPECT_AFTER` (2 s) without a beat reaching Redis.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    for id in 2..5 {
        start_sleep(&mut client, id, 10).await;
        let answer = client.recv_response(&json!(id)).await;
        assert!(answer.get("result").is_some(), "{answer}");
    }
}

/// As [`a_node_that_stalled_while_its_session_was_taken_up_does_not_answer_again`], for a
/// session its node hosts apart from its socket (resumed there once): no second answer
/// either (review 52 #2: such a session's answers were not held for the question).
#[tokio::test]
async fn a_resumed_session_on_a_node_that_stalled_does_not_answer_again() {
    use serde_json::json;
    let nodes = TwoNodes::start("");
    let (first, resume_id) = resumable_session(nodes.a_addr).await;
    drop(first);
    let mut old = resume_once_taken_up(nodes.a_addr, &resume_id).await;
    let ping = old.request("ping", json!({})).await;
    assert!(ping.get("result").is_some(), "{ping}");
    start_sleep(&mut old, 9, 1500).await;
    record_listing(&nodes.redis, &resume_id, &[9]).await;
    stall_while_taken_up(&nodes, &mut old, &resume_id).await;
}

/// A socket dropped while its node asks Redis whether it still holds its session (the node
/// stalled: no beat reached Redis for 2 s) leaves a parked session that asks again: its
/// answers reach the socket that resumes it. (The question's answer went to the socket's
/// actor, gone, and the parked session waited for it for good; review 53 #1.)
#[tokio::test]
async fn a_session_parked_while_its_node_asks_whether_it_holds_it_answers_on_resume() {
    use serde_json::json;
    let nodes = TwoNodes::start("");
    let (mut client, resume_id) = resumable_session(nodes.a_addr).await;
    nodes.redis.pause();
    // Past `SUSPECT_AFTER` without a beat reaching Redis: the next answer is asked about
    // first, and the question waits for Redis's timeout (500 ms).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    start_sleep(&mut client, 7, 10).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(client);
    tokio::time::sleep(Duration::from_millis(200)).await;
    nodes.redis.resume();
    let mut resumed = resume_once_taken_up(nodes.a_addr, &resume_id).await;
    let seven = resumed.recv_response(&json!(7)).await;
    assert!(seven.get("result").is_some(), "{seven}");
    start_sleep(&mut resumed, 8, 10).await;
    let eight = resumed.recv_response(&json!(8)).await;
    assert!(eight.get("result").is_some(), "{eight}");
}

/// Node A, running request 9 (a sleep of 1.5 s) of session `resume_id` on the socket `old`,
/// stalls (SIGSTOP) until it is dead to the others; B takes the session up (9 answered
/// -32031 there); A goes on past the end of the sleep: it lets `old` go (1000) without
/// answering 9 on it.
async fn stall_while_taken_up(nodes: &TwoNodes, old: &mut crate::support::Client, resume_id: &str) {
    use serde_json::json;
    nodes.a.pause();
    // Dead to the others (3 s without a beat) before the resume: a resume sooner is refused
    // and asks A to hand the session over, which, handled before A's answer as A goes on,
    // lets the socket go and would pass without the question asked.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let mut resumed = resume_once_taken_up(nodes.b_addr, resume_id).await;
    assert_eq!(lost_on_resume(&mut resumed).await, [9]);
    nodes.a.resume();
    assert_older_socket_closed(old).await;
    assert!(
        old.backlog.iter().all(|m| m.get("id") != Some(&json!(9))),
        "node A answered 9 too: {:?}",
        old.backlog
    );
}

/// A resume of session `resume_id` on `addr`, sent again while it is refused with 503 (the
/// node holding the session not yet found dead, or Redis not yet holding its record again);
/// anything else fails the test.
async fn resume_once_taken_up(addr: SocketAddr, resume_id: &str) -> crate::support::Client {
    let deadline = Instant::now() + crate::support::READ_TIMEOUT;
    loop {
        match try_resume(addr, resume_id, None).await {
            Ok(resumed) => return resumed,
            Err(503) => {}
            Err(status) => panic!("the resume elsewhere: {status}"),
        }
        assert!(Instant::now() < deadline, "never resumed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The older socket of a session resumed elsewhere: closed 1000 with the reason a reconnect
/// gives.
async fn assert_older_socket_closed(old: &mut crate::support::Client) {
    let close = old
        .recv_close()
        .await
        .expect("the older socket gets a close frame");
    assert_eq!(u16::from(close.code), 1000, "{close:?}");
    assert_eq!(
        close.reason.as_str(),
        "MCP session reconnected on another connection"
    );
}

/// What a WebSocket session's record lists as in flight follows its requests within 20 ms
/// of their start and their answer, not a half-second timer: where the session resumes after
/// its node died, a request sent 200 ms before the death is answered -32031, and one answered
/// 200 ms before is not answered again. (With the record looked at every half second, as it
/// once was, both failed.)
#[tokio::test]
async fn a_websocket_session_resumed_after_its_node_died_gets_one_answer_per_request() {
    use serde_json::json;
    let mut nodes = TwoNodes::start("");
    let (mut client, resume_id) = resumable_session(nodes.a_addr).await;
    start_sleep(&mut client, 9, 60_000).await;
    start_sleep(&mut client, 10, 600).await;
    let answered = client.recv_response(&json!(10)).await;
    assert!(answered.get("result").is_some(), "{answered}");
    start_sleep(&mut client, 12, 60_000).await;
    // A moment: far more than the 20 ms after which a request is recorded; a timer of half
    // a second, started with the socket, would next fire after it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    nodes.a.kill();

    let mut resumed = resume_websocket(nodes.b_addr, &resume_id).await;
    // The requests running on node A, each answered once; not the one answered there.
    assert_eq!(lost_on_resume(&mut resumed).await, [9, 12]);
}

/// The ids a WebSocket session's record lists are kept as their client wrote them: where the
/// session resumes after its node died, each of two integers beyond 64 bits that differ in
/// their last digit, and an id beyond a float's range (`1e400`), gets its own -32031 under
/// its own spelling. (Kept as JSON values, the two integers became one float, answered twice
/// under an id neither client request had, and `1e400` was dropped: never answered.)
#[tokio::test]
async fn a_websocket_sessions_record_keeps_its_ids_as_written() {
    let mut nodes = TwoNodes::start("");
    let (mut client, resume_id) = resumable_session(nodes.a_addr).await;
    let ids = ["18446744073709551617", "18446744073709551618", "1e400"];
    for id in ids {
        client
            .send_text(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":60000}}}}}}"#
            ))
            .await;
    }
    // Listed as written, in any order.
    record_where(
        &nodes.redis,
        &resume_id,
        "listing the ids as written",
        |record| {
            let Some((_, listed)) = record.split_once(r#""in_flight":["#) else {
                return false;
            };
            let mut listed: Vec<&str> = listed.split(']').next().unwrap_or("").split(',').collect();
            listed.sort_unstable();
            listed == ids
        },
    )
    .await;
    nodes.a.kill();

    let mut resumed = resume_websocket(nodes.b_addr, &resume_id).await;
    resumed
        .send_text(r#"{"jsonrpc":"2.0","id":"ping after resume","method":"ping"}"#)
        .await;
    let mut lost = Vec::new();
    loop {
        let text = resumed.recv_text().await;
        if text.contains(r#""id":"ping after resume""#) {
            break;
        }
        assert!(text.contains("-32031"), "{text}");
        lost.push(text);
    }
    assert_eq!(lost.len(), ids.len(), "{lost:?}");
    for id in ids {
        let spelled = format!(r#""id":{id},"#);
        assert!(
            lost.iter().any(|text| text.contains(&spelled)),
            "no -32031 for {id}: {lost:?}"
        );
    }
}

/// A keyed call answered on a node that then died is not run again when its client retries
/// it on another node: its answer was stored in Redis before it was sent, and the retry gets
/// it (`mcp_dedup_hits_total`), with nothing run there. (One still running on the dead node
/// is run again: `a_request_on_a_node_that_died_is_answered_where_its_stream_resumes`.)
#[tokio::test]
async fn a_keyed_call_answered_before_its_node_died_is_not_run_again_on_its_retry() {
    use serde_json::json;
    let mut nodes = TwoNodes::start("");
    let (mut client, resume_id) = resumable_session(nodes.a_addr).await;
    let keyed_echo = |id: Value| {
        let params = json!({"name": "echo", "arguments": {"text": "charge 10"},
            "_meta": {"idempotencyKey": "payment-7"}});
        crate::support::request(id, "tools/call", params)
    };
    client.send_json(keyed_echo(json!(1))).await;
    let first = client.recv_response(&json!(1)).await;
    assert_eq!(crate::support::tool_text(&first), "charge 10");
    assert_eq!(metric(nodes.a_addr, "mcp_idempotent_runs_total"), 1);
    nodes.a.kill();

    let mut resumed = resume_websocket_awaiting(nodes.b_addr, &resume_id, Some("[]")).await;
    resumed.send_json(keyed_echo(json!("retry-1"))).await;
    let retry = resumed.recv_response(&json!("retry-1")).await;
    assert_eq!(
        retry["result"], first["result"],
        "the stored answer: {retry}"
    );
    assert_eq!(
        metric(nodes.b_addr, "mcp_idempotent_runs_total"),
        0,
        "ran on node b"
    );
    assert_eq!(metric(nodes.b_addr, "mcp_dedup_hits_total"), 1);
}

/// The client's word closes the record's 20 ms window, both ways. Node A dies with request
/// 9 in its record and request 10 sent a moment before, too young to be listed. The test
/// puts back the record that lists 9 alone after A's death, so that the record cannot name
/// 10 however the machine's timing fell. A client resuming on node B with
/// `Mcp-Awaiting-Ids: [9, 10]` gets one -32031 `nodeLost` for each. Without the header it
/// would get none for 10 and wait forever.
#[tokio::test]
async fn a_request_sent_just_before_its_node_died_is_answered_when_its_client_awaits_it() {
    let mut nodes = TwoNodes::start("");
    let (mut client, resume_id) = resumable_session(nodes.a_addr).await;
    start_sleep(&mut client, 9, 60_000).await;
    let listed = record_listing(&nodes.redis, &resume_id, &[9]).await;
    start_sleep(&mut client, 10, 60_000).await;
    nodes.a.kill();
    put_back(&nodes.redis, &listed);

    let mut resumed = resume_websocket_awaiting(nodes.b_addr, &resume_id, Some("[9, 10]")).await;
    assert_eq!(lost_on_resume(&mut resumed).await, [9, 10]);
}

/// The other half of the window: a request answered on the socket within 20 ms of its
/// node's death is still listed in the record, so without the client's word the node that
/// takes the session up answers it a second time. The test puts back the record node A
/// wrote while request 10 ran, after its answer and A's death: the state a death within
/// those 20 ms leaves, made certain. Session one resumes on node B without the header and
/// gets the second answer for 10 (the gap); session two says it awaits only 9 and gets
/// exactly that.
#[tokio::test]
async fn a_request_answered_just_before_its_node_died_is_not_answered_again_when_its_client_says_so(
) {
    let mut nodes = TwoNodes::start("");
    let mut sessions = Vec::new();
    for _ in 0..2 {
        let (mut client, resume_id) = resumable_session(nodes.a_addr).await;
        start_sleep(&mut client, 9, 60_000).await;
        start_sleep(&mut client, 10, 400).await;
        let listed = record_listing(&nodes.redis, &resume_id, &[9, 10]).await;
        let answered = client.recv_response(&serde_json::json!(10)).await;
        assert!(answered.get("result").is_some(), "{answered}");
        sessions.push((client, resume_id, listed));
    }
    nodes.a.kill();
    for (_, _, listed) in &sessions {
        put_back(&nodes.redis, listed);
    }

    let mut unsaid = resume_websocket_awaiting(nodes.b_addr, &sessions[0].1, None).await;
    assert_eq!(lost_on_resume(&mut unsaid).await, [9, 10]);
    let mut said = resume_websocket_awaiting(nodes.b_addr, &sessions[1].1, Some("[9]")).await;
    assert_eq!(lost_on_resume(&mut said).await, [9]);
}

/// The write of a WebSocket session's record after a change fails (Redis is away): once
/// Redis is back, the node writes the record again by itself, with no frame from the
/// client. (The failed write was not made again until the session's next change or a
/// quarter of the record's time to live, and a node taking the session up meanwhile took
/// it up as it was before, here with its log level unset.)
#[tokio::test]
async fn a_websocket_sessions_record_whose_write_failed_is_written_again_once_redis_is_back() {
    use serde_json::json;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut redis = RedisServer::start_persistent(&dir.path().join("redis"));
    let node = start_node(dir.path(), "node", &redis);
    let addr = node.wait_listening();
    let (mut client, resume_id) = resumable_session(addr).await;
    let level_of = |text: &str| -> String {
        let record: Value = serde_json::from_str(text).expect("a JSON record");
        record["log_level"].as_str().unwrap_or_default().to_owned()
    };
    let (_, before) = record_where(&redis, &resume_id, "written", |_| true).await;
    assert_ne!(level_of(&before), "error");
    redis.kill();
    let set = json!({"level": "error"});
    client
        .send_json(crate::support::request(json!(1), "logging/setLevel", set))
        .await;
    let answer = client.recv_response(&json!(1)).await;
    assert_eq!(answer["result"], json!({}), "{answer}");
    // The write of the change has failed by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Back from its append-only file, with the record as it was; the client sends nothing.
    redis.restart();
    record_where(&redis, &resume_id, "its log level set", |text| {
        level_of(text) == "error"
    })
    .await;
}

/// Waits until the record of session `resume_id` in Redis lists exactly the requests `ids`
/// as in flight; its key and text.
async fn record_listing(redis: &RedisServer, resume_id: &str, ids: &[i64]) -> (String, String) {
    record_where(redis, resume_id, &format!("listing {ids:?}"), |text| {
        let record: Value = serde_json::from_str(text).expect("a JSON record");
        let mut listed: Vec<i64> = record["in_flight"]
            .as_array()
            .map(|ids| ids.iter().filter_map(Value::as_i64).collect())
            .unwrap_or_default();
        listed.sort_unstable();
        listed == ids
    })
    .await
}

/// Waits until the record of session `resume_id` in Redis satisfies `holds` (what it waits
/// for is `what`); its key and text.
async fn record_where(
    redis: &RedisServer,
    resume_id: &str,
    what: &str,
    holds: impl Fn(&str) -> bool,
) -> (String, String) {
    let mut connection = redis.connection().expect("redis answers");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let key = redis
            .keys("*session:*")
            .into_iter()
            .find(|key| key.contains(resume_id));
        if let Some(key) = key {
            let text: Option<String> = redis::cmd("GET")
                .arg(&key)
                .query(&mut connection)
                .expect("GET");
            if let Some(text) = text.filter(|text| holds(text)) {
                return (key, text);
            }
        }
        assert!(Instant::now() < deadline, "the record never came to {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Writes a record [`record_listing`] returned (its key and text) back into Redis: the
/// state of the record a node leaves when it dies before its next write.
fn put_back(redis: &RedisServer, (key, record): &(String, String)) {
    let mut connection = redis.connection().expect("redis answers");
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(record)
        .arg("PX")
        .arg(600_000)
        .query(&mut connection)
        .expect("SET");
}

/// A WebSocket connection to `addr` resuming the session `resume_id`.
async fn resume_websocket(addr: SocketAddr, resume_id: &str) -> crate::support::Client {
    resume_websocket_awaiting(addr, resume_id, None).await
}

/// A WebSocket connection to `addr` resuming the session `resume_id`, saying which request
/// ids it awaits (`Mcp-Awaiting-Ids`, a JSON array) if `awaiting` is given.
async fn resume_websocket_awaiting(
    addr: SocketAddr,
    resume_id: &str,
    awaiting: Option<&str>,
) -> crate::support::Client {
    // As a client does: a 503 (the node holding the session, just killed, still counts as
    // alive until its heartbeat ends) is retried after its `Retry-After` (1 s).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match try_resume(addr, resume_id, awaiting).await {
            Ok(client) => return client,
            Err(503) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(status) => panic!("the resume was refused: {status}"),
        }
    }
}

/// The same resume, or the HTTP status that refused it.
async fn try_resume(
    addr: SocketAddr,
    resume_id: &str,
    awaiting: Option<&str>,
) -> Result<crate::support::Client, u16> {
    try_resume_offering(addr, resume_id, awaiting, "mcp").await
}

/// [`try_resume`], offering the subprotocols `protocols` (a `Sec-WebSocket-Protocol` value).
async fn try_resume_offering(
    addr: SocketAddr,
    resume_id: &str,
    awaiting: Option<&str>,
    protocols: &str,
) -> Result<crate::support::Client, u16> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = format!("ws://{addr}/mcp")
        .into_client_request()
        .expect("request");
    let headers = request.headers_mut();
    headers.insert("Mcp-Session-Id", resume_id.parse().expect("header"));
    if let Some(awaiting) = awaiting {
        headers.insert("Mcp-Awaiting-Ids", awaiting.parse().expect("header"));
    }
    headers.insert("Sec-WebSocket-Protocol", protocols.parse().expect("header"));
    match tokio_tungstenite::connect_async(request).await {
        Ok((ws, _)) => Ok(crate::support::Client::from_ws(ws)),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(other) => panic!("unexpected connect error: {other}"),
    }
}

/// An idle WebSocket session's record is written again before its time to live ends, so a
/// node can still take the session up after hours of quiet; the record of a session its
/// client closed is deleted.
#[tokio::test]
async fn an_idle_websocket_sessions_record_stays_in_redis_until_the_session_ends() {
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start();
    // The record's time to live: the larger of http_idle_timeout_ms and twice the grace.
    let node = start_node_with(
        dir.path(),
        "node",
        &redis.url(),
        "[sessions]\nhttp_idle_timeout_ms = 2000\nresume_grace_ms = 500\n\n\
         [heartbeat]\ninterval_ms = 100\nclient_timeout_ms = 60000\n",
    );
    let addr = node.wait_listening();
    let (client, resume_id) = resumable_session(addr).await;
    let record_key = |keys: Vec<String>| keys.into_iter().find(|key| key.contains(&resume_id));
    // The record is written a Redis round trip after initialize.
    let deadline = Instant::now() + Duration::from_secs(10);
    while record_key(redis.keys("*session:*")).is_none() {
        assert!(Instant::now() < deadline, "no record for the session");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Twice and a half the time to live without a word from the client (the heartbeat's
    // pings go unanswered: its timeout is set far off).
    let quiet = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < quiet {
        assert!(
            record_key(redis.keys("*session:*")).is_some(),
            "the idle session's record expired: {:?}",
            redis.keys("*")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    client.hang_up().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while record_key(redis.keys("*session:*")).is_some() {
        assert!(
            Instant::now() < deadline,
            "the ended session's record stays"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A WebSocket session taken up by node B after node A died keeps its record there: when B
/// dies too, node C answers -32031 the request that was running on B, and not again the one
/// B already answered for A.
#[tokio::test]
async fn a_websocket_session_survives_a_second_node_death() {
    use serde_json::json;
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start();
    let mut a = start_node(dir.path(), "node-a", &redis);
    let mut b = start_node(dir.path(), "node-b", &redis);
    let c = start_node(dir.path(), "node-c", &redis);
    let (a_addr, b_addr, c_addr) = (a.wait_listening(), b.wait_listening(), c.wait_listening());
    let (_client, resume_id) = session_running(a_addr, &redis, 9, 60_000).await;
    a.kill();

    let mut on_b = resume_websocket(b_addr, &resume_id).await;
    let lost = on_b.recv_response(&json!(9)).await;
    assert_eq!(lost["error"]["code"], -32031, "{lost}");
    start_sleep(&mut on_b, 20, 60_000).await;
    record_listing(&redis, &resume_id, &[20]).await;
    b.kill();

    let mut on_c = resume_websocket(c_addr, &resume_id).await;
    assert_eq!(lost_on_resume(&mut on_c).await, [20]);
}

/// Two resumes of one WebSocket session, on two other nodes at the same moment after its
/// node died (two reconnects of a client, or two clients with its id): one node takes it up
/// and answers -32031 what ran on the dead node; the other refuses (503), or, having read
/// the record after the first claimed it, has the session handed over (the newer
/// connection wins): never two copies, and that request answered once. (Both took it up
/// before the record was claimed in one step with its read: two copies, each answering
/// -32031.)
#[tokio::test]
async fn two_resumes_at_once_on_two_other_nodes_take_the_session_up_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start();
    let mut a = start_node(dir.path(), "node-a", &redis);
    let b = start_node(dir.path(), "node-b", &redis);
    let c = start_node(dir.path(), "node-c", &redis);
    let (a_addr, b_addr, c_addr) = (a.wait_listening(), b.wait_listening(), c.wait_listening());
    let (_client, resume_id) = session_running(a_addr, &redis, 9, 60_000).await;
    a.kill();
    // Node A's heartbeat ends (within 3 s): from then on, both resumes find it dead.
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis.keys("*node:*").len() > 2 {
        assert!(Instant::now() < deadline, "node A's heartbeat never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let (on_b, on_c) = tokio::join!(
        try_resume(b_addr, &resume_id, None),
        try_resume(c_addr, &resume_id, None)
    );
    let (mut resumed, mut lost) = match (on_b, on_c) {
        (Ok(client), Err(status)) | (Err(status), Ok(client)) => {
            assert_eq!(status, 503, "the other node's refusal");
            (client, Vec::new())
        }
        (Ok(first), Ok(second)) => one_holder_after_a_hand_over(first, second).await,
        (Err(b), Err(c)) => panic!("neither node took the session up: {b}, {c}"),
    };
    lost.extend(lost_on_resume(&mut resumed).await);
    lost.sort_unstable();
    assert_eq!(lost, [9], "what ran on the dead node, answered once");
    resumed.expect_nothing_pending().await;
    let echo = resumed
        .call_tool("echo", serde_json::json!({"text": "once"}))
        .await;
    assert_eq!(crate::support::tool_text(&echo), "once");
}

/// Both resumes upgraded: the later one read the record once the earlier had claimed it,
/// and, as any reconnect elsewhere, had the session handed over (the newer connection
/// wins). Still one holder at a time: the earlier socket is closed (1000), with what it was
/// sent before; returns the socket that holds the session, and the ids the closed one was
/// answered -32031.
async fn one_holder_after_a_hand_over(
    first: crate::support::Client,
    second: crate::support::Client,
) -> (crate::support::Client, Vec<i64>) {
    let mut lost = Vec::new();
    let mut open = Vec::new();
    for mut client in [first, second] {
        match tokio::time::timeout(Duration::from_secs(3), client.recv_close()).await {
            Ok(frame) => {
                let frame = frame.expect("a close frame");
                assert_eq!(u16::from(frame.code), 1000, "{frame:?}");
                for message in client.backlog.drain(..) {
                    assert_eq!(message["error"]["code"], -32031, "{message}");
                    lost.push(message["id"].as_i64().expect("a numeric id"));
                }
            }
            // Still open: what it read meanwhile stays in its backlog.
            Err(_) => open.push(client),
        }
    }
    assert_eq!(open.len(), 1, "one socket holds the session");
    (open.remove(0), lost)
}

/// A WebSocket session parked on its node (its socket dropped) keeps its record current
/// there, and a request answered while parked stays listed, its answer waiting for the
/// client: when that node dies before the client is back, the node the client resumes on
/// answers -32031 both the request still running and the one whose answer died with it.
#[tokio::test]
async fn a_parked_websocket_sessions_kept_answers_are_not_lost_with_its_node() {
    let mut nodes = TwoNodes::start("");
    let (mut client, resume_id) = resumable_session(nodes.a_addr).await;
    start_sleep(&mut client, 9, 600).await;
    start_sleep(&mut client, 12, 60_000).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The connection drops without a close frame: the session is parked on A.
    drop(client);
    // Request 9 is answered while parked (its answer kept for the reconnect).
    tokio::time::sleep(Duration::from_millis(1000)).await;
    nodes.a.kill();

    let mut resumed = resume_websocket(nodes.b_addr, &resume_id).await;
    assert_eq!(lost_on_resume(&mut resumed).await, [9, 12]);
}

/// A WebSocket connection to `addr` with a new, initialized session; the session's resume
/// id.
async fn resumable_session(addr: SocketAddr) -> (crate::support::Client, String) {
    crate::support::Client::resumable_at(&format!("ws://{addr}/mcp")).await
}

/// A WebSocket connection to `addr` with a new session running `sleep` for `ms` under the
/// id `id`, once the session's record in `redis` lists it; the session's resume id.
async fn session_running(
    addr: SocketAddr,
    redis: &RedisServer,
    id: i64,
    ms: u64,
) -> (crate::support::Client, String) {
    let (mut client, resume_id) = resumable_session(addr).await;
    start_sleep(&mut client, id, ms).await;
    record_listing(redis, &resume_id, &[id]).await;
    (client, resume_id)
}

/// Sends `tools/call` `sleep` for `ms` with the id `id`, without waiting for its answer.
async fn start_sleep(client: &mut crate::support::Client, id: i64, ms: u64) {
    use serde_json::json;
    let params = json!({"name": "sleep", "arguments": {"ms": ms}});
    client
        .send_json(crate::support::request(json!(id), "tools/call", params))
        .await;
}

/// On a connection that just resumed a session: the ids (sorted) of what the node sent
/// before answering a `ping`, which is what the session's record listed; each must be a
/// -32031 `nodeLost`.
async fn lost_on_resume(client: &mut crate::support::Client) -> Vec<i64> {
    use serde_json::json;
    let ping = json!("ping after resume");
    client
        .send_json(crate::support::request(ping.clone(), "ping", json!({})))
        .await;
    let mut lost = Vec::new();
    loop {
        let message = client.recv().await;
        if message["id"] == ping && message.get("method").is_none() {
            break;
        }
        assert_eq!(message["error"]["code"], -32031, "{message}");
        assert_eq!(message["error"]["data"]["reason"], "nodeLost", "{message}");
        lost.push(message["id"].as_i64().expect("a numeric id"));
    }
    lost.sort_unstable();
    lost
}

/// A client that closes its WebSocket session (1000) while its node shuts down has ended
/// it: its record is deleted rather than kept for a resume elsewhere, as the record of a
/// session the shutdown ended is (the test above), and a resume on another node is refused
/// (404).
#[tokio::test]
async fn a_websocket_session_its_client_closes_during_a_shutdown_ends_for_good() {
    closed_by_its_client_during_a_shutdown(false).await;
}

/// The same for a session on its second connection (hosted apart from the socket, which
/// relays to it).
#[tokio::test]
async fn a_resumed_websocket_session_its_client_closes_during_a_shutdown_ends_for_good() {
    closed_by_its_client_during_a_shutdown(true).await;
}

async fn closed_by_its_client_during_a_shutdown(resumed: bool) {
    let mut nodes = TwoNodes::start("[shutdown]\ngrace_ms = 5000\n");
    let (mut client, resume_id) = resumable_session(nodes.a_addr).await;
    // A request in flight holds the session open through the shutdown's grace.
    start_sleep(&mut client, 9, 60_000).await;
    let (key, _) = record_listing(&nodes.redis, &resume_id, &[9]).await;
    if resumed {
        // Dropped without a close: parked, then resumed on the same node.
        drop(client);
        client = resume_websocket(nodes.a_addr, &resume_id).await;
    }
    nodes.a.terminate();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !nodes.a.stderr_text().contains("shutting down") {
        assert!(Instant::now() < deadline, "node A never began its shutdown");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    client.hang_up().await;

    let deadline = Instant::now() + Duration::from_secs(10);
    while nodes.redis.keys("*session:*").contains(&key) {
        assert!(
            Instant::now() < deadline,
            "the record of a session its client closed is kept; node A's log:\n{}",
            nodes.a.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (exit, _) = nodes.a.wait_exit();
    assert!(exit.success(), "node A exits 0: {exit:?}");
    assert_eq!(
        try_resume(nodes.b_addr, &resume_id, None).await.err(),
        Some(404)
    );
}

/// A WebSocket session outlives its node's graceful shutdown (sessions in Redis): its
/// requests are answered before the 1001 close, and its client resumes it on another node
/// with its id, with nothing answered twice there.
#[tokio::test]
async fn a_websocket_session_goes_on_elsewhere_after_its_node_shuts_down() {
    use serde_json::json;
    let mut nodes = TwoNodes::start("[shutdown]\ngrace_ms = 300\n");
    let (mut client, resume_id) = resumable_session(nodes.a_addr).await;
    start_sleep(&mut client, 9, 60_000).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    nodes.a.terminate();
    // The shutdown's answer, then the close.
    let stopped = client.recv_response(&json!(9)).await;
    assert!(stopped.get("error").is_some(), "{stopped}");
    let close = client.recv_close().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1001, "{close:?}");
    let (exit, _) = nodes.a.wait_exit();
    assert!(exit.success(), "node A exits 0: {exit:?}");

    let mut resumed = resume_websocket(nodes.b_addr, &resume_id).await;
    // Answered on A before the close: nothing is answered again.
    assert_eq!(lost_on_resume(&mut resumed).await, [] as [i64; 0]);
    let echo = resumed.call_tool("echo", json!({"text": "on b"})).await;
    assert_eq!(crate::support::tool_text(&echo), "on b");
}

/// A node that cannot host another session (at `server.max_sessions`) refuses the resume of
/// a session a dead node left without claiming its record: a claim it then failed to give
/// back (Redis lost for a moment) would have every other node refuse the session until the
/// record's time to live ended. Once a session there ends, the resume goes through.
#[tokio::test]
async fn a_node_at_its_session_cap_refuses_a_resume_without_claiming_its_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start();
    let mut first = start_node(dir.path(), "node-a", &redis);
    let full = start_node_configured(dir.path(), "node-b", &redis.url(), "max_sessions = 1", "");
    let (first_addr, full_addr) = (first.wait_listening(), full.wait_listening());
    let (_client, resume_id) = session_running(first_addr, &redis, 9, 60_000).await;
    let (holder, _) = resumable_session(full_addr).await;
    first.kill();

    let writes = RedisMonitor::start(&redis);
    // 503 while the dead node still counts as alive, then for the cap.
    let rejected = "mcp_rejected_total{reason=\"session_cap\"}";
    let deadline = Instant::now() + Duration::from_secs(15);
    while metric(full_addr, rejected) == 0 {
        assert!(Instant::now() < deadline, "never refused for the cap");
        match try_resume(full_addr, &resume_id, None).await {
            Err(503) => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(status) => panic!("refused with {status}"),
            Ok(_) => panic!("resumed beyond max_sessions"),
        }
    }
    let written = writes.stop_with_writes_of(&resume_id);
    assert!(written.is_empty(), "the record was written: {written:?}");

    holder.hang_up().await;
    let mut resumed = resume_websocket(full_addr, &resume_id).await;
    assert_eq!(lost_on_resume(&mut resumed).await, [9]);
}

/// Redis's `MONITOR` on a connection of its own: every command the server runs, until
/// [`stop`](Self::stop)ped.
struct RedisMonitor {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

/// A test that fails before [`RedisMonitor::stop`] still ends the monitor's thread.
impl Drop for RedisMonitor {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl RedisMonitor {
    fn start(redis: &RedisServer) -> Self {
        use std::sync::atomic::Ordering;
        let mut connection = redis.connection().expect("redis answers");
        let _: () = redis::cmd("MONITOR")
            .query(&mut connection)
            .expect("MONITOR");
        connection
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("read timeout");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut lines = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                match connection.recv_response() {
                    Ok(redis::Value::SimpleString(line)) => lines.push(line),
                    Ok(other) => panic!("MONITOR sent {other:?}"),
                    Err(error) if error.is_timeout() => {}
                    Err(error) => panic!("MONITOR failed: {error}"),
                }
            }
            lines
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// The commands seen since the start that changed the record of session `resume_id`,
    /// by a script or not (a read refreshing its time to live does not change it).
    fn stop_with_writes_of(self, resume_id: &str) -> Vec<String> {
        self.stop()
            .into_iter()
            .filter(|line| {
                line.contains(resume_id)
                    && ["\"SET\"", "\"PSETEX\"", "\"DEL\""]
                        .iter()
                        .any(|command| line.contains(command))
            })
            .collect()
    }

    /// The commands seen since the start.
    fn stop(mut self) -> Vec<String> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let thread = self.thread.take().expect("stopped once");
        thread.join().expect("the monitor's thread")
    }
}

/// A batch entry answered while its batch waits for another entry is listed in the
/// session's record as owed: its node dying, the next node answers it -32031 `nodeLost`
/// with the entry still running (the array was never sent). (Listed as neither, its
/// client waited for it for ever.)
#[tokio::test]
async fn a_batch_entry_answered_on_a_node_that_died_before_its_batch_is_answered_there() {
    use serde_json::json;
    let mut nodes = TwoNodes::start("");
    let (mut client, resume_id) = crate::support::Client::resumable_at_version(
        &format!("ws://{}/mcp", nodes.a_addr),
        "2025-03-26",
    )
    .await;
    client
        .send_json(json!([
            {"jsonrpc":"2.0","id":9,"method":"tools/call",
             "params":{"name":"sleep","arguments":{"ms":60_000}}},
            {"jsonrpc":"2.0","id":10,"method":"ping"}
        ]))
        .await;
    record_listing(&nodes.redis, &resume_id, &[9, 10]).await;
    nodes.a.kill();

    let mut resumed = resume_websocket(nodes.b_addr, &resume_id).await;
    assert_eq!(lost_on_resume(&mut resumed).await, [9, 10]);
}

/// A batch answered at once costs its session's record no write, as a request answered at
/// once does: its entries are listed only while one of them has run long enough to be.
#[tokio::test]
async fn a_batch_answered_at_once_writes_no_record() {
    use serde_json::json;
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start();
    let node = start_node(dir.path(), "node-a", &redis);
    let addr = node.wait_listening();
    let (mut client, resume_id) =
        crate::support::Client::resumable_at_version(&format!("ws://{addr}/mcp"), "2025-03-26")
            .await;
    record_listing(&redis, &resume_id, &[]).await;
    // Past the spacing of writes: a change now would be written at once.
    tokio::time::sleep(Duration::from_millis(100)).await;

    let writes = RedisMonitor::start(&redis);
    for n in 0..5 {
        client
            .send_json(json!([
                {"jsonrpc":"2.0","id":format!("p{n}"),"method":"ping"},
                {"jsonrpc":"2.0","id":format!("e{n}"),"method":"tools/call",
                 "params":{"name":"echo","arguments":{"text":"quick"}}}
            ]))
            .await;
        let answer = client.recv_text().await;
        let answer: Value = serde_json::from_str(&answer).expect("JSON");
        assert_eq!(answer.as_array().map(Vec::len), Some(2), "{answer}");
    }
    // Time for a write the batches would have caused to reach Redis.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let written = writes.stop_with_writes_of(&resume_id);
    assert!(written.is_empty(), "the record was written: {written:?}");
}

/// Sends SIGSTOP or SIGCONT to a node's process: a node that stalls (a paused VM, a long
/// garbage-collecting neighbour), out of Redis's sight for as long.
fn signal_node(node: &ServerProcess, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &node.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {signal} node");
}

/// The record of session `resume_id` in Redis, if there is one.
fn session_record(redis: &RedisServer, resume_id: &str) -> Option<Value> {
    let key = redis
        .keys("*session:*")
        .into_iter()
        .find(|key| key.contains(resume_id))?;
    let mut connection = redis.connection().expect("redis answers");
    let text: Option<String> = redis::cmd("GET")
        .arg(&key)
        .query(&mut connection)
        .expect("GET");
    text.map(|text| serde_json::from_str(&text).expect("a JSON record"))
}

/// Node A stalls (SIGSTOP) for longer than its heartbeat with a WebSocket session, which
/// node B takes up; then A goes on. A's copy is stale, and its writes of the record are
/// refused (they are compare-and-set on the holder): the record stays B's, A's copy ends,
/// and a socket still attached to it is closed as when its client reconnected elsewhere
/// (1000). (A's next write put its stale copy back over B's record, as the holder: a later
/// resume went to A's copy.)
#[tokio::test]
async fn a_node_back_from_a_stall_leaves_the_record_of_the_node_that_took_its_session_up() {
    let nodes = TwoNodes::start("");
    let (mut old, resume_id) = resumable_session(nodes.a_addr).await;
    let mut on_b = stall_a_while_b_takes_up(&nodes, &resume_id).await;
    let b_number = session_record(&nodes.redis, &resume_id).expect("B's record")["node"].clone();
    assert!(b_number.is_u64(), "the record names its holder: {b_number}");
    signal_node(&nodes.a, "-CONT");
    // A request on A's stale copy: once it has run for 20 ms, A writes the record listing it.
    start_sleep(&mut old, 30, 60_000).await;
    assert_older_socket_closed(&mut old).await;
    let record = session_record(&nodes.redis, &resume_id).expect("B's record stays");
    assert_eq!(record["node"], b_number, "{record}");
    let echo = on_b
        .call_tool("echo", serde_json::json!({"text": "still on b"}))
        .await;
    assert_eq!(crate::support::tool_text(&echo), "still on b");
}

/// The same with A's copy parked (its socket gone) when A stalls: once A goes on, its copy's
/// grace (1 s) is over, and the delete of the record it makes as the holder is refused: B's
/// record stays, and B's session goes on. (A deleted B's record, and no node could take the
/// session up after B.)
#[tokio::test]
async fn a_node_back_from_a_stall_never_deletes_the_record_of_the_node_that_took_its_session_up() {
    // The record outlives the stall: its time to live is the HTTP idle timeout (8 s).
    let nodes =
        TwoNodes::start("[sessions]\nresume_grace_ms = 1000\nhttp_idle_timeout_ms = 8000\n");
    let (client, resume_id) = resumable_session(nodes.a_addr).await;
    drop(client);
    // Parked on A.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut on_b = stall_a_while_b_takes_up(&nodes, &resume_id).await;
    let b_number = session_record(&nodes.redis, &resume_id).expect("B's record")["node"].clone();
    assert!(b_number.is_u64(), "the record names its holder: {b_number}");
    signal_node(&nodes.a, "-CONT");
    // A's grace is over by its clock: its copy ends at once. Looked at throughout, so that
    // a write of B's own could not put back a record A deleted before it is seen gone.
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        let record = session_record(&nodes.redis, &resume_id).expect("B's record stays");
        assert_eq!(record["node"], b_number, "{record}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let echo = on_b
        .call_tool("echo", serde_json::json!({"text": "still on b"}))
        .await;
    assert_eq!(crate::support::tool_text(&echo), "still on b");
}

/// Stalls node A (SIGSTOP) once it has written the record of session `resume_id`, and
/// resumes the session on node B once A's heartbeat has ended (B then takes it up); A stays
/// stalled.
async fn stall_a_while_b_takes_up(nodes: &TwoNodes, resume_id: &str) -> crate::support::Client {
    let deadline = Instant::now() + Duration::from_secs(10);
    while session_record(&nodes.redis, resume_id).is_none() {
        assert!(Instant::now() < deadline, "node A never wrote the record");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal_node(&nodes.a, "-STOP");
    while nodes.redis.keys("*node:*").len() > 1 {
        assert!(Instant::now() < deadline, "node A's heartbeat never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    resume_websocket(nodes.b_addr, resume_id).await
}

/// An HTTP session's POST stream, as its client reads it: the SSE events of the POST's
/// response, or of a GET resuming it.
type EventStream = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<sse_stream::Sse, sse_stream::Error>> + Send>,
>;

/// A POST of `body` to node `addr`'s `/mcp`, in session `session` if given.
async fn post_mcp(
    http: &reqwest::Client,
    addr: SocketAddr,
    session: Option<&str>,
    body: Value,
) -> reqwest::Response {
    use reqwest::header::{ACCEPT, CONTENT_TYPE};
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
    post.send().await.expect("POST answered")
}

/// An HTTP session begun on node `addr`, its log level set to `debug` (a tool's debug line
/// reaches its client).
async fn http_session(http: &reqwest::Client, addr: SocketAddr) -> String {
    use serde_json::json;
    let init = post_mcp(
        http,
        addr,
        None,
        crate::support::request(
            json!(0),
            "initialize",
            crate::support::initialize_params("2025-11-25"),
        ),
    )
    .await;
    let session = init.headers()["mcp-session-id"]
        .to_str()
        .expect("id")
        .to_owned();
    let level = post_mcp(
        http,
        addr,
        Some(&session),
        crate::support::request(json!(1), "logging/setLevel", json!({"level": "debug"})),
    )
    .await;
    assert_eq!(level.status(), 200);
    session
}

/// Starts `sleep {ms}` as request `id` on node `addr`, with a progress token when
/// `progress` (an event every 50 ms; otherwise only its debug line at its start): its POST
/// becomes a stream; returns it once its first event is read, with that event's id.
async fn sleep_stream(
    http: &reqwest::Client,
    addr: SocketAddr,
    session: &str,
    (id, ms, progress): (i64, u64, bool),
) -> (EventStream, String) {
    use futures_util::StreamExt;
    use serde_json::json;
    let mut params = json!({"name": "sleep", "arguments": {"ms": ms}});
    if progress {
        params["_meta"] = json!({"progressToken": format!("p{id}")});
    }
    let running = post_mcp(
        http,
        addr,
        Some(session),
        crate::support::request(json!(id), "tools/call", params),
    )
    .await;
    assert_eq!(running.status(), 200);
    let mut stream: EventStream = Box::pin(sse_stream::SseStream::from_bytes_stream(
        running.bytes_stream(),
    ));
    loop {
        let event = tokio::time::timeout(crate::support::READ_TIMEOUT, stream.next())
            .await
            .expect("an event in time")
            .expect("an event")
            .expect("well-formed");
        if event.data.as_deref().is_some_and(|d| !d.trim().is_empty()) {
            return (stream, event.id.expect("an id"));
        }
    }
}

/// Resumes a stream on node `addr` after event `last_event_id`.
async fn resume_stream(
    http: &reqwest::Client,
    addr: SocketAddr,
    session: &str,
    last_event_id: &str,
) -> EventStream {
    use reqwest::header::ACCEPT;
    let resumed = http
        .get(format!("http://{addr}/mcp"))
        .header(ACCEPT, "text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-11-25")
        .header("last-event-id", last_event_id)
        .send()
        .await
        .expect("resumed");
    assert_eq!(resumed.status(), 200, "resuming after {last_event_id}");
    Box::pin(sse_stream::SseStream::from_bytes_stream(
        resumed.bytes_stream(),
    ))
}

/// The next answer (a message with an id) on `stream` within `wait`, with its event's id;
/// `None` if the stream ends first.
async fn next_answer(stream: &mut EventStream, wait: Duration) -> Option<(Value, String)> {
    use futures_util::StreamExt;
    loop {
        let event = tokio::time::timeout(wait, stream.next())
            .await
            .expect("the stream goes on or ends in time")?
            .expect("well-formed");
        let Some(data) = event.data.filter(|d| !d.trim().is_empty()) else {
            continue;
        };
        let message: Value = serde_json::from_str(&data).expect("JSON");
        if message.get("id").is_some() {
            return Some((message, event.id.expect("an id")));
        }
    }
}

/// The Redis key saying the node whose stream an event id of `event_id` is alive.
fn alive_key_of(redis: &RedisServer, event_id: &str) -> String {
    let stream: u64 = event_id
        .split('_')
        .next()
        .and_then(|s| s.parse().ok())
        .expect("an event id names its stream");
    let key = format!("node:{}", stream >> 32);
    redis
        .keys("*node:*")
        .into_iter()
        .find(|k| k.ends_with(&key))
        .expect("the stream's node is alive")
}

/// Node A stalls (SIGSTOP) past its alive time while a POST of its HTTP session streams a
/// call; its client resumes the stream on node B, which answers the call -32031 (`nodeLost`)
/// once it finds A dead; then A goes on. A, having claimed the stream's end in Redis before
/// it sends anything more on it, finds B did first: it ends the POST's stream without the
/// call's answer, and the client has exactly one answer for the call, under an event id of
/// B's own. (A sent the call's real answer on the POST's stream, which the client still
/// read, under the event id B had given its -32031; attack run 51, N3.)
#[tokio::test]
async fn a_post_stream_of_a_node_that_stalled_is_answered_once_where_it_was_resumed() {
    let nodes = TwoNodes::start("");
    let http = crate::support::http::client();
    let session = http_session(&http, nodes.a_addr).await;
    let (mut on_a, first) = sleep_stream(&http, nodes.a_addr, &session, (9, 8000, true)).await;
    // A node that stalls before it mirrored what it sent leaves a gap a resume reports
    // (400), by design: the stall comes after.
    // The nodes' `redis.key_prefix` is the default.
    let mirror = format!("mcp-ws:events:{{{session}}}");
    crate::support::redis::wait_mirrored(|| nodes.redis.stream(&mirror), &first).await;
    let a_alive = alive_key_of(&nodes.redis, &first);
    nodes.a.pause();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !nodes.redis.keys(&a_alive).is_empty() {
        assert!(Instant::now() < deadline, "node A's heartbeat never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut on_b = resume_stream(&http, nodes.b_addr, &session, &first).await;
    let (lost, lost_id) = next_answer(&mut on_b, Duration::from_secs(10))
        .await
        .expect("answered on B once A is found dead");
    assert_eq!(lost["id"], 9, "{lost}");
    assert_eq!(lost["error"]["code"], -32031, "{lost}");
    assert_eq!(lost["error"]["data"]["reason"], "nodeLost", "{lost}");
    let stream_of = |id: &str| id.split('_').next().map(str::to_owned);
    assert_ne!(
        stream_of(&lost_id),
        stream_of(&first),
        "B's answer is numbered in A's stream: {lost_id}"
    );
    nodes.a.resume();
    // A's POST stream ends, without the call's answer (due 8 s after its start).
    if let Some((answer, id)) = next_answer(&mut on_a, Duration::from_secs(15)).await {
        panic!("node A answered 9 too, as {id}: {answer}");
    }
    // A client that resumes the stream again (it missed B's answer) gets it again, on
    // either node.
    for addr in [nodes.a_addr, nodes.b_addr] {
        let mut again = resume_stream(&http, addr, &session, &first).await;
        let (answer, _) = next_answer(&mut again, Duration::from_secs(10))
            .await
            .expect("answered again");
        assert_eq!(answer, lost, "on {addr}");
    }
}

/// The other order: node A, taken for dead by the others while it goes on (its alive key
/// deleted again and again, as by a Redis that lost it), claims its POST streams' ends each
/// time a beat finds it so, before it answers anything more (here quick calls, answered as
/// JSON), and B, following one of them after a resume and finding A dead, finds A's claim:
/// it answers nothing, and goes on following, up to A's answer, mirrored (the very event A
/// sent on the POST's stream, under its id). (B answered -32031 as soon as it found A dead,
/// and A answered too; attack run 51, N3.)
#[tokio::test]
async fn a_post_stream_its_node_claimed_is_followed_to_its_answer_when_its_node_is_taken_for_dead()
{
    use serde_json::json;
    let nodes = TwoNodes::start("");
    let http = crate::support::http::client();
    let session = http_session(&http, nodes.a_addr).await;
    // Quiet after its first line (nothing else is mirrored): its follower asks whether A
    // lives at each second without an event.
    let (mut on_a, first) = sleep_stream(&http, nodes.a_addr, &session, (9, 5000, false)).await;
    let a_alive = alive_key_of(&nodes.redis, &first);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let deleting = {
        let stop = stop.clone();
        let mut connection = nodes.redis.connection().expect("redis answers");
        let key = a_alive.clone();
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let deleted: redis::RedisResult<i64> =
                    redis::cmd("DEL").arg(&key).query(&mut connection);
                if deleted.is_err() {
                    // Redis gone: the test failed, and its nodes and Redis are dropped.
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    // Calls answered on A all along: each answer waits for A's claims when they are due.
    let calls = {
        let (http, session, a) = (http.clone(), session.clone(), nodes.a_addr);
        tokio::spawn(async move {
            for id in 100.. {
                let body = crate::support::request(
                    json!(id),
                    "tools/call",
                    json!({"name": "echo", "arguments": {"text": "on a"}}),
                );
                assert_eq!(post_mcp(&http, a, Some(&session), body).await.status(), 200);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    // Two beats of A's find its key gone (it beats every second), and B finds A dead from
    // here on, as the key is gone again within 10 ms of each beat.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let mut on_b = resume_stream(&http, nodes.b_addr, &session, &first).await;
    let followed = next_answer(&mut on_b, Duration::from_secs(10)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    calls.abort();
    deleting.join().expect("the deleting thread");
    let (answer, id) = followed.expect("B's stream goes on to the answer");
    assert_eq!(answer["id"], 9, "{answer}");
    assert!(answer.get("error").is_none(), "B answered: {answer}");
    assert_eq!(
        crate::support::tool_text(&answer),
        "slept 5000 ms",
        "{answer}"
    );
    let (on_post, post_id) = next_answer(&mut on_a, Duration::from_secs(10))
        .await
        .expect("A answers on the POST's stream");
    assert_eq!(on_post, answer);
    assert_eq!(post_id, id, "one event, under one id");
}

/// A POST stream of an HTTP session whose record is in Redis goes on to its answer while
/// Redis is away, past the time without a beat that makes its node claim its streams before
/// it answers on them: Redis out of reach, the answers go on (no node can claim a stream
/// lost then).
#[tokio::test]
async fn a_post_stream_is_answered_while_redis_is_away() {
    let mut nodes = TwoNodes::start("");
    let http = crate::support::http::client();
    let session = http_session(&http, nodes.a_addr).await;
    let (mut on_a, _) = sleep_stream(&http, nodes.a_addr, &session, (9, 4000, true)).await;
    nodes.redis.kill();
    // Past `SUSPECT_AFTER` (2 s) without a beat reaching Redis before the answer.
    let (answer, _) = next_answer(&mut on_a, Duration::from_secs(10))
        .await
        .expect("answered on the POST's stream");
    assert_eq!(
        crate::support::tool_text(&answer),
        "slept 4000 ms",
        "{answer}"
    );
}
