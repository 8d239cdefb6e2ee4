//! The 2026-07-28 revision over WebSocket, beside the session era on the same endpoint and
//! the same connection. The rules checked, all through a real socket:
//!
//! - The era is chosen per request: a request whose `_meta` names a version is served from
//!   that `_meta` alone, on any connection; `initialize` starts a session-era session whose
//!   state (log level, client capabilities, resource subscriptions) no 2026 request sees, and
//!   2026 requests initialize nothing (a session request after them is "not initialized").
//! - `server/discover`: supported versions, capabilities from what is registered (they change
//!   when the registry does), the server's identity in `_meta`, instructions, and the
//!   configured `ttlMs` / `cacheScope`; malformed `_meta` is -32602, an unknown version -32022
//!   naming `supported` and `requested`.
//! - Every result kind has `resultType` and the server's identity; lists and reads carry the
//!   configured caching hints (every page the same scope), nothing else does; lists come in
//!   one order; a missing resource is -32602 for 2026 and -32002 for a session, same server.
//! - Methods the revision removed (`ping`, `logging/setLevel`, `resources/subscribe`, …,
//!   `initialize` with 2026 `_meta`) are -32601; a 2026 request in a batch is -32600; log lines
//!   reach only requests that set a level, at or above it.
//! - `subscriptions/listen`: the acknowledgement first (only what the server offers), every
//!   notification tagged with the listen's id, each listen gets only what it asked for,
//!   `notifications/cancelled` ends one listen (it gets nothing more, not even a result) and
//!   leaves the others, shutdown ends each with a result; a connection's listens and its
//!   session hold `limits.max_subscriptions_per_session` subscriptions between them (a listen
//!   past it is -32602), counted in `mcp_subscriptions`.
//! - Progress (on the request's own token, with its message, whatever the connection's
//!   session negotiated) and cancellation (`notifications/cancelled` with the request id: no
//!   answer, the worker stops).
//! - A dropped connection whose session-era session is kept for a reconnect keeps none of
//!   its 2026 requests: their workers are cancelled and their listens end; the session's own
//!   request and notifications reach the resumed socket, nothing of the 2026 ones does.
//! - Multi round-trip requests: `tests/it/stateless_mrtr.rs`; over HTTP: `tests/it/stateless_http.rs`.
//!
//! No timing assertions: barriers (a `ping` answered after everything before it) and gauges
//! polled in `/metrics`.

use crate::support::http::{metric, wait_metric};
use crate::support::meta::*;
use crate::support::stateless::*;
use crate::support::ws::{call, exchange, initialize_with};
use crate::support::*;
use mcp_ws::model::ResourceContents;
use mcp_ws::{Prompt, Resource, RunningServer};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

fn plain_prompt(name: &str) -> Prompt {
    Prompt::new(name, "A fixed prompt.", |_args, _ctx| async {
        Ok(mcp_ws::model::GetPromptResult::new(vec![
            mcp_ws::model::PromptMessage::user("hello"),
        ]))
    })
}

fn plain_resource(uri: &'static str) -> Resource {
    Resource::new(uri, "plain", move |_ctx| async move {
        Ok(ResourceContents::text(uri, "text/plain", "plain"))
    })
}

/// The levels of a run of `notifications/message` frames (each checked to be one, with the
/// tool's data for that level).
fn log_levels(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .map(|frame| {
            assert_eq!(frame["method"], "notifications/message", "{frame}");
            let level = frame["params"]["level"].as_str().expect("a level");
            assert_eq!(frame["params"]["data"], format!("{level} line"), "{frame}");
            level.to_owned()
        })
        .collect()
}

/// The tool names of every page of `tools/list`, for a 2026 request (`stateless`) or the
/// session's; every 2026 page is checked for its hints. Returns the names and the number of
/// pages.
async fn all_tool_names(client: &mut Client, stateless_request: bool) -> (Vec<String>, usize) {
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        if stateless_request {
            params = stateless(params);
        }
        let (id, response) = call(client, "tools/list", params).await;
        let result = if stateless_request {
            let result = assert_complete(&response, &id);
            assert_cache_hints(&result, LIST_TTL_MS);
            result
        } else {
            assert_session_result(&response, &id)
        };
        pages += 1;
        for tool in result["tools"].as_array().expect("tools") {
            names.push(tool["name"].as_str().expect("a name").to_owned());
        }
        match result.get("nextCursor") {
            Some(next) => cursor = Some(next.as_str().expect("a string cursor").to_owned()),
            None => return (names, pages),
        }
    }
}

// ---------------------------------------------------------------------------------------
// server/discover

#[tokio::test]
async fn discover_names_versions_capabilities_identity_instructions_and_cache_hints() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let (id, response) = call(&mut client, "server/discover", stateless(json!({}))).await;
    let result = assert_complete(&response, &id);
    assert_eq!(result["supportedVersions"], json!([MODERN]), "{result}");
    assert_eq!(
        result["capabilities"],
        json!({
            "tools": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "prompts": {"listChanged": true},
            "logging": {},
            "completions": {},
        }),
    );
    assert_eq!(result["instructions"], INSTRUCTIONS);
    assert_cache_hints(&result, DISCOVER_TTL_MS);
    let mut members: Vec<&str> = result
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    members.sort_unstable();
    assert_eq!(
        members,
        [
            "_meta",
            "cacheScope",
            "capabilities",
            "instructions",
            "resultType",
            "supportedVersions",
            "ttlMs"
        ],
        "the identity is in _meta, not the body: {result}"
    );
}

