//! State shared by every session and worker (an `Arc`, not an actor): settings, the
//! registry, the global worker pool, metrics, the live sessions (for the shutdown fan-out),
//! and the directory of sessions a client can reach again by id (HTTP sessions).

use crate::cluster::store::Store;
use crate::config::Settings;
use crate::model::Implementation;
use crate::observe::access::Redaction;
use crate::observe::metrics::Metrics;
use crate::perimeter::{ConnectionPermit, OriginPolicy, Owner, Perimeter, RequestGuard};
use crate::protocol::mcp::LogLevel;
use crate::protocol::mrtr::StateKey;
use crate::registry::rollout::Rollout;
use crate::registry::Registry;
use crate::session::ModernShape;
use crate::transport::hosted::HostedSession;
use crate::transport::ws::WsSession;
use actix::{Addr, Message, Recipient};
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Semaphore};

/// Tells a session the server is shutting down: finish in-flight work within `grace`, then
/// close with 1001.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Shutdown {
    /// How long in-flight work may still run.
    pub grace: Duration,
}

/// See the module docs.
pub struct Shared {
    pub settings: Settings,
    pub registry: Registry,
    /// `serverInfo` of the `initialize` result.
    pub server_info: Implementation,
    /// `instructions` of the `initialize` result.
    pub instructions: Option<String>,
    /// The log level of a session until it calls `logging/setLevel`.
    pub client_log_level: LogLevel,
    /// What 2026-07-28 results share (identity, request-state key).
    pub modern: ModernShape,
    /// The global worker pool: one permit per running request, across all sessions.
    pub pool: Semaphore,
    /// Shared with the checks that count their refusals at their source (the guard).
    pub metrics: Arc<Metrics>,
    /// The Origin/Host checks of every request to the MCP endpoint.
    pub origin_policy: OriginPolicy,
    /// The checks of every request before it is routed.
    pub guard: RequestGuard,
    /// What the nodes of a deployment share (de-duplication entries; Redis when configured).
    pub(crate) store: Store,
    /// The tasks of this node (2026-07-28 tasks extension).
    pub(crate) tasks: crate::cluster::tasks::Tasks,
    /// TLS, authentication, authorization and the per-client session limits.
    pub perimeter: Perimeter,
    /// Which version of a tool in several versions each identity sees.
    pub rollout: Rollout,
    /// What the access log hides of params.
    pub redaction: Redaction,
    sessions: DashMap<u64, Recipient<Shutdown>>,
    /// Hosted sessions (HTTP, and WebSocket sessions waiting for a reconnect) by the id their
    /// client holds, with whose they are.
    directory: DashMap<SessionId, (Addr<HostedSession>, Owner)>,
    /// WebSocket sessions with their socket, by id: a reconnect takes the session over.
    sockets: DashMap<SessionId, (Addr<WsSession>, Owner)>,
    next_session_id: AtomicU64,
    /// Turns `true` when shutdown begins (and never back): read by admission, and watched
    /// by work that waits outside any actor (2026-07-28 requests over HTTP), which is not in
    /// `sessions`.
    shutdown: watch::Sender<bool>,
}

impl Shared {
    pub fn new(
        settings: Settings,
        registry: Registry,
        state_key: StateKey,
        perimeter: Perimeter,
    ) -> Arc<Self> {
        let info = &settings.info;
        let mut server_info = Implementation::new(
            info.name.clone(),
            if info.version.is_empty() {
                env!("CARGO_PKG_VERSION").to_owned()
            } else {
                info.version.clone()
            },
        );
        server_info.title = (!info.title.is_empty()).then(|| info.title.clone());
        let instructions = (!info.instructions.is_empty()).then(|| info.instructions.clone());
        let client_log_level =
            LogLevel::parse(&settings.logging.client_level).unwrap_or(LogLevel::Info);
        let metrics = Arc::new(Metrics::default());
        Arc::new(Self {
            modern: ModernShape::new(&server_info, state_key),
            server_info,
            instructions,
            client_log_level,
            pool: Semaphore::new(settings.limits.max_concurrent_requests),
            origin_policy: OriginPolicy::new(&settings.http, settings.server.listen),
            guard: RequestGuard::new(&settings),
            store: Store::new(&settings),
            tasks: crate::cluster::tasks::Tasks::new(&settings.tasks),
            perimeter,
            rollout: Rollout::new(&settings.rollout.rules),
            redaction: Redaction::new(
                &settings.logging.redact_keys,
                settings.logging.access_params_max_bytes,
            ),
            settings,
            registry,
            metrics,
            sessions: DashMap::new(),
            directory: DashMap::new(),
            sockets: DashMap::new(),
            next_session_id: AtomicU64::new(1),
            shutdown: watch::Sender::new(false),
        })
    }

