//! Authentication and authorization, checked before any session exists, over real WebSocket
//! upgrades and real HTTP requests:
//!
//! - Without credentials where they are required: 401 with
//!   `WWW-Authenticate: Bearer resource_metadata="<url>"` (no `error`); with an unknown API key
//!   or a JWT that is expired, not yet valid, for another audience or issuer, badly signed,
//!   without `sub`, or signed with an unknown key: 401 with `error="invalid_token"`, whether
//!   or not authentication is required. No session is ever opened for a refused client, each
//!   refusal is counted in `/metrics`, and the server goes on serving others.
//! - A token without the scopes `auth.required_scopes` names: 403 `insufficient_scope`.
//! - `/.well-known/oauth-protected-resource` (and its `/mcp` form) serves RFC 9728 metadata:
//!   `resource`, `authorization_servers`, `scopes_supported`, `bearer_methods_supported`; it is
//!   404 when the server authenticates nobody.
//! - The identity (an API key's name and scopes; a JWT's `sub`, and `scope` or `scp`; HS256,
//!   RS256, ES256 from a PEM key or a JWKS by `kid`; the leeway applies) reaches tools.
//! - A browser's token in the `mcp.auth.<token>` subprotocol is accepted and never echoed.
//! - Sessions are bound to their identity: a WebSocket session id resumed, or an HTTP session
//!   id used, by another identity is 404, as for an unknown session; by the same one it works.
//! - Policies: what an identity may not use is neither listed (pages over the filtered list
//!   stay complete and in order) nor callable: a forbidden method is -32601, a forbidden tool
//!   or prompt is unknown, a forbidden resource is not found, exactly as for ones that do not
//!   exist; a client no policy applies to is refused (401 anonymous, 403 authenticated).
//! - `/metrics` on the public listener wants credentials as the endpoint does; on the admin
//!   listener (`server.admin_listen`) it needs none.

use crate::support::http::{http_get, http_get_with, metric, wait_metric};
use crate::support::*;

use jsonwebtoken::{EncodingKey, Header};
use mcp_ws::config::PolicySettings;
use mcp_ws::{RequestContext, RunningServer, Settings, Tool, ToolError};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};
use tempfile::TempDir;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};

const CI_KEY: &str = "ci-3f9a1c0e8b7d4a6f2e1d0c9b8a7f6e5d";
const BOT_KEY: &str = "bot-0a1b2c3d4e5f60718293a4b5c6d7e8f9";
const SECRET: &str = "a shared secret of at least thirty-two bytes";
const ISSUER: &str = "https://auth.test";
const AUDIENCE: &str = "https://mcp.test/mcp";

// ---------------------------------------------------------------------------------------
// Credentials and settings.

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}

/// Claims that pass every check; tests change one of them.
fn claims(sub: &str) -> Value {
    json!({"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "exp": now() + 600, "scope": "mcp:read mcp:write"})
}

fn hs256(claims: &Value) -> String {
    jsonwebtoken::encode(
        &Header::new(jsonwebtoken::Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("encode")
}

fn write(dir: &Path, name: &str, contents: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write");
    path
}

/// Authentication required; API keys `ci` (scope `tools`) and `bot`; HS256 JWTs from
/// `ISSUER` for `AUDIENCE`, with no leeway.
fn auth_settings(dir: &TempDir) -> Settings {
    let mut s = settings();
    // The tests read the metrics there: the public `/metrics` wants credentials.
    s.server.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
    s.auth.required = true;
    s.auth.api_keys = vec![
        api_key("ci", CI_KEY, &["tools"]),
        api_key("bot", BOT_KEY, &[]),
    ];
    s.auth.authorization_servers = vec![ISSUER.into()];
    s.auth.scopes_supported = vec!["mcp:read".into(), "mcp:write".into()];
    s.auth.jwt.secret_file = write(dir.path(), "secret", &format!("{SECRET}\n"));
    s.auth.jwt.audiences = vec![AUDIENCE.into()];
    s.auth.jwt.leeway_ms = 0;
    s
}

/// `whoami`: the identity the tool sees, as JSON text.
async fn whoami(_args: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let identity = ctx.identity();
    Ok(json!({
        "subject": identity.subject(),
        "principal": identity.principal(),
        "scopes": identity.scopes(),
        "authenticated": identity.is_authenticated(),
    })
    .to_string())
}

fn start_auth(settings: Settings) -> RunningServer {
    start_with(settings, |b| {
        b.tool(Tool::new("whoami", "Who the caller is", whoami))
    })
}

// ---------------------------------------------------------------------------------------
// Upgrades.

/// `expect_err` for upgrades (a `Client` has no `Debug`).
trait Refusing {
    fn refused(self, why: &str) -> Refused;
}

impl Refusing for Result<Client, Refused> {
    fn refused(self, why: &str) -> Refused {
        match self {
            Ok(_) => panic!("expected a refusal: {why}"),
            Err(refused) => refused,
        }
    }
}

/// A refused upgrade.
#[derive(Debug)]
struct Refused {
    status: u16,
    www_authenticate: Option<String>,
    body: Value,
}

/// Upgrades offering `mcp` with extra headers.
async fn upgrade(server: &RunningServer, headers: &[(&str, &str)]) -> Result<Client, Refused> {
    let mut request = server.url().into_client_request().expect("request");
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", HeaderValue::from_static("mcp"));
    for (name, value) in headers {
        request.headers_mut().insert(
            HeaderName::from_bytes(name.as_bytes()).expect("name"),
            HeaderValue::from_str(value).expect("value"),
        );
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((ws, response)) => {
            assert_eq!(
                response
                    .headers()
                    .get("sec-websocket-protocol")
                    .and_then(|v| v.to_str().ok()),
                Some("mcp"),
                "the server selects mcp"
            );
            Ok(Client::from_ws(ws))
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err(Refused {
            status: response.status().as_u16(),
            www_authenticate: response
                .headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            body: response
                .body()
                .as_deref()
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or(Value::Null),
        }),
        Err(other) => panic!("unexpected connect error: {other}"),
    }
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// An initialized session authenticated with `token`.
async fn session_with(server: &RunningServer, token: &str) -> Client {
    let auth = bearer(token);
    let mut client = upgrade(server, &[("Authorization", &auth)])
        .await
        .unwrap_or_else(|refused| panic!("admitted: {refused:?}"));
    let init = client
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_result(&init, &json!(0));
    client
}

async fn identity_of(client: &mut Client) -> Value {
    let response = client.call_tool("whoami", json!({})).await;
    let text = response["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("whoami answers: {response}"));
    serde_json::from_str(text).expect("JSON")
}

/// Asserts a 401 with `error="invalid_token"` and the description, and a JSON-RPC body.
fn assert_invalid_token(refused: &Refused, description: &str) {
    assert_eq!(refused.status, 401, "{refused:?}");
    let header = refused
        .www_authenticate
        .as_deref()
        .expect("WWW-Authenticate");
    assert!(header.starts_with("Bearer "), "{header}");
    assert!(header.contains("error=\"invalid_token\""), "{header}");
    assert!(
        header.contains(&format!("error_description=\"{description}\"")),
        "{header}"
    );
    assert!(header.contains("resource_metadata=\""), "{header}");
    assert_eq!(refused.body["id"], Value::Null, "{:?}", refused.body);
    assert!(
        refused.body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(description)),
        "{:?}",
        refused.body
    );
}

/// Nothing was opened for refused clients, and a client with good credentials still is.
async fn assert_no_session_and_still_serving(server: &RunningServer) {
    assert_eq!(metric(server, "mcp_sessions_peak").await, 0, "no session");
    let mut client = session_with(server, CI_KEY).await;
    assert_eq!(identity_of(&mut client).await["subject"], "ci");
}

// ---------------------------------------------------------------------------------------
// Authentication.

#[tokio::test]
async fn public_metrics_want_credentials_and_the_admin_listeners_do_not() {
    let dir = TempDir::new().expect("tempdir");
    let mut s = auth_settings(&dir);
    s.server.admin_listen = None;
    let server = start_auth(s);
    let addr = server.addr();
    let (status, body) = http_get(addr, "/metrics").await;
    assert_eq!(status, 401, "{body}");
    assert!(!body.contains("mcp_sessions"), "no metrics: {body}");
    let wrong = bearer("ci-0000000000000000000000000000000");
    let (status, _) = http_get_with(addr, "/metrics", &[("Authorization", &wrong)]).await;
    assert_eq!(status, 401);
    let ci = bearer(CI_KEY);
    let (status, body) = http_get_with(addr, "/metrics", &[("Authorization", &ci)]).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("mcp_rejected_total{reason=\"unauthenticated\"} 2"),
        "both refusals counted: {body}"
    );

    // On the admin listener, for operators only, no credentials are asked for.
    let server = start_auth(auth_settings(&dir));
    let admin = server.admin_addr().expect("an admin listener");
    let (status, body) = http_get(admin, "/metrics").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("mcp_sessions"), "{body}");
}

#[tokio::test]
async fn without_credentials_where_required_the_upgrade_is_401_pointing_at_the_metadata() {
    let dir = TempDir::new().expect("tempdir");
    let server = start_auth(auth_settings(&dir));
    let refused = upgrade(&server, &[]).await.refused("refused");
    assert_eq!(refused.status, 401);
    let expected = format!(
        "Bearer resource_metadata=\"http://{}/.well-known/oauth-protected-resource/mcp\"",
        server.addr()
    );
    assert_eq!(refused.www_authenticate.as_deref(), Some(expected.as_str()));
    assert_eq!(refused.body["error"]["code"], -32000, "{:?}", refused.body);
    // Another scheme than Bearer is no credential either.
    let basic = upgrade(&server, &[("Authorization", "Basic Y2k6Y2k=")])
        .await
        .refused("refused");
    assert_eq!(basic.status, 401);
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"unauthenticated\"}").await,
        2
    );
    assert_no_session_and_still_serving(&server).await;
}

#[tokio::test]
async fn an_unknown_api_key_is_401_invalid_token_even_when_authentication_is_optional() {
    let dir = TempDir::new().expect("tempdir");
    let mut s = auth_settings(&dir);
    s.auth.required = false;
    let server = start_auth(s);
    let wrong = bearer("ci-0000000000000000000000000000000");
    let refused = upgrade(&server, &[("Authorization", &wrong)])
        .await
        .refused("refused");
    assert_invalid_token(&refused, "the token is not one this server accepts");
    // A near miss: the right key with one character more.
    let longer = bearer(&format!("{CI_KEY}0"));
    let refused = upgrade(&server, &[("Authorization", &longer)])
        .await
        .refused("refused");
    assert_eq!(refused.status, 401);
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"unauthenticated\"}").await,
        2
    );
    // A Bearer header without a readable token is refused too, never taken for none: a
    // proxy in front could read it otherwise.
    let unreadable =
        "the Authorization header is not one \"Bearer <token>\" (a space, then visible ASCII)";
    for header in ["Bearer\tnot-a-key", "Bearer ", "bearer a b"] {
        let refused = upgrade(&server, &[("Authorization", header)])
            .await
            .refused(header);
        assert_invalid_token(&refused, unreadable);
    }
    let twice = crate::support::http::client()
        .post(format!("http://{}/mcp", server.addr()))
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .header("Authorization", "Basic Y2k6Y2k=")
        .header("Authorization", format!("Bearer {CI_KEY}"))
        .body(rpc(0, "initialize", initialize_params("2025-11-25")).to_string())
        .send()
        .await
        .expect("POST");
    assert_eq!(twice.status(), 401, "two Authorization headers");
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"unauthenticated\"}").await,
        6
    );
    assert_no_session_and_still_serving(&server).await;
    // Another scheme's header is not this server's to read: admitted as without one.
    let mut basic = upgrade(&server, &[("Authorization", "Basic Y2k6Y2k=")])
        .await
        .expect("admitted");
    basic
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_eq!(identity_of(&mut basic).await["authenticated"], false);
    // Without credentials, optional authentication admits the client anonymously.
    let mut anonymous = upgrade(&server, &[]).await.expect("admitted");
    anonymous
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    let me = identity_of(&mut anonymous).await;
    assert_eq!(
        me,
        json!({"subject": "anonymous", "principal": "anonymous", "scopes": [], "authenticated": false})
    );
}

