//! The perimeter: everything checked on an HTTP request to the MCP endpoint before a session
//! handles it (a refused client costs no session, no worker and no memory beyond the
//! request), and the one place where each refusal becomes an HTTP answer.
//!
//! In order: Origin/Host ([`origin`]), who the client is ([`auth`]: a bearer token or a TLS
//! client certificate, [`tls`]) and where from ([`forwarded`]: its address, behind a trusted
//! proxy the one the proxy forwarded), what it may use ([`policy`]), and, for a request that
//! opens a session, its place within the per-client and global session limits
//! ([`connections`]).
//! Every refusal carries a JSON-RPC error object with a null id in its body (what the official
//! TypeScript SDK sends), so a client can show why; the status is what clients act on.
//!
//! Before all of these, as it is accepted, every connection takes a place within its
//! address's limit of open connections, and then on a TLS listener its handshake a place
//! within its address's limit of handshakes in progress ([`address_gate`]); a connection
//! over either is closed without an answer (nothing can be said before a request, nor
//! before the handshake).

pub mod address_gate;
pub mod auth;
pub mod connections;
pub mod forwarded;
pub mod guard;
pub mod origin;
pub mod partial;
pub mod policy;
pub mod rate;
pub mod signature;
pub mod tls;

use crate::config::{ConfigError, Settings};
use crate::context::Identity;
use crate::observe::metrics::{Counter, Rejections};
use crate::protocol::mcp::ProtocolVersion;

use actix_web::http::header::{HeaderName, USER_AGENT, WWW_AUTHENTICATE};
use actix_web::http::StatusCode;

use actix_web::{HttpRequest, HttpResponse, ResponseError};
use serde_json::json;
use std::net::IpAddr;
use std::sync::Arc;

/// The trace headers a request may bring (W3C Trace Context, or a plain id), named once.
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
static X_TRACE_ID: HeaderName = HeaderName::from_static("x-trace-id");

pub use auth::{Authenticator, Challenge};
pub use connections::{ClientLimit, ConnectionLimits, ConnectionPermit};
pub use guard::RequestGuard;
pub use origin::OriginPolicy;
pub use partial::{PartialBudget, Reservation};
pub use policy::{Access, Grant, Policies};

/// The perimeter's state, built once from the settings (reading the TLS and JWT key files).
pub struct Perimeter {
    /// The Origin/Host checks of every request to the MCP endpoint.
    pub origin: OriginPolicy,
    /// The listener's TLS configuration, when `[tls]` is set.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Checks credentials.
    pub auth: Authenticator,
    /// The allow-lists of `auth.policies`.
    pub policies: Policies,
    /// The per-IP and per-identity session counters.
    pub connections: Arc<ConnectionLimits>,
    /// The per-IP counters of TLS handshakes in progress (used only with `[tls]`).
    pub handshakes: Arc<address_gate::AddressGate>,
    /// The per-IP counters of open connections (`server.max_connections_per_ip`).
    pub open_connections: Arc<address_gate::AddressGate>,
    /// The proxies whose forwarded client address is believed.
    pub proxies: forwarded::TrustedProxies,
    /// The bytes of partly received messages, over all connections
    /// (`limits.max_partial_bytes`).
    pub partial: Arc<PartialBudget>,
}

impl Perimeter {
    /// The perimeter the settings ask for.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] when a certificate, key or JWKS file cannot be read or used.
    pub fn new(settings: &Settings) -> Result<Self, ConfigError> {
        let policies = Policies::new(&settings.auth.policies);
        Ok(Self {
            origin: OriginPolicy::new(&settings.http, settings.server.listen),
            tls: tls::server_config(&settings.tls)?,
            auth: Authenticator::new(settings, &policies)?,
            policies,
            connections: Arc::new(ConnectionLimits::new(
                settings.server.sessions_per_ip(),
                settings.server.max_sessions_per_identity,
            )),
            handshakes: Arc::new(address_gate::AddressGate::new(
                settings.server.max_handshakes_per_ip,
                &settings.server,
            )),
            open_connections: Arc::new(address_gate::AddressGate::new(
                settings.server.connections_per_ip(),
                &settings.server,
            )),
            partial: PartialBudget::new(
                settings.limits.max_partial_bytes,
                settings.limits.partial_bytes_per_ip(),
            ),
            proxies: forwarded::TrustedProxies::new(&settings.server),
        })
    }
}

