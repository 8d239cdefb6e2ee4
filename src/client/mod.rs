//! An MCP client: connects to a server over stdio (a child process), Streamable HTTP or
//! WebSocket, in either protocol era, and sends it requests and notifications. The gateway
//! (`crate::gateway`) reaches its upstreams through it; the benches and tests use it too.
//!
//! The era follows [`ClientOptions::protocol_version`], as the conformance suite asks of
//! clients. A version of 2024-11-05 … 2025-11-25 runs the `initialize` handshake; 2026-07-28
//! is stateless: the connection begins with `server/discover`, and every request carries the
//! version, the client's capabilities and its name in `_meta` (over HTTP also the
//! `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and `Mcp-Param-*` headers). Each falls
//! back to the other when the server turns out to speak only the other era: an `initialize`
//! refused with a list of supported versions that names 2026-07-28, or a `server/discover`
//! the server does not know. A stateless server asks the client things by answering
//! `input_required`; the client asks its [`ClientHandler`] (or the call's own,
//! [`Call::inputs`]) and sends the request again with the answers and the server's
//! `requestState`, under a new id, until the server completes it.
//!
//! A [`Client`] is a cheap handle (`Send + Sync`, clone it freely) over one connection. Its
//! transport runs in tasks of the runtime it was connected on; the handle may be used from
//! any thread. What the server sends that is not an answer goes to the [`ClientHandler`] given
//! at connection (log lines, list changes, requests to the client such as sampling), except
//! progress, which reaches the call that asked for it ([`Call::progress`]).
//!
//! Answers are matched to requests by ids this client makes, so concurrent callers never see
//! each other's answers. A request whose future is dropped before its answer is cancelled
//! (`notifications/cancelled` goes to the server) and a late answer for it is dropped.
//!
//! ```no_run
//! use mcp_ws::client::{Client, ClientOptions, StdioCommand};
//! # async fn run() -> Result<(), mcp_ws::client::ClientError> {
//! let client = Client::stdio(
//!     StdioCommand::new("npx").args(["-y", "@modelcontextprotocol/server-everything"]),
//!     ClientOptions::default(),
//! )
//! .await?;
//! let tools = client.list_all("tools/list", "tools").await?;
//! let answer = client
//!     .call_tool("echo", serde_json::json!({ "message": "hi" }))
//!     .await?;
//! println!("{} tools; echo said {answer}", tools.len());
//! client.shutdown(std::time::Duration::from_secs(1)).await;
//! # Ok(()) }
//! ```

mod http;
mod response_id;
mod stdio;
mod ws;
mod ws_frames;

pub use stdio::{start_children_with_open_files_limit, StdioCommand};

use crate::protocol::mcp::{encode_header_value, header_params, HeaderParam, ProtocolVersion};
use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, OwnedSemaphorePermit, Semaphore};

/// The protocol version a client asks for unless told otherwise.
pub const DEFAULT_PROTOCOL_VERSION: &str = "2025-11-25";

/// How many messages may wait to be written to the server before senders wait.
const OUTGOING_QUEUE: usize = 1024;

/// How many of the server's requests (pings, sampling, elicitation …) this client answers at
/// once, each from its arrival until its answer is written. Beyond, the transport reads
/// nothing more from the server until one is done: a server that sends requests without
/// reading the answers is held back by its own connection (a child's full stdout pipe, a
/// socket's window), never by tasks and answers piling up here.
const MAX_ANSWERING: usize = 64;

/// The most rounds of `input_required` one stateless request may take: a server that keeps
/// asking is cut off.
const MAX_INPUT_ROUNDS: usize = 16;

/// The `_meta` keys of a stateless request.
const META_VERSION: &str = crate::protocol::mcp::META_PROTOCOL_VERSION;
const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// Why a request got no result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a JSON-RPC error.
    #[error("{message} ({code})")]
    Rpc {
        /// Its code.
        code: i64,
        /// Its message.
        message: String,
        /// Its `data`, if any.
        data: Option<Value>,
    },
    /// The connection ended (the process exited, the stream closed) before the answer; says
    /// how.
    #[error("the connection closed: {0}")]
    Closed(Arc<str>),
    /// The server could not be started or reached.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The server answered an HTTP request with this status and no JSON-RPC answer.
    #[error("the server answered HTTP {0}")]
    Status(u16),
    /// The server did not answer `initialize` in time.
    #[error("no answer to initialize within {0} ms")]
    InitializeTimeout(u64),
    /// The answer is not what the method returns.
    #[error("invalid answer: {0}")]
    InvalidAnswer(String),
}

impl ClientError {
    /// An answer skipped for being longer than `max_message_bytes` (`limit`).
    pub(crate) fn too_long(limit: usize) -> Self {
        Self::InvalidAnswer(format!(
            "an answer longer than max_message_bytes ({limit} bytes)"
        ))
    }
}

/// A JSON-RPC error object: what a [`ClientHandler`] answers a server's request with, and
/// what a server answered.
///
/// ```
/// let error = mcp_ws::client::RpcError::new(-32602, "Unknown tool: nope");
/// assert_eq!(error.to_string(), "Unknown tool: nope (-32602)");
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize, thiserror::Error)]
#[error("{message} ({code})")]
pub struct RpcError {
    /// The code.
    pub code: i64,
    /// The message.
    pub message: String,
    /// Anything more (`data`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    /// An error of this code and message.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Adds `data`.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// What the server sends that is not an answer to one of our requests.
pub trait ClientHandler: Send + Sync + 'static {
    /// A notification (except `notifications/progress` of a call that asked for progress,
    /// which goes to that call).
    fn notification(&self, method: &str, params: Option<&RawValue>) {
        let _ = (method, params);
    }

    /// Whether, as a call's [`Call::inputs`], this handler also takes the log lines and
    /// requests the server sends on that call's own stream (over HTTP: its POST's
    /// response); by default it takes a stateless server's `input_required` questions
    /// alone, and those go to the connection's handler.
    fn takes_call_stream(&self) -> bool {
        false
    }

    /// A request to the client (`sampling/createMessage`, `elicitation/create`,
    /// `roots/list`, `ping` is answered without asking). The default refuses it.
    fn request(
        &self,
        method: &str,
        params: Option<Box<RawValue>>,
    ) -> BoxFuture<'static, Result<Value, RpcError>> {
        let _ = params;
        let error = RpcError::new(-32601, format!("Method not found: {method}"));
        Box::pin(async move { Err(error) })
    }
}

/// A handler that ignores notifications and refuses requests.
#[derive(Debug, Default)]
pub struct IgnoreServer;