/// A tool result with a `_meta` of its own gets the server's identity merged into it: one
/// `_meta` member in the frame (a JSON object must not name a member twice), holding both.
#[tokio::test]
async fn a_tool_result_meta_is_merged_with_the_server_identity_into_one_member() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    client
        .send_json(json!({"jsonrpc": "2.0", "id": "m", "method": "tools/call",
                          "params": stateless(json!({"name": "with_meta"}))}))
        .await;
    let frame = client.recv_text().await;
    assert_eq!(frame.matches(r#""_meta""#).count(), 1, "{frame}");
    let response: Value = serde_json::from_str(&frame).expect("json");
    let result = assert_complete(&response, &json!("m"));
    assert_eq!(result["_meta"][TOOL_META_KEY], "kept", "{result}");
    assert_eq!(text_of(&result), "annotated");
}

#[tokio::test]
async fn discover_capabilities_follow_what_is_registered() {
    let server = start_bare(stateless_settings(), |b| b);
    let mut client = Client::connect(&server).await;
    let mut caps = discover_caps(&mut client).await;
    assert_eq!(caps, json!({"logging": {}}), "nothing registered");
    // With nothing to listen to, listening is not offered either.
    let (id, response) = call(
        &mut client,
        "subscriptions/listen",
        stateless(json!({"notifications": {"toolsListChanged": true}})),
    )
    .await;
    assert_error(&response, &id, -32601);

    server
        .registry()
        .add_tool(plain_tool("only"))
        .expect("adds");
    caps = discover_caps(&mut client).await;
    assert_eq!(caps, json!({"tools": {"listChanged": true}, "logging": {}}));
    // A kind not offered has no methods.
    let (id, response) = call(&mut client, "resources/list", stateless(json!({}))).await;
    assert_error(&response, &id, -32601);

    server
        .registry()
        .add_prompt(plain_prompt("later"))
        .expect("adds");
    server
        .registry()
        .add_resource(plain_resource("mcp-ws-test://plain"))
        .expect("adds");
    caps = discover_caps(&mut client).await;
    assert_eq!(
        caps,
        json!({
            "tools": {"listChanged": true},
            "resources": {"subscribe": true, "listChanged": true},
            "prompts": {"listChanged": true},
            "logging": {},
            "completions": {},
        })
    );
    let (id, response) = call(&mut client, "resources/list", stateless(json!({}))).await;
    let result = assert_complete(&response, &id);
    assert_eq!(result["resources"][0]["uri"], "mcp-ws-test://plain");
}

async fn discover_caps(client: &mut Client) -> Value {
    let (id, response) = call(client, "server/discover", stateless(json!({}))).await;
    assert_complete(&response, &id)["capabilities"].clone()
}

#[tokio::test]
async fn malformed_meta_is_invalid_params_and_an_unknown_version_is_32022() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;

    // `server/discover` exists only in 2026-07-28: without `_meta` it is malformed.
    client
        .send_json(json!({"jsonrpc": "2.0", "id": "no-params", "method": "server/discover"}))
        .await;
    let response = client.recv_response(&json!("no-params")).await;
    assert_error(&response, &json!("no-params"), -32602);
    let malformed = [
        json!({}),
        json!({"_meta": {}}),
        json!({"_meta": {PROTOCOL_VERSION: MODERN}}),
        json!({"_meta": {PROTOCOL_VERSION: MODERN, CLIENT_CAPABILITIES: "all"}}),
        json!({"_meta": {PROTOCOL_VERSION: 20260728, CLIENT_CAPABILITIES: {}}}),
        add_meta(stateless(json!({})), LOG_LEVEL, json!("loud")),
        add_meta(stateless(json!({})), CLIENT_INFO, json!("me")),
    ];
    for params in malformed {
        let (id, response) = call(&mut client, "server/discover", params.clone()).await;
        let error = assert_error(&response, &id, -32602);
        assert!(error.get("data").is_none(), "{params}: {response}");
    }
    // The same `_meta` rules for every method, not only discover.
    let (id, response) = call(
        &mut client,
        "tools/call",
        json!({"name": "echo", "arguments": {"text": "x"},
               "_meta": {PROTOCOL_VERSION: MODERN}}),
    )
    .await;
    assert_error(&response, &id, -32602);

    for version in ["2099-01-01", "2025-11-25"] {
        let params = with_meta(
            json!({}),
            json!({PROTOCOL_VERSION: version, CLIENT_CAPABILITIES: {}}),
        );
        let (id, response) = call(&mut client, "server/discover", params).await;
        let error = assert_error(&response, &id, -32022);
        assert_eq!(
            error["data"],
            json!({"supported": [MODERN], "requested": version}),
            "a session-era version in _meta is not served statelessly: {response}"
        );
    }
    // None of that hurt the connection.
    let (id, response) = call(&mut client, "server/discover", stateless(json!({}))).await;
    assert_complete(&response, &id);
}

