//! The WebSocket upgrade's `mcp.version.<version>` subprotocol (the transport proposal
//! SEP-1288), over a real socket:
//! - Offered, it is selected (echoed back) and pins the connection to that version: a
//!   session-era pin is what `initialize` negotiates whatever the client asks, and a
//!   2026-07-28 request on it gets -32022 naming the pinned version (`data.pinned`) and no
//!   version `_meta` may name (`supported: []`); a 2026-07-28 pin serves
//!   stateless requests and answers `initialize` with -32022.
//! - The first offered version the server speaks wins; offering only unknown versions
//!   refuses the upgrade with HTTP 400 listing the supported ones.
//! - A connection without the offer serves both eras, as before (covered in tests/stateless*.rs).
//! - A bearer token offered beside it (`mcp.auth.<token>`) is never the echoed protocol.
//! - On one connection, each 2026-07-28 request is served with its own `clientInfo` and
//!   capabilities (the session reuses the last ones parsed only when their text is the same).

use crate::support::meta::meta;
use crate::support::ws::assert_server_alive;
use crate::support::*;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

/// Connects offering `offer` as `Sec-WebSocket-Protocol`; returns the client and the
/// protocol the server selected.
async fn connect_offering(url: &str, offer: &str) -> (Client, Option<String>) {
    let mut request = url.into_client_request().expect("request");
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_str(offer).expect("header"),
    );
    let (ws, response) = tokio_tungstenite::connect_async(request)
        .await
        .expect("websocket connects");
    let selected = response
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (Client::from_ws(ws), selected)
}

#[tokio::test]
async fn a_handshake_era_pin_is_selected_and_is_what_initialize_negotiates() {
    let server = start(settings());
    let (mut client, selected) =
        connect_offering(&server.url(), "mcp.version.2025-06-18, mcp").await;
    assert_eq!(selected.as_deref(), Some("mcp.version.2025-06-18"));
    // The client asks for the newest; the connection was pinned to 2025-06-18.
    let init = client
        .request("initialize", initialize_params("2025-11-25"))
        .await;
    let result = assert_result(&init, &init["id"]);
    assert_eq!(result["protocolVersion"], "2025-06-18", "{init}");
    client
        .send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let listed = client.request("tools/list", json!({})).await;
    assert!(assert_result(&listed, &listed["id"])["tools"].is_array());
    // A 2026-07-28 request on this connection is refused, naming the pinned version, and
    // none as one `_meta` may name (naming the pin as supported, a client that retried
    // with it in `_meta` was refused again, without end).
    let stateless = client
        .request("tools/list", json!({"_meta": meta(json!({}))}))
        .await;
    let error = assert_error(&stateless, &stateless["id"], -32022);
    assert_eq!(
        error["data"],
        json!({"supported": [], "requested": "2026-07-28", "pinned": "2025-06-18"})
    );
    let mut pinned_meta = meta(json!({}));
    pinned_meta["io.modelcontextprotocol/protocolVersion"] = json!("2025-06-18");
    let again = client
        .request("tools/list", json!({"_meta": pinned_meta}))
        .await;
    let error = assert_error(&again, &again["id"], -32022);
    assert_eq!(
        error["data"],
        json!({"supported": [], "requested": "2025-06-18", "pinned": "2025-06-18"})
    );
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("this connection speaks 2025-06-18")
            && message.contains("without a version in _meta"),
        "{message}"
    );
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn a_2026_pin_serves_stateless_requests_and_refuses_initialize() {
    let server = start(settings());
    let (mut client, selected) =
        connect_offering(&server.url(), "mcp, mcp.version.2026-07-28").await;
    assert_eq!(selected.as_deref(), Some("mcp.version.2026-07-28"));
    let listed = client
        .request("tools/list", json!({"_meta": meta(json!({}))}))
        .await;
    let result = assert_result(&listed, &listed["id"]);
    assert_eq!(result["resultType"], "complete", "{listed}");
    assert!(result["tools"].is_array());
    let init = client
        .request("initialize", initialize_params("2025-11-25"))
        .await;
    let error = assert_error(&init, &init["id"], -32022);
    assert_eq!(
        error["data"],
        json!({"supported": ["2026-07-28"], "requested": "2025-11-25"})
    );
    // A request without `_meta` is malformed on this connection, not a session-era one.
    let bare = client.request("tools/list", json!({})).await;
    assert_error(&bare, &bare["id"], -32602);
}

