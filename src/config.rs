//! Settings: what can be configured, with defaults equal to `config/default.toml`.
//!
//! Precedence, lowest first: built-in defaults < the config file (`--config` /
//! `MCP_WS_CONFIG`, else `config/default.toml` when present) < `MCP_WS_LISTEN` /
//! `--listen`. Durations carry their unit in the field name.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file loaded when no `--config` is given and it exists in the working directory.
pub const DEFAULT_CONFIG_PATH: &str = "config/default.toml";

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub http: HttpSettings,
    pub limits: Limits,
    pub progress: ProgressSettings,
    pub heartbeat: HeartbeatSettings,
    pub shutdown: ShutdownSettings,
    pub logging: LoggingSettings,
}

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
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProgressSettings {
    /// Minimum gap between two progress notifications of one request, in ms; reports that
    /// come sooner are coalesced (dropped, the next one carries the newer value).
    pub min_interval_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeartbeatSettings {
    /// How often the server pings each client, in ms.
    pub interval_ms: u64,
    /// A client silent (no frame, no pong) this long is disconnected, in ms.
    pub client_timeout_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShutdownSettings {
    /// On SIGINT/SIGTERM, how long in-flight requests may run before being cancelled, in ms.
    pub grace_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoggingSettings {
    /// Server-side log filter (tracing `EnvFilter` syntax); `RUST_LOG` overrides it.
    pub filter: String,
    /// Least severe level sent to a client as `notifications/message` until it calls
    /// `logging/setLevel`.
    pub client_level: String,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8765)),
            workers: 0,
            backlog: 4096,
            max_sessions: 10_000,
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
        }
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
            client_level: "info".to_owned(),
        }
    }
}

impl Limits {
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
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
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
        if crate::mcp::LogLevel::parse(&self.logging.client_level).is_none() {
            return Err(ConfigError::Invalid(format!(
                "logging.client_level: unknown level {:?}",
                self.logging.client_level
            )));
        }
        Ok(())
    }
}