#[tokio::test]
async fn an_api_key_names_the_identity_and_grants_its_scopes() {
    let dir = TempDir::new().expect("tempdir");
    let server = start_auth(auth_settings(&dir));
    let mut ci = session_with(&server, CI_KEY).await;
    assert_eq!(
        identity_of(&mut ci).await,
        json!({"subject": "ci", "principal": "key:ci", "scopes": ["tools"], "authenticated": true})
    );
    let mut bot = session_with(&server, BOT_KEY).await;
    assert_eq!(identity_of(&mut bot).await["subject"], "bot");
    // The scheme is case-insensitive.
    let lower = format!("bearer {BOT_KEY}");
    assert!(upgrade(&server, &[("Authorization", &lower)]).await.is_ok());
}

#[tokio::test]
async fn a_jwt_names_the_identity_by_sub_and_its_scopes_by_scope_or_scp() {
    let dir = TempDir::new().expect("tempdir");
    let server = start_auth(auth_settings(&dir));
    let mut alice = session_with(&server, &hs256(&claims("alice"))).await;
    assert_eq!(
        identity_of(&mut alice).await,
        json!({"subject": "alice", "principal": "jwt:alice", "scopes": ["mcp:read", "mcp:write"], "authenticated": true})
    );
    let mut with_scp = claims("carol");
    with_scp.as_object_mut().expect("object").remove("scope");
    with_scp["scp"] = json!(["files:read"]);
    let mut carol = session_with(&server, &hs256(&with_scp)).await;
    assert_eq!(
        identity_of(&mut carol).await["scopes"],
        json!(["files:read"])
    );
    // An audience list naming this server passes too.
    let mut listed = claims("dave");
    listed["aud"] = json!(["https://other.test", AUDIENCE]);
    let mut dave = session_with(&server, &hs256(&listed)).await;
    assert_eq!(identity_of(&mut dave).await["subject"], "dave");
}