impl ClientHandler for IgnoreServer {}

/// How a client introduces itself and what it waits for.
#[derive(Clone)]
pub struct ClientOptions {
    /// `clientInfo.name`.
    pub name: String,
    /// `clientInfo.version`.
    pub version: String,
    /// The protocol version asked for; it also chooses the era (see the module docs).
    pub protocol_version: String,
    /// The capabilities declared (`roots`, `sampling`, `elicitation`).
    pub capabilities: Value,
    /// Longest wait for the answer to `initialize` (a child process is killed past it).
    pub initialize_timeout: Duration,
    /// Longest line or message read from the server, in bytes. Over stdio a longer line, over
    /// WebSocket a longer message, is skipped, and when it is an answer to one of the
    /// client's requests (its top-level `id` read as it streams past) that request fails at
    /// once with [`ClientError::InvalidAnswer`]; the connection goes on. Over HTTP a longer
    /// answer fails its request.
    pub max_message_bytes: usize,
    /// Most bytes one list ([`Client::list_all`]) may come to across its pages. A list is
    /// kept whole, every page of it: a server that keeps handing out pages (or the same
    /// cursor again) fails the list here instead of growing it without end.
    pub max_list_bytes: usize,
    /// Where notifications and requests from the server go.
    pub handler: Arc<dyn ClientHandler>,
    /// What log lines about this connection (a child's stderr, skipped lines) are tagged
    /// with: the upstream's name, say.
    pub label: Arc<str>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            name: "mcp-ws".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            protocol_version: DEFAULT_PROTOCOL_VERSION.to_owned(),
            capabilities: json!({}),
            initialize_timeout: Duration::from_secs(30),
            max_message_bytes: 16 << 20,
            max_list_bytes: 16 << 20,
            handler: Arc::new(IgnoreServer),
            label: Arc::from("upstream"),
        }
    }
}

/// What the server said of itself in its `initialize` (or `server/discover`) answer.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerDetails {
    /// The negotiated protocol version (for a stateless server: the one every request
    /// carries).
    pub protocol_version: String,
    /// The server's capabilities.
    #[serde(default)]
    pub capabilities: Value,
    /// Its name and version.
    #[serde(default)]
    pub server_info: Value,
    /// Its instructions, if any.
    #[serde(default)]
    pub instructions: Option<String>,
}

/// One progress report of a call.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// How far.
    pub progress: f64,
    /// Out of how much, if known.
    pub total: Option<f64>,
    /// What is happening.
    pub message: Option<String>,
}

/// Options of one request.
#[derive(Default)]
pub struct Call {
    /// Where the call's progress goes: when set, the request carries a progress token and
    /// each report is offered to this channel (dropped when it is full).
    pub progress: Option<mpsc::Sender<Progress>>,
    /// Who answers what a stateless server asks to complete this request (its
    /// `input_required` answers), and, when it says so
    /// ([`ClientHandler::takes_call_stream`]), takes the log lines (`notifications/message`)
    /// and requests the server sends on this request's own stream, where the transport
    /// knows which request they come with (HTTP: its POST's response); the connection's
    /// [`ClientHandler`] when `None`, and for all the server sends where it does not know.
    pub inputs: Option<Arc<dyn ClientHandler>>,
}

/// A message for the transport to write, with the id of the request it is (if it is one),
/// so a transport that answers each message on its own can fail that request.
#[derive(Debug, Default)]
pub(crate) struct Outgoing {
    pub id: Option<u64>,
    pub text: String,
    /// HTTP headers of this message alone (a stateless request's version, method, name and
    /// mirrored arguments); only HTTP transports read them.
    pub headers: Vec<(String, String)>,
    /// For the cancel of a request: its id. Transports that answer each request on its own
    /// (HTTP) drop the request's POST, and send `text` only to a session's server (on a
    /// stateless one the drop is the cancel).
    pub cancels: Option<u64>,
    /// For an answer to one of the server's requests: its answering place; for a cancel
    /// that waited for room: its waiting place. Given back when the transport is done with
    /// the message (written, or its POST over).
    #[expect(
        dead_code,
        reason = "held, never read: dropping the message gives it back"
    )]
    pub place: Option<OwnedSemaphorePermit>,
}

/// What every request of a stateless connection carries.
struct Stateless {
    version: String,
    /// The `_meta` entries of every request.
    meta: serde_json::Map<String, Value>,
}

type Answer = Result<Box<RawValue>, ClientError>;

struct Pending {
    answer: oneshot::Sender<Answer>,
    progress: Option<mpsc::Sender<Progress>>,
    /// [`Call::inputs`], when it takes what comes on the call's stream
    /// ([`ClientHandler::takes_call_stream`]).
    handler: Option<Arc<dyn ClientHandler>>,
}

/// What the handle and the transport's tasks share.
pub(crate) struct Inner {
    outgoing: mpsc::Sender<Outgoing>,
    pending: Mutex<HashMap<u64, Pending>>,
    next_id: AtomicU64,
    handler: Arc<dyn ClientHandler>,
    /// The places of the server's requests being answered ([`MAX_ANSWERING`]).
    answering: Arc<Semaphore>,
    /// The places of cancels waiting for room in the full outgoing queue
    /// ([`OUTGOING_QUEUE`]).
    cancels_waiting: Arc<Semaphore>,
    /// `Some(reason)` once the connection is over.
    closed: watch::Sender<Option<Arc<str>>>,
    server: std::sync::OnceLock<ServerDetails>,
    /// Set when the server turned out to be stateless (2026-07-28).
    stateless: std::sync::OnceLock<Stateless>,
    /// The mirrored arguments of each tool, by name, once the tools were listed (stateless
    /// HTTP needs them for every `tools/call`).
    tool_headers: Mutex<Option<HashMap<String, Arc<[HeaderParam]>>>>,
    transport: Transport,
    label: Arc<str>,
    /// [`ClientOptions::max_list_bytes`].
    max_list_bytes: usize,
    /// The warnings of skipped messages logged this second ([`Inner::warn_skipped`]).
    skipped_warnings: Mutex<SkippedWarnings>,
}

/// Most warnings of skipped messages one connection logs a second ([`Inner::warn_skipped`]).
const SKIPPED_WARNINGS_PER_SECOND: u32 = 10;

/// The warnings of skipped messages of one connection, this second.
#[derive(Debug)]
struct SkippedWarnings {
    /// When this second began.
    second: std::time::Instant,
    /// Logged in it.
    logged: u32,
    /// Not logged since the last said.
    unsaid: u64,
}