/// Whose a session is: an authenticated client's principal (its subject in the namespace of
/// its proof: the API key `alice` and a JWT with `sub` `alice` are two owners), or nobody's
/// (anonymous), and what the credential that opened it grants. A session id presented by
/// anyone else, or by a credential of the same principal that grants less, is treated as
/// unknown: what the session holds (remembered answers, streams, requests to the client)
/// was made under the wider grant.
#[derive(Debug, Clone, Default)]
pub struct Owner {
    principal: Option<Arc<str>>,
    access: Access,
}

impl Owner {
    /// The owner of sessions opened by the client `admission` admitted, with its access.
    pub fn of(admission: &Admission) -> Self {
        Self::new(&admission.identity, admission.access.clone())
    }

    /// The owner of sessions opened by `identity` with a credential granting `access`.
    pub fn new(identity: &Identity, access: Access) -> Self {
        Self {
            principal: identity
                .is_authenticated()
                .then(|| identity.shared_principal().clone()),
            access,
        }
    }

    /// Whether the client `requester` may use a session of this owner: the same principal,
    /// with a credential that grants at least what the session's did.
    pub fn admits(&self, requester: &Owner) -> bool {
        self.principal == requester.principal && requester.access.covers(&self.access)
    }
}

/// What the perimeter established about an admitted client: who it is, where it connects
/// from, and the trace id its requests default to.
#[derive(Debug, Clone)]
pub struct Admission {
    /// Who the client is.
    pub identity: Identity,
    /// The client's address: the peer's, or behind a trusted proxy the one it forwarded.
    pub peer: Option<IpAddr>,
    /// The client's `User-Agent`, for the access log.
    pub user_agent: Option<Arc<str>>,
    /// From the request's `traceparent` or `X-Trace-Id`, else made up.
    pub trace_id: Arc<str>,
    /// What the client may use.
    pub access: Access,
    /// When its credential stops being valid (a JWT's `exp`): a WebSocket session ends then.
    pub expires: Option<std::time::SystemTime>,
}

impl Admission {
    /// An anonymous client with a fresh trace id (sessions made without an HTTP request:
    /// tests, benches).
    #[cfg(any(test, feature = "testing"))]
    pub fn anonymous() -> Self {
        Self {
            identity: Identity::anonymous(),
            peer: None,
            user_agent: None,
            trace_id: crate::observe::trace::generate(),
            access: Access::default(),
            expires: None,
        }
    }
}

impl crate::observe::access::Requester for Admission {
    fn peer(&self) -> Option<IpAddr> {
        self.peer
    }

    fn user_agent(&self) -> Option<&str> {
        self.user_agent.as_deref()
    }

    fn subject(&self) -> &str {
        self.identity.subject()
    }

    fn trace_id(&self) -> &str {
        &self.trace_id
    }
}