#[tokio::test]
async fn every_invalid_jwt_is_401_invalid_token_saying_why() {
    let dir = TempDir::new().expect("tempdir");
    let server = start_auth(auth_settings(&dir));
    let mut expired = claims("alice");
    expired["exp"] = json!(now() - 5);
    let mut early = claims("alice");
    early["nbf"] = json!(now() + 600);
    let mut audience = claims("alice");
    audience["aud"] = json!("https://elsewhere.test/mcp");
    let mut issuer = claims("alice");
    issuer["iss"] = json!("https://rogue.test");
    let mut no_sub = claims("alice");
    no_sub.as_object_mut().expect("object").remove("sub");
    let empty_sub = claims("");
    let blank_sub = claims(" \t ");
    let mut no_exp = claims("alice");
    no_exp.as_object_mut().expect("object").remove("exp");
    let forged = jsonwebtoken::encode(
        &Header::new(jsonwebtoken::Algorithm::HS256),
        &claims("alice"),
        &EncodingKey::from_secret(b"another secret that is also long enough"),
    )
    .expect("encode");
    let critical = {
        // jsonwebtoken's `Header` has no `crit`: the token is put together by hand.
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let head = b64.encode(r#"{"alg":"HS256","crit":["exp"]}"#);
        let body = b64.encode(claims("alice").to_string());
        let signing_input = format!("{head}.{body}");
        let signature = jsonwebtoken::crypto::sign(
            signing_input.as_bytes(),
            &EncodingKey::from_secret(SECRET.as_bytes()),
            jsonwebtoken::Algorithm::HS256,
        )
        .expect("sign");
        format!("{signing_input}.{signature}")
    };
    let mut text_nbf = claims("alice");
    text_nbf["nbf"] = json!("2030-01-01");
    let mut issuers = claims("alice");
    issuers["iss"] = json!([ISSUER]);
    let mut tampered = hs256(&claims("alice"));
    tampered.insert(tampered.rfind('.').expect("dot") - 2, 'A');
    let cases = [
        (hs256(&expired), "the token has expired"),
        (hs256(&early), "the token is not valid yet"),
        (
            hs256(&audience),
            "the token was issued for another audience",
        ),
        (
            hs256(&issuer),
            "the token was issued by an issuer this server does not accept",
        ),
        (
            hs256(&no_sub),
            "the token lacks a required claim (exp, aud, iss, sub)",
        ),
        (hs256(&empty_sub), "the token's sub is empty"),
        (hs256(&blank_sub), "the token's sub is empty"),
        (
            hs256(&no_exp),
            "the token lacks a required claim (exp, aud, iss, sub)",
        ),
        (forged, "the token's signature is invalid"),
        (tampered, "the token's signature is invalid"),
        ("a.b.c".to_owned(), "the token is malformed"),
        // Correctly signed, but not as RFC 7515 and 7519 have it: a critical extension this
        // server does not understand, an `nbf` that is not a number (which `jsonwebtoken`
        // alone would pass over), several issuers.
        (critical, "the token is malformed"),
        (hs256(&text_nbf), "the token is malformed"),
        (hs256(&issuers), "the token is malformed"),
    ];
    for (token, description) in &cases {
        let auth = bearer(token);
        let refused = upgrade(&server, &[("Authorization", &auth)])
            .await
            .refused(description);
        assert_invalid_token(&refused, description);
    }
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"unauthenticated\"}").await,
        cases.len() as u64
    );
    assert_no_session_and_still_serving(&server).await;
}

#[tokio::test]
async fn the_leeway_tolerates_clock_skew_on_exp_and_nbf() {
    let dir = TempDir::new().expect("tempdir");
    let mut s = auth_settings(&dir);
    s.auth.jwt.leeway_ms = 120_000;
    let server = start_auth(s);
    let mut late = claims("alice");
    late["exp"] = json!(now() - 5);
    let mut early = claims("bob");
    early["nbf"] = json!(now() + 5);
    for token in [hs256(&late), hs256(&early)] {
        let auth = bearer(&token);
        assert!(upgrade(&server, &[("Authorization", &auth)]).await.is_ok());
    }
    let mut too_late = claims("alice");
    too_late["exp"] = json!(now() - 600);
    let auth = bearer(&hs256(&too_late));
    let refused = upgrade(&server, &[("Authorization", &auth)])
        .await
        .refused("past the leeway");
    assert_invalid_token(&refused, "the token has expired");
}

#[tokio::test]
async fn rs256_and_es256_tokens_verify_with_a_pem_key_and_es256_with_a_jwks_by_kid() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let dir = TempDir::new().expect("tempdir");

    // RS256, with the public key of a test-only RSA key pair.
    let mut s = auth_settings(&dir);
    s.auth.jwt.secret_file = PathBuf::new();
    s.auth.jwt.public_key_file = fixtures.join("jwt-rs256-public.pem");
    let server = start_auth(s);
    let private = std::fs::read(fixtures.join("jwt-rs256-private.pem")).expect("fixture");
    let rs256 = |claims: &Value| {
        jsonwebtoken::encode(
            &Header::new(jsonwebtoken::Algorithm::RS256),
            claims,
            &EncodingKey::from_rsa_pem(&private).expect("RSA key"),
        )
        .expect("encode")
    };
    let mut rsa = session_with(&server, &rs256(&claims("rsa-user"))).await;
    assert_eq!(identity_of(&mut rsa).await["subject"], "rsa-user");
    // An HS256 token (even one signed with the public key as its secret) is refused.
    let confused = jsonwebtoken::encode(
        &Header::new(jsonwebtoken::Algorithm::HS256),
        &claims("mallory"),
        &EncodingKey::from_secret(
            &std::fs::read(fixtures.join("jwt-rs256-public.pem")).expect("fixture"),
        ),
    )
    .expect("encode");
    let auth = bearer(&confused);
    let refused = upgrade(&server, &[("Authorization", &auth)])
        .await
        .refused("algorithm confusion refused");
    assert_invalid_token(
        &refused,
        "the token is signed with an algorithm or key this server does not know",
    );
    drop(server);

    // ES256: a P-256 key generated here, as a PEM key and as a JWKS entry with a kid.
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("P-256");
    let signing = EncodingKey::from_ec_pem(key.serialize_pem().as_bytes()).expect("EC key");
    let es256 = |claims: &Value, kid: Option<&str>| {
        let mut header = Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, &signing).expect("encode")
    };
    let mut s = auth_settings(&dir);
    s.auth.jwt.secret_file = PathBuf::new();
    s.auth.jwt.public_key_file = write(dir.path(), "ec.pem", &key.public_key_pem());
    let server = start_auth(s);
    let mut ec = session_with(&server, &es256(&claims("ec-user"), None)).await;
    assert_eq!(identity_of(&mut ec).await["subject"], "ec-user");
    drop(server);

    let point = key.public_key_raw();
    assert_eq!(
        (point.len(), point[0]),
        (65, 4),
        "an uncompressed P-256 point"
    );
    let b64 = |bytes: &[u8]| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    };
    let other = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("P-256");
    let jwk = |kid: &str, point: &[u8]| {
        json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid,
               "x": b64(&point[1..33]), "y": b64(&point[33..])})
    };
    let jwks = json!({"keys": [jwk("old", other.public_key_raw()), jwk("current", point)]});
    let mut s = auth_settings(&dir);
    s.auth.jwt.secret_file = PathBuf::new();
    s.auth.jwt.jwks_file = write(dir.path(), "jwks.json", &jwks.to_string());
    let server = start_auth(s);
    let mut by_kid = session_with(&server, &es256(&claims("jwks-user"), Some("current"))).await;
    assert_eq!(identity_of(&mut by_kid).await["subject"], "jwks-user");
    // Without a kid, every key of the algorithm is tried.
    let mut no_kid = session_with(&server, &es256(&claims("jwks-user"), None)).await;
    assert_eq!(identity_of(&mut no_kid).await["subject"], "jwks-user");
    for (kid, description) in [
        (
            "missing",
            "the token is signed with an algorithm or key this server does not know",
        ),
        ("old", "the token's signature is invalid"),
    ] {
        let auth = bearer(&es256(&claims("jwks-user"), Some(kid)));
        let refused = upgrade(&server, &[("Authorization", &auth)])
            .await
            .refused(kid);
        assert_invalid_token(&refused, description);
    }
}

#[tokio::test]
async fn a_token_without_the_required_scopes_is_403_insufficient_scope() {
    let dir = TempDir::new().expect("tempdir");
    let mut s = auth_settings(&dir);
    s.auth.required_scopes = vec!["mcp:read".into()];
    let server = start_auth(s);
    let mut no_scope = claims("alice");
    no_scope["scope"] = json!("files:read");
    let auth = bearer(&hs256(&no_scope));
    let refused = upgrade(&server, &[("Authorization", &auth)])
        .await
        .refused("refused");
    assert_eq!(refused.status, 403);
    let header = refused.www_authenticate.expect("WWW-Authenticate");
    assert!(
        header.starts_with("Bearer error=\"insufficient_scope\""),
        "{header}"
    );
    assert!(header.contains("scope=\"mcp:read\""), "{header}");
    assert!(header.contains("resource_metadata=\""), "{header}");
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"forbidden\"}").await,
        1
    );
    assert_eq!(metric(&server, "mcp_sessions_peak").await, 0);
    let mut alice = session_with(&server, &hs256(&claims("alice"))).await;
    assert_eq!(identity_of(&mut alice).await["subject"], "alice");
}