/// What stops the transport.
enum Transport {
    Stdio(stdio::Process),
    Http(http::Session),
    WebSocket(ws::Connection),
}

/// A connection to an MCP server; see the module docs.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("label", &self.inner.label)
            .finish_non_exhaustive()
    }
}

/// A [`Client`] that does not keep the connection open (for what the connection's own
/// handler keeps of it).
#[derive(Clone)]
pub struct WeakClient(std::sync::Weak<Inner>);

impl WeakClient {
    /// The client, while the connection is held by someone.
    pub fn upgrade(&self) -> Option<Client> {
        self.0.upgrade().map(|inner| Client { inner })
    }
}

impl Client {
    /// A handle that does not keep the connection open.
    pub fn downgrade(&self) -> WeakClient {
        WeakClient(Arc::downgrade(&self.inner))
    }

    /// Starts `command` and talks to it over its stdin and stdout (one JSON-RPC message per
    /// line); its stderr goes to the server log. The child runs in a process group of its
    /// own and is killed when this process dies.
    ///
    /// # Errors
    /// [`ClientError::Connect`] when the command cannot be started,
    /// [`ClientError::InitializeTimeout`] (the child is killed) or another error when the
    /// handshake fails.
    pub async fn stdio(command: StdioCommand, options: ClientOptions) -> Result<Self, ClientError> {
        let (outgoing, rx) = mpsc::channel(OUTGOING_QUEUE);
        let process = stdio::Process::spawn(&command, &options.label)?;
        let client = Self::new(outgoing, Transport::Stdio(process.clone()), &options);
        process.run(&client.inner, rx, options.max_message_bytes);
        client.handshake(&options).await
    }

    /// Talks to the Streamable HTTP endpoint at `url`, sending `headers` with every request.
    ///
    /// # Errors
    /// As for [`stdio`](Self::stdio).
    pub async fn http(
        url: &str,
        headers: &[(String, String)],
        options: ClientOptions,
    ) -> Result<Self, ClientError> {
        let (outgoing, rx) = mpsc::channel(OUTGOING_QUEUE);
        let session = http::Session::new(url, headers)?;
        let client = Self::new(outgoing, Transport::Http(session.clone()), &options);
        session.run(&client.inner, rx, options.max_message_bytes);
        let client = client.handshake(&options).await?;
        if let (Transport::Http(session), None) =
            (&client.inner.transport, client.inner.stateless.get())
        {
            let opened = session.listen(
                &client.inner,
                &client.server().protocol_version,
                options.max_message_bytes,
            );
            // Not longer than this: a server that holds back the GET's headers is no reason
            // to hold back the client.
            let _ = tokio::time::timeout(Duration::from_secs(2), opened).await;
        }
        Ok(client)
    }

    /// Talks to the MCP server at the WebSocket `url` (`ws://`, or `wss://` with the
    /// platform's trust roots), one JSON-RPC message per text frame, asking for the `mcp`
    /// subprotocol and sending `headers` with the upgrade request. A message from the server
    /// over `max_message_bytes` is skipped (the request it answers fails as too long), and
    /// the connection goes on.
    ///
    /// # Errors
    /// As for [`stdio`](Self::stdio); [`ClientError::Connect`] also when the upgrade is
    /// refused (an HTTP status, a subprotocol the server does not speak).
    pub async fn websocket(
        url: &str,
        headers: &[(String, String)],
        options: ClientOptions,
    ) -> Result<Self, ClientError> {
        let (outgoing, rx) = mpsc::channel(OUTGOING_QUEUE);
        let connection = ws::Connection::open(url, headers, options.max_message_bytes).await?;
        let client = Self::new(outgoing, Transport::WebSocket(connection.clone()), &options);
        connection.run(&client.inner, rx);
        client.handshake(&options).await
    }

