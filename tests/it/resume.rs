//! Resumable WebSocket sessions (the WebSocket counterpart of `Last-Event-ID`; SEP-1288: a
//! disconnect is not a cancel):
//!
//! - `initialize` gives the session's id (`_meta["mcp-ws/sessionId"]`); a dropped socket
//!   keeps the session, its work in flight and what it could not send, for
//!   `sessions.resume_grace_ms`;
//! - a reconnect with the id (`Mcp-Session-Id` header, or an `mcp.session.<id>` subprotocol
//!   entry) gets the same session and what it missed, in order: a tool's answer sent while the
//!   socket was down, progress that goes on; an older socket still attached is closed (1000);
//! - past the grace, or when it missed more than `sessions.resume_buffer_messages`, the
//!   session ends and its work is cancelled, as does a resumed session whose client stops
//!   reading once its socket holds a bounded number of frames unwritten; a normal close
//!   (1000) ends it at once; an unknown id is refused (404);
//! - a resuming client may list the ids it has no answer for (`Mcp-Awaiting-Ids`): each one
//!   the session neither runs nor kept an answer for is answered -32031 `connectionLost`
//!   (it or its answer was lost with the connection), and nothing else is answered twice; a
//!   header that is not such a list is refused (400);
//! - parked sessions yield: when a connected client needs a pool slot and none is free, the
//!   work in flight of a parked session is stopped first and answered -32004 (`reclaimed`)
//!   on resume; a resumed session is a live one again.

use crate::support::http::{metric, wait_metric};
use crate::support::ws::assert_server_alive;
use crate::support::*;
use mcp_ws::RunningServer;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

fn resume_settings(grace_ms: u64) -> mcp_ws::Settings {
    let mut s = settings();
    s.sessions.resume_grace_ms = grace_ms;
    s
}

/// A client initialized on the newest version, and its session id.
async fn session(server: &RunningServer) -> (Client, String) {
    let (client, id) = Client::resumable_at(&server.url()).await;
    assert_eq!(id.len(), 32, "128 random bits, hex: {id}");
    (client, id)
}

/// A session whose client dropped its connection, parked for a reconnect; its id.
async fn parked_session(server: &RunningServer) -> String {
    let (client, id) = session(server).await;
    drop(client);
    wait_metric(server, "mcp_parked_sessions", 1).await;
    id
}

/// Upgrades with a header; `Ok(client)` or `Err(status)`.
async fn reconnect(
    server: &RunningServer,
    header: &'static str,
    value: &str,
) -> Result<(Client, Option<String>), u16> {
    reconnect_with(server, &[(header, value)]).await
}

/// Upgrades with `headers`; `Ok(client)` or `Err(status)`.
async fn reconnect_with(
    server: &RunningServer,
    headers: &[(&'static str, &str)],
) -> Result<(Client, Option<String>), u16> {
    let mut request = server.url().into_client_request().expect("request");
    for (header, value) in headers {
        request
            .headers_mut()
            .insert(*header, HeaderValue::from_str(value).expect("value"));
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((ws, response)) => {
            let protocol = response
                .headers()
                .get("sec-websocket-protocol")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            Ok((Client::from_ws(ws), protocol))
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(other) => panic!("unexpected connect error: {other}"),
    }
}

async fn resume(server: &RunningServer, id: &str) -> Client {
    reconnect(server, "Mcp-Session-Id", id)
        .await
        .unwrap_or_else(|status| panic!("resume refused with {status}"))
        .0
}

fn hold_call(id: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"hold","arguments":{}}})
}

