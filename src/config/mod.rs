//! Settings: what can be configured, with defaults equal to `config/default.toml`.
//!
//! Precedence, lowest first: built-in defaults < the config file (`--config` /
//! `MCP_WS_CONFIG`, else `config/default.toml` when present) < `MCP_WS_LISTEN` /
//! `--listen`. Durations carry their unit in the field name.

mod upstreams;
pub use upstreams::{ToolFilter, UpstreamMode, UpstreamSettings, UpstreamStart};

use base64::Engine;
use ed25519_dalek::VerifyingKey;
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
    /// TLS on the listener (`wss://`, `https://`), and client certificates.
    pub tls: TlsSettings,
    /// Who may connect (API keys, JWTs, client certificates) and what each may use.
    pub auth: AuthSettings,
    /// Limits on what clients and tools can make the server hold.
    pub limits: Limits,
    /// Requests the server sends the client for its tools.
    pub client_requests: ClientRequestSettings,
    /// Files served as resources.
    pub resources: ResourceSettings,
    /// Sessions that outlive a connection (HTTP), their event buffers and reaping.
    pub sessions: SessionSettings,
    /// Caching hints on 2026-07-28 results.
    pub cache: CacheSettings,
    /// Multi round-trip requests (2026-07-28).
    pub mrtr: MrtrSettings,
    /// Tasks (the 2026-07-28 `io.modelcontextprotocol/tasks` extension).
    pub tasks: TaskSettings,
    /// Throttling of progress notifications.
    pub progress: ProgressSettings,
    /// WebSocket pings.
    pub heartbeat: HeartbeatSettings,
    /// Graceful shutdown.
    pub shutdown: ShutdownSettings,
    /// Server logs (format, access-log redaction) and the client log level.
    pub logging: LoggingSettings,
    /// Redis, where the nodes of a deployment share state (none: each node keeps its own).
    pub redis: RedisSettings,
    /// What the nodes of a deployment do when their shared store cannot be reached.
    pub cluster: ClusterSettings,
    /// De-duplication of retried requests.
    pub dedup: DedupSettings,
    /// Ed25519 request signatures, required of the identities given keys.
    pub signatures: SignatureSettings,
    /// Which version of a tool registered in several versions each session sees.
    pub rollout: RolloutSettings,
    /// Other MCP servers served through this one (the gateway).
    pub upstreams: Vec<UpstreamSettings>,
}

/// Redis, shared by the nodes of a deployment: the de-duplication store, the signature nonce
/// cache and the bridge of the change bus. Without a URL each node keeps its own.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisSettings {
    /// `redis://[user:password@]host:port[/db]` for one server (`rediss://` with TLS), or a
    /// Redis Cluster by its seed addresses: `redis+cluster://[user:password@]host:port,host:port`
    /// (`rediss+cluster://` with TLS) or several `redis://` URLs separated by commas. Empty
    /// means no Redis. It may hold a password, so it is never logged and `Debug` hides it.
    pub url: String,
    /// Prefix of every key and channel the server uses, so deployments can share a Redis.
    pub key_prefix: String,
    /// Longest wait for one Redis operation, connecting included, in ms; past it the
    /// operation counts as failed and the node goes on locally.
    pub timeout_ms: u64,
    /// After a failed operation, how long the node works locally before trying Redis again,
    /// in ms.
    pub retry_after_ms: u64,
}

/// Whether the Redis key `key` has a hash tag: a `{` and, after it, a `}` with something
/// between (a Redis Cluster then hashes what is between the first such pair alone).
pub(crate) fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .and_then(|open| key[open + 1..].find('}'))
        .is_some_and(|close| close > 0)
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            url: String::new(),
            key_prefix: "mcp-ws:".to_owned(),
            timeout_ms: 500,
            retry_after_ms: 1000,
        }
    }
}

impl RedisSettings {
    /// The seed URLs of the Redis Cluster `url` names, each a `redis://` (or `rediss://`) URL
    /// with the credentials given once; `None` when `url` names one server. `Err` says what
    /// is wrong without repeating the URL (it may hold a password).
    pub fn cluster_seeds(&self) -> Result<Option<Vec<String>>, String> {
        let url = self.url.trim();
        let (scheme, rest) = match url.split_once("://") {
            Some(("redis+cluster", rest)) => ("redis", rest),
            Some(("rediss+cluster", rest)) => ("rediss", rest),
            _ if url.contains(',') => {
                let seeds: Vec<String> =
                    url.split(',').map(|seed| seed.trim().to_owned()).collect();
                if seeds.iter().any(|seed| seed.contains("+cluster://")) {
                    return Err("give either redis+cluster:// or a list of redis:// URLs".into());
                }
                return Ok(Some(seeds));
            }
            _ => return Ok(None),
        };
        // A cluster has one database: a path could only name another, which does not exist.
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        if !matches!(path, "" | "0") {
            return Err("a Redis Cluster has no database number: drop the /db part".into());
        }
        let (credentials, hosts) = match authority.rsplit_once('@') {
            Some((credentials, hosts)) => (Some(credentials), hosts),
            None => (None, authority),
        };
        let seeds: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|host| !host.is_empty())
            .map(|host| match credentials {
                Some(credentials) => format!("{scheme}://{credentials}@{host}"),
                None => format!("{scheme}://{host}"),
            })
            .collect();
        if seeds.is_empty() {
            return Err("redis+cluster:// names no address".into());
        }
        Ok(Some(seeds))
    }
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &if self.url.is_empty() { "" } else { "<set>" })
            .field("key_prefix", &self.key_prefix)
            .field("timeout_ms", &self.timeout_ms)
            .field("retry_after_ms", &self.retry_after_ms)
            .finish()
    }
}

/// What the nodes of a deployment do when their shared store (Redis) cannot be reached.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSettings {
    /// While Redis cannot be reached (with `redis.url` set): `"refuse"` refuses a `tools/call`
    /// carrying an idempotency key with a retryable error (-32008, `data.scope`
    /// `"idempotencyStore"`), so a keyed call never runs without the protection every node
    /// shares; `"local"` runs it with this node's own store (a retry on another node may run
    /// it again).
    pub on_store_error: OnStoreError,
    /// Where session-era HTTP sessions live: `"redis"` (the default whenever `redis.url` is
    /// set: any node serves any request of any session) or `"local"` (each session on the
    /// node that began it; a balancer must route a session's requests there).
    pub sessions: Option<SessionPlace>,
}

/// Where session-era HTTP sessions live (`cluster.sessions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionPlace {
    /// In Redis: every node serves every session.
    Redis,
    /// On the node that began it.
    Local,
}

impl Settings {
    /// Whether sessions live in Redis (`cluster.sessions`, by default whenever Redis is
    /// configured).
    pub fn sessions_in_redis(&self) -> bool {
        !self.redis.url.is_empty() && self.cluster.sessions != Some(SessionPlace::Local)
    }
}

/// What a node does with work that needs the shared store while Redis cannot be reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnStoreError {
    /// Refuse it with a retryable error: nothing runs without its protection.
    #[default]
    Refuse,
    /// Go on with the node's own store (best effort: shared only once Redis returns).
    Local,
}

/// De-duplication of retried `tools/call` requests: by `params._meta.idempotencyKey` (per
/// identity, on any connection and any node) and by request id within a session.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DedupSettings {
    /// Whether retries are answered from the store; off, every request runs.
    pub enabled: bool,
    /// How long a response is kept for a retry, in ms.
    pub window_ms: u64,
    /// Idempotency keys a node keeps in memory (without Redis, or while it is away); the
    /// oldest goes first.
    pub max_entries: usize,
    /// Bytes of responses a node keeps in memory for idempotency keys; the oldest goes first.
    pub max_bytes: usize,
    /// Finished requests one session remembers by id.
    pub session_max_entries: usize,
    /// Bytes of responses one session remembers by id.
    pub session_max_bytes: usize,
}

