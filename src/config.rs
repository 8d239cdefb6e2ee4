//! Settings: what can be configured, with defaults equal to `config/default.toml`.
//!
//! Precedence, lowest first: built-in defaults < the config file (`--config` /
//! `MCP_WS_CONFIG`, else `config/default.toml` when present) < `MCP_WS_LISTEN` /
//! `--listen`. Durations carry their unit in the field name.

use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file loaded when no `--config` is given and it exists in the working directory.
pub const DEFAULT_CONFIG_PATH: &str = "config/default.toml";

/// Everything that can be configured; `Default` equals `config/default.toml`.
///
/// ```
/// let mut settings = mcp_ws::Settings::default();
/// settings.server.listen = "127.0.0.1:9000".parse().unwrap();
/// settings.limits.max_in_flight_per_session = 16;
/// assert!(settings.validate().is_ok());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// The listener and the session cap.
    pub server: ServerSettings,
    /// How the server presents itself in `initialize`.
    pub info: InfoSettings,
    /// The demo capabilities the binary registers.
    pub builtins: BuiltinsSettings,
    /// Checks on every HTTP request to the MCP endpoint.
    pub http: HttpSettings,
    /// Limits on what clients and tools can make the server hold.
    pub limits: Limits,
    /// Requests the server sends the client for its tools.
    pub client_requests: ClientRequestSettings,
    /// Files served as resources.
    pub resources: ResourceSettings,
    /// Sessions that outlive a connection (HTTP), their event buffers and reaping.
    pub sessions: SessionSettings,
    /// Throttling of progress notifications.
    pub progress: ProgressSettings,
    /// WebSocket pings.
    pub heartbeat: HeartbeatSettings,
    /// Graceful shutdown.
    pub shutdown: ShutdownSettings,
    /// Server logs (format, access-log redaction) and the client log level.
    pub logging: LoggingSettings,
    /// Which version of a tool registered in several versions each session sees.
    pub rollout: RolloutSettings,
}

/// Gray release of tool versions: rules choosing, per session, which version of a tool
/// registered in several versions ([`Tool::version`](crate::Tool::version)) it sees.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RolloutSettings {
    /// The rules, first match first (`[[rollout.rules]]`).
    pub rules: Vec<RolloutRule>,
}

/// Serves `version` of `tool` to the identities listed, and to `percent` percent of all
/// identities, chosen by a stable hash of the identity and the tool's name.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutRule {
    /// The tool's name.
    pub tool: String,
    /// The version served to the identities this rule selects.
    pub version: String,
    /// Identities (subjects) that get this version.
    #[serde(default)]
    pub identities: Vec<String>,
    /// Share of all identities, 0 to 100 (hundredths count), that get this version.
    #[serde(default)]
    pub percent: f64,
}

/// How the server presents itself (`serverInfo` and `instructions` in `initialize`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InfoSettings {
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`; empty means this crate's version.
    pub version: String,
    /// `serverInfo.title` (2025-06-18 sessions and newer); empty means none.
    pub title: String,
    /// `instructions`: how to use the server, for the model; empty means none.
    pub instructions: String,
}

/// Which built-in capabilities the `mcp-ws` binary registers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BuiltinsSettings {
    /// `"demo"` (echo, add, sleep, fail, a readme, greet), `"conformance"` (the fixtures of
    /// the official MCP conformance suite), or `"none"`.
    pub set: String,
}

/// Requests the server sends the client on behalf of a tool (roots, sampling, elicitation).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientRequestSettings {
    /// How long a tool waits for the client's answer before the request is cancelled, in ms.
    pub timeout_ms: u64,
}

/// Sessions that outlive a connection: Streamable HTTP sessions and their SSE event buffers.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionSettings {
    /// How long a WebSocket session whose socket dropped is kept for a reconnect, in ms; 0
    /// ends it with its socket.
    pub resume_grace_ms: u64,
    /// Messages a WebSocket session without a socket keeps for its reconnect; one more ends
    /// the session (a reconnect could not be made whole).
    pub resume_buffer_messages: usize,
    /// An HTTP session with no request, no open stream and nothing running for this long is
    /// ended, in ms.
    pub http_idle_timeout_ms: u64,
    /// SSE events an HTTP session keeps for `Last-Event-ID` resumption.
    pub event_buffer_messages: usize,
    /// How long an SSE event is kept for resumption, in ms.
    pub event_buffer_age_ms: u64,
    /// Gap between SSE keep-alive comments on an idle stream, in ms.
    pub sse_keep_alive_ms: u64,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self {
            resume_grace_ms: 30_000,
            resume_buffer_messages: 1000,
            http_idle_timeout_ms: 300_000,
            event_buffer_messages: 1000,
            event_buffer_age_ms: 300_000,
            sse_keep_alive_ms: 15_000,
        }
    }
}

/// Files served as resources.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceSettings {
    /// Directories whose files are resources (`file://` URIs), watched for changes.
    pub directories: Vec<DirectorySettings>,
}

