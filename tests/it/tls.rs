//! TLS and mutual TLS over real `wss://` (tokio-tungstenite with rustls) and `https://`
//! (reqwest with rustls), with a CA, server and client certificates generated here by `rcgen`:
//!
//! - With `[tls]` the listener speaks TLS only: MCP over `wss://` and Streamable HTTP over
//!   `https://` work for a client that trusts the CA; a plain `ws://` client and a client that
//!   does not trust the CA get no session.
//! - `client_auth = "required"`: a client certificate chained to `client_ca_file` is needed
//!   for the handshake (none, or one from another CA, fails it, and the server goes on
//!   serving), and its subject's CN becomes the identity tools see, over both transports.
//! - `client_auth = "optional"`: clients without a certificate are anonymous; a certificate
//!   without a CN is named by its first SAN; a bearer token names the client over its
//!   certificate; with `auth.required`, a certificate is credentials enough.
//! - Unusable TLS settings stop the server at build time, naming the setting.
//! - One address cannot hold every TLS handshake place with idle connections: past
//!   `server.max_handshakes_per_ip` handshakes in progress, its connections are closed at
//!   once (counted), while another address completes its handshake; the places come back
//!   when the handshakes end. A handshake not completed within
//!   `server.tls_handshake_timeout_ms` is closed. A connection holds its place among its
//!   address's open connections from its accept: one over `server.max_connections_per_ip`
//!   is closed before its handshake.

use crate::support::http::metric;
use crate::support::*;

use mcp_ws::config::ClientAuth;
use mcp_ws::{RequestContext, RunningServer, Server, Settings, Tool, ToolError};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore};
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tempfile::TempDir;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::Connector;

/// A certificate and its key, DER and PEM.
struct Certified {
    der: CertificateDer<'static>,
    key_der: Vec<u8>,
    cert_pem: String,
    key_pem: String,
}

impl Certified {
    fn chain(&self) -> Vec<CertificateDer<'static>> {
        vec![self.der.clone()]
    }

    fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }
}

/// A CA, the server's certificate (localhost, 127.0.0.1), client certificates, and the files
/// the server reads (gateway.rs's `wss://` client test uses them too).
pub(crate) struct Pki {
    dir: TempDir,
    ca: CertificateDer<'static>,
    /// CN=alice.
    alice: Certified,
    /// No CN; SAN bot.example.
    bot: Certified,
    /// CN=mallory, from a CA the server does not trust.
    mallory: Certified,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA")
}

