//! The server: [`Server::builder`] (settings, how it presents itself, tools, resources,
//! prompts), its routes (`/mcp`: a WebSocket session on `GET` with an upgrade, Streamable
//! HTTP otherwise; `GET /`: a page saying how to connect; `/healthz`, `/metrics`, the last
//! two on an admin listener of their own when `server.admin_listen` is set), running in the foreground ([`Server::run`], the binary) or on a background
//! thread ([`Server::spawn`], tests and embedding), and graceful shutdown.
//!
//! Shutdown, on SIGINT/SIGTERM or `RunningServer::stop`: stop admitting sessions (a new
//! upgrade gets 503 with `Retry-After`, an answer rather than a connection left hanging),
//! tell every session (each refuses new requests with -32004, lets in-flight ones finish for
//! up to `shutdown.grace_ms`, cancels the rest, and closes with 1001), wait for the sessions
//! to be gone, then stop the HTTP server.

mod error;

pub use error::Error;

use crate::config::Settings;
use crate::perimeter::{self, Perimeter, Refusal};
use crate::prompt::Prompt;
use crate::registry::files::DirectoryWatch;
use crate::registry::Registry;
use crate::resource::{Resource, ResourceTemplate};
use crate::session::shared::Shared;
use crate::tool::Tool;
use crate::transport::hosted::HostedSessions;
use crate::transport::http;
use crate::transport::ws::Sockets;
use actix_web::body::MessageBody;
use actix_web::dev::{ServerHandle, ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{guard, web, App, HttpRequest, HttpResponse, HttpServer};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Builds a [`Server`]: settings, how it presents itself, and what it offers.
///
/// ```no_run
/// use mcp_ws::{Server, Tool, ToolError, RequestContext};
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Add { a: f64, b: f64 }
/// async fn add(args: Add, _ctx: RequestContext) -> Result<String, ToolError> {
///     Ok((args.a + args.b).to_string())
/// }
/// fn main() -> Result<(), mcp_ws::Error> {
///     Server::builder()
///         .name("calculator")
///         .tool(Tool::new("add", "Adds two numbers", add))
///         .build()?
///         .run()
/// }
/// ```
#[derive(Default)]
pub struct ServerBuilder {
    settings: Settings,
    /// The registry the server will have: handed out before `build`, so that a tool can
    /// change what the server offers while it runs (an admin tool, say).
    registry: Registry,
    tools: Vec<Tool>,
    resources: Vec<Resource>,
    templates: Vec<ResourceTemplate>,
    prompts: Vec<Prompt>,
}

impl ServerBuilder {
    /// Uses these settings (default: [`Settings::default`], listening on 127.0.0.1:8765).
    /// Set the name, version, title and instructions after this call, or in `settings.info`.
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Sets `serverInfo.name`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.settings.info.name = name.into();
        self
    }

    /// Sets `serverInfo.version` (default: this crate's version).
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.settings.info.version = version.into();
        self
    }

    /// Sets `serverInfo.title`.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.settings.info.title = title.into();
        self
    }

    /// Sets the `instructions` the model gets at `initialize`.
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.settings.info.instructions = instructions.into();
        self
    }

    /// Sets the listen address.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.settings.server.listen = addr;
        self
    }

    /// The registry the built server will use (a handle: clones share it). A tool that
    /// captures it can add, remove, enable or disable tools, resources and prompts while
    /// the server runs; connected clients hear of each change.
    ///
    /// ```
    /// use mcp_ws::{Server, Tool, ToolError, RequestContext};
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Name { name: String }
    /// let builder = Server::builder();
    /// let registry = builder.registry();
    /// let retire = Tool::new("retire", "Removes a tool", move |args: Name, _ctx: RequestContext| {
    ///     let registry = registry.clone();
    ///     async move { Ok::<_, ToolError>(registry.remove_tool(&args.name).to_string()) }
    /// });
    /// let server = builder.tool(retire).build().unwrap();
    /// # let _ = server;
    /// ```
    pub fn registry(&self) -> Registry {
        self.registry.clone()
    }

    /// Offers a tool.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Offers a resource.
    pub fn resource(mut self, resource: Resource) -> Self {
        self.resources.push(resource);
        self
    }

    /// Offers resources through a URI template.
    pub fn resource_template(mut self, template: ResourceTemplate) -> Self {
        self.templates.push(template);
        self
    }

    /// Offers a prompt.
    pub fn prompt(mut self, prompt: Prompt) -> Self {
        self.prompts.push(prompt);
        self
    }

    /// The server, ready to run.
    ///
    /// # Errors
    /// [`Error::Config`] for invalid settings (or a TLS or JWT key file that cannot be read
    /// or used), [`Error::Registry`] when two tools (or
    /// resources, templates, prompts) share a name, or a template is invalid,
    /// [`Error::ResourceDirectory`] when a directory of `resources.directories` cannot be
    /// served.
    pub fn build(self) -> Result<Server, Error> {
        self.settings.validate()?;
        let limits = &self.settings.limits;
        if limits.max_batch_len > limits.max_in_flight_per_session {
            // Not an error: a batch may mix calls with requests that run no worker (pings,
            // lists), and configurations that started before still start.
            tracing::warn!(
                max_batch_len = limits.max_batch_len,
                max_in_flight_per_session = limits.max_in_flight_per_session,
                "a batch of more tools/call entries than limits.max_in_flight_per_session \
                 gets -32009 for those beyond it; lower limits.max_batch_len to match"
            );
        }
        let perimeter = Perimeter::new(&self.settings)?;
        let mrtr = &self.settings.mrtr;
        let secret = match &mrtr.state_key_file {
            Some(path) => Some(std::fs::read_to_string(path).map_err(|source| {
                crate::config::ConfigError::Read {
                    path: path.clone(),
                    source,
                }
            })?),
            None => None,
        };
        let state_key = crate::protocol::mrtr::StateKey::new(
            secret.as_deref().map(str::trim),
            std::time::Duration::from_millis(mrtr.state_ttl_ms),
        );
        let registry = self.registry;
        for tool in self.tools {
            registry.add_tool(tool)?;
        }
        for resource in self.resources {
            registry.add_resource(resource)?;
        }
        for template in self.templates {
            registry.add_resource_template(template)?;
        }
        for prompt in self.prompts {
            registry.add_prompt(prompt)?;
        }
        let files = crate::registry::files::serve_directories(
            &registry,
            &self.settings.resources,
            self.settings.limits.max_message_bytes,
        )?;
        Ok(Server {
            shared: Shared::new(self.settings, registry, state_key, perimeter),
            files,
        })
    }
}

