//! The TLS listener: the public listener when `[tls]` is set, built with actix-server rather
//! than by `HttpServer` so that a connection passes the per-address handshake gate
//! ([`perimeter::address_gate`](crate::perimeter::address_gate)) before its handshake starts.
//!
//! `HttpServer` offers no place for such a gate: its TLS listener goes from the accepted TCP
//! stream straight into actix-tls's acceptor, and the first hook it calls (`on_connect`)
//! runs after the handshake. So this module puts together what `HttpServer::bind_rustls_0_23`
//! does (actix-web 4.18's `listen_rustls_0_23_inner`), with the gate between the accept and
//! the acceptor: the same acceptor with the configured handshake timeout, the same
//! `HttpService` settings (HttpServer's defaults: the code sets none of them), the same
//! `on_connect` callback, stream type (`TlsStream<TcpStream>`, which the callback downcasts
//! to) and `AppConfig` (secure, the bound address as host). The plain listener is still
//! `HttpServer`'s, unchanged.

use crate::perimeter::address_gate::AddressPlace;
use crate::session::shared::Shared;
use actix_http::body::MessageBody;
use actix_http::{Extensions, HttpService, KeepAlive, Protocol, Request, Response};
use actix_server::ServerBuilder;
use actix_service::{
    apply_fn_factory, map_config, IntoServiceFactory, Service, ServiceFactory,
    ServiceFactoryExt as _,
};
use actix_tls::accept::rustls_0_23::{Acceptor, AcceptorService, TlsStream};
use actix_tls::accept::TlsError;
use actix_web::dev::AppConfig;
use actix_web::rt::net::TcpStream;
use std::any::Any;
use std::convert::Infallible;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Binds `server.listen` as a TLS listener serving `app` with `tls`, in a server builder set
/// as the plain listener's `HttpServer` is (backlog, workers, no signal handling, the same
/// shutdown timeout); returns the bound address and the builder, not yet run.
pub(super) fn bind<F, I, S, B, C>(
    shared: &Arc<Shared>,
    tls: rustls::ServerConfig,
    app: F,
    on_connect: C,
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
    C: Fn(&dyn Any, &mut Extensions) + Send + Sync + Clone + 'static,
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
    let mut acceptor = Acceptor::new(with_http1_alpn(tls));
    acceptor.set_handshake_timeout(Duration::from_millis(server.tls_handshake_timeout_ms));
    let shutdown = builder.graceful_shutdown_signal();
    // `HttpServer`'s default host: the bound address.
    let host = addr.to_string();
    let shared = shared.clone();
    let builder = builder.listen(format!("mcp-ws-tls-{addr}"), listener, move || {
        let shutdown = shutdown.clone();
        let on_connect = on_connect.clone();
        let host = host.clone();
        let app = app()
            .into_factory()
            .map_err(|error| error.into().error_response());
        // The settings `HttpServer` gives every listener (its defaults).
        let http = HttpService::build()
            .graceful_shutdown_signal(move || {
                let shutdown = shutdown.clone();
                async move { shutdown.notified().await }
            })
            .keep_alive(KeepAlive::default())
            .client_request_timeout(Duration::from_secs(5))
            .h1_allow_half_closed(true)
            .client_disconnect_timeout(Duration::from_secs(1))
            .on_connect_ext(
                move |io: &TlsStream<TcpStream>, extensions: &mut Extensions| {
                    on_connect(io as &dyn Any, extensions)
                },
            )
            // `AppConfig::new` is crate-private; this is the constructor actix-test uses
            // (`secure` must be true: the auth metadata names the `https` scheme from it).
            .finish(map_config(app, move |_| {
                AppConfig::__priv_test_new(true, host.clone(), addr)
            }));
        let shared = shared.clone();
        // The acceptor serves any stream type: this one's is TCP.
        apply_fn_factory::<_, Acceptor, _, _, TcpStream, TcpStream, _, _>(
            acceptor.clone(),
            move |io: TcpStream, acceptor: &AcceptorService| {
                // Refused, the stream is dropped here: closed at once, before the handshake.
                let handshake = admit(&shared, &io).map(|permit| (permit, acceptor.call(io)));
                async move {
                    let (permit, handshake) = handshake?;
                    let tls = handshake.await;
                    // The place is the handshake's, not the connection's.
                    drop(permit);
                    tls
                }
            },
        )
        .map_err(TlsError::into_service_error)
        .and_then(|io: TlsStream<TcpStream>| async move {
            // HTTP/2 is not built (actix-http's `http2` feature is off), so, as with
            // `HttpServer`, every connection is HTTP/1.
            let peer = io.get_ref().0.peer_addr().ok();
            Ok((io, Protocol::Http1, peer))
        })
        .and_then(http.map_err(TlsError::Service))
    })?;
    Ok((addr, builder))
}

/// The gate for a new connection: its handshake's place (`None`: not limited, or the peer's
/// address unknown: a connection already gone, whose handshake fails at once), or the
/// refusal, counted.
fn admit(
    shared: &Shared,
    io: &TcpStream,
) -> Result<Option<AddressPlace>, TlsError<io::Error, Infallible>> {
    let Ok(peer) = io.peer_addr() else {
        return Ok(None);
    };
    shared
        .perimeter
        .handshakes
        .admit(peer.ip())
        .map_err(|limit| {
            shared.metrics.rejections.handshake_ip_limit.inc();
            // Debug: under an attack this is every connection of the attacker.
            tracing::debug!(peer = %peer.ip(), limit, "TLS connection closed: its address has server.max_handshakes_per_ip handshakes in progress");
            TlsError::Tls(io::ErrorKind::ConnectionRefused.into())
        })
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
