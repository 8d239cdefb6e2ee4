//! State shared by every session (an `Arc`, not an actor): settings, the registry, the
//! global worker pool, the cluster state, the perimeter, metrics, the budget of what
//! sessions hold for replay, and the live sessions (for
//! the shutdown fan-out). The directory of sessions a client can reach again by id is the
//! transports' (`transport::directory`).

use crate::cluster::Cluster;
use crate::config::Settings;
use crate::model::Implementation;
use crate::observe::access::{Clean, Redaction};
use crate::observe::metrics::Metrics;
use crate::perimeter::{Admission, ConnectionPermit, Perimeter, Refusal, RequestGuard};
use crate::protocol::mcp::LogLevel;
use crate::protocol::mrtr::StateKey;
use crate::registry::rollout::Rollout;
use crate::registry::Registry;
use crate::session::replay::ReplayBudget;
use crate::session::shape::StatelessShape;
use crate::worker::Pool;
use actix::{Message, Recipient};
use dashmap::DashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Tells a session the server is shutting down: finish in-flight work within `grace`, then
/// close with 1001.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Shutdown {
    /// How long in-flight work may still run.
    pub grace: Duration,
}

/// Told of every session that completes its `initialize` on this node (the gateway starts
/// the session's own children then).
pub trait SessionObserver: Send + Sync + 'static {
    /// Called on the session's thread right after its `initialize` succeeded; must not
    /// block (spawn what takes time).
    fn initialized(&self, session: &crate::context::SessionInfo);

    /// Whether a new session may begin: a refusal when what it would start at its
    /// `initialize` has no room.
    fn admits(&self) -> Result<(), Refusal> {
        Ok(())
    }
}