impl Default for DedupSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            window_ms: 300_000,
            max_entries: 10_000,
            max_bytes: 64 * 1024 * 1024,
            session_max_entries: 64,
            session_max_bytes: 1024 * 1024,
        }
    }
}

/// Ed25519 request signatures (see `docs/operations.md`, "Signatures", for the canonical
/// form).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SignatureSettings {
    /// Identities (by subject) whose every request must be signed, each with its public keys
    /// (base64 of the 32-byte Ed25519 key; several for a rotation). Empty: no signatures.
    pub public_keys: BTreeMap<String, Vec<String>>,
    /// Largest gap between a request's timestamp and the server's clock, either way, in ms.
    pub max_skew_ms: u64,
    /// Nonces a node remembers (each for twice `max_skew_ms`, up to `max_skew_ms` more for a
    /// request dated ahead), shared out evenly between the
    /// identities of `public_keys` (at least one each); an identity whose share is full of
    /// live ones is refused (`busy`) until some expire, the others sign on.
    pub max_nonces: usize,
}

impl Default for SignatureSettings {
    fn default() -> Self {
        Self {
            public_keys: BTreeMap::new(),
            max_skew_ms: 60_000,
            max_nonces: 100_000,
        }
    }
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
    /// The bytes of those messages at most: one that would pass it ends the session, as one
    /// message past `resume_buffer_messages` does.
    pub resume_buffer_bytes: usize,
    /// An HTTP session with no request, no open stream and nothing running for this long is
    /// ended, in ms.
    pub http_idle_timeout_ms: u64,
    /// SSE events an HTTP session keeps for `Last-Event-ID` resumption.
    pub event_buffer_messages: usize,
    /// The bytes of those events' data at most: the oldest go first beyond it (one larger
    /// alone is not kept). Also what a session's open streams may hold that their client has
    /// not read yet, together, and at least four times `limits.max_message_bytes`.
    pub event_buffer_bytes: usize,
    /// How long an SSE event is kept for resumption, in ms.
    pub event_buffer_age_ms: u64,
    /// Gap between SSE keep-alive comments on an idle stream, in ms; also how long a
    /// 2026-07-28 POST with nothing to send waits before its answer becomes a stream.
    pub sse_keep_alive_ms: u64,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self {
            resume_grace_ms: 30_000,
            resume_buffer_messages: 1000,
            // Four answers as large as the largest message a client may send (4 MiB), twice
            // an HTTP session's log: a reconnect within the grace normally misses a few
            // answers of kilobytes.
            resume_buffer_bytes: 16 << 20,
            http_idle_timeout_ms: 300_000,
            event_buffer_messages: 1000,
            event_buffer_bytes: 8 << 20,
            event_buffer_age_ms: 300_000,
            sse_keep_alive_ms: 15_000,
        }
    }
}

/// The caching hints (`ttlMs`, `cacheScope`) of 2026-07-28 results.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheSettings {
    /// `ttlMs` of `server/discover`.
    pub discover_ttl_ms: u64,
    /// `ttlMs` of the `*/list` results (changes are announced on `subscriptions/listen`).
    pub list_ttl_ms: u64,
    /// `ttlMs` of `resources/read` results.
    pub read_ttl_ms: u64,
    /// `cacheScope`: `"public"` (results do not depend on who asks) or `"private"`.
    pub scope: String,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            discover_ttl_ms: 300_000,
            list_ttl_ms: 60_000,
            read_ttl_ms: 0,
            scope: "public".to_owned(),
        }
    }
}

/// Tasks: tool calls the server answers with a task id at once and runs on, for the client
/// to poll (`tasks/get`), answer (`tasks/update`) or cancel (`tasks/cancel`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TaskSettings {
    /// How long a task is kept from its creation (`ttlMs`), in ms; a task still running
    /// then fails.
    pub ttl_ms: u64,
    /// How often a client should poll a task (`pollIntervalMs`), in ms.
    pub poll_interval_ms: u64,
    /// Tasks running at once on this node; a task-supporting call beyond it is refused
    /// with -32008 (server busy).
    pub max_running: usize,
    /// Tasks one authenticated identity may run at once on this node; a new one beyond it
    /// is refused with -32008 (`identityTasks`), so that one client cannot take every
    /// running slot. `None` (the default, the key left out): a quarter of `max_running`,
    /// at least 1 (see [`TaskSettings::running_per_identity`]). `Some(0)`: no limit.
    /// Anonymous clients are bound by `max_running` alone (nothing tells them apart).
    #[serde(deserialize_with = "some")]
    pub max_running_per_identity: Option<usize>,
    /// Tasks (running or finished, not yet expired) this node keeps; beyond it a new
    /// task is refused with -32008.
    pub max_stored: usize,
    /// Bytes the task records this node keeps may take (their JSON, results included):
    /// while they take this much a new task is refused with -32008 (`taskBytes`), and a
    /// task whose result or questions would take them past it fails with that error
    /// instead of keeping them.
    pub max_stored_bytes: u64,
    /// Task records (running or finished, not yet expired) of one authenticated identity
    /// this node keeps; while it keeps this many, a new task of that identity is refused
    /// with -32008 (`identityStoredTasks`), so that one client cannot fill the store for an
    /// hour (`ttl_ms`) with quick tasks. `None` (the default): a quarter of `max_stored`,
    /// at least 1 (see [`TaskSettings::stored_per_identity`]). `Some(0)`: no limit.
    /// Anonymous clients are bound by `max_stored` alone.
    #[serde(deserialize_with = "some")]
    pub max_stored_per_identity: Option<usize>,
    /// The same by bytes: while the records of one authenticated identity take this many
    /// bytes, a new task of it is refused with -32008 (`identityStoredTasks`), and its task
    /// whose result or questions would take them past it fails with that error. `None`
    /// (the default): a quarter of `max_stored_bytes`, at least 1. `Some(0)`: no limit.
    #[serde(deserialize_with = "some")]
    pub max_stored_bytes_per_identity: Option<u64>,
}

impl Default for TaskSettings {
    fn default() -> Self {
        Self {
            ttl_ms: 3_600_000,
            poll_interval_ms: 1_000,
            max_running: 256,
            max_running_per_identity: None,
            max_stored: 10_000,
            max_stored_bytes: 256 << 20,
            max_stored_per_identity: None,
            max_stored_bytes_per_identity: None,
        }
    }
}

impl TaskSettings {
    /// The tasks one authenticated identity may run at once on a node:
    /// `max_running_per_identity` when set, else a quarter of `max_running`, at least 1
    /// (four busy clients can still fill the node; one cannot). 0: no limit.
    pub fn running_per_identity(&self) -> usize {
        self.max_running_per_identity
            .unwrap_or_else(|| (self.max_running / 4).max(1))
    }

    /// The task records of one authenticated identity a node keeps, by count and by bytes:
    /// `max_stored_per_identity` and `max_stored_bytes_per_identity` when set, else a
    /// quarter of `max_stored` and of `max_stored_bytes`, at least 1. 0: no limit.
    pub fn stored_per_identity(&self) -> (usize, u64) {
        (
            self.max_stored_per_identity
                .unwrap_or_else(|| (self.max_stored / 4).max(1)),
            self.max_stored_bytes_per_identity
                .unwrap_or_else(|| (self.max_stored_bytes / 4).max(1)),
        )
    }
}

