//! Limits on what a client can send: one message per text frame, continuation frames
//! reassembled, binary frames refused with close 1003, messages over
//! `limits.max_message_bytes` closed with 1009 (single frame or reassembled; a frame as soon
//! as its header announces more, however little of it follows), non-UTF-8 reassembled text
//! closed with 1007; a duplicate id of a request still in flight is refused
//! (-32003) without touching the original; sessions beyond `server.max_sessions` get HTTP
//! 503. After each, the server still serves new connections.

use crate::support::http::{metric, wait_metric};
use crate::support::ws::{assert_server_alive, assert_upgrade_refused_503};
use crate::support::*;
use futures_util::SinkExt;
use mcp_ws::RunningServer;
use serde_json::json;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::Message;

fn frame(payload: &[u8], opcode: OpCode, is_final: bool) -> Message {
    Message::Frame(Frame::message(payload.to_vec(), opcode, is_final))
}

const TEXT: OpCode = OpCode::Data(Data::Text);
const CONTINUE: OpCode = OpCode::Data(Data::Continue);

/// Sends one text message in fragments: a first text frame, then continuations, the last
/// one final.
async fn send_fragmented(client: &mut Client, parts: &[&[u8]]) {
    for (i, part) in parts.iter().enumerate() {
        let opcode = if i == 0 { TEXT } else { CONTINUE };
        let is_final = i + 1 == parts.len();
        client
            .ws
            .send(frame(part, opcode, is_final))
            .await
            .expect("send");
    }
}

/// The server closes this connection with `code`, having answered nothing of the offending
/// message, and goes on serving others.
async fn assert_closed_with(client: &mut Client, code: CloseCode, server: &RunningServer) {
    let close = client.recv_close().await.expect("a close frame");
    assert_eq!(close.code, code, "{close:?}");
    assert!(
        client.backlog.is_empty(),
        "nothing answered before the close: {:?}",
        client.backlog
    );
    assert_server_alive(server).await;
}

/// A ping request of exactly `len` bytes (padding inside the string id).
fn ping_of_len(len: usize) -> String {
    let skeleton = r#"{"jsonrpc":"2.0","id":"","method":"ping"}"#;
    let pad = "x".repeat(len - skeleton.len());
    format!(r#"{{"jsonrpc":"2.0","id":"{pad}","method":"ping"}}"#)
}

fn small_limit() -> mcp_ws::Settings {
    let mut s = settings();
    s.limits.max_message_bytes = 1024;
    s
}

#[tokio::test]
async fn message_at_the_limit_is_served_and_over_it_closes_1009() {
    let server = start(small_limit());
    let mut client = Client::initialized(&server).await;
    let text = ping_of_len(1024);
    client.send_text(&text).await;
    let response = client.recv().await;
    assert_eq!(response["result"], json!({}));

    client.send_text(&ping_of_len(1025)).await;
    assert_closed_with(&mut client, CloseCode::Size, &server).await;
}

#[tokio::test]
async fn continuation_frames_are_reassembled() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let text = r#"{"jsonrpc":"2.0","id":"frag","method":"tools/call","params":{"name":"echo","arguments":{"text":"é in pieces"}}}"#;
    let bytes = text.as_bytes();
    // Split inside the two-byte "é" too: reassembly works on bytes, not characters.
    let split_in_char = text.find('é').expect("é") + 1;
    let parts = [
        &bytes[..10],
        &bytes[10..split_in_char],
        &bytes[split_in_char..],
    ];
    send_fragmented(&mut client, &parts).await;
    let response = client.recv().await;
    assert_eq!(response["id"], "frag");
    assert_eq!(response["result"]["content"][0]["text"], "é in pieces");
}

#[tokio::test]
async fn reassembled_message_over_the_limit_closes_1009() {
    let server = start(small_limit());
    let mut client = Client::initialized(&server).await;
    let chunk = vec![b' '; 600];
    send_fragmented(&mut client, &[b"{", &chunk, &chunk]).await;
    assert_closed_with(&mut client, CloseCode::Size, &server).await;
}

/// A 64 KiB message limit, for frames well over it that stay quick to send.
fn limit_64k() -> mcp_ws::Settings {
    let mut s = settings();
    s.limits.max_message_bytes = 64 * 1024;
    s
}

/// Writes `bytes` on the client's socket as they are, past its WebSocket framing (which
/// writes a frame whole or not at all): a frame's header without its payload.
async fn send_raw(client: &mut Client, bytes: &[u8]) {
    let stream = client.ws.get_mut();
    stream.write_all(bytes).await.expect("write");
    stream.flush().await.expect("flush");
}

/// The header of a masked frame (`first`: FIN and opcode) announcing `len` payload bytes in
/// the 64-bit form, with its masking key.
fn header_64(first: u8, len: u64) -> Vec<u8> {
    let mut header = vec![first, 0x80 | 127];
    header.extend_from_slice(&len.to_be_bytes());
    header.extend_from_slice(&[0x12, 0x34, 0x56, 0x78]);
    header
}

/// The server closes this connection with `code` within two seconds, long before the
/// heartbeat (30 s): a server waiting for such a frame in full waits for ever, the client's
/// pongs unread behind it, until the heartbeat closes the connection with 1001. Nothing of
/// the frame is held afterwards, and other clients are served.
async fn assert_closed_at_once(client: &mut Client, code: CloseCode, server: &RunningServer) {
    let close = tokio::time::timeout(Duration::from_secs(2), client.recv_close())
        .await
        .expect("closed within two seconds")
        .expect("a close frame");
    assert_eq!(close.code, code, "{close:?}");
    assert_eq!(server.shared().perimeter.partial.in_use(), 0);
    assert_server_alive(server).await;
}