fn issue(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    common_name: Option<&str>,
    sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> Certified {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .expect("params");
    params.distinguished_name = DistinguishedName::new();
    if let Some(cn) = common_name {
        params.distinguished_name.push(DnType::CommonName, cn);
    }
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, issuer).expect("sign");
    Certified {
        der: cert.der().clone(),
        key_der: key.serialize_der(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// The certificates, and settings serving TLS with them (`tls.client_ca_file` is the CA's
/// certificate, in PEM).
pub(crate) fn make_pki() -> (Pki, Settings) {
    let dir = TempDir::new().expect("tempdir");
    let authority = ca("mcp-ws test CA");
    let server = issue(
        &authority,
        Some("localhost"),
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let client = ExtendedKeyUsagePurpose::ClientAuth;
    let alice = issue(&authority, Some("alice"), &[], client.clone());
    let bot = issue(&authority, None, &["bot.example"], client.clone());
    let mallory = issue(&ca("another CA"), Some("mallory"), &[], client);
    let write = |name: &str, text: &str| -> PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path
    };
    let mut s = settings();
    s.tls.cert_file = write("server.pem", &server.cert_pem);
    s.tls.key_file = write("server.key", &server.key_pem);
    s.tls.client_ca_file = write("ca.pem", &authority.pem());
    let pki = Pki {
        ca: authority.der().clone(),
        dir,
        alice,
        bot,
        mallory,
    };
    (pki, s)
}

/// A rustls client configuration trusting `ca`, presenting `identity` if any.
fn client_tls(ca: Option<&CertificateDer<'static>>, identity: Option<&Certified>) -> ClientConfig {
    let mut roots = RootCertStore::empty();
    if let Some(ca) = ca {
        roots.add(ca.clone()).expect("root");
    }
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots);
    match identity {
        Some(certified) => builder
            .with_client_auth_cert(certified.chain(), certified.key())
            .expect("client certificate"),
        None => builder.with_no_client_auth(),
    }
}

async fn whoami(_args: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let identity = ctx.identity();
    Ok(
        json!({"subject": identity.subject(), "authenticated": identity.is_authenticated()})
            .to_string(),
    )
}

fn start_tls(settings: Settings) -> RunningServer {
    start_with(settings, |b| {
        b.tool(Tool::new("whoami", "Who the caller is", whoami))
    })
}

/// Connects over `wss://`; `Err` carries why (an HTTP status, or the TLS/IO failure).
async fn wss(
    server: &RunningServer,
    tls: ClientConfig,
    headers: &[(&'static str, &str)],
) -> Result<Client, String> {
    let mut request = server.url().into_client_request().expect("request");
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", HeaderValue::from_static("mcp"));
    for (name, value) in headers {
        request
            .headers_mut()
            .insert(*name, HeaderValue::from_str(value).expect("value"));
    }
    let connector = Connector::Rustls(Arc::new(tls));
    match tokio_tungstenite::connect_async_tls_with_config(request, None, false, Some(connector))
        .await
    {
        Ok((ws, _)) => Ok(Client::from_ws(ws)),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(format!("HTTP {}", response.status().as_u16()))
        }
        Err(other) => Err(other.to_string()),
    }
}

async fn who(client: &mut Client) -> Value {
    let init = client
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_result(&init, &json!(0));
    let response = client.call_tool("whoami", json!({})).await;
    serde_json::from_str(
        response["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("whoami answers: {response}")),
    )
    .expect("JSON")
}

fn https_client(tls: ClientConfig) -> reqwest::Client {
    crate::support::http::client_builder()
        .tls_backend_preconfigured(tls)
        .build()
        .expect("https client")
}

/// `initialize` then `whoami` over Streamable HTTP; the identity, or the request error.
async fn https_who(server: &RunningServer, client: &reqwest::Client) -> Result<Value, String> {
    let url = format!("https://{}/mcp", server.addr());
    let post = |session: Option<&str>, body: Value| {
        let mut request = client
            .post(&url)
            .header("Accept", "application/json, text/event-stream")
            .header("Content-Type", "application/json")
            .body(body.to_string());
        if let Some(session) = session {
            request = request.header("Mcp-Session-Id", session);
        }
        request.send()
    };
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize",
        "params": initialize_params("2025-11-25")});
    let response = post(None, init).await.map_err(|e| format!("{e:?}"))?;
    assert_eq!(response.status(), 200);
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id")
        .to_owned();
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call",
        "params":{"name":"whoami","arguments":{}}});
    let response = post(Some(&session), call)
        .await
        .map_err(|e| format!("{e:?}"))?;
    assert_eq!(response.status(), 200);
    let body: Value = serde_json::from_str(&response.text().await.expect("body")).expect("JSON");
    Ok(
        serde_json::from_str(body["result"]["content"][0]["text"].as_str().expect("text"))
            .expect("JSON"),
    )
}

fn sessions_peak(server: &RunningServer) -> u64 {
    server.shared().metrics.sessions.peak()
}