    fn new(
        outgoing: mpsc::Sender<Outgoing>,
        transport: Transport,
        options: &ClientOptions,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                outgoing,
                pending: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(1),
                handler: options.handler.clone(),
                answering: Arc::new(Semaphore::new(MAX_ANSWERING)),
                cancels_waiting: Arc::new(Semaphore::new(OUTGOING_QUEUE)),
                closed: watch::Sender::new(None),
                server: std::sync::OnceLock::new(),
                stateless: std::sync::OnceLock::new(),
                tool_headers: Mutex::new(None),
                transport,
                label: options.label.clone(),
                max_list_bytes: options.max_list_bytes,
                skipped_warnings: Mutex::new(SkippedWarnings {
                    second: std::time::Instant::now(),
                    logged: 0,
                    unsaid: 0,
                }),
            }),
        }
    }

    /// Begins the connection in the era `options` asks for, or in the other one when the
    /// server speaks only that; a child that does not complete it in time is killed.
    async fn handshake(self, options: &ClientOptions) -> Result<Self, ClientError> {
        let timeout = options.initialize_timeout;
        let begun = tokio::time::timeout(timeout, self.begin(options)).await;
        let outcome = match begun {
            Ok(outcome) => outcome,
            Err(_) => Err(ClientError::InitializeTimeout(timeout.as_millis() as u64)),
        };
        match outcome {
            Ok(details) => {
                let _ = self.inner.server.set(details);
                Ok(self)
            }
            Err(error) => {
                self.kill();
                Err(error)
            }
        }
    }

    async fn begin(&self, options: &ClientOptions) -> Result<ServerDetails, ClientError> {
        let asked = options.protocol_version.as_str();
        if ProtocolVersion::parse(asked).is_some_and(ProtocolVersion::is_stateless) {
            let refused = match self.discover(options, asked).await {
                Err(refused) => refused,
                discovered => return discovered,
            };
            let unsupported =
                matches!(refused, ClientError::Rpc { code, .. } if code == UNSUPPORTED_VERSION);
            return match supported_offer(&refused) {
                // Refused with the versions the server speaks: the newest this client
                // knows, in its era (asked again once).
                Some(version) if version.is_stateless() => {
                    self.discover(options, version.as_str()).await
                }
                Some(version) => self.initialize(options, version.as_str()).await,
                None if unsupported => Err(refused),
                // A server of the handshake era does not know `server/discover` (or, over
                // HTTP, refuses a request outside a session).
                None if matches!(
                    refused,
                    ClientError::Rpc { .. } | ClientError::Status(400..=499)
                ) =>
                {
                    self.initialize(options, ProtocolVersion::NEWEST_SESSION.as_str())
                        .await
                }
                None => Err(refused),
            };
        }
        match self.initialize(options, asked).await {
            Err(refused) => match stateless_offer(&refused) {
                Some(version) => self.discover(options, version.as_str()).await,
                None => Err(refused),
            },
            initialized => initialized,
        }
    }

    async fn initialize(
        &self,
        options: &ClientOptions,
        version: &str,
    ) -> Result<ServerDetails, ClientError> {
        let params = json!({
            "protocolVersion": version,
            "capabilities": options.capabilities,
            "clientInfo": { "name": options.name, "version": options.version },
        });
        let details: ServerDetails = parse(&self.request("initialize", Some(params)).await?)?;
        // A version this client does not speak (or one of the stateless era, which has no
        // `initialize`): the spec has the client disconnect, rather than go on in a protocol
        // it does not know (attack run 52c: any answer was taken, and its version sent on
        // as the `MCP-Protocol-Version` of every request).
        if ProtocolVersion::parse(&details.protocol_version)
            .is_none_or(ProtocolVersion::is_stateless)
        {
            return Err(ClientError::InvalidAnswer(format!(
                "the server answered initialize with protocol version {:?}, which this client \
                 does not speak",
                details
                    .protocol_version
                    .chars()
                    .take(40)
                    .collect::<String>()
            )));
        }
        self.notify("notifications/initialized", None).await;
        Ok(details)
    }

    /// Asks a stateless server what it supports, and makes this connection stateless.
    async fn discover(
        &self,
        options: &ClientOptions,
        version: &str,
    ) -> Result<ServerDetails, ClientError> {
        let mut meta = serde_json::Map::new();
        meta.insert(META_VERSION.to_owned(), Value::from(version));
        meta.insert(META_CAPABILITIES.to_owned(), options.capabilities.clone());
        meta.insert(
            META_CLIENT_INFO.to_owned(),
            json!({ "name": options.name, "version": options.version }),
        );
        let stateless = Stateless {
            version: version.to_owned(),
            meta,
        };
        let raw = self
            .stateless_request(&stateless, "server/discover", None, Call::default())
            .await?;
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Discovered {
            #[serde(default)]
            supported_versions: Vec<String>,
            #[serde(default)]
            capabilities: Value,
            #[serde(default)]
            server_info: Option<Value>,
            #[serde(default)]
            instructions: Option<String>,
            #[serde(default, rename = "_meta")]
            meta: Option<serde_json::Map<String, Value>>,
        }
        let discovered: Discovered = parse(&raw)?;
        if !discovered.supported_versions.iter().any(|v| v == version) {
            return Err(ClientError::InvalidAnswer(format!(
                "the server supports {:?}, not {version}",
                discovered.supported_versions
            )));
        }
        let server_info = discovered
            .server_info
            .or_else(|| discovered.meta?.remove(META_SERVER_INFO))
            .unwrap_or_default();
        let _ = self.inner.stateless.set(stateless);
        Ok(ServerDetails {
            protocol_version: version.to_owned(),
            capabilities: discovered.capabilities,
            server_info,
            instructions: discovered.instructions,
        })
    }

    /// What the server said of itself when the connection began.
    pub fn server(&self) -> &ServerDetails {
        static NONE: std::sync::OnceLock<ServerDetails> = std::sync::OnceLock::new();
        self.inner
            .server
            .get()
            .unwrap_or_else(|| NONE.get_or_init(ServerDetails::default))
    }

    /// Whether the server is spoken to statelessly (2026-07-28).
    pub fn is_stateless(&self) -> bool {
        self.inner.stateless.get().is_some()
    }

    /// The operating-system id of the child process (stdio clients).
    pub fn pid(&self) -> Option<u32> {
        match &self.inner.transport {
            Transport::Stdio(process) => Some(process.pid()),
            _ => None,
        }
    }

    /// Sends a request and waits for its answer (the raw `result`).
    ///
    /// # Errors
    /// [`ClientError::Rpc`] when the server answers with an error, [`ClientError::Closed`]
    /// when the connection ends first.
    pub async fn request(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> Result<Box<RawValue>, ClientError> {
        self.request_with(method, params, Call::default()).await
    }

    /// [`request`](Self::request) with options. Dropping the future before the answer
    /// cancels the request on the server.
    ///
    /// # Errors
    /// As for [`request`](Self::request).
    pub async fn request_with(
        &self,
        method: &str,
        params: Option<Value>,
        call: Call,
    ) -> Result<Box<RawValue>, ClientError> {
        match self.inner.stateless.get() {
            Some(stateless) => {
                let over_http = matches!(self.inner.transport, Transport::Http(_));
                if over_http && method == "tools/call" && lock(&self.inner.tool_headers).is_none() {
                    // Its headers mirror what the tool's schema annotates: list them once.
                    let listed = self
                        .paginate("tools/list", "tools", |params| {
                            self.stateless_request(stateless, "tools/list", params, Call::default())
                        })
                        .await;
                    if let Err(error) = listed {
                        tracing::debug!(upstream = %self.inner.label, %error, "could not list tools for their headers");
                    }
                }
                self.stateless_request(stateless, method, params, call)
                    .await
            }
            None => {
                let params = params.unwrap_or_else(|| json!({}));
                self.exchange(method, params, call.progress, call.inputs, Vec::new())
                    .await
            }
        }
    }

    /// One request and its answer.
    async fn exchange(
        &self,
        method: &str,
        mut params: Value,
        progress: Option<mpsc::Sender<Progress>>,
        handler: Option<Arc<dyn ClientHandler>>,
        headers: Vec<(String, String)>,
    ) -> Result<Box<RawValue>, ClientError> {
        let inner = &self.inner;
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        if progress.is_some() {
            if let Some(meta) = meta_of(&mut params) {
                meta.insert("progressToken".to_owned(), Value::from(id));
            }
        }
        let text =
            json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string();
        let (answer, waiting) = oneshot::channel();
        {
            let mut pending = lock(&inner.pending);
            if let Some(reason) = inner.closed.borrow().clone() {
                return Err(ClientError::Closed(reason));
            }
            pending.insert(
                id,
                Pending {
                    answer,
                    progress,
                    // Asked once here, not for each message of the call's stream.
                    handler: handler.filter(|handler| handler.takes_call_stream()),
                },
            );
        }
        let mut guard = CancelOnDrop {
            inner,
            id,
            armed: true,
            sent: false,
        };
        let message = Outgoing {
            id: Some(id),
            text,
            headers,
            ..Outgoing::default()
        };
        if inner.outgoing.send(message).await.is_err() {
            guard.armed = false;
            lock(&inner.pending).remove(&id);
            return Err(ClientError::Closed(self.close_reason()));
        }
        guard.sent = true;
        let outcome = waiting.await;
        guard.armed = false;
        outcome.unwrap_or_else(|_| Err(ClientError::Closed(self.close_reason())))
    }

    /// A request to a stateless server: `_meta` (and over HTTP the headers) on every round,
    /// and the server's questions answered until it completes the request.
    async fn stateless_request(
        &self,
        stateless: &Stateless,
        method: &str,
        params: Option<Value>,
        call: Call,
    ) -> Result<Box<RawValue>, ClientError> {
        let mut params = params.unwrap_or_else(|| json!({}));
        if let Some(meta) = meta_of(&mut params) {
            for (key, value) in &stateless.meta {
                meta.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
        let headers = match self.inner.transport {
            Transport::Http(_) => self.stateless_headers(stateless, method, &params),
            _ => Vec::new(),
        };
        for _ in 0..MAX_INPUT_ROUNDS {
            let raw = self
                .exchange(
                    method,
                    params.clone(),
                    call.progress.clone(),
                    call.inputs.clone(),
                    headers.clone(),
                )
                .await?;
            let Some(asked) = input_required(&raw)? else {
                return Ok(raw);
            };
            let handler = call.inputs.as_ref().unwrap_or(&self.inner.handler);
            let answers = futures_util::future::join_all(asked.input_requests.into_iter().map(
                |(key, request)| {
                    let answer = handler.request(&request.method, request.params);
                    async move { (key, answer.await) }
                },
            ))
            .await;
            let mut responses = serde_json::Map::new();
            for (key, answer) in answers {
                let result = answer.map_err(|error| ClientError::Rpc {
                    code: error.code,
                    message: format!(
                        "the client could not answer the server's {key}: {}",
                        error.message
                    ),
                    data: error.data,
                })?;
                responses.insert(key, result);
            }
            if let Some(object) = params.as_object_mut() {
                object.insert("inputResponses".to_owned(), Value::Object(responses));
                // Echoed exactly as sent, or left out when the server sent none.
                match asked.request_state {
                    Some(state) => object.insert("requestState".to_owned(), state),
                    None => object.remove("requestState"),
                };
            }
        }
        Err(ClientError::InvalidAnswer(format!(
            "{method} still asked for input after {MAX_INPUT_ROUNDS} rounds"
        )))
    }

    /// The HTTP headers of a stateless request (SEP-2243): the version, the method, what it
    /// names, and the arguments its tool mirrors (as far as the tools were listed).
    fn stateless_headers(
        &self,
        stateless: &Stateless,
        method: &str,
        params: &Value,
    ) -> Vec<(String, String)> {
        let mut headers = vec![
            ("mcp-protocol-version".to_owned(), stateless.version.clone()),
            ("mcp-method".to_owned(), method.to_owned()),
        ];
        let named = match method {
            "tools/call" | "prompts/get" => params.get("name"),
            "resources/read" => params.get("uri"),
            _ => None,
        };
        let Some(name) = named.and_then(Value::as_str) else {
            return headers;
        };
        headers.push(("mcp-name".to_owned(), encode_header_value(name)));
        if method != "tools/call" {
            return headers;
        }
        let mirrored = lock(&self.inner.tool_headers)
            .as_ref()
            .and_then(|tools| tools.get(name).cloned());
        let arguments = params.get("arguments").unwrap_or(&Value::Null);
        for param in mirrored.iter().flat_map(|p| p.iter()) {
            if let Some(value) = param.header_value(arguments) {
                headers.push((format!("mcp-param-{}", param.suffix), value));
            }
        }
        headers
    }

    /// Sends a notification (waits only for room in the outgoing queue).
    pub async fn notify(&self, method: &str, params: Option<Value>) {
        let text = match params {
            Some(params) => json!({ "jsonrpc": "2.0", "method": method, "params": params }),
            None => json!({ "jsonrpc": "2.0", "method": method }),
        }
        .to_string();
        let message = Outgoing {
            text,
            ..Outgoing::default()
        };
        let _ = self.inner.outgoing.send(message).await;
    }

    /// Every item of a paginated list (`tools/list` → `tools`, …), following `nextCursor`.
    /// A tool with an invalid `x-mcp-header` annotation is left out (logged), as clients
    /// must; the others' annotations are kept for the headers of their calls.
    ///
    /// # Errors
    /// As for [`request`](Self::request); [`ClientError::InvalidAnswer`] when a page has no
    /// array under `member`, when the pages come to more than
    /// [`ClientOptions::max_list_bytes`], or when a `nextCursor` comes a second time (the
    /// list would never end).
    pub async fn list_all(&self, method: &str, member: &str) -> Result<Vec<Value>, ClientError> {
        self.paginate(method, member, |params| self.request(method, params))
            .await
    }

    async fn paginate<F, Answer>(
        &self,
        method: &str,
        member: &str,
        mut fetch: F,
    ) -> Result<Vec<Value>, ClientError>
    where
        F: FnMut(Option<Value>) -> Answer,
        Answer: std::future::Future<Output = Result<Box<RawValue>, ClientError>>,
    {
        let limit = self.inner.max_list_bytes;
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        // Each cursor given so far: one that comes again would loop for ever. What they
        // hold is bounded with the pages that carried them.
        let mut cursors = std::collections::HashSet::new();
        let mut bytes = 0usize;
        // A server that keeps handing out cursors is cut off: no list is this long.
        for _ in 0..1000 {
            let params = cursor.take().map(|c| json!({ "cursor": c }));
            let raw = fetch(params).await?;
            // The list is kept whole: what its pages come to is what it holds (many times
            // that once parsed), and the server may hand out pages without end.
            bytes = bytes.saturating_add(raw.get().len());
            if bytes > limit {
                return Err(ClientError::InvalidAnswer(format!(
                    "its pages came to over {limit} bytes, the most one list may take"
                )));
            }
            let mut page: Value = parse(&raw)?;
            drop(raw);
            // Moved out of the page, not copied: a page's items are not held twice.
            match page.get_mut(member).map(Value::take) {
                Some(Value::Array(page_items)) => items.extend(page_items),
                _ => {
                    return Err(ClientError::InvalidAnswer(format!(
                        "{method} answered without {member}"
                    )))
                }
            }
            match page.get_mut("nextCursor").map(Value::take) {
                Some(Value::String(next)) if !next.is_empty() => {
                    if !cursors.insert(next.clone()) {
                        return Err(ClientError::InvalidAnswer(
                            "a nextCursor came a second time (the list would not end)".into(),
                        ));
                    }
                    cursor = Some(next);
                }
                _ if method == "tools/list" => return Ok(self.keep_tool_headers(items)),
                _ => return Ok(items),
            }
        }
        Err(ClientError::InvalidAnswer(format!(
            "{method} kept paginating"
        )))
    }

    /// The tools whose annotations are valid, with what each mirrors kept.
    fn keep_tool_headers(&self, mut tools: Vec<Value>) -> Vec<Value> {
        let mut mirrored = HashMap::new();
        tools.retain(|tool| {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
            let schema = tool.get("inputSchema").unwrap_or(&Value::Null);
            match header_params(schema) {
                Ok(params) => {
                    if !params.is_empty() {
                        mirrored.insert(name.to_owned(), Arc::from(params));
                    }
                    true
                }
                Err(why) => {
                    tracing::warn!(upstream = %self.inner.label, tool = name, %why, "left out a tool with an invalid x-mcp-header");
                    false
                }
            }
        });
        *lock(&self.inner.tool_headers) = Some(mirrored);
        tools
    }

    /// Calls a tool; the result as the server sent it.
    ///
    /// # Errors
    /// As for [`request`](Self::request).
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Result<Value, ClientError> {
        let raw = self
            .request(
                "tools/call",
                Some(json!({ "name": name, "arguments": arguments })),
            )
            .await?;
        parse(&raw)
    }

    /// Whether the connection is over.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.borrow().is_some()
    }

    /// Resolves when the connection is over, with how it ended.
    pub async fn closed(&self) -> Arc<str> {
        let mut watch = self.inner.closed.subscribe();
        let reason = match watch.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone(),
            Err(_) => None,
        };
        reason.unwrap_or_else(|| Arc::from("closed"))
    }

    /// [`closed`](Self::closed), as a future that does not hold the connection open: it
    /// ends when the connection closes, or when every handle to it is gone.
    pub(crate) fn on_close(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut watch = self.inner.closed.subscribe();
        async move {
            // An error: the sender went with the last handle.
            let _ = watch.wait_for(Option::is_some).await;
        }
    }

    fn close_reason(&self) -> Arc<str> {
        self.inner
            .closed
            .borrow()
            .clone()
            .unwrap_or_else(|| Arc::from("closed"))
    }

    /// Ends the connection: a child process gets its stdin closed and SIGTERM, then SIGKILL
    /// after `grace`; an HTTP session is deleted; a WebSocket gets a normal close frame (and
    /// up to `grace` for the server's). Requests still waiting fail with
    /// [`ClientError::Closed`].
    pub async fn shutdown(&self, grace: Duration) {
        match &self.inner.transport {
            Transport::Stdio(process) => process.terminate(grace).await,
            Transport::Http(session) => session.delete().await,
            Transport::WebSocket(connection) => connection.close(grace).await,
        }
        self.inner.close("shut down by the client");
    }

    /// Kills a child process at once (stdio); closes the connection otherwise.
    pub fn kill(&self) {
        match &self.inner.transport {
            Transport::Stdio(process) => process.kill(),
            Transport::Http(_) => {}
            Transport::WebSocket(connection) => connection.abort(),
        }
        self.inner.close("killed by the client");
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Every handle is gone: a child that would not exit on the end of its stdin is not
        // left running.
        if let Transport::Stdio(process) = &self.transport {
            process.kill();
        }
        let unsaid = lock(&self.skipped_warnings).unsaid;
        self.say_unsaid(unsaid);
    }
}

