//! Authentication: who a client is, from its bearer token (an API key or a JWT) or its TLS
//! client certificate, and the OAuth protected resource metadata (RFC 9728) that tells MCP
//! clients where to get a token.
//!
//! - The token comes from `Authorization: Bearer <token>`, or, on a WebSocket upgrade (a
//!   browser cannot set headers there), from an offered subprotocol `mcp.auth.<token>`, which
//!   is never selected, so it never comes back in the response.
//! - API keys are configured as SHA-256 hashes only. A presented token is hashed once and
//!   compared with every configured hash in constant time.
//! - JWTs are checked with `jsonwebtoken`: the signature with the configured key for the
//!   token's algorithm (and `kid`), then `exp`, `nbf`, `aud` and `iss`, with a leeway. `sub`
//!   is the identity; `scope` (space-separated) or `scp` (a list or a string) the scopes.
//! - A token that is presented must be valid, whether or not authentication is required,
//!   and so must the `Authorization: Bearer` header presenting it (one header, one space,
//!   visible ASCII); without one, a verified client certificate's subject is the identity,
//!   else the client is anonymous (refused when `auth.required`).
//!
//! Tokens never reach a log line, an error or a `Debug` output: only what they prove (the
//! subject and scopes) leaves this module.

use super::forwarded::TrustedProxies;
use super::policy::Policies;
use super::tls::ClientCertificate;
use super::Refusal;
use crate::config::{AuthSettings, ClientAuth, ConfigError, JwtSettings, Settings};
use crate::context::{Identity, Proof};
use crate::observe::access::Clean;
use actix_web::http::header::{HeaderMap, AUTHORIZATION, HOST};
use actix_web::HttpRequest;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq;

/// An offered WebSocket subprotocol `mcp.auth.<token>` carries a bearer token.
pub const AUTH_SUBPROTOCOL_PREFIX: &str = "mcp.auth.";

/// Where the protected resource metadata is served, before the resource's path.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// Checks credentials; built once from the settings.
pub struct Authenticator {
    /// Whether any bearer credential (API key, JWT key) is configured.
    bearer: bool,
    /// Whether client certificates are verified (mutual TLS).
    client_certificates: bool,
    required: bool,
    required_scopes: Vec<String>,
    api_keys: Vec<ApiKey>,
    jwt_keys: Vec<JwtKey>,
    metadata: ResourceMetadata,
    /// Whether policies are configured: then the 403 of a client no policy applies to names
    /// the scopes that would.
    policy_scopes: Vec<String>,
    /// Whose forwarded scheme and host name the resource, when `auth.resource` does not.
    proxies: TrustedProxies,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Key hashes and JWT keys stay out of Debug output.
        f.debug_struct("Authenticator")
            .field("api_keys", &self.api_keys.len())
            .field("jwt_keys", &self.jwt_keys.len())
            .field("required", &self.required)
            .finish_non_exhaustive()
    }
}

struct ApiKey {
    name: String,
    sha256: [u8; 32],
    scopes: Vec<String>,
}

struct JwtKey {
    kid: Option<String>,
    algorithm: Algorithm,
    key: DecodingKey,
    validation: Validation,
}

/// What the protected resource metadata says, beside the resource.
struct ResourceMetadata {
    /// `auth.resource`, or empty: derived from the request.
    resource: String,
    authorization_servers: Vec<String>,
    scopes_supported: Vec<String>,
}

/// Why a client was not authenticated (the 401's `error_description`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// No credentials, and they are required.
    Missing,
    /// A token that is neither a configured API key nor a JWT this server accepts.
    UnknownToken,
    /// A JWT whose signature does not verify with the configured keys.
    BadSignature,
    /// A JWT past its `exp`.
    Expired,
    /// A JWT before its `nbf`.
    NotYetValid,
    /// A JWT for another audience.
    WrongAudience,
    /// A JWT from an issuer this server does not accept.
    WrongIssuer,
    /// A JWT without a claim this server needs (`exp`, `aud`, `iss`, `sub`).
    MissingClaim,
    /// A JWT whose `sub` is empty or only whitespace.
    EmptySubject,
    /// A JWT signed with an algorithm (or key id) this server has no key for.
    UnknownKey,
    /// Not a well-formed JWT.
    Malformed,
    /// An `Authorization: Bearer` header that carries no readable token (a tab for the
    /// space, bytes that are not visible ASCII, nothing after the scheme), or more than one
    /// `Authorization` header.
    UnreadableAuthorization,
}

