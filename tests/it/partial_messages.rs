//! Messages a client has only partly sent: all of them together, over every connection, are
//! bounded by `limits.max_partial_bytes` (past it: WebSocket close 1009, HTTP 413, counted as
//! `partial_budget`), and each must be whole within `limits.partial_timeout_ms` (WebSocket:
//! from its first fragment, pings meanwhile or not, close 1008; HTTP: a body from the end of
//! the headers, 408; counted as `partial_deadline`). What a connection held is given back
//! when its message completes or the connection ends. A text frame that is not UTF-8 closes
//! with 1007.

use crate::support::http::{metric, wait_metric};
use crate::support::ws::assert_server_alive;
use crate::support::*;
use futures_util::SinkExt;
use mcp_ws::{RunningServer, Settings};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::Message;

const TEXT: OpCode = OpCode::Data(Data::Text);
const CONTINUE: OpCode = OpCode::Data(Data::Continue);

fn rejected(reason: &str) -> String {
    format!("mcp_rejected_total{{reason=\"{reason}\"}}")
}

async fn send_frame(client: &mut Client, payload: &[u8], opcode: OpCode, is_final: bool) {
    let frame = Frame::message(payload.to_vec(), opcode, is_final);
    client.ws.send(Message::Frame(frame)).await.expect("send");
}

/// Bytes of partly received messages the server holds now.
fn in_use(server: &RunningServer) -> usize {
    server.shared().perimeter.partial.in_use()
}