/// Cancels a request whose caller stopped waiting.
struct CancelOnDrop<'a> {
    inner: &'a Arc<Inner>,
    id: u64,
    armed: bool,
    /// Whether the request went into the outgoing queue: one dropped while it waited for
    /// room was never sent, and is not cancelled (its caller's wait is simply over).
    sent: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed || lock(&self.inner.pending).remove(&self.id).is_none() || !self.sent {
            return;
        }
        let text = json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": { "requestId": self.id, "reason": "the client cancelled the request" },
        })
        .to_string();
        let message = Outgoing {
            text,
            // Over HTTP its POST is dropped too (`http::Session::run`).
            cancels: Some(self.id),
            ..Outgoing::default()
        };
        if let Err(mpsc::error::TrySendError::Full(message)) = self.inner.outgoing.try_send(message)
        {
            // The queue is full: the cancel waits its turn rather than being lost, unless as
            // many wait already as the queue holds. A server that reads nothing (a child
            // that stopped reading its stdin) would otherwise gather a waiting task a
            // cancel, for as long as it lives; its requests' answers, should they come, are
            // dropped as for any request no longer waited for.
            let Ok(place) = self.inner.cancels_waiting.clone().try_acquire_owned() else {
                tracing::debug!(upstream = %self.inner.label, id = self.id, "a cancel was dropped: the server reads nothing");
                return;
            };
            let message = Outgoing {
                place: Some(place),
                ..message
            };
            let outgoing = self.inner.outgoing.clone();
            tokio::spawn(async move {
                let _ = outgoing.send(message).await;
            });
        }
    }
}

