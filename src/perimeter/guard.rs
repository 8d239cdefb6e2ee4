//! The per-request half of the perimeter: checks a request needs its message for, run in the
//! session core before the request is routed, each refusal with an error code of its own
//! (`mcp::Error`). Whatever a check needs across requests (token buckets, nonce caches) is
//! bounded and lives here, shared by all sessions of the server.
//!
//! Today it checks the client's own method allow-list (its policies, see `policy`);
//! server-wide method allow-lists, per-identity rate limits and request signatures come here.

use super::Admission;
use crate::config::Settings;
use crate::mcp::Error;
use serde_json::value::RawValue;

/// See the module docs.
#[derive(Debug, Default)]
pub struct RequestGuard {}

impl RequestGuard {
    /// The guard the settings ask for.
    pub fn new(_settings: &Settings) -> Self {
        Self {}
    }

    /// Whether the client admitted as `admission` may send this request now. `params` are
    /// the raw params when the decoder kept them raw (every method but `tools/call`).
    ///
    /// # Errors
    /// The error to answer the request with; the request does not run.
    pub fn check(
        &self,
        admission: &Admission,
        method: &str,
        _params: Option<&RawValue>,
    ) -> Result<(), Error> {
        // A method the client's policies do not allow is one it does not know of.
        admission.access.check_method(method)?;
        Ok(())
    }
}
