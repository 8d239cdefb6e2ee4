//! Client side of one MCP-over-WebSocket session: loopback-only endpoint
//! resolution, connect, the MCP `initialize` handshake, the request frames the
//! workloads send, and the classification of every frame the server sends
//! back. Shared by both workloads.

use std::borrow::Cow;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::de::IgnoredAny;
use serde::Deserialize;
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use crate::BoxError;

pub type Ws = WebSocketStream<TcpStream>;

/// WebSocket subprotocol the MCP-over-WebSocket transport negotiates.
pub const MCP_SUBPROTOCOL: &str = "mcp";

/// The id-0 handshake request every session starts with.
const INITIALIZE_REQUEST: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"load","version":"0"}}}"#;
const INITIALIZED_NOTIFICATION: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// Upper bound for one connect + handshake, so a stuck server cannot stall a
/// burst forever.
pub const SESSION_SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Which protocol revision the requests are written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Era {
    /// 2025-11-25: `initialize` first, then plain requests on that session.
    #[default]
    Session,
    /// 2026-07-28: no `initialize`; every request carries its version, client
    /// capabilities and client info in `_meta` ([`MODERN_META`]).
    Stateless,
    /// 2025-11-25 on a session, every request carrying a `_meta` exactly as long as a
    /// 2026-07-28 one's ([`PADDED_META`]) under member names no server knows: what the
    /// bigger frame alone costs, without the meaning of its members.
    PaddedSession,
}

impl Era {
    /// Whether requests are sent on a session opened with `initialize`.
    pub fn has_session(self) -> bool {
        self != Self::Stateless
    }
}

/// The `_meta` of every 2026-07-28 request the generator sends.
pub const MODERN_META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"load","version":"0"}}"#;

/// [`MODERN_META`] with every member renamed (same length): ignored by any server.
pub const PADDED_META: &str = r#""_meta":{"io.example.padding.xxxx/protocolVersion":"2026-07-28","io.example.padding.xxxx/clientCapabilities":{},"io.example.padding.xxxx/clientInfo":{"name":"load","version":"0"}}"#;

/// How the target answers a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyStyle {
    /// A JSON-RPC response (`id` + `result` or `error`).
    JsonRpc,
    /// The request frame itself, echoed unchanged (raw-echo baseline).
    EchoedRequest,
}

/// Where and how to open sessions against one target.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub url: String,
    pub addr: SocketAddr,
    /// Whether to offer the `mcp` subprotocol. jsonrpsee ignores the header,
    /// and tungstenite's client rejects a handshake in which an offered
    /// subprotocol was not selected, so it is only offered to servers that
    /// select it.
    pub offer_subprotocol: bool,
    pub reply_style: ReplyStyle,
    /// The revision of the requests (mcp-ws only; baselines speak 2025-11-25).
    pub era: Era,
    /// Set: every `tools/call` carries a fresh `_meta.idempotencyKey` made of this run's
    /// number, its connection and its id (mcp-ws only), so none is a retry of another, in
    /// this run or an earlier one that left keys in a shared store.
    pub idempotency_run: Option<u64>,
}

impl Endpoint {
    /// Resolves `ws://HOST:PORT/PATH` and refuses anything that is not a
    /// loopback address: this generator must never send load elsewhere.
    pub fn new(
        url: &str,
        offer_subprotocol: bool,
        reply_style: ReplyStyle,
    ) -> Result<Self, BoxError> {
        let rest = url
            .strip_prefix("ws://")
            .ok_or_else(|| format!("{url}: only ws:// URLs are supported"))?;
        let authority = rest.split('/').next().unwrap_or_default();
        if authority.is_empty() {
            return Err(format!("{url}: missing host:port").into());
        }
        let authority = if authority.contains(':') && !authority.ends_with(']') {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        let addrs: Vec<SocketAddr> = authority
            .to_socket_addrs()
            .map_err(|e| format!("{url}: cannot resolve {authority}: {e}"))?
            .collect();
        let addr = *addrs
            .first()
            .ok_or_else(|| format!("{url}: {authority} resolves to nothing"))?;
        if let Some(outside) = addrs.iter().find(|a| !a.ip().is_loopback()) {
            return Err(format!("{url}: {outside} is not a loopback address; refusing").into());
        }
        Ok(Self {
            url: url.to_string(),
            addr,
            offer_subprotocol,
            reply_style,
            era: Era::Session,
            idempotency_run: None,
        })
    }
}

/// Why a session could not be set up.
#[derive(Debug)]
pub enum SetupError {
    /// EMFILE / ENFILE: the fd limit is too low for the requested load.
    FdExhausted(String),
    Failed(String),
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupError::FdExhausted(e) => write!(
                f,
                "out of file descriptors ({e}); raise `ulimit -n` (see benches/README.md)"
            ),
            SetupError::Failed(e) => f.write_str(e),
        }
    }
}