/// A message from the server, as far as routing needs it.
#[derive(Deserialize)]
struct Incoming<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(default)]
    method: Option<&'a str>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    /// Present, even as `null` (a valid JSON-RPC result: the request is answered).
    #[serde(borrow, default, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    /// Read as it is: an error object that is not one (no `message`, a code that is no
    /// integer) still answers its request, as a malformed answer.
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

/// A member that is there, whatever its value (`null` too, which `Option` reads as absent).
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

/// A request the server sent, owned, for answering later.
pub(crate) struct ServerRequest {
    method: String,
    id: Box<RawValue>,
    params: Option<Box<RawValue>>,
    /// Who answers it: the handler of the request it came with ([`Call::inputs`]), else
    /// the connection's.
    handler: Option<Arc<dyn ClientHandler>>,
}

impl std::fmt::Debug for ServerRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerRequest")
            .field("method", &self.method)
            .field("id", &self.id)
            .field("of_a_call", &self.handler.is_some())
            .finish_non_exhaustive()
    }
}

/// Answers the requests [`Inner::receive`] held, each once an answering place is free: the
/// reader calling this reads nothing more from the server meanwhile. It holds no handle of
/// the connection while it waits, and gives up (the requests unanswered) once the
/// connection is over, its last handle gone, or `until` (the transport closing) comes: a
/// reader held back by a server that reads nothing must still let the connection end.
pub(crate) async fn answer_held(
    inner: &std::sync::Weak<Inner>,
    held: Vec<ServerRequest>,
    until: impl std::future::Future<Output = ()>,
) {
    if held.is_empty() {
        return;
    }
    let Some((answering, mut closed)) = inner
        .upgrade()
        .map(|inner| (inner.answering.clone(), inner.closed.subscribe()))
    else {
        return;
    };
    let mut until = std::pin::pin!(until);
    for request in held {
        let place = tokio::select! {
            place = answering.clone().acquire_owned() => place,
            // Closed, or the sender dropped with the last handle.
            _ = closed.wait_for(Option::is_some) => return,
            () = &mut until => return,
        };
        let Ok(place) = place else { return };
        let Some(inner) = inner.upgrade() else { return };
        inner.answer(request, place);
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProgressParams {
    progress_token: Value,
    progress: f64,
    #[serde(default)]
    total: Option<f64>,
    #[serde(default)]
    message: Option<String>,
}

impl Inner {
    /// Takes one message (or batch) the server sent. What it returns are the server's
    /// requests that found no answering place: the reader hands them to [`answer_held`]
    /// before it reads on.
    #[must_use]
    pub(crate) fn receive(self: &Arc<Self>, text: &str) -> Vec<ServerRequest> {
        self.receive_related(text, None)
    }

    /// [`receive`](Self::receive) of what came with our request `related` (on its own
    /// stream): its log lines and requests go to that request's handler, if it has one.
    #[must_use]
    pub(crate) fn receive_related(
        self: &Arc<Self>,
        text: &str,
        related: Option<u64>,
    ) -> Vec<ServerRequest> {
        let mut held = Vec::new();
        let trimmed = text.trim_start();
        if trimmed.starts_with('[') {
            match serde_json::from_str::<Vec<&RawValue>>(trimmed) {
                Ok(entries) => entries
                    .iter()
                    .for_each(|e| self.receive_one(e.get(), related, &mut held)),
                Err(error) => self.skip(text, &error.to_string()),
            }
        } else {
            self.receive_one(text, related, &mut held);
        }
        held
    }

    fn skip(&self, text: &str, why: &str) {
        self.warn_skipped(|| {
            let shown: String = text.chars().take(200).collect();
            tracing::warn!(upstream = %self.label, %why, line = %shown, "skipped a message that is not JSON-RPC");
        });
    }

    /// Logs, with `warn`, a message of the server skipped (not JSON-RPC, not UTF-8, too
    /// long, a binary frame), at most [`SKIPPED_WARNINGS_PER_SECOND`] a second: the rest
    /// are counted, and their number said before the first of a later second, or when the
    /// connection ends. (A server writing short lines without end, or a client making it
    /// echo them through a tool, made each a log line many times its size; attack run 52c.)
    pub(crate) fn warn_skipped(&self, warn: impl FnOnce()) {
        let unsaid = {
            let mut warnings = lock(&self.skipped_warnings);
            let now = std::time::Instant::now();
            let mut unsaid = 0;
            if now.duration_since(warnings.second) >= std::time::Duration::from_secs(1) {
                unsaid = std::mem::take(&mut warnings.unsaid);
                (warnings.second, warnings.logged) = (now, 0);
            }
            if warnings.logged == SKIPPED_WARNINGS_PER_SECOND {
                warnings.unsaid += 1;
                return;
            }
            warnings.logged += 1;
            unsaid
        };
        self.say_unsaid(unsaid);
        warn();
    }

    /// Says how many warnings of skipped messages were not logged, if any.
    fn say_unsaid(&self, unsaid: u64) {
        if unsaid > 0 {
            tracing::warn!(upstream = %self.label, skipped = unsaid, "skipped messages not logged (more than {SKIPPED_WARNINGS_PER_SECOND} a second)");
        }
    }

    /// The handler of our request `related` that takes what the server sends on its
    /// stream ([`ClientHandler::takes_call_stream`]), if any. Looked up only for a
    /// notification or a request: an answer, the common message, needs none.
    fn call_handler(&self, related: Option<u64>) -> Option<Arc<dyn ClientHandler>> {
        related.and_then(|id| lock(&self.pending).get(&id)?.handler.clone())
    }

    fn receive_one(
        self: &Arc<Self>,
        text: &str,
        related: Option<u64>,
        held: &mut Vec<ServerRequest>,
    ) {
        let message: Incoming<'_> = match serde_json::from_str(text) {
            Ok(message) => message,
            Err(error) => return self.skip(text, &error.to_string()),
        };
        match (message.method, message.id) {
            (Some(method), Some(id)) => {
                let request = ServerRequest {
                    method: method.to_owned(),
                    id: id.to_owned(),
                    params: message.params.map(ToOwned::to_owned),
                    handler: self.call_handler(related),
                };
                // Once one waits, those after it in the same batch wait behind it.
                let place = if held.is_empty() {
                    self.answering.clone().try_acquire_owned().ok()
                } else {
                    None
                };
                match place {
                    Some(place) => self.answer(request, place),
                    None => held.push(request),
                }
            }
            (Some(method), None) => {
                let handler = (method == "notifications/message")
                    .then(|| self.call_handler(related))
                    .flatten();
                self.on_notification(method, message.params, handler.as_ref());
            }
            (None, Some(id)) => {
                let Ok(id) = serde_json::from_str::<u64>(id.get()) else {
                    return self.skip(text, "a response to an id this client never used");
                };
                // A response to one of ours is its answer, whatever else is wrong with it:
                // skipped, its request waited for its deadline.
                // `"error": null` beside a result is a success (JSON-RPC 1.0 libraries send
                // it).
                let error = message.error.filter(|error| error.get() != "null");
                let outcome = match (message.result, error) {
                    (Some(result), None) => Ok(result.to_owned()),
                    (_, Some(error)) => Err(match serde_json::from_str::<RpcError>(error.get()) {
                        Ok(error) => ClientError::Rpc {
                            code: error.code,
                            message: error.message,
                            data: error.data,
                        },
                        Err(_) => ClientError::InvalidAnswer(
                            "an error that is no JSON-RPC error object".to_owned(),
                        ),
                    }),
                    (None, None) => Err(ClientError::InvalidAnswer(
                        "a response without result or error".to_owned(),
                    )),
                };
                // None: cancelled (a late answer is dropped) or never ours.
                if let Some(pending) = lock(&self.pending).remove(&id) {
                    let _ = pending.answer.send(outcome);
                }
            }
            (None, None) => self.skip(text, "neither a request, a notification nor a response"),
        }
    }

    /// A notification: progress to the call that asked for it; a log line that came with
    /// one of our requests to that request's handler, if it has one ([`Call::inputs`]);
    /// anything else to the connection's handler.
    fn on_notification(
        &self,
        method: &str,
        params: Option<&RawValue>,
        handler: Option<&Arc<dyn ClientHandler>>,
    ) {
        if method == "notifications/progress" {
            if let Some(p) =
                params.and_then(|p| serde_json::from_str::<ProgressParams>(p.get()).ok())
            {
                let id = match &p.progress_token {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) => s.parse().ok(),
                    _ => None,
                };
                let pending = lock(&self.pending);
                if let Some(sink) = id.and_then(|id| pending.get(&id)?.progress.as_ref()) {
                    // Progress is advisory: a full channel drops the report.
                    let _ = sink.try_send(Progress {
                        progress: p.progress,
                        total: p.total,
                        message: p.message,
                    });
                    return;
                }
            }
        }
        // `handler` is only looked up for a log line (`receive_one`).
        handler
            .unwrap_or(&self.handler)
            .notification(method, params);
    }

    /// Answers one of the server's requests (in a task of its own: the handler may ask the
    /// user), holding `place` until the answer is written.
    fn answer(self: &Arc<Self>, request: ServerRequest, place: OwnedSemaphorePermit) {
        let ServerRequest {
            method,
            id,
            params,
            handler,
        } = request;
        let answer = if method == "ping" {
            Box::pin(async { Ok(json!({})) })
        } else {
            handler
                .as_ref()
                .unwrap_or(&self.handler)
                .request(&method, params)
        };
        let inner = Arc::downgrade(self);
        tokio::spawn(async move {
            let outcome = answer.await;
            let Some(inner) = inner.upgrade() else { return };
            let text = match outcome {
                Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
                Err(error) => json!({ "jsonrpc": "2.0", "id": id, "error": error }),
            }
            .to_string();
            let message = Outgoing {
                text,
                place: Some(place),
                ..Outgoing::default()
            };
            let outgoing = inner.outgoing.clone();
            // No handle held while the queue is full: the connection may end meanwhile.
            drop(inner);
            let _ = outgoing.send(message).await;
        });
    }

    /// Fails one request (a transport that answers each message on its own could not
    /// deliver it).
    pub(crate) fn fail(&self, id: u64, error: ClientError) {
        if let Some(pending) = lock(&self.pending).remove(&id) {
            let _ = pending.answer.send(Err(error));
        }
    }

    /// The connection is over: every request waiting fails with `reason`.
    pub(crate) fn close(&self, reason: &str) {
        let reason: Arc<str> = Arc::from(reason);
        let waiting: Vec<Pending> = {
            let mut pending = lock(&self.pending);
            let first = self.closed.send_if_modified(|closed| {
                if closed.is_none() {
                    *closed = Some(reason.clone());
                    true
                } else {
                    false
                }
            });
            if !first && pending.is_empty() {
                return;
            }
            pending.drain().map(|(_, p)| p).collect()
        };
        let reason = self.closed.borrow().clone().unwrap_or(reason);
        for pending in waiting {
            let _ = pending
                .answer
                .send(Err(ClientError::Closed(reason.clone())));
        }
    }

    /// The label log lines of this connection carry.
    pub(crate) fn label(&self) -> &Arc<str> {
        &self.label
    }
}

