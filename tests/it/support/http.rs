//! HTTP to the server under test: a bare HTTP/1.1 GET and the metrics read with it, and the
//! MCP endpoint as a 2026-07-28 client posts to it (the headers that revision requires),
//! with its answers read as JSON or, message by message, as SSE.

use super::meta::{MODERN, PROTOCOL_VERSION};
use super::request;
use super::READ_TIMEOUT;
use futures_util::{Stream, StreamExt};
use mcp_ws::RunningServer;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::{RequestBuilder, Response, StatusCode};
use serde_json::Value;
use sse_stream::{Sse, SseStream};
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A `reqwest` client for the tests: [`client_builder`] built.
pub fn client() -> reqwest::Client {
    client_builder().build().expect("reqwest client")
}

/// `reqwest::Client::builder()`, after [`install_crypto`]: the tests' reqwest has no TLS
/// crypto of its own (its default, aws-lc, was 8 % of a clean test build),
/// so a client is built only through here (`clippy.toml` refuses the direct calls).
#[allow(clippy::disallowed_methods)]
pub fn client_builder() -> reqwest::ClientBuilder {
    install_crypto();
    reqwest::Client::builder()
}

/// Makes rustls's ring provider, the one the server uses, the process's default: what a
/// client that does not bring its own TLS configuration (reqwest's, rmcp's) takes.
pub fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err only if another provider is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A minimal HTTP/1.1 GET over a fresh connection: (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    http_get_with(addr, path, &[]).await
}

/// Writes `request` (a whole HTTP/1.1 request, `Connection: close`) on a new connection to
/// `addr`, and reads the answer to the connection's end, bytes as they came (a chunked body
/// with its chunk sizes).
pub async fn raw_exchange(addr: SocketAddr, request: &str) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(READ_TIMEOUT, stream.read_to_end(&mut raw))
        .await
        .expect("response in time")
        .expect("read");
    raw
}

/// [`http_get`] with `headers` (a `Host` among them replaces the default one).
pub async fn http_get_with(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut request = format!("GET {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let raw = raw_exchange(addr, &request).await;
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

/// Reads one metric from `/metrics`, on the admin listener when the server has one (the
/// public `/metrics` wants credentials when the server authenticates clients).
pub async fn metric(server: &RunningServer, name: &str) -> u64 {
    let addr = server.admin_addr().unwrap_or(server.addr());
    let (status, body) = http_get(addr, "/metrics").await;
    assert_eq!(status, 200);
    body.lines()
        .find_map(|line| {
            let (key, value) = line.split_once(' ')?;
            (key == name).then(|| value.trim().parse().ok()).flatten()
        })
        .unwrap_or_else(|| panic!("metric {name} missing"))
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

pub const BOTH: &str = "application/json, text/event-stream";

/// The MCP endpoint over HTTP, as a 2026-07-28 client posts to it.
#[derive(Clone)]
pub struct Http {
    pub client: reqwest::Client,
    pub url: String,
}

impl Http {
    pub fn new(server: &RunningServer) -> Self {
        Self {
            client: client(),
            url: format!("http://{}/mcp", server.addr()),
        }
    }

    /// A POST of `body` with no MCP headers (only `Accept` and `Content-Type`).
    pub fn bare(&self, body: &Value) -> RequestBuilder {
        self.client
            .post(&self.url)
            .header(ACCEPT, BOTH)
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string())
    }

    /// A POST of `body` with the headers a 2026-07-28 client sends, taken from the body:
    /// `MCP-Protocol-Version` (its `_meta` version, else 2026-07-28), `Mcp-Method`, and
    /// `Mcp-Name` for the methods that name something.
    pub fn post(&self, body: &Value) -> RequestBuilder {
        let params = &body["params"];
        let version = params["_meta"][PROTOCOL_VERSION].as_str().unwrap_or(MODERN);
        let method = body["method"].as_str().unwrap_or_default();
        let builder = self
            .bare(body)
            .header("MCP-Protocol-Version", version)
            .header("Mcp-Method", method);
        let name = match method {
            "tools/call" | "prompts/get" => params["name"].as_str(),
            "resources/read" => params["uri"].as_str(),
            _ => None,
        };
        match name {
            // As a client sends it: base64 in `=?base64?…?=` when not plain visible ASCII.
            Some(name) => builder.header("Mcp-Name", header_value(name)),
            None => builder,
        }
    }

    /// Posts a request answered with a JSON body (no stream); returns `(status, body)`.
    pub async fn json(&self, id: Value, method: &str, params: Value) -> (u16, Value) {
        json_reply(send(self.post(&request(id, method, params))).await).await
    }
}

pub async fn send(builder: RequestBuilder) -> Response {
    tokio::time::timeout(READ_TIMEOUT, builder.send())
        .await
        .expect("the server answers in time")
        .expect("the request is sent and answered")
}

pub fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

/// A JSON answer: its status and body. Never a session id: 2026-07-28 has no sessions.
pub async fn json_reply(response: Response) -> (u16, Value) {
    let status = response.status().as_u16();
    assert_eq!(
        header(&response, "content-type"),
        Some("application/json"),
        "status {status}"
    );
    assert!(
        header(&response, "mcp-session-id").is_none(),
        "a 2026-07-28 answer issues no session"
    );
    let text = tokio::time::timeout(READ_TIMEOUT, response.text())
        .await
        .expect("the body arrives in time")
        .expect("the body is read");
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"));
    (status, body)
}

type EventStream = Pin<Box<dyn Stream<Item = Result<Sse, sse_stream::Error>> + Send>>;

/// A 2026-07-28 SSE answer read message by message. Its events carry no `id` (the revision
/// has no resumption); keep-alive comments are skipped.
pub struct Events {
    stream: EventStream,
}

impl Events {
    /// The events of `response`, which must be a 200 SSE stream without a session id.
    pub fn of(response: Response) -> Self {
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "content-type"), Some("text/event-stream"));
        assert!(
            header(&response, "mcp-session-id").is_none(),
            "a 2026-07-28 answer issues no session"
        );
        Self {
            stream: Box::pin(SseStream::from_bytes_stream(response.bytes_stream())),
        }
    }

    /// The next message, or `None` once the server ended the stream.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            let next = tokio::time::timeout(READ_TIMEOUT, self.stream.next())
                .await
                .expect("an event or the end of the stream in time")?;
            let sse = next.expect("well-formed SSE");
            let Some(data) = sse.data.filter(|d| !d.is_empty()) else {
                continue; // a comment (keep-alive)
            };
            assert!(sse.id.is_none(), "no event ids in 2026-07-28: {data}");
            assert_eq!(sse.event.as_deref(), Some("message"), "{data}");
            return Some(
                serde_json::from_str(&data).unwrap_or_else(|e| panic!("not JSON ({e}): {data}")),
            );
        }
    }

    pub async fn expect(&mut self) -> Value {
        self.next().await.expect("the stream goes on")
    }

    pub async fn expect_end(&mut self) {
        if let Some(message) = self.next().await {
            panic!("the stream should have ended, got {message}");
        }
    }
}

