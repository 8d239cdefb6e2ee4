//! Graceful shutdown (`RunningServer::stop`, the same path as SIGTERM, and SIGTERM itself on
//! the binary):
//!
//! - A request in flight when shutdown begins still gets its response if it finishes within
//!   `shutdown.grace_ms`; only then is the connection closed, with 1001.
//! - A request still running when the grace runs out is stopped and answered with -32004
//!   (a batch's entry within its batch's answer): every request the session took gets an
//!   answer before the close 1001, and the server stops.
//! - Idle clients are all closed with 1001.
//! - While a session drains, new work (`tools/call`, `resources/read`, `prompts/get`) gets
//!   -32004 while what starts no new work (`ping`, the `*/list` methods) is still answered;
//!   a drained session closes once its client has been quiet for a moment, so a cheap
//!   request sent right after the last result is answered; a new WebSocket upgrade gets
//!   HTTP 503 with `Retry-After`.
//! - The binary, on SIGTERM, closes its clients with 1001 and exits with status 0.
//!   (`interop_py_sdk` has the official Python SDK live a call through SIGTERM.)

use crate::support::http::wait_metric;
use crate::support::process::ServerProcess;
use crate::support::ws::assert_upgrade_refused_503;
use crate::support::*;

use serde_json::{json, Value};
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

/// Calls `echo` until a call is refused with -32004 (the session has received the shutdown);
/// every call before that one is answered normally. Polls instead of guessing a delay.
async fn call_until_refused(client: &mut Client) {
    let deadline = Instant::now() + READ_TIMEOUT;
    loop {
        let id = client.fresh_id();
        let response = client
            .request_with_id(
                id.clone(),
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "before"}}),
            )
            .await;
        if response.get("error").is_some() {
            assert_error(&response, &id, SHUTTING_DOWN);
            return;
        }
        assert_eq!(
            assert_result(&response, &id),
            json!({"content": [{"type": "text", "text": "before"}]})
        );
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
    call_until_refused(&mut client).await;
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

/// A batch cut by the grace deadline is answered whole: the entry that finished with its
/// result, the one still running with -32004, in one array, then close 1001.
#[tokio::test]
async fn batch_cut_by_the_grace_answers_every_entry_then_close_1001() {
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
    let mut entries = answered[0].as_array().expect("a batch answer").clone();
    entries.sort_by_key(|entry| entry["id"].as_str().map(str::to_owned));
    assert_eq!(entries.len(), 2, "{answered:?}");
    assert_eq!(
        entries[1],
        json!({"jsonrpc":"2.0","id":"done","result":{"content":[{"type":"text","text":"kept"}]}})
    );
    assert_error(&entries[0], &json!("cut"), SHUTTING_DOWN);
    assert_stopped(stopper).await;
}