/// The `_meta` object of `params`, made if missing (`None` when `params` is not an object).
fn meta_of(params: &mut Value) -> Option<&mut serde_json::Map<String, Value>> {
    params
        .as_object_mut()?
        .entry("_meta")
        .or_insert_with(|| Value::Object(Default::default()))
        .as_object_mut()
}

/// What a stateless server asks before it completes a request.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InputRequired {
    #[serde(default)]
    input_requests: HashMap<String, InputRequest>,
    #[serde(default)]
    request_state: Option<Value>,
}

#[derive(Deserialize)]
struct InputRequest {
    method: String,
    #[serde(default)]
    params: Option<Box<RawValue>>,
}

/// The server's questions when `raw` is an `input_required` result.
fn input_required(raw: &RawValue) -> Result<Option<InputRequired>, ClientError> {
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(default, rename = "resultType", borrow)]
        result_type: Option<std::borrow::Cow<'a, str>>,
    }
    let kind: Kind<'_> = parse_borrowed(raw)?;
    if kind.result_type.as_deref() != Some("input_required") {
        return Ok(None);
    }
    let asked: InputRequired = parse(raw)?;
    if asked.input_requests.is_empty() {
        return Err(ClientError::InvalidAnswer(
            "input_required without inputRequests".into(),
        ));
    }
    Ok(Some(asked))
}

