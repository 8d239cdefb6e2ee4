//! The public listener, plain or TLS, built with actix-server rather than by `HttpServer`
//! so that each accepted connection passes the per-address gates
//! ([`perimeter::address_gate`]) before anything it sent is read: its place among its
//! address's open connections (`server.max_connections_per_ip`), held by the connection's
//! stream ([`AdmittedStream`]) until it ends, and with `[tls]` its place among the
//! handshakes in progress (`server.max_handshakes_per_ip`) before its handshake starts.
//!
//! `HttpServer` offers no place for such a gate: it goes from the accepted TCP stream
//! straight into HTTP (or actix-tls's acceptor), and the first hook it calls (`on_connect`)
//! runs once the connection's dispatcher holds it (after a TLS handshake). A connection
//! refused there could only be shut down, and what it had sent already was still read and
//! had to be refused request by request; a place kept in the connection's extensions cost
//! their table, about 200 bytes a connection. So this module puts together what
//! `HttpServer::bind` and `bind_rustls_0_23` do (actix-web 4.18's `listen` and
//! `listen_rustls_0_23_inner`), with the gates between the accept and HTTP: the same
//! acceptor with the configured handshake timeout, the same `HttpService` settings
//! (`HttpServer`'s defaults: the code sets none of them), the same `on_connect` callback (the
//! client certificate's subject, [`perimeter::tls::on_connect`]) given the same stream type
//! (`TlsStream<TcpStream>`), and the same `AppConfig` (secure with TLS, the bound address as
//! host). One thing `HttpServer` does not do: the HTTP service is given an upgrade service,
//! so that a WebSocket handshake's connection is served by [`upgraded`] from its head on,
//! without the dispatcher's buffers.

use super::upgraded;
use crate::observe::metrics::Counter;
use crate::perimeter::address_gate::{AddressGate, AddressPlace};
use crate::perimeter::{self};
use crate::session::shared::Shared;
use actix_codec::Framed;
use actix_http::body::MessageBody;
use actix_http::error::DispatchError;
use actix_http::h1::Codec;
use actix_http::{Extensions, HttpService, KeepAlive, Protocol, Request, Response};
use actix_server::{GracefulShutdownSignal, ServerBuilder};
use actix_service::{
    apply_fn_factory, fn_factory, fn_service, map_config, IntoServiceFactory, Service,
    ServiceFactory, ServiceFactoryExt as _,
};
use actix_tls::accept::rustls_0_23::{Acceptor, AcceptorService, TlsStream};
use actix_tls::accept::TlsError;
use actix_web::dev::AppConfig;
use actix_web::rt::net::TcpStream;
use std::any::Any;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Binds `server.listen` serving `app`, over TLS when `[tls]` is set, in a server builder set
/// as `HttpServer` sets one (backlog, workers; no signal handling and the shutdown timeout as
/// the server sets them); returns the bound address and the builder, not yet run.
pub(super) fn bind<F, I, S, B>(
    shared: &Arc<Shared>,
    app: F,
) -> io::Result<(SocketAddr, ServerBuilder)>
where
    F: Fn() -> I + Send + Clone + 'static,
    I: IntoServiceFactory<S, Request>,
    S: ServiceFactory<Request, Config = AppConfig> + 'static,
    S::Error: Into<actix_web::Error> + 'static,
    S::InitError: fmt::Debug,
    S::Response: Into<Response<B>> + 'static,
    <S::Service as Service<Request>>::Future: 'static,
    S::Service: 'static,
    B: MessageBody + 'static,
{
    let server = &shared.settings.server;
    let listener = tcp_listener(server.listen, server.backlog)?;
    let addr = listener.local_addr()?;
    let mut builder = ServerBuilder::default()
        .backlog(server.backlog)
        .disable_signals()
        .shutdown_timeout(super::CONNECTIONS_STOP_SECS);
    if server.workers > 0 {
        builder = builder.workers(server.workers);
    }
    let shutdown = builder.graceful_shutdown_signal();
    let shared = shared.clone();
    let Some(tls) = shared.perimeter.tls.clone() else {
        let builder = builder.listen(format!("mcp-ws-{addr}"), listener, move || {
            let shared = shared.clone();
            fn_service(move |stream: TcpStream| {
                // Refused, the stream is dropped here: closed before anything is read.
                let admitted = admit_connection(&shared, &stream).map(|place| {
                    let peer = stream.peer_addr().ok();
                    (
                        AdmittedStream {
                            stream,
                            _place: place.map(Box::new),
                        },
                        Protocol::Http1,
                        peer,
                    )
                });
                std::future::ready(admitted.map_err(DispatchError::Io))
            })
            .and_then(http_service(&app, &shutdown, false, addr))
        })?;
        return Ok((addr, builder));
    };
    let mut acceptor = Acceptor::new(with_http1_alpn((*tls).clone()));
    acceptor.set_handshake_timeout(Duration::from_millis(server.tls_handshake_timeout_ms));
    let builder = builder.listen(format!("mcp-ws-tls-{addr}"), listener, move || {
        let shared = shared.clone();
        // The acceptor serves any stream type: this one's is TCP.
        apply_fn_factory::<_, Acceptor, _, _, TcpStream, TcpStream, _, _>(
            acceptor.clone(),
            move |stream: TcpStream, acceptor: &AcceptorService| {
                // Refused by either gate, the stream is dropped here: closed at once, before
                // the handshake.
                let admitted = admit_connection(&shared, &stream)
                    .and_then(|place| Ok((place, admit_handshake(&shared, &stream)?)))
                    .map(|(place, permit)| (place, permit, acceptor.call(stream)));
                async move {
                    let (place, permit, handshake) = admitted.map_err(TlsError::Tls)?;
                    let tls = handshake.await;
                    // The handshake's place is the handshake's, not the connection's.
                    drop(permit);
                    tls.map(|stream| AdmittedStream {
                        stream,
                        _place: place.map(Box::new),
                    })
                }
            },
        )
        .map_err(TlsError::into_service_error)
        .and_then(
            |admitted: AdmittedStream<TlsStream<TcpStream>>| async move {
                // HTTP/2 is not built (actix-http's `http2` feature is off), so, as with
                // `HttpServer`, every connection is HTTP/1.
                let peer = admitted.stream.get_ref().0.peer_addr().ok();
                Ok((admitted, Protocol::Http1, peer))
            },
        )
        .and_then(http_service(&app, &shutdown, true, addr).map_err(TlsError::Service))
    })?;
    Ok((addr, builder))
}