/// A request whose `_meta` names the 2026-07-28 version but does not read (a member named
/// twice) is that revision's, malformed: -32602 saying so, before `initialize` and after it.
/// (It was taken for a session-era request: "not initialized" on a fresh connection, a
/// session-era list on an initialized one.)
#[tokio::test]
async fn a_meta_naming_a_member_twice_is_a_malformed_2026_request_on_any_connection() {
    let (server, _) = start_stateless(stateless_settings());
    let meta = format!(r#""{PROTOCOL_VERSION}":"{MODERN}","{CLIENT_CAPABILITIES}":{{}}"#);
    let text = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list","params":{{"_meta":{{{meta},"{PROTOCOL_VERSION}":"{MODERN}"}}}}}}"#
        )
    };
    // The key as an encoder that escapes `/` writes it (PHP's json_encode), `_meta` named
    // twice.
    let escaped = PROTOCOL_VERSION.replace('/', "\\/");
    // The second `_meta` an object, or null (not an object: it names nothing, the first
    // still does).
    let escaped = |id: u32, second: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list","params":{{"_meta":{{"{escaped}":"{MODERN}"}},"_meta":{second}}}}}"#
        )
    };
    let mut fresh = Client::connect(&server).await;
    let mut initialized = Client::initialized(&server).await;
    let cases = [
        (1, true, text(1)),
        (2, false, text(2)),
        (4, true, escaped(4, "{}")),
        (5, false, escaped(5, "{}")),
        (7, true, escaped(7, "null")),
    ];
    for (id, on_fresh, request) in cases {
        let client = if on_fresh {
            &mut fresh
        } else {
            &mut initialized
        };
        client.send_text(&request).await;
        let response = client.recv_response(&json!(id)).await;
        let error = assert_error(&response, &json!(id), -32602);
        let message = error["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("params do not read: duplicate field"),
            "{request}: {response}"
        );
    }
    // A session-era request whose params do not read, naming no 2026-07-28 version: still
    // the session's to answer, as it answers such params; so is one that spells the key
    // elsewhere than in `_meta`.
    for (id, extra) in [
        (3, String::new()),
        (6, format!(r#","note":"{PROTOCOL_VERSION}""#)),
    ] {
        initialized
            .send_text(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list","params":{{"cursor":"a","cursor":"b"{extra}}}}}"#))
            .await;
        let refused = initialized.recv_response(&json!(id)).await;
        let error = assert_error(&refused, &json!(id), -32602);
        assert_eq!(
            error["message"], "Invalid params: duplicate field `cursor`",
            "{refused}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Result shapes

#[tokio::test]
async fn every_2026_result_kind_has_its_result_type_and_only_lists_and_reads_have_cache_hints() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;

    for (method, member, key, expected) in [
        ("tools/list", "tools", "name", "echo"),
        ("resources/list", "resources", "uri", README),
        (
            "resources/templates/list",
            "resourceTemplates",
            "uriTemplate",
            NOTES_TEMPLATE,
        ),
        ("prompts/list", "prompts", "name", "greet"),
    ] {
        let (id, response) = call(&mut client, method, stateless(json!({}))).await;
        let result = assert_complete(&response, &id);
        assert_cache_hints(&result, LIST_TTL_MS);
        let listed = result[member].as_array().expect("a list");
        assert!(
            listed.iter().any(|item| item[key] == expected),
            "{method} lists {expected}: {result}"
        );
    }

    let (id, response) = call(
        &mut client,
        "tools/call",
        stateless(json!({"name": "echo", "arguments": {"text": "hi there"}})),
    )
    .await;
    let result = assert_complete(&response, &id);
    assert_no_cache_hints(&result);
    assert_eq!(text_of(&result), "hi there");

    for (uri, text) in [
        (README.to_owned(), None),
        (
            "mcp-ws-test://notes/42".to_owned(),
            Some("note 42".to_owned()),
        ),
    ] {
        let (id, response) = call(
            &mut client,
            "resources/read",
            stateless(json!({"uri": uri})),
        )
        .await;
        let result = assert_complete(&response, &id);
        assert_cache_hints(&result, READ_TTL_MS);
        assert_eq!(result["contents"][0]["uri"], uri.as_str(), "{result}");
        if let Some(text) = text {
            assert_eq!(result["contents"][0]["text"], text, "{result}");
        }
    }

    let (id, response) = call(
        &mut client,
        "prompts/get",
        stateless(json!({"name": "greet", "arguments": {"name": "Ada"}})),
    )
    .await;
    let result = assert_complete(&response, &id);
    assert_no_cache_hints(&result);
    let text = result["messages"][0]["content"]["text"]
        .as_str()
        .expect("a text message");
    assert!(text.contains("Ada"), "{result}");

    let (id, response) = call(
        &mut client,
        "completion/complete",
        stateless(json!({"ref": {"type": "ref/prompt", "name": "greet"},
                      "argument": {"name": "name", "value": "A"}})),
    )
    .await;
    let result = assert_complete(&response, &id);
    assert_no_cache_hints(&result);
    assert_eq!(result["completion"]["values"], json!(["Ada", "Alan"]));
}

/// A 2026-07-28 completion has no `input_required` round: a completer that asks the client
/// is told at once that it cannot (as by a client without the capability), and answers
/// what it can. (The ask was recorded as for a call and never answered: -32603.)
#[tokio::test]
async fn a_completer_that_asks_the_client_is_refused_at_once_and_answers_without() {
    let prompt = Prompt::new("pick", "a prompt", |_args, _ctx| async {
        Ok(mcp_ws::model::GetPromptResult::new(vec![]))
    })
    .argument(mcp_ws::PromptArgument::optional("root", "a root"))
    .complete(|_request, ctx| async move {
        match ctx.list_roots().await {
            Ok(roots) => roots.into_iter().map(|r| r.uri).collect(),
            Err(error) => vec![format!("fallback: {error}")],
        }
    });
    let server = start_bare(stateless_settings(), |b| b.prompt(prompt));
    let mut client = Client::connect(&server).await;
    let (id, response) = call(
        &mut client,
        "completion/complete",
        stateless_with(
            json!({"roots": {}}),
            json!({"ref": {"type": "ref/prompt", "name": "pick"},
                   "argument": {"name": "root", "value": ""}}),
        ),
    )
    .await;
    let result = assert_complete(&response, &id);
    let values = result["completion"]["values"].as_array().expect("values");
    assert_eq!(values.len(), 1, "{result}");
    assert!(
        values[0]
            .as_str()
            .is_some_and(|v| v.starts_with("fallback: ")),
        "{result}"
    );
}

#[tokio::test]
async fn lists_come_in_one_order_page_after_page_each_page_with_the_same_hints() {
    let mut settings = stateless_settings();
    settings.limits.page_size = 3;
    let (server, _) = start_stateless(settings);
    let mut client = Client::connect(&server).await;
    let (first, pages) = all_tool_names(&mut client, true).await;
    assert!(pages > 1, "the list spans pages: {first:?}");
    let mut sorted = first.clone();
    sorted.sort();
    assert_eq!(first, sorted, "tools come in name order");
    assert!(first.contains(&"echo".to_owned()) && first.contains(&"ask_name".to_owned()));

    assert_eq!(all_tool_names(&mut client, true).await.0, first, "again");
    let mut other = Client::connect(&server).await;
    assert_eq!(
        all_tool_names(&mut other, true).await.0,
        first,
        "on another connection"
    );
    let mut session = Client::initialized(&server).await;
    assert_eq!(
        all_tool_names(&mut session, false).await.0,
        first,
        "in a session-era session"
    );

    let (id, response) = call(
        &mut client,
        "tools/list",
        stateless(json!({"cursor": "not-a-cursor"})),
    )
    .await;
    assert_error(&response, &id, -32602);
}

#[tokio::test]
async fn a_missing_resource_is_32602_for_2026_and_32002_for_a_session_on_one_server() {
    let (server, _) = start_stateless(stateless_settings());
    let missing = "mcp-ws-test://missing";
    let mut stateless_only = Client::connect(&server).await;
    let (id, response) = call(
        &mut stateless_only,
        "resources/read",
        stateless(json!({"uri": missing})),
    )
    .await;
    let error = assert_error(&response, &id, -32602);
    assert_eq!(error["data"], json!({"uri": missing}));

    let mut session = Client::initialized(&server).await;
    let (id, response) = call(&mut session, "resources/read", json!({"uri": missing})).await;
    let error = assert_error(&response, &id, -32002);
    assert_eq!(error["data"], json!({"uri": missing}));
    // Per request, not per connection: a 2026 request on the session's connection.
    let (id, response) = call(
        &mut session,
        "resources/read",
        stateless(json!({"uri": missing})),
    )
    .await;
    let error = assert_error(&response, &id, -32602);
    assert_eq!(error["data"], json!({"uri": missing}));
}

// ---------------------------------------------------------------------------------------
// Both eras on one connection

#[tokio::test]
async fn a_connection_that_only_sent_2026_requests_is_not_initialized() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let (id, response) = call(&mut client, "tools/list", stateless(json!({}))).await;
    let stateless_names = assert_complete(&response, &id)["tools"].clone();

    for (method, params) in [
        ("tools/list", json!({})),
        (
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x"}}),
        ),
    ] {
        let (id, response) = call(&mut client, method, params).await;
        assert_error(&response, &id, -32000);
    }
    // `initialize` carrying 2026 `_meta` is a method that revision removed: it starts nothing.
    let (id, response) = call(
        &mut client,
        "initialize",
        stateless(initialize_params("2025-11-25")),
    )
    .await;
    let error = assert_error(&response, &id, -32601);
    assert_eq!(error["data"]["method"], "initialize");
    let (id, response) = call(&mut client, "tools/list", json!({})).await;
    assert_error(&response, &id, -32000);

    // A real `initialize` still can: the 2026 requests settled nothing for the connection.
    let (id, response) = call(&mut client, "initialize", initialize_params("2025-11-25")).await;
    let result = assert_session_result(&response, &id);
    assert_eq!(result["serverInfo"]["name"], SERVER_NAME);
    let (id, response) = call(&mut client, "tools/list", json!({})).await;
    let session_names = assert_session_result(&response, &id)["tools"].clone();
    let names = |tools: &Value| -> Vec<Value> {
        tools
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].clone())
            .collect()
    };
    assert_eq!(names(&session_names), names(&stateless_names));
    // And 2026 requests go on beside the session, in their own shape.
    let (id, response) = call(&mut client, "tools/list", stateless(json!({}))).await;
    assert_cache_hints(&assert_complete(&response, &id), LIST_TTL_MS);
    let (id, response) = call(&mut client, "initialize", initialize_params("2025-11-25")).await;
    assert_error(&response, &id, -32600);
}

#[tokio::test]
async fn a_2026_request_does_not_see_the_session_log_level() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::initialized(&server).await;
    let chatty = json!({"name": "chatty", "arguments": {}});

    let (id, response) = call(&mut client, "logging/setLevel", json!({"level": "debug"})).await;
    assert_session_result(&response, &id);
    let (response, before) = exchange(&mut client, "tools/call", chatty.clone()).await;
    assert_session_result(&response, &response["id"]);
    assert_eq!(log_levels(&before), ["debug", "info", "warning", "error"]);

    let (response, before) = exchange(&mut client, "tools/call", stateless(chatty.clone())).await;
    assert_complete(&response, &response["id"]);
    assert!(before.is_empty(), "no level in _meta, no log: {before:?}");
    let warning = add_meta(stateless(chatty.clone()), LOG_LEVEL, json!("warning"));
    let (response, before) = exchange(&mut client, "tools/call", warning).await;
    assert_complete(&response, &response["id"]);
    assert_eq!(log_levels(&before), ["warning", "error"]);

    // The other way round: the session's level does not filter a 2026 request's lines.
    let (id, response) = call(
        &mut client,
        "logging/setLevel",
        json!({"level": "emergency"}),
    )
    .await;
    assert_session_result(&response, &id);
    let (response, before) = exchange(&mut client, "tools/call", chatty.clone()).await;
    assert_session_result(&response, &response["id"]);
    assert!(before.is_empty(), "{before:?}");
    let debug = add_meta(stateless(chatty), LOG_LEVEL, json!("debug"));
    let (response, before) = exchange(&mut client, "tools/call", debug).await;
    assert_complete(&response, &response["id"]);
    assert_eq!(log_levels(&before), ["debug", "info", "warning", "error"]);
}