#[tokio::test]
async fn call_outliving_grace_is_answered_32004_then_close_1001() {
    let server = start(shutdown_settings(200));
    let shared = server.shared().clone();

    let mut client = Client::initialized(&server).await;
    let id = json!("too-long");
    send_call(&mut client, &id, "sleep", json!({"ms": 10_000})).await;
    wait_metric(&server, "mcp_workers", 1).await;

    let stopper = stop_in_background(server);
    let before_close = frames_before_close_1001(&mut client).await;
    assert_eq!(
        before_close.len(),
        1,
        "its answer and nothing else before the close: {before_close:?}"
    );
    let error = assert_error(&before_close[0], &id, SHUTTING_DOWN);
    assert_eq!(error["message"], "Server is shutting down");
    assert_stopped(stopper).await;
    assert_eq!(shared.metrics.cancelled.get(), 1, "the call was stopped");
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
async fn during_drain_new_work_gets_32004_cheap_requests_are_answered_and_new_sessions_503() {
    let server = start(shutdown_settings(30_000));
    let shared = server.shared().clone();
    let url = server.url();

    let mut client = Client::initialized(&server).await;
    // A long call keeps the session open (draining) after shutdown begins.
    let long = json!("long");
    send_call(&mut client, &long, "sleep", json!({"ms": 60_000})).await;
    wait_metric(&server, "mcp_workers", 1).await;

    let stopper = stop_in_background(server);
    call_until_refused(&mut client).await;

    // Once draining, new work is refused...
    for (method, params) in [
        (
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "late"}}),
        ),
        ("resources/read", json!({"uri": "mcp-ws://demo/readme"})),
        (
            "prompts/get",
            json!({"name": "greet", "arguments": {"name": "Ada"}}),
        ),
    ] {
        let id = client.fresh_id();
        let response = client.request_with_id(id.clone(), method, params).await;
        let error = assert_error(&response, &id, SHUTTING_DOWN);
        assert_eq!(error["message"], "Server is shutting down", "{response}");
    }
    // ...and what starts no new work is answered.
    let id = client.fresh_id();
    let response = client.request_with_id(id.clone(), "ping", json!({})).await;
    assert_eq!(assert_result(&response, &id), json!({}));
    for (method, member) in [
        ("tools/list", "tools"),
        ("resources/list", "resources"),
        ("prompts/list", "prompts"),
    ] {
        let id = client.fresh_id();
        let response = client.request_with_id(id.clone(), method, json!({})).await;
        assert!(
            assert_result(&response, &id)[member].is_array(),
            "{method}: {response}"
        );
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

    process.terminate();

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
async fn cancelling_the_last_call_during_drain_closes_without_waiting_for_the_grace() {
    let server = start(shutdown_settings(30_000));
    let mut client = Client::initialized(&server).await;
    let long = json!("long");
    send_call(&mut client, &long, "sleep", json!({"ms": 60_000})).await;
    wait_metric(&server, "mcp_workers", 1).await;

    let stopper = stop_in_background(server);
    call_until_refused(&mut client).await;
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

/// A client that, on its last result, asks the server something cheap about it (the Python
/// SDK lists the tools after a call) gets its answer: the drained session closes only once
/// its client has been quiet for a moment, not right after the last result.
#[tokio::test]
async fn a_cheap_request_sent_right_after_the_last_result_is_answered_before_the_close() {
    let (server, gate) = start_with_gate(shutdown_settings(30_000));
    let mut client = Client::initialized(&server).await;
    let id = json!("held");
    send_call(&mut client, &id, "hold", json!({})).await;
    wait_metric(&server, "mcp_workers", 1).await;

    let stopper = stop_in_background(server);
    call_until_refused(&mut client).await;
    gate.add_permits(1);
    let response = client.recv_response(&id).await;
    assert_eq!(
        assert_result(&response, &id),
        json!({"content": [{"type": "text", "text": "released"}]})
    );
    let list = json!("list");
    client
        .send_json(json!({"jsonrpc": "2.0", "id": list, "method": "tools/list"}))
        .await;
    let before_close = frames_before_close_1001(&mut client).await;
    assert_eq!(before_close.len(), 1, "{before_close:?}");
    assert!(
        assert_result(&before_close[0], &list)["tools"].is_array(),
        "{before_close:?}"
    );
    assert_stopped(stopper).await;
}

/// A resume on a node that is shutting down is refused (503, `Retry-After: 1`) before it
/// touches the session: the socket still attached is drained as any other (its request
/// answered, then 1001), never let go with its requests cancelled unanswered.
#[tokio::test]
async fn a_resume_during_the_drain_is_refused_and_the_attached_socket_is_still_drained() {
    let (server, gate) = start_with_gate(shutdown_settings(30_000));
    let url = server.url();
    let (mut client, session_id) = Client::resumable_at(&url).await;
    let id = json!("held");
    send_call(&mut client, &id, "hold", json!({})).await;
    wait_metric(&server, "mcp_workers", 1).await;

    let stopper = stop_in_background(server);
    call_until_refused(&mut client).await;
    assert_eq!(
        try_resume(&url, &session_id).await.err(),
        Some((503, "1".into()))
    );

    gate.add_permits(1);
    let response = client.recv_response(&id).await;
    assert_eq!(
        assert_result(&response, &id),
        json!({"content": [{"type": "text", "text": "released"}]})
    );
    assert!(frames_before_close_1001(&mut client).await.is_empty());
    assert_stopped(stopper).await;
}

/// The same for a session parked (its socket dropped) before the shutdown began: refused
/// 503, where it was upgraded and then closed 4404 "session ended".
#[tokio::test]
async fn a_resume_of_a_parked_session_during_the_drain_is_refused() {
    let (server, gate) = start_with_gate(shutdown_settings(30_000));
    let url = server.url();
    let shared = server.shared().clone();
    let (mut client, session_id) = Client::resumable_at(&url).await;
    send_call(&mut client, &json!("held"), "hold", json!({})).await;
    wait_metric(&server, "mcp_workers", 1).await;
    drop(client);
    wait_metric(&server, "mcp_parked_sessions", 1).await;

    let stopper = stop_in_background(server);
    let deadline = Instant::now() + READ_TIMEOUT;
    while !shared.is_draining() {
        assert!(Instant::now() < deadline, "the drain never began");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        try_resume(&url, &session_id).await.err(),
        Some((503, "1".into()))
    );
    gate.add_permits(1);
    assert_stopped(stopper).await;
}

/// An upgrade resuming `session_id`: the client, or the refusal's status and `Retry-After`.
async fn try_resume(url: &str, session_id: &str) -> Result<Client, (u16, String)> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = url.into_client_request().expect("a request");
    request.headers_mut().insert(
        "Mcp-Session-Id",
        session_id.parse().expect("a header value"),
    );
    match tokio_tungstenite::connect_async(request).await {
        Ok((ws, _)) => Ok(Client::from_ws(ws)),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err((
            response.status().as_u16(),
            response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned(),
        )),
        Err(other) => panic!("unexpected connect error: {other}"),
    }
}