/// Multi round-trip requests (2026-07-28): the `requestState` the server hands out.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MrtrSettings {
    /// A file holding the secret that signs request states (any bytes; the same file on
    /// every node, so any node can resume a request). Unset: a random secret per process.
    pub state_key_file: Option<PathBuf>,
    /// How long a request state stays valid, in ms.
    pub state_ttl_ms: u64,
}

impl Default for MrtrSettings {
    fn default() -> Self {
        Self {
            state_key_file: None,
            state_ttl_ms: 600_000,
        }
    }
}

/// Files served as resources.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceSettings {
    /// Directories whose files are resources (`file://` URIs), watched for changes.
    pub directories: Vec<DirectorySettings>,
    /// Files read at once, server-wide (each on a thread of the blocking pool); a read that
    /// finds none free within `read_wait_ms` is refused with -32008.
    pub max_concurrent_reads: usize,
    /// How long a file read may wait for a free read, in ms.
    pub read_wait_ms: u64,
    /// Bytes of files being read at once, server-wide (each read counts its file's size
    /// until its answer is made); a read that would go over it is refused with -32008.
    pub max_read_bytes_in_flight: u64,
}

impl Default for ResourceSettings {
    fn default() -> Self {
        Self {
            directories: Vec::new(),
            max_concurrent_reads: 16,
            read_wait_ms: 1_000,
            max_read_bytes_in_flight: 64 * 1024 * 1024,
        }
    }
}

/// One directory of files served as resources.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectorySettings {
    /// The directory.
    pub path: PathBuf,
    /// Largest file served, in bytes; a larger one is listed but its read gets -32005. At
    /// most `resources.max_read_bytes_in_flight` (checked at start).
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
    /// Concurrent sessions from one client address (an IPv4 address, or an IPv6 /64), live
    /// ones and WebSocket sessions waiting for a reconnect alike; a new one beyond this gets
    /// HTTP 429. `None` (the default, the key left out): a tenth of `max_sessions`, at least
    /// 10 (see [`ServerSettings::sessions_per_ip`]). `Some(0)`: no limit.
    #[serde(deserialize_with = "some")]
    pub max_sessions_per_ip: Option<usize>,
    /// Concurrent sessions of one authenticated identity; a new one beyond this gets HTTP
    /// 429. 0: no limit.
    pub max_sessions_per_identity: usize,
    /// Address of a separate admin listener serving `/metrics` and `/healthz`; then
    /// `/metrics` is not served on `listen`. Empty in TOML (`None`): `/metrics` on `listen`.
    #[serde(deserialize_with = "optional_addr")]
    pub admin_listen: Option<SocketAddr>,
    /// Proxies (load balancers) whose forwarded client address is believed: addresses or
    /// CIDR blocks (`"10.0.0.0/8"`, `"127.0.0.1"`, `"::1/128"`). For a connection from one
    /// of them, the client's address (what the per-address session cap, the anonymous rate
    /// and the access log use) is the rightmost address of `forwarded_header` that is not
    /// itself a trusted proxy. Empty: the connection's peer address, headers ignored.
    pub trusted_proxies: Vec<String>,
    /// The header trusted proxies put the client's address in: `"x-forwarded-for"` or
    /// `"forwarded"` (RFC 7239, its `for=` parameters). Only this one is read: a client could
    /// send the other one itself.
    pub forwarded_header: ForwardedHeader,
    /// TLS handshakes in progress at once from one client address (the TCP peer: an IPv4
    /// address, or an IPv6 /64; a `trusted_proxies` peer is not limited); a connection over
    /// it is closed at once, before its handshake starts. Only with `[tls]`. 0: no limit.
    pub max_handshakes_per_ip: usize,
    /// Connections open at once from one client address (the TCP peer, counted as
    /// `max_handshakes_per_ip` counts it; a `trusted_proxies` peer is not limited); a
    /// connection over it is closed as it is accepted (with TLS, before its handshake),
    /// before anything it sent is read. `None` (the
    /// default, the key left out): twice the sessions one address may hold, and 64 more
    /// ([`ServerSettings::connections_per_ip`]). `Some(0)`: no limit.
    #[serde(deserialize_with = "some")]
    pub max_connections_per_ip: Option<usize>,
    /// How long a TLS handshake may take, from the connection's acceptance; a connection
    /// whose handshake has not completed by then is closed. Only with `[tls]`.
    pub tls_handshake_timeout_ms: u64,
}

/// The header a trusted proxy names the client's address in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (each proxy appends its peer).
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
}

/// An address block of `server.trusted_proxies`: an address, or `address/prefix-length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpNet {
    /// The block's first address (the given address with its host bits cleared).
    pub network: std::net::IpAddr,
    /// How many leading bits name the block.
    pub prefix: u8,
}

impl IpNet {
    /// Parses `192.0.2.0/24`, `2001:db8::/32`, or a bare address (a block of one).
    pub fn parse(text: &str) -> Option<Self> {
        let (address, prefix) = match text.trim().split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text.trim(), None),
        };
        let address: std::net::IpAddr = address.parse().ok()?;
        let bits = if address.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(prefix) => prefix.parse::<u8>().ok().filter(|p| *p <= bits)?,
            None => bits,
        };
        let network = match address {
            std::net::IpAddr::V4(v4) => {
                std::net::IpAddr::V4((v4.to_bits() & mask32(prefix)).into())
            }
            std::net::IpAddr::V6(v6) => {
                std::net::IpAddr::V6((v6.to_bits() & mask128(prefix)).into())
            }
        };
        Some(Self { network, prefix })
    }

    /// Whether `ip` is in the block (an IPv4-mapped IPv6 address as its IPv4 address).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        let ip = match ip {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
            v4 => v4,
        };
        match (self.network, ip) {
            (std::net::IpAddr::V4(net), std::net::IpAddr::V4(ip)) => {
                ip.to_bits() & mask32(self.prefix) == net.to_bits()
            }
            (std::net::IpAddr::V6(net), std::net::IpAddr::V6(ip)) => {
                ip.to_bits() & mask128(self.prefix) == net.to_bits()
            }
            _ => false,
        }
    }
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

impl ServerSettings {
    /// The sessions one client address may hold at once: `max_sessions_per_ip` when set,
    /// else a tenth of `max_sessions`, at least 10 (clients behind one NAT or proxy are not
    /// refused on a small server; on one that small the global cap is what binds). 0: no
    /// limit.
    pub fn sessions_per_ip(&self) -> usize {
        self.max_sessions_per_ip
            .unwrap_or_else(|| (self.max_sessions / 10).max(10))
    }

    /// The connections one client address may hold open at once: `max_connections_per_ip`
    /// when set, else twice [`sessions_per_ip`](Self::sessions_per_ip) and 64 more (each
    /// WebSocket session is a connection; as many again for resumes and HTTP requests, and
    /// room for an HTTP client's parallel ones, a stream and its POSTs, however few
    /// sessions an address may hold), or none when that is none. 0: no limit.
    pub fn connections_per_ip(&self) -> usize {
        self.max_connections_per_ip
            .unwrap_or_else(|| match self.sessions_per_ip() {
                0 => 0,
                sessions => sessions.saturating_mul(2).saturating_add(64),
            })
    }
}

/// A value given in TOML is `Some` (TOML has no null: a key left out is the `None` of
/// `#[serde(default)]`).
fn some<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
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