#[tokio::test]
async fn a_2026_request_does_not_see_the_session_client_capabilities() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    initialize_with(&mut client, json!({"elicitation": {}})).await;
    let ask = json!({"name": "ask_name", "arguments": {"greeting": "Hello"}});

    // The session declared elicitation; this request did not.
    let (id, response) = call(&mut client, "tools/call", stateless(ask.clone())).await;
    let error = assert_error(&response, &id, -32021);
    assert_eq!(
        error["data"],
        json!({"requiredCapabilities": {"elicitation": {}}})
    );
    // Declared on the request, the ask is a result, never a request to the client.
    let (id, response) = call(
        &mut client,
        "tools/call",
        stateless_with(json!({"elicitation": {}}), ask.clone()),
    )
    .await;
    assert_input_required(&response, &id, &["name"]);

    // The session's own call asks the client for real.
    let id = client.fresh_id();
    client
        .send_json(request(id.clone(), "tools/call", ask))
        .await;
    let asked = client.recv().await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    client
        .send_json(json!({"jsonrpc": "2.0", "id": asked["id"], "result": accept_name("Ada")}))
        .await;
    let response = client.recv_response(&id).await;
    assert_eq!(
        text_of(&assert_session_result(&response, &id)),
        "Hello, Ada!"
    );

    // And what the session lacks, a 2026 request may have: the session's interview stops
    // at sampling (an `isError` result), a 2026 one declaring it is asked for it.
    let id = client.fresh_id();
    client
        .send_json(request(
            id.clone(),
            "tools/call",
            json!({"name": "interview", "arguments": {}}),
        ))
        .await;
    let asked = client.recv().await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    client
        .send_json(json!({"jsonrpc": "2.0", "id": asked["id"], "result": accept_name("Ada")}))
        .await;
    let response = client.recv_response(&id).await;
    let result = assert_session_result(&response, &id);
    assert_eq!(result["isError"], true, "{result}");
    assert!(text_of(&result).contains("sampling"), "{result}");

    let params = stateless_with(all_asks(), json!({"name": "interview", "arguments": {}}));
    let (id, response) = call(&mut client, "tools/call", params.clone()).await;
    let (_, state) = assert_input_required(&response, &id, &["name"]);
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, json!({"name": accept_name("Ada")}), Some(&state)),
    )
    .await;
    assert_input_required(&response, &id, &["draft"]);
    assert_eq!(fixtures.runs(), 6);
}

#[tokio::test]
async fn a_2026_listen_and_the_session_subscriptions_stay_apart() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::initialized(&server).await;
    let (id, response) = call(&mut client, "resources/subscribe", json!({"uri": README})).await;
    assert_session_result(&response, &id);
    let listen = json!("apart");
    let ack = open_listen(&mut client, &listen, json!({"toolsListChanged": true})).await;
    assert_eq!(ack, json!({"toolsListChanged": true}));

    // The session subscribed to the readme; the listen did not ask for it.
    server.registry().resource_updated(README);
    let frame = client.recv().await;
    assert_eq!(
        frame,
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
               "params": {"uri": README}})
    );
    client.expect_nothing_pending().await;

    // A tool change: the session hears it unsolicited, the listen tagged.
    server
        .registry()
        .add_tool(plain_tool("apart_tool"))
        .expect("adds");
    let mut frames = vec![client.recv().await, client.recv().await];
    frames.sort_by_key(|f| f["params"].get("_meta").is_some());
    assert_eq!(
        frames,
        [
            json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}}),
            json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                   "params": {"_meta": {SUBSCRIPTION_ID: listen}}}),
        ]
    );
    client.expect_nothing_pending().await;
}

// ---------------------------------------------------------------------------------------
// Error codes and removed methods

#[tokio::test]
async fn methods_removed_in_2026_are_method_not_found() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    for (method, params) in [
        ("ping", json!({})),
        ("logging/setLevel", json!({"level": "debug"})),
        ("resources/subscribe", json!({"uri": README})),
        ("resources/unsubscribe", json!({"uri": README})),
        ("initialize", initialize_params("2025-11-25")),
        ("tasks/list", json!({})),
    ] {
        let (id, response) = call(&mut client, method, stateless(params)).await;
        let error = assert_error(&response, &id, -32601);
        assert_eq!(error["data"], json!({"method": method}), "{response}");
    }
    // The same methods without 2026 `_meta` are the session's: `ping` is answered even
    // before `initialize`.
    let (id, response) = call(&mut client, "ping", json!({})).await;
    assert_eq!(assert_result(&response, &id), json!({}));
}

