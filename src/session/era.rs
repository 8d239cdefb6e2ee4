//! Which era a request belongs to, decided once per request from what it carries: a
//! session-era request (2024-11-05 … 2025-11-25) runs with what the session's `initialize`
//! negotiated; a stateless one (2026-07-28) with what its own `_meta` established. Every
//! handler takes an [`Era`] and asks it, instead of each re-deciding from an `Option`.

use super::shape::StatelessRequest;

/// See the module docs.
#[derive(Debug)]
pub(crate) enum Era {
    /// A session-era request: the session's negotiated version, capabilities and client.
    Session,
    /// A stateless 2026-07-28 request: what its `_meta` established.
    Stateless(StatelessRequest),
}

impl Era {
    /// What a stateless request's `_meta` established; `None` for a session-era request.
    pub(crate) fn stateless(&self) -> Option<&StatelessRequest> {
        match self {
            Self::Session => None,
            Self::Stateless(request) => Some(request),
        }
    }
}