/// An MCP server, built and not yet running; see [`ServerBuilder`].
pub struct Server {
    shared: Arc<Shared>,
    /// The watch over `resources.directories`, for as long as the server lives.
    files: Option<DirectoryWatch>,
}

impl Server {
    /// Starts building a server.
    pub fn builder() -> ServerBuilder {
        ServerBuilder::default()
    }

    /// What the server offers; changes reach connected clients as `list_changed`.
    pub fn registry(&self) -> &Registry {
        &self.shared.registry
    }

    /// The server's shared state (tests host sessions without a socket with it).
    #[cfg(feature = "testing")]
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Runs in the foreground until SIGINT or SIGTERM, then shuts down gracefully.
    ///
    /// # Errors
    /// [`Error::Bind`] when the address cannot be bound, [`Error::Io`] when serving fails.
    pub fn run(self) -> Result<(), Error> {
        let _files = self.files;
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let result =
            actix_rt::System::new().block_on(serve(self.shared, bound_tx, termination_signal()));
        match bound_rx.try_recv() {
            Ok(Err((addr, source))) => Err(Error::Bind { addr, source }),
            _ => result.map_err(Error::Io),
        }
    }

    /// Runs on a background thread; returns once the address is bound.
    ///
    /// # Errors
    /// [`Error::Bind`] when the address cannot be bound.
    pub fn spawn(self) -> Result<RunningServer, Error> {
        let shared = self.shared;
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
                _files: self.files,
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
}

/// Mounts the server's routes, all on one listener: the MCP endpoint, `/healthz`, `/metrics`
/// (under the MCP endpoint's Host/Origin rules and credentials, see [`public_metrics`]).
#[doc(hidden)]
pub fn routes(cfg: &mut web::ServiceConfig) {
    public_routes(cfg);
    cfg.service(
        web::resource("/metrics")
            .wrap(actix_web::middleware::from_fn(count_refusals))
            .route(web::get().to(public_metrics)),
    );
}

/// The routes of the public listener when `/metrics` has an admin listener of its own: the
/// MCP endpoint and `/healthz` (for load balancers, which probe the public address).
fn public_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/mcp")
            .wrap(actix_web::middleware::from_fn(count_refusals))
            .route(
                web::get()
                    .guard(guard::fn_guard(|ctx| is_websocket_upgrade(ctx.head())))
                    .to(crate::transport::ws::upgrade),
            )
            .route(web::get().to(http::get))
            .route(web::post().to(http::post))
            .route(web::delete().to(http::delete))
            .default_service(web::to(http::not_allowed)),
    )
    .service(
        web::resource([
            perimeter::auth::METADATA_PATH,
            "/.well-known/oauth-protected-resource/{path:.*}",
        ])
        .route(web::get().to(resource_metadata)),
    )
    .service(
        web::resource("/")
            .wrap(actix_web::middleware::from_fn(count_refusals))
            .route(web::get().to(index)),
    )
    .route("/healthz", web::get().to(healthz));
}