impl AuthFailure {
    /// The `error_description`.
    pub fn description(self) -> &'static str {
        match self {
            Self::Missing => "authentication required: send Authorization: Bearer <token>",
            Self::UnknownToken => "the token is not one this server accepts",
            Self::BadSignature => "the token's signature is invalid",
            Self::Expired => "the token has expired",
            Self::NotYetValid => "the token is not valid yet",
            Self::WrongAudience => "the token was issued for another audience",
            Self::WrongIssuer => "the token was issued by an issuer this server does not accept",
            Self::MissingClaim => "the token lacks a required claim (exp, aud, iss, sub)",
            Self::EmptySubject => "the token's sub is empty",
            Self::UnknownKey => {
                "the token is signed with an algorithm or key this server does not know"
            }
            Self::Malformed => "the token is malformed",
            Self::UnreadableAuthorization => {
                "the Authorization header is not one \"Bearer <token>\" (a space, then visible ASCII)"
            }
        }
    }
}

/// The claims of a JWT this module reads (the registered ones are checked by `jsonwebtoken`).
#[derive(Deserialize)]
struct Claims {
    // Optional here so that a token without it fails as a missing claim (the required
    // claims are checked after the claims are read).
    #[serde(default)]
    sub: Option<String>,
    /// Checked by `jsonwebtoken`; kept to end a WebSocket session when it passes.
    #[serde(default)]
    exp: Option<u64>,
    /// Checked by `jsonwebtoken`, which passes over one it cannot read (a string): read
    /// here too, so that such a token is malformed rather than valid at once.
    #[serde(default, rename = "nbf")]
    _nbf: Option<u64>,
    /// Checked by `jsonwebtoken`, which also takes a list: one issuer, as RFC 7519 §4.1.1
    /// has it.
    #[serde(default, rename = "iss")]
    _iss: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<ScopeClaim>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ScopeClaim {
    List(Vec<String>),
    Text(String),
}

impl Authenticator {
    /// The authenticator the settings ask for; reads the JWT key files.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the setting whose file cannot be read or used.
    pub fn new(settings: &Settings, policies: &Policies) -> Result<Self, ConfigError> {
        let auth = &settings.auth;
        let api_keys = auth
            .api_keys
            .iter()
            .map(|key| ApiKey {
                name: key.name.clone(),
                sha256: decode_hex(&key.sha256),
                scopes: key.scopes.clone(),
            })
            .collect::<Vec<_>>();
        let jwt_keys = jwt_keys(auth)?;
        Ok(Self {
            bearer: !api_keys.is_empty() || !jwt_keys.is_empty(),
            client_certificates: settings.tls.client_auth != ClientAuth::None,
            required: auth.required,
            required_scopes: auth.required_scopes.clone(),
            api_keys,
            jwt_keys,
            metadata: ResourceMetadata {
                resource: auth.resource.trim_end_matches('/').to_owned(),
                authorization_servers: auth.authorization_servers.clone(),
                scopes_supported: auth.scopes_supported.clone(),
            },
            policy_scopes: policies.scopes().into_iter().map(str::to_owned).collect(),
            proxies: TrustedProxies::new(&settings.server),
        })
    }

    /// Whether the server authenticates clients at all (and serves its resource metadata).
    pub fn is_enabled(&self) -> bool {
        self.bearer || self.client_certificates || self.required
    }