#[tokio::test]
async fn an_answer_sent_while_the_socket_was_down_arrives_after_the_reconnect() {
    let (server, gate) = start_with_gate(resume_settings(30_000));
    let (mut client, id) = session(&server).await;
    client.send_json(hold_call(json!("held"))).await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    drop(client);
    wait_metric(&server, "mcp_parked_sessions", 1).await;
    // The tool answers while no socket is attached; nothing was cancelled.
    gate.add_permits(1);
    wait_metric(&server, "mcp_pool_running", 0).await;
    assert_eq!(metric(&server, "mcp_cancelled_total").await, 0);

    let mut client = resume(&server, &id).await;
    let response = client.recv_response(&json!("held")).await;
    assert_eq!(
        assert_result(&response, &json!("held"))["content"][0]["text"],
        "released"
    );
    // The same session goes on: initialized, with its negotiated version.
    let echo = client.call_tool("echo", json!({"text": "again"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "again");
    client.expect_nothing_pending().await;
    assert_eq!(metric(&server, "mcp_parked_sessions").await, 0);
    assert_eq!(metric(&server, "mcp_sessions").await, 1);
}

#[tokio::test]
async fn progress_goes_on_across_a_reconnect() {
    let server = start(resume_settings(30_000));
    let (mut client, id) = session(&server).await;
    client
        .send_json(json!({"jsonrpc":"2.0","id":"s","method":"tools/call",
            "params":{"name":"sleep","arguments":{"ms":1500},"_meta":{"progressToken":"tok"}}}))
        .await;
    let first = client.recv().await;
    assert_eq!(first["method"], "notifications/progress", "{first}");
    drop(client);
    wait_metric(&server, "mcp_parked_sessions", 1).await;

    let mut client = resume(&server, &id).await;
    let mut progress = vec![first["params"]["progress"].as_f64().expect("number")];
    let response = loop {
        let frame = client.recv().await;
        if frame["method"] == "notifications/progress" {
            assert_eq!(frame["params"]["progressToken"], "tok");
            progress.push(frame["params"]["progress"].as_f64().expect("number"));
            continue;
        }
        break frame;
    };
    assert_eq!(
        assert_result(&response, &json!("s"))["content"][0]["text"],
        "slept 1500 ms"
    );
    assert!(
        progress.len() >= 3,
        "progress before and after the reconnect: {progress:?}"
    );
    assert!(
        progress.windows(2).all(|w| w[0] < w[1]),
        "increasing: {progress:?}"
    );
}

#[tokio::test]
async fn past_the_grace_the_work_is_cancelled_and_the_id_forgotten() {
    let (server, _gate) = start_with_gate(resume_settings(200));
    let (mut client, id) = session(&server).await;
    client.send_json(hold_call(json!(1))).await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    drop(client);
    wait_metric(&server, "mcp_sessions", 0).await;
    wait_metric(&server, "mcp_pool_running", 0).await;
    assert_eq!(metric(&server, "mcp_cancelled_total").await, 1);
    assert_eq!(metric(&server, "mcp_parked_sessions_peak").await, 1);
    assert_eq!(
        reconnect(&server, "Mcp-Session-Id", &id).await.err(),
        Some(404)
    );
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn a_reconnect_closes_the_older_socket_still_attached() {
    let server = start(resume_settings(30_000));
    let (mut old, id) = session(&server).await;
    let mut new = resume(&server, &id).await;
    let close = old
        .recv_close()
        .await
        .expect("the older socket gets a close frame");
    assert_eq!(u16::from(close.code), 1000, "{close:?}");
    assert_eq!(
        close.reason.as_str(),
        "MCP session reconnected on another connection"
    );
    let echo = new.call_tool("echo", json!({"text": "here"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "here");
    // Still one session.
    assert_eq!(metric(&server, "mcp_sessions").await, 1);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ChatterArgs {
    /// Log lines to send.
    lines: u32,
}

/// Logs `lines` lines of 200 bytes, letting its session forward them as it goes.
async fn chatter(
    args: ChatterArgs,
    ctx: mcp_ws::RequestContext,
) -> Result<String, mcp_ws::ToolError> {
    let line = "x".repeat(200);
    for i in 0..args.lines {
        ctx.log(mcp_ws::model::LogLevel::Info, &line);
        if i % 256 == 0 {
            tokio::task::yield_now().await;
        }
    }
    Ok("logged".into())
}

/// A resumed socket whose client stops reading: what its session sends it piles up in the
/// socket's mailbox (the socket, its writes blocked, no longer runs), bounded; once full,
/// the session ends (1000 after what was sent), as one that missed more than a reconnect
/// can be given does. (Sent past any bound, it held every frame the session made, without
/// end, for as long as the socket stayed open.)
#[tokio::test]
async fn a_resumed_socket_whose_client_stops_reading_ends_its_session_at_a_bound() {
    let mut s = resume_settings(30_000);
    s.limits.log_lines_per_second = 0;
    let server = start_with(s, |b| {
        b.tool(mcp_ws::Tool::new("chatter", "Logs many lines.", chatter))
    });
    let (old, id) = session(&server).await;
    let mut resumed = resume(&server, &id).await;
    drop(old);
    let level = resumed
        .request("logging/setLevel", json!({"level": "info"}))
        .await;
    assert!(level.get("result").is_some(), "{level}");
    // 200,000 lines of 200 bytes, 40 MB: more than the socket buffers on both ends and the
    // mailbox hold. The client reads none of it.
    resumed
        .send_json(
            json!({"jsonrpc": "2.0", "id": "chatter", "method": "tools/call",
            "params": {"name": "chatter", "arguments": {"lines": 200_000}}}),
        )
        .await;
    wait_metric(&server, "mcp_sessions", 0).await;
    assert_server_alive(&server).await;
    // What was written before the end is there to read, then the close.
    let close = resumed.recv_close().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1000, "{close:?}");
}

#[tokio::test]
async fn a_subprotocol_entry_resumes_like_the_header() {
    let (server, gate) = start_with_gate(resume_settings(30_000));
    let (mut client, id) = session(&server).await;
    client.send_json(hold_call(json!(7))).await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    drop(client);
    wait_metric(&server, "mcp_parked_sessions", 1).await;
    gate.add_permits(1);
    let offer = format!("mcp, mcp.session.{id}");
    let (mut client, selected) = reconnect(&server, "Sec-WebSocket-Protocol", &offer)
        .await
        .expect("resumed");
    assert_eq!(
        selected.as_deref(),
        Some("mcp"),
        "the id is never echoed back"
    );
    let response = client.recv_response(&json!(7)).await;
    assert_result(&response, &json!(7));
}

#[tokio::test]
async fn an_unknown_session_id_is_refused() {
    let server = start(resume_settings(30_000));
    let refused = reconnect(
        &server,
        "Mcp-Session-Id",
        "0123456789abcdef0123456789abcdef",
    )
    .await;
    assert_eq!(refused.err(), Some(404));
    assert_eq!(metric(&server, "mcp_sessions_peak").await, 0);
}

#[tokio::test]
async fn a_normal_close_ends_the_session_at_once() {
    let (server, _gate) = start_with_gate(resume_settings(30_000));
    let (mut client, id) = session(&server).await;
    client.send_json(hold_call(json!(1))).await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    client.ws.close(None).await.expect("close");
    wait_metric(&server, "mcp_sessions", 0).await;
    wait_metric(&server, "mcp_pool_running", 0).await;
    assert_eq!(metric(&server, "mcp_parked_sessions_peak").await, 0);
    assert_eq!(
        reconnect(&server, "Mcp-Session-Id", &id).await.err(),
        Some(404)
    );
}

/// A client may shut its side of the connection down right after its close frame (RFC 6455
/// §7.1.1): what it sent before is read first. Its last request is read, its cancel of a
/// running call holds, its close (1000) is echoed and ends the session. (The reader took the
/// end of the stream for an error and dropped the frames it held: the client got 1002, the
/// session was parked with its call running, and a resume got the cancelled call's answer.)
#[tokio::test]
async fn frames_sent_just_before_the_client_shuts_its_side_down_are_read() {
    use futures_util::SinkExt;
    use tokio::io::AsyncWriteExt;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    use tokio_tungstenite::tungstenite::Message;
    let (server, _gate) = start_with_gate(resume_settings(30_000));
    let (mut client, id) = session(&server).await;
    let received = metric(&server, "mcp_requests_total").await;
    client.send_json(hold_call(json!("held"))).await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    client
        .send_json(
            json!({"jsonrpc": "2.0", "id": "last", "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "last words"}}}),
        )
        .await;
    client
        .send_json(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": "held"}}),
        )
        .await;
    client
        .ws
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        })))
        .await
        .expect("close sent");
    let tokio_tungstenite::MaybeTlsStream::Plain(tcp) = client.ws.get_mut() else {
        panic!("a plain connection");
    };
    tcp.shutdown().await.expect("our side shut down");
    let close = client.recv_close().await.expect("the server's close frame");
    assert_eq!(close.code, CloseCode::Normal, "{close:?}");
    // The last request was read (counted); its answer may or may not beat the close that
    // ends the session. The cancelled call is never answered.
    wait_metric(&server, "mcp_requests_total", received + 2).await;
    for answer in &client.backlog {
        assert_eq!(tool_text(answer), "last words", "{answer}");
    }
    wait_metric(&server, "mcp_sessions", 0).await;
    wait_metric(&server, "mcp_pool_running", 0).await;
    assert_eq!(metric(&server, "mcp_parked_sessions_peak").await, 0);
    assert_eq!(
        reconnect(&server, "Mcp-Session-Id", &id).await.err(),
        Some(404)
    );
}

#[tokio::test]
async fn missing_more_than_the_buffer_ends_the_session_rather_than_leave_a_gap() {
    let mut s = resume_settings(30_000);
    s.sessions.resume_buffer_messages = 2;
    // Three answers for a buffer of two: the third cannot be kept.
    let server = three_answers_while_parked_end_the_session(s).await;
    assert_eq!(
        metric(&server, "mcp_dropped_total{reason=\"replay_budget\"}").await,
        0
    );
}

/// Room for about two answers of [`held_with_long_id`] in bytes.
const TWO_LONG_ANSWERS: usize = 2 * LONG_ID + 500;

/// The bytes of a long request id, echoed in its answer.
const LONG_ID: usize = 1000;

/// A `hold` call whose id, `n` then [`LONG_ID`] bytes in all, makes its answer that large.
fn held_with_long_id(n: usize) -> Value {
    hold_call(json!(format!("{n}{}", "i".repeat(LONG_ID - 1))))
}

/// `sessions.resume_buffer_bytes` bounds what a parked session keeps in bytes, with the
/// outcome of `resume_buffer_messages`: within it, the reconnect gets every answer; one
/// answer past it ends the session (a reconnect could not be made whole), its reconnect 404.
/// (Bounded by count alone, four parked sessions held 115 MB each in 3.9 MB answers.)
#[tokio::test]
async fn missing_more_bytes_than_the_buffer_ends_the_session_too() {
    let mut s = resume_settings(30_000);
    s.sessions.resume_buffer_bytes = TWO_LONG_ANSWERS;
    let (server, gate) = start_with_gate(s.clone());
    let id = answers_while_parked(&server, &gate, 2).await;
    let mut client = resume(&server, &id).await;
    let mut answered: Vec<String> = Vec::new();
    for _ in 0..2 {
        let answer = client.recv().await;
        assert_eq!(tool_text(&answer), "released", "{answer}");
        answered.push(answer["id"].as_str().expect("id")[..1].to_owned());
    }
    assert_eq!(answered, ["0", "1"]);
    client.expect_nothing_pending().await;
    three_answers_while_parked_end_the_session(s).await;
}

/// The server's budget of what all sessions hold for replay (`limits.max_replay_bytes`)
/// ends a parked session the same way when it has no room for an answer: counted as
/// dropped, never resumed with the answer missing.
#[tokio::test]
async fn a_parked_session_past_the_replay_budget_ends_too() {
    let mut s = resume_settings(30_000);
    s.limits.max_replay_bytes = TWO_LONG_ANSWERS;
    // The budget alone (one address: its share would refuse first).
    s.limits.max_replay_bytes_per_ip = Some(0);
    let server = three_answers_while_parked_end_the_session(s).await;
    assert_eq!(
        metric(&server, "mcp_dropped_total{reason=\"replay_budget\"}").await,
        1
    );
    assert_eq!(metric(&server, "mcp_replay_bytes").await, 0, "given back");
    assert!(metric(&server, "mcp_replay_bytes_peak").await <= TWO_LONG_ANSWERS as u64);
}

/// A session that gets `answers` answers of [`held_with_long_id`] while parked: its id.
async fn answers_while_parked(
    server: &RunningServer,
    gate: &tokio::sync::Semaphore,
    answers: usize,
) -> String {
    let (mut client, id) = session(server).await;
    for n in 0..answers {
        client.send_json(held_with_long_id(n)).await;
    }
    wait_metric(server, "mcp_pool_running", answers as u64).await;
    drop(client);
    wait_metric(server, "mcp_parked_sessions", 1).await;
    gate.add_permits(answers);
    wait_metric(server, "mcp_pool_running", 0).await;
    id
}

/// Three answers of [`held_with_long_id`] while parked, on a server run with `settings`
/// that has room for two: the session ends and its reconnect is refused (404). Returns the
/// server.
async fn three_answers_while_parked_end_the_session(settings: mcp_ws::Settings) -> RunningServer {
    let (server, gate) = start_with_gate(settings);
    let id = answers_while_parked(&server, &gate, 3).await;
    wait_metric(&server, "mcp_sessions", 0).await;
    assert_eq!(
        reconnect(&server, "Mcp-Session-Id", &id).await.err(),
        Some(404)
    );
    server
}

#[tokio::test]
async fn a_parked_sessions_work_yields_its_slots_to_a_connected_client() {
    let mut s = resume_settings(60_000);
    s.limits.max_concurrent_requests = 2;
    s.limits.admission_wait_ms = 60_000;
    let (server, _gate) = start_with_gate(s);
    let (mut parked, id) = session(&server).await;
    parked.send_json(hold_call(json!("a"))).await;
    parked.send_json(hold_call(json!("b"))).await;
    wait_metric(&server, "mcp_pool_running", 2).await;
    // The client drops its connection: the session waits for a resume, its work running.
    drop(parked);
    wait_metric(&server, "mcp_parked_sessions", 1).await;
    assert_eq!(metric(&server, "mcp_pool_running").await, 2);
    // A connected client needs a slot: the parked session's work gives way at once.
    let mut live = Client::initialized(&server).await;
    let response = live.call_tool("echo", json!({"text": "first"})).await;
    assert_eq!(tool_text(&response), "first", "{response}");
    assert_eq!(metric(&server, "mcp_reclaimed_total").await, 2);
    wait_metric(&server, "mcp_pool_running", 0).await;
    // The resumed client learns its requests were stopped: -32004, each under its id.
    let mut resumed = resume(&server, &id).await;
    let mut stopped = Vec::new();
    for _ in 0..2 {
        let answer = resumed.recv().await;
        let error = assert_error(&answer, &answer["id"], SHUTTING_DOWN);
        assert_eq!(error["data"], json!({"reason": "reclaimed"}), "{answer}");
        stopped.push(answer["id"].as_str().expect("id").to_owned());
    }
    stopped.sort();
    assert_eq!(stopped, ["a", "b"]);
    // The session goes on: a call it sends again runs.
    let again = resumed.call_tool("echo", json!({"text": "again"})).await;
    assert_eq!(tool_text(&again), "again");
}

#[tokio::test]
async fn a_resumed_session_no_longer_yields() {
    let mut s = resume_settings(60_000);
    s.limits.max_concurrent_requests = 1;
    s.limits.admission_wait_ms = 60_000;
    let (server, gate) = start_with_gate(s);
    let (client, id) = session(&server).await;
    let mut client = client;
    client.send_json(hold_call(json!("a"))).await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    drop(client);
    wait_metric(&server, "mcp_parked_sessions", 1).await;
    let mut resumed = resume(&server, &id).await;
    wait_metric(&server, "mcp_parked_sessions", 0).await;
    // Connected again, its work is as much a live client's as anyone's: another client
    // waits for the slot.
    let mut other = Client::initialized(&server).await;
    other.send_json(hold_call(json!("o"))).await;
    wait_metric(&server, "mcp_pool_waiting", 1).await;
    assert_eq!(metric(&server, "mcp_reclaimed_total").await, 0);
    gate.add_permits(2);
    let answer = resumed.recv().await;
    assert_eq!(result_text(&answer, &json!("a")), "released");
    let answer = other.recv().await;
    assert_eq!(result_text(&answer, &json!("o")), "released");
}

/// A resuming client that lists the ids it awaits gets exactly one answer for each: the one
/// kept while no socket was attached, in its turn the one still running, and -32031
/// `connectionLost` for a request the session never had (it was lost with the connection;
/// without the header, its client would wait for it forever). A request whose answer the
/// client had is not awaited, and not answered again.
#[tokio::test]
async fn a_resuming_client_that_says_what_it_awaits_gets_one_answer_for_each() {
    let (server, gate) = start_with_gate(resume_settings(30_000));
    let (mut client, id) = session(&server).await;
    let echo = client.call_tool("echo", json!({"text": "had"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "had");
    client.send_json(hold_call(json!("running"))).await;
    client
        .send_json(json!({"jsonrpc":"2.0","id":"kept","method":"tools/call",
            "params":{"name":"sleep","arguments":{"ms":200}}}))
        .await;
    wait_metric(&server, "mcp_pool_running", 2).await;
    drop(client);
    wait_metric(&server, "mcp_parked_sessions", 1).await;
    // The sleep answers while no socket is attached: its answer is kept.
    wait_metric(&server, "mcp_pool_running", 1).await;

    let awaiting = r#"["running", "kept", "lost"]"#;
    let (mut client, _) = reconnect_with(
        &server,
        &[("Mcp-Session-Id", &id), ("Mcp-Awaiting-Ids", awaiting)],
    )
    .await
    .expect("resumed");
    client
        .send_json(json!({"jsonrpc":"2.0","id":"ping","method":"ping"}))
        .await;
    let mut before_ping = Vec::new();
    loop {
        let message = client.recv().await;
        if message["id"] == "ping" {
            break;
        }
        before_ping.push(message);
    }
    assert_eq!(before_ping.len(), 2, "{before_ping:?}");
    assert_eq!(before_ping[0]["id"], "lost", "{before_ping:?}");
    assert_eq!(before_ping[0]["error"]["code"], -32031);
    assert_eq!(before_ping[0]["error"]["data"]["reason"], "connectionLost");
    assert_eq!(
        assert_result(&before_ping[1], &json!("kept"))["content"][0]["text"],
        "slept 200 ms"
    );
    gate.add_permits(1);
    let running = client.recv_response(&json!("running")).await;
    assert_result(&running, &json!("running"));
    client.expect_nothing_pending().await;
}

/// Awaited ids are told apart as their client wrote them: of two integers beyond 64 bits
/// that differ in their last digit, one running and one lost, the lost one gets -32031; an
/// id beyond a float's range (`1e400`) is owed its -32031 too. (Compared as JSON values,
/// the two integers read as the same float, so the lost one was taken for answered, and an
/// id that could not be read as a value was never answered: each client waited forever.)
#[tokio::test]
async fn awaited_ids_are_told_apart_as_written() {
    let (server, gate) = start_with_gate(resume_settings(30_000));
    let (mut client, id) = session(&server).await;
    let running = "18446744073709551617";
    client
        .send_text(&format!(
            r#"{{"jsonrpc":"2.0","id":{running},"method":"tools/call","params":{{"name":"hold","arguments":{{}}}}}}"#
        ))
        .await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    drop(client);
    wait_metric(&server, "mcp_parked_sessions", 1).await;

    let awaiting = format!("[{running}, 18446744073709551618, 1e400]");
    let (mut client, _) = reconnect_with(
        &server,
        &[("Mcp-Session-Id", &id), ("Mcp-Awaiting-Ids", &awaiting)],
    )
    .await
    .expect("resumed");
    client
        .send_json(json!({"jsonrpc":"2.0","id":"ping","method":"ping"}))
        .await;
    let mut lost = Vec::new();
    loop {
        let text = client.recv_text().await;
        if text.contains(r#""id":"ping""#) {
            break;
        }
        assert!(text.contains("-32031"), "{text}");
        lost.push(text);
    }
    assert_eq!(lost.len(), 2, "{lost:?}");
    assert!(
        lost[0].contains(r#""id":18446744073709551618,"#),
        "{lost:?}"
    );
    assert!(lost[1].contains(r#""id":1e400,"#), "{lost:?}");
    gate.add_permits(1);
    let answer = client.recv_text().await;
    assert!(answer.contains(&format!(r#""id":{running},"#)), "{answer}");
    client.expect_nothing_pending().await;
}

/// `DELETE /mcp` ends HTTP sessions only: with the id of a WebSocket session parked for a
/// reconnect it is 404, as a POST or a GET with it is, and the session resumes. (It ended
/// the parked session, 200, and the resume found nothing.)
#[tokio::test]
async fn a_delete_with_a_parked_websocket_sessions_id_is_404_and_the_session_resumes() {
    let (server, _gate) = start_with_gate(resume_settings(30_000));
    let id = parked_session(&server).await;
    let response = crate::support::http::client()
        .delete(format!("http://{}/mcp", server.addr()))
        .header("Mcp-Session-Id", &id)
        .send()
        .await
        .expect("the DELETE is answered");
    assert_eq!(response.status().as_u16(), 404);
    let (mut client, _) = reconnect(&server, "Mcp-Session-Id", &id)
        .await
        .expect("resumed");
    let echo = client
        .call_tool("echo", json!({"text": "still here"}))
        .await;
    assert_eq!(tool_text(&echo), "still here");
}

/// A resume keeps the version its session negotiated: one offering a pin for another
/// version is 400, and the session is still there for a resume offering its own version
/// (echoed) or none. (The other pin was echoed, and the session served in its own version:
/// the client was told one version and spoken to in another.)
#[tokio::test]
async fn a_resume_offering_another_version_pin_is_400_and_the_session_stays() {
    let (server, _gate) = start_with_gate(resume_settings(30_000));
    let id = parked_session(&server).await;
    let other = reconnect_with(
        &server,
        &[
            ("Mcp-Session-Id", &id),
            ("Sec-WebSocket-Protocol", "mcp.version.2025-06-18"),
        ],
    )
    .await;
    assert_eq!(other.err(), Some(400));
    let (mut client, protocol) = reconnect_with(
        &server,
        &[
            ("Mcp-Session-Id", &id),
            ("Sec-WebSocket-Protocol", "mcp.version.2025-11-25"),
        ],
    )
    .await
    .expect("resumed with its own version");
    assert_eq!(protocol.as_deref(), Some("mcp.version.2025-11-25"));
    let echo = client
        .call_tool("echo", json!({"text": "same version"}))
        .await;
    assert_eq!(tool_text(&echo), "same version");
}

/// A resume offering another version's pin while the session's socket is still attached is
/// refused (400) without touching it: the socket keeps its session and nothing is parked.
/// (The socket was told to let go first: closed 1000, the session parked for a resume.)
#[tokio::test]
async fn a_resume_offering_another_version_pin_leaves_the_attached_socket_alone() {
    let server = start(resume_settings(30_000));
    let (mut client, id) = session(&server).await;
    let other = reconnect_with(
        &server,
        &[
            ("Mcp-Session-Id", &id),
            ("Sec-WebSocket-Protocol", "mcp.version.2025-06-18"),
        ],
    )
    .await;
    assert_eq!(other.err(), Some(400));
    let echo = client
        .call_tool("echo", json!({"text": "still here"}))
        .await;
    assert_eq!(tool_text(&echo), "still here");
    assert_eq!(metric(&server, "mcp_parked_sessions").await, 0);
}

/// `Mcp-Awaiting-Ids` that is not a JSON array of ids is refused (400), and the session is
/// still there to resume.
#[tokio::test]
async fn a_resume_whose_awaited_ids_are_not_a_list_of_ids_is_refused() {
    let server = start(resume_settings(30_000));
    let id = parked_session(&server).await;
    for bad in ["[null]", "{\"id\": 1}", "[1,", "7"] {
        let refused = reconnect_with(
            &server,
            &[("Mcp-Session-Id", &id), ("Mcp-Awaiting-Ids", bad)],
        )
        .await;
        assert_eq!(refused.err(), Some(400), "{bad}");
    }
    let mut client = resume(&server, &id).await;
    let echo = client
        .call_tool("echo", json!({"text": "still here"}))
        .await;
    assert_eq!(echo["result"]["content"][0]["text"], "still here");
}

/// A resume whose upgrade is not a WebSocket handshake (no `Sec-WebSocket-Key`) is refused
/// (400) before it touches the session: the socket attached keeps it. (Checked after the
/// session was claimed, it closed that socket, 1000, and left the session parked for a
/// reconnect that never came.)
#[tokio::test]
async fn a_resume_that_is_no_websocket_handshake_leaves_the_attached_socket_alone() {
    use std::io::{Read, Write};
    let server = start(resume_settings(30_000));
    let (mut client, id) = session(&server).await;
    let mut stream = std::net::TcpStream::connect(server.addr()).expect("connects");
    write!(
        stream,
        "GET /mcp HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nMcp-Session-Id: {id}\r\n\r\n",
        server.addr()
    )
    .expect("request sent");
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).expect("a status line");
    assert_eq!(&head, b"HTTP/1.1 400", "{}", String::from_utf8_lossy(&head));
    drop(stream);

    let echo = client
        .call_tool("echo", json!({"text": "still here"}))
        .await;
    assert_eq!(tool_text(&echo), "still here");
    assert_eq!(metric(&server, "mcp_parked_sessions").await, 0);
}

/// A resume while the session's socket here is stalled (its client stopped reading, so the
/// socket, its writes blocked, no longer runs and cannot let go of the session) is refused
/// (503, `Retry-After: 1`) after a second, where it waited for as long as the stall lasted.
#[tokio::test]
async fn a_resume_while_the_attached_socket_is_stalled_is_refused() {
    let mut s = resume_settings(30_000);
    s.limits.log_lines_per_second = 0;
    s.shutdown.grace_ms = 100;
    let server = start_with(s, |b| {
        b.tool(mcp_ws::Tool::new("chatter", "Logs many lines.", chatter))
    });
    let (client, id) = stalled_session(&server, 200_000, Stall::Shut).await;
    let mut request = server.url().into_client_request().expect("request");
    request
        .headers_mut()
        .insert("Mcp-Session-Id", HeaderValue::from_str(&id).expect("value"));
    let resumed = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio_tungstenite::connect_async(request),
    )
    .await
    .expect("the resume is answered");
    let Err(tokio_tungstenite::tungstenite::Error::Http(refused)) = resumed else {
        panic!("resumed while its socket held it: {resumed:?}");
    };
    assert_eq!(refused.status().as_u16(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body = String::from_utf8_lossy(refused.body().as_deref().unwrap_or_default());
    assert!(body.contains("does not let go"), "{body}");
    drop(client);
}

/// A client that takes none of what the server sends for `heartbeat.client_timeout_ms` has
/// its connection closed (the kernel's `TCP_USER_TIMEOUT`): its session, frozen with the
/// socket until then, is kept as a dropped connection's is, and a resume takes it up and
/// goes on. (The session stayed frozen, heartbeat included, and every resume was refused,
/// for as long as the client kept its TCP connection open.)
#[tokio::test]
async fn a_client_that_stops_reading_loses_its_connection_and_its_session_resumes() {
    let mut s = resume_settings(30_000);
    s.limits.log_lines_per_second = 0;
    s.shutdown.grace_ms = 100;
    s.heartbeat.client_timeout_ms = 2_000;
    // What the session logs while parked is kept for the reconnect: more than the buffer
    // holds would end the session (as designed), which is not what this test is about.
    s.sessions.resume_buffer_messages = 100_000;
    let server = start_with(s, |b| {
        b.tool(mcp_ws::Tool::new("chatter", "Logs many lines.", chatter))
    });
    // Not waited for until the window is shut for good: from then on, the kernel closes the
    // connection within the 2 s this test gives it, and a full run can be slow to see the
    // queue hold still before that.
    let (stalled, id) = stalled_session(&server, 50_000, Stall::Filling).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let (mut resumed, _) = loop {
        match reconnect(&server, "Mcp-Session-Id", &id).await {
            Ok(resumed) => break resumed,
            Err(503) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            Err(status) => panic!("the resume was refused: {status}"),
        }
    };
    let echo = resumed
        .call_tool("echo", json!({"text": "after the stall"}))
        .await;
    assert_eq!(tool_text(&echo), "after the stall");
    drop(stalled);
}

/// A session (resumable, at `info`) whose client has stopped reading: it asked for `lines`
/// log lines of 200 bytes and reads none, so once the socket buffers on both ends are full
/// the server's writes to it are held back (and the session no longer takes its worker's
/// lines, which are dropped at the queue's bound). The client, and the session's id.
async fn stalled_session(server: &RunningServer, lines: u32, stall: Stall) -> (Client, String) {
    let (mut client, id) = session(server).await;
    let level = client
        .request("logging/setLevel", json!({"level": "info"}))
        .await;
    assert!(level.get("result").is_some(), "{level}");
    client
        .send_json(
            json!({"jsonrpc": "2.0", "id": "chatter", "method": "tools/call",
            "params": {"name": "chatter", "arguments": {"lines": lines}}}),
        )
        .await;
    let port = match client.ws.get_ref() {
        tokio_tungstenite::MaybeTlsStream::Plain(tcp) => {
            tcp.local_addr().expect("an address").port()
        }
        _ => unreachable!("a plain connection"),
    };
    match stall {
        Stall::Shut => wait_until_unread_bytes_stop_growing(port).await,
        Stall::Filling => wait_until_unread_bytes_pass(port, 64 * 1024).await,
    }
    (client, id)
}

/// How far [`stalled_session`] waits: until the receive window is shut (the unread bytes
/// hold still), or until the unread bytes pass 64 KiB, the rest of the lines close behind
/// (half a second more).
enum Stall {
    Shut,
    Filling,
}

/// Waits until more than `bytes` arrived unread on the test's TCP socket of local port
/// `port`, and half a second more.
async fn wait_until_unread_bytes_pass(port: u16, bytes: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while unread_bytes(port).is_none_or(|unread| unread <= bytes) {
        assert!(
            std::time::Instant::now() < deadline,
            "the receive queue never filled"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
}

/// The bytes that arrived on the test's TCP socket of local port `port` and were not read
/// (its receive queue, `/proc/net/tcp`), while the socket is listed.
fn unread_bytes(port: u16) -> Option<usize> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let local_port = fields.get(1)?.rsplit(':').next()?;
        (u16::from_str_radix(local_port, 16).ok()? == port)
            .then(|| usize::from_str_radix(fields.get(4)?.split(':').nth(1)?, 16).ok())?
    })
}

/// Waits until the bytes that arrived on the test's TCP socket of local port `port` and were
/// not read (its receive queue, `/proc/net/tcp`) are many and all but stop growing (by at
/// most 4 KiB in half a second: the kernel's probes of a shut window may still bring a few
/// bytes, and a loaded full run saw them break a stricter wait): the receive window is
/// closed, so the server's writes to that socket block (unblocked, they would bring
/// megabytes).
async fn wait_until_unread_bytes_stop_growing(port: u16) {
    let unread = || unread_bytes(port);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut recent = std::collections::VecDeque::new();
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the receive queue never filled: {recent:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let now = unread().expect("the test's socket is listed");
        recent.push_back(now);
        if recent.len() > 6 {
            recent.pop_front();
        }
        let grown = now - recent.front().copied().unwrap_or(0).min(now);
        if now > 64 * 1024 && recent.len() == 6 && grown <= 4096 {
            return;
        }
    }
}

/// A batch (2025-03-26) is answered in one array: a resuming client awaiting its entries
/// gets that array once, and no -32031 for an entry answered and held for it, nor for an
/// entry kept in an array sent while no socket was attached. (Counted as neither running
/// nor kept, the ping of a batch still running got -32031, then its answer again in the
/// array; and a batch answered while parked was answered twice over.)
#[tokio::test]
async fn a_resuming_client_awaiting_a_batchs_entries_gets_the_batchs_answer_once() {
    let (server, gate) = start_with_gate(resume_settings(30_000));
    let (mut client, id) = Client::resumable_at_version(&server.url(), "2025-03-26").await;
    client
        .send_json(
            json!([hold_call(json!(1)), {"jsonrpc":"2.0","id":2,"method":"ping"},
            {"jsonrpc":"2.0","id":3,"method":"tools/call",
             "params":{"name":"echo","arguments":{"text":"short"}}}]),
        )
        .await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    client
        .send_json(json!([{"jsonrpc":"2.0","id":4,"method":"ping"},
            {"jsonrpc":"2.0","id":5,"method":"tools/call",
             "params":{"name":"sleep","arguments":{"ms":200}}}]))
        .await;
    wait_metric(&server, "mcp_pool_running", 2).await;
    drop(client);
    wait_metric(&server, "mcp_parked_sessions", 1).await;
    // The second batch is answered while no socket is attached: its array is kept.
    wait_metric(&server, "mcp_pool_running", 1).await;

    let (mut client, _) = reconnect_with(
        &server,
        &[
            ("Mcp-Session-Id", &id),
            ("Mcp-Awaiting-Ids", "[1, 2, 3, 4, 5]"),
        ],
    )
    .await
    .expect("resumed");
    let kept = client.recv_text().await;
    let kept: Value = serde_json::from_str(&kept).expect("JSON");
    let mut ids: Vec<i64> = kept
        .as_array()
        .unwrap_or_else(|| panic!("the kept batch's array first: {kept}"))
        .iter()
        .map(|answer| answer["id"].as_i64().expect("an id"))
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [4, 5], "{kept}");
    gate.add_permits(1);
    let batch = client.recv_text().await;
    let batch: Value = serde_json::from_str(&batch).expect("JSON");
    let mut ids: Vec<i64> = batch
        .as_array()
        .unwrap_or_else(|| panic!("the running batch's array: {batch}"))
        .iter()
        .map(|answer| {
            assert!(answer.get("error").is_none(), "{batch}");
            answer["id"].as_i64().expect("an id")
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3], "{batch}");
    client.expect_nothing_pending().await;
}
