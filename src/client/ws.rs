//! The WebSocket transport: one JSON-RPC message (or batch) per text frame, both ways, on a
//! `ws://` or `wss://` connection that asked for the `mcp` subprotocol (which the Python
//! SDK's WebSocket server requires, and mcp-ws's own server accepts). It owns the upgrade
//! (with the configured headers), TLS for `wss://` (http.rs's config: ring, the platform's
//! roots), the reading and writing tasks, and the closing handshake.
//!
//! A message over `max_message_bytes` is skipped, and the request it answers fails at once
//! as too long ([`ws_frames`](super::ws_frames)); the connection goes on. It is over when the
//! server closes it or a read or write fails: every request waiting then fails with
//! [`ClientError::Closed`]. Pings are answered by tungstenite itself.

use super::ws_frames::{Requests, SkipOversized};
use super::{ClientError, Inner, Outgoing};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// The subprotocol asked for on the upgrade.
const SUBPROTOCOL: &str = "mcp";
/// Longest wait for the TCP connection, TLS and the upgrade together (as http.rs's connect
/// timeout: the handshake's own timeout starts after).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for the server's close frame once the client sent its own.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
/// Messages written before one flush, when more are queued.
const WRITE_BATCH: usize = 64;

/// A plain or TLS stream under the WebSocket, one type for both.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type Socket = WebSocketStream<SkipOversized<Box<dyn Io>>>;

/// One WebSocket connection; clones are the same connection.
#[derive(Clone)]
pub(crate) struct Connection(Arc<ConnectionInner>);

struct ConnectionInner {
    /// The upgraded connection, until [`Connection::run`] hands it to its tasks.
    socket: Mutex<Option<Socket>>,
    /// The close frame to send, once something ended the connection (the client shutting
    /// down, a message over the limit, the last handle gone); the writer sends it and the
    /// reader waits a little for the server's.
    closing: watch::Sender<Option<CloseFrame>>,
    /// Turns `true` once the reader is done (the server's close came, or the wait for it
    /// ended).
    ended: watch::Sender<bool>,
    /// Where the socket's reader fails the request of an answer it skipped (set by
    /// [`Connection::run`]).
    requests: Requests,
}

impl Connection {
    /// Connects to `url` (TCP, TLS for `wss://`) and upgrades with `headers` and the `mcp`
    /// subprotocol; messages over `max_message` bytes are refused.
    pub(crate) async fn open(
        url: &str,
        headers: &[(String, String)],
        max_message: usize,
    ) -> Result<Self, ClientError> {
        let requests = Requests::default();
        let upgrading = upgrade(url, headers, max_message, requests.clone());
        let socket = tokio::time::timeout(CONNECT_TIMEOUT, upgrading)
            .await
            .map_err(|_| {
                ClientError::Connect(format!(
                    "no WebSocket connection within {} s",
                    CONNECT_TIMEOUT.as_secs()
                ))
            })??;
        Ok(Self(Arc::new(ConnectionInner {
            socket: Mutex::new(Some(socket)),
            closing: watch::Sender::new(None),
            ended: watch::Sender::new(false),
            requests,
        })))
    }

    /// Starts the task that writes `outgoing` and the one that reads what the server sends
    /// into `inner` (both hold it weakly: when every handle is gone, the connection closes).
    pub(crate) fn run(&self, inner: &Arc<Inner>, outgoing: mpsc::Receiver<Outgoing>) {
        let Some(socket) = super::lock(&self.0.socket).take() else {
            return;
        };
        // Two tasks, so a server that writes while the client writes (both sides' buffers
        // full) cannot stall either.
        let (sink, stream) = socket.split();
        let weak = Arc::downgrade(inner);
        let _ = self.0.requests.set(weak.clone());
        tokio::spawn(write(sink, outgoing, self.0.clone(), weak.clone()));
        tokio::spawn(read(stream, self.0.clone(), weak));
    }

