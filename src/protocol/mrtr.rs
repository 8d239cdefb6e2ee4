//! Multi round-trip requests (MCP 2026-07-28): the `requestState` a server hands out with an
//! `InputRequiredResult` and gets back with the client's `inputResponses`.
//!
//! The state is opaque to the client but must not be trusted: it carries what is needed to
//! run the request again on any node (the answers gathered in earlier rounds, which asks are
//! outstanding), and it is bound to the request it was issued for (method, target, a digest of
//! the arguments, the identity) and to an expiry, all under an HMAC-SHA256 tag with the
//! server's key (`mrtr.state_key`, the same on every node; a random key per process when
//! unset). A state that was altered, issued for another request or identity, or has expired
//! is refused with -32602; the tool does not run. The answers it carries are the client's,
//! as those of `inputResponses` are (a client may as well send every answer again without
//! the state): the tag keeps a state to its request, it does not make answers more true.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

type HmacSha256 = Hmac<Sha256>;

/// Signs and checks request states.
#[derive(Clone)]
pub struct StateKey {
    key: [u8; 32],
    ttl: Duration,
}

impl std::fmt::Debug for StateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself.
        f.debug_struct("StateKey").field("ttl", &self.ttl).finish()
    }
}

/// What a request state binds and carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestState {
    /// The request it belongs to.
    #[serde(flatten)]
    pub binding: Binding,
    /// The answers of earlier rounds, by key.
    #[serde(rename = "r", default)]
    pub responses: Map<String, Value>,
    /// The keys asked in the round that issued this state.
    #[serde(rename = "o", default)]
    pub outstanding: Vec<String>,
    /// Expiry, in milliseconds since the Unix epoch.
    #[serde(rename = "e")]
    pub expires_ms: u64,
}

/// The request a state was issued for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    /// `tools/call`, `prompts/get` or `resources/read`.
    #[serde(rename = "m")]
    pub method: String,
    /// The tool or prompt name, or the resource URI.
    #[serde(rename = "t")]
    pub target: String,
    /// SHA-256 of the arguments' JSON, hex.
    #[serde(rename = "a")]
    pub arguments: String,
    /// The identity's subject.
    #[serde(rename = "s")]
    pub subject: String,
}

impl Binding {
    /// The binding of a request: its method, target, arguments (raw JSON) and identity. The
    /// arguments are digested in a canonical form (keys sorted), so a client that sends the
    /// same arguments in another order retries the same request. Arguments that do not
    /// parse as a value (nested past serde_json's 128 levels, where `limits.max_json_depth`
    /// lets them through) are digested as their text, after a mark no canonical form begins
    /// with: bound to exactly that text. (They were digested as `null`: every such set of
    /// arguments had one digest, and a state issued for one was taken for any other.)
    pub fn new(method: &str, target: &str, arguments: Option<&str>, subject: &str) -> Self {
        let text = arguments.unwrap_or("{}");
        let digest = match serde_json::from_str::<Value>(text) {
            Ok(value) => {
                let mut canonical = String::new();
                write_canonical(&value, &mut canonical);
                Sha256::digest(canonical.as_bytes())
            }
            Err(_) => {
                let mut raw = Sha256::new();
                raw.update(b"\0raw\0");
                raw.update(text.as_bytes());
                raw.finalize()
            }
        };
        Self {
            method: method.to_owned(),
            target: target.to_owned(),
            arguments: data_encoding::HEXLOWER.encode(&digest),
            subject: subject.to_owned(),
        }
    }
}

/// What a [`Binding`] is made of, kept until one is needed: only a request that carries a
/// `requestState`, or whose handler asks for input, pays for the digest. Every 2026-07-28
/// request that could ask keeps its parts, so they are copied into one allocation.
pub struct BindingParts {
    /// `tools/call`, `prompts/get` or `resources/read`.
    method: &'static str,
    /// The tool or prompt name (or the resource URI), the arguments' raw JSON if any, and
    /// the identity's subject, one after the other.
    text: String,
    target_end: usize,
    arguments_end: Option<usize>,
}