#[tokio::test]
async fn a_browser_token_in_the_subprotocol_is_accepted_and_never_echoed() {
    let dir = TempDir::new().expect("tempdir");
    let server = start_auth(auth_settings(&dir));
    for offer in [
        format!("mcp, mcp.auth.{CI_KEY}"),
        format!("mcp.auth.{CI_KEY}, mcp"),
    ] {
        let mut request = server.url().into_client_request().expect("request");
        request.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            HeaderValue::from_str(&offer).expect("value"),
        );
        let (ws, response) = tokio_tungstenite::connect_async(request)
            .await
            .expect("admitted");
        let selected: Vec<&str> = response
            .headers()
            .get_all("sec-websocket-protocol")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        assert_eq!(selected, ["mcp"], "only mcp comes back");
        let all_headers = format!("{:?}", response.headers());
        assert!(!all_headers.contains(CI_KEY), "the token is not echoed");
        let mut client = Client::from_ws(ws);
        client
            .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
            .await;
        assert_eq!(identity_of(&mut client).await["subject"], "ci");
    }
    // A wrong token there is refused like a wrong header.
    let mut request = server.url().into_client_request().expect("request");
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("mcp, mcp.auth.not-a-key"),
    );
    match tokio_tungstenite::connect_async(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 401)
        }
        other => panic!("expected 401, got {:?}", other.map(|(_, r)| r.status())),
    }
}

// ---------------------------------------------------------------------------------------
// Protected resource metadata.

#[tokio::test]
async fn the_protected_resource_metadata_is_served_at_both_well_known_urls() {
    let dir = TempDir::new().expect("tempdir");
    let server = start_auth(auth_settings(&dir));
    let expected = json!({
        "resource": format!("http://{}/mcp", server.addr()),
        "authorization_servers": [ISSUER],
        "scopes_supported": ["mcp:read", "mcp:write"],
        "bearer_methods_supported": ["header"],
    });
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let response = crate::support::http::client()
            .get(format!("http://{}{path}", server.addr()))
            .send()
            .await
            .expect("GET");
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(
            response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("application/json")
        );
        let document: Value =
            serde_json::from_str(&response.text().await.expect("body")).expect("JSON");
        assert_eq!(document, expected, "{path}");
    }
    // Reading it needs no credentials, and opens no session.
    assert_eq!(metric(&server, "mcp_sessions_peak").await, 0);
    // Under a Host the endpoint refuses (a loopback server, a rebinding page's name) it is
    // refused too, rather than name that host as the resource; any Origin may read it.
    let rebound = crate::support::http::client()
        .get(format!(
            "http://{}/.well-known/oauth-protected-resource/mcp",
            server.addr()
        ))
        .header("Host", "evil.example")
        .send()
        .await
        .expect("GET");
    assert_eq!(rebound.status(), 403);
    assert!(!rebound.text().await.expect("body").contains("evil.example"));
    let cross_origin = crate::support::http::client()
        .get(format!(
            "http://{}/.well-known/oauth-protected-resource",
            server.addr()
        ))
        .header("Origin", "https://app.example")
        .send()
        .await
        .expect("GET");
    assert_eq!(cross_origin.status(), 200);
}

/// Without `auth.resource`, the resource is this request's own scheme and `Host`: a proxy's
/// forwarded scheme and host are believed from a trusted proxy only, never from any client
/// (which could make the challenge and the metadata name a site of its choosing).
#[tokio::test]
async fn the_resource_is_named_from_forwarded_headers_only_behind_a_trusted_proxy() {
    let dir = TempDir::new().expect("tempdir");
    let forwarded = [
        ("X-Forwarded-Host", "evil.example"),
        ("X-Forwarded-Proto", "https"),
    ];
    // The `resource` of the metadata `server` serves to a request with `headers`.
    async fn resource(server: &RunningServer, headers: &[(&str, &str)]) -> String {
        let url = format!(
            "http://{}/.well-known/oauth-protected-resource/mcp",
            server.addr()
        );
        let get = headers.iter().fold(
            crate::support::http::client().get(url),
            |get, (name, value)| get.header(*name, *value),
        );
        let response = get.send().await.expect("GET");
        let body: Value =
            serde_json::from_str(&response.text().await.expect("body")).expect("JSON");
        body["resource"].as_str().unwrap_or_default().to_owned()
    }
    let server = start_auth(auth_settings(&dir));
    assert_eq!(
        resource(&server, &forwarded).await,
        format!("http://{}/mcp", server.addr())
    );
    // An HTTP/1.0 request without `Host` names the authority in its request line, userinfo
    // and all: only a `host[:port]` is named back.
    let raw = crate::support::http::raw_exchange(
        server.addr(),
        "GET http://localhost:80@evil.example/.well-known/oauth-protected-resource/mcp HTTP/1.0\r\n\r\n",
    )
    .await;
    let raw = String::from_utf8_lossy(&raw);
    assert!(!raw.contains("evil.example"), "{raw}");
    let refused = upgrade(&server, &forwarded).await.refused("refused");
    let challenge = refused.www_authenticate.unwrap_or_default();
    assert!(
        !challenge.contains("evil.example"),
        "a client's header named the resource: {challenge}"
    );
    // From a trusted proxy, its word is taken.
    let mut behind = auth_settings(&dir);
    behind.server.trusted_proxies = vec!["127.0.0.1/32".into()];
    let server = start_auth(behind);
    assert_eq!(
        resource(&server, &forwarded).await,
        "https://evil.example/mcp"
    );
    // But only the chosen header's family, and its rightmost value, the one the proxy
    // wrote: a client's own `Forwarded` (read whatever the header chosen), or its value
    // left of the proxy's (the leftmost was believed), named the resource.
    let own = format!("http://{}/mcp", server.addr());
    let client_forwarded = [("Forwarded", "host=evil.example;proto=https")];
    assert_eq!(resource(&server, &client_forwarded).await, own);
    let appended = [("X-Forwarded-Host", "evil.example, mcp.example")];
    assert_eq!(resource(&server, &appended).await, "http://mcp.example/mcp");
    let userinfo = [("X-Forwarded-Host", "mcp.example:80@evil.example")];
    assert_eq!(resource(&server, &userinfo).await, own);
}

#[tokio::test]
async fn a_configured_resource_is_the_metadata_resource_and_the_challenge_url() {
    let dir = TempDir::new().expect("tempdir");
    let mut s = auth_settings(&dir);
    s.auth.resource = "https://mcp.example.com/public/mcp".into();
    let server = start_auth(s);
    let refused = upgrade(&server, &[]).await.refused("refused");
    assert_eq!(
        refused.www_authenticate.as_deref(),
        Some("Bearer resource_metadata=\"https://mcp.example.com/.well-known/oauth-protected-resource/public/mcp\"")
    );
    let document: Value = crate::support::http::client()
        .get(format!(
            "http://{}/.well-known/oauth-protected-resource/public/mcp",
            server.addr()
        ))
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .map(|text| serde_json::from_str(&text).expect("JSON"))
        .expect("body");
    assert_eq!(document["resource"], "https://mcp.example.com/public/mcp");
}

#[tokio::test]
async fn without_authentication_there_is_no_metadata_and_tokens_are_ignored() {
    let server = start_auth(settings());
    let response = crate::support::http::client()
        .get(format!(
            "http://{}/.well-known/oauth-protected-resource/mcp",
            server.addr()
        ))
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), 404);
    let mut client = session_with(&server, "whatever").await;
    assert_eq!(identity_of(&mut client).await["authenticated"], false);
}

