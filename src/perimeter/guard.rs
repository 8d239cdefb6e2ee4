//! The per-request half of the perimeter: checks a request needs its message for, run in the
//! session core before the request is routed, each refusal with an error code of its own
//! (`mcp::Error`). Whatever a check needs across requests (token buckets, nonce caches) is
//! bounded and lives here, shared by all sessions of the server.
//!
//! Today it checks the client's own method allow-list (its policies, see `policy`) and
//! request signatures ([`signature`](super::signature)) for the identities that must sign;
//! server-wide method allow-lists and per-identity rate limits come here too.

use super::signature::{Passed, Signatures};
use super::Admission;
use crate::config::Settings;
use crate::mcp::Error;
use crate::metrics::Metrics;
use serde_json::value::RawValue;

/// See the module docs.
#[derive(Debug, Default)]
pub struct RequestGuard {
    /// `None` when no identity must sign.
    signatures: Option<Signatures>,
}

impl RequestGuard {
    /// The guard the settings ask for.
    pub fn new(settings: &Settings) -> Self {
        Self {
            signatures: Signatures::new(settings),
        }
    }

    /// Whether the session of the client admitted as `admission` needs every request's
    /// params raw (exactly as sent), which the decoder then keeps for every method: a
    /// signature covers them. Asked once per session.
    pub fn needs_raw_params(&self, admission: &Admission) -> bool {
        self.signatures
            .as_ref()
            .is_some_and(|signatures| signatures.requires(&admission.identity))
    }

    /// Whether the client admitted as `admission` may send this request now. `params` are
    /// the raw params when the decoder kept them raw (every method but `tools/call`, and
    /// every method for sessions that [need them raw](Self::needs_raw_params)).
    ///
    /// # Errors
    /// The error to answer the request with; the request does not run.
    pub fn check(
        &self,
        admission: &Admission,
        method: &str,
        params: Option<&RawValue>,
        metrics: &Metrics,
    ) -> Result<Passed, Error> {
        // A method the client's policies do not allow is one it does not know of.
        admission.access.check_method(method)?;
        match &self.signatures {
            None => Ok(Passed::default()),
            Some(signatures) => signatures.check(&admission.identity, method, params, metrics),
        }
    }
}
