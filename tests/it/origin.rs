//! The Origin/Host perimeter on the WebSocket upgrade: a page on a foreign site cannot open a
//! session on a local server (cross-site WebSocket hijacking), nor can a DNS-rebound name;
//! both are refused with HTTP 403 before any session exists, and the server goes on serving.
//! Local pages, same-host pages and clients without an Origin are admitted. `/metrics` on
//! the public listener follows the same rules.

use crate::support::http::{http_get_with, metric};
use crate::support::ws::assert_server_alive;
use crate::support::*;
use mcp_ws::RunningServer;
use serde_json::json;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// Opens an upgrade with extra headers; `Ok(client)` or `Err(status)`.
async fn upgrade(server: &RunningServer, headers: &[(&str, &str)]) -> Result<Client, u16> {
    let mut request = server.url().into_client_request().expect("request");
    for (name, value) in headers {
        request.headers_mut().insert(
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(name.as_bytes())
                .expect("name"),
            value.parse().expect("value"),
        );
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((ws, _)) => Ok(Client::from_ws(ws)),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            Err(response.status().as_u16())
        }
        Err(other) => panic!("unexpected connect error: {other}"),
    }
}

async fn assert_tool_call_works(client: &mut Client) {
    let init = client
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_result(&init, &json!(0));
    let response = client.call_tool("echo", json!({"text": "hi"})).await;
    assert_eq!(response["result"]["content"][0]["text"], "hi", "{response}");
}

#[tokio::test]
async fn a_foreign_origin_is_refused_before_any_session() {
    let server = start(settings());
    let refused = upgrade(&server, &[("Origin", "http://evil.example")]).await;
    assert_eq!(refused.err(), Some(403));
    let null = upgrade(&server, &[("Origin", "null")]).await;
    assert_eq!(null.err(), Some(403));
    assert_eq!(
        metric(&server, "mcp_sessions_peak").await,
        0,
        "no session was ever opened"
    );
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn a_dns_rebound_host_is_refused_on_a_loopback_bind() {
    let server = start(settings());
    let port = server.addr().port();
    let rebound = upgrade(&server, &[("Host", &format!("evil.example:{port}"))]).await;
    assert_eq!(rebound.err(), Some(403));
    let both = upgrade(
        &server,
        &[("Host", "evil.example"), ("Origin", "http://evil.example")],
    )
    .await;
    assert_eq!(both.err(), Some(403));
    assert_eq!(metric(&server, "mcp_sessions_peak").await, 0);
    assert_server_alive(&server).await;
}

/// `Host` and `Origin` are read as `host[:port]` only: a `Host` with userinfo, or text after
/// an IPv6 literal, is 400 (it passed by its first part, and was named back in URLs whose
/// host is another: `http://localhost:80@evil.example/mcp`); such an `Origin`, or two
/// `Origin` headers, 403.
#[tokio::test]
async fn a_host_or_origin_that_is_not_host_port_is_refused() {
    let server = start(settings());
    for host in ["localhost:80@evil.example", "[::1]evil.example"] {
        let refused = upgrade(&server, &[("Host", host)]).await;
        assert_eq!(refused.err(), Some(400), "{host}");
        for path in ["/", "/mcp"] {
            let (status, body) = http_get_with(server.addr(), path, &[("Host", host)]).await;
            assert_eq!(status, 400, "{host} {path}: {body}");
            assert!(body.contains("Host must be host[:port]"), "{body}");
        }
    }
    let userinfo = upgrade(&server, &[("Origin", "http://[::1]@evil.example")]).await;
    assert_eq!(userinfo.err(), Some(403));
    let (status, _) = http_get_with(
        server.addr(),
        "/mcp",
        &[
            ("Origin", "http://localhost"),
            ("Origin", "http://evil.example"),
        ],
    )
    .await;
    assert_eq!(status, 403, "two Origin headers");
    assert_eq!(metric(&server, "mcp_sessions_peak").await, 0);
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn local_pages_and_clients_without_origin_are_admitted() {
    let server = start(settings());
    let port = server.addr().port();
    let same_host = format!("http://127.0.0.1:{port}");
    for headers in [
        vec![],
        vec![("Origin", "http://localhost:3000")],
        vec![("Origin", same_host.as_str())],
        vec![("Host", "localhost"), ("Origin", "https://[::1]:8443")],
    ] {
        let mut client = upgrade(&server, &headers)
            .await
            .unwrap_or_else(|status| panic!("{headers:?} refused with {status}"));
        assert_tool_call_works(&mut client).await;
    }
}

#[tokio::test]
async fn configured_origins_and_hosts_replace_the_defaults() {
    let mut s = settings();
    s.http.allowed_origins = vec!["https://app.example".into()];
    s.http.allowed_hosts = vec!["mcp.example".into()];
    let server = start(s);
    let mut client = upgrade(
        &server,
        &[("Host", "mcp.example"), ("Origin", "https://app.example")],
    )
    .await
    .expect("listed origin and host are admitted");
    assert_tool_call_works(&mut client).await;
    // A loopback page is no longer admitted once a list is configured, nor a loopback name.
    let local = upgrade(
        &server,
        &[("Host", "mcp.example"), ("Origin", "http://localhost")],
    )
    .await;
    assert_eq!(local.err(), Some(403));
    let host = server.addr().to_string();
    let unlisted_host = upgrade(&server, &[("Host", host.as_str())]).await;
    assert_eq!(unlisted_host.err(), Some(403));
}

#[tokio::test]
async fn metrics_on_the_public_listener_follow_the_same_host_and_origin_rules() {
    let server = start(settings());
    let addr = server.addr();
    let rebound = format!("evil.example:{}", addr.port());
    let (status, body) = http_get_with(addr, "/metrics", &[("Host", &rebound)]).await;
    assert_eq!(status, 403, "{body}");
    assert!(!body.contains("mcp_sessions"), "no metrics: {body}");
    let (status, _) = http_get_with(addr, "/metrics", &[("Origin", "http://evil.example")]).await;
    assert_eq!(status, 403);
    // Counted with the endpoint's refusals; a same-host request is served.
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"host\"}").await,
        1
    );
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"origin\"}").await,
        1
    );
    let local = format!("http://localhost:{}", addr.port());
    let (status, body) = http_get_with(addr, "/metrics", &[("Origin", &local)]).await;
    assert_eq!(status, 200);
    assert!(body.contains("mcp_sessions"), "{body}");
}
