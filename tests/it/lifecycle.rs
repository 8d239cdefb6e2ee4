//! MCP lifecycle (seed 000 §4; spec "Lifecycle"): `initialize` first; each supported
//! protocol version is echoed and an unsupported one gets the newest; capabilities are
//! declared from what is registered and per version; the client's capabilities are kept in the session; any
//! method but `ping` before `initialize` gets -32000 and the connection stays open; a second
//! `initialize` is refused; a method the negotiated version lacks answers -32601; the
//! subprotocol `mcp` is selected when offered.

use crate::support::http::http_get;
use crate::support::*;
use mcp_ws::model::CallToolResult;
use mcp_ws::Tool;
use serde_json::{json, Value};

#[tokio::test]
async fn healthz_answers_200() {
    let server = start(settings());
    let (status, body) = http_get(server.addr(), "/healthz").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
}

#[tokio::test]
async fn each_supported_version_is_negotiated_with_truthful_capabilities() {
    let server = start(settings());
    for version in VERSIONS {
        let mut client = Client::connect(&server).await;
        let response = client
            .request_with_id(json!(1), "initialize", initialize_params(version))
            .await;
        let result = assert_result(&response, &json!(1));
        assert_eq!(result["protocolVersion"], version);
        assert_eq!(result["serverInfo"]["name"], "mcp-ws");
        assert!(result["serverInfo"]["version"].is_string());
        let caps = &result["capabilities"];
        assert_eq!(caps["tools"], json!({"listChanged": true}));
        assert_eq!(
            caps["resources"],
            json!({"subscribe": true, "listChanged": true})
        );
        assert_eq!(caps["prompts"], json!({"listChanged": true}));
        assert_eq!(caps["logging"], json!({}));
        // `completions` exists from 2025-03-26 on.
        assert_eq!(
            caps.get("completions").is_some(),
            version != "2024-11-05",
            "{version}"
        );
        assert_eq!(
            caps.as_object().map(|o| o.len()),
            Some(if version == "2024-11-05" { 4 } else { 5 })
        );
    }
}

#[tokio::test]
async fn unsupported_version_gets_the_newest() {
    let server = start(settings());
    for requested in ["2023-01-01", "2026-07-28", "1.0", ""] {
        let mut client = Client::connect(&server).await;
        let response = client
            .request_with_id(json!(1), "initialize", initialize_params(requested))
            .await;
        assert_eq!(
            assert_result(&response, &json!(1))["protocolVersion"],
            "2025-11-25"
        );
    }
}

#[tokio::test]
async fn method_missing_from_the_negotiated_version_is_method_not_found() {
    let server = start(settings());
    let params =
        json!({"ref":{"type":"ref/prompt","name":"greet"},"argument":{"name":"name","value":"A"}});
    let mut old = Client::initialized_with_version(&server, "2024-11-05").await;
    let response = old.request("completion/complete", params.clone()).await;
    assert_error(&response, &response["id"], -32601);
    let mut new = Client::initialized_with_version(&server, "2025-03-26").await;
    let response = new.request("completion/complete", params).await;
    let result = assert_result(&response, &response["id"]);
    assert_eq!(result["completion"]["values"], json!(["Ada", "Alan"]));
    assert_eq!(result["completion"]["hasMore"], false);
}