#[tokio::test]
async fn a_2026_request_in_a_batch_is_invalid_and_the_rest_of_the_batch_is_served() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    client
        .send_json(json!([
            request(json!(1), "tools/list", stateless(json!({}))),
            request(json!(2), "ping", json!({})),
        ]))
        .await;
    let mut answers: Vec<Value> = client
        .recv()
        .await
        .as_array()
        .expect("a batch answer")
        .clone();
    answers.sort_by_key(|a| a["id"].as_i64());
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_error(&answers[0], &json!(1), -32600);
    assert_eq!(assert_result(&answers[1], &json!(2)), json!({}));
}

#[tokio::test]
async fn log_lines_reach_a_2026_request_only_at_or_above_the_level_it_set() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let chatty = stateless(json!({"name": "chatty", "arguments": {}}));
    let (response, before) = exchange(&mut client, "tools/call", chatty.clone()).await;
    assert_complete(&response, &response["id"]);
    assert!(before.is_empty(), "{before:?}");
    for (level, expected) in [
        ("debug", &["debug", "info", "warning", "error"][..]),
        ("info", &["info", "warning", "error"][..]),
        ("error", &["error"][..]),
        ("emergency", &[][..]),
    ] {
        let params = add_meta(chatty.clone(), LOG_LEVEL, json!(level));
        let (response, before) = exchange(&mut client, "tools/call", params).await;
        assert_eq!(
            text_of(&assert_complete(&response, &response["id"])),
            "chatted"
        );
        assert_eq!(log_levels(&before), expected, "logLevel {level}");
    }
    client.expect_nothing_pending().await;
}

// ---------------------------------------------------------------------------------------
// subscriptions/listen

/// Opens a listen with `id` asking for `filter`; checks that the next frame is its
/// acknowledgement, tagged with `id`; returns what was acknowledged.
async fn open_listen(client: &mut Client, id: &Value, filter: Value) -> Value {
    assert!(client.backlog.is_empty(), "{:?}", client.backlog);
    client
        .send_json(request(
            id.clone(),
            "subscriptions/listen",
            stateless(json!({"notifications": filter})),
        ))
        .await;
    let ack = client.recv().await;
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "the acknowledgement comes first: {ack}"
    );
    assert!(ack.get("id").is_none(), "a notification: {ack}");
    assert_eq!(
        ack["params"]["_meta"],
        json!({SUBSCRIPTION_ID: id}),
        "{ack}"
    );
    ack["params"]["notifications"].clone()
}

#[tokio::test]
async fn two_listens_on_one_connection_each_get_only_what_they_asked_for() {
    let (server, _) = start_stateless(stateless_settings());
    let registry = server.registry().clone();
    let mut client = Client::connect(&server).await;
    let tools = json!("tools-listen");
    let others = json!(77);
    let ack = open_listen(&mut client, &tools, json!({"toolsListChanged": true})).await;
    assert_eq!(ack, json!({"toolsListChanged": true}));
    let ack = open_listen(
        &mut client,
        &others,
        json!({"promptsListChanged": true, "resourceSubscriptions": [README, VAULT]}),
    )
    .await;
    assert_eq!(ack["promptsListChanged"], true, "{ack}");
    let mut uris: Vec<&str> = ack["resourceSubscriptions"]
        .as_array()
        .expect("uris")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    uris.sort_unstable();
    let mut asked = vec![README, VAULT];
    asked.sort_unstable();
    assert_eq!(uris, asked);
    assert_eq!(ack.as_object().expect("a filter").len(), 2, "{ack}");
    client.expect_nothing_pending().await;

    registry.add_tool(plain_tool("new_tool")).expect("adds");
    assert_eq!(
        client.recv().await,
        tagged("notifications/tools/list_changed", &tools)
    );
    client.expect_nothing_pending().await;

    registry
        .add_prompt(plain_prompt("new_prompt"))
        .expect("adds");
    assert_eq!(
        client.recv().await,
        tagged("notifications/prompts/list_changed", &others)
    );
    client.expect_nothing_pending().await;

    // Nobody asked for these two; the update after them is for the second listen alone.
    registry
        .add_resource(plain_resource("mcp-ws-test://new"))
        .expect("adds");
    registry.resource_updated("mcp-ws-test://not-watched");
    registry.resource_updated(README);
    assert_eq!(client.recv().await, tagged_update(&others, README));
    client.expect_nothing_pending().await;

    // The connection serves requests meanwhile, and sees the change.
    let (id, response) = call(&mut client, "tools/list", stateless(json!({}))).await;
    let result = assert_complete(&response, &id);
    let listed = result["tools"].as_array().expect("tools");
    assert!(listed.iter().any(|t| t["name"] == "new_tool"), "{result}");
}

/// A listen subscribes to no more than `resources/subscribe` would: a resource the caller's
/// policy forbids, a URI over `max_subscription_uri_bytes` and one that names no resource are
/// left out of it (and of its acknowledgement), and the forbidden resource's updates never
/// reach it. (They were all subscribed to: the updates of a resource the caller may not read
/// reached it, and any URI of up to a whole message was kept.)
#[tokio::test]
async fn a_listen_subscribes_only_to_resources_the_caller_may_subscribe_to() {
    let mut s = stateless_settings();
    let mut anonymous = mcp_ws::config::PolicySettings {
        identities: vec!["anonymous".into()],
        scopes: Vec::new(),
        tools: vec!["*".into()],
        resources: vec![README.into()],
        prompts: vec!["*".into()],
        methods: vec!["*".into()],
    };
    anonymous
        .resources
        .push("mcp-ws-test://nothing-here".into());
    s.auth.policies = vec![anonymous];
    let (server, _) = start_stateless(s);
    let registry = server.registry().clone();
    let mut client = Client::connect(&server).await;
    let long = format!("mcp-ws-test://{}", "a".repeat(9000));
    let listen = json!("watch");
    let ack = open_listen(
        &mut client,
        &listen,
        json!({"resourceSubscriptions": [README, VAULT, long, "mcp-ws-test://nothing-here"]}),
    )
    .await;
    assert_eq!(ack, json!({"resourceSubscriptions": [README]}));
    registry.resource_updated(VAULT);
    registry.resource_updated(README);
    assert_eq!(client.recv().await, tagged_update(&listen, README));
    client.expect_nothing_pending().await;
}

/// A listen naming a resource by another spelling RFC 3986 makes equivalent (an unreserved
/// character escaped) follows it under its own URI, acknowledged as that URI once however
/// many spellings name it.
#[tokio::test]
async fn a_listen_follows_a_uri_spelled_with_escapes_under_its_own_uri() {
    let (server, _) = start_stateless(stateless_settings());
    let registry = server.registry().clone();
    let mut client = Client::connect(&server).await;
    let listen = json!("spelled");
    let ack = open_listen(
        &mut client,
        &listen,
        json!({"resourceSubscriptions": ["mcp-ws://demo/%72eadme", "mcp-ws://demo/re%61dme", README]}),
    )
    .await;
    assert_eq!(ack, json!({"resourceSubscriptions": [README]}));
    registry.resource_updated(README);
    assert_eq!(client.recv().await, tagged_update(&listen, README));
    client.expect_nothing_pending().await;
}