/// One directory of files served as resources.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectorySettings {
    /// The directory.
    pub path: PathBuf,
    /// Largest file served, in bytes; a larger one is listed but its read gets -32005.
    #[serde(default = "default_max_file_bytes")]
    pub max_file_bytes: u64,
}

impl DirectorySettings {
    /// `path`, with the default `max_file_bytes` (1 MiB).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            max_file_bytes: default_max_file_bytes(),
        }
    }
}

fn default_max_file_bytes() -> u64 {
    1024 * 1024
}

/// The listener and the session cap.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSettings {
    /// Address the HTTP/WebSocket listener binds.
    pub listen: SocketAddr,
    /// actix worker threads (each a single-threaded event loop); 0 = one per core.
    pub workers: usize,
    /// TCP listen backlog, so bursts of connects are queued, not refused.
    pub backlog: u32,
    /// Concurrent WebSocket sessions; an upgrade beyond this gets HTTP 503.
    pub max_sessions: usize,
    /// Address of a separate admin listener serving `/metrics` and `/healthz`; then
    /// `/metrics` is not served on `listen`. Empty in TOML (`None`): `/metrics` on `listen`.
    #[serde(deserialize_with = "optional_addr")]
    pub admin_listen: Option<SocketAddr>,
}

/// An address, or `""` for none (TOML has no null).
fn optional_addr<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let text = String::deserialize(d)?;
    if text.is_empty() {
        return Ok(None);
    }
    text.parse()
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("{text:?} is not a socket address: {e}")))
}

/// Checks on every HTTP request to the MCP endpoint (WebSocket upgrades included).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSettings {
    /// Origins (`scheme://host[:port]`, or `"*"`) whose pages may use the server. Empty: only
    /// an origin naming the request's own host, or a loopback origin on a loopback bind.
    pub allowed_origins: Vec<String>,
    /// `Host` values the server answers to (`name` for any port, or `name:port`). Empty: any
    /// host, except on a loopback bind, where only loopback names (DNS-rebinding defence).
    pub allowed_hosts: Vec<String>,
}

/// Limits on what clients and tools can make the server hold, each with a clear refusal.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest accepted message (one frame, or continuation frames reassembled), in bytes.
    pub max_message_bytes: usize,
    /// Most entries in one JSON-RPC batch.
    pub max_batch_len: usize,
    /// Requests one session may have running in workers at once; more are refused at once.
    pub max_in_flight_per_session: usize,
    /// Worker slots shared by all sessions (the global pool).
    pub max_concurrent_requests: usize,
    /// How long a request may wait for a slot in the global pool, in milliseconds.
    pub admission_wait_ms: u64,
    /// A request's time limit, in milliseconds (progress may extend it, see below).
    pub request_timeout_ms: u64,
    /// Hard maximum of a request's run time however much progress it reports, in ms.
    pub max_request_timeout_ms: u64,
    /// Per-tool overrides of `request_timeout_ms`, by tool name.
    pub tool_timeout_ms: BTreeMap<String, u64>,
    /// Entries per page of a `*/list` answer.
    pub page_size: usize,
    /// Resource subscriptions one session may hold.
    pub max_subscriptions_per_session: usize,
}

