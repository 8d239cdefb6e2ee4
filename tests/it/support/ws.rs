//! A WebSocket client of the server under test (offering the `mcp` subprotocol), and the
//! checks made through one.

use super::meta::assert_session_result;
use super::{initialize_params, request, READ_TIMEOUT};
use futures_util::{SinkExt, StreamExt};
use mcp_ws::RunningServer;
use serde_json::{json, Value};
use std::collections::VecDeque;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub struct Client {
    pub ws: Ws,
    /// Frames received while waiting for something else (e.g. notifications).
    pub backlog: VecDeque<Value>,
    next_id: i64,
}

impl Client {
    /// Connects offering the `mcp` subprotocol.
    pub async fn connect(server: &RunningServer) -> Self {
        Self::connect_url(&server.url()).await
    }

    pub async fn connect_url(url: &str) -> Self {
        Self::connect_url_as(url, None).await
    }

    /// Connects with `Authorization: Bearer <token>` when there is a token.
    pub async fn connect_url_as(url: &str, token: Option<&str>) -> Self {
        let mut request = url.into_client_request().expect("request");
        request
            .headers_mut()
            .insert("Sec-WebSocket-Protocol", "mcp".parse().expect("header"));
        if let Some(token) = token {
            request.headers_mut().insert(
                "Authorization",
                format!("Bearer {token}").parse().expect("header"),
            );
        }
        let (ws, response) = tokio_tungstenite::connect_async(request)
            .await
            .expect("websocket connects");
        assert_eq!(
            response
                .headers()
                .get("sec-websocket-protocol")
                .and_then(|v| v.to_str().ok()),
            Some("mcp"),
            "the server selects the offered subprotocol"
        );
        Self::from_ws(ws)
    }

    /// A client over a connection opened some other way.
    pub fn from_ws(ws: Ws) -> Self {
        Self {
            ws,
            backlog: VecDeque::new(),
            next_id: 1000,
        }
    }

    /// Connects and completes the handshake on the newest version.
    pub async fn initialized(server: &RunningServer) -> Self {
        Self::initialized_with_version(server, "2025-11-25").await
    }

    pub async fn initialized_with_version(server: &RunningServer, version: &str) -> Self {
        Self::initialized_at(&server.url(), None, version).await
    }

    /// Connects with `token` (see [`connect_url_as`](Self::connect_url_as)) and completes the
    /// handshake on the newest version.
    pub async fn initialized_as(server: &RunningServer, token: &str) -> Self {
        Self::initialized_at(&server.url(), Some(token), "2025-11-25").await
    }

    /// Connects to `url` and completes the handshake on the newest version; the client, and
    /// the id its session is resumed by (`_meta["mcp-ws/sessionId"]` of the `initialize`
    /// result).
    pub async fn resumable_at(url: &str) -> (Self, String) {
        Self::resumable_at_version(url, "2025-11-25").await
    }