fn is_fd_exhaustion(e: &io::Error) -> bool {
    // EMFILE (per process) = 24, ENFILE (system wide) = 23 on Linux.
    matches!(e.raw_os_error(), Some(24) | Some(23))
}

fn ws_setup_error(e: WsError) -> SetupError {
    match e {
        WsError::Io(io) if is_fd_exhaustion(&io) => SetupError::FdExhausted(io.to_string()),
        other => SetupError::Failed(other.to_string()),
    }
}

/// Read buffer of a client connection. tungstenite zero-fills its whole read
/// buffer before every read and keeps it resident, so the 128 KiB default
/// would cost a 128 KiB memset per read and 128 KiB of RSS per session.
/// Sized to what one read can bring: a full pipeline of answers.
pub fn read_buffer_for(pipeline: usize, payload: usize) -> usize {
    const FRAME_OVERHEAD: usize = 256;
    pipeline
        .saturating_mul(payload.saturating_add(FRAME_OVERHEAD))
        .next_power_of_two()
        .clamp(4 << 10, 128 << 10)
}

fn client_config(read_buffer: usize) -> WebSocketConfig {
    // 16 MiB like the baselines' limits; large payload runs stay legal.
    WebSocketConfig::default()
        .read_buffer_size(read_buffer)
        .max_message_size(Some(16 << 20))
        .max_frame_size(Some(16 << 20))
}

/// TCP connect + WebSocket upgrade (no MCP handshake yet).
pub async fn connect(endpoint: &Endpoint, read_buffer: usize) -> Result<Ws, SetupError> {
    let tcp = TcpStream::connect(endpoint.addr).await.map_err(|e| {
        if is_fd_exhaustion(&e) {
            SetupError::FdExhausted(e.to_string())
        } else {
            SetupError::Failed(format!("connect {}: {e}", endpoint.addr))
        }
    })?;
    // Pipelined small frames: Nagle would add delayed-ACK stalls.
    tcp.set_nodelay(true)
        .map_err(|e| SetupError::Failed(format!("set_nodelay: {e}")))?;
    let mut request = endpoint
        .url
        .as_str()
        .into_client_request()
        .map_err(ws_setup_error)?;
    if endpoint.offer_subprotocol {
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            HeaderValue::from_static(MCP_SUBPROTOCOL),
        );
    }
    // A bearer token for servers that authenticate (`MCP_WS_BEARER`, for the hardened
    // config's cost; baselines ignore the header).
    if let Ok(token) = std::env::var("MCP_WS_BEARER") {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|e| SetupError::Failed(format!("MCP_WS_BEARER: {e}")))?;
        request.headers_mut().insert("Authorization", value);
    }
    let (ws, _response) =
        tokio_tungstenite::client_async_with_config(request, tcp, Some(client_config(read_buffer)))
            .await
            .map_err(ws_setup_error)?;
    Ok(ws)
}

/// Sends `initialize`, waits for the id-0 reply, sends `initialized`.
pub async fn initialize(ws: &mut Ws, style: ReplyStyle) -> Result<(), SetupError> {
    let failed = |what: &str, e: WsError| SetupError::Failed(format!("{what}: {e}"));
    ws.send(Message::text(INITIALIZE_REQUEST))
        .await
        .map_err(|e| failed("send initialize", e))?;
    loop {
        let frame = match ws.next().await {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(close))) => {
                return Err(SetupError::Failed(format!(
                    "closed during initialize: {close:?}"
                )))
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(failed("read initialize reply", e)),
            None => return Err(SetupError::Failed("EOF during initialize".into())),
        };
        match classify(frame.as_str(), style) {
            Frame::Reply {
                id: 0,
                outcome: Outcome::Ok { .. },
            } => break,
            Frame::Reply {
                id: 0,
                outcome: Outcome::Error,
            }
            | Frame::ErrorWithoutId => {
                return Err(SetupError::Failed(format!(
                    "initialize rejected: {}",
                    truncate(frame.as_str(), 300)
                )))
            }
            // Server notifications (e.g. log messages) may precede the reply.
            _ => continue,
        }
    }
    ws.send(Message::text(INITIALIZED_NOTIFICATION))
        .await
        .map_err(|e| failed("send initialized", e))?;
    Ok(())
}

