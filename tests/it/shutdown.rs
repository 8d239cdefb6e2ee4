//! Graceful shutdown (`RunningServer::stop`, the same path as SIGTERM, and SIGTERM itself on
//! the binary):
//!
//! - A request in flight when shutdown begins still gets its response if it finishes within
//!   `shutdown.grace_ms`; only then is the connection closed, with 1001.
//! - A request still running when the grace runs out is cancelled: no response for its id,
//!   the connection is closed with 1001, and the server stops.
//! - Idle clients are all closed with 1001.
//! - While a session drains, every new request (even `ping`) gets -32004, and a new
//!   WebSocket upgrade gets HTTP 503 with `Retry-After`.
//! - The binary, on SIGTERM, closes its clients with 1001 and exits with status 0.

use crate::support::http::wait_metric;
use crate::support::process::ServerProcess;
use crate::support::ws::assert_upgrade_refused_503;
use crate::support::*;

use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

/// Settings for these tests: no heartbeat during a test (a heartbeat close would be
/// mistaken for the shutdown close), and `grace_ms`.
fn shutdown_settings(grace_ms: u64) -> mcp_ws::Settings {
    let mut s = settings();
    s.heartbeat.interval_ms = 600_000;
    s.heartbeat.client_timeout_ms = 1_200_000;
    s.shutdown.grace_ms = grace_ms;
    s
}

/// Reads up to the server's close, checks it is 1001 "server shutting down", and returns the
/// frames that came before it (not yet read by the test).
async fn frames_before_close_1001(client: &mut Client) -> Vec<Value> {
    let frame = client
        .recv_close()
        .await
        .expect("the server sends a close frame");
    assert_eq!(u16::from(frame.code), 1001, "{frame:?}");
    assert_eq!(frame.reason.as_str(), "server shutting down", "{frame:?}");
    client.backlog.drain(..).collect()
}

