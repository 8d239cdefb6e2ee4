//! The per-request half of the perimeter: checks a request needs its message for, run in the
//! session core before the request is routed, each refusal with an error code of its own
//! (`mcp::Error`). Whatever a check needs across requests (token buckets, nonce caches) is
//! bounded and lives here, shared by all sessions of the server.
//!
//! It checks, in this order: the rate per identity ([`RateLimiter`]), the server's method
//! allow-list, the client's own method allow-list (its policies, see `policy`), and request
//! signatures ([`signature`](super::signature)) for the identities that must sign. It holds
//! the limits on frames too ([`FrameLimits`], for the session's decoder). A check that is
//! off costs a branch: no clock read, no lock, no allocation.

use super::rate::{Holder, RateLimiter, SessionBucket};
use super::signature::{Passed, Signatures};
use super::Admission;
use crate::config::Settings;
use crate::observe::metrics::Metrics;
use crate::protocol::jsonrpc::FrameLimits;
use crate::protocol::mcp::Error;
use serde_json::value::RawValue;
use std::collections::HashSet;
use std::time::Instant;

use crate::FastHash;

/// See the module docs.
#[derive(Debug)]
pub struct RequestGuard {
    frame_limits: FrameLimits,
    rate: Option<RateLimiter>,
    /// `limits.allowed_methods`, when set.
    allowed_methods: Option<HashSet<Box<str>, FastHash>>,
    /// `None` when no identity must sign.
    signatures: Option<Signatures>,
}

impl RequestGuard {
    /// The guard the settings ask for.
    pub fn new(settings: &Settings) -> Self {
        let limits = &settings.limits;
        Self {
            frame_limits: FrameLimits::new(limits.max_batch_len)
                .max_depth(limits.max_json_depth)
                .max_string_bytes(limits.max_string_bytes)
                .max_array_len(limits.max_array_len)
                .max_object_members(limits.max_object_members),
            rate: RateLimiter::new(&limits.rate),
            allowed_methods: (!limits.allowed_methods.is_empty()).then(|| {
                limits
                    .allowed_methods
                    .iter()
                    .map(|method| Box::from(method.as_str()))
                    .collect()
            }),
            signatures: Signatures::new(settings),
        }
    }

    /// The node's signature nonces, when some identity must sign.
    pub(crate) fn nonces(&self) -> Option<&std::sync::Arc<crate::cluster::store::NonceCache>> {
        self.signatures.as_ref().map(Signatures::nonces)
    }

    /// What a frame may hold, for the decoder.
    pub fn frame_limits(&self) -> &FrameLimits {
        &self.frame_limits
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
    /// The rate is checked first, at `now` (the request's arrival), from the session's
    /// `bucket`: a refused method still costs its sender a token.
    ///
    /// # Errors
    /// The error to answer the request with; the request does not run.
    pub fn check(
        &self,
        admission: &Admission,
        method: &str,
        params: Option<&RawValue>,
        metrics: &Metrics,
        now: Instant,
        bucket: &SessionBucket,
    ) -> Result<Passed, Error> {
        if let Some(rate) = &self.rate {
            let identity = &admission.identity;
            let holder = if identity.is_authenticated() {
                Holder::Subject(identity.principal())
            } else {
                // A host may pick any address of its IPv6 /64: all of them are one.
                Holder::Address(admission.peer.map(super::connections::client_key))
            };
            if let Err(wait) = rate.take(bucket, holder, now) {
                metrics.rejections.rate.inc();
                return Err(Error::RateLimited {
                    // Rounded up: a client that waits exactly this long finds a token.
                    retry_after_ms: u64::try_from(wait.as_micros().div_ceil(1000))
                        .unwrap_or(u64::MAX),
                });
            }
        }
        if let Some(allowed) = &self.allowed_methods {
            if !allowed.contains(method) {
                metrics.rejections.method_not_allowed.inc();
                return Err(Error::MethodNotAllowed {
                    method: method.to_owned(),
                });
            }
        }
        // A method the client's policies do not allow is one it does not know of.
        admission.access.check_method(method)?;
        match &self.signatures {
            None => Ok(Passed::default()),
            Some(signatures) => signatures.check(&admission.identity, method, params, metrics),
        }
    }
}