impl BindingParts {
    /// The parts of a request of `method` on `target` (a name or a URI) with `arguments`
    /// (raw JSON), by the identity whose subject is `subject`.
    pub fn new(method: &'static str, target: &str, arguments: Option<&str>, subject: &str) -> Self {
        let mut text =
            String::with_capacity(target.len() + arguments.map_or(0, str::len) + subject.len());
        text.push_str(target);
        let target_end = text.len();
        let arguments_end = arguments.map(|arguments| {
            text.push_str(arguments);
            text.len()
        });
        text.push_str(subject);
        Self {
            method,
            text,
            target_end,
            arguments_end,
        }
    }

    /// The bytes of the request's target and arguments: at the least what its next round
    /// carries besides its `requestState`.
    pub fn retry_bytes(&self) -> usize {
        self.arguments_end.unwrap_or(self.target_end)
    }

    /// The binding these parts describe.
    pub fn binding(&self) -> Binding {
        let (arguments, subject_start) = match self.arguments_end {
            Some(end) => (Some(&self.text[self.target_end..end]), end),
            None => (None, self.target_end),
        };
        Binding::new(
            self.method,
            &self.text[..self.target_end],
            arguments,
            &self.text[subject_start..],
        )
    }
}

/// Why a state was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Not a state this server issued, or altered since.
    #[error("requestState is not valid: it was not issued by this server or was altered")]
    Invalid,
    /// Issued for another request (method, target, arguments or identity).
    #[error("requestState belongs to another request")]
    Mismatch,
    /// Past its expiry.
    #[error("requestState has expired; send the request again without it")]
    Expired,
}

impl StateKey {
    /// A key from configuration (any length, hashed to 32 bytes), or a random one.
    pub fn new(configured: Option<&str>, ttl: Duration) -> Self {
        let key = match configured {
            Some(secret) => Sha256::digest(secret.as_bytes()).into(),
            None => {
                let mut key = [0u8; 32];
                getrandom::fill(&mut key).expect("the OS random number generator works");
                key
            }
        };
        Self { key, ttl }
    }

    /// Issues a state for a request that asked `outstanding` and had gathered `responses`.
    pub fn issue(
        &self,
        binding: Binding,
        responses: Map<String, Value>,
        outstanding: Vec<String>,
    ) -> String {
        let state = RequestState {
            binding,
            responses,
            outstanding,
            expires_ms: now_ms().saturating_add(self.ttl.as_millis() as u64),
        };
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&state).unwrap_or_default());
        let tag = URL_SAFE_NO_PAD.encode(self.tag(payload.as_bytes()));
        format!("{payload}.{tag}")
    }

    /// Checks a state handed back for the request bound as `binding`.
    ///
    /// # Errors
    /// See [`StateError`].
    pub fn verify(&self, token: &str, binding: &Binding) -> Result<RequestState, StateError> {
        let (payload, tag) = token.split_once('.').ok_or(StateError::Invalid)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| StateError::Invalid)?;
        let mut mac = self.mac();
        mac.update(payload.as_bytes());
        mac.verify_slice(&tag).map_err(|_| StateError::Invalid)?;
        let bytes = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| StateError::Invalid)?;
        let state: RequestState =
            serde_json::from_slice(&bytes).map_err(|_| StateError::Invalid)?;
        if &state.binding != binding {
            return Err(StateError::Mismatch);
        }
        if state.expires_ms < now_ms() {
            return Err(StateError::Expired);
        }
        Ok(state)
    }

    fn mac(&self) -> HmacSha256 {
        <HmacSha256 as Mac>::new_from_slice(&self.key).expect("HMAC takes a key of any length")
    }

    fn tag(&self, payload: &[u8]) -> Vec<u8> {
        let mut mac = self.mac();
        mac.update(payload);
        mac.finalize().into_bytes().to_vec()
    }
}

