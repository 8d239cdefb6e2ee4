//! A server running: binding its listeners, serving until told to stop, and the graceful
//! shutdown (see the module docs of `server`); [`RunningServer`] is one on its own thread.

use super::listener;
use super::routes::{admin_routes, public_routes, routes, schemes};
use super::Error;
use crate::cluster::store::bridge;
use crate::registry::files::DirectoryWatch;
use crate::registry::Registry;
use crate::session::shared::Shared;
use crate::transport::hosted::HostedSessions;
use crate::transport::ws::Sockets;
use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpServer};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// What runs beside the server for as long as it lives, stopped after it (when dropped).
/// Held for their `Drop`, never read.
#[allow(dead_code)]
pub(super) struct Companions {
    /// The watch over `resources.directories`.
    pub files: Option<DirectoryWatch>,
    /// The upstreams' children: stopped (SIGTERM, the shutdown grace, SIGKILL) once the
    /// server has answered what it could.
    pub gateway: Option<crate::gateway::Gateway>,
}

/// A server running on its own thread ([`Server::spawn`](crate::Server::spawn)); dropping it stops the server.
pub struct RunningServer {
    addr: SocketAddr,
    /// Whether the listener speaks TLS.
    tls: bool,
    admin_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    /// Dropped after the server has stopped (fields drop after `Drop::drop`).
    _companions: Companions,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl RunningServer {
    /// Runs the server of `shared` on a thread of its own, keeping its `companions` until it
    /// stops; returns once the address is bound.
    pub(super) fn start(shared: Arc<Shared>, companions: Companions) -> Result<Self, Error> {
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("mcp-ws-server".into())
            .spawn(move || {
                actix_rt::System::new().block_on(serve(thread_shared, bound_tx, async {
                    let _ = stop_rx.await;
                }))
            })?;
        match bound_rx.recv() {
            Ok(Ok(Bound { addr, admin })) => Ok(RunningServer {
                addr,
                tls: shared.perimeter.tls.is_some(),
                admin_addr: admin,
                shared,
                _companions: companions,
                stop: Some(stop_tx),
                thread: Some(thread),
            }),
            Ok(Err((addr, source))) => {
                let _ = thread.join();
                Err(Error::Bind { addr, source })
            }
            Err(_) => Err(Error::Io(io::Error::other(
                "server thread ended before binding",
            ))),
        }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bound address of the admin listener (`/metrics`, `/healthz`), when
    /// `server.admin_listen` is set.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// `ws://ADDR/mcp`, or `wss://ADDR/mcp` with TLS.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "wss" } else { "ws" };
        format!("{scheme}://{}/mcp", self.addr)
    }

    /// What the server offers; changes reach connected clients as `list_changed`.
    pub fn registry(&self) -> &Registry {
        &self.shared.registry
    }

    /// The server's shared state (tests and benches read its metrics).
    #[cfg(feature = "testing")]
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Shuts down gracefully (as on SIGTERM) and waits until the server thread is done.
    pub fn stop(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            match thread.join() {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::error!(%error, "server thread failed"),
                Err(_) => tracing::error!("server thread panicked"),
            }
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

pub(super) async fn termination_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the server");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    tracing::info!("termination signal received");
}

/// The addresses a server bound.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bound {
    /// The public listener (the MCP endpoint).
    addr: SocketAddr,
    /// The admin listener (`/metrics`, `/healthz`), when `server.admin_listen` is set.
    admin: Option<SocketAddr>,
}

/// Why a listener could not be bound: its configured address and the error.
type BindFailure = (SocketAddr, io::Error);

/// The actors that keep session records in Redis, as the cluster layer reaches them
/// (`cluster::rewrite::SessionRecords`): hosted sessions (HTTP, parked WebSocket) and
/// WebSocket sessions with their socket.
struct SessionHosts {
    hosted: Arc<HostedSessions>,
    sockets: Arc<Sockets>,
}

impl crate::cluster::rewrite::SessionRecords for SessionHosts {
    fn any(&self) -> bool {
        !self.hosted.is_empty() || !self.sockets.is_empty()
    }