/// Whether a request asks for a WebSocket (`Upgrade: websocket`).
pub fn is_websocket_upgrade(headers: &actix_web::http::header::HeaderMap) -> bool {
    headers
        .get(actix_web::http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// The subprotocols a WebSocket upgrade offers (`Sec-WebSocket-Protocol`, every header and
/// comma-separated entry, trimmed), in the client's order: where browsers put what they
/// cannot send as headers (`mcp.auth.*`, `mcp.session.*`, `mcp.version.*`).
pub fn offered_subprotocols(
    headers: &actix_web::http::header::HeaderMap,
) -> impl Iterator<Item = &str> {
    headers
        .get_all(actix_web::http::header::SEC_WEBSOCKET_PROTOCOL)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
}

/// Checks an HTTP request to the MCP endpoint, and establishes who sent it.
///
/// # Errors
/// The [`Refusal`] to answer with.
pub fn admit(perimeter: &Perimeter, req: &HttpRequest) -> Result<Admission, Refusal> {
    let headers = req.headers();
    perimeter.origin.check(headers)?;
    let (identity, access, expires) = authorize(perimeter, req)?;
    let header = |name: &HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    let trace_id = header(&TRACEPARENT)
        .and_then(crate::protocol::traceparent::trace_id)
        .or_else(|| header(&X_TRACE_ID).and_then(crate::observe::trace::of_header))
        .map_or_else(crate::observe::trace::generate, Arc::from);
    Ok(Admission {
        identity,
        access,
        peer: perimeter
            .proxies
            .client_address(req.peer_addr().map(|addr| addr.ip()), headers),
        user_agent: headers
            .get(USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(|ua| Arc::from(&ua[..ua.len().min(256)])),
        trace_id,
        expires,
    })
}

/// Who the client is, what it may use, and until when.
fn authorize(
    perimeter: &Perimeter,
    req: &HttpRequest,
) -> Result<(Identity, Access, Option<std::time::SystemTime>), Refusal> {
    let (identity, expires) = perimeter.auth.authenticate(req)?;
    match perimeter.policies.access_for(&identity) {
        Some(access) => Ok((identity, access, expires)),
        None => {
            tracing::debug!(
                subject = identity.subject(),
                "refused: no policy applies to the client"
            );
            Err(perimeter.auth.no_policy_for(req, &identity))
        }
    }
}

/// Why a request was refused before reaching a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// `Origin` names a site that may not use this server (cross-site request).
    #[error("Forbidden: origin not allowed")]
    ForbiddenOrigin,
    /// `Host` is not a name this server answers to (DNS rebinding).
    #[error("Forbidden: host not allowed")]
    ForbiddenHost,
    /// `Host` is not of the form `host[:port]` (RFC 9110 §7.2): userinfo, a path, a port
    /// that is not a number.
    #[error("Bad Request: Host must be host[:port]")]
    BadHost,
    /// No credentials where they are required, or credentials that are not valid.
    #[error("Unauthorized: {}", .0.description)]
    Unauthorized(Challenge),
    /// Valid credentials that do not grant access to this server.
    #[error("Forbidden: {}", .0.description)]
    InsufficientScope(Challenge),
    /// The session cap is reached.
    #[error("Service unavailable: too many sessions")]
    TooManySessions,
    /// The client holds as many sessions as one IP address or identity may.
    #[error("Too many sessions from this {}: the limit is {limit}", .scope.as_str())]
    TooManySessionsFrom {
        /// Which limit.
        scope: ClientLimit,
        /// Its value.
        limit: usize,
    },
    /// The server is shutting down.
    #[error("Service unavailable: server shutting down")]
    ShuttingDown,
    /// A gateway upstream that starts a child at every session's `initialize` runs as many
    /// as it may (`max_children`).
    #[error("Service unavailable: upstream {upstream} runs {limit} children (max_children), retry later")]
    UpstreamFull {
        /// The upstream's name.
        upstream: String,
        /// Its `max_children`.
        limit: usize,
    },
    /// Sessions live in Redis (`cluster.sessions`) and Redis cannot be reached: a session
    /// this node does not hold cannot be found, nor a new one begun.
    #[error("Service unavailable: the session store cannot be reached, retry later")]
    SessionStoreUnavailable,
    /// A WebSocket session another node holds, and that node is alive (sessions in Redis):
    /// it is resumed there (or here, once that node is gone), never in two places.
    #[error("Service unavailable: the session is held by another node, retry (there, or here once that node is gone)")]
    SessionHeldElsewhere,
    /// A WebSocket session whose socket on this node did not let go of it within a second
    /// (its client stopped reading, so the socket, its writes blocked, no longer runs).
    #[error(
        "Service unavailable: the session's other connection does not let go of it, retry later"
    )]
    SessionHeldByStalledSocket,
    /// `MCP-Protocol-Version` names a version this server does not speak.
    #[error("Bad Request: unsupported MCP-Protocol-Version {0:?}")]
    UnsupportedProtocolVersion(String),
    /// A WebSocket resume offering an `mcp.version.*` pin other than the version its
    /// session negotiated (which it keeps).
    #[error("Bad Request: the session speaks protocol version {0}; resume it offering mcp.version.{0}, or no version")]
    ResumeVersionMismatch(&'static str),
    /// `Accept` lacks a media type the answer may need.
    #[error("Not Acceptable: the client must accept {0}")]
    NotAcceptable(&'static str),
    /// The body is not `application/json`.
    #[error("Unsupported Media Type: Content-Type must be application/json")]
    UnsupportedMediaType,
    /// The body is larger than `limits.max_message_bytes`.
    #[error("Payload Too Large: the body exceeds limits.max_message_bytes")]
    PayloadTooLarge,
    /// The body would pass `limits.max_partial_bytes`, the budget of partly received
    /// messages of all connections.
    #[error("Payload Too Large: the server holds too many partly received messages; retry later")]
    PartialBudget,
    /// The body did not arrive within `limits.partial_timeout_ms` of the headers.
    #[error("Request Timeout: the body did not arrive within limits.partial_timeout_ms")]
    BodyDeadline,
    /// The body could not be read to its end (the client stopped sending, or a bad encoding).
    #[error("Bad Request: the body could not be read")]
    BodyUnreadable,
    /// The body is not UTF-8 text.
    #[error("Parse error: the body is not UTF-8")]
    BodyNotText,
    /// A request other than `initialize` without `Mcp-Session-Id`.
    #[error("Bad Request: Mcp-Session-Id header is required")]
    SessionRequired,
    /// `Mcp-Session-Id` names no live session (unknown, ended, or reaped): re-initialize.
    #[error("Session not found")]
    SessionNotFound,
    /// `Last-Event-ID` asks for events the session no longer holds (or never had).
    #[error("Bad Request: Last-Event-ID is not resumable: its events are no longer held")]
    ResumeGone,
    /// `Last-Event-ID` is not an event id this server sends (`<stream>_<count>`, decimal).
    #[error("Bad Request: Last-Event-ID is not an event id of this server (<stream>_<count>)")]
    BadLastEventId,
    /// A method the endpoint does not serve.
    #[error("Method not allowed")]
    MethodNotAllowed,
    /// A WebSocket resume's `Mcp-Awaiting-Ids` is not a JSON array of at most 1024 request
    /// ids (strings and numbers).
    #[error("Bad Request: Mcp-Awaiting-Ids must be a JSON array of at most 1024 request ids (strings or numbers)")]
    BadAwaitingIds,
    /// A WebSocket upgrade of another version than 13 (RFC 6455 §4.4).
    #[error("Upgrade Required: Sec-WebSocket-Version must be 13")]
    WebSocketVersion,
    /// A WebSocket upgrade whose `Sec-WebSocket-Key` is not 16 bytes in base64 (RFC 6455
    /// §4.2.1).
    #[error("Bad Request: Sec-WebSocket-Key must be 16 bytes in base64")]
    BadWebSocketKey,
}

impl Refusal {
    /// The counter this refusal counts in, when a policy made it (origin, host, a limit);
    /// a client's mistake (a bad header, an unknown session) or a shutdown counts in none.
    pub fn rejection<'a>(&self, rejections: &'a Rejections) -> Option<&'a Counter> {
        match self {
            Self::ForbiddenOrigin => Some(&rejections.origin),
            Self::ForbiddenHost => Some(&rejections.host),
            Self::TooManySessions => Some(&rejections.session_cap),
            Self::UpstreamFull { .. } => Some(&rejections.upstream_children),
            Self::SessionStoreUnavailable => Some(&rejections.store_unavailable),
            Self::PayloadTooLarge => Some(&rejections.message_too_large),
            Self::PartialBudget => Some(&rejections.partial_budget),
            Self::BodyDeadline => Some(&rejections.partial_deadline),
            Self::Unauthorized(_) => Some(&rejections.unauthenticated),
            Self::InsufficientScope(_) => Some(&rejections.forbidden),
            Self::TooManySessionsFrom { scope, .. } => Some(match scope {
                ClientLimit::Ip => &rejections.ip_limit,
                ClientLimit::Identity => &rejections.identity_limit,
            }),
            Self::ShuttingDown
            | Self::UnsupportedProtocolVersion(_)
            | Self::ResumeVersionMismatch(_)
            | Self::NotAcceptable(_)
            | Self::UnsupportedMediaType
            | Self::BodyUnreadable
            | Self::BodyNotText
            | Self::SessionRequired
            | Self::SessionNotFound
            | Self::SessionHeldElsewhere
            | Self::SessionHeldByStalledSocket
            | Self::ResumeGone
            | Self::BadLastEventId
            | Self::BadAwaitingIds
            | Self::WebSocketVersion
            | Self::BadWebSocketKey
            | Self::BadHost
            | Self::MethodNotAllowed => None,
        }
    }

    /// The JSON-RPC code in the body.
    fn code(&self) -> i32 {
        match self {
            Self::BodyNotText => -32700,
            Self::SessionNotFound => -32001,
            _ => -32000,
        }
    }
}