/// Connect + handshake under one deadline.
pub async fn open_session(endpoint: &Endpoint, read_buffer: usize) -> Result<Ws, SetupError> {
    let setup = async {
        let mut ws = connect(endpoint, read_buffer).await?;
        // A 2026-07-28 client has no handshake: each request stands alone.
        if endpoint.era.has_session() {
            initialize(&mut ws, endpoint.reply_style).await?;
        }
        Ok(ws)
    };
    match tokio::time::timeout(SESSION_SETUP_TIMEOUT, setup).await {
        Ok(result) => result,
        Err(_) => Err(SetupError::Failed(format!(
            "session setup exceeded {SESSION_SETUP_TIMEOUT:?}"
        ))),
    }
}

/// Result of opening many sessions.
pub struct OpenedSessions {
    pub sessions: Vec<Ws>,
    pub failures: usize,
    /// First few distinct failure messages, for the report.
    pub failure_samples: Vec<String>,
    pub fd_exhausted: bool,
    pub elapsed: Duration,
}

/// Opens `count` sessions, at most `burst` handshakes in flight at once, so
/// that the server's accept queue (and ours) is not flooded. Stops opening
/// new ones on fd exhaustion: every further attempt would fail the same way.
pub async fn open_sessions(
    endpoint: &Endpoint,
    count: usize,
    burst: usize,
    read_buffer: usize,
) -> OpenedSessions {
    let started = Instant::now();
    let mut opened = OpenedSessions {
        sessions: Vec::with_capacity(count),
        failures: 0,
        failure_samples: Vec::new(),
        fd_exhausted: false,
        elapsed: Duration::ZERO,
    };
    let mut in_flight = JoinSet::new();
    let mut launched = 0;
    while launched < count || !in_flight.is_empty() {
        while launched < count && in_flight.len() < burst && !opened.fd_exhausted {
            let endpoint = endpoint.clone();
            in_flight.spawn(async move { open_session(&endpoint, read_buffer).await });
            launched += 1;
        }
        if opened.fd_exhausted && launched < count {
            opened.failures += count - launched;
            launched = count;
        }
        // Each task is bounded by SESSION_SETUP_TIMEOUT, so this terminates.
        let Some(joined) = in_flight.join_next().await else {
            break;
        };
        match joined {
            Ok(Ok(ws)) => opened.sessions.push(ws),
            Ok(Err(e)) => {
                opened.failures += 1;
                if matches!(e, SetupError::FdExhausted(_)) {
                    opened.fd_exhausted = true;
                }
                let message = e.to_string();
                if opened.failure_samples.len() < 5 && !opened.failure_samples.contains(&message) {
                    opened.failure_samples.push(message);
                }
            }
            Err(join_error) => {
                opened.failures += 1;
                if opened.failure_samples.len() < 5 {
                    opened.failure_samples.push(join_error.to_string());
                }
            }
        }
    }
    opened.elapsed = started.elapsed();
    opened
}

/// Closes sessions politely (close frame), all at once, bounded in time.
pub async fn close_all(sessions: Vec<Ws>) {
    let mut closing = JoinSet::new();
    for mut ws in sessions {
        closing.spawn(async move {
            let _ = tokio::time::timeout(Duration::from_millis(500), ws.close(None)).await;
        });
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while closing.join_next().await.is_some() {}
    })
    .await;
    closing.abort_all();
}

/// Deterministic ASCII payload that needs no JSON escaping, so the echoed
/// text can be compared byte for byte.
pub fn payload_text(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..len)
        .map(|i| char::from(ALPHABET[i % ALPHABET.len()]))
        .collect()
}

