//! Ed25519 request signatures, required of the identities given public keys
//! (`signatures.public_keys`, by subject).
//!
//! Such a client puts in each request's `params._meta.signature` an object
//! `{"timestamp": <ms since the Unix epoch>, "nonce": "<1 to 128 characters>", "value":
//! "<base64 of the 64-byte signature>"}`, signing the UTF-8 bytes of the canonical JSON
//! (RFC 8785, JCS) of the array `["mcp-ws-request-v1", <method>, <params>, <timestamp>,
//! <nonce>]`, where `<params>` are the request's params without `_meta.signature` (and
//! without `_meta` when nothing else is left in it). A request is refused, and does not
//! run, when its signature is missing or malformed, its timestamp is further from the
//! server's clock than `signatures.max_skew_ms`, its nonce was seen before, or it does not
//! verify with any of the identity's keys (`verify_strict`: no malleable signatures).
//!
//! Nonces are kept for twice the skew (an older request is refused for its timestamp
//! anyway), in a bounded cache of this node, checked synchronously. Each identity with keys
//! has an even share of `signatures.max_nonces`: one that spends its share faster than its
//! nonces expire is refused (`busy`) while the others sign on. Nonces go by the bare subject
//! the keys are configured for, so a request signed for one proof of that subject cannot be
//! replayed under another. With Redis, a request
//! that runs in a worker also claims its nonce there before its work starts, so a replay
//! on another node is refused as well ([`Passed::guard_work`]); requests answered inline
//! (lists, `ping`) are checked against the node's own cache only.

use crate::cluster::store::{Key, NonceCache, NonceRefused};
use crate::cluster::Cluster;
use crate::config::{parse_public_key, Settings};
use crate::context::Identity;
use crate::observe::metrics::Metrics;
use crate::protocol::mcp::{Error, SignatureProblem};
use crate::worker::Work;
use base64::Engine;
use ed25519_dalek::{Signature, VerifyingKey};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The first element of the signed array: what the signature is for.
pub const CONTEXT: &str = "mcp-ws-request-v1";

/// Longest nonce accepted, in characters.
pub const MAX_NONCE_CHARS: usize = 128;

/// The bytes an identity signs for a request (see the module docs).
pub fn canonical_request(
    method: &str,
    params: &Map<String, Value>,
    timestamp: u64,
    nonce: &str,
) -> Option<Vec<u8>> {
    serde_jcs::to_vec(&(CONTEXT, method, params, timestamp, nonce)).ok()
}

/// `params._meta.signature`.
#[derive(Deserialize)]
struct SignatureMeta {
    timestamp: u64,
    nonce: String,
    value: String,
}

/// See the module docs.
pub struct Signatures {
    keys: HashMap<String, Vec<VerifyingKey>>,
    max_skew_ms: u64,
    /// Shared with the cluster, which writes them to Redis again when it lost them.
    nonces: Arc<NonceCache>,
    /// Whether nonces are also claimed in Redis.
    shared_nonces: bool,
}

impl std::fmt::Debug for Signatures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signatures")
            .field("identities", &self.keys.keys().collect::<Vec<_>>())
            .field("max_skew_ms", &self.max_skew_ms)
            .finish_non_exhaustive()
    }
}

/// A request the guard let through, with what it must still do before its work runs.
#[derive(Debug, Default)]
#[must_use]
pub struct Passed {
    /// The nonce to claim in Redis (a signed request, with Redis configured), and for how
    /// long Redis is to hold it.
    shared_nonce: Option<(Key, Duration)>,
}

impl Signatures {
    /// `None` when no identity has keys (no request needs a signature).
    pub fn new(settings: &Settings) -> Option<Self> {
        let config = &settings.signatures;
        if config.public_keys.is_empty() {
            return None;
        }
        let keys = config
            .public_keys
            .iter()
            .map(|(subject, keys)| {
                // Checked by `Settings::validate`.
                let keys = keys.iter().filter_map(|k| parse_public_key(k)).collect();
                (subject.clone(), keys)
            })
            .collect();
        Some(Self {
            keys,
            max_skew_ms: config.max_skew_ms,
            nonces: Arc::new(NonceCache::new(config.max_nonces, config.public_keys.len())),
            shared_nonces: !settings.redis.url.is_empty(),
        })
    }