/// Waits (bounded) until the server holds exactly `bytes` of partly received messages.
async fn wait_in_use(server: &RunningServer, bytes: usize) {
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while in_use(server) != bytes {
        assert!(
            tokio::time::Instant::now() < deadline,
            "partly received bytes stayed at {}, expected {bytes}",
            in_use(server)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A 1 KiB message limit and a budget of two such messages (no share per address: these
/// tests connect from one).
fn small_budget() -> Settings {
    let mut s = settings();
    s.limits.max_message_bytes = 1024;
    s.limits.max_partial_bytes = 2048;
    s.limits.max_partial_bytes_per_ip = Some(0);
    s
}

/// A ping of `len` bytes, padded with spaces after its JSON.
fn padded_ping(id: u32, len: usize) -> Vec<u8> {
    let mut text = json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
        .to_string()
        .into_bytes();
    text.resize(len, b' ');
    text
}

#[tokio::test]
async fn fragmented_messages_share_the_budget_and_give_it_back() {
    let server = start(small_budget());
    let mut holder = Client::initialized(&server).await;
    let ping = padded_ping(1, 1000);
    // 900 + 900 of two unfinished messages: within the budget.
    send_frame(&mut holder, &ping[..900], TEXT, false).await;
    let mut second = Client::initialized(&server).await;
    send_frame(&mut second, &padded_ping(2, 1000)[..900], TEXT, false).await;
    wait_in_use(&server, 1800).await;

    // 300 more on a third connection would pass it: that connection is closed, the others
    // keep theirs.
    let mut third = Client::initialized(&server).await;
    send_frame(&mut third, &padded_ping(3, 1000)[..300], TEXT, false).await;
    let close = third.recv_close().await.expect("a close frame");
    assert_eq!(close.code, CloseCode::Size, "{close:?}");
    assert_eq!(metric(&server, &rejected("partial_budget")).await, 1);
    assert_eq!(metric(&server, &rejected("message_too_large")).await, 0);
    wait_in_use(&server, 1800).await;

    // A message that completes gives its bytes back, and is answered.
    send_frame(&mut holder, &ping[900..], CONTINUE, true).await;
    assert_result(&holder.recv().await, &json!(1));
    wait_in_use(&server, 900).await;
    // So does a connection that goes away mid-message.
    second.hang_up().await;
    wait_in_use(&server, 0).await;
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn a_message_unfinished_past_the_deadline_closes_1008_though_pings_go_on() {
    let mut s = settings();
    s.limits.partial_timeout_ms = 300;
    let server = start(s);
    let mut client = Client::initialized(&server).await;
    // A message sent in one go is served however long the connection lives.
    client
        .send_json(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        .await;
    assert_result(&client.recv().await, &json!(1));

    send_frame(&mut client, br#"{"jsonrpc":"2.0","#, TEXT, false).await;
    wait_in_use(&server, 17).await;
    // Signs of life do not extend the message's time.
    client
        .ws
        .send(Message::Ping(vec![1].into()))
        .await
        .expect("ping");
    let close = client.recv_close().await.expect("a close frame");
    assert_eq!(close.code, CloseCode::Policy, "{close:?}");
    assert_eq!(metric(&server, &rejected("partial_deadline")).await, 1);
    wait_in_use(&server, 0).await;
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn a_single_text_frame_that_is_not_utf8_closes_1007() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    send_frame(&mut client, b"{\"a\":\"\xff\xfe\"}", TEXT, true).await;
    let close = client.recv_close().await.expect("a close frame");
    assert_eq!(close.code, CloseCode::Invalid, "{close:?}");
    assert_server_alive(&server).await;
}

/// Opens a raw connection and sends a POST's headers for a body of `length` bytes, and
/// `sent` of them.
async fn post_partly(server: &RunningServer, length: usize, sent: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr()).await.expect("connect");
    let addr = server.addr();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream.write_all(sent).await.expect("write");
    stream
}

/// The status and JSON body of the answer on a raw connection (read to its end).
async fn read_answer(stream: &mut TcpStream) -> (u16, Value) {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    loop {
        let read = tokio::time::timeout_at(deadline, stream.read(&mut chunk))
            .await
            .expect("an answer in time")
            .expect("read");
        raw.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&raw);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .expect("a content-length");
            if body.len() >= length {
                let status = head.split_whitespace().nth(1).expect("status");
                let json = serde_json::from_str(&body[..length]).expect("a JSON body");
                return (status.parse().expect("status"), json);
            }
        }
        assert!(read > 0, "connection closed before the answer: {text}");
    }
}

#[tokio::test]
async fn a_body_not_received_within_the_deadline_gets_408() {
    let mut s = settings();
    s.limits.partial_timeout_ms = 300;
    let server = start(s);
    let mut stream = post_partly(&server, 100, b"{\"jsonrpc\"").await;
    let (status, body) = read_answer(&mut stream).await;
    assert_eq!(status, 408, "{body}");
    assert_error(&body, &Value::Null, -32000);
    assert_eq!(metric(&server, &rejected("partial_deadline")).await, 1);
    wait_in_use(&server, 0).await;
}

#[tokio::test]
async fn bodies_being_read_share_the_budget_and_give_it_back() {
    let server = start(small_budget());
    let mut padded = serde_json::to_vec(&request(
        json!(1),
        "initialize",
        initialize_params("2025-06-18"),
    ))
    .expect("json");
    padded.resize(1000, b' ');
    let mut first = post_partly(&server, 1000, &padded[..900]).await;
    let _second = post_partly(&server, 1000, &padded[..900]).await;
    wait_in_use(&server, 1800).await;

    // 300 more would pass it: refused, the others keep theirs.
    let mut third = post_partly(&server, 300, &padded[..300]).await;
    let (status, refusal) = read_answer(&mut third).await;
    assert_eq!(status, 413, "{refusal}");
    assert_error(&refusal, &Value::Null, -32000);
    wait_metric(&server, &rejected("partial_budget"), 1).await;

    // The first body, completed, is served; the second's connection gone, nothing is held.
    first.write_all(&padded[900..]).await.expect("write");
    let (status, answer) = read_answer(&mut first).await;
    assert_eq!(status, 200, "{answer}");
    assert_result(&answer, &json!(1));
    drop(_second);
    wait_in_use(&server, 0).await;
}

/// One client address's connections hold no more than its share of the budget: past it its
/// next message is refused (1009, HTTP 413), while another address's go on. (364
/// connections of one address held the whole budget, and every other client's next
/// message, a 40-byte ping too, was refused until their partial timeout.)
#[tokio::test]
async fn one_address_holds_no_more_than_its_share_of_the_budget() {
    const KIB: usize = 1024;
    let mut s = settings();
    s.limits.max_message_bytes = 256 * KIB;
    s.limits.max_partial_bytes = 1024 * KIB;
    s.limits.max_partial_bytes_per_ip = Some(256 * KIB);
    let server = start(s);
    let mut holder = Client::initialized(&server).await;
    let mut crowd = Client::initialized(&server).await;
    send_frame(
        &mut holder,
        &padded_ping(1, 250 * KIB)[..200 * KIB],
        TEXT,
        false,
    )
    .await;
    wait_in_use(&server, 200 * KIB).await;
    // 127.0.0.1 again: 100 KiB more pass its share.
    send_frame(
        &mut crowd,
        &padded_ping(2, 250 * KIB)[..100 * KIB],
        TEXT,
        false,
    )
    .await;
    let close = crowd.recv_close().await.expect("a close frame");
    assert_eq!(close.code, CloseCode::Size, "{close:?}");
    // So does an HTTP body, however small, counted in the share while it waits for more of
    // itself (a body was counted only past 64 KiB: many small ones held open from one
    // address filled the budget): 30 KiB fit (230 of 256), 30 more do not.
    let small = post_partly(&server, 40 * KIB, &padded_ping(3, 40 * KIB)[..30 * KIB]).await;
    wait_in_use(&server, 230 * KIB).await;
    let mut body = post_partly(&server, 40 * KIB, &padded_ping(5, 40 * KIB)[..30 * KIB]).await;
    let (status, refusal) = read_answer(&mut body).await;
    assert_eq!(status, 413, "{refusal}");
    wait_metric(&server, &rejected("partial_budget"), 2).await;
    // Another address's message is received, though the budget holds 127.0.0.1's.
    let mut other = Client::initialized_from(&server, [127, 0, 0, 2]).await;
    let ping = padded_ping(4, 250 * KIB);
    send_frame(&mut other, &ping[..200 * KIB], TEXT, false).await;
    wait_in_use(&server, 430 * KIB).await;
    send_frame(&mut other, &ping[200 * KIB..], CONTINUE, true).await;
    assert_result(&other.recv().await, &json!(4));
    holder.hang_up().await;
    drop(small);
    wait_in_use(&server, 0).await;
}