/// TLS on the listener. With `cert_file` and `key_file` set, the listener speaks TLS only
/// (`wss://`, `https://`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSettings {
    /// The server's certificate chain, PEM, leaf first. Empty: no TLS.
    pub cert_file: PathBuf,
    /// The server's private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// CA certificates (PEM) that client certificates must chain to; required unless
    /// `client_auth` is `none`.
    pub client_ca_file: PathBuf,
    /// Whether clients present a certificate: `none`, `optional` (verified when presented)
    /// or `required` (a handshake without one fails).
    pub client_auth: ClientAuth,
}

impl TlsSettings {
    /// Whether TLS is configured.
    pub fn enabled(&self) -> bool {
        !self.cert_file.as_os_str().is_empty() || !self.key_file.as_os_str().is_empty()
    }
}

/// Whether TLS clients present a certificate (mutual TLS).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// No client certificates are asked for.
    #[default]
    None,
    /// A certificate is asked for and verified when presented; clients without one connect
    /// too.
    Optional,
    /// A client without a valid certificate cannot complete the TLS handshake.
    Required,
}

/// Who may connect and what each client may use. With nothing configured, every client is
/// admitted anonymously and may use everything.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSettings {
    /// Whether a client must authenticate (a bearer token, or a client certificate) to be
    /// admitted; one without credentials gets HTTP 401.
    pub required: bool,
    /// The canonical URI of the MCP endpoint (`https://mcp.example.com/mcp`): `resource` in
    /// the protected resource metadata, and the JWT audience when `jwt.audiences` is empty.
    /// Empty: derived from each request (`scheme://Host/mcp`; from a trusted proxy, the
    /// scheme and host it forwards).
    pub resource: String,
    /// Issuers of the tokens this server accepts, advertised in the protected resource
    /// metadata so that clients can find where to get a token; the JWT issuers when
    /// `jwt.issuers` is empty.
    pub authorization_servers: Vec<String>,
    /// Scopes advertised in the protected resource metadata.
    pub scopes_supported: Vec<String>,
    /// Scopes every client authenticated by a bearer token must hold; one lacking any gets
    /// HTTP 403 (a client certificate grants no scopes: use policies for those clients).
    pub required_scopes: Vec<String>,
    /// Bearer API keys, each stored as the SHA-256 of the key.
    pub api_keys: Vec<ApiKeySettings>,
    /// Bearer JWTs.
    pub jwt: JwtSettings,
    /// Allow-lists per identity or scope; empty: every admitted client may use everything.
    pub policies: Vec<PolicySettings>,
}

/// One API key. The key itself is never configured: only its SHA-256, in hex.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeySettings {
    /// The identity a client presenting this key has.
    pub name: String,
    /// SHA-256 of the key's UTF-8 bytes, 64 hex digits (`printf %s "$KEY" | sha256sum`).
    pub sha256: String,
    /// The scopes the key grants.
    #[serde(default)]
    pub scopes: Vec<String>,
}

/// Bearer JWTs: enabled when a key is configured. The algorithm follows the key: HS256 for
/// `secret_file`, RS256 or ES256 (P-256) for `public_key_file`, and for each key of
/// `jwks_file` its `alg`, or RS256 / ES256 by its type. A token whose header names another
/// algorithm is refused.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JwtSettings {
    /// The HS256 shared secret: the file's bytes (a trailing newline is dropped).
    pub secret_file: PathBuf,
    /// An RSA or P-256 public key, PEM.
    pub public_key_file: PathBuf,
    /// A JWKS document (`{"keys": [...]}`); a token's `kid` selects the key.
    pub jwks_file: PathBuf,
    /// Accepted `iss` values. Empty: `auth.authorization_servers`.
    pub issuers: Vec<String>,
    /// Accepted `aud` values. Empty: `auth.resource`.
    pub audiences: Vec<String>,
    /// Clock skew tolerated on `exp` and `nbf`, in ms (rounded up to whole seconds).
    pub leeway_ms: u64,
}

impl Default for JwtSettings {
    fn default() -> Self {
        Self {
            secret_file: PathBuf::new(),
            public_key_file: PathBuf::new(),
            jwks_file: PathBuf::new(),
            issuers: Vec::new(),
            audiences: Vec::new(),
            leeway_ms: 60_000,
        }
    }
}

impl JwtSettings {
    /// Whether any JWT key is configured.
    pub fn enabled(&self) -> bool {
        [&self.secret_file, &self.public_key_file, &self.jwks_file]
            .iter()
            .any(|path| !path.as_os_str().is_empty())
    }
}

/// What the clients a policy applies to may use: tools, resources and prompts by name or
/// URI, and methods, each a list of patterns (exact, or with `*` matching any run of
/// characters). A list left out allows everything of its kind. A client matching several
/// policies may use what any of them allows.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySettings {
    /// Identities the policy applies to: a subject (an API key's name, a JWT's `sub`, a
    /// client certificate's subject) however proven, a principal (`key:ci`, `jwt:ci`,
    /// `cert:…`, `id:…`) for that proof only, `"*"` for every authenticated client,
    /// `"anonymous"` for clients without credentials.
    #[serde(default)]
    pub identities: Vec<String>,
    /// Or clients holding any of these scopes.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Tools the clients may list and call.
    #[serde(default = "everything")]
    pub tools: Vec<String>,
    /// Resources (URIs; resource templates by their URI template) the clients may list,
    /// read and subscribe to.
    #[serde(default = "everything")]
    pub resources: Vec<String>,
    /// Prompts the clients may list, get and complete.
    #[serde(default = "everything")]
    pub prompts: Vec<String>,
    /// Methods the clients may call (`initialize` and `ping` always).
    #[serde(default = "everything")]
    pub methods: Vec<String>,
}

fn everything() -> Vec<String> {
    vec!["*".to_owned()]
}