    /// Reserves a session slot, or `None` when the server is full or shutting down.
    pub fn admit_session(self: &Arc<Self>) -> Option<SessionSlot> {
        if self.is_draining() {
            return None;
        }
        // Counted at admission, before the actor starts, so the cap holds under bursts.
        let max = self.settings.server.max_sessions as u64;
        if !self.metrics.sessions.try_inc_below(max) {
            return None;
        }
        Some(SessionSlot {
            shared: self.clone(),
            id: self.next_session_id.fetch_add(1, Ordering::Relaxed),
            owner: Owner::default(),
            _permit: None,
            registered: false,
        })
    }

    /// Whether the server is shutting down.
    pub fn is_draining(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Watches for the shutdown: `true` once it began (it never turns back).
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Marks the server as shutting down and tells every live session.
    pub fn begin_shutdown(&self, grace: Duration) {
        self.shutdown.send_replace(true);
        self.tasks.shutdown();
        for entry in self.sessions.iter() {
            entry.value().do_send(Shutdown { grace });
        }
    }

    /// How many sessions hold a slot now.
    pub fn live_sessions(&self) -> u64 {
        self.metrics.sessions.get()
    }

    /// Makes a hosted session of `owner` reachable by its id.
    pub fn remember_session(&self, id: SessionId, session: Addr<HostedSession>, owner: Owner) {
        self.directory.insert(id, (session, owner));
    }

    /// The hosted session with this id, if it is live and `owner`'s (anyone else is told
    /// there is no such session).
    pub fn find_session(&self, id: &str, owner: &Owner) -> Option<Addr<HostedSession>> {
        self.directory
            .get(id)
            .filter(|entry| entry.value().1 == *owner)
            .map(|entry| entry.value().0.clone())
    }

    /// Forgets a session's id (it ended).
    pub fn forget_session(&self, id: &SessionId) {
        self.directory.remove(id);
    }

    /// Makes a WebSocket session of `owner` reachable by its id while it has its socket.
    pub fn remember_socket(&self, id: SessionId, socket: Addr<WsSession>, owner: Owner) {
        self.sockets.insert(id, (socket, owner));
    }

    /// The socket holding the WebSocket session with this id, if the session is `owner`'s.
    pub fn find_socket(&self, id: &str, owner: &Owner) -> Option<Addr<WsSession>> {
        self.sockets
            .get(id)
            .filter(|entry| entry.value().1 == *owner)
            .map(|entry| entry.value().0.clone())
    }

    /// Forgets a socket's session id (the socket let go of its session).
    pub fn forget_socket(&self, id: &SessionId) {
        self.sockets.remove(id);
    }
}

/// A session id a client holds: 128 random bits, hex (see `crate::random_id`). It is a
/// bearer secret, so its `Display` shows only the first 8 characters (for logs).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SessionId(Arc<str>);

impl SessionId {
    /// A fresh, unguessable id.
    pub fn generate() -> Self {
        Self(crate::random_id())
    }

    /// The full id, for the client (a header, never a log line).
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for SessionId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SessionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}…", &self.0[..8.min(self.0.len())])
    }
}

/// A session's place in the server: registered for shutdown fan-out while the session
/// runs, released (and the session count lowered) on drop, with its owner and its place
/// within its client's limits.
pub struct SessionSlot {
    shared: Arc<Shared>,
    id: u64,
    owner: Owner,
    /// Given back when the session ends.
    _permit: Option<ConnectionPermit>,
    /// Whether it is in the shutdown fan-out (a 2026-07-28 POST never is: it watches the
    /// shutdown signal itself), so that dropping it looks there only then.
    registered: bool,
}

impl SessionSlot {
    /// The session's server-unique number (for logs and the shutdown fan-out).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The slot of a session of `owner`, holding `permit` for as long as it lives.
    pub fn bound_to(mut self, owner: Owner, permit: Option<ConnectionPermit>) -> Self {
        self.owner = owner;
        self._permit = permit;
        self
    }

    /// Whose session this is.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// Puts the session in the shutdown fan-out: `shutdown` is told when the server stops
    /// (at once if it is stopping already).
    pub fn register(&mut self, shutdown: Recipient<Shutdown>) {
        self.shared.sessions.insert(self.id, shutdown.clone());
        self.registered = true;
        // A shutdown that began between admission and registration may have missed us; a
        // second `Shutdown` is harmless (the session ignores it).
        if self.shared.is_draining() {
            shutdown.do_send(Shutdown {
                grace: Duration::from_millis(self.shared.settings.shutdown.grace_ms),
            });
        }
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        if self.registered {
            self.shared.sessions.remove(&self.id);
        }
        self.shared.metrics.sessions.dec();
    }
}
