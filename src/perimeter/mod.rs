//! The perimeter: everything checked on an HTTP request to the MCP endpoint before a session
//! exists (a refused client costs no session, no worker and no memory beyond the request),
//! and the one place where each refusal becomes an HTTP answer.
//!
//! Today: the Origin/Host policy ([`origin`]) and the session cap.

pub mod origin;

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};

pub use origin::OriginPolicy;

/// Why a request was refused before reaching a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// `Origin` names a site that may not use this server (cross-site request).
    #[error("origin not allowed")]
    ForbiddenOrigin,
    /// `Host` is not a name this server answers to (DNS rebinding).
    #[error("host not allowed")]
    ForbiddenHost,
    /// The session cap is reached.
    #[error("too many sessions")]
    TooManySessions,
    /// The server is shutting down.
    #[error("server shutting down")]
    ShuttingDown,
}

impl ResponseError for Refusal {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::ForbiddenOrigin | Self::ForbiddenHost => StatusCode::FORBIDDEN,
            Self::TooManySessions | Self::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        if self.status_code() == StatusCode::SERVICE_UNAVAILABLE {
            response.insert_header(("Retry-After", "1"));
        }
        response.content_type("text/plain").body(self.to_string())
    }
}