/// Limits on what clients and tools can make the server hold, each with a clear refusal.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest accepted message (one frame, or continuation frames reassembled), in bytes;
    /// also the largest answer a worker makes (one larger gets -32603 instead).
    pub max_message_bytes: usize,
    /// Bytes of partly received messages (WebSocket frames and fragmented messages being
    /// reassembled, HTTP bodies being read) the server holds at once, over all connections;
    /// a message that would pass it is refused (close 1009, HTTP 413). At least
    /// `max_message_bytes`.
    pub max_partial_bytes: usize,
    /// Of `max_partial_bytes`, what the connections of one client address may hold (counted
    /// as `server.max_sessions_per_ip` counts addresses); `None`: an eighth of it, and at
    /// least `max_message_bytes`; 0: no share. At least `max_message_bytes` when set.
    pub max_partial_bytes_per_ip: Option<usize>,
    /// Bytes all sessions together hold for replay: every HTTP session's SSE event log
    /// (`sessions.event_buffer_*`) and every parked WebSocket session's undelivered messages
    /// (`sessions.resume_buffer_*`). Past it, an HTTP session gives up its own oldest events,
    /// then does not keep the new one (still sent live; a `Last-Event-ID` that needs it is
    /// refused); a parked WebSocket session ends, as past `sessions.resume_buffer_messages`.
    /// Greater than 0: there is no unbounded setting.
    pub max_replay_bytes: usize,
    /// Of `max_replay_bytes`, what the sessions of one client address may hold (counted as
    /// `server.max_sessions_per_ip` counts addresses); `None`: an eighth of it; 0: no share.
    /// Past it, the address's sessions meet the budget as above while others keep theirs.
    pub max_replay_bytes_per_ip: Option<usize>,
    /// How long a message may take to arrive, in milliseconds: a WebSocket message from its
    /// first byte to its last fragment, an HTTP body from the end of the headers to its end;
    /// past it the message is refused (close 1008, HTTP 408).
    pub partial_timeout_ms: u64,
    /// Most entries in one JSON-RPC batch. Keep it at most `max_in_flight_per_session`
    /// (the default is equal): the calls of a batch beyond that cap get -32009.
    pub max_batch_len: usize,
    /// Requests one session may have running in workers at once; more are refused at once.
    pub max_in_flight_per_session: usize,
    /// Worker slots shared by all sessions (the global pool).
    pub max_concurrent_requests: usize,
    /// Slots of the global pool kept for sessions that hold none: a session whose requests
    /// already hold a slot takes another only while more than this many are free (its
    /// request waits otherwise, as for a full pool), so one session, or a few, cannot take
    /// every slot and a new session's first request always finds one. `None` (the key left
    /// out): an eighth of `max_concurrent_requests` (see [`Limits::pool_reserve`]). 0: no
    /// reserve. Less than `max_concurrent_requests`.
    #[serde(deserialize_with = "some")]
    pub pool_reserve: Option<usize>,
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
    /// Subscriptions one session may hold: over WebSocket, a connection's
    /// `resources/subscribe` and the resource URIs and task ids of all its
    /// `subscriptions/listen` streams together; over HTTP, a listen's own (each is a POST of
    /// its own).
    pub max_subscriptions_per_session: usize,
    /// `subscriptions/listen` streams one connection may hold open.
    pub max_listens_per_session: usize,
    /// Longest URI a session may subscribe to, in bytes (subscriptions are held until
    /// undone, so their size is bounded here, not only by the message size).
    pub max_subscription_uri_bytes: usize,
    /// Deepest nesting of arrays and objects in a message; 0 = no limit (beyond what the
    /// message size allows).
    pub max_json_depth: usize,
    /// Longest JSON string in a message (a member name or a value, as written), in bytes;
    /// 0 = no limit.
    pub max_string_bytes: usize,
    /// Most entries in a JSON array of a message (a batch's own array has
    /// `max_batch_len`); 0 = no limit.
    pub max_array_len: usize,
    /// Most members in a JSON object of a message; 0 = no limit.
    pub max_object_members: usize,
    /// The request methods served; any other is answered like an unknown method (-32601).
    /// Empty: all. When set, it must include `initialize`.
    pub allowed_methods: Vec<String>,
    /// Log lines (`notifications/message`) one request may send per second, on average;
    /// more are dropped at the tool's context. 0 = no limit.
    pub log_lines_per_second: u32,
    /// Log lines one request may send at once before `log_lines_per_second` applies.
    pub log_lines_burst: u32,
    /// Notifications (progress, log lines) a session may have queued for a client that
    /// does not keep up; more are dropped until it catches up.
    pub max_queued_notifications: usize,
    /// What those queued notifications' data and messages may come to, in bytes; past it
    /// they are dropped too. A tool's lines are of any size, up to `max_message_bytes`: by
    /// number alone, one WebSocket session whose client stopped reading held 4096 of them.
    pub max_queued_notification_bytes: u64,
    /// Requests per identity and second (a token bucket shared by all of an identity's
    /// sessions on this node).
    pub rate: RateSettings,
}

/// The request rate allowed per identity: a token bucket of `burst` tokens refilled at
/// `requests_per_second`, one per request. An authenticated identity has one bucket; an
/// anonymous client has one per IP address.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateSettings {
    /// Requests per second, on average; 0 = no limit.
    pub requests_per_second: f64,
    /// Requests at once before the rate applies.
    pub burst: u32,
    /// Buckets kept at once; beyond it idle buckets are dropped first, then the fullest.
    pub max_identities: usize,
}

impl Default for RateSettings {
    fn default() -> Self {
        Self {
            requests_per_second: 0.0,
            burst: 50,
            max_identities: 100_000,
        }
    }
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
    /// How often the server pings each client, in ms (a connection's first ping at a random
    /// point of the interval's second half, so connections opened together are spread).
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
    /// Where the log goes: empty for stderr, else this file, in a directory that must exist,
    /// rotated as `file_rotation` says.
    pub file: PathBuf,
    /// When `file` moves on to a new file: each UTC day, or at a size.
    pub file_rotation: FileRotation,
    /// With `file_rotation = "size"`, the size a file is not to pass, in bytes: the file is
    /// rotated before a write would take it past this (a single write larger than this,
    /// one batch of the log's writer, fills a file of its own). Lines are never split.
    pub file_max_bytes: u64,
    /// How many files of `file` are kept, the one being written included; older ones are
    /// deleted (daily files, `FILE.YYYY-MM-DD` only, at start and as the day turns; numbered
    /// ones at each rotation, and at start those numbered from `file_keep` on).
    pub file_keep: usize,
    /// Lines the log's background writer holds before it drops new ones (counted in
    /// `mcp_dropped_total{reason="access_log"}`) rather than make the event loop wait.
    pub queue_lines: usize,
}

/// When the log file (`logging.file`) moves on to a new file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileRotation {
    /// A file a UTC day, `FILE.YYYY-MM-DD`.
    #[default]
    Daily,
    /// `FILE` is written until the next write would take it past `logging.file_max_bytes`;
    /// it is then renamed `FILE.1`, the one before that `FILE.2`, and so on.
    Size,
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
            max_sessions_per_ip: None,
            max_sessions_per_identity: 0,
            admin_listen: None,
            trusted_proxies: Vec::new(),
            forwarded_header: ForwardedHeader::XForwardedFor,
            // A browser opens at most a handful of connections to a host at once and a
            // handshake lasts a round trip or two, so even many clients behind one NAT have
            // few in progress at once; 32 leaves them room, while one address can hold no
            // more than 32 of the 256 handshake places each worker has.
            max_handshakes_per_ip: 32,
            max_connections_per_ip: None,
            // actix-tls's default.
            tls_handshake_timeout_ms: 3000,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_message_bytes: 4 * 1024 * 1024,
            // 64 messages of the largest size in flight at once, then refusals rather than
            // memory: honest clients send a message in well under `partial_timeout_ms`.
            max_partial_bytes: 256 * 1024 * 1024,
            // 32 HTTP session logs full to `sessions.event_buffer_bytes`, 16 parked sessions
            // full to `resume_buffer_bytes`: sessions normally hold kilobytes (progress, an
            // answer that followed it), so only many sessions streaming large answers at once
            // meet it, which is what it is for.
            max_replay_bytes: 256 * 1024 * 1024,
            max_replay_bytes_per_ip: None,
            max_partial_bytes_per_ip: None,
            partial_timeout_ms: 30_000,
            // Not above `max_in_flight_per_session`: a batch of calls can all run.
            max_batch_len: 64,
            max_in_flight_per_session: 64,
            max_concurrent_requests: 512,
            pool_reserve: None,
            admission_wait_ms: 5_000,
            request_timeout_ms: 60_000,
            max_request_timeout_ms: 600_000,
            tool_timeout_ms: BTreeMap::new(),
            page_size: 100,
            max_subscriptions_per_session: 1000,
            max_listens_per_session: 16,
            max_subscription_uri_bytes: 8192,
            max_json_depth: 64,
            max_string_bytes: 0,
            max_array_len: 0,
            max_object_members: 0,
            allowed_methods: Vec::new(),
            log_lines_per_second: 100,
            log_lines_burst: 200,
            max_queued_notifications: 4096,
            max_queued_notification_bytes: 16 << 20,
            rate: RateSettings::default(),
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
            file: PathBuf::new(),
            file_rotation: FileRotation::Daily,
            file_max_bytes: 100 << 20,
            file_keep: 7,
            queue_lines: 16_384,
        }
    }
}