const TOO_LARGE: &str = "mcp_rejected_total{reason=\"message_too_large\"}";

#[tokio::test]
async fn one_whole_frame_far_over_the_limit_closes_1009_at_once() {
    let server = start(limit_64k());
    let mut client = Client::initialized(&server).await;
    // One text frame of 64 KiB + 1 MiB, sent whole: more than the server reads ahead of a
    // frame (a message's worth), so it can never have all of it.
    let text = ping_of_len(64 * 1024 + 1024 * 1024);
    // The server may close before taking all of it: a failed write is no failure here.
    let _ = client.ws.send(Message::text(text)).await;
    assert_closed_at_once(&mut client, CloseCode::Size, &server).await;
    assert_eq!(metric(&server, TOO_LARGE).await, 1);
}

#[tokio::test]
async fn a_frame_header_announcing_2_pow_63_bytes_closes_1009_at_once() {
    let server = start(limit_64k());
    let mut client = Client::initialized(&server).await;
    // The largest length RFC 6455 allows, and not a byte of payload; the header in two
    // writes, split inside its length.
    let header = header_64(0x81, (1 << 63) - 1);
    send_raw(&mut client, &header[..5]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    send_raw(&mut client, &header[5..]).await;
    assert_closed_at_once(&mut client, CloseCode::Size, &server).await;
    assert_eq!(metric(&server, TOO_LARGE).await, 1);
}

#[tokio::test]
async fn a_continuation_header_taking_its_message_over_the_limit_closes_1009_at_once() {
    let server = start(limit_64k());
    let mut client = Client::initialized(&server).await;
    // 60 KiB of a message, then a continuation frame announcing 8 KiB more (itself well
    // within the limit), of which only the header comes.
    client
        .ws
        .send(frame(&vec![b' '; 60 * 1024], TEXT, false))
        .await
        .expect("send");
    send_raw(&mut client, &[0x80, 0x80 | 126, 0x20, 0x00, 1, 2, 3, 4]).await;
    assert_closed_at_once(&mut client, CloseCode::Size, &server).await;
    assert_eq!(metric(&server, TOO_LARGE).await, 1);
}

#[tokio::test]
async fn a_ping_header_announcing_more_than_125_bytes_closes_1002_at_once() {
    let server = start(limit_64k());
    let mut client = Client::initialized(&server).await;
    // A control frame's payload is at most 125 bytes (RFC 6455 §5.5): a protocol error, as
    // the server says for a whole one, and not a message too large.
    send_raw(&mut client, &header_64(0x89, (1 << 63) - 1)).await;
    assert_closed_at_once(&mut client, CloseCode::Protocol, &server).await;
    assert_eq!(metric(&server, TOO_LARGE).await, 0);
}

#[tokio::test]
async fn reassembled_invalid_utf8_closes_1007() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    send_fragmented(&mut client, &[b"{\"a\":\"", &[0xff, 0xfe], b"\"}"]).await;
    assert_closed_with(&mut client, CloseCode::Invalid, &server).await;
}

#[tokio::test]
async fn binary_frames_close_1003() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .ws
        .send(Message::binary(
            br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#.to_vec(),
        ))
        .await
        .expect("send");
    assert_closed_with(&mut client, CloseCode::Unsupported, &server).await;
}

#[tokio::test]
async fn duplicate_id_in_flight_is_refused_without_cross_wiring() {
    let (server, gate) = start_with_gate(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_json(json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"hold"}}))
        .await;
    client
        .send_json(json!({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"dup"}}}))
        .await;
    // Also an inline method with the same id: refused the same way.
    client
        .send_json(json!({"jsonrpc":"2.0","id":7,"method":"ping"}))
        .await;
    for _ in 0..2 {
        let response = client.recv().await;
        assert_error(&response, &json!(7), -32003);
    }
    // The original is answered once, with its own result.
    gate.add_permits(1);
    let response = client.recv().await;
    assert_eq!(response["result"]["content"][0]["text"], "released");
    client.expect_nothing_pending().await;
    // Once finished, the same request again is a retry: its stored response, without running
    // (the gate has no permit left, so a second run would hang); anything else under that id
    // is a conflict (-32019), not a new request.
    let retried = client
        .request_with_id(json!(7), "tools/call", json!({"name":"hold"}))
        .await;
    assert_eq!(retried["result"]["content"][0]["text"], "released");
    let response = client.request_with_id(json!(7), "ping", json!({})).await;
    assert_error(&response, &json!(7), -32019);
}

#[tokio::test]
async fn sessions_beyond_the_cap_get_503() {
    let mut s = settings();
    s.server.max_sessions = 2;
    let server = start(s);
    let mut first = Client::initialized(&server).await;
    let _second = Client::initialized(&server).await;
    assert_upgrade_refused_503(&server.url()).await;
    // A normal close ends the session and frees its place (a dropped socket would keep it
    // for a reconnect: tests/it/resume.rs).
    first.ws.close(None).await.expect("close");
    wait_metric(&server, "mcp_sessions", 1).await;
    assert_server_alive(&server).await;
}