// ---------------------------------------------------------------------------------------
// Streamable HTTP and sessions bound to their identity.

async fn post(
    server: &RunningServer,
    token: Option<&str>,
    session: Option<&str>,
    body: Value,
) -> reqwest::Response {
    let mut request = crate::support::http::client()
        .post(format!("http://{}/mcp", server.addr()))
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(session) = session {
        request = request.header("Mcp-Session-Id", session);
    }
    request.send().await.expect("POST")
}

fn rpc(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

#[tokio::test]
async fn http_requests_are_authenticated_each_and_a_session_id_is_its_identitys_alone() {
    let dir = TempDir::new().expect("tempdir");
    let server = start_auth(auth_settings(&dir));
    let init = rpc(0, "initialize", initialize_params("2025-11-25"));
    let refused = post(&server, None, None, init.clone()).await;
    assert_eq!(refused.status(), 401);
    assert!(refused
        .headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("Bearer resource_metadata=")));
    assert_eq!(metric(&server, "mcp_sessions_peak").await, 0);

    let opened = post(&server, Some(CI_KEY), None, init).await;
    assert_eq!(opened.status(), 200);
    let id = opened
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id")
        .to_owned();
    let call = rpc(1, "tools/call", json!({"name": "whoami", "arguments": {}}));
    // Another identity with the id: as if there were no such session. So is no token.
    let foreign = post(&server, Some(BOT_KEY), Some(&id), call.clone()).await;
    assert_eq!(foreign.status(), 404);
    let anonymous = post(&server, None, Some(&id), call.clone()).await;
    assert_eq!(anonymous.status(), 401);
    let delete = crate::support::http::client()
        .delete(format!("http://{}/mcp", server.addr()))
        .bearer_auth(BOT_KEY)
        .header("Mcp-Session-Id", &id)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(
        delete.status(),
        404,
        "another identity cannot end it either"
    );
    // Its own identity goes on.
    let own = post(&server, Some(CI_KEY), Some(&id), call).await;
    assert_eq!(own.status(), 200);
    let body: Value = serde_json::from_str(&own.text().await.expect("body")).expect("JSON");
    let me: Value =
        serde_json::from_str(body["result"]["content"][0]["text"].as_str().expect("text"))
            .expect("JSON");
    assert_eq!(me["subject"], "ci");
}

#[tokio::test]
async fn a_jwt_whose_sub_is_an_api_keys_name_is_another_identity() {
    let dir = TempDir::new().expect("tempdir");
    let server = start_auth(auth_settings(&dir));
    let impostor = hs256(&claims("ci"));
    // The API key ci's HTTP session, and a result it stored under an idempotency key.
    let opened = post(
        &server,
        Some(CI_KEY),
        None,
        rpc(0, "initialize", initialize_params("2025-11-25")),
    )
    .await;
    assert_eq!(opened.status(), 200);
    let id = opened
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id")
        .to_owned();
    let keyed = |id: i64| {
        rpc(
            id,
            "tools/call",
            json!({"name": "whoami", "arguments": {}, "_meta": {"idempotencyKey": "k-ci"}}),
        )
    };
    let own = post(&server, Some(CI_KEY), Some(&id), keyed(1)).await;
    assert_eq!(own.status(), 200);
    // A JWT with sub "ci": not that session's owner, as for an unknown session.
    let foreign = post(&server, Some(&impostor), Some(&id), keyed(2)).await;
    assert_eq!(foreign.status(), 404);
    // In a session of its own, the same key runs its own call: ci's result is not its.
    let mut jwt_ci = session_with(&server, &impostor).await;
    let answer = jwt_ci.send_request(keyed(3)).await;
    let me: Value = serde_json::from_str(&tool_text(&answer)).expect("JSON");
    assert_eq!(
        (&me["subject"], &me["principal"]),
        (&json!("ci"), &json!("jwt:ci"))
    );
    assert_eq!(metric(&server, "mcp_dedup_hits_total").await, 0);
    // The API key's own retry gets its stored answer.
    let retry = post(&server, Some(CI_KEY), Some(&id), keyed(4)).await;
    let body: Value = serde_json::from_str(&retry.text().await.expect("body")).expect("JSON");
    let me: Value = serde_json::from_str(&tool_text(&body)).expect("JSON");
    assert_eq!(me["principal"], "key:ci");
    assert_eq!(metric(&server, "mcp_dedup_hits_total").await, 1);

    // Nor does it resume the key's WebSocket session.
    let ws_id = parked_session_as(&server, CI_KEY).await;
    wait_metric(&server, "mcp_parked_sessions", 1).await;
    let refused = upgrade(
        &server,
        &[
            ("Authorization", &bearer(&impostor)),
            ("Mcp-Session-Id", &ws_id),
        ],
    )
    .await
    .refused("a JWT naming the key");
    assert_eq!(refused.status, 404);
}

/// A WebSocket session opened with `token` and initialized, its connection then dropped
/// (the caller waits for it to be parked): its id.
async fn parked_session_as(server: &RunningServer, token: &str) -> String {
    let mut opened = upgrade(server, &[("Authorization", &bearer(token))])
        .await
        .expect("admitted");
    let init = opened
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    init["result"]["_meta"]["mcp-ws/sessionId"]
        .as_str()
        .expect("session id")
        .to_owned()
}

#[tokio::test]
async fn a_websocket_session_resumes_only_for_its_own_identity() {
    let dir = TempDir::new().expect("tempdir");
    let server = start_auth(auth_settings(&dir));
    let id = parked_session_as(&server, CI_KEY).await;
    wait_metric(&server, "mcp_parked_sessions", 1).await;
    let foreign = upgrade(
        &server,
        &[("Authorization", &bearer(BOT_KEY)), ("Mcp-Session-Id", &id)],
    )
    .await
    .refused("another identity");
    assert_eq!(foreign.status, 404);
    let mut resumed = upgrade(
        &server,
        &[("Authorization", &bearer(CI_KEY)), ("Mcp-Session-Id", &id)],
    )
    .await
    .expect("its own identity resumes");
    assert_eq!(identity_of(&mut resumed).await["subject"], "ci");
    assert_eq!(metric(&server, "mcp_parked_sessions").await, 0);
    // And while its socket is attached, another identity cannot take it over.
    let foreign = upgrade(
        &server,
        &[("Authorization", &bearer(BOT_KEY)), ("Mcp-Session-Id", &id)],
    )
    .await
    .refused("another identity");
    assert_eq!(foreign.status, 404);
    resumed.expect_nothing_pending().await;
}

// ---------------------------------------------------------------------------------------
// Authorization.