    /// Sends a normal close frame and waits up to `grace` for the server's.
    pub(crate) async fn close(&self, grace: Duration) {
        self.0.begin_close(CloseCode::Normal, "");
        let mut ended = self.0.ended.subscribe();
        let _ = tokio::time::timeout(grace, ended.wait_for(|ended| *ended)).await;
    }

    /// Sends a close frame without waiting for anything.
    pub(crate) fn abort(&self) {
        self.0.begin_close(CloseCode::Away, "");
    }
}

impl ConnectionInner {
    /// Asks the writer to send this close frame (the first one asked for wins).
    fn begin_close(&self, code: CloseCode, reason: &str) {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        self.closing.send_if_modified(|closing| {
            if closing.is_some() {
                return false;
            }
            *closing = Some(frame);
            true
        });
    }

    fn is_closing(&self) -> bool {
        self.closing.borrow().is_some()
    }
}

/// TCP, TLS for `wss://`, and the upgrade.
async fn upgrade(
    url: &str,
    headers: &[(String, String)],
    max_message: usize,
    requests: Requests,
) -> Result<Socket, ClientError> {
    let mut request = url
        .into_client_request()
        .map_err(|e| ClientError::Connect(format!("invalid URL {url:?}: {e}")))?;
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|e| ClientError::Connect(format!("invalid header name {name:?}: {e}")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| ClientError::Connect(format!("invalid value of header {name}")))?;
        request.headers_mut().insert(name, value);
    }
    request.headers_mut().insert(
        "sec-websocket-protocol",
        HeaderValue::from_static(SUBPROTOCOL),
    );
    let uri = request.uri();
    let tls = match uri.scheme_str() {
        Some("ws") => false,
        Some("wss") => true,
        _ => {
            return Err(ClientError::Connect(format!(
                "not a ws:// or wss:// URL: {url:?}"
            )))
        }
    };
    // An IPv6 literal comes in brackets, which neither a socket address nor a TLS name has.
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| ClientError::Connect(format!("cannot reach {host}:{port}: {e}")))?;
    // Messages are small and each is one write: no waiting to fill a segment.
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Io> = if tls {
        let name = rustls_pki_types::ServerName::try_from(host.clone())
            .map_err(|e| ClientError::Connect(format!("invalid TLS name {host:?}: {e}")))?;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(super::http::tls_config()?));
        let tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| ClientError::Connect(format!("TLS with {host}:{port}: {e}")))?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    // The limit is on what the server sends; a frame is never longer than its message.
    // tungstenite sees no message over it (skipped beneath it), unless the stream stopped
    // being one of frames: then it refuses what is over.
    let stream = SkipOversized::new(stream, max_message, requests);
    let config = WebSocketConfig::default()
        .max_message_size(Some(max_message))
        .max_frame_size(Some(max_message));
    let (socket, _) = tokio_tungstenite::client_async_with_config(request, stream, Some(config))
        .await
        .map_err(|e| ClientError::Connect(format!("the WebSocket upgrade failed: {e}")))?;
    Ok(socket)
}

async fn write(
    mut sink: SplitSink<Socket, Message>,
    mut outgoing: mpsc::Receiver<Outgoing>,
    connection: Arc<ConnectionInner>,
    inner: Weak<Inner>,
) {
    let mut closing = connection.closing.subscribe();
    let mut ended = connection.ended.subscribe();
    loop {
        let message = tokio::select! {
            message = outgoing.recv() => message,
            _ = closing.wait_for(Option::is_some) => break,
        };
        // Every handle is gone (the sender lives in them): close normally.
        let Some(message) = message else {
            connection.begin_close(CloseCode::Normal, "");
            break;
        };
        let written = async {
            sink.feed(Message::text(message.text)).await?;
            // What else is queued goes out with it, in one flush.
            for _ in 1..WRITE_BATCH {
                let Ok(more) = outgoing.try_recv() else { break };
                sink.feed(Message::text(more.text)).await?;
            }
            sink.flush().await
        };
        let outcome = tokio::select! {
            outcome = written => outcome,
            // A server that stopped reading holds the write up; once the reader is done
            // (the connection is over), it is given up.
            _ = ended.wait_for(|ended| *ended) => return,
        };
        if let Err(error) = outcome {
            if let Some(inner) = inner.upgrade() {
                inner.close(&format!("writing to the WebSocket failed: {error}"));
            }
            // The reader stops waiting for a server that can no longer be written to.
            connection.begin_close(CloseCode::Away, "");
            return;
        }
    }
    // The close frame asked for; after the server's own, this sends tungstenite's reply.
    let frame = connection.closing.borrow().clone();
    let _ = tokio::time::timeout(CLOSE_WAIT, sink.send(Message::Close(frame))).await;
}