    fn lost(&self, owe: &dyn Fn() -> crate::cluster::rewrite::RecordOwed) {
        use crate::transport::socket_record::RecordsLost;
        for session in self.hosted.actors() {
            session.do_send(RecordsLost(owe()));
        }
        for socket in self.sockets.actors() {
            socket.do_send(RecordsLost(owe()));
        }
    }
}

/// Binds the listeners, reports their addresses (or the bind error) through `bound`, serves
/// until `stop` resolves, then shuts down gracefully.
pub(super) async fn serve(
    shared: Arc<Shared>,
    bound: std::sync::mpsc::Sender<Result<Bound, BindFailure>>,
    stop: impl Future<Output = ()>,
) -> io::Result<()> {
    let settings = &shared.settings;
    let app_shared = web::Data::from(shared.clone());
    let app_hosted = web::Data::new(HostedSessions::default());
    let app_sockets = web::Data::new(Sockets::default());
    // With sessions in Redis, the other nodes' notes about a session reach this node's copy
    // (or socket).
    if shared.settings.sessions_in_redis() {
        let _ = shared
            .cluster
            .session_sink
            .set(crate::transport::ws::deliver_session_notes(
                app_hosted.clone().into_inner(),
                app_sockets.clone().into_inner(),
            ));
        let hosted = app_hosted.clone();
        let _ = shared.cluster.notes_missed.set(Box::new(move || {
            for session in hosted.actors() {
                session.do_send(crate::transport::hosted::Recheck);
            }
        }));
        let _ = shared.cluster.session_records.set(Box::new(SessionHosts {
            hosted: app_hosted.clone().into_inner(),
            sockets: app_sockets.clone().into_inner(),
        }));
    }
    let max_body = settings.limits.max_message_bytes;
    let separate_admin = settings.server.admin_listen.is_some();
    let app = move || {
        App::new()
            .app_data(app_shared.clone())
            .app_data(app_hosted.clone())
            .app_data(app_sockets.clone())
            .app_data(web::PayloadConfig::new(max_body))
            .configure(if separate_admin {
                public_routes
            } else {
                routes
            })
    };
    let report = |listen: SocketAddr, error: &io::Error| {
        let _ = bound.send(Err((
            listen,
            io::Error::new(error.kind(), error.to_string()),
        )));
    };
    // The public listener, bound (built by hand to gate each connection: see `listener`); it
    // runs once the admin listener is bound too.
    let public = listener::bind(&shared, app);
    let (addr, server) = match public {
        Ok(public) => public,
        Err(error) => {
            report(settings.server.listen, &error);
            return Err(error);
        }
    };
    // The admin listener: its own small server (one thread), so that scrapes never compete
    // with sessions for a worker and /metrics never answers on the public address.
    let admin = match settings.server.admin_listen {
        None => None,
        Some(listen) => {
            let admin_shared = web::Data::from(shared.clone());
            let admin = HttpServer::new(move || {
                App::new()
                    .app_data(admin_shared.clone())
                    .configure(admin_routes)
            })
            .workers(1)
            .disable_signals()
            .shutdown_timeout(1)
            .bind(listen);
            match admin {
                Ok(admin) => Some((admin.addrs().first().copied().unwrap_or(listen), admin)),
                Err(error) => {
                    report(listen, &error);
                    return Err(error);
                }
            }
        }
    };
    let server = server.run();
    let handle = server.handle();
    // Registry changes reach the other nodes, and theirs this one (with Redis).
    crate::cluster::store::bridge::start(&shared.cluster);
    crate::cluster::tasks::keep_tidy(&shared.cluster);
    let server_task = actix_rt::spawn(server);
    let (ws, http) = schemes(shared.perimeter.tls.is_some());
    tracing::info!(
        %addr,
        "listening: MCP endpoint over WebSocket {ws}://{addr}/mcp and Streamable HTTP {http}://{addr}/mcp"
    );
    let (admin_addr, admin_handle) = match admin {
        Some((admin_addr, admin)) => {
            let admin = admin.run();
            let admin_handle = admin.handle();
            actix_rt::spawn(admin);
            tracing::info!(addr = %admin_addr, "admin listener: /metrics and /healthz");
            (Some(admin_addr), Some(admin_handle))
        }
        None => (None, None),
    };
    let _ = bound.send(Ok(Bound {
        addr,
        admin: admin_addr,
    }));

    stop.await;
    shut_down(&shared, &handle).await;
    if let Some(admin) = admin_handle {
        admin.stop(true).await;
    }
    server_task.await.map_err(io::Error::other)?
}

async fn shut_down(shared: &Arc<Shared>, handle: &ServerHandle) {
    let grace = Duration::from_millis(shared.settings.shutdown.grace_ms);
    tracing::info!(
        sessions = shared.live_sessions(),
        grace_ms = grace.as_millis() as u64,
        "shutting down"
    );
    shared.begin_shutdown(grace);
    // Sessions close themselves within the grace (the margin covers the close handshake),
    // and tasks run on for it. Tasks still running at its end fail (-32004), recorded in the
    // store first, so that a client polling through another node sees it; and WebSocket
    // sessions' last records are written (sessions in Redis), so that their clients resume
    // them elsewhere, or deleted for sessions their clients closed.
    let busy = || {
        shared.live_sessions() > 0
            || shared.metrics.tasks_running.get() > 0
            || shared
                .cluster
                .last_writes
                .load(std::sync::atomic::Ordering::Acquire)
                > 0
    };
    let grace_ends = Instant::now() + grace;
    while busy() && Instant::now() < grace_ends {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shared.cluster.tasks.shutdown();
    let deadline = Instant::now() + Duration::from_secs(2);
    while busy() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // What the node still owes Redis (results, releases, nonces, session ends it could not
    // send while Redis was away or skipped), tried once more within the same 2 s: the
    // shutdown's documented bound holds (an attempt takes at most `redis.timeout_ms`).
    let settle = bridge::settle_owed(&shared.cluster);
    let _ = tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), settle).await;
    handle.stop(true).await;
    tracing::info!("stopped");
}