/// The URL schemes of the MCP endpoint: WebSocket and HTTP, each with TLS or without.
fn schemes(shared: &Shared) -> (&'static str, &'static str) {
    if shared.perimeter.tls.is_some() {
        ("wss", "https")
    } else {
        ("ws", "http")
    }
}

/// `GET /`: a short page for whoever opens the server's address in a browser or with curl,
/// naming the endpoint and how to connect (nothing about the version or the configuration).
/// Under the endpoint's Host/Origin rules: it repeats the Host it was reached by.
///
/// # Errors
/// The perimeter's refusal of the Host or Origin.
async fn index(req: HttpRequest, shared: web::Data<Shared>) -> Result<HttpResponse, Refusal> {
    shared.perimeter.origin.check(req.headers())?;
    let (ws, http) = schemes(&shared);
    let host = req.connection_info().host().to_owned();
    let name = &shared.server_info.name;
    let credentials = if shared.perimeter.auth.is_enabled() {
        "\nThis server asks for credentials: send Authorization: Bearer <token> (or, from a\n\
         browser, the WebSocket subprotocol mcp.auth.<token>).\n"
    } else {
        ""
    };
    let page = format!(
        "{name}: a Model Context Protocol (MCP) server.\n\
         \n\
         MCP endpoint, one path for both transports:\n\
         \x20 WebSocket        {ws}://{host}/mcp   (subprotocol \"mcp\", one JSON-RPC message per text frame)\n\
         \x20 Streamable HTTP  {http}://{host}/mcp   (POST JSON-RPC with Accept: application/json, text/event-stream)\n\
         {credentials}\n\
         Point an MCP client at one of these URLs, e.g. the MCP Inspector:\n\
         \x20 npx @modelcontextprotocol/inspector   (transport \"Streamable HTTP\", URL {http}://{host}/mcp)\n\
         \n\
         Health: {http}://{host}/healthz\n"
    );
    Ok(HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .body(page))
}

/// The routes of the admin listener (`server.admin_listen`): `/metrics` and `/healthz`.
fn admin_routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/metrics", web::get().to(metrics));
}