/// `tools/call` of the `echo` tool in `era`; `payload` must need no JSON escaping. With
/// `key` (a run number and a connection's index), it carries `_meta.idempotencyKey`.
pub fn tools_call_request(id: u64, payload: &str, era: Era, key: Option<(u64, usize)>) -> String {
    let meta = match era {
        Era::Session => None,
        Era::Stateless => Some(MODERN_META),
        Era::PaddedSession => Some(PADDED_META),
    };
    let mut frame = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{payload}"}}"#
    );
    // `_meta`: the era's members, then the key, if any.
    match (meta, key) {
        (None, None) => {}
        (Some(meta), None) => {
            frame.push(',');
            frame.push_str(meta);
        }
        (meta, Some((run, connection))) => {
            frame.push(',');
            match meta.and_then(|meta| meta.strip_suffix('}')) {
                Some(open) => frame.push_str(open),
                None => frame.push_str(r#""_meta":{"#),
            }
            if meta.is_some() {
                frame.push(',');
            }
            frame.push_str(&format!(
                r#""idempotencyKey":"{run:x}-{connection}-{id}"}}"#
            ));
        }
    }
    frame.push_str("}}");
    frame
}

pub fn ping_request(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
}

/// What one server frame means to the client.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Answer to the request with this id.
    Reply { id: u64, outcome: Outcome<'a> },
    /// An error response with a null id (e.g. a parse error).
    ErrorWithoutId,
    /// A notification or server→client request: not an answer.
    Unsolicited,
    /// Not JSON-RPC we understand (or a non-integer id we never send).
    Malformed,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// Success; `echoed` is the first text content item, if any.
    Ok { echoed: Option<Cow<'a, str>> },
    /// A JSON-RPC error, or a tool result flagged `isError`.
    Error,
}

/// Only the members the client looks at; everything else is skipped by
/// serde without allocating.
#[derive(Deserialize)]
struct WireFrame<'a> {
    #[serde(default)]
    id: Option<u64>,
    #[serde(default)]
    method: Option<IgnoredAny>,
    #[serde(borrow, default)]
    result: Option<WireResult<'a>>,
    #[serde(default)]
    error: Option<IgnoredAny>,
    #[serde(borrow, default)]
    params: Option<WireParams<'a>>,
}

#[derive(Deserialize)]
struct WireResult<'a> {
    #[serde(borrow, default)]
    content: Vec<WireContent<'a>>,
    #[serde(rename = "isError", default)]
    is_error: bool,
}

#[derive(Deserialize)]
struct WireContent<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireParams<'a> {
    #[serde(borrow, default)]
    arguments: Option<WireArguments<'a>>,
}

#[derive(Deserialize)]
struct WireArguments<'a> {
    #[serde(borrow, default)]
    text: Option<Cow<'a, str>>,
}

/// Parses one text frame just enough to match it to a request and check the
/// echoed text.
pub fn classify(frame: &str, style: ReplyStyle) -> Frame<'_> {
    let Ok(wire) = serde_json::from_str::<WireFrame<'_>>(frame) else {
        return Frame::Malformed;
    };
    match style {
        ReplyStyle::JsonRpc => {
            if wire.method.is_some() {
                return Frame::Unsolicited;
            }
            match (wire.id, wire.error, wire.result) {
                (Some(id), Some(_), _) => Frame::Reply {
                    id,
                    outcome: Outcome::Error,
                },
                (None, Some(_), _) => Frame::ErrorWithoutId,
                (Some(id), None, Some(result)) if result.is_error => Frame::Reply {
                    id,
                    outcome: Outcome::Error,
                },
                (Some(id), None, Some(result)) => Frame::Reply {
                    id,
                    outcome: Outcome::Ok {
                        echoed: result.content.into_iter().next().and_then(|c| c.text),
                    },
                },
                _ => Frame::Malformed,
            }
        }
        ReplyStyle::EchoedRequest => match (wire.method, wire.id) {
            (Some(_), Some(id)) => Frame::Reply {
                id,
                outcome: Outcome::Ok {
                    echoed: wire.params.and_then(|p| p.arguments).and_then(|a| a.text),
                },
            },
            // Our own `notifications/initialized`, echoed back.
            (Some(_), None) => Frame::Unsolicited,
            _ => Frame::Malformed,
        },
    }
}

pub fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((cut, _)) => &text[..cut],
        None => text,
    }
}
