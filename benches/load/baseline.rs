//! Lifecycle of the in-process baseline servers: each runs on its own thread
//! with its own single-threaded runtime (a current_thread tokio runtime, or an
//! actix system with one worker: one core's worth of server, like a pinned
//! mcp-ws), is bound before `spawn` returns, and stops on `stop` or drop.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::oneshot;

use crate::cli::BaselineKind;
use crate::{actix_inline, jsonrpsee_server, raw_echo, BoxError};

/// How long `spawn` waits for the server thread to bind.
const BIND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stopping jsonrpsee waits for its connections to wind down.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Listen backlog of both baselines: mcp-ws's default `server.backlog`, so a
/// burst of connects is queued alike. tokio's `TcpListener::bind` uses 128,
/// which overflows under a 256-connect burst and costs 1 s SYN retries.
const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` with [`LISTEN_BACKLOG`]. Needs a tokio runtime.
fn bind_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

impl BaselineKind {
    pub fn name(self) -> &'static str {
        match self {
            BaselineKind::RawEcho => "raw-echo",
            BaselineKind::ActixInline => "actix-inline",
            BaselineKind::ActixNaive => "actix-naive",
            BaselineKind::Jsonrpsee => "jsonrpsee",
        }
    }
}

pub struct BaselineServer {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl BaselineServer {
    /// Starts `kind` on `listen` (port 0 picks a free port).
    pub fn spawn(kind: BaselineKind, listen: SocketAddr) -> Result<Self, BoxError> {
        if !listen.ip().is_loopback() {
            return Err(format!("{listen}: baselines listen on loopback only").into());
        }
        let (ready_tx, ready_rx) = mpsc::channel::<Result<SocketAddr, String>>();
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(format!("srv-{}", kind.name()))
            .spawn(move || run_server_thread(kind, listen, ready_tx, shutdown_rx))?;
        let addr = match ready_rx.recv_timeout(BIND_TIMEOUT) {
            Ok(Ok(addr)) => addr,
            Ok(Err(e)) => return Err(format!("{} failed to start: {e}", kind.name()).into()),
            Err(e) => return Err(format!("{} did not bind: {e}", kind.name()).into()),
        };
        Ok(Self {
            addr,
            shutdown: Some(shutdown_tx),
            thread: Some(thread),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Signals the server thread and waits for it to exit.
    pub fn stop(mut self) {
        self.shutdown_and_join();
    }

    fn shutdown_and_join(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for BaselineServer {
    fn drop(&mut self) {
        self.shutdown_and_join();
    }
}

fn run_server_thread(
    kind: BaselineKind,
    listen: SocketAddr,
    ready: mpsc::Sender<Result<SocketAddr, String>>,
    shutdown: oneshot::Receiver<()>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(format!("tokio runtime: {e}")));
            return;
        }
    };
    let listener = match runtime.block_on(async { bind_listener(listen) }) {
        Ok(listener) => listener,
        Err(e) => {
            let _ = ready.send(Err(format!("bind {listen}: {e}")));
            return;
        }
    };
    match kind {
        BaselineKind::RawEcho => runtime.block_on(async move {
            let bound = listener.local_addr().map_err(|e| e.to_string());
            let bound_ok = bound.is_ok();
            let _ = ready.send(bound);
            if bound_ok {
                raw_echo::serve(listener, shutdown).await;
            }
        }),
        BaselineKind::Jsonrpsee => runtime.block_on(async move {
            let (handle, addr) = match jsonrpsee_server::start(listener) {
                Ok(started) => started,
                Err(e) => {
                    let _ = ready.send(Err(e.to_string()));
                    return;
                }
            };
            let _ = ready.send(Ok(addr));
            // A dropped sender also means "stop".
            let _ = shutdown.await;
            let _ = handle.stop();
            let _ = tokio::time::timeout(STOP_TIMEOUT, handle.stopped()).await;
        }),
        BaselineKind::ActixInline | BaselineKind::ActixNaive => {
            let style = if kind == BaselineKind::ActixNaive {
                actix_inline::Style::Naive
            } else {
                actix_inline::Style::Optimized
            };
            // actix runs its own system; it takes the socket as a std listener.
            let bound = listener
                .local_addr()
                .and_then(|addr| Ok((addr, runtime.block_on(async { listener.into_std() })?)));
            drop(runtime);
            match bound {
                Ok((addr, listener)) => {
                    let _ = ready.send(Ok(addr));
                    if let Err(e) = actix_inline::serve(listener, shutdown, style) {
                        eprintln!("{}: {e}", kind.name());
                    }
                }
                Err(e) => drop(ready.send(Err(e.to_string()))),
            }
        }
    }
    // Dropping the runtime cancels the remaining connection tasks.
}