#[tokio::test]
async fn methods_before_initialize_are_refused_but_ping_works() {
    let server = start(settings());
    let mut client = Client::connect(&server).await;
    for method in [
        "tools/list",
        "tools/call",
        "resources/list",
        "prompts/get",
        "logging/setLevel",
        "no/such",
    ] {
        let id = client.fresh_id();
        let response = client.request_with_id(id.clone(), method, json!({})).await;
        let error = assert_error(&response, &id, -32000);
        assert!(error["message"]
            .as_str()
            .unwrap_or("")
            .contains("initialize"));
    }
    let response = client.request_with_id(json!("p"), "ping", json!({})).await;
    assert_eq!(assert_result(&response, &json!("p")), json!({}));
    // Notifications before initialize are ignored, not answered.
    client
        .send_json(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await;
    client.expect_nothing_pending().await;
    // The connection is still usable: the handshake completes on it.
    let response = client
        .request_with_id(json!(1), "initialize", initialize_params("2025-06-18"))
        .await;
    assert_eq!(
        assert_result(&response, &json!(1))["protocolVersion"],
        "2025-06-18"
    );
    let response = client.request("tools/list", json!({})).await;
    assert!(response["result"]["tools"].is_array());
}

#[tokio::test]
async fn second_initialize_is_refused_and_the_first_stands() {
    let server = start(settings());
    let mut client = Client::initialized_with_version(&server, "2024-11-05").await;
    let response = client
        .request_with_id(json!(2), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_error(&response, &json!(2), -32600);
    // Still on 2024-11-05, which has no completions: had the second initialize taken,
    // completion/complete (2025-03-26+) would answer.
    let response = client
        .request_with_id(
            json!(3),
            "completion/complete",
            json!({"ref":{"type":"ref/prompt","name":"greet"},"argument":{"name":"name","value":""}}),
        )
        .await;
    assert_error(&response, &json!(3), -32601);
}

#[tokio::test]
async fn malformed_initialize_params_are_invalid_params() {
    let server = start(settings());
    let mut client = Client::connect(&server).await;
    for params in [
        json!({}),
        json!({"protocolVersion": 1, "capabilities": {}, "clientInfo": {"name":"x","version":"1"}}),
        json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
        json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name":"x"}}),
    ] {
        let id = client.fresh_id();
        let response = client
            .request_with_id(id.clone(), "initialize", params)
            .await;
        assert_error(&response, &id, -32602);
    }
    // None of them initialized the session.
    let response = client.request("tools/list", json!({})).await;
    assert_error(&response, &response["id"], -32000);
}

/// Client capabilities and the negotiated version reach the tools through their context.
#[tokio::test]
async fn client_capabilities_are_kept_in_the_session() {
    let tool = Tool::new("whoami", "session facts", |_: NoArgs, ctx| async move {
        let facts = json!({
            "version": ctx.session().protocol_version.as_str(),
            "capabilities": *ctx.session().client_capabilities,
        });
        Ok(CallToolResult::text(facts.to_string()))
    });
    let server = start_with(settings(), |b| b.tool(tool));
    let mut client = Client::initialized_with_version(&server, "2025-06-18").await;
    let response = client.call_tool("whoami", json!({})).await;
    let text = response["result"]["content"][0]["text"]
        .as_str()
        .expect("text")
        .to_owned();
    let facts: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(facts["version"], "2025-06-18");
    assert_eq!(
        facts["capabilities"],
        json!({"roots": {"listChanged": true}, "sampling": {}})
    );
}

#[tokio::test]
async fn subprotocol_is_optional() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let server = start(settings());
    let request = server.url().into_client_request().expect("request");
    let (ws, response) = tokio_tungstenite::connect_async(request)
        .await
        .expect("connects");
    assert!(response.headers().get("sec-websocket-protocol").is_none());
    // And the session works without it: initialize, then a request after it.
    let mut client = Client::from_ws(ws);
    let response = client
        .request_with_id(json!(1), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_eq!(
        assert_result(&response, &json!(1))["protocolVersion"],
        "2025-11-25"
    );
    let response = client.request_with_id(json!(2), "ping", json!({})).await;
    assert_eq!(assert_result(&response, &json!(2)), json!({}));
}

/// A `GET` without `Upgrade: websocket` is the Streamable HTTP stream, which needs an
/// `Accept: text/event-stream` (406 without) and a session.
#[tokio::test]
async fn plain_get_on_the_endpoint_is_not_a_websocket() {
    let server = start(settings());
    let (status, _) = http_get(server.addr(), "/mcp").await;
    assert_eq!(status, 406);
    let (status, _) = http_get(server.addr(), "/nope").await;
    assert_eq!(status, 404);
}