/// The `notifications/resources/updated` of `uri` a listen tagged `tag` gets.
fn tagged_update(tag: &Value, uri: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
           "params": {"_meta": {SUBSCRIPTION_ID: tag}, "uri": uri}})
}

/// The stateless fixtures' server, where a session (or connection) may hold two
/// subscriptions.
fn two_subscriptions_a_session() -> RunningServer {
    let mut s = stateless_settings();
    s.limits.max_subscriptions_per_session = 2;
    start_stateless(s).0
}

/// A listen's repeated URIs count once, and a listen naming more distinct URIs than
/// `limits.max_subscriptions_per_session` is refused (-32602, "Too many subscriptions")
/// before any is looked at: a message may list a million, each look a search of the
/// resources.
#[tokio::test]
async fn a_listen_naming_more_uris_than_a_session_may_hold_is_refused_unread() {
    let server = two_subscriptions_a_session();
    let mut client = Client::connect(&server).await;
    let nothing = "mcp-ws-test://nothing-here";
    let refused = "mcp_rejected_total{reason=\"subscriptions\"}";
    let repeats = json!("repeats");
    let ack = open_listen(
        &mut client,
        &repeats,
        json!({"resourceSubscriptions": [README, README, README, VAULT]}),
    )
    .await;
    let mut uris = ack["resourceSubscriptions"].clone();
    let expected = {
        let mut both = [README, VAULT];
        both.sort_unstable();
        json!(both)
    };
    assert_eq!(uris.take(), expected);
    assert_eq!(metric(&server, refused).await, 0);
    client.send_json(cancelled(&repeats)).await;
    client.expect_nothing_pending().await;

    let (id, response) = call(
        &mut client,
        "subscriptions/listen",
        stateless(json!({"notifications": {
            "resourceSubscriptions": [nothing, format!("{nothing}-too"), README]}})),
    )
    .await;
    assert_too_many_subscriptions(&response, &id, 2);
    assert_eq!(
        metric(&server, refused).await,
        1,
        "the refusal alone: no URI was looked at"
    );
}

/// All of a connection's listens, and its session's `resources/subscribe`, hold at most
/// `limits.max_subscriptions_per_session` subscriptions together: a listen that would pass it
/// is refused (-32602 "Too many subscriptions", `{limit}`, as a `resources/subscribe` past it
/// is) and holds nothing, and a listen's URIs count against a later `resources/subscribe`.
/// The URIs listens hold are in `mcp_subscriptions` until their listen ends. (Each listen had
/// the limit to itself: one connection held `max_listens_per_session` times it, none of it in
/// the gauge.)
#[tokio::test]
async fn a_connections_listens_and_session_share_one_subscription_limit() {
    let server = two_subscriptions_a_session();
    let mut client = Client::initialized(&server).await;
    let (id, response) = call(&mut client, "resources/subscribe", json!({"uri": README})).await;
    assert_session_result(&response, &id);
    assert_eq!(metric(&server, "mcp_subscriptions").await, 1);

    let first = json!("first");
    let ack = open_listen(
        &mut client,
        &first,
        json!({"resourceSubscriptions": [VAULT]}),
    )
    .await;
    assert_eq!(ack, json!({"resourceSubscriptions": [VAULT]}));
    assert_eq!(metric(&server, "mcp_subscriptions").await, 2);

    // A second listen of one URI would make three.
    let (id, response) = call(
        &mut client,
        "subscriptions/listen",
        stateless(json!({"notifications": {"resourceSubscriptions": [README]}})),
    )
    .await;
    assert_too_many_subscriptions(&response, &id, 2);
    // So would the session's second subscription.
    let (id, response) = call(&mut client, "resources/subscribe", json!({"uri": VAULT})).await;
    assert_too_many_subscriptions(&response, &id, 2);
    assert_eq!(metric(&server, "mcp_subscriptions").await, 2);

    // The refused listen holds nothing: only the first listen's update is heard.
    server.registry().resource_updated(VAULT);
    assert_eq!(client.recv().await, tagged_update(&first, VAULT));
    client.expect_nothing_pending().await;

    // The first listen ended, its room is free again.
    client.send_json(cancelled(&first)).await;
    wait_metric(&server, "mcp_subscriptions", 1).await;
    let ack = open_listen(
        &mut client,
        &json!("second"),
        json!({"resourceSubscriptions": [VAULT]}),
    )
    .await;
    assert_eq!(ack, json!({"resourceSubscriptions": [VAULT]}));
    assert_eq!(metric(&server, "mcp_subscriptions").await, 2);
}

/// A 2026-07-28 connection's listens, not only its session, hold at most
/// `limits.max_subscriptions_per_session` between them, over as many listens as it may open;
/// what they hold leaves `mcp_subscriptions` with the connection.
#[tokio::test]
async fn listens_spread_over_a_connection_are_bounded_together_and_end_with_it() {
    let server = two_subscriptions_a_session();
    let mut client = Client::connect(&server).await;
    for (id, uri) in [("readme", README), ("vault", VAULT)] {
        let ack = open_listen(
            &mut client,
            &json!(id),
            json!({"resourceSubscriptions": [uri]}),
        )
        .await;
        assert_eq!(ack, json!({"resourceSubscriptions": [uri]}));
    }
    let (id, response) = call(
        &mut client,
        "subscriptions/listen",
        stateless(json!({"notifications": {"resourceSubscriptions": [README]}})),
    )
    .await;
    assert_too_many_subscriptions(&response, &id, 2);
    assert_eq!(metric(&server, "mcp_subscriptions").await, 2);
    client.hang_up().await;
    wait_metric(&server, "mcp_subscriptions", 0).await;
}