impl LoggingSettings {
    /// The directory and file name of `file`, when it is set (`.` for a bare name): the
    /// files are `NAME.YYYY-MM-DD` (daily) or `NAME`, `NAME.1`, ... (by size) in the
    /// directory.
    pub fn file_parts(&self) -> Option<(&Path, &std::ffi::OsStr)> {
        if self.file.as_os_str().is_empty() {
            return None;
        }
        let name = self.file.file_name()?;
        let dir = self
            .file
            .parent()
            .filter(|dir| !dir.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Some((dir, name))
    }

    /// `file` names a file (not a directory) in a directory that exists.
    fn validate_file(&self) -> Result<(), ConfigError> {
        if self.file.as_os_str().is_empty() {
            return Ok(());
        }
        let Some((dir, _)) = self.file_parts() else {
            return Err(ConfigError::Invalid(format!(
                "logging.file: {} does not name a file",
                self.file.display()
            )));
        };
        if !dir.is_dir() {
            return Err(ConfigError::Invalid(format!(
                "logging.file: directory {} does not exist",
                dir.display()
            )));
        }
        // A directory would be written beside, as `DIR.2026-12-06` or `DIR.1`.
        if self.file.is_dir() {
            return Err(ConfigError::Invalid(format!(
                "logging.file: {} is a directory; name a file in it",
                self.file.display()
            )));
        }
        Ok(())
    }
}

impl Limits {
    /// Each client address's share of `max_partial_bytes`: `max_partial_bytes_per_ip` when set
    /// (0: none), else an eighth of it, at least one message.
    pub fn partial_bytes_per_ip(&self) -> usize {
        self.max_partial_bytes_per_ip
            .unwrap_or((self.max_partial_bytes / 8).max(self.max_message_bytes))
    }

    /// Each client address's share of `max_replay_bytes`: `max_replay_bytes_per_ip` when set
    /// (0: none), else an eighth of it.
    pub fn replay_bytes_per_ip(&self) -> usize {
        self.max_replay_bytes_per_ip
            .unwrap_or(self.max_replay_bytes / 8)
    }

    /// The slots of the global pool kept for sessions that hold none: `pool_reserve` when
    /// set, else an eighth of `max_concurrent_requests` (64 of the default 512).
    pub fn pool_reserve(&self) -> usize {
        self.pool_reserve
            .unwrap_or(self.max_concurrent_requests / 8)
    }

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
    /// The file is not valid TOML for these settings (an unknown key, a wrong type). Said
    /// with the line and column and the parser's message, never the line itself: it may
    /// hold a secret (a Redis URL's password, an upstream's `Authorization` header) that a
    /// misspelled key or a missing quote would print to the log.
    #[error("invalid config file {path}: line {line}, column {column}: {}", without_strings(source.message()))]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where in it (1-based; 0 when the parser could not say).
        line: usize,
        /// Where in the line (1-based, in characters; 0 when the parser could not say).
        column: usize,
        /// Why (boxed: it is large, and every other error of the settings small).
        source: Box<toml::de::Error>,
    },
    /// A value the server cannot run with; the message names the setting.
    #[error("invalid setting: {0}")]
    Invalid(String),
}