/// One worker's HTTP service for `app` over streams of type `T`, with the settings
/// `HttpServer` gives every listener (its defaults) and its `AppConfig` (`secure` must be
/// true with TLS: the auth metadata names the `https` scheme from it).
fn http_service<T, F, I, S, B>(
    app: &F,
    shutdown: &GracefulShutdownSignal,
    secure: bool,
    addr: SocketAddr,
) -> impl ServiceFactory<
    (AdmittedStream<T>, Protocol, Option<SocketAddr>),
    Config = (),
    Response = (),
    Error = DispatchError,
    InitError = (),
>
where
    T: AsyncRead + AsyncWrite + Unpin + 'static,
    F: Fn() -> I + Clone + 'static,
    I: IntoServiceFactory<S, Request>,
    S: ServiceFactory<Request, Config = AppConfig> + 'static,
    S::Error: Into<actix_web::Error> + 'static,
    S::InitError: fmt::Debug,
    S::Response: Into<Response<B>> + 'static,
    <S::Service as Service<Request>>::Future: 'static,
    S::Service: 'static,
    B: MessageBody + 'static,
{
    let shutdown = shutdown.clone();
    // `HttpServer`'s default host: the bound address.
    let host = addr.to_string();
    let config = move || AppConfig::__priv_test_new(secure, host.clone(), addr);
    let upgrade_config = config.clone();
    // Upgrade requests (WebSocket handshakes) go to the same application, served on their
    // connection without the HTTP/1 dispatcher from their head on (see `upgraded`): a
    // worker's own instance of the application, made as the other one is.
    let upgrade_app = app.clone();
    let upgrade = fn_factory(move || {
        let factory = upgrade_app().into_factory();
        let config = upgrade_config();
        async move {
            let app = Rc::new(factory.new_service(config).await.map_err(|error| {
                tracing::error!(?error, "the application for upgraded connections not built");
            })?);
            Ok::<_, ()>(fn_service(
                move |(request, framed): (Request, Framed<AdmittedStream<T>, Codec>)| {
                    upgraded::serve(app.clone(), request, framed)
                },
            ))
        }
    });
    let app = app()
        .into_factory()
        .map_err(|error| error.into().error_response());
    HttpService::build()
        .graceful_shutdown_signal(move || {
            let shutdown = shutdown.clone();
            async move { shutdown.notified().await }
        })
        .keep_alive(KeepAlive::default())
        .client_request_timeout(Duration::from_secs(5))
        .h1_allow_half_closed(true)
        .client_disconnect_timeout(Duration::from_secs(1))
        .local_addr(addr)
        .on_connect_ext(
            |admitted: &AdmittedStream<T>, extensions: &mut Extensions| {
                perimeter::tls::on_connect(&admitted.stream as &dyn Any, extensions);
            },
        )
        .upgrade(upgrade)
        // `AppConfig::new` is crate-private; this is the constructor actix-test uses.
        .finish(map_config(app, move |_| config()))
}