async fn read(
    mut stream: SplitStream<Socket>,
    connection: Arc<ConnectionInner>,
    inner: Weak<Inner>,
) {
    let why = read_until_closed(&mut stream, &connection, &inner).await;
    if let Some(inner) = inner.upgrade() {
        inner.close(&why);
    }
    // The writer, if it is still waiting for messages, closes too (or replies to the
    // server's close).
    connection.begin_close(CloseCode::Normal, "");
    connection.ended.send_replace(true);
}

/// Reads until the connection is over; says how it ended.
async fn read_until_closed(
    stream: &mut SplitStream<Socket>,
    connection: &ConnectionInner,
    weak: &Weak<Inner>,
) -> String {
    let mut closing = connection.closing.subscribe();
    // Set once the client sent (or is sending) its close: the server's is waited for until
    // then.
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        let frame = tokio::select! {
            frame = stream.next() => frame,
            _ = closing.wait_for(Option::is_some), if deadline.is_none() => {
                deadline = Some(tokio::time::Instant::now() + CLOSE_WAIT);
                continue;
            }
            () = sleep_until(deadline), if deadline.is_some() => {
                return "the WebSocket was closed by the client".to_owned();
            }
        };
        let by_client = connection.is_closing();
        let Some(frame) = frame else {
            return "the WebSocket ended".to_owned();
        };
        let Some(inner) = weak.upgrade() else {
            // Every handle is gone; the writer closes.
            return String::new();
        };
        match frame {
            Ok(Message::Text(text)) => {
                let held = inner.receive(text.as_str());
                drop(inner);
                let mut closing = connection.closing.subscribe();
                let closing = async move {
                    let _ = closing.wait_for(Option::is_some).await;
                };
                super::answer_held(weak, held, closing).await;
            }
            Ok(Message::Binary(_)) => {
                inner.warn_skipped(|| {
                    tracing::warn!(upstream = %inner.label(), "skipped a binary WebSocket frame");
                });
            }
            Ok(Message::Close(_)) if by_client => {
                return "the WebSocket was closed by the client".to_owned();
            }
            Ok(Message::Close(Some(frame))) if frame.reason.is_empty() => {
                let code = u16::from(frame.code);
                return format!("the server closed the WebSocket ({code})");
            }
            Ok(Message::Close(Some(frame))) => {
                let code = u16::from(frame.code);
                return format!("the server closed the WebSocket ({code} {})", frame.reason);
            }
            Ok(Message::Close(None)) => return "the server closed the WebSocket".to_owned(),
            // Pings are answered by tungstenite; pongs and raw frames mean nothing here.
            Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => {}
            Err(WsError::Capacity(CapacityError::MessageTooLong { size, max_size })) => {
                // Only past what the frame reader could read (it skips every message over
                // the limit of a stream of frames): the rest of that message is still on the
                // stream, nothing after it can be read, so the connection ends here.
                connection.begin_close(CloseCode::Size, "message too big");
                return format!(
                    "the server sent a message of {size} bytes, over max_message_bytes \
                     ({max_size})"
                );
            }
            Err(WsError::ConnectionClosed | WsError::AlreadyClosed) if by_client => {
                return "the WebSocket was closed by the client".to_owned();
            }
            Err(error) => return format!("reading the WebSocket failed: {error}"),
        }
    }
}

/// Sleeps until `deadline` (forever without one).
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