/// Throttling of progress notifications.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProgressSettings {
    /// Minimum gap between two progress notifications of one request, in ms; reports that
    /// come sooner are coalesced (dropped, the next one carries the newer value).
    pub min_interval_ms: u64,
}

/// WebSocket pings, and when a silent client is disconnected.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeartbeatSettings {
    /// How often the server pings each client, in ms.
    pub interval_ms: u64,
    /// A client silent (no frame, no pong) this long is disconnected, in ms.
    pub client_timeout_ms: u64,
}

/// Graceful shutdown on SIGINT/SIGTERM.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShutdownSettings {
    /// On SIGINT/SIGTERM, how long in-flight requests may run before being cancelled, in ms.
    pub grace_ms: u64,
}

/// Server logs, and the level sent to clients.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoggingSettings {
    /// Server-side log filter (tracing `EnvFilter` syntax); `RUST_LOG` overrides it. The
    /// access log is the target `mcp_ws::access` at `info` (off: `mcp_ws::access=off`).
    pub filter: String,
    /// `text` (human-readable lines) or `json` (one JSON object per line).
    pub format: LogFormat,
    /// Least severe level sent to a client as `notifications/message` until it calls
    /// `logging/setLevel`.
    pub client_level: String,
    /// Params members whose values the access log replaces with `"[redacted]"`, at any
    /// depth: a member is redacted when its name, lowercased and without `_` and `-`,
    /// contains one of these (so `token` covers `accessToken` and `refresh_token`).
    pub redact_keys: Vec<String>,
    /// Longest params text in an access-log line, in bytes; longer is cut, ending in `…`.
    pub access_params_max_bytes: usize,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (`tracing_subscriber`'s full format).
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, the event's fields at the
    /// top level (`message` included), and `span` / `spans` with their fields.
    Json,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8765)),
            workers: 0,
            backlog: 4096,
            max_sessions: 10_000,
            admin_listen: None,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_message_bytes: 4 * 1024 * 1024,
            max_batch_len: 100,
            max_in_flight_per_session: 64,
            max_concurrent_requests: 512,
            admission_wait_ms: 5_000,
            request_timeout_ms: 60_000,
            max_request_timeout_ms: 600_000,
            tool_timeout_ms: BTreeMap::new(),
            page_size: 100,
            max_subscriptions_per_session: 1000,
        }
    }
}

impl Default for InfoSettings {
    fn default() -> Self {
        Self {
            name: "mcp-ws".to_owned(),
            version: String::new(),
            title: String::new(),
            instructions: String::new(),
        }
    }
}

impl Default for BuiltinsSettings {
    fn default() -> Self {
        Self {
            set: "demo".to_owned(),
        }
    }
}

impl Default for ClientRequestSettings {
    fn default() -> Self {
        Self { timeout_ms: 60_000 }
    }
}

impl Default for ProgressSettings {
    fn default() -> Self {
        Self {
            min_interval_ms: 20,
        }
    }
}

impl Default for HeartbeatSettings {
    fn default() -> Self {
        Self {
            interval_ms: 10_000,
            client_timeout_ms: 30_000,
        }
    }
}

impl Default for ShutdownSettings {
    fn default() -> Self {
        Self { grace_ms: 10_000 }
    }
}

impl Default for LoggingSettings {
    fn default() -> Self {
        Self {
            filter: "info".to_owned(),
            format: LogFormat::Text,
            client_level: "info".to_owned(),
            redact_keys: [
                "password",
                "passwd",
                "secret",
                "token",
                "apikey",
                "authorization",
                "cookie",
                "credential",
                "privatekey",
                "signature",
            ]
            .map(str::to_owned)
            .to_vec(),
            access_params_max_bytes: 2048,
        }
    }
}

impl Limits {
    /// The time limit of a request that is not a tool call.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms.min(self.max_request_timeout_ms))
    }

    /// The time limit of a call to `tool`.
    pub fn timeout_for_tool(&self, tool: &str) -> Duration {
        let ms = self
            .tool_timeout_ms
            .get(tool)
            .copied()
            .unwrap_or(self.request_timeout_ms);
        Duration::from_millis(ms.min(self.max_request_timeout_ms))
    }
}

