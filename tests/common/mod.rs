//! Test helpers: start the real server on `127.0.0.1:0` (its own thread and actix system),
//! talk to it through a real WebSocket client, read its metrics over HTTP.
//! Every receive has a timeout, so a missing answer fails the test instead of hanging it.

#![allow(dead_code)] // each test binary uses a different subset

pub mod process;

use futures_util::{SinkExt, StreamExt};
use mcp_ws::model::CallToolResult;
use mcp_ws::tool::{Arguments, ToolFuture, ToolHandler};
use mcp_ws::{RequestContext, RunningServer, Server, ServerBuilder, Settings, Tool, ToolError};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Defaults, on an ephemeral port, one worker thread, quiet logs.
pub fn settings() -> Settings {
    let mut s = Settings::default();
    s.server.listen = "127.0.0.1:0".parse().expect("addr");
    s.server.workers = 1;
    s
}

/// The demo set, as the binary serves it by default.
pub fn start(settings: Settings) -> RunningServer {
    start_with(settings, |builder| builder)
}

/// The demo set plus whatever `extra` adds, through the public builder.
pub fn start_with(
    settings: Settings,
    extra: impl FnOnce(ServerBuilder) -> ServerBuilder,
) -> RunningServer {
    mcp_ws::telemetry::init("warn");
    extra(mcp_ws::builtins::demo(Server::builder().settings(settings)))
        .build()
        .expect("server builds")
        .spawn()
        .expect("server starts")
}

/// The built-in tools plus `hold` (see [`Hold`]); returns the server and the gate.
pub fn start_with_gate(settings: Settings) -> (RunningServer, Arc<Semaphore>) {
    let gate = Arc::new(Semaphore::new(0));
    let hold = Tool::from_handler(
        "hold",
        "Waits until the test opens the gate.",
        json!({"type": "object"}),
        Hold(gate.clone()),
    );
    (start_with(settings, |b| b.tool(hold)), gate)
}

/// A tool that finishes only when the test adds a permit to its gate: work "in flight" for
/// exactly as long as the test wants, with no timing involved.
pub struct Hold(pub Arc<Semaphore>);

impl ToolHandler for Hold {
    fn call(&self, _arguments: Arguments, _ctx: RequestContext) -> ToolFuture {
        let gate = self.0.clone();
        Box::pin(async move {
            let _permit = gate
                .acquire()
                .await
                .map_err(|_| ToolError::Failed("gate closed".into()))?;
            Ok(CallToolResult::text("released"))
        })
    }
}

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
        let mut request = url.into_client_request().expect("request");
        request
            .headers_mut()
            .insert("Sec-WebSocket-Protocol", "mcp".parse().expect("header"));
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
        let mut client = Self::connect(server).await;
        let response = client
            .request_with_id(json!(0), "initialize", initialize_params(version))
            .await;
        assert_eq!(response["result"]["protocolVersion"], version, "{response}");
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

    /// The next text frame as raw text, skipping pings. The timeout covers the whole wait,
    /// so a server that keeps pinging cannot stretch it.
    pub async fn recv_text(&mut self) -> String {
        let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
        loop {
            let frame = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .expect("a frame arrives in time")
                .expect("the connection is open")
                .expect("a valid frame");
            match frame {
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

pub fn initialize_params(version: &str) -> Value {
    json!({
        "protocolVersion": version,
        "capabilities": {"roots": {"listChanged": true}, "sampling": {}},
        "clientInfo": {"name": "mcp-ws-tests", "version": "1.0.0"}
    })
}

/// Asserts a JSON-RPC error response with this id and code; returns the error object.
pub fn assert_error(response: &Value, id: &Value, code: i64) -> Value {
    assert_eq!(response["jsonrpc"], "2.0", "{response}");
    assert_eq!(&response["id"], id, "{response}");
    assert!(
        response.get("result").is_none(),
        "error and result together: {response}"
    );
    assert_eq!(response["error"]["code"], code, "{response}");
    assert!(response["error"]["message"].is_string(), "{response}");
    response["error"].clone()
}

/// Asserts a success response with this id; returns the result.
pub fn assert_result(response: &Value, id: &Value) -> Value {
    assert_eq!(response["jsonrpc"], "2.0", "{response}");
    assert_eq!(&response["id"], id, "{response}");
    assert!(
        response.get("error").is_none(),
        "unexpected error: {response}"
    );
    response["result"].clone()
}

/// A minimal HTTP/1.1 GET over a fresh connection: (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(READ_TIMEOUT, stream.read_to_end(&mut raw))
        .await
        .expect("response in time")
        .expect("read");
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Reads one metric from `/metrics`.
pub async fn metric(server: &RunningServer, name: &str) -> u64 {
    let (status, body) = http_get(server.addr(), "/metrics").await;
    assert_eq!(status, 200);
    body.lines()
        .find_map(|line| {
            let (key, value) = line.split_once(' ')?;
            (key == name).then(|| value.trim().parse().ok()).flatten()
        })
        .unwrap_or_else(|| panic!("metric {name} missing"))
}

/// Stops `server` on a blocking thread (`stop()` waits for the server thread to end), so the
/// test goes on talking to it meanwhile; [`assert_stopped`] waits for the end.
pub fn stop_in_background(server: RunningServer) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_blocking(move || server.stop())
}

/// Fails unless the stop begun by [`stop_in_background`] ends within READ_TIMEOUT.
pub async fn assert_stopped(stopper: tokio::task::JoinHandle<()>) {
    tokio::time::timeout(READ_TIMEOUT, stopper)
        .await
        .expect("stop() returns: the server thread ends")
        .expect("stop() does not panic");
}

/// Polls a metric until it equals `expected` (state changes cross threads, e.g. after a
/// disconnect); fails after READ_TIMEOUT. Polling, not sleeping a fixed time.
pub async fn wait_metric(server: &RunningServer, name: &str, expected: u64) {
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    loop {
        let value = metric(server, name).await;
        if value == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "metric {name} stayed at {value}, expected {expected}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Asserts that a WebSocket upgrade to `url` is refused with HTTP 503 and `Retry-After: 1`.
pub async fn assert_upgrade_refused_503(url: &str) {
    match tokio_tungstenite::connect_async(url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 503);
            assert_eq!(
                response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok()),
                Some("1")
            );
        }
        other => panic!(
            "expected HTTP 503, got {:?}",
            other.map(|(_, r)| r.status())
        ),
    }
}

/// Arguments of test tools that take none.
#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct NoArgs {}

/// A new connection still completes the handshake: the server survived what came before.
pub async fn assert_server_alive(server: &RunningServer) {
    let mut client = Client::initialized(server).await;
    let response = client.request("ping", json!({})).await;
    assert_eq!(response["result"], json!({}));
}