fn policy(identities: &[&str], scopes: &[&str]) -> PolicySettings {
    PolicySettings {
        identities: identities.iter().map(|s| s.to_string()).collect(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        tools: vec!["*".into()],
        resources: vec!["*".into()],
        prompts: vec!["*".into()],
        methods: vec!["*".into()],
    }
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// `ci` may use everything; `bot` only `echo`, `whoami` and tools `t-*` that end in an even
/// digit, no resource but the readme, no prompt, and no `logging/*`.
fn policy_settings(dir: &TempDir) -> Settings {
    let mut s = auth_settings(dir);
    let mut bot = policy(&["bot"], &[]);
    bot.tools = strings(&["echo", "whoami", "t-*0", "t-*2", "t-*4", "t-*6", "t-*8"]);
    bot.resources = strings(&["mcp-ws://demo/readme"]);
    bot.prompts = vec![];
    bot.methods = strings(&["tools/*", "resources/*", "prompts/*", "completion/*"]);
    s.auth.policies = vec![policy(&["ci"], &[]), bot];
    s
}

/// Tools `t-00` … `t-09` besides the demo set.
fn start_policy(settings: Settings) -> RunningServer {
    start_with(settings, |mut b| {
        b = b.tool(Tool::new("whoami", "Who the caller is", whoami));
        for i in 0..10 {
            b = b.tool(Tool::new(format!("t-0{i}"), "A numbered tool", whoami));
        }
        b
    })
}

/// Every name of a list, page after page, checking that the pages chain.
async fn list_all(client: &mut Client, method: &str, member: &str, key: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..50 {
        let params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let response = client.request(method, params).await;
        let result = response["result"].clone();
        let page = result[member].as_array().expect("a list");
        assert!(
            !page.is_empty() || cursor.is_none(),
            "no empty page after a cursor: {result}"
        );
        names.extend(
            page.iter()
                .map(|e| e[key].as_str().expect("key").to_owned()),
        );
        match result.get("nextCursor").and_then(Value::as_str) {
            Some(next) => cursor = Some(next.to_owned()),
            None => return names,
        }
    }
    panic!("the pages never end");
}

#[tokio::test]
async fn lists_show_each_identity_what_it_may_use_and_page_through_exactly_that() {
    let dir = TempDir::new().expect("tempdir");
    let mut s = policy_settings(&dir);
    s.limits.page_size = 3;
    let server = start_policy(s);
    let mut ci = session_with(&server, CI_KEY).await;
    let all = list_all(&mut ci, "tools/list", "tools", "name").await;
    let mut expected_all = strings(&["add", "echo", "fail", "sleep", "whoami"]);
    expected_all.extend((0..10).map(|i| format!("t-0{i}")));
    expected_all.sort();
    assert_eq!(all, expected_all);

    let mut bot = session_with(&server, BOT_KEY).await;
    let visible = list_all(&mut bot, "tools/list", "tools", "name").await;
    assert_eq!(
        visible,
        strings(&["echo", "t-00", "t-02", "t-04", "t-06", "t-08", "whoami"])
    );
    let resources = list_all(&mut bot, "resources/list", "resources", "uri").await;
    assert_eq!(resources, strings(&["mcp-ws://demo/readme"]));
    let prompts = bot.request("prompts/list", json!({})).await;
    assert_eq!(prompts["result"]["prompts"], json!([]), "{prompts}");
    assert_eq!(
        list_all(&mut ci, "prompts/list", "prompts", "name").await,
        strings(&["greet"])
    );
}

#[tokio::test]
async fn another_spelling_of_a_uri_reaches_no_more_than_the_policy_allows() {
    let dir = TempDir::new().expect("tempdir");
    let mut s = policy_settings(&dir);
    // `bot` may use only URIs spelled with an escape after the demo's prefix: its spelling
    // `%72eadme` passes, the readme it means (`readme`, RFC 3986 equivalent) does not.
    s.auth.policies[1].resources = strings(&["mcp-ws://demo/%*"]);
    let server = start_policy(s);
    let spelled = "mcp-ws://demo/%72eadme";
    let mut ci = session_with(&server, CI_KEY).await;
    let read = ci.request("resources/read", json!({"uri": spelled})).await;
    assert_eq!(
        read["result"]["contents"][0]["uri"], "mcp-ws://demo/readme",
        "another spelling finds the resource, answered under its own URI: {read}"
    );
    let mut bot = session_with(&server, BOT_KEY).await;
    for method in ["resources/read", "resources/subscribe"] {
        let refused = bot.request(method, json!({"uri": spelled})).await;
        assert_eq!(
            assert_error(&refused, &refused["id"], -32002)["data"],
            json!({"uri": spelled}),
            "{method}: the spelling the policy allows does not lead to what it forbids"
        );
    }
}

#[tokio::test]
async fn what_an_identity_may_not_use_answers_exactly_as_what_does_not_exist() {
    let dir = TempDir::new().expect("tempdir");
    let server = start_policy(policy_settings(&dir));
    let mut bot = session_with(&server, BOT_KEY).await;

    // A forbidden tool is an unknown tool: the same code and message shape.
    let forbidden = bot.call_tool("add", json!({"a": 1, "b": 2})).await;
    let missing = bot.call_tool("no-such-tool", json!({})).await;
    let forbidden_error = assert_error(&forbidden, &forbidden["id"], -32602);
    let missing_error = assert_error(&missing, &missing["id"], -32602);
    assert_eq!(forbidden_error["message"], "Unknown tool: add");
    assert_eq!(missing_error["message"], "Unknown tool: no-such-tool");
    assert_eq!(forbidden_error["data"], json!({"tool": "add"}));
    // A forbidden method is an unknown method.
    let forbidden = bot
        .request("logging/setLevel", json!({"level": "debug"}))
        .await;
    let missing = bot.request("no/such-method", json!({})).await;
    let f = assert_error(&forbidden, &forbidden["id"], -32601);
    let m = assert_error(&missing, &missing["id"], -32601);
    assert_eq!(f["message"], m["message"]);
    assert_eq!(f["data"], json!({"method": "logging/setLevel"}));
    // A forbidden prompt is an unknown prompt, for get and for completion.
    let forbidden = bot
        .request(
            "prompts/get",
            json!({"name": "greet", "arguments": {"name": "x"}}),
        )
        .await;
    assert_eq!(
        assert_error(&forbidden, &forbidden["id"], -32602)["message"],
        "Unknown prompt: greet"
    );
    let completion = bot
        .request(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "greet"},
                   "argument": {"name": "name", "value": "A"}}),
        )
        .await;
    assert_eq!(
        assert_error(&completion, &completion["id"], -32602)["message"],
        "Unknown prompt: greet"
    );
    // A forbidden resource is not found, for read and subscribe.
    let forbidden = bot
        .request("resources/read", json!({"uri": "file:///etc/passwd"}))
        .await;
    assert_eq!(
        assert_error(&forbidden, &forbidden["id"], -32002)["data"],
        json!({"uri": "file:///etc/passwd"})
    );
    // What it may use works.
    let echo = bot.call_tool("echo", json!({"text": "hi"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "hi");
    let even = bot.call_tool("t-04", json!({})).await;
    assert!(even["result"]["content"][0]["text"].is_string(), "{even}");
    let odd = bot.call_tool("t-03", json!({})).await;
    assert_error(&odd, &odd["id"], -32602);
    let readme = bot
        .request("resources/read", json!({"uri": "mcp-ws://demo/readme"}))
        .await;
    assert!(readme["result"]["contents"].is_array(), "{readme}");
    bot.expect_nothing_pending().await;
    // Another identity on the same server is not limited.
    let mut ci = session_with(&server, CI_KEY).await;
    let add = ci.call_tool("add", json!({"a": 1, "b": 2})).await;
    assert_eq!(add["result"]["content"][0]["text"], "3");
    let level = ci
        .request("logging/setLevel", json!({"level": "debug"}))
        .await;
    assert_eq!(level["result"], json!({}));
}

#[tokio::test]
async fn a_client_no_policy_applies_to_is_refused_and_scopes_select_policies() {
    let dir = TempDir::new().expect("tempdir");
    let mut s = auth_settings(&dir);
    s.auth.required = false;
    let mut readers = policy(&[], &["mcp:read"]);
    readers.tools = strings(&["whoami"]);
    let mut anonymous = policy(&["anonymous"], &[]);
    anonymous.tools = strings(&["echo"]);
    s.auth.policies = vec![readers, anonymous];
    let server = start_auth(s);

    // bot (an API key without scopes) matches no policy: 403, naming the scopes that would.
    let refused = upgrade(&server, &[("Authorization", &bearer(BOT_KEY))])
        .await
        .refused("no policy");
    assert_eq!(refused.status, 403);
    let header = refused.www_authenticate.expect("WWW-Authenticate");
    assert!(header.contains("error=\"insufficient_scope\""), "{header}");
    assert!(header.contains("scope=\"mcp:read\""), "{header}");
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"forbidden\"}").await,
        1
    );

    // A JWT with the scope is admitted under the scope's policy.
    let mut alice = session_with(&server, &hs256(&claims("alice"))).await;
    let tools = alice.request("tools/list", json!({})).await;
    assert_eq!(tools["result"]["tools"].as_array().map(Vec::len), Some(1));
    assert_eq!(identity_of(&mut alice).await["subject"], "alice");
    // Anonymous clients get the anonymous policy.
    let mut nobody = upgrade(&server, &[]).await.expect("admitted");
    nobody
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    let tools = nobody.request("tools/list", json!({})).await;
    assert_eq!(tools["result"]["tools"][0]["name"], "echo", "{tools}");
    assert_eq!(tools["result"]["tools"].as_array().map(Vec::len), Some(1));

    // Without an anonymous policy, an anonymous client is told to authenticate.
    let mut s = auth_settings(&dir);
    s.auth.required = false;
    s.auth.policies = vec![policy(&["ci"], &[])];
    let server = start_auth(s);
    let refused = upgrade(&server, &[]).await.refused("no policy");
    assert_eq!(refused.status, 401);
    assert!(refused
        .www_authenticate
        .is_some_and(|h| h.starts_with("Bearer resource_metadata=")));
}