/// See the module docs.
pub struct Shared {
    /// The server's settings.
    pub settings: Arc<Settings>,
    pub registry: Registry,
    /// `serverInfo` of the `initialize` result.
    pub server_info: Implementation,
    /// `instructions` of the `initialize` result.
    pub instructions: Option<String>,
    /// The log level of a session until it calls `logging/setLevel`.
    pub client_log_level: LogLevel,
    /// What 2026-07-28 results share (identity, request-state key).
    pub stateless: StatelessShape,
    /// The global worker pool: one permit per running request, across all sessions.
    pub pool: Arc<Pool>,
    /// Shared with the checks that count their refusals at their source (the guard).
    pub metrics: Arc<Metrics>,
    /// The checks of every request before it is routed.
    pub guard: RequestGuard,
    /// What the nodes of a deployment share (store, tasks; Redis when configured).
    pub cluster: Arc<Cluster>,
    /// Origin/Host, TLS, authentication, authorization and the per-client session limits.
    pub perimeter: Perimeter,
    /// Which version of a tool in several versions each identity sees.
    pub rollout: Rollout,
    /// What the access log hides of params.
    pub redaction: Redaction,
    /// What sessions hold for replay, over all of them (`limits.max_replay_bytes`).
    pub replay: Arc<ReplayBudget>,
    sessions: DashMap<u64, Recipient<Shutdown>>,
    next_session_id: AtomicU64,
    /// Told of every session's `initialize` (set once, by the server: the gateway).
    observer: std::sync::OnceLock<Arc<dyn SessionObserver>>,
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
        let settings = Arc::new(settings);
        let guard = RequestGuard::new(&settings);
        let cluster = Cluster::new(settings.clone(), metrics.clone(), registry.bus().clone());
        if let (Some(nonces), Some(_)) = (guard.nonces(), cluster.store.redis()) {
            let _ = cluster.nonces.set(nonces.clone());
        }
        Arc::new(Self {
            stateless: StatelessShape::new(&server_info, state_key),
            server_info,
            instructions,
            client_log_level,
            pool: Pool::new(settings.clone(), metrics.clone()),
            guard,
            cluster,
            perimeter,
            rollout: Rollout::new(&settings.rollout.rules),
            redaction: Redaction::new(
                &settings.logging.redact_keys,
                settings.logging.access_params_max_bytes,
            ),
            replay: ReplayBudget::new(
                settings.limits.max_replay_bytes,
                settings.limits.replay_bytes_per_ip(),
                metrics.clone(),
            ),
            settings,
            registry,
            metrics,
            sessions: DashMap::new(),
            next_session_id: AtomicU64::new(1),
            observer: std::sync::OnceLock::new(),
            shutdown: watch::Sender::new(false),
        })
    }

    /// Reserves a session slot, or `None` when the server is full or shutting down (unless
    /// `while_draining`).
    fn admit(self: &Arc<Self>, while_draining: bool) -> Option<SessionSlot> {
        if self.is_draining() && !while_draining {
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
            _permit: None,
            registered: false,
        })
    }

    /// Opens a session for an admitted client: a place within its per-IP and per-identity
    /// limits, then within the global cap. The slot holds both for as long as the session
    /// lives.
    ///
    /// # Errors
    /// 429 over a per-client limit, 503 over the global cap or while shutting down.
    pub fn open_session(self: &Arc<Self>, admission: &Admission) -> Result<SessionSlot, Refusal> {
        self.open(admission, false)
    }

    /// As [`open_session`](Self::open_session), and while the server drains too: for a
    /// 2026-07-28 request that starts no new work (`tasks/get`, a list), answered then as a
    /// session answers one, so that a task's client reads how it ends within the grace.
    ///
    /// # Errors
    /// 429 over a per-client limit, 503 over the global cap.
    pub fn open_session_while_draining(
        self: &Arc<Self>,
        admission: &Admission,
    ) -> Result<SessionSlot, Refusal> {
        self.open(admission, true)
    }

    fn open(
        self: &Arc<Self>,
        admission: &Admission,
        while_draining: bool,
    ) -> Result<SessionSlot, Refusal> {
        let permit = self
            .perimeter
            .connections
            .acquire(admission)
            .map_err(|(scope, limit)| {
                tracing::debug!(
                    peer = ?admission.peer,
                    subject = %Clean(admission.identity.subject()),
                    limit,
                    "refused: too many sessions from one {}",
                    scope.as_str()
                );
                Refusal::TooManySessionsFrom { scope, limit }
            })?;
        let Some(slot) = self.admit(while_draining) else {
            return Err(if self.is_draining() && !while_draining {
                Refusal::ShuttingDown
            } else {
                Refusal::TooManySessions
            });
        };
        Ok(slot.bound_to(permit))
    }

    /// Sets who is told of every session's `initialize` (once; a second observer is
    /// ignored).
    pub fn observe_sessions(&self, observer: Arc<dyn SessionObserver>) {
        let _ = self.observer.set(observer);
    }

    /// Tells the observer, if any, that `session` completed its `initialize`.
    pub fn session_initialized(&self, session: &crate::context::SessionInfo) {
        if let Some(observer) = self.observer.get() {
            observer.initialized(session);
        }
    }

    /// [`open_session`](Self::open_session) for a session that begins here with an
    /// `initialize` (a WebSocket connection, an HTTP `initialize`), once the observer of
    /// sessions admits one.
    ///
    /// # Errors
    /// As `open_session`, and 503 when the observer refuses.
    pub fn open_new_session(
        self: &Arc<Self>,
        admission: &Admission,
    ) -> Result<SessionSlot, Refusal> {
        if let Some(observer) = self.observer.get() {
            observer.admits().inspect_err(|refusal| {
                tracing::debug!(peer = ?admission.peer, %refusal, "refused a new session");
            })?;
        }
        self.open_session(admission)
    }

    /// Whether the server is shutting down.
    pub fn is_draining(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Watches for the shutdown: `true` once it began (it never turns back).
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Marks the server as shutting down and tells every live session. Tasks run on for the
    /// grace, as requests in flight do; those still running when it ends are told then
    /// (`server::run`).
    pub fn begin_shutdown(&self, grace: Duration) {
        self.shutdown.send_replace(true);
        for entry in self.sessions.iter() {
            entry.value().do_send(Shutdown { grace });
        }
    }

    /// How many sessions hold a slot now.
    pub fn live_sessions(&self) -> u64 {
        self.metrics.sessions.get()
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

    /// The id a client presented (for a session another node began).
    pub fn from_client(id: &str) -> Self {
        Self(Arc::from(id))
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
/// runs, released (and the session count lowered) on drop, with its place within its
/// client's limits. (Whose session it is, the session's admission says: `Session::owner`.)
pub struct SessionSlot {
    shared: Arc<Shared>,
    id: u64,
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

    /// The slot holding `permit` (the session's place within its client's limits) for as
    /// long as it lives.
    pub fn bound_to(mut self, permit: Option<ConnectionPermit>) -> Self {
        self._permit = permit;
        self
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