#[tokio::test]
async fn wss_and_https_serve_mcp_over_tls() {
    let (pki, s) = make_pki();
    let server = start_tls(s);
    assert!(server.url().starts_with("wss://"), "{}", server.url());

    // Clients that cannot speak to it: plain WebSocket, and TLS without trusting the CA.
    let plain = format!("ws://{}/mcp", server.addr());
    assert!(tokio_tungstenite::connect_async(plain).await.is_err());
    let untrusting = wss(&server, client_tls(None, None), &[]).await;
    assert!(
        untrusting.is_err(),
        "the server's certificate is not trusted"
    );
    assert_eq!(sessions_peak(&server), 0);

    let mut client = wss(&server, client_tls(Some(&pki.ca), None), &[])
        .await
        .expect("wss connects");
    assert_eq!(
        who(&mut client).await,
        json!({"subject": "anonymous", "authenticated": false})
    );
    let echo = client.call_tool("echo", json!({"text": "over TLS"})).await;
    assert_eq!(echo["result"]["content"][0]["text"], "over TLS");

    let https = https_client(client_tls(Some(&pki.ca), None));
    assert_eq!(
        https_who(&server, &https).await.expect("https works"),
        json!({"subject": "anonymous", "authenticated": false})
    );
    let health = https
        .get(format!("https://{}/healthz", server.addr()))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.text().await.expect("body").trim_end(), "ok");
}

#[tokio::test]
async fn with_required_client_certificates_the_subject_is_the_identity() {
    let (pki, mut s) = make_pki();
    s.tls.client_auth = ClientAuth::Required;
    let server = start_tls(s);
    let ca = Some(&pki.ca);

    // No certificate, or one from another CA: no handshake, no session.
    for identity in [None, Some(&pki.mallory)] {
        let refused = wss(&server, client_tls(ca, identity), &[]).await;
        let error = refused.err().expect("refused");
        assert!(
            !error.starts_with("HTTP"),
            "refused in the handshake: {error}"
        );
        let https = https_client(client_tls(ca, identity));
        assert!(https_who(&server, &https).await.is_err());
    }
    assert_eq!(sessions_peak(&server), 0);

    let mut alice = wss(&server, client_tls(ca, Some(&pki.alice)), &[])
        .await
        .expect("alice connects");
    assert_eq!(
        who(&mut alice).await,
        json!({"subject": "alice", "authenticated": true})
    );
    let https = https_client(client_tls(ca, Some(&pki.alice)));
    assert_eq!(
        https_who(&server, &https).await.expect("https"),
        json!({"subject": "alice", "authenticated": true})
    );
}