#[tokio::test]
async fn a_listen_is_acknowledged_for_what_the_server_offers_only() {
    let server = start_bare(stateless_settings(), |b| b.tool(plain_tool("only")));
    let mut client = Client::connect(&server).await;
    let ack = open_listen(
        &mut client,
        &json!(1),
        json!({"toolsListChanged": true, "promptsListChanged": true,
               "resourcesListChanged": true, "resourceSubscriptions": ["mcp-ws-test://x"]}),
    )
    .await;
    assert_eq!(ack, json!({"toolsListChanged": true}));
    let ack = open_listen(&mut client, &json!(2), json!({})).await;
    assert_eq!(ack, json!({}), "subscribed to nothing");
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn cancelling_one_listen_ends_it_silently_and_leaves_the_other() {
    let (server, _) = start_stateless(stateless_settings());
    let registry = server.registry().clone();
    let mut client = Client::connect(&server).await;
    let first = json!("first");
    let second = json!(2);
    for id in [&first, &second] {
        open_listen(&mut client, id, json!({"toolsListChanged": true})).await;
    }
    registry.add_tool(plain_tool("one")).expect("adds");
    let mut frames = vec![client.recv().await, client.recv().await];
    frames.sort_by_key(|f| f["params"]["_meta"][SUBSCRIPTION_ID].is_number());
    assert_eq!(
        frames,
        [
            tagged("notifications/tools/list_changed", &first),
            tagged("notifications/tools/list_changed", &second),
        ]
    );

    client.send_json(cancelled(&first)).await;
    // The cancelled listen gets nothing: no result, no error.
    client.expect_nothing_pending().await;
    registry.add_tool(plain_tool("two")).expect("adds");
    assert_eq!(
        client.recv().await,
        tagged("notifications/tools/list_changed", &second)
    );
    client.expect_nothing_pending().await;

    // Its id is free again; the other's is still in use.
    let ack = open_listen(&mut client, &first, json!({"promptsListChanged": true})).await;
    assert_eq!(ack, json!({"promptsListChanged": true}));
    let (response, before) = {
        client
            .send_json(request(
                second.clone(),
                "subscriptions/listen",
                stateless(json!({"notifications": {}})),
            ))
            .await;
        let response = client.recv_response(&second).await;
        (response, client.backlog.drain(..).collect::<Vec<_>>())
    };
    assert!(before.is_empty(), "{before:?}");
    assert_error(&response, &second, -32003);
}

#[tokio::test]
async fn a_listen_needs_its_filter_and_a_connection_holds_a_bounded_number() {
    let mut settings = stateless_settings();
    settings.limits.max_listens_per_session = 2;
    let (server, _) = start_stateless(settings);
    let mut client = Client::connect(&server).await;
    for params in [json!({}), json!({"notifications": true})] {
        let (id, response) = call(&mut client, "subscriptions/listen", stateless(params)).await;
        assert_error(&response, &id, -32602);
    }
    open_listen(&mut client, &json!("a"), json!({"toolsListChanged": true})).await;
    open_listen(&mut client, &json!("b"), json!({"toolsListChanged": true})).await;
    let (id, response) = call(
        &mut client,
        "subscriptions/listen",
        stateless(json!({"notifications": {"toolsListChanged": true}})),
    )
    .await;
    assert_error(&response, &id, -32602);
}

#[tokio::test]
async fn shutdown_ends_every_listen_with_a_result_before_the_close() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let ids = [json!("a"), json!(5)];
    for id in &ids {
        open_listen(&mut client, id, json!({"toolsListChanged": true})).await;
    }
    client.expect_nothing_pending().await;
    let stopper = stop_in_background(server);
    let close = client.recv_close().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1001);
    let mut results: Vec<Value> = client.backlog.drain(..).collect();
    results.sort_by_key(|r| r["id"].is_number());
    assert_eq!(results.len(), 2, "{results:?}");
    for (response, id) in results.iter().zip(&ids) {
        let result = assert_complete(response, id);
        assert_eq!(result["_meta"][SUBSCRIPTION_ID], *id, "{response}");
        assert_eq!(
            result.as_object().expect("an object").len(),
            2,
            "only resultType and _meta: {response}"
        );
    }
    assert_stopped(stopper).await;
}

// ---------------------------------------------------------------------------------------
// Progress and cancellation

fn steps_params(n: u32) -> Value {
    stateless(json!({"name": "steps", "arguments": {"n": n}}))
}

#[tokio::test]
async fn progress_of_a_2026_request_comes_on_its_token_before_its_result() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    for token in [json!("tok-1"), json!(9)] {
        let params = add_meta(steps_params(3), "progressToken", token.clone());
        let (response, before) = exchange(&mut client, "tools/call", params).await;
        assert_eq!(
            text_of(&assert_complete(&response, &response["id"])),
            "stepped 3"
        );
        let expected: Vec<Value> = (1..=3)
            .map(|step| {
                json!({"jsonrpc": "2.0", "method": "notifications/progress",
                       "params": {"progressToken": token, "progress": f64::from(step),
                                  "total": 3.0, "message": format!("step {step}")}})
            })
            .collect();
        assert_eq!(before, expected);
    }
    let (response, before) = exchange(&mut client, "tools/call", steps_params(3)).await;
    assert_complete(&response, &response["id"]);
    assert!(before.is_empty(), "no token, no progress: {before:?}");
}

#[tokio::test]
async fn progress_of_a_2026_request_keeps_its_message_on_an_old_session_connection() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::initialized_with_version(&server, "2024-11-05").await;
    let token = json!("t");
    let session =
        json!({"name": "steps", "arguments": {"n": 1}, "_meta": {"progressToken": token}});
    let (_, before) = exchange(&mut client, "tools/call", session).await;
    assert_eq!(
        before,
        [json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 1.0, "total": 1.0}})],
        "2024-11-05 has no progress message"
    );
    let params = add_meta(steps_params(1), "progressToken", token.clone());
    let (_, before) = exchange(&mut client, "tools/call", params).await;
    assert_eq!(
        before,
        [json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": token, "progress": 1.0, "total": 1.0,
                           "message": "step 1"}})],
        "2026-07-28 has"
    );
}

#[tokio::test]
async fn a_cancelled_2026_request_stops_and_is_never_answered() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let id = json!("held");
    let params = add_meta(
        stateless(json!({"name": "step_then_hold", "arguments": {}})),
        "progressToken",
        json!("p"),
    );
    client
        .send_json(request(id.clone(), "tools/call", params))
        .await;
    let progress = client.recv().await;
    assert_eq!(progress["method"], "notifications/progress", "{progress}");
    assert_eq!(metric(&server, "mcp_workers").await, 1);

    client.send_json(cancelled(&id)).await;
    wait_metric(&server, "mcp_workers", 0).await;
    assert_eq!(metric(&server, "mcp_cancelled_total").await, 1);
    fixtures.gate.add_permits(1);
    client.expect_nothing_pending().await;
    // The connection goes on.
    let (id, response) = call(
        &mut client,
        "tools/call",
        stateless(json!({"name": "echo", "arguments": {"text": "after"}})),
    )
    .await;
    assert_eq!(text_of(&assert_complete(&response, &id)), "after");
}

// ---------------------------------------------------------------------------------------
// A dropped connection