#[tokio::test]
async fn the_first_spoken_version_offered_wins() {
    let server = start(settings());
    let (mut client, selected) = connect_offering(
        &server.url(),
        "mcp.version.1999-01-01, mcp.version.2025-03-26, mcp.version.2025-11-25",
    )
    .await;
    assert_eq!(selected.as_deref(), Some("mcp.version.2025-03-26"));
    let init = client
        .request("initialize", initialize_params("2025-11-25"))
        .await;
    assert_eq!(
        assert_result(&init, &init["id"])["protocolVersion"],
        "2025-03-26"
    );
}

#[tokio::test]
async fn only_unknown_versions_offered_refuse_the_upgrade_with_400() {
    let server = start(settings());
    let mut request = server.url().into_client_request().expect("request");
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_static("mcp, mcp.version.1999-01-01"),
    );
    match tokio_tungstenite::connect_async(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 400);
            let body: Value =
                serde_json::from_slice(response.body().as_deref().unwrap_or_default())
                    .expect("a JSON body");
            let supported = body["error"]["data"]["supported"]
                .as_array()
                .expect("supported versions");
            assert!(supported.contains(&json!("2025-11-25")), "{body}");
            assert!(supported.contains(&json!("2026-07-28")), "{body}");
        }
        other => panic!(
            "expected HTTP 400, got {:?}",
            other.map(|(_, r)| r.status())
        ),
    }
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn a_token_offered_beside_a_version_is_never_the_selected_protocol() {
    let server = start(settings());
    let (_client, selected) = connect_offering(
        &server.url(),
        "mcp.auth.not-a-secret-here, mcp.version.2025-11-25",
    )
    .await;
    assert_eq!(selected.as_deref(), Some("mcp.version.2025-11-25"));
}

/// Who the tool thinks is calling: the client's name and whether it declared sampling.
async fn whoami(_: NoArgs, ctx: mcp_ws::RequestContext) -> Result<String, mcp_ws::ToolError> {
    let session = ctx.session();
    Ok(format!(
        "{} sampling={}",
        session.client_info.name,
        session.client_capabilities.get("sampling").is_some()
    ))
}

#[tokio::test]
async fn each_2026_request_is_served_with_its_own_client_info_and_capabilities() {
    // The session keeps the last `clientInfo` and capabilities it parsed, by their text:
    // a request that changes them must not be served with the previous ones.
    let server = start_with(settings(), |b| {
        b.tool(mcp_ws::Tool::new("whoami", "Who calls", whoami))
    });
    let (mut client, _) = connect_offering(&server.url(), "mcp").await;
    let call = |name: &str, capabilities: Value| {
        json!({"name": "whoami", "arguments": {}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": name, "version": "1"},
        }})
    };
    for (name, capabilities, expected) in [
        ("first", json!({"sampling": {}}), "first sampling=true"),
        ("first", json!({"sampling": {}}), "first sampling=true"),
        ("second", json!({"sampling": {}}), "second sampling=true"),
        ("second", json!({"roots": {}}), "second sampling=false"),
        ("first", json!({}), "first sampling=false"),
    ] {
        let response = client.request("tools/call", call(name, capabilities)).await;
        let result = assert_result(&response, &response["id"]);
        assert_eq!(result["content"][0]["text"], expected, "{response}");
    }
}

/// The status line and headers of a handshake sent by hand with `version` and `key`.
fn raw_handshake(server: &mcp_ws::RunningServer, version: &str, key: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(server.addr()).expect("connects");
    stream
        .set_read_timeout(Some(READ_TIMEOUT))
        .expect("a read timeout");
    write!(
        stream,
        "GET /mcp HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: {version}\r\nSec-WebSocket-Key: {key}\r\n\
         Sec-WebSocket-Protocol: mcp\r\n\r\n",
        server.addr()
    )
    .expect("request sent");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).expect("a response head");
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A handshake is what RFC 6455 (§4.2.1, §4.4) says: a version other than 13 gets 426
/// naming 13, a key that is not 16 bytes in base64 gets 400 (actix alone took versions 7
/// and 8, and any key).
#[tokio::test]
async fn a_handshake_of_another_version_or_a_malformed_key_is_refused() {
    let server = start(settings());
    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
    for version in ["7", "8", "12", "13, 8"] {
        let head = raw_handshake(&server, version, KEY);
        assert!(head.starts_with("HTTP/1.1 426"), "{version}: {head}");
        let head = head.to_ascii_lowercase();
        assert!(head.contains("sec-websocket-version: 13"), "{head}");
        // Refused as every refusal is: a JSON-RPC error body.
        assert!(head.contains("content-type: application/json"), "{head}");
    }
    for key in ["abc", "!!!!", "dGhlIHNhbXBsZQ=="] {
        let head = raw_handshake(&server, "13", key);
        assert!(head.starts_with("HTTP/1.1 400"), "{key}: {head}");
    }
    let head = raw_handshake(&server, "13", KEY);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert_server_alive(&server).await;
}