    /// Who sent `req`, and until when its credential is valid (a JWT's `exp`, with the
    /// leeway): a connection that outlives it ends then.
    ///
    /// # Errors
    /// 401 for missing (when required) or invalid credentials, 403 for a token without the
    /// required scopes.
    pub fn authenticate(
        &self,
        req: &HttpRequest,
    ) -> Result<(Identity, Option<SystemTime>), Refusal> {
        if !self.is_enabled() {
            return Ok((Identity::anonymous(), None));
        }
        let token = if self.bearer {
            bearer_token(req.headers()).map_err(|failure| self.unauthorized(req, Some(failure)))?
        } else {
            None
        };
        if let Some(token) = token {
            let (identity, expires) = self
                .verify(token)
                .map_err(|failure| self.unauthorized(req, Some(failure)))?;
            if let Some(missing) = self
                .required_scopes
                .iter()
                .find(|scope| !identity.scopes().contains(scope))
            {
                tracing::debug!(subject = %Clean(identity.subject()), scope = %missing, "refused: a required scope is missing");
                return Err(self.insufficient_scope(req, self.required_scopes.join(" ")));
            }
            return Ok((identity, expires));
        }
        if self.client_certificates {
            if let Some(certificate) = req.conn_data::<ClientCertificate>() {
                return Ok((
                    Identity::proven(Proof::Certificate, certificate.subject.clone(), Vec::new()),
                    None,
                ));
            }
        }
        if self.required {
            return Err(self.unauthorized(req, None));
        }
        Ok((Identity::anonymous(), None))
    }

    /// The identity a token proves and until when, or why it proves none.
    fn verify(&self, token: &str) -> Result<(Identity, Option<SystemTime>), AuthFailure> {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        // Every configured hash is compared, matching or not: the time taken does not tell
        // which key (or how much of its hash) matched.
        let mut found = None;
        for key in &self.api_keys {
            if bool::from(key.sha256.ct_eq(digest.as_ref())) {
                found = Some(key);
            }
        }
        if let Some(key) = found {
            return Ok((
                Identity::proven(Proof::ApiKey, key.name.as_str(), key.scopes.clone()),
                None,
            ));
        }
        if self.jwt_keys.is_empty() || token.bytes().filter(|b| *b == b'.').count() != 2 {
            return Err(AuthFailure::UnknownToken);
        }
        self.verify_jwt(token)
    }

    fn verify_jwt(&self, token: &str) -> Result<(Identity, Option<SystemTime>), AuthFailure> {
        let header = jose_header(token).ok_or(AuthFailure::Malformed)?;
        let mut failure = AuthFailure::UnknownKey;
        let candidates = self.jwt_keys.iter().filter(|key| {
            key.algorithm == header.alg
                && (key.kid.is_none() || header.kid.is_none() || key.kid == header.kid)
        });
        for key in candidates {
            match jsonwebtoken::decode::<Claims>(token, &key.key, &key.validation) {
                Ok(data) => {
                    let claims = data.claims;
                    let subject = claims.sub.ok_or(AuthFailure::MissingClaim)?;
                    // An empty name would be everyone's and no one's.
                    if subject.trim().is_empty() {
                        return Err(AuthFailure::EmptySubject);
                    }
                    let scopes = match (claims.scope, claims.scp) {
                        (Some(scope), _) | (None, Some(ScopeClaim::Text(scope))) => {
                            scope.split_whitespace().map(str::to_owned).collect()
                        }
                        (None, Some(ScopeClaim::List(scopes))) => scopes,
                        (None, None) => Vec::new(),
                    };
                    // Valid until `exp`, and the leeway the validation allows past it.
                    // (Beyond what a clock can hold: no end.)
                    let expires = claims.exp.and_then(|exp| {
                        UNIX_EPOCH.checked_add(Duration::from_secs(
                            exp.saturating_add(key.validation.leeway),
                        ))
                    });
                    return Ok((Identity::proven(Proof::Jwt, subject, scopes), expires));
                }
                // Another key may have signed it (a rotation, keys without `kid`).
                Err(error) if *error.kind() == ErrorKind::InvalidSignature => {
                    failure = AuthFailure::BadSignature;
                }
                // The signature held: what failed is the token itself.
                Err(error) => return Err(claim_failure(error.kind())),
            }
        }
        Err(failure)
    }

    /// A 401, with the challenge that points at the resource metadata.
    fn unauthorized(&self, req: &HttpRequest, failure: Option<AuthFailure>) -> Refusal {
        let failure = failure.unwrap_or(AuthFailure::Missing);
        tracing::debug!(
            peer = ?req.peer_addr().map(|a| a.ip()),
            reason = failure.description(),
            "refused: not authenticated"
        );
        Refusal::Unauthorized(Challenge {
            error: (failure != AuthFailure::Missing).then_some("invalid_token"),
            description: failure.description(),
            scope: None,
            resource_metadata: self.metadata_url(req),
        })
    }