impl ResponseError for Refusal {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::ForbiddenOrigin | Self::ForbiddenHost | Self::InsufficientScope(_) => {
                StatusCode::FORBIDDEN
            }
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::TooManySessionsFrom { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::TooManySessions
            | Self::ShuttingDown
            | Self::SessionStoreUnavailable
            | Self::SessionHeldElsewhere
            | Self::SessionHeldByStalledSocket
            | Self::UpstreamFull { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::UnsupportedProtocolVersion(_)
            | Self::ResumeVersionMismatch(_)
            | Self::BodyNotText
            | Self::BodyUnreadable
            | Self::SessionRequired
            | Self::ResumeGone
            | Self::BadLastEventId
            | Self::BadAwaitingIds
            | Self::BadWebSocketKey
            | Self::BadHost => StatusCode::BAD_REQUEST,
            Self::WebSocketVersion => StatusCode::UPGRADE_REQUIRED,
            Self::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::PayloadTooLarge | Self::PartialBudget => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyDeadline => StatusCode::REQUEST_TIMEOUT,
            Self::SessionNotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        match self {
            Self::TooManySessions
            | Self::ShuttingDown
            | Self::PartialBudget
            | Self::SessionStoreUnavailable
            | Self::SessionHeldElsewhere
            | Self::SessionHeldByStalledSocket => {
                response.insert_header(("Retry-After", "1"));
            }
            Self::WebSocketVersion => {
                response.insert_header((actix_web::http::header::SEC_WEBSOCKET_VERSION, "13"));
            }
            // The connection holds the rest of a body nobody reads: it is not reused.
            Self::BodyDeadline => {
                response.insert_header((actix_web::http::header::CONNECTION, "close"));
            }
            // A place comes back when one of the client's own sessions ends (a child when
            // any session of the upstream does).
            Self::TooManySessionsFrom { .. } | Self::UpstreamFull { .. } => {
                response.insert_header(("Retry-After", "5"));
            }
            Self::Unauthorized(challenge) | Self::InsufficientScope(challenge) => {
                response.insert_header((WWW_AUTHENTICATE, challenge.header()));
            }
            Self::MethodNotAllowed => {
                response.insert_header(("Allow", "GET, POST, DELETE"));
            }
            _ => {}
        }
        let mut error = json!({ "code": self.code(), "message": self.to_string() });
        if let Self::UnsupportedProtocolVersion(_) = self {
            let supported: Vec<&str> = ProtocolVersion::ALL.iter().map(|v| v.as_str()).collect();
            error["data"] = json!({ "supported": supported });
        }
        response
            .content_type("application/json")
            .body(json!({ "jsonrpc": "2.0", "id": null, "error": error }).to_string())
    }
}
