//! A WebSocket connection after its handshake, served without actix-http's HTTP/1
//! dispatcher (`server::upgraded`), over a real socket:
//! - frames the client sent in the same write as its handshake (before the `101`) are read
//!   and answered;
//! - a message larger than a read, and more of them than the request's payload holds
//!   before the socket is no longer read (32 KiB), arrive whole and in order;
//! - an upgrade refused is answered as HTTP/1 (its whole body, as its `Content-Length`
//!   says) and its connection closed;
//! - a client gone (its socket shut) ends its session's socket (the session parked for a
//!   resume), and the server keeps serving;
//! - a connection whose session closed, and whose client never closes its side, is dropped
//!   once the server's linger is over: its place among its address's connections given
//!   back.

use crate::support::http::{metric, wait_metric};
use crate::support::*;
use mcp_ws::RunningServer;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A client's text frame (masked, as RFC 6455 requires of a client) holding `text`.
fn client_text_frame(text: &str) -> Vec<u8> {
    client_frame(0x1, text.as_bytes())
}

/// A client's final frame of `opcode` holding `payload`, masked.
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x80 | opcode];
    match payload.len() {
        len @ 0..=125 => frame.push(0x80 | len as u8),
        len @ 126..=0xffff => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(len as u16).to_be_bytes());
        }
        len => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// The handshake of a new session, as text.
fn handshake(server: &RunningServer) -> String {
    format!(
        "GET /mcp HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Protocol: mcp\r\n\r\n",
        server.addr()
    )
}

/// The handshake of a new session followed by its `initialize` request (id 1), as one
/// write's bytes.
fn handshake_and_initialize(server: &RunningServer) -> Vec<u8> {
    let mut bytes = handshake(server).into_bytes();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": initialize_params("2025-11-25")});
    bytes.extend(client_text_frame(&init.to_string()));
    bytes
}

/// Reads the response head (to its empty line) byte by byte, so that nothing after it is
/// taken.
async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let byte = tokio::time::timeout(READ_TIMEOUT, stream.read_u8())
            .await
            .expect("the head in time")
            .expect("a response head");
        head.push(byte);
    }
    String::from_utf8(head).expect("a head in UTF-8")
}

/// Reads one of the server's frames (unmasked, not fragmented): its opcode and payload.
async fn read_frame(stream: &mut TcpStream) -> (u8, Vec<u8>) {
    let read = async {
        let first = stream.read_u8().await?;
        let len = match stream.read_u8().await? & 0x7f {
            126 => u64::from(stream.read_u16().await?),
            127 => stream.read_u64().await?,
            len => u64::from(len),
        };
        let mut payload = vec![0; usize::try_from(len).expect("a frame's length")];
        stream.read_exact(&mut payload).await?;
        std::io::Result::Ok((first & 0x0f, payload))
    };
    tokio::time::timeout(READ_TIMEOUT, read)
        .await
        .expect("a frame in time")
        .expect("a frame")
}

/// Reads frames until the answer to request `id`, skipping notifications.
async fn read_answer(stream: &mut TcpStream, id: i64) -> Value {
    loop {
        let (opcode, payload) = read_frame(stream).await;
        assert_eq!(opcode, 1, "a text frame");
        let message: Value = serde_json::from_slice(&payload).expect("JSON");
        if message["id"] == json!(id) {
            return message;
        }
    }
}

#[tokio::test]
async fn frames_sent_with_the_handshake_are_answered() {
    let server = start(settings());
    let mut stream = TcpStream::connect(server.addr()).await.expect("connect");
    // The handshake and three messages in one write: the frames reach the server with
    // the head, before it answered it.
    let mut bytes = handshake_and_initialize(&server);
    bytes.extend(client_text_frame(
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
    ));
    bytes.extend(client_text_frame(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "early"}}})
        .to_string(),
    ));
    stream.write_all(&bytes).await.expect("written");
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let answer = read_answer(&mut stream, 1).await;
    assert_eq!(
        answer["result"]["protocolVersion"], "2025-11-25",
        "{answer}"
    );
    let answer = read_answer(&mut stream, 2).await;
    assert_eq!(answer["result"]["content"][0]["text"], "early", "{answer}");
}