    /// A 403 for a client that lacks the scopes `scope` names.
    pub(crate) fn insufficient_scope(&self, req: &HttpRequest, scope: String) -> Refusal {
        Refusal::InsufficientScope(Challenge {
            error: Some("insufficient_scope"),
            description: "the credentials do not grant access to this server",
            scope: (!scope.is_empty()).then_some(scope),
            resource_metadata: self.metadata_url(req),
        })
    }

    /// The refusal of an admitted client that no policy applies to: 401 if it could
    /// authenticate, 403 if it did.
    pub(crate) fn no_policy_for(&self, req: &HttpRequest, identity: &Identity) -> Refusal {
        if identity.is_authenticated() {
            self.insufficient_scope(req, self.policy_scopes.join(" "))
        } else {
            self.unauthorized(req, None)
        }
    }

    /// The canonical URI of the MCP endpoint: `auth.resource`, or this request's
    /// `scheme://host/mcp` as [`reached`](Self::reached) gives them.
    fn resource(&self, req: &HttpRequest) -> String {
        if !self.metadata.resource.is_empty() {
            return self.metadata.resource.clone();
        }
        let (scheme, host) = self.reached(req);
        format!("{scheme}://{host}/mcp")
    }

    /// The scheme (`http` or `https`) and host a request reached the server by: its
    /// connection's scheme and its `Host` (checked against `http.allowed_hosts`), or from a
    /// trusted proxy (`server.trusted_proxies`), the scheme and host it forwards, each when
    /// it forwards one ([`TrustedProxies::forwarded_reach`]: the chosen header's family, its
    /// rightmost value). Any client can write `X-Forwarded-Host`: believed from anyone, or
    /// its leftmost value believed, it made the challenge, the metadata and the `GET /`
    /// page name a site of the client's choosing.
    pub(crate) fn reached(&self, req: &HttpRequest) -> (String, String) {
        let config = req.app_config();
        let scheme = if config.secure() { "https" } else { "http" };
        // HTTP/2 has no `Host`: its `:authority` is the URI's (an HTTP/1.0 request may name
        // one too, userinfo and all: only a `host[:port]` is named back).
        let host = req
            .headers()
            .get(HOST)
            .and_then(|host| host.to_str().ok())
            .or_else(|| req.uri().authority().map(|authority| authority.as_str()))
            .filter(|host| super::origin::authority_name(host).is_some())
            .unwrap_or(config.host());
        let peer = req.peer_addr().map(|peer| peer.ip());
        if self.proxies.trusts_peer(peer) {
            let (forwarded_scheme, forwarded_host) = self.proxies.forwarded_reach(req.headers());
            return (
                forwarded_scheme.unwrap_or(scheme).to_owned(),
                forwarded_host.unwrap_or_else(|| host.to_owned()),
            );
        }
        (scheme.to_owned(), host.to_owned())
    }

    /// The URL of the resource metadata: the well-known path inserted between the
    /// resource's authority and its path (RFC 9728 §3.1). `None` when the URL would not be a
    /// safe header parameter (a `Host` with quotes or spaces).
    fn metadata_url(&self, req: &HttpRequest) -> Option<String> {
        let resource = self.resource(req);
        let (scheme, rest) = resource.split_once("://")?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let url = format!("{scheme}://{authority}{METADATA_PATH}{path}");
        url.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
            .then_some(url)
    }

    /// The protected resource metadata document (RFC 9728 §2).
    pub fn metadata_document(&self, req: &HttpRequest) -> Value {
        let mut document = json!({
            "resource": self.resource(req),
            "bearer_methods_supported": ["header"],
        });
        let meta = &self.metadata;
        if !meta.authorization_servers.is_empty() {
            document["authorization_servers"] = json!(meta.authorization_servers);
        }
        if !meta.scopes_supported.is_empty() {
            document["scopes_supported"] = json!(meta.scopes_supported);
        }
        document
    }
}

/// A `WWW-Authenticate: Bearer` challenge (RFC 6750 §3, RFC 9728 §5.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// `invalid_token` when a token was presented, `insufficient_scope` for a 403.
    pub error: Option<&'static str>,
    /// `error_description`, also the message of the JSON-RPC error in the body.
    pub description: &'static str,
    /// The scopes that would be enough.
    pub scope: Option<String>,
    /// The URL of the protected resource metadata.
    pub resource_metadata: Option<String>,
}