/// Sends pings until one is refused with -32004 (the session has received the shutdown);
/// every ping before that one is answered normally. Polls instead of guessing a delay.
async fn ping_until_refused(client: &mut Client) {
    let deadline = Instant::now() + READ_TIMEOUT;
    loop {
        let id = client.fresh_id();
        let response = client.request_with_id(id.clone(), "ping", json!({})).await;
        if response.get("error").is_some() {
            assert_error(&response, &id, SHUTTING_DOWN);
            return;
        }
        assert_eq!(assert_result(&response, &id), json!({}));
        assert!(
            Instant::now() < deadline,
            "the session never started draining"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn send_call(client: &mut Client, id: &Value, name: &str, arguments: Value) {
    client
        .send_json(json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }))
        .await;
}

#[tokio::test]
async fn in_flight_call_is_answered_before_close_1001() {
    let (server, gate) = start_with_gate(shutdown_settings(30_000));
    let shared = server.shared().clone();

    let mut client = Client::initialized(&server).await;
    let id = json!("held");
    send_call(&mut client, &id, "hold", json!({})).await;
    wait_metric(&server, "mcp_workers", 1).await;

    let stopper = stop_in_background(server);
    ping_until_refused(&mut client).await;
    assert!(
        !stopper.is_finished(),
        "shutdown waits for the session's in-flight call"
    );
    assert!(
        client.backlog.is_empty(),
        "nothing for the held call yet: {:?}",
        client.backlog
    );

    gate.add_permits(1);
    let response = client.recv_response(&id).await;
    assert_eq!(
        assert_result(&response, &id),
        json!({"content": [{"type": "text", "text": "released"}]})
    );
    let before_close = frames_before_close_1001(&mut client).await;
    assert!(
        before_close.is_empty(),
        "nothing between the response and the close: {before_close:?}"
    );
    assert_stopped(stopper).await;
    assert_eq!(shared.metrics.cancelled.get(), 0, "nothing was cancelled");
    assert_eq!(shared.metrics.sessions.get(), 0);
}

/// A batch cut by the grace deadline still delivers the answers it collected: the entry
/// that finished is sent (in the array), the cancelled one is left out, then close 1001.
#[tokio::test]
async fn batch_cut_by_the_grace_still_delivers_its_finished_entries() {
    let server = start(shutdown_settings(300));
    let mut client = Client::initialized(&server).await;
    client
        .send_json(json!([
            {"jsonrpc":"2.0","id":"done","method":"tools/call","params":{"name":"echo","arguments":{"text":"kept"}}},
            {"jsonrpc":"2.0","id":"cut","method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000}}}
        ]))
        .await;
    // The echo has finished and waits in the batch; only the sleep is still running.
    wait_metric(&server, "mcp_workers", 1).await;

    let stopper = stop_in_background(server);
    let answered = frames_before_close_1001(&mut client).await;
    assert_eq!(
        answered.len(),
        1,
        "one frame before the close: {answered:?}"
    );
    assert_eq!(
        answered[0],
        json!([{"jsonrpc":"2.0","id":"done","result":{"content":[{"type":"text","text":"kept"}]}}])
    );
    assert_stopped(stopper).await;
}

#[tokio::test]
async fn call_outliving_grace_is_cancelled_unanswered_then_close_1001() {
    let server = start(shutdown_settings(200));
    let shared = server.shared().clone();

    let mut client = Client::initialized(&server).await;
    let id = json!("too-long");
    send_call(&mut client, &id, "sleep", json!({"ms": 10_000})).await;
    wait_metric(&server, "mcp_workers", 1).await;

    let stopper = stop_in_background(server);
    let before_close = frames_before_close_1001(&mut client).await;
    assert!(
        before_close.is_empty(),
        "no response (nor anything else) before the close: {before_close:?}"
    );
    assert_stopped(stopper).await;
    assert_eq!(shared.metrics.cancelled.get(), 1, "the call was cancelled");
    assert_eq!(shared.metrics.workers.get(), 0);
    assert_eq!(shared.metrics.sessions.get(), 0);
}

#[tokio::test]
async fn idle_clients_all_get_close_1001() {
    let server = start(shutdown_settings(10_000));
    let shared = server.shared().clone();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(Client::initialized(&server).await);
    }
    // A connection that never initialized is closed the same way.
    clients.push(Client::connect(&server).await);
    wait_metric(&server, "mcp_sessions", 4).await;

    let stopper = stop_in_background(server);
    for client in &mut clients {
        let before_close = frames_before_close_1001(client).await;
        assert!(before_close.is_empty(), "{before_close:?}");
    }
    assert_stopped(stopper).await;
    assert_eq!(shared.metrics.sessions.get(), 0);
}

#[tokio::test]
async fn during_drain_requests_get_32004_and_new_sessions_503() {
    let server = start(shutdown_settings(30_000));
    let shared = server.shared().clone();
    let url = server.url();

    let mut client = Client::initialized(&server).await;
    // A long call keeps the session open (draining) after shutdown begins.
    let long = json!("long");
    send_call(&mut client, &long, "sleep", json!({"ms": 60_000})).await;
    wait_metric(&server, "mcp_workers", 1).await;

    let stopper = stop_in_background(server);
    ping_until_refused(&mut client).await;

    // Once draining, every kind of request is refused, inline or worker-bound.
    for (method, params) in [
        ("ping", json!({})),
        ("tools/list", json!({})),
        (
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "late"}}),
        ),
    ] {
        let id = client.fresh_id();
        let response = client.request_with_id(id.clone(), method, params).await;
        let error = assert_error(&response, &id, SHUTTING_DOWN);
        assert_eq!(error["message"], "Server is shutting down", "{response}");
    }
    // A new session is answered 503, not left hanging.
    assert_upgrade_refused_503(&url).await;
    assert!(
        !stopper.is_finished(),
        "the drain holds while the long call is in flight"
    );
    assert!(
        client.backlog.iter().all(|m| m.get("id") != Some(&long)),
        "the long call has not answered: {:?}",
        client.backlog
    );

    // The client leaving ends the drain: its call is cancelled and the server stops.
    client.ws.close(None).await.expect("client close");
    assert_stopped(stopper).await;
    assert_eq!(shared.metrics.cancelled.get(), 1);
    assert_eq!(shared.metrics.sessions.get(), 0);
}

#[tokio::test]
async fn sigterm_closes_clients_with_1001_and_the_binary_exits_0() {
    let mut process = ServerProcess::spawn(&["--listen", "127.0.0.1:0"], &[]);
    let addr = process.wait_listening();

    let mut client = Client::connect_url(&format!("ws://{addr}/mcp")).await;
    let response = client
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_eq!(response["result"]["protocolVersion"], "2025-11-25");

    let status = Command::new("kill")
        .args(["-TERM", &process.child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -TERM succeeded");

    frames_before_close_1001(&mut client).await;
    drop(client);
    let (status, stderr) = process.wait_exit();
    assert_eq!(
        status.code(),
        Some(0),
        "exit status {status:?}; stderr:\n{stderr}"
    );
}

#[tokio::test]
async fn cancelling_the_last_call_during_drain_closes_at_once() {
    let server = start(shutdown_settings(30_000));
    let mut client = Client::initialized(&server).await;
    let long = json!("long");
    send_call(&mut client, &long, "sleep", json!({"ms": 60_000})).await;
    wait_metric(&server, "mcp_workers", 1).await;

    let stopper = stop_in_background(server);
    ping_until_refused(&mut client).await;
    client
        .send_json(json!({
            "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": "long"},
        }))
        .await;
    // Nothing is in flight any more: the draining session closes now (common's receive
    // timeout is 10 s; the grace is 30 s).
    let before_close = frames_before_close_1001(&mut client).await;
    assert!(before_close.is_empty(), "{before_close:?}");
    assert_stopped(stopper).await;
}