fn parse_borrowed<'a, T: Deserialize<'a>>(raw: &'a RawValue) -> Result<T, ClientError> {
    serde_json::from_str(raw.get()).map_err(|e| ClientError::InvalidAnswer(e.to_string()))
}

/// The code of a refused protocol version (2026-07-28).
const UNSUPPORTED_VERSION: i64 = -32022;

/// The versions an error's `data.supported` lists that this client knows (none for an error
/// that is not a JSON-RPC one).
fn supported_versions(error: &ClientError) -> Vec<ProtocolVersion> {
    let ClientError::Rpc { data, .. } = error else {
        return Vec::new();
    };
    data.as_ref()
        .and_then(|d| d.get("supported"))
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .filter_map(ProtocolVersion::parse)
                .collect()
        })
        .unwrap_or_default()
}

/// The newest version a refusal offers that this client knows.
fn supported_offer(error: &ClientError) -> Option<ProtocolVersion> {
    let supported = supported_versions(error);
    // Newest first.
    ProtocolVersion::ALL
        .into_iter()
        .find(|v| supported.contains(v))
}

/// The stateless version an `initialize` refusal offers instead: the server's list of
/// supported versions (`data.supported`) names one, or it answered -32022 (unsupported
/// version) with no list.
fn stateless_offer(error: &ClientError) -> Option<ProtocolVersion> {
    let supported = supported_versions(error);
    match ProtocolVersion::STATELESS
        .into_iter()
        .find(|v| supported.contains(v))
    {
        Some(version) => Some(version),
        None if supported.is_empty()
            && matches!(error, ClientError::Rpc { code, .. } if *code == UNSUPPORTED_VERSION) =>
        {
            Some(ProtocolVersion::STATELESS[0])
        }
        None => None,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Parses a raw result into `T`.
///
/// # Errors
/// [`ClientError::InvalidAnswer`] naming what does not fit.
pub fn parse<T: serde::de::DeserializeOwned>(raw: &RawValue) -> Result<T, ClientError> {
    serde_json::from_str(raw.get()).map_err(|e| ClientError::InvalidAnswer(e.to_string()))
}