/// A 2026-07-28 header's value as the SDKs write it: as it is when it is plain visible
/// ASCII without edge spaces and does not look like the encoded form, else
/// `=?base64?{base64 of its UTF-8}?=`.
pub fn header_value(value: &str) -> String {
    use base64::Engine;
    let plain = value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && value.trim() == value
        && !(value.starts_with("=?base64?") && value.ends_with("?="));
    if plain {
        return value.to_owned();
    }
    let encoded = base64::engine::general_purpose::STANDARD.encode(value);
    format!("=?base64?{encoded}?=")
}

/// A test's own server on plain sockets: a thread accepts connections on a free loopback
/// port and hands each, blocking, to `serve` on a thread of its own, until the returned
/// guard is dropped.
pub fn serve_each(
    serve: impl Fn(std::net::TcpStream) + Clone + Send + 'static,
) -> (SocketAddr, StopAccepting) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    // Polled, so that the thread sees the stop (a blocking accept would wait for ever).
    listener.set_nonblocking(true).expect("nonblocking");
    let stop = StopAccepting(std::sync::Arc::default());
    let stopped = stop.0.clone();
    std::thread::spawn(move || {
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            let stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Err(_) => return,
            };
            // Its reads block (some systems hand the listener's non-blocking mode on).
            stream.set_nonblocking(false).expect("blocking");
            let serve = serve.clone();
            std::thread::spawn(move || serve(stream));
        }
    });
    (addr, stop)
}

/// Stops [`serve_each`]'s accepting when dropped (the connections it handed on run on).
pub struct StopAccepting(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Drop for StopAccepting {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Reads one HTTP/1.1 request from a blocking `reader` (a test's own server on plain
/// sockets): its head (request line and headers) and its body (`Content-Length` bytes);
/// `None` once the connection ends.
pub fn read_request(reader: &mut impl std::io::BufRead) -> Option<(String, Vec<u8>)> {
    let mut head = String::new();
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        head += &line;
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some((head, body))
}