    /// The node's nonces, as the cluster keeps them in Redis.
    pub(crate) fn nonces(&self) -> &Arc<NonceCache> {
        &self.nonces
    }

    /// Whether `identity`'s requests must be signed.
    pub fn requires(&self, identity: &Identity) -> bool {
        self.keys.contains_key(identity.subject())
    }

    /// Checks the signature of a request of `identity` (see the module docs).
    pub fn check(
        &self,
        identity: &Identity,
        method: &str,
        params: Option<&RawValue>,
        metrics: &Metrics,
    ) -> Result<Passed, Error> {
        let Some(keys) = self.keys.get(identity.subject()) else {
            return Ok(Passed::default());
        };
        self.verify(identity, keys, method, params)
            .map_err(|reason| {
                metrics.rejections.signature.inc();
                tracing::debug!(
                    subject = identity.subject(),
                    reason = reason.as_str(),
                    "signature refused"
                );
                Error::SignatureRefused { reason }
            })
    }

    fn verify(
        &self,
        identity: &Identity,
        keys: &[VerifyingKey],
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<Passed, SignatureProblem> {
        let params = params.ok_or(SignatureProblem::Missing)?;
        let mut params: Map<String, Value> =
            serde_json::from_str(params.get()).map_err(|_| SignatureProblem::Malformed)?;
        let signature = take_signature(&mut params)?;
        if signature.nonce.is_empty() || signature.nonce.chars().count() > MAX_NONCE_CHARS {
            return Err(SignatureProblem::Malformed);
        }
        let value: [u8; 64] = base64::engine::general_purpose::STANDARD
            .decode(&signature.value)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or(SignatureProblem::Malformed)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        if now.abs_diff(signature.timestamp) > self.max_skew_ms {
            return Err(SignatureProblem::Skew);
        }
        let message = canonical_request(method, &params, signature.timestamp, &signature.nonce)
            .ok_or(SignatureProblem::Malformed)?;
        let value = Signature::from_bytes(&value);
        if !keys
            .iter()
            .any(|key| key.verify_strict(&message, &value).is_ok())
        {
            return Err(SignatureProblem::Invalid);
        }
        // In Redis, from the request's own time: twice the skew after it, so that another
        // node whose clock is behind this one's (by up to the skew) still finds the nonce
        // while it takes the timestamp. Counted from now, a request dated ahead was taken
        // by such a node after its nonce was gone (attack run 51, N5).
        let shared_lifetime = Duration::from_millis(
            (signature
                .timestamp
                .saturating_add(self.max_skew_ms.saturating_mul(2)))
            .saturating_sub(now),
        );
        // Only a verified request spends its nonce: nobody can burn another's. This node
        // holds it for twice the skew from now (it takes the timestamp for the skew at most),
        // or as long as Redis must if longer: its nonces are what it writes to Redis again
        // after Redis lost them, and a shorter life there reopened N5's window for a request
        // dated ahead (review 55 #4).
        let nonce = nonce_key(identity, &signature.nonce);
        self.nonces
            .claim(
                identity.subject(),
                &nonce,
                self.nonce_lifetime().max(shared_lifetime),
            )
            .map_err(|refused| match refused {
                NonceRefused::Replayed => SignatureProblem::Replayed,
                NonceRefused::Full => SignatureProblem::Busy,
            })?;
        Ok(Passed {
            shared_nonce: self.shared_nonces.then_some((nonce, shared_lifetime)),
        })
    }

    fn nonce_lifetime(&self) -> Duration {
        Duration::from_millis(self.max_skew_ms.saturating_mul(2))
    }
}

/// Removes `_meta.signature` (and `_meta` if that empties it) and reads it.
fn take_signature(params: &mut Map<String, Value>) -> Result<SignatureMeta, SignatureProblem> {
    let Some(Value::Object(meta)) = params.get_mut("_meta") else {
        return Err(SignatureProblem::Missing);
    };
    let signature = meta.remove("signature").ok_or(SignatureProblem::Missing)?;
    if meta.is_empty() {
        params.remove("_meta");
    }
    serde_json::from_value(signature).map_err(|_| SignatureProblem::Malformed)
}

fn nonce_key(identity: &Identity, nonce: &str) -> Key {
    let mut digest = Sha256::new();
    for part in ["nonce", identity.subject(), nonce] {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    digest.finalize().into()
}

impl Passed {
    /// Wraps a request's work with what must pass before it runs: its nonce claimed in
    /// Redis, so that no node has run it. With Redis away the node's own check stands.
    pub fn guard_work(self, cluster: &Arc<Cluster>, work: Work) -> Work {
        let Some((nonce, lifetime)) = self.shared_nonce else {
            return work;
        };
        let cluster = cluster.clone();
        Work::new(move |id, ctx| {
            Box::pin(async move {
                if let Some(redis) = cluster.store.redis() {
                    match redis.claim_nonce(&cluster.metrics, &nonce, lifetime).await {
                        Some(true) => {}
                        Some(false) => {
                            cluster.metrics.rejections.signature.inc();
                            return Err(Error::SignatureRefused {
                                reason: SignatureProblem::Replayed,
                            });
                        }
                        // Redis could not be asked: the node's own check stands, and the
                        // nonce is written to Redis once it answers, so that the other
                        // nodes refuse the request from then on (attack run 51, N1: they
                        // ran it for as long as the nonce lived).
                        None => cluster.store.strand_nonce(nonce, Instant::now() + lifetime),
                    }
                }
                work.start(id, ctx).await
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn settings(key: &SigningKey) -> Settings {
        let mut settings = Settings::default();
        settings.signatures.public_keys.insert(
            "anonymous".into(),
            vec![base64::engine::general_purpose::STANDARD.encode(key.verifying_key().as_bytes())],
        );
        settings
    }

    fn now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_millis() as u64
    }

    /// Signs `params` the way the module docs tell clients to, without the module's helpers.
    fn sign(key: &SigningKey, method: &str, params: Value, timestamp: u64, nonce: &str) -> String {
        let message = serde_jcs::to_vec(&serde_json::json!([
            CONTEXT, method, params, timestamp, nonce
        ]))
        .expect("jcs");
        let value = base64::engine::general_purpose::STANDARD.encode(key.sign(&message).to_bytes());
        let mut params = params;
        let meta = params
            .as_object_mut()
            .expect("object")
            .entry("_meta")
            .or_insert_with(|| serde_json::json!({}));
        meta["signature"] =
            serde_json::json!({"timestamp": timestamp, "nonce": nonce, "value": value});
        params.to_string()
    }

    fn check(signatures: &Signatures, params: &str) -> Result<Passed, Error> {
        let raw = RawValue::from_string(params.to_owned()).expect("json");
        signatures.check(
            &Identity::anonymous(),
            "tools/list",
            Some(&raw),
            &Metrics::default(),
        )
    }

    fn reason(outcome: Result<Passed, Error>) -> Option<&'static str> {
        match outcome {
            Err(Error::SignatureRefused { reason }) => Some(reason.as_str()),
            Err(other) => panic!("{other:?}"),
            Ok(_) => None,
        }
    }

    /// Signatures of `key` with a Redis configured (never reached: a claim there is only
    /// prepared), and their skew in ms.
    fn with_redis(key: &SigningKey) -> (Signatures, u64) {
        let mut settings = settings(key);
        settings.redis.url = "redis://127.0.0.1:1/".into();
        let signatures = Signatures::new(&settings).expect("configured");
        (signatures, settings.signatures.max_skew_ms)
    }

    /// Redis holds a nonce until twice the skew after the request's own time, so that a
    /// node whose clock is behind (by up to the skew) still finds it while it would take the
    /// timestamp: a request dated ahead lives longer there, one dated behind shorter.
    #[test]
    fn a_nonce_lives_in_redis_from_its_requests_time() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let (signatures, skew) = with_redis(&key);
        let params = serde_json::json!({"cursor": "x"});
        for (offset, expected) in [(0, 2 * skew), (skew - 1000, 3 * skew - 1000)] {
            let ahead = sign(
                &key,
                "tools/list",
                params.clone(),
                now() + offset,
                &format!("n{offset}"),
            );
            let passed = check(&signatures, &ahead).expect("passes");
            let (_, lifetime) = passed.shared_nonce.expect("claimed in Redis");
            let lifetime = lifetime.as_millis() as u64;
            assert!(
                lifetime <= expected && lifetime + 1000 > expected,
                "{offset}: {lifetime} ms, expected {expected}"
            );
        }
        let behind = sign(&key, "tools/list", params, now() - (skew - 1000), "behind");
        let passed = check(&signatures, &behind).expect("passes");
        let (_, lifetime) = passed.shared_nonce.expect("claimed in Redis");
        assert!(lifetime.as_millis() as u64 <= skew + 1000, "{lifetime:?}");
    }

    /// What the node holds of a nonce is what it writes to Redis again after Redis lost it:
    /// as long as Redis must hold it for a request dated ahead (review 55 #4), and twice the
    /// skew for one dated behind (the node takes the timestamp for up to the skew).
    #[test]
    fn a_nonce_the_node_holds_lives_as_long_as_redis_must_hold_it_or_twice_the_skew() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let (signatures, skew) = with_redis(&key);
        let params = serde_json::json!({"cursor": "x"});
        for (offset, expected) in [
            (skew as i64 - 1000, 3 * skew - 1000),
            (1000 - skew as i64, 2 * skew),
        ] {
            let nonce = format!("n{offset}");
            let signed = sign(
                &key,
                "tools/list",
                params.clone(),
                now().saturating_add_signed(offset),
                &nonce,
            );
            let _passed = check(&signatures, &signed).expect("passes");
            let held = nonce_key(&Identity::anonymous(), &nonce);
            let (_, expires) = signatures
                .nonces()
                .live()
                .into_iter()
                .find(|(key, _)| *key == held)
                .expect("held");
            let left = expires.duration_since(Instant::now()).as_millis() as u64;
            assert!(
                left <= expected && left + 1000 > expected,
                "{offset}: {left} ms, expected {expected}"
            );
        }
    }

    #[test]
    fn signed_requests_pass_once_and_others_are_refused_with_their_reason() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let signatures = Signatures::new(&settings(&key)).expect("configured");
        let params = serde_json::json!({"cursor": "x", "_meta": {"progressToken": 1}});
        let signed = sign(&key, "tools/list", params.clone(), now(), "n1");
        assert_eq!(reason(check(&signatures, &signed)), None);
        assert_eq!(reason(check(&signatures, &signed)), Some("replayed"));
        let late = sign(&key, "tools/list", params.clone(), now() - 61_000, "n2");
        assert_eq!(reason(check(&signatures, &late)), Some("skew"));
        let other = SigningKey::from_bytes(&[8; 32]);
        let forged = sign(&other, "tools/list", params.clone(), now(), "n3");
        assert_eq!(reason(check(&signatures, &forged)), Some("invalid"));
        let tampered = sign(&key, "tools/list", params, now(), "n4").replace("\"x\"", "\"y\"");
        assert_eq!(reason(check(&signatures, &tampered)), Some("invalid"));
        assert_eq!(
            reason(check(&signatures, r#"{"cursor":"x"}"#)),
            Some("missing")
        );
        assert_eq!(
            reason(check(
                &signatures,
                r#"{"_meta":{"signature":{"nonce":"n"}}}"#
            )),
            Some("malformed")
        );
        // Without other _meta members, _meta is left out of what is signed.
        let bare = sign(&key, "tools/list", serde_json::json!({}), now(), "n5");
        assert_eq!(reason(check(&signatures, &bare)), None);
    }

    #[test]
    fn identities_without_keys_are_not_checked() {
        let key = SigningKey::from_bytes(&[7; 32]);
        let signatures = Signatures::new(&settings(&key)).expect("configured");
        assert!(signatures.requires(&Identity::anonymous()));
        let alice = Identity::authenticated("alice", Vec::new());
        assert!(!signatures.requires(&alice));
        assert!(signatures
            .check(&alice, "ping", None, &Metrics::default())
            .is_ok());
        assert!(Signatures::new(&Settings::default()).is_none());
    }
}