    /// As [`resumable_at`](Self::resumable_at), the session on protocol `version`.
    pub async fn resumable_at_version(url: &str, version: &str) -> (Self, String) {
        let mut client = Self::connect_url(url).await;
        let response = client
            .request_with_id(json!(0), "initialize", initialize_params(version))
            .await;
        let id = response["result"]["_meta"]["mcp-ws/sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("the initialize result gives a resume id: {response}"))
            .to_owned();
        client
            .send_json(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
            .await;
        (client, id)
    }

    /// Connects to `url` (with `token`, if any) and completes the handshake on `version`.
    pub async fn initialized_at(url: &str, token: Option<&str>, version: &str) -> Self {
        let mut client = Self::connect_url_as(url, token).await;
        let response = client
            .request_with_id(json!(0), "initialize", initialize_params(version))
            .await;
        assert_eq!(response["result"]["protocolVersion"], version, "{response}");
        client
            .send_json(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
            .await;
        client
    }

    /// Connects from the loopback address `from` (127.0.0.0/8: another client address, as
    /// the server counts them) and completes the handshake on the newest version.
    pub async fn initialized_from(server: &RunningServer, from: [u8; 4]) -> Self {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind(std::net::SocketAddr::from((from, 0)))
            .expect("bind a loopback source address");
        let stream = socket.connect(server.addr()).await.expect("connect");
        let mut request = server.url().into_client_request().expect("request");
        request
            .headers_mut()
            .insert("Sec-WebSocket-Protocol", "mcp".parse().expect("header"));
        let (ws, _) = tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(stream))
            .await
            .expect("websocket connects");
        let mut client = Self::from_ws(ws);
        let response = client
            .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
            .await;
        assert!(response.get("result").is_some(), "{response}");
        client
            .send_json(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
            .await;
        client
    }

    pub async fn send_text(&mut self, text: &str) {
        self.ws
            .send(Message::text(text.to_owned()))
            .await
            .expect("send");
    }

    pub async fn send_json(&mut self, value: Value) {
        self.send_text(&value.to_string()).await;
    }

    /// The next frame of any kind (pings included), within [`READ_TIMEOUT`].
    pub async fn next_frame(&mut self) -> Message {
        self.next_frame_by(tokio::time::Instant::now() + READ_TIMEOUT)
            .await
    }

    /// The next frame of any kind, before `deadline`.
    pub async fn next_frame_by(&mut self, deadline: tokio::time::Instant) -> Message {
        tokio::time::timeout_at(deadline, self.ws.next())
            .await
            .expect("a frame arrives in time")
            .expect("the connection is open")
            .expect("a valid frame")
    }

    /// The next text frame as raw text, skipping pings. The timeout covers the whole wait,
    /// so a server that keeps pinging cannot stretch it.
    pub async fn recv_text(&mut self) -> String {
        let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
        loop {
            match self.next_frame_by(deadline).await {
                Message::Text(text) => return text.to_string(),
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("expected a text frame, got {other:?}"),
            }
        }
    }

    /// The next JSON message (from the backlog first).
    pub async fn recv(&mut self) -> Value {
        if let Some(value) = self.backlog.pop_front() {
            return value;
        }
        let text = self.recv_text().await;
        serde_json::from_str(&text).expect("the server sends valid JSON")
    }

    /// Waits for the response with `id`, keeping other frames in the backlog.
    pub async fn recv_response(&mut self, id: &Value) -> Value {
        if let Some(pos) = self.backlog.iter().position(|m| m.get("id") == Some(id)) {
            return self.backlog.remove(pos).expect("present");
        }
        loop {
            let text = self.recv_text().await;
            let value: Value = serde_json::from_str(&text).expect("valid JSON");
            if value.get("id") == Some(id) && value.get("method").is_none() {
                return value;
            }
            self.backlog.push_back(value);
        }
    }

    pub async fn request_with_id(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send_json(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
            .await;
        self.recv_response(&id).await
    }

    /// Sends a request with a fresh integer id and returns its response.
    pub async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.fresh_id();
        self.request_with_id(id, method, params).await
    }

    pub fn fresh_id(&mut self) -> Value {
        self.next_id += 1;
        json!(self.next_id)
    }

    pub async fn call_tool(&mut self, name: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// Proves that nothing else is pending: sends a `ping` with a fresh id and returns every
    /// frame that arrived before its answer (the test asserts on them). Frames already in
    /// the backlog are included.
    pub async fn drain_until_barrier(&mut self) -> Vec<Value> {
        let id = json!(format!("barrier-{}", self.next_id));
        self.next_id += 1;
        self.send_json(json!({"jsonrpc":"2.0","id":id,"method":"ping"}))
            .await;
        let mut before: Vec<Value> = self.backlog.drain(..).collect();
        loop {
            let text = self.recv_text().await;
            let value: Value = serde_json::from_str(&text).expect("valid JSON");
            if value.get("id") == Some(&id) {
                assert_eq!(value["result"], json!({}), "barrier ping answered");
                return before;
            }
            before.push(value);
        }
    }

    /// Asserts that nothing is pending (every frame that came before the barrier).
    pub async fn expect_nothing_pending(&mut self) {
        let extra = self.drain_until_barrier().await;
        assert!(extra.is_empty(), "unexpected frames: {extra:?}");
    }

    /// Sends a whole request (its id in it) and returns the response to it.
    pub async fn send_request(&mut self, message: Value) -> Value {
        let id = message["id"].clone();
        self.send_json(message).await;
        self.recv_response(&id).await
    }

    pub async fn read_resource(&mut self, uri: &str) -> Value {
        self.request("resources/read", json!({ "uri": uri })).await
    }

    /// Ends the session the way a client does: a close frame without a code (a connection
    /// that drops without one may be parked for a resume instead).
    pub async fn hang_up(mut self) {
        let _ = self.ws.close(None).await;
        // The server's close completes the handshake; dropping before it could reset the
        // connection under the close frame.
        let _ = self.recv_close().await;
    }

    /// Reads until the server closes; returns the close frame (None if the TCP stream ended
    /// without one). Text frames met on the way are kept in the backlog.
    pub async fn recv_close(&mut self) -> Option<CloseFrame> {
        let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
        loop {
            let next = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .expect("the server closes in time");
            match next {
                Some(Ok(Message::Close(frame))) => return frame,
                Some(Ok(Message::Text(text))) => {
                    let value = serde_json::from_str(&text).expect("valid JSON");
                    self.backlog.push_back(value);
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return None,
            }
        }
    }
}

/// Asserts that a WebSocket upgrade to `url` is refused with HTTP 503 and `Retry-After: 1`.
pub async fn assert_upgrade_refused_503(url: &str) {
    assert_upgrade_refused(url, 503, "1").await;
}

/// Asserts that a WebSocket upgrade to `url` is refused with `status` and `Retry-After:
/// retry_after`; returns the refusal's body.
pub async fn assert_upgrade_refused(url: &str, status: u16, retry_after: &str) -> String {
    match tokio_tungstenite::connect_async(url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), status);
            assert_eq!(
                response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok()),
                Some(retry_after)
            );
            String::from_utf8_lossy(response.body().as_deref().unwrap_or_default()).into_owned()
        }
        other => panic!(
            "expected HTTP {status}, got {:?}",
            other.map(|(_, r)| r.status())
        ),
    }
}

/// A new connection still completes the handshake: the server survived what came before.
pub async fn assert_server_alive(server: &RunningServer) {
    let mut client = Client::initialized(server).await;
    let response = client.request("ping", json!({})).await;
    assert_eq!(response["result"], json!({}));
}

/// Sends a request on `client` and returns `(response, frames that came before it)`; the
/// client's backlog must be empty to start with.
pub async fn exchange(client: &mut Client, method: &str, params: Value) -> (Value, Vec<Value>) {
    assert!(
        client.backlog.is_empty(),
        "frames left over: {:?}",
        client.backlog
    );
    let id = client.fresh_id();
    client.send_json(request(id.clone(), method, params)).await;
    let response = client.recv_response(&id).await;
    let before = client.backlog.drain(..).collect();
    (response, before)
}

/// Initializes `client` on 2025-11-25 declaring exactly `capabilities`.
pub async fn initialize_with(client: &mut Client, capabilities: Value) {
    let response = client
        .request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                   "clientInfo": {"name": "session-side", "version": "1.0.0"}}),
        )
        .await;
    let id = response["id"].clone();
    let result = assert_session_result(&response, &id);
    assert_eq!(result["protocolVersion"], "2025-11-25", "{response}");
    client
        .send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
}

/// A request whose answer must come with nothing before it (no progress, log line or request
/// to the client); returns `(id, response)`.
pub async fn call(client: &mut Client, method: &str, params: Value) -> (Value, Value) {
    let (response, before) = exchange(client, method, params).await;
    assert!(before.is_empty(), "frames before the answer: {before:?}");
    let id = response["id"].clone();
    (id, response)
}