/// A parser's message without the strings it quotes (`invalid type: string "Bearer …",
/// expected a map` says `invalid type: string, expected a map`): the value it refused may
/// be a secret in the wrong place.
fn without_strings(message: &str) -> String {
    const QUOTED: &str = "string \"";
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(QUOTED) {
        out.push_str(&rest[..at + "string".len()]);
        let mut chars = rest[at + QUOTED.len()..].char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    end = Some(i + 1);
                    break;
                }
                _ => {}
            }
        }
        match end {
            Some(end) => rest = &rest[at + QUOTED.len() + end..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

impl Settings {
    /// Reads a TOML file; members it leaves out keep their defaults.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let settings: Self = toml::from_str(&text).map_err(|source| {
            let (line, column) = source
                .span()
                .and_then(|span| text.get(..span.start))
                .map_or((0, 0), |before| {
                    let line_start = before.rfind('\n').map_or(0, |at| at + 1);
                    (
                        before.matches('\n').count() + 1,
                        before[line_start..].chars().count() + 1,
                    )
                });
            ConfigError::Parse {
                path: path.to_owned(),
                line,
                column,
                source: Box::new(source),
            }
        })?;
        settings.validate()?;
        Ok(settings)
    }

    /// The file [`Settings::load`] reads for `config`: `config` itself, else
    /// `config/default.toml` if present; `None` for the built-in defaults.
    pub fn config_path(config: Option<&Path>) -> Option<PathBuf> {
        match config {
            Some(path) => Some(path.to_owned()),
            None => {
                let default = Path::new(DEFAULT_CONFIG_PATH);
                default.exists().then(|| default.to_owned())
            }
        }
    }

    /// Loads the file named on the command line, else `config/default.toml` if present,
    /// else the built-in defaults; then applies the `--listen` override.
    pub fn load(config: Option<&Path>, listen: Option<SocketAddr>) -> Result<Self, ConfigError> {
        let mut settings = match Self::config_path(config) {
            Some(path) => Self::from_file(&path)?,
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
        upstreams::validate(&self.upstreams)?;
        let l = &self.limits;
        let positive = [
            ("limits.max_message_bytes", l.max_message_bytes as u64),
            ("limits.max_partial_bytes", l.max_partial_bytes as u64),
            ("limits.max_replay_bytes", l.max_replay_bytes as u64),
            ("limits.partial_timeout_ms", l.partial_timeout_ms),
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
                "sessions.event_buffer_bytes",
                self.sessions.event_buffer_bytes as u64,
            ),
            (
                "sessions.resume_buffer_bytes",
                self.sessions.resume_buffer_bytes as u64,
            ),
            (
                "sessions.sse_keep_alive_ms",
                self.sessions.sse_keep_alive_ms,
            ),
            (
                "client_requests.timeout_ms",
                self.client_requests.timeout_ms,
            ),
            ("redis.timeout_ms", self.redis.timeout_ms),
            ("dedup.window_ms", self.dedup.window_ms),
            ("dedup.max_entries", self.dedup.max_entries as u64),
            ("dedup.max_bytes", self.dedup.max_bytes as u64),
            (
                "dedup.session_max_entries",
                self.dedup.session_max_entries as u64,
            ),
            (
                "dedup.session_max_bytes",
                self.dedup.session_max_bytes as u64,
            ),
            ("signatures.max_skew_ms", self.signatures.max_skew_ms),
            ("signatures.max_nonces", self.signatures.max_nonces as u64),
            (
                "resources.max_concurrent_reads",
                self.resources.max_concurrent_reads as u64,
            ),
            (
                "resources.max_read_bytes_in_flight",
                self.resources.max_read_bytes_in_flight,
            ),
            ("tasks.ttl_ms", self.tasks.ttl_ms),
            ("tasks.poll_interval_ms", self.tasks.poll_interval_ms),
            ("tasks.max_running", self.tasks.max_running as u64),
            ("tasks.max_stored", self.tasks.max_stored as u64),
            ("tasks.max_stored_bytes", self.tasks.max_stored_bytes),
            (
                "limits.max_subscription_uri_bytes",
                l.max_subscription_uri_bytes as u64,
            ),
            (
                "limits.max_queued_notifications",
                l.max_queued_notifications as u64,
            ),
            (
                "limits.max_queued_notification_bytes",
                l.max_queued_notification_bytes,
            ),
            ("limits.rate.max_identities", l.rate.max_identities as u64),
            (
                "logging.access_params_max_bytes",
                self.logging.access_params_max_bytes as u64,
            ),
            ("logging.file_keep", self.logging.file_keep as u64),
            ("logging.file_max_bytes", self.logging.file_max_bytes),
            ("logging.queue_lines", self.logging.queue_lines as u64),
            ("mrtr.state_ttl_ms", self.mrtr.state_ttl_ms),
            (
                "server.tls_handshake_timeout_ms",
                self.server.tls_handshake_timeout_ms,
            ),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(ConfigError::Invalid(format!(
                "{name} must be greater than 0"
            )));
        }
        // Counts a semaphore is made with: past its most, it panics at startup instead of
        // refusing the setting.
        let permits = [
            (
                "limits.max_concurrent_requests".to_owned(),
                l.max_concurrent_requests,
            ),
            ("tasks.max_running".to_owned(), self.tasks.max_running),
        ]
        .into_iter()
        .chain(self.upstreams.iter().map(|upstream| {
            (
                format!("upstreams.{}.max_in_flight", upstream.name),
                upstream.max_in_flight,
            )
        }));
        let most = tokio::sync::Semaphore::MAX_PERMITS;
        if let Some((name, _)) = permits.into_iter().find(|(_, v)| *v > most) {
            return Err(ConfigError::Invalid(format!(
                "{name} must be at most {most}"
            )));
        }
        // actix runs at most this many worker threads, and panics past it.
        const MAX_WORKERS: usize = 512;
        if self.server.workers > MAX_WORKERS {
            return Err(ConfigError::Invalid(format!(
                "server.workers must be at most {MAX_WORKERS}"
            )));
        }
        // Lifetimes added to the clock or doubled: past a year, no use, and near `u64::MAX`
        // they wrap (a nonce kept for no time while the skew window stays wide).
        const YEAR_MS: u64 = 365 * 24 * 3600 * 1000;
        let lifetimes = [
            ("signatures.max_skew_ms", self.signatures.max_skew_ms),
            ("mrtr.state_ttl_ms", self.mrtr.state_ttl_ms),
            ("tasks.ttl_ms", self.tasks.ttl_ms),
        ];
        if let Some((name, _)) = lifetimes.iter().find(|(_, v)| *v > YEAR_MS) {
            return Err(ConfigError::Invalid(format!(
                "{name} must be at most {YEAR_MS} (a year)"
            )));
        }
        let budget = self.resources.max_read_bytes_in_flight;
        if let Some(dir) = self
            .resources
            .directories
            .iter()
            .find(|dir| dir.max_file_bytes > budget)
        {
            return Err(ConfigError::Invalid(format!(
                "resources.directories: max_file_bytes of {} ({}) exceeds resources.max_read_bytes_in_flight ({budget}): its largest files could never be read",
                dir.path.display(),
                dir.max_file_bytes
            )));
        }
        if l.max_partial_bytes < l.max_message_bytes {
            return Err(ConfigError::Invalid(
                "limits.max_partial_bytes must be >= limits.max_message_bytes (one message of the largest size must fit)".into(),
            ));
        }
        if l.max_partial_bytes_per_ip
            .is_some_and(|share| share != 0 && share < l.max_message_bytes)
        {
            return Err(ConfigError::Invalid(
                "limits.max_partial_bytes_per_ip must be 0 or >= limits.max_message_bytes (one message of the largest size must fit)".into(),
            ));
        }
        if l.pool_reserve() >= l.max_concurrent_requests {
            return Err(ConfigError::Invalid(
                "limits.pool_reserve must be < limits.max_concurrent_requests (a session could take no slot beyond its first)".into(),
            ));
        }
        if l.max_request_timeout_ms < l.request_timeout_ms {
            return Err(ConfigError::Invalid(
                "limits.max_request_timeout_ms must be >= limits.request_timeout_ms".into(),
            ));
        }
        if l.log_lines_per_second > 0 && l.log_lines_burst == 0 {
            return Err(ConfigError::Invalid(
                "limits.log_lines_burst must be greater than 0 when log_lines_per_second is set"
                    .into(),
            ));
        }
        let rate = l.rate.requests_per_second;
        if !rate.is_finite() || rate < 0.0 {
            return Err(ConfigError::Invalid(
                "limits.rate.requests_per_second must be a number >= 0".into(),
            ));
        }
        if rate > 0.0 && l.rate.burst == 0 {
            return Err(ConfigError::Invalid(
                "limits.rate.burst must be greater than 0 when requests_per_second is set".into(),
            ));
        }
        if !l.allowed_methods.is_empty() && !l.allowed_methods.iter().any(|m| m == "initialize") {
            return Err(ConfigError::Invalid(
                "limits.allowed_methods must include \"initialize\" (no session could start)"
                    .into(),
            ));
        }
        if !["demo", "conformance", "none"].contains(&self.builtins.set.as_str()) {
            return Err(ConfigError::Invalid(format!(
                "builtins.set: {:?} is not one of demo, conformance, none",
                self.builtins.set
            )));
        }
        if !["public", "private"].contains(&self.cache.scope.as_str()) {
            return Err(ConfigError::Invalid(format!(
                "cache.scope: {:?} is not public or private",
                self.cache.scope
            )));
        }
        if self.info.name.is_empty() {
            return Err(ConfigError::Invalid("info.name must not be empty".into()));
        }
        if !self.redis.url.is_empty() {
            // A brace in the prefix is a hash tag of every key (all in one slot of a Redis
            // Cluster), or else breaks the tags the keys of one session, task or stream
            // carry to share a slot: their scripts would be refused (CROSSSLOT).
            let prefix = &self.redis.key_prefix;
            if prefix.contains(['{', '}']) && !has_hash_tag(prefix) {
                return Err(ConfigError::Invalid(
                    "redis.key_prefix: a '{' or '}' in it must make a hash tag, '{' then '}' \
                     with something between"
                        .into(),
                ));
            }
            // The URL may hold a password: no message repeats it.
            match self.redis.cluster_seeds() {
                Err(problem) => return Err(ConfigError::Invalid(format!("redis.url: {problem}"))),
                Ok(Some(seeds)) => {
                    if seeds
                        .iter()
                        .any(|seed| redis::Client::open(seed.as_str()).is_err())
                    {
                        return Err(ConfigError::Invalid(
                            "redis.url: a seed of the Redis Cluster is not a valid redis:// URL"
                                .into(),
                        ));
                    }
                }
                Ok(None) => {
                    if redis::Client::open(self.redis.url.as_str()).is_err() {
                        return Err(ConfigError::Invalid(
                            "redis.url is not a valid redis:// URL".into(),
                        ));
                    }
                }
            }
        }
        for (subject, keys) in &self.signatures.public_keys {
            if keys.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "signatures.public_keys.{subject}: give at least one key"
                )));
            }
            if let Some(bad) = keys.iter().position(|key| parse_public_key(key).is_none()) {
                return Err(ConfigError::Invalid(format!(
                    "signatures.public_keys.{subject}[{bad}]: not the base64 of a 32-byte Ed25519 public key"
                )));
            }
        }
        self.validate_perimeter()?;
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
        if crate::protocol::mcp::LogLevel::parse(&self.logging.client_level).is_none() {
            return Err(ConfigError::Invalid(format!(
                "logging.client_level: unknown level {:?}",
                self.logging.client_level
            )));
        }
        self.logging.validate_file()?;
        Ok(())
    }
}