impl Challenge {
    /// The header value.
    pub fn header(&self) -> String {
        let mut params = Vec::new();
        if let Some(error) = self.error {
            params.push(format!("error=\"{error}\""));
            params.push(format!("error_description=\"{}\"", self.description));
        }
        if let Some(scope) = &self.scope {
            params.push(format!("scope=\"{scope}\""));
        }
        if let Some(url) = &self.resource_metadata {
            params.push(format!("resource_metadata=\"{url}\""));
        }
        if params.is_empty() {
            "Bearer".to_owned()
        } else {
            format!("Bearer {}", params.join(", "))
        }
    }
}

/// The bearer token of a request: `Authorization: Bearer`, else, on a WebSocket upgrade, an
/// offered `mcp.auth.<token>` subprotocol. A header of another scheme (`Basic`) is not this
/// server's to read, and is passed over as before.
///
/// # Errors
/// [`AuthFailure::UnreadableAuthorization`] for a `Bearer` header without a readable token,
/// or several `Authorization` headers: a credential that was sent is never taken for none
/// (a proxy in front could read it otherwise than this server does).
fn bearer_token(headers: &HeaderMap) -> Result<Option<&str>, AuthFailure> {
    let mut sent = headers.get_all(AUTHORIZATION);
    if let Some(value) = sent.next() {
        if sent.next().is_some() {
            return Err(AuthFailure::UnreadableAuthorization);
        }
        let bytes = value.as_bytes().trim_ascii();
        let is_bearer = bytes
            .get(..6)
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case(b"bearer"));
        if !is_bearer {
            return Ok(None);
        }
        // `Bearer`, then one or more spaces, then the token (RFC 6750 §2.1): visible ASCII.
        let rest = &bytes[6..];
        let token = rest.trim_ascii_start();
        let spaced = rest.first() == Some(&b' ')
            && rest[..rest.len() - token.len()].iter().all(|b| *b == b' ');
        return match std::str::from_utf8(token) {
            Ok(token)
                if spaced && !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                Ok(Some(token))
            }
            // `Bearertoken`: another scheme's name, not this one's.
            _ if rest.first().is_some_and(u8::is_ascii_alphanumeric) => Ok(None),
            _ => Err(AuthFailure::UnreadableAuthorization),
        };
    }
    if !super::is_websocket_upgrade(headers) {
        return Ok(None);
    }
    Ok(super::offered_subprotocols(headers)
        .find_map(|offer| offer.strip_prefix(AUTH_SUBPROTOCOL_PREFIX))
        .filter(|token| !token.is_empty()))
}

/// What the key is chosen by, of a JWT's JOSE header.
#[derive(Deserialize)]
struct JoseHeader {
    alg: jsonwebtoken::Algorithm,
    #[serde(default)]
    kid: Option<String>,
    /// Extensions the recipient must understand (RFC 7515 §4.1.11); this server understands
    /// none. (`jsonwebtoken::decode_header` reads the registered members only, so the header
    /// is read here, once, rather than by it and again for `crit`.)
    #[serde(default)]
    crit: Option<serde::de::IgnoredAny>,
}

/// The JOSE header of `token`; `None` when it does not read, or names `crit`.
fn jose_header(token: &str) -> Option<JoseHeader> {
    let encoded = token.split('.').next()?;
    let json = data_encoding::BASE64URL_NOPAD
        .decode(encoded.as_bytes())
        .ok()?;
    serde_json::from_slice::<JoseHeader>(&json)
        .ok()
        .filter(|header| header.crit.is_none())
}

