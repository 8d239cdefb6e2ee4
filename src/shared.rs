//! State shared by every session and worker (an `Arc`, not an actor): settings, the
//! registry, the global worker pool, metrics, and the directory of live sessions used to
//! fan out shutdown.

use crate::config::Settings;
use crate::mcp::LogLevel;
use crate::metrics::Metrics;
use crate::model::Implementation;
use crate::perimeter::OriginPolicy;
use crate::registry::Registry;
use actix::{Message, Recipient};
use dashmap::DashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// Tells a session the server is shutting down: finish in-flight work within `grace`, then
/// close with 1001.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct Shutdown {
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
    /// The global worker pool: one permit per running request, across all sessions.
    pub pool: Semaphore,
    pub metrics: Metrics,
    /// The Origin/Host checks of every request to the MCP endpoint.
    pub origin_policy: OriginPolicy,
    sessions: DashMap<u64, Recipient<Shutdown>>,
    next_session_id: AtomicU64,
    draining: AtomicBool,
}

impl Shared {
    pub fn new(settings: Settings, registry: Registry) -> Arc<Self> {
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
        Arc::new(Self {
            server_info,
            instructions,
            client_log_level,
            pool: Semaphore::new(settings.limits.max_concurrent_requests),
            origin_policy: OriginPolicy::new(&settings.http, settings.server.listen),
            settings,
            registry,
            metrics: Metrics::default(),
            sessions: DashMap::new(),
            next_session_id: AtomicU64::new(1),
            draining: AtomicBool::new(false),
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
        })
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Marks the server as shutting down and tells every live session.
    pub fn begin_shutdown(&self, grace: Duration) {
        self.draining.store(true, Ordering::Release);
        for entry in self.sessions.iter() {
            entry.value().do_send(Shutdown { grace });
        }
    }

    pub fn live_sessions(&self) -> u64 {
        self.metrics.sessions.get()
    }
}

/// A session's place in the server: registered for shutdown fan-out while the session
/// runs, released (and the session count lowered) on drop.
pub struct SessionSlot {
    shared: Arc<Shared>,
    id: u64,
}

impl SessionSlot {
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn register(&self, shutdown: Recipient<Shutdown>) {
        self.shared.sessions.insert(self.id, shutdown.clone());
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
        self.shared.sessions.remove(&self.id);
        self.shared.metrics.sessions.dec();
    }
}