#[tokio::test]
async fn a_kept_session_resumes_without_the_2026_requests_of_its_dropped_connection() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let response = client
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    let session_id = assert_session_result(&response, &json!(0))["_meta"]["mcp-ws/sessionId"]
        .as_str()
        .expect("the session's id, for a reconnect")
        .to_owned();
    client
        .send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    open_listen(
        &mut client,
        &json!("listen"),
        json!({"toolsListChanged": true}),
    )
    .await;
    let hold = json!({"name": "step_then_hold", "arguments": {}});
    let stateless_hold = add_meta(stateless(hold.clone()), "progressToken", json!("m"));
    let session_hold = with_meta(hold, json!({"progressToken": "l"}));
    for (id, params, token) in [
        ("stateless", stateless_hold, "m"),
        ("session", session_hold, "l"),
    ] {
        client
            .send_json(request(json!(id), "tools/call", params))
            .await;
        let progress = client.recv().await;
        assert_eq!(progress["params"]["progressToken"], token, "{progress}");
    }
    assert_eq!(metric(&server, "mcp_workers").await, 2);

    // Gone without a close frame: the session is kept for a reconnect, its 2026 request is
    // not.
    drop(client);
    wait_metric(&server, "mcp_parked_sessions", 1).await;
    wait_metric(&server, "mcp_workers", 1).await;
    assert_eq!(metric(&server, "mcp_cancelled_total").await, 1);
    server
        .registry()
        .add_tool(plain_tool("while_away"))
        .expect("adds");

    let mut resumed = resume(&server, &session_id).await;
    // Enough for both holds: only the session's is still there to take one.
    fixtures.gate.add_permits(2);
    let response = resumed.recv_response(&json!("session")).await;
    assert_eq!(
        text_of(&assert_session_result(&response, &json!("session"))),
        "released"
    );
    // What the session missed is its own notification, not the listen's; nothing else
    // comes (the 2026 request is never answered).
    assert_eq!(
        resumed.drain_until_barrier().await,
        [json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}})]
    );
}

/// A resumed connection that drops in turn leaves its 2026-07-28 requests and listens
/// behind as the first connection did: the session kept for the next reconnect, its
/// session-era state with it, and nothing of that revision.
#[tokio::test]
async fn a_resumed_session_drops_again_without_the_2026_requests_of_its_second_connection() {
    let (server, session_id, resumed) = resumed_with_2026_work().await;
    drop(resumed);
    wait_metric(&server, "mcp_parked_sessions", 1).await;
    wait_metric(&server, "mcp_workers", 0).await;
    assert_eq!(metric(&server, "mcp_cancelled_total").await, 1);
    server
        .registry()
        .add_tool(plain_tool("while_away"))
        .expect("adds");

    let mut again = resume(&server, &session_id).await;
    // The session's own notification, not the listen's.
    assert_eq!(
        again.drain_until_barrier().await,
        [json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}})]
    );
    // The listen's id is free again: the listen ended with its connection.
    open_listen(
        &mut again,
        &json!("listen"),
        json!({"toolsListChanged": true}),
    )
    .await;
}

/// The same when the resumed connection is not dropped but replaced (its client reconnects
/// while it is still attached): its 2026-07-28 requests and listens end with it, and the
/// new connection may open a listen of the same id.
#[tokio::test]
async fn a_resumed_connection_replaced_by_a_reconnect_leaves_its_2026_requests_behind() {
    let (server, session_id, mut resumed) = resumed_with_2026_work().await;
    // Reconnected while the resumed connection is still attached: it is closed (1000).
    let mut again = resume(&server, &session_id).await;
    let close = resumed.recv_close().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1000, "{close:?}");
    wait_metric(&server, "mcp_workers", 0).await;
    open_listen(
        &mut again,
        &json!("listen"),
        json!({"toolsListChanged": true}),
    )
    .await;
}

/// A session kept for a reconnect (its first connection dropped), resumed on a connection
/// that opened a 2026-07-28 listen (`"listen"`) and runs a 2026-07-28 request holding a
/// worker: the server, the session's id and that connection.
async fn resumed_with_2026_work() -> (mcp_ws::RunningServer, String, Client) {
    let (server, _fixtures) = start_stateless(stateless_settings());
    let (client, session_id) = Client::resumable_at(&server.url()).await;
    drop(client);
    wait_metric(&server, "mcp_parked_sessions", 1).await;

    let mut resumed = resume(&server, &session_id).await;
    open_listen(
        &mut resumed,
        &json!("listen"),
        json!({"toolsListChanged": true}),
    )
    .await;
    let hold = json!({"name": "step_then_hold", "arguments": {}});
    let params = add_meta(stateless(hold), "progressToken", json!("m"));
    resumed
        .send_json(request(json!("stateless"), "tools/call", params))
        .await;
    let progress = resumed.recv().await;
    assert_eq!(progress["params"]["progressToken"], "m", "{progress}");
    assert_eq!(metric(&server, "mcp_workers").await, 1);
    (server, session_id, resumed)
}

/// A WebSocket connection resuming the session `session_id`, once its session is no longer
/// parked.
async fn resume(server: &mcp_ws::RunningServer, session_id: &str) -> Client {
    let mut request = server.url().into_client_request().expect("a request");
    request.headers_mut().insert(
        "Mcp-Session-Id",
        session_id.parse().expect("a header value"),
    );
    let (ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("the session resumes");
    wait_metric(server, "mcp_parked_sessions", 0).await;
    Client::from_ws(ws)
}

#[tokio::test]
async fn requests_on_one_connection_are_each_served_with_their_own_capabilities() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let ask = json!({"name": "ask_name", "arguments": {"greeting": "Hi"}});
    // Elicitation declared: asked for a name. Only sampling (not `{}`, which never reaches
    // the cache): refused with -32021. Each request right after the other kind.
    let kinds = [(all_asks(), true), (json!({"sampling": {}}), false)];
    for (capabilities, asks) in kinds.iter().cycle().take(7) {
        let params = stateless_with(capabilities.clone(), ask.clone());
        let (id, response) = call(&mut client, "tools/call", params).await;
        if *asks {
            assert_input_required(&response, &id, &["name"]);
        } else {
            assert_error(&response, &id, -32021);
        }
    }
}

/// A 2026-07-28 request is never answered from another request of the same id: not from a
/// session-era call the connection finished (its answer is not in that revision's form),
/// nor from its own earlier round (a retry with its `inputResponses` under the same id
/// runs the tool again, which then has its answer).
#[tokio::test]
async fn a_2026_request_is_never_replayed_from_an_earlier_request_of_its_id() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    initialize_with(&mut client, json!({})).await;
    let echo = json!({"name": "echo", "arguments": {"text": "once"}});
    let session = client
        .request_with_id(json!("same"), "tools/call", echo.clone())
        .await;
    assert_eq!(
        text_of(&assert_session_result(&session, &json!("same"))),
        "once"
    );
    let modern = client
        .request_with_id(json!("same"), "tools/call", stateless(echo))
        .await;
    assert_eq!(text_of(&assert_complete(&modern, &json!("same"))), "once");

    let ask = stateless_with(
        json!({"elicitation": {}}),
        json!({"name": "ask_name", "arguments": {"greeting": "Hi"}}),
    );
    let first = client
        .request_with_id(json!("round"), "tools/call", ask.clone())
        .await;
    let (_, state) = assert_input_required(&first, &json!("round"), &["name"]);
    let retry = retry(&ask, json!({"name": accept_name("Ada")}), Some(&state));
    let second = client
        .request_with_id(json!("round"), "tools/call", retry)
        .await;
    assert_eq!(
        text_of(&assert_complete(&second, &json!("round"))),
        "Hi, Ada!"
    );
    assert_eq!(fixtures.runs(), 2, "each round ran the tool");
}