fn claim_failure(kind: &ErrorKind) -> AuthFailure {
    match kind {
        ErrorKind::ExpiredSignature => AuthFailure::Expired,
        ErrorKind::ImmatureSignature => AuthFailure::NotYetValid,
        ErrorKind::InvalidAudience => AuthFailure::WrongAudience,
        ErrorKind::InvalidIssuer => AuthFailure::WrongIssuer,
        ErrorKind::MissingRequiredClaim(_) => AuthFailure::MissingClaim,
        ErrorKind::InvalidAlgorithm | ErrorKind::MissingAlgorithm => AuthFailure::UnknownKey,
        _ => AuthFailure::Malformed,
    }
}

/// 64 hex digits (checked by `Settings::validate`) as bytes.
fn decode_hex(hex: &str) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = hex
            .get(2 * i..2 * i + 2)
            .and_then(|pair| u8::from_str_radix(pair, 16).ok())
            .unwrap_or(0);
    }
    bytes
}

/// The JWT keys of `auth.jwt`, each with the validation of its algorithm.
fn jwt_keys(auth: &AuthSettings) -> Result<Vec<JwtKey>, ConfigError> {
    let jwt = &auth.jwt;
    let mut keys = Vec::new();
    let read = |path: &Path, setting: &str| {
        std::fs::read(path)
            .map_err(|e| ConfigError::Invalid(format!("{setting}: {}: {e}", path.display())))
    };
    if !jwt.secret_file.as_os_str().is_empty() {
        let mut secret = read(&jwt.secret_file, "auth.jwt.secret_file")?;
        while secret.last().is_some_and(|b| b.is_ascii_whitespace()) {
            secret.pop();
        }
        if secret.len() < 32 {
            return Err(ConfigError::Invalid(
                "auth.jwt.secret_file: an HS256 secret must be at least 32 bytes".into(),
            ));
        }
        keys.push((None, Algorithm::HS256, DecodingKey::from_secret(&secret)));
    }
    if !jwt.public_key_file.as_os_str().is_empty() {
        let pem = read(&jwt.public_key_file, "auth.jwt.public_key_file")?;
        let key = if let Ok(key) = DecodingKey::from_rsa_pem(&pem) {
            (None, Algorithm::RS256, key)
        } else if let Ok(key) = DecodingKey::from_ec_pem(&pem) {
            (None, Algorithm::ES256, key)
        } else {
            return Err(ConfigError::Invalid(format!(
                "auth.jwt.public_key_file: {}: not an RSA or EC public key in PEM",
                jwt.public_key_file.display()
            )));
        };
        keys.push(key);
    }
    if !jwt.jwks_file.as_os_str().is_empty() {
        let text = read(&jwt.jwks_file, "auth.jwt.jwks_file")?;
        let invalid = |e: &dyn std::fmt::Display| {
            ConfigError::Invalid(format!(
                "auth.jwt.jwks_file: {}: {e}",
                jwt.jwks_file.display()
            ))
        };
        let set: JwkSet = serde_json::from_slice(&text).map_err(|e| invalid(&e))?;
        for jwk in &set.keys {
            let algorithm = jwk_algorithm(jwk).ok_or_else(|| {
                invalid(&format!(
                    "key {:?}: no algorithm this server verifies",
                    jwk.common.key_id
                ))
            })?;
            let key = DecodingKey::from_jwk(jwk).map_err(|e| invalid(&e))?;
            keys.push((jwk.common.key_id.clone(), algorithm, key));
        }
    }
    Ok(keys
        .into_iter()
        .map(|(kid, algorithm, key)| JwtKey {
            kid,
            algorithm,
            key,
            validation: validation(algorithm, auth, jwt),
        })
        .collect())
}

/// The algorithm a JWK is used with: its `alg`, or the usual one for its key type.
fn jwk_algorithm(jwk: &jsonwebtoken::jwk::Jwk) -> Option<Algorithm> {
    match jwk.common.key_algorithm {
        Some(KeyAlgorithm::HS256) => Some(Algorithm::HS256),
        Some(KeyAlgorithm::RS256) => Some(Algorithm::RS256),
        Some(KeyAlgorithm::ES256) => Some(Algorithm::ES256),
        Some(_) => None,
        None => match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => Some(Algorithm::RS256),
            AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => {
                Some(Algorithm::ES256)
            }
            AlgorithmParameters::OctetKey(_) => Some(Algorithm::HS256),
            _ => None,
        },
    }
}