/// A `GET` asking for a WebSocket (`Upgrade: websocket`); any other `GET` is the SSE stream.
fn is_websocket_upgrade(head: &actix_web::dev::RequestHead) -> bool {
    perimeter::is_websocket_upgrade(head.headers())
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

/// `GET /metrics` on the public listener: checked as a request to the MCP endpoint is
/// (Host/Origin, and credentials when the server authenticates clients), since the metrics
/// tell who uses the server and how. On the admin listener, which operators reach and
/// clients do not, [`metrics`] answers without.
///
/// # Errors
/// The perimeter's refusal.
async fn public_metrics(
    req: HttpRequest,
    shared: web::Data<Shared>,
) -> Result<HttpResponse, Refusal> {
    perimeter::admit(&shared.perimeter, &req)?;
    Ok(metrics(shared).await)
}

async fn metrics(shared: web::Data<Shared>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(shared.metrics.render())
}

/// A server running on its own thread ([`Server::spawn`]); dropping it stops the server.
pub struct RunningServer {
    addr: SocketAddr,
    /// Whether the listener speaks TLS.
    tls: bool,
    admin_addr: Option<SocketAddr>,
    shared: Arc<Shared>,
    /// Dropped after the server has stopped (fields drop after `Drop::drop`).
    _files: Option<DirectoryWatch>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl RunningServer {
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

async fn termination_signal() {
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
struct Bound {
    /// The public listener (the MCP endpoint).
    addr: SocketAddr,
    /// The admin listener (`/metrics`, `/healthz`), when `server.admin_listen` is set.
    admin: Option<SocketAddr>,
}

/// Why a listener could not be bound: its configured address and the error.
type BindFailure = (SocketAddr, io::Error);

/// Binds the listeners, reports their addresses (or the bind error) through `bound`, serves
/// until `stop` resolves, then shuts down gracefully.
async fn serve(
    shared: Arc<Shared>,
    bound: std::sync::mpsc::Sender<Result<Bound, BindFailure>>,
    stop: impl Future<Output = ()>,
) -> io::Result<()> {
    let settings = &shared.settings;
    let app_shared = web::Data::from(shared.clone());
    let app_hosted = web::Data::new(HostedSessions::default());
    let app_sockets = web::Data::new(Sockets::default());
    let max_body = settings.limits.max_message_bytes;
    let separate_admin = settings.server.admin_listen.is_some();
    let mut server = HttpServer::new(move || {
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
    })
    .backlog(settings.server.backlog)
    .disable_signals()
    .shutdown_timeout(5);
    if settings.server.workers > 0 {
        server = server.workers(settings.server.workers);
    }
    let tls = shared.perimeter.tls.clone();
    let bound_server = match tls {
        Some(config) => server
            // Set before binding: the callback is captured by the listener.
            .on_connect(perimeter::tls::on_connect)
            .bind_rustls_0_23(settings.server.listen, (*config).clone()),
        None => server.bind(settings.server.listen),
    };
    let report = |listen: SocketAddr, error: &io::Error| {
        let _ = bound.send(Err((
            listen,
            io::Error::new(error.kind(), error.to_string()),
        )));
    };
    let server = match bound_server {
        Ok(server) => server,
        Err(error) => {
            report(settings.server.listen, &error);
            return Err(error);
        }
    };
    let addr = server
        .addrs()
        .first()
        .copied()
        .unwrap_or(settings.server.listen);
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
    let server_task = actix_rt::spawn(server);
    let (ws, http) = schemes(&shared);
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
    // Sessions close themselves within the grace; the margin covers the close handshake.
    // Running tasks record their failure (-32004) in the store first, so that a client
    // polling through another node sees it.
    let deadline = Instant::now() + grace + Duration::from_secs(2);
    while (shared.live_sessions() > 0 || shared.metrics.tasks_running.get() > 0)
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    handle.stop(true).await;
    tracing::info!("stopped");
}

/// `GET /.well-known/oauth-protected-resource[/…]`: the protected resource metadata (RFC
/// 9728), when the server authenticates clients; 404 otherwise.
async fn resource_metadata(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    let auth = &shared.perimeter.auth;
    if !auth.is_enabled() {
        return HttpResponse::NotFound().finish();
    }
    HttpResponse::Ok()
        .content_type("application/json")
        // Browser-based clients read it from other origins.
        .insert_header(("Access-Control-Allow-Origin", "*"))
        .body(auth.metadata_document(&req).to_string())
}

/// Counts every [`Refusal`] answered on the MCP endpoint (and the public `/metrics`) in its reason's counter (see
/// [`Refusal::rejection`]): the one place HTTP refusals are counted, whichever check made
/// them (middleware around the `/mcp` resource).
///
/// # Errors
/// Those of the wrapped service, unchanged.
async fn count_refusals(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let shared = req.app_data::<web::Data<Shared>>().cloned();
    let response = next.call(req).await?;
    let refusal = response
        .response()
        .error()
        .and_then(|error| error.as_error::<Refusal>());
    if let (Some(shared), Some(refusal)) = (shared, refusal) {
        if let Some(counter) = refusal.rejection(&shared.metrics.rejections) {
            counter.inc();
        }
    }
    Ok(response)
}