/// A policy entry spelled as a principal (`key:ci`) names that proof's identity only: a JWT
/// whose `sub` is spelled the same is not the API key, and no policy applies to it (403),
/// while a bare entry still matches a subject however proven.
#[tokio::test]
async fn a_subject_spelled_as_a_principal_is_not_that_identity() {
    let dir = TempDir::new().expect("tempdir");
    let mut s = auth_settings(&dir);
    s.auth.policies = vec![policy(&["key:ci", "bot"], &[])];
    let server = start_auth(s);
    let admitted = |token: String| {
        let server = &server;
        async move { upgrade(server, &[("Authorization", &bearer(&token))]).await }
    };
    assert!(admitted(CI_KEY.to_owned()).await.is_ok(), "the API key ci");
    for sub in ["key:ci", "jwt:key:ci"] {
        let refused = admitted(hs256(&claims(sub)))
            .await
            .refused("no policy applies");
        assert_eq!(refused.status, 403, "sub {sub}");
    }
    assert!(admitted(hs256(&claims("bot"))).await.is_ok(), "a bare name");
}

/// Authentication required, and two policies by scope: `wide` (every tool) and `narrow`
/// (`echo` only).
fn wide_and_narrow_settings(dir: &TempDir) -> Settings {
    let mut s = auth_settings(dir);
    let mut narrow_policy = policy(&[], &["narrow"]);
    narrow_policy.tools = strings(&["echo"]);
    s.auth.policies = vec![policy(&[], &["wide"]), narrow_policy];
    s
}

/// A JWT of `alice` with the one scope `scope`.
fn scoped_token(scope: &str) -> String {
    let mut claims = claims("alice");
    claims["scope"] = json!(scope);
    hs256(&claims)
}

/// Two JWTs of one subject, `wide` (every tool) and `narrow` (`echo` only), on a server
/// requiring authentication.
fn wide_and_narrow(dir: &TempDir) -> (RunningServer, String, String) {
    let server = start_auth(wide_and_narrow_settings(dir));
    (server, scoped_token("wide"), scoped_token("narrow"))
}

async fn json_of(response: reqwest::Response) -> Value {
    let text = response.text().await.expect("body");
    serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// An HTTP session opened with `token`: its id.
async fn http_session(server: &RunningServer, token: &str) -> String {
    let init = rpc(0, "initialize", initialize_params("2025-11-25"));
    let opened = post(server, Some(token), None, init).await;
    assert_eq!(opened.status(), 200);
    opened
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id")
        .to_owned()
}

/// An HTTP session is its credential's: another credential of the same subject that grants
/// less is told it does not exist (everything the session holds was made under the wider
/// one: a remembered answer to a retried id, the streams a `Last-Event-ID` replays, the
/// requests to the client a response would answer), and one that grants as much or more is
/// served with what the session's own grants.
#[tokio::test]
async fn an_http_session_is_refused_to_a_narrower_credential_of_its_subject() {
    let dir = TempDir::new().expect("tempdir");
    let (server, wide, narrow) = wide_and_narrow(&dir);
    let id = http_session(&server, &wide).await;
    let add = rpc(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 1, "b": 2}}),
    );
    let allowed = json_of(post(&server, Some(&wide), Some(&id), add.clone()).await).await;
    assert_eq!(allowed["result"]["content"][0]["text"], "3", "{allowed}");

    // The narrower token: the same id again (which the session remembers the answer of), a
    // new request, the session's stream resumed, the session ended: all 404, as for an id
    // that never existed.
    for request in [add.clone(), rpc(2, "tools/list", json!({}))] {
        let refused = post(&server, Some(&narrow), Some(&id), request).await;
        assert_eq!(refused.status(), 404);
        assert_eq!(json_of(refused).await["error"]["code"], -32001);
    }
    let client = crate::support::http::client();
    let url = format!("http://{}/mcp", server.addr());
    let resumed = client
        .get(&url)
        .bearer_auth(&narrow)
        .header("Accept", "text/event-stream")
        .header("Mcp-Session-Id", &id)
        .header("Last-Event-ID", "0_0")
        .send()
        .await
        .expect("GET");
    assert_eq!(resumed.status(), 404);
    let ended = client
        .delete(&url)
        .bearer_auth(&narrow)
        .header("Mcp-Session-Id", &id)
        .send()
        .await
        .expect("DELETE");
    assert_eq!(ended.status(), 404);
    // The session is the wider token's still: its retry gets the remembered answer.
    let again = json_of(post(&server, Some(&wide), Some(&id), add.clone()).await).await;
    assert_eq!(again, allowed);

    // A session opened with the narrower token, used with the wider one: served with what
    // the session's own credential grants.
    let narrow_id = http_session(&server, &narrow).await;
    let refused = json_of(post(&server, Some(&wide), Some(&narrow_id), add).await).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let listed = json_of(
        post(
            &server,
            Some(&wide),
            Some(&narrow_id),
            rpc(3, "tools/list", json!({})),
        )
        .await,
    )
    .await;
    assert_eq!(tool_names(&listed), ["echo"], "{listed}");
}