/// A connection's stream (TCP, or TLS over TCP) with its place among its address's open
/// connections, given back when the connection ends and the stream is dropped. Kept in the
/// stream rather than in the connection's extensions, whose table the first entry allocates.
struct AdmittedStream<T> {
    stream: T,
    /// Held, never read: dropping it gives the place back. Boxed: the stream is part of the
    /// connection's task, one allocation, and the place's 32 bytes inline took it into the
    /// allocator's next size class (+280 bytes a connection measured at 18,000 sessions,
    /// the cap on or off); boxed, +8 bytes, and a 32-byte box where the cap is on.
    _place: Option<Box<AddressPlace>>,
}

impl<T: AsyncRead + Unpin> AsyncRead for AdmittedStream<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for AdmittedStream<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// The gate of open connections for a connection just accepted: its place (`None`: not
/// limited, or the peer's address unknown: a connection already gone), or the refusal,
/// counted. Sets its unread-time limit first ([`limit_unread_time`]).
fn admit_connection(shared: &Shared, stream: &TcpStream) -> io::Result<Option<AddressPlace>> {
    limit_unread_time(
        stream,
        Duration::from_millis(shared.settings.heartbeat.client_timeout_ms),
    );
    let gate = &shared.perimeter.open_connections;
    let refused = &shared.metrics.rejections.connection_ip_limit;
    pass_gate(
        gate,
        stream,
        refused,
        "server.max_connections_per_ip connections open",
    )
}

/// The gate of TLS handshakes in progress for a connection just admitted: its handshake's
/// place (`None` as above: a connection already gone fails its handshake at once), or the
/// refusal, counted.
fn admit_handshake(shared: &Shared, stream: &TcpStream) -> io::Result<Option<AddressPlace>> {
    let gate = &shared.perimeter.handshakes;
    let refused = &shared.metrics.rejections.handshake_ip_limit;
    pass_gate(
        gate,
        stream,
        refused,
        "server.max_handshakes_per_ip handshakes in progress",
    )
}

/// A place at `gate` for `stream`'s peer, or the refusal, counted in `refused` and logged
/// as the address having `what`.
fn pass_gate(
    gate: &Arc<AddressGate>,
    stream: &TcpStream,
    refused: &Counter,
    what: &str,
) -> io::Result<Option<AddressPlace>> {
    let Ok(peer) = stream.peer_addr() else {
        return Ok(None);
    };
    gate.admit(peer.ip()).map_err(|limit| {
        refused.inc();
        // Debug: under an attack this is every connection of the attacker.
        tracing::debug!(peer = %peer.ip(), limit, "connection closed: its address has {what}");
        io::ErrorKind::ConnectionRefused.into()
    })
}

/// Has the kernel close an accepted connection (`TCP_USER_TIMEOUT`) whose client takes
/// none of what the server sends for `limit` (`heartbeat.client_timeout_ms`): its receive
/// window shut, or the data unacknowledged. Such a connection's writes are held back, and
/// a WebSocket actor is run only as its socket is written to: without this, a client that
/// stops reading froze its session (heartbeat included) for as long as its TCP connection
/// lived, and a resume of the session was refused all that time. Closed, the connection
/// ends as any dropped one: its session is kept for a reconnect. An idle connection (nothing
/// to send) is not affected. Linux only; elsewhere, nothing is set.
fn limit_unread_time(tcp: &TcpStream, limit: Duration) {
    #[cfg(target_os = "linux")]
    {
        let millis = u32::try_from(limit.as_millis()).unwrap_or(u32::MAX);
        if let Err(error) = rustix::net::sockopt::set_tcp_user_timeout(tcp, millis) {
            tracing::debug!(%error, "TCP_USER_TIMEOUT not set");
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (tcp, limit);
}

/// `tls` offering `http/1.1` by ALPN first, as actix-http's rustls service sets it.
fn with_http1_alpn(mut tls: rustls::ServerConfig) -> rustls::ServerConfig {
    let mut protocols = vec![b"http/1.1".to_vec()];
    protocols.append(&mut tls.alpn_protocols);
    tls.alpn_protocols = protocols;
    tls
}

/// A listening socket as `HttpServer::bind` makes one: `SO_REUSEADDR`, `backlog`.
fn tcp_listener(addr: SocketAddr, backlog: u32) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol as IpProtocol, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM,
        Some(IpProtocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok(socket.into())
}