impl Settings {
    /// What `tls` and `auth` must satisfy beyond their types (the files themselves are read,
    /// and checked, when the server is built).
    fn validate_perimeter(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| Err(ConfigError::Invalid(message));
        if let Some(bad) = self
            .server
            .trusted_proxies
            .iter()
            .find(|net| IpNet::parse(net).is_none())
        {
            return invalid(format!(
                "server.trusted_proxies: {bad:?} is not an address or address/prefix-length"
            ));
        }
        // A handshake is a round trip or two; a minute covers a slow link and a client that
        // asks its user for a certificate, and beyond it a connection that never sends a
        // ClientHello holds a handshake place (of `max_handshakes_per_ip`, and of the 256 per
        // worker) for longer than any client needs.
        const HANDSHAKE_MAX_MS: u64 = 60_000;
        if self.server.tls_handshake_timeout_ms > HANDSHAKE_MAX_MS {
            return invalid(format!(
                "server.tls_handshake_timeout_ms must be at most {HANDSHAKE_MAX_MS} (a minute)"
            ));
        }
        let tls = &self.tls;
        let empty = |path: &PathBuf| path.as_os_str().is_empty();
        if tls.enabled() && (empty(&tls.cert_file) || empty(&tls.key_file)) {
            return invalid("tls: set both cert_file and key_file".into());
        }
        if tls.client_auth != ClientAuth::None && (!tls.enabled() || empty(&tls.client_ca_file)) {
            return invalid(
                "tls.client_auth needs tls.cert_file, tls.key_file and tls.client_ca_file".into(),
            );
        }
        let auth = &self.auth;
        let mut names = std::collections::HashSet::new();
        for key in &auth.api_keys {
            if key.name.is_empty() || key.name == "*" || key.name == "anonymous" {
                return invalid(format!(
                    "auth.api_keys: {:?} is not a usable name (empty, \"*\" and \"anonymous\" are reserved)",
                    key.name
                ));
            }
            if !names.insert(key.name.as_str()) {
                return invalid(format!(
                    "auth.api_keys: the name {:?} is used twice",
                    key.name
                ));
            }
            if key.sha256.len() != 64 || !key.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return invalid(format!(
                    "auth.api_keys: the sha256 of {:?} must be 64 hex digits",
                    key.name
                ));
            }
        }
        let jwt = &auth.jwt;
        if jwt.enabled() {
            if jwt.audiences.is_empty() && auth.resource.is_empty() {
                return invalid("auth.jwt: set jwt.audiences or auth.resource (the audience tokens must be issued for)".into());
            }
            if jwt.issuers.is_empty() && auth.authorization_servers.is_empty() {
                return invalid("auth.jwt: set jwt.issuers or auth.authorization_servers (the issuers tokens must come from)".into());
            }
        }
        let credentials = !auth.api_keys.is_empty() || jwt.enabled();
        if auth.required && !credentials && tls.client_auth == ClientAuth::None {
            return invalid(
                "auth.required: configure auth.api_keys, auth.jwt or tls.client_auth".into(),
            );
        }
        for (i, policy) in auth.policies.iter().enumerate() {
            if policy.identities.is_empty() && policy.scopes.is_empty() {
                return invalid(format!(
                    "auth.policies[{i}]: name the identities or scopes it applies to"
                ));
            }
        }
        Ok(())
    }
}

/// A public key from the config: the base64 of the raw 32-byte Ed25519 key.
pub fn parse_public_key(text: &str) -> Option<VerifyingKey> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()?;
    VerifyingKey::from_bytes(&bytes.try_into().ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::{
        has_hash_tag, without_strings, ConfigError, RedisSettings, ServerSettings, Settings,
    };

    #[test]
    fn the_per_address_limits_follow_the_session_cap_unless_set() {
        let limits = |max_sessions, sessions_per_ip, connections_per_ip| {
            let server = ServerSettings {
                max_sessions,
                max_sessions_per_ip: sessions_per_ip,
                max_connections_per_ip: connections_per_ip,
                ..ServerSettings::default()
            };
            (server.sessions_per_ip(), server.connections_per_ip())
        };
        // The shipped defaults (config/default.toml and the docs say 1000 and 2064).
        let server = ServerSettings::default();
        assert_eq!(
            (server.sessions_per_ip(), server.connections_per_ip()),
            (1000, 2064)
        );
        assert_eq!(
            limits(50, None, None),
            (10, 84),
            "at least 10 sessions an address"
        );
        assert_eq!(
            limits(10_000, Some(0), None),
            (0, 0),
            "no session limit, no cap"
        );
        assert_eq!(limits(10_000, Some(0), Some(5)), (0, 5));
        assert_eq!(limits(10_000, Some(3), Some(0)), (3, 0), "0: no cap");
        assert_eq!(
            limits(10_000, Some(usize::MAX), None),
            (usize::MAX, usize::MAX),
            "saturates"
        );
    }

    #[test]
    fn a_parsers_message_loses_the_strings_it_quotes() {
        assert_eq!(
            without_strings(r#"invalid type: string "Bearer a\"b", expected a map"#),
            "invalid type: string, expected a map"
        );
        assert_eq!(
            without_strings(r#"invalid value: string "x", expected one of "a" or string "y""#),
            r#"invalid value: string, expected one of "a" or string"#
        );
        assert_eq!(
            without_strings("unknown field `uri`"),
            "unknown field `uri`"
        );
        assert_eq!(without_strings(r#"string "unterminated"#), "string");
    }

    fn seeds(url: &str) -> Result<Option<Vec<String>>, String> {
        RedisSettings {
            url: url.to_owned(),
            ..RedisSettings::default()
        }
        .cluster_seeds()
    }

    #[test]
    fn one_server_is_not_a_cluster() {
        assert_eq!(seeds("redis://127.0.0.1:6379/2"), Ok(None));
        assert_eq!(seeds("rediss://user:pw@host:6380"), Ok(None));
    }

    #[test]
    fn a_cluster_url_gives_each_seed_the_credentials() {
        assert_eq!(
            seeds("redis+cluster://user:pw@a:7000,b:7001/"),
            Ok(Some(vec![
                "redis://user:pw@a:7000".to_owned(),
                "redis://user:pw@b:7001".to_owned()
            ]))
        );
        assert_eq!(
            seeds("rediss+cluster://a:7000"),
            Ok(Some(vec!["rediss://a:7000".to_owned()]))
        );
    }

    #[test]
    fn several_urls_are_a_cluster() {
        assert_eq!(
            seeds("redis://a:7000, redis://b:7001"),
            Ok(Some(vec![
                "redis://a:7000".to_owned(),
                "redis://b:7001".to_owned()
            ]))
        );
    }

    #[test]
    fn a_cluster_refuses_a_database_number_and_an_empty_list() {
        assert!(seeds("redis+cluster://a:7000/3").is_err());
        assert!(seeds("redis+cluster://").is_err());
        assert!(seeds("redis+cluster://pw@").is_err());
    }

    #[test]
    fn a_key_prefix_holds_a_brace_only_as_a_hash_tag() {
        let with_prefix = |prefix: &str| {
            let mut settings = Settings::default();
            settings.redis.url = "redis://127.0.0.1:6379".into();
            settings.redis.key_prefix = prefix.into();
            settings.validate()
        };
        for kept in ["mcp-ws:", "{tenant}mcp:", "a}b{t}:"] {
            assert!(with_prefix(kept).is_ok(), "{kept}");
            assert!(has_hash_tag(kept) || !kept.contains('{'), "{kept}");
        }
        for refused in ["{}mcp:", "a{b:", "{}{t}:", "a}b:"] {
            assert!(
                matches!(with_prefix(refused), Err(ConfigError::Invalid(m)) if m.contains("key_prefix")),
                "{refused}"
            );
        }
    }
}
