//! The routes: `/mcp` (a WebSocket session on `GET` with an upgrade, Streamable HTTP
//! otherwise), `GET /` (how to connect), `/healthz`, `/metrics` (on the admin listener when
//! there is one), the RFC 9728 metadata, and the middleware that counts refusals.

use crate::perimeter::{self, Refusal};
use crate::session::shared::Shared;
use crate::transport::http;
use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;
use actix_web::{guard, web, HttpRequest, HttpResponse};

/// Mounts the server's routes, all on one listener: the MCP endpoint, `/healthz`, `/metrics`
/// (under the MCP endpoint's Host/Origin rules and credentials, see [`public_metrics`]).
pub(super) fn routes(cfg: &mut web::ServiceConfig) {
    public_routes(cfg);
    cfg.service(
        web::resource("/metrics")
            .wrap(actix_web::middleware::from_fn(count_refusals))
            .route(web::get().to(public_metrics)),
    );
}

/// The routes of the public listener when `/metrics` has an admin listener of its own: the
/// MCP endpoint and `/healthz` (for load balancers, which probe the public address).
pub(super) fn public_routes(cfg: &mut web::ServiceConfig) {
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

/// The URL schemes of the MCP endpoint, WebSocket and HTTP: with TLS or without.
pub(super) fn schemes(tls: bool) -> (&'static str, &'static str) {
    if tls {
        ("wss", "https")
    } else {
        ("ws", "http")
    }
}

/// `GET /`: a short page for whoever opens the server's address in a browser or with curl,
/// naming the endpoint and how to connect (nothing about the version or the configuration).
/// Under the endpoint's Host/Origin rules: it repeats the scheme and Host it was reached by
/// (a trusted proxy's forwarded ones; a client's `X-Forwarded-Host` is not believed).
///
/// # Errors
/// The perimeter's refusal of the Host or Origin.
async fn index(req: HttpRequest, shared: web::Data<Shared>) -> Result<HttpResponse, Refusal> {
    shared.perimeter.origin.check(req.headers())?;
    let (scheme, host) = shared.perimeter.auth.reached(&req);
    let (ws, http) = schemes(scheme == "https");
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
pub(super) fn admin_routes(cfg: &mut web::ServiceConfig) {
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

/// `GET /.well-known/oauth-protected-resource[/…]`: the protected resource metadata (RFC
/// 9728), when the server authenticates clients; 404 otherwise. Served to any origin, but
/// only under a `Host` the endpoint accepts: the document names the resource by it (when
/// `auth.resource` is not set), and a rebinding page would have it vouch for its own.
///
/// # Errors
/// [`Refusal::ForbiddenHost`] for a `Host` the endpoint refuses.
async fn resource_metadata(
    req: HttpRequest,
    shared: web::Data<Shared>,
) -> Result<HttpResponse, Refusal> {
    let auth = &shared.perimeter.auth;
    if !auth.is_enabled() {
        return Ok(HttpResponse::NotFound().finish());
    }
    shared.perimeter.origin.checked_host(req.headers())?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        // Browser-based clients read it from other origins.
        .insert_header(("Access-Control-Allow-Origin", "*"))
        .body(auth.metadata_document(&req).to_string()))
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