/// Why settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for these settings (an unknown key, a wrong type).
    #[error("invalid config file {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: toml::de::Error,
    },
    /// A value the server cannot run with; the message names the setting.
    #[error("invalid setting: {0}")]
    Invalid(String),
}

impl Settings {
    /// Reads a TOML file; members it leaves out keep their defaults.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let settings: Self = toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })?;
        settings.validate()?;
        Ok(settings)
    }

    /// Loads the file named on the command line, else `config/default.toml` if present,
    /// else the built-in defaults; then applies the `--listen` override.
    pub fn load(config: Option<&Path>, listen: Option<SocketAddr>) -> Result<Self, ConfigError> {
        let mut settings = match config {
            Some(path) => Self::from_file(path)?,
            None if Path::new(DEFAULT_CONFIG_PATH).exists() => {
                Self::from_file(Path::new(DEFAULT_CONFIG_PATH))?
            }
            None => Self::default(),
        };
        if let Some(listen) = listen {
            settings.server.listen = listen;
        }
        settings.validate()?;
        Ok(settings)
    }

    /// Rejects settings the server cannot run with.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let l = &self.limits;
        let positive = [
            ("limits.max_message_bytes", l.max_message_bytes as u64),
            ("limits.max_batch_len", l.max_batch_len as u64),
            (
                "limits.max_in_flight_per_session",
                l.max_in_flight_per_session as u64,
            ),
            (
                "limits.max_concurrent_requests",
                l.max_concurrent_requests as u64,
            ),
            ("limits.request_timeout_ms", l.request_timeout_ms),
            ("heartbeat.interval_ms", self.heartbeat.interval_ms),
            (
                "heartbeat.client_timeout_ms",
                self.heartbeat.client_timeout_ms,
            ),
            ("server.max_sessions", self.server.max_sessions as u64),
            ("limits.page_size", l.page_size as u64),
            (
                "sessions.http_idle_timeout_ms",
                self.sessions.http_idle_timeout_ms,
            ),
            (
                "sessions.event_buffer_messages",
                self.sessions.event_buffer_messages as u64,
            ),
            (
                "sessions.sse_keep_alive_ms",
                self.sessions.sse_keep_alive_ms,
            ),
            (
                "client_requests.timeout_ms",
                self.client_requests.timeout_ms,
            ),
            (
                "logging.access_params_max_bytes",
                self.logging.access_params_max_bytes as u64,
            ),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Invalid(format!(
                "{name} must be greater than 0"
            )));
        }
        if l.max_request_timeout_ms < l.request_timeout_ms {
            return Err(ConfigError::Invalid(
                "limits.max_request_timeout_ms must be >= limits.request_timeout_ms".into(),
            ));
        }
        if !["demo", "conformance", "none"].contains(&self.builtins.set.as_str()) {
            return Err(ConfigError::Invalid(format!(
                "builtins.set: {:?} is not one of demo, conformance, none",
                self.builtins.set
            )));
        }
        if self.info.name.is_empty() {
            return Err(ConfigError::Invalid("info.name must not be empty".into()));
        }
        if self
            .logging
            .redact_keys
            .iter()
            .any(|k| k.chars().all(|c| c == '_' || c == '-' || c.is_whitespace()))
        {
            return Err(ConfigError::Invalid(
                "logging.redact_keys: an empty key would redact every member".into(),
            ));
        }
        for (i, rule) in self.rollout.rules.iter().enumerate() {
            let name = format!("rollout.rules[{i}]");
            if rule.tool.is_empty() || rule.version.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "{name}: tool and version must not be empty"
                )));
            }
            if !(0.0..=100.0).contains(&rule.percent) {
                return Err(ConfigError::Invalid(format!(
                    "{name}.percent: {} is not between 0 and 100",
                    rule.percent
                )));
            }
        }
        if crate::mcp::LogLevel::parse(&self.logging.client_level).is_none() {
            return Err(ConfigError::Invalid(format!(
                "logging.client_level: unknown level {:?}",
                self.logging.client_level
            )));
        }
        Ok(())
    }
}