#[tokio::test]
async fn messages_larger_than_a_read_and_than_the_payload_holds_arrive_whole_in_order() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    // 200 KiB each, three in a row: each spans many reads, and together they are more
    // than the payload holds before the socket waits for its reader.
    let texts: Vec<String> = (0..3u8)
        .map(|n| {
            (0..200 * 1024)
                .map(|i| char::from(b'a' + (n * 7 + (i % 26) as u8) % 26))
                .collect()
        })
        .collect();
    for (id, text) in texts.iter().enumerate() {
        client
            .send_json(
                json!({"jsonrpc": "2.0", "id": id + 10, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": text}}}),
            )
            .await;
    }
    for (id, text) in texts.iter().enumerate() {
        let answer = client.recv_response(&json!(id + 10)).await;
        assert_eq!(
            answer["result"]["content"][0]["text"].as_str(),
            Some(text.as_str()),
            "the answer to {}",
            id + 10
        );
    }
}

#[tokio::test]
async fn a_refused_upgrade_is_answered_whole_and_its_connection_closed() {
    let mut settings = settings();
    settings.auth.required = true;
    settings.auth.api_keys = vec![api_key("ci", "a-key-the-client-does-not-send", &[])];
    let server = start(settings);
    let mut stream = TcpStream::connect(server.addr()).await.expect("connect");
    stream
        .write_all(handshake(&server).as_bytes())
        .await
        .expect("written");
    let mut raw = Vec::new();
    tokio::time::timeout(READ_TIMEOUT, stream.read_to_end(&mut raw))
        .await
        .expect("the connection closed in time")
        .expect("read");
    let raw = String::from_utf8(raw).expect("UTF-8");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .expect("a Content-Length");
    assert_eq!(body.len(), length, "{raw}");
    let error: Value = serde_json::from_str(body).expect("a JSON body");
    assert!(error["error"]["code"].is_i64(), "{error}");
}

#[tokio::test]
async fn a_client_gone_ends_its_socket_and_the_server_serves_on() {
    let server = start(settings());
    let mut stream = TcpStream::connect(server.addr()).await.expect("connect");
    let bytes = handshake_and_initialize(&server);
    stream.write_all(&bytes).await.expect("written");
    assert!(read_head(&mut stream).await.starts_with("HTTP/1.1 101"));
    read_answer(&mut stream, 1).await;
    assert_eq!(metric(&server, "mcp_parked_sessions").await, 0);
    // The client shuts its side and goes: the server reads the end, the socket ends, and
    // its session is parked for a resume.
    stream.shutdown().await.expect("shut down");
    drop(stream);
    wait_metric(&server, "mcp_parked_sessions", 1).await;
    let mut client = Client::initialized(&server).await;
    let answer = client.request("ping", json!({})).await;
    assert_result(&answer, &answer["id"]);
}

#[tokio::test]
async fn a_closed_connection_whose_client_never_closes_is_dropped_after_the_linger() {
    let mut settings = settings();
    settings.server.max_connections_per_ip = Some(1);
    let server = start(settings);
    let mut stream = TcpStream::connect(server.addr()).await.expect("connect");
    let mut bytes = handshake_and_initialize(&server);
    // The client closes the session (1000) and then neither closes nor reads its socket.
    bytes.extend(client_frame(0x8, &1000u16.to_be_bytes()));
    stream.write_all(&bytes).await.expect("written");
    assert!(read_head(&mut stream).await.starts_with("HTTP/1.1 101"));
    read_answer(&mut stream, 1).await;
    let (opcode, _) = read_frame(&mut stream).await;
    assert_eq!(opcode, 0x8, "the server's close frame");
    // The server has shut its side; it still holds the connection, and so its address's
    // one place, while it lingers.
    let mut end = [0u8; 1];
    let read = tokio::time::timeout(READ_TIMEOUT, stream.read(&mut end)).await;
    assert_eq!(read.expect("the end in time").expect("read"), 0);
    let admitted = |server: &RunningServer| {
        let addr = server.addr();
        let handshake = handshake(server);
        async move {
            let mut other = TcpStream::connect(addr).await.ok()?;
            other.write_all(handshake.as_bytes()).await.ok()?;
            let mut head = [0u8; 12];
            tokio::time::timeout(READ_TIMEOUT, other.read_exact(&mut head))
                .await
                .ok()?
                .ok()?;
            Some(head.starts_with(b"HTTP/1.1 101"))
        }
    };
    assert_ne!(
        admitted(&server).await,
        Some(true),
        "refused while it lingers"
    );
    // Within the linger (5 s) and some slack, the place is given back.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        if admitted(&server).await == Some(true) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lingering connection never dropped"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    drop(stream);
}