/// JSON with object keys sorted at every depth.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parts_in_one_buffer_bind_what_their_separate_fields_would() {
        let cases = [
            ("tools/call", "echo", Some(r#"{"text":"a"}"#), "alice"),
            ("resources/read", "mcp-ws://demo/readme", None, "bob"),
            ("prompts/get", "", Some("{}"), ""),
        ];
        for (method, target, arguments, subject) in cases {
            assert_eq!(
                BindingParts::new(method, target, arguments, subject).binding(),
                Binding::new(method, target, arguments, subject),
                "{method} {target} {arguments:?} {subject}"
            );
        }
        // Where one part ends and the next begins is part of the binding.
        assert_ne!(
            BindingParts::new("tools/call", "ab", None, "c").binding(),
            BindingParts::new("tools/call", "a", None, "bc").binding()
        );
    }

    fn binding() -> Binding {
        Binding::new("tools/call", "greet", Some(r#"{"who":"x"}"#), "anonymous")
    }

    #[test]
    fn arguments_too_deep_to_parse_are_bound_by_their_text() {
        let deep = |leaf: &str| {
            format!(
                r#"{{"pad":{}{leaf}{},"target":"A"}}"#,
                "[".repeat(200),
                "]".repeat(200)
            )
        };
        let bind = |arguments: &str| Binding::new("tools/call", "t", Some(arguments), "s");
        assert_eq!(bind(&deep("1")), bind(&deep("1")));
        assert_ne!(
            bind(&deep("1")),
            bind(&deep("2")),
            "other arguments, bound apart"
        );
        assert_ne!(bind(&deep("1")), bind("null"), "not the digest of null");
    }

    #[test]
    fn a_state_round_trips_with_its_answers() {
        let key = StateKey::new(Some("secret"), Duration::from_secs(60));
        let mut responses = Map::new();
        responses.insert("name".into(), json!({"action": "accept"}));
        let token = key.issue(binding(), responses.clone(), vec!["age".into()]);
        let state = key.verify(&token, &binding()).expect("valid");
        assert_eq!(state.responses, responses);
        assert_eq!(state.outstanding, ["age"]);
        // Another node with the same configured key accepts it.
        let other = StateKey::new(Some("secret"), Duration::from_secs(60));
        assert!(other.verify(&token, &binding()).is_ok());
    }

    #[test]
    fn altered_foreign_misbound_and_expired_states_are_refused() {
        let key = StateKey::new(Some("secret"), Duration::from_secs(60));
        let token = key.issue(binding(), Map::new(), vec![]);
        let (payload, tag) = token.split_once('.').expect("two parts");
        let forged_payload = URL_SAFE_NO_PAD.encode(
            String::from_utf8(URL_SAFE_NO_PAD.decode(payload).expect("b64"))
                .expect("utf8")
                .replace("greet", "admin"),
        );
        let forged = format!("{forged_payload}.{tag}");
        assert_eq!(key.verify(&forged, &binding()), Err(StateError::Invalid));
        assert_eq!(key.verify("garbage", &binding()), Err(StateError::Invalid));
        let stranger = StateKey::new(Some("other"), Duration::from_secs(60));
        assert_eq!(
            stranger.verify(&token, &binding()),
            Err(StateError::Invalid)
        );
        let elsewhere = Binding::new("tools/call", "greet", Some(r#"{"who":"y"}"#), "anonymous");
        assert_eq!(key.verify(&token, &elsewhere), Err(StateError::Mismatch));
        let reordered = Binding::new(
            "tools/call",
            "greet",
            Some(r#"{ "who" : "x" }"#),
            "anonymous",
        );
        assert!(
            key.verify(&token, &reordered).is_ok(),
            "same arguments, other spacing"
        );
        let someone_else = Binding::new("tools/call", "greet", Some(r#"{"who":"x"}"#), "mallory");
        assert_eq!(key.verify(&token, &someone_else), Err(StateError::Mismatch));
        let short = StateKey::new(Some("secret"), Duration::ZERO);
        let stale = short.issue(binding(), Map::new(), vec![]);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(short.verify(&stale, &binding()), Err(StateError::Expired));
    }
}