#[tokio::test]
async fn with_optional_client_certificates_a_certificate_or_a_token_names_the_client() {
    let (pki, mut s) = make_pki();
    s.tls.client_auth = ClientAuth::Optional;
    s.auth.api_keys = vec![api_key("ci", "ci-key", &[])];
    let server = start_tls(s);
    let ca = Some(&pki.ca);
    let cases = [
        (
            None,
            None,
            json!({"subject": "anonymous", "authenticated": false}),
        ),
        (
            Some(&pki.alice),
            None,
            json!({"subject": "alice", "authenticated": true}),
        ),
        (
            Some(&pki.bot),
            None,
            json!({"subject": "bot.example", "authenticated": true}),
        ),
        (
            Some(&pki.alice),
            Some("Bearer ci-key"),
            json!({"subject": "ci", "authenticated": true}),
        ),
    ];
    for (certificate, token, expected) in cases {
        let headers: Vec<(&'static str, &str)> =
            token.map(|t| ("Authorization", t)).into_iter().collect();
        let mut client = wss(&server, client_tls(ca, certificate), &headers)
            .await
            .expect("connects");
        assert_eq!(who(&mut client).await, expected);
    }
    // A certificate from an untrusted CA still fails the handshake.
    assert!(wss(&server, client_tls(ca, Some(&pki.mallory)), &[])
        .await
        .is_err());
    drop(server);

    // Where authentication is required, a certificate is credentials enough.
    let (pki, mut s) = make_pki();
    s.tls.client_auth = ClientAuth::Optional;
    s.auth.required = true;
    let server = start_tls(s);
    let ca = Some(&pki.ca);
    let refused = wss(&server, client_tls(ca, None), &[]).await;
    assert_eq!(refused.err().as_deref(), Some("HTTP 401"));
    let mut alice = wss(&server, client_tls(ca, Some(&pki.alice)), &[])
        .await
        .expect("alice connects");
    assert_eq!(who(&mut alice).await["subject"], "alice");
    drop(pki.dir);
}

#[test]
fn unusable_tls_settings_stop_the_server_at_build_time_naming_the_setting() {
    let (pki, s) = make_pki();
    let build = |s: Settings| match Server::builder().settings(s).build() {
        Ok(_) => panic!("the server must not build"),
        Err(error) => error.to_string(),
    };
    let mut missing = s.clone();
    missing.tls.cert_file = pki.dir.path().join("nope.pem");
    assert!(build(missing).contains("tls.cert_file"));
    let mut not_a_key = s.clone();
    not_a_key.tls.key_file = s.tls.cert_file.clone();
    assert!(build(not_a_key).contains("tls.key_file"));
    let mut half = s.clone();
    half.tls.key_file = PathBuf::new();
    assert!(build(half).contains("tls"));
    let mut no_ca = s;
    no_ca.tls.client_auth = ClientAuth::Required;
    no_ca.tls.client_ca_file = PathBuf::new();
    assert!(build(no_ca).contains("client_ca_file"));
}

/// An `https://` client whose sockets are bound to `from` (any 127/8 address reaches the
/// loopback listener on Linux).
fn https_from(pki: &Pki, from: IpAddr) -> reqwest::Client {
    crate::support::http::client_builder()
        .tls_backend_preconfigured(client_tls(Some(&pki.ca), None))
        .local_address(from)
        .timeout(Duration::from_secs(5))
        .build()
        .expect("https client")
}

/// `GET /healthz`: the body, or why not.
async fn healthz(server: &RunningServer, client: &reqwest::Client) -> Result<String, String> {
    let response = client
        .get(format!("https://{}/healthz", server.addr()))
        .send()
        .await
        .map_err(|e| format!("{e:?}"))?;
    response.text().await.map_err(|e| format!("{e:?}"))
}

/// Asserts that a client from `from` completes its handshake and is answered `/healthz`.
async fn assert_served(server: &RunningServer, pki: &Pki, from: IpAddr, what: &str) {
    let answer = healthz(server, &https_from(pki, from))
        .await
        .unwrap_or_else(|error| panic!("{what}: {error}"));
    assert_eq!(answer.trim_end(), "ok", "{what}");
}

/// A TCP connection from `from` that sends nothing (no ClientHello).
async fn idle_from(server: &RunningServer, from: IpAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.bind(SocketAddr::new(from, 0)).expect("bind");
    socket.connect(server.addr()).await.expect("connect")
}

/// Polls the handshakes in progress from `ip` until there are `expected` (the server accepts
/// on its own threads).
async fn wait_in_progress(server: &RunningServer, ip: IpAddr, expected: usize) {
    let gate = &server.shared().perimeter.handshakes;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while gate.held(ip) != expected {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} handshakes in progress from {ip}, expected {expected}",
            gate.held(ip)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn idle_connections_from_one_address_cannot_hold_every_handshake() {
    const CAP: usize = 4;
    let (pki, mut s) = make_pki();
    s.server.max_handshakes_per_ip = CAP;
    // Far longer than "at once" below: a close within it is the gate, not the timeout.
    s.server.tls_handshake_timeout_ms = 10_000;
    // /metrics over plain HTTP.
    s.server.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
    let server = start_tls(s);
    let attacker = IpAddr::from([127, 0, 0, 1]);
    let refused = "mcp_rejected_total{reason=\"handshake_ip_limit\"}";

    // Idle connections up to the cap: each holds a handshake place, waiting for a ClientHello.
    let mut held = Vec::new();
    for _ in 0..CAP {
        held.push(idle_from(&server, attacker).await);
    }
    wait_in_progress(&server, attacker, CAP).await;

    // Past the cap: closed by the server at once (end of stream, or a reset), long before
    // the handshake timeout, and counted.
    for n in 0..CAP {
        let mut over = idle_from(&server, attacker).await;
        let read = tokio::time::timeout(Duration::from_secs(1), over.read(&mut [0; 64])).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "connection {n} over the cap must be closed at once: {read:?}"
        );
    }
    assert_eq!(metric(&server, refused).await, CAP as u64);
    assert_eq!(
        server.shared().perimeter.handshakes.held(attacker),
        CAP,
        "a refused connection takes no place"
    );

    // Meanwhile a client from another address completes its handshake and is answered.
    let other = IpAddr::from([127, 0, 0, 2]);
    assert_served(&server, &pki, other, "another address gets through").await;
    // The held connections are still open: their handshakes are in progress.
    for stream in &mut held {
        let read = tokio::time::timeout(Duration::from_millis(50), stream.read(&mut [0; 64])).await;
        assert!(
            read.is_err(),
            "a connection within the cap is held: {read:?}"
        );
    }

    // Closed, the held connections give their places back as their handshakes fail...
    drop(held);
    wait_in_progress(&server, attacker, 0).await;
    // ... so the address gets through again, and may again hold the cap: the connection it
    // was served on (kept open in the client's pool) holds no place after its handshake.
    let client = https_from(&pki, attacker);
    assert_eq!(
        healthz(&server, &client)
            .await
            .expect("the address gets through again")
            .trim_end(),
        "ok"
    );
    let mut again = Vec::new();
    for _ in 0..CAP {
        again.push(idle_from(&server, attacker).await);
    }
    wait_in_progress(&server, attacker, CAP).await;
    assert_eq!(metric(&server, refused).await, CAP as u64);
    drop((client, again));
    wait_in_progress(&server, attacker, 0).await;
}

/// With TLS a connection holds its place among its address's open connections
/// (`server.max_connections_per_ip`) from its accept, not from the end of its handshake: one
/// over the limit is closed at once, before a handshake place is taken (counted as
/// `connection_ip_limit`, not `handshake_ip_limit`), while another address is served.
#[tokio::test]
async fn a_tls_connection_holds_its_connection_place_before_its_handshake() {
    let (pki, mut s) = make_pki();
    s.server.max_connections_per_ip = Some(2);
    s.server.max_handshakes_per_ip = 32;
    s.server.tls_handshake_timeout_ms = 10_000;
    s.server.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
    let server = start_tls(s);
    let attacker = IpAddr::from([127, 0, 0, 1]);
    let connections = || server.shared().perimeter.open_connections.held(attacker);

    // Two connections that never send a ClientHello: each holds both places.
    let held = vec![
        idle_from(&server, attacker).await,
        idle_from(&server, attacker).await,
    ];
    wait_in_progress(&server, attacker, 2).await;
    assert_eq!(connections(), 2);

    // A third is closed at once (well before the handshake timeout of 10 s), its handshake
    // never begun.
    let mut over = idle_from(&server, attacker).await;
    let read = tokio::time::timeout(Duration::from_secs(5), over.read(&mut [0; 64])).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "a connection over the cap must be closed at once: {read:?}"
    );
    assert_eq!(
        metric(
            &server,
            "mcp_rejected_total{reason=\"connection_ip_limit\"}"
        )
        .await,
        1
    );
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"handshake_ip_limit\"}").await,
        0
    );
    assert_eq!(server.shared().perimeter.handshakes.held(attacker), 2);
    assert!(
        healthz(&server, &https_from(&pki, attacker)).await.is_err(),
        "nor is a full handshake let through"
    );

    // Another address is served; the held connections gone, the address is again.
    let other = IpAddr::from([127, 0, 0, 2]);
    assert_served(&server, &pki, other, "another address gets through").await;
    drop(held);
    wait_in_progress(&server, attacker, 0).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while connections() != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} places held",
            connections()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_served(&server, &pki, attacker, "the address gets through again").await;
}

#[tokio::test]
async fn a_handshake_not_completed_within_the_timeout_is_closed() {
    let (_pki, mut s) = make_pki();
    s.server.tls_handshake_timeout_ms = 200;
    let server = start_tls(s);
    let loopback = IpAddr::from([127, 0, 0, 1]);
    let mut idle = idle_from(&server, loopback).await;
    wait_in_progress(&server, loopback, 1).await;
    // Closed by the setting's timeout, well before actix-tls's default of 3 s.
    let read = tokio::time::timeout(Duration::from_secs(2), idle.read(&mut [0; 64])).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "closed at the handshake timeout: {read:?}"
    );
    wait_in_progress(&server, loopback, 0).await;
}