/// With sessions in Redis, the credential a session was opened with travels with its record:
/// another node refuses it to a narrower credential of the subject (404, a stream resumed
/// from the mirror included), and serves a wider one with the session's own grant, not the
/// taker's.
#[tokio::test]
async fn another_node_holds_a_session_to_the_credential_it_was_opened_with() {
    let dir = TempDir::new().expect("tempdir");
    let redis = crate::support::redis::RedisServer::start();
    let node = || {
        let mut s = wide_and_narrow_settings(&dir);
        s.redis.url = redis.url();
        s.redis.key_prefix = "grant:".into();
        start_auth(s)
    };
    let (first, second) = (node(), node());
    let (wide, narrow) = (scoped_token("wide"), scoped_token("narrow"));
    let add = rpc(
        1,
        "tools/call",
        json!({"name": "add", "arguments": {"a": 1, "b": 2}}),
    );

    let id = http_session(&first, &wide).await;
    let refused = post(&second, Some(&narrow), Some(&id), add.clone()).await;
    assert_eq!(refused.status(), 404);
    let resumed = crate::support::http::client()
        .get(format!("http://{}/mcp", second.addr()))
        .bearer_auth(&narrow)
        .header("Accept", "text/event-stream")
        .header("Mcp-Session-Id", &id)
        .header("Last-Event-ID", "0_0")
        .send()
        .await
        .expect("GET");
    assert_eq!(resumed.status(), 404);
    let allowed = json_of(post(&second, Some(&wide), Some(&id), add.clone()).await).await;
    assert_eq!(allowed["result"]["content"][0]["text"], "3", "{allowed}");

    // Held by the other node now: still not the narrower token's there.
    let refused = post(&second, Some(&narrow), Some(&id), add.clone()).await;
    assert_eq!(refused.status(), 404);

    // Opened with the narrower token; taken up on the other node by the wider one.
    let narrow_id = http_session(&first, &narrow).await;
    let taken = json_of(post(&second, Some(&wide), Some(&narrow_id), add.clone()).await).await;
    assert_eq!(taken["error"]["code"], -32602, "{taken}");

    // A record written before records carried the grant: only a credential that may use
    // everything takes it up.
    let old_id = http_session(&first, &wide).await;
    let key = format!("grant:session:{{{old_id}}}");
    let mut redis_connection = redis.connection().expect("redis answers");
    let json: String = ::redis::cmd("GET")
        .arg(&key)
        .query(&mut redis_connection)
        .expect("the record");
    let mut record: Value = serde_json::from_str(&json).expect("a JSON record");
    assert!(record.get("grant").is_some(), "{record}");
    record.as_object_mut().expect("an object").remove("grant");
    let () = ::redis::cmd("SET")
        .arg(&key)
        .arg(record.to_string())
        .arg("KEEPTTL")
        .query(&mut redis_connection)
        .expect("SET");
    let refused = post(&second, Some(&narrow), Some(&old_id), add.clone()).await;
    assert_eq!(refused.status(), 404);
    let allowed = json_of(post(&second, Some(&wide), Some(&old_id), add).await).await;
    assert_eq!(allowed["result"]["content"][0]["text"], "3", "{allowed}");
}

/// A parked WebSocket session resumes only for a credential of its subject that grants at
/// least what the one it was opened with did (its missed answers, made under that one, go to
/// the resuming connection); a wider one resuming a narrower session is served with the
/// session's.
#[tokio::test]
async fn a_websocket_session_resumes_only_for_a_credential_that_grants_as_much() {
    let dir = TempDir::new().expect("tempdir");
    let (server, wide, narrow) = wide_and_narrow(&dir);
    let id = parked_session_as(&server, &wide).await;
    wait_metric(&server, "mcp_parked_sessions", 1).await;

    let refused = upgrade(
        &server,
        &[("Authorization", &bearer(&narrow)), ("Mcp-Session-Id", &id)],
    )
    .await
    .refused("a narrower credential resumes nothing");
    assert_eq!(refused.status, 404);
    assert_eq!(
        metric(&server, "mcp_parked_sessions").await,
        1,
        "still parked"
    );

    let add = json!({"name": "add", "arguments": {"a": 1, "b": 2}});
    let mut wide_again = upgrade(
        &server,
        &[("Authorization", &bearer(&wide)), ("Mcp-Session-Id", &id)],
    )
    .await
    .expect("resumes");
    let allowed = wide_again.request("tools/call", add.clone()).await;
    assert_eq!(allowed["result"]["content"][0]["text"], "3", "{allowed}");
    drop(wide_again);

    // A session opened with the narrower token, resumed with the wider one.
    let narrow_id = parked_session_as(&server, &narrow).await;
    wait_metric(&server, "mcp_parked_sessions", 2).await;
    let mut resumed = upgrade(
        &server,
        &[
            ("Authorization", &bearer(&wide)),
            ("Mcp-Session-Id", &narrow_id),
        ],
    )
    .await
    .expect("a wider credential resumes");
    let refused = resumed.request("tools/call", add).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let names = list_all(&mut resumed, "tools/list", "tools", "name").await;
    assert_eq!(names, ["echo"]);
}

/// Over HTTP, a stream ends when the JWT of the request that opened it expires, as a
/// WebSocket connection is closed then: a POST's answer stream (a call reporting progress)
/// ends without the answer of a call still running (which stays in the session's log, for a `GET` with `Last-Event-ID`
/// and a fresh token), and a `GET` stream ends though the server would keep it alive. (Both
/// went on for as long as the call and the client lasted.)
#[tokio::test]
async fn an_http_stream_ends_when_the_jwt_that_opened_it_expires() {
    use futures_util::StreamExt;
    let dir = TempDir::new().expect("tempdir");
    let server = start_auth(auth_settings(&dir));
    let mut short = claims("alice");
    short["exp"] = json!(now() + 2);
    let (short, fresh) = (hs256(&short), hs256(&claims("alice")));
    let id = http_session(&server, &fresh).await;
    let url = format!("http://{}/mcp", server.addr());
    let call = rpc(
        7,
        "tools/call",
        // Progress makes the answer a stream.
        json!({"name": "sleep", "arguments": {"ms": 4_000}, "_meta": {"progressToken": "p"}}),
    );
    let streamed = post(&server, Some(&short), Some(&id), call).await;
    assert_eq!(streamed.status(), 200);
    let mut body = streamed.bytes_stream();
    let mut text = String::new();
    let read_to_end = async {
        while let Some(chunk) = body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.expect("a chunk")));
        }
    };
    tokio::time::timeout(std::time::Duration::from_millis(3_500), read_to_end)
        .await
        .expect("the stream ends as the token expires, before the call's answer");
    assert!(!text.contains("slept"), "{text}");
    let primed = text
        .lines()
        .find_map(|line| {
            line.strip_prefix("id: ")
                .or_else(|| line.strip_prefix("id:"))
        })
        .expect("an event id")
        .trim()
        .to_owned();
    // The answer is fetched with a fresh token.
    let resumed = crate::support::http::client()
        .get(&url)
        .bearer_auth(&fresh)
        .header("Accept", "text/event-stream")
        .header("Mcp-Session-Id", &id)
        .header("Last-Event-ID", &primed)
        .send()
        .await
        .expect("GET");
    assert_eq!(resumed.status(), 200);
    let mut body = resumed.bytes_stream();
    let mut text = String::new();
    while !text.contains("slept") {
        let chunk = tokio::time::timeout(READ_TIMEOUT, body.next())
            .await
            .expect("the answer in time")
            .expect("the stream goes on")
            .expect("a chunk");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }

    // A GET stream opened with a token about to expire ends with it.
    let mut short = claims("alice");
    short["exp"] = json!(now() + 2);
    let listening = crate::support::http::client()
        .get(&url)
        .bearer_auth(hs256(&short))
        .header("Accept", "text/event-stream")
        .header("Mcp-Session-Id", &id)
        .send()
        .await
        .expect("GET");
    assert_eq!(listening.status(), 200);
    let mut body = listening.bytes_stream();
    let ended = tokio::time::timeout(READ_TIMEOUT, async {
        while let Some(chunk) = body.next().await {
            chunk.expect("a chunk");
        }
    })
    .await;
    assert!(ended.is_ok(), "the GET stream outlived its token");
}

/// A WebSocket session ends when the JWT it was opened with expires: a call still in flight
/// gets its answer (-32023), then the connection closes with 1008.
#[tokio::test]
async fn a_websocket_session_ends_when_its_jwt_expires() {
    let dir = TempDir::new().expect("tempdir");
    let server = start_auth(auth_settings(&dir));
    let mut short = claims("alice");
    short["exp"] = json!(now() + 2);
    let mut client = session_with(&server, &hs256(&short)).await;
    let me = identity_of(&mut client).await;
    assert_eq!(me["principal"], "jwt:alice", "served until it expires");

    let id = json!("long");
    client
        .send_json(json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"ms": 60_000}},
        }))
        .await;
    let answer = client.recv_response(&id).await;
    let error = assert_error(&answer, &id, -32023);
    assert_eq!(
        error["message"],
        "The connection's credential expired: reconnect with a fresh one"
    );
    let close = client.recv_close().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1008, "{close:?}");
    assert_eq!(close.reason.as_str(), "credential expired");
}