fn validation(algorithm: Algorithm, auth: &AuthSettings, jwt: &JwtSettings) -> Validation {
    let mut validation = Validation::new(algorithm);
    validation.leeway = jwt.leeway_ms.div_ceil(1000);
    validation.validate_nbf = true;
    validation.set_required_spec_claims(&["exp", "aud", "iss", "sub"]);
    let audiences = if jwt.audiences.is_empty() {
        std::slice::from_ref(&auth.resource)
    } else {
        &jwt.audiences[..]
    };
    // A resource URI is the same with or without a trailing slash (RFC 8707 §2).
    let audiences: Vec<String> = audiences
        .iter()
        .flat_map(|aud| {
            let bare = aud.trim_end_matches('/');
            [bare.to_owned(), format!("{bare}/")]
        })
        .collect();
    validation.set_audience(&audiences);
    if jwt.issuers.is_empty() {
        validation.set_issuer(&auth.authorization_servers);
    } else {
        validation.set_issuer(&jwt.issuers);
    }
    validation
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::http::header::{HeaderName, HeaderValue, SEC_WEBSOCKET_PROTOCOL, UPGRADE};

    fn headers(pairs: &[(HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                name.clone(),
                HeaderValue::from_str(value).expect("header value"),
            );
        }
        map
    }

    #[test]
    fn the_token_comes_from_the_header_or_an_upgrade_subprotocol() {
        let token = |value: &str| {
            bearer_token(&headers(&[(AUTHORIZATION, value)])).map(|t| t.map(str::to_owned))
        };
        assert_eq!(token("Bearer abc"), Ok(Some("abc".to_owned())));
        assert_eq!(token("bearer  abc "), Ok(Some("abc".to_owned())));
        assert_eq!(token("Basic abc"), Ok(None), "another scheme's");
        assert_eq!(token("Bearerish abc"), Ok(None), "another scheme's");
        for unreadable in ["Bearer ", "Bearer", "Bearer\tabc", "Bearer a b", "Bearer\t"] {
            assert_eq!(
                token(unreadable),
                Err(AuthFailure::UnreadableAuthorization),
                "{unreadable:?}"
            );
        }
        let mut map = headers(&[(AUTHORIZATION, "Basic abc")]);
        map.append(AUTHORIZATION, HeaderValue::from_static("Bearer abc"));
        assert_eq!(
            bearer_token(&map),
            Err(AuthFailure::UnreadableAuthorization),
            "two headers"
        );
        let mut map = HeaderMap::new();
        map.append(
            AUTHORIZATION,
            HeaderValue::from_bytes(b"Bearer \xc3\xa9").expect("obs-text is a header value"),
        );
        assert_eq!(
            bearer_token(&map),
            Err(AuthFailure::UnreadableAuthorization)
        );
        let offer = [
            (UPGRADE, "websocket"),
            (SEC_WEBSOCKET_PROTOCOL, "mcp, mcp.auth.t0k3n"),
        ];
        assert_eq!(bearer_token(&headers(&offer)), Ok(Some("t0k3n")));
        // Not an upgrade: the subprotocol header means nothing.
        assert_eq!(bearer_token(&headers(&offer[1..])), Ok(None));
    }

    #[test]
    fn challenges_follow_rfc_6750() {
        let missing = Challenge {
            error: None,
            description: AuthFailure::Missing.description(),
            scope: None,
            resource_metadata: Some("https://h/.well-known/oauth-protected-resource/mcp".into()),
        };
        assert_eq!(
            missing.header(),
            "Bearer resource_metadata=\"https://h/.well-known/oauth-protected-resource/mcp\""
        );
        let scoped = Challenge {
            error: Some("insufficient_scope"),
            description: "d",
            scope: Some("a b".into()),
            resource_metadata: None,
        };
        assert_eq!(
            scoped.header(),
            "Bearer error=\"insufficient_scope\", error_description=\"d\", scope=\"a b\""
        );
    }

    #[test]
    fn hex_decodes() {
        let hex = "00ff10".repeat(10) + "abcd";
        let bytes = decode_hex(&hex);
        assert_eq!(&bytes[..3], &[0x00, 0xff, 0x10]);
        assert_eq!(&bytes[30..], &[0xab, 0xcd]);
    }
}
