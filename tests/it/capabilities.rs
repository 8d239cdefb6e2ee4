//! The demo capabilities and their error model (shared/design/CONTRACT.md): tools echo /
//! add / sleep / fail; unknown tool → -32602; bad arguments → `isError` result naming the
//! field; `fail` → `isError`; the readable resource and -32002 for an unknown URI; the
//! `greet` prompt and -32602 without its required argument; `logging/setLevel` and -32602 for
//! an unknown level, with `notifications/message` filtered by the level; lists reject
//! cursors the server never issued.

use crate::support::*;
use serde_json::json;

#[tokio::test]
async fn tools_list_names_the_demo_tools_with_object_schemas() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let response = client.request("tools/list", json!({})).await;
    let tools = response["result"]["tools"]
        .as_array()
        .expect("tools")
        .clone();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["add", "echo", "fail", "sleep"]);
    for tool in &tools {
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        assert!(tool["description"].is_string());
    }
    let echo = &tools[1];
    assert_eq!(echo["inputSchema"]["required"], json!(["text"]));
}

#[tokio::test]
async fn echo_add_fail_behave_per_contract() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let response = client
        .call_tool("echo", json!({"text": "héllo \"wire\""}))
        .await;
    assert_eq!(
        response["result"],
        json!({"content":[{"type":"text","text":"héllo \"wire\""}]})
    );

    // Escapes in the input decode to the same text on the way back (the text is passed
    // through as the literal received).
    client
        .send_text(r#"{"jsonrpc":"2.0","id":"esc","method":"tools/call","params":{"name":"echo","arguments":{"text":"caf\u00e9\n\"q\" \/"}}}"#)
        .await;
    let response = client.recv_response(&json!("esc")).await;
    assert_eq!(tool_text(&response), "café\n\"q\" /");

    let response = client.call_tool("add", json!({"a": 2, "b": 40})).await;
    assert_eq!(tool_text(&response), "42");
    let response = client.call_tool("add", json!({"a": 0.5, "b": 0.25})).await;
    assert_eq!(tool_text(&response), "0.75");

    let response = client.call_tool("fail", json!({"message": "boom"})).await;
    assert_eq!(response["result"]["isError"], true);
    assert_eq!(tool_text(&response), "boom");
    assert!(response.get("error").is_none());
}

#[tokio::test]
async fn bad_tool_arguments_are_an_is_error_result_naming_the_field() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let cases = [
        ("echo", json!({}), "text"),
        ("echo", json!({"text": 5}), "text"),
        ("add", json!({"a": 1}), "b"),
        ("add", json!({"a": "one", "b": 2}), "a"),
        ("sleep", json!({"ms": -1}), "ms"),
        ("echo", json!({"text": "x", "extra": 1}), "extra"),
    ];
    for (tool, arguments, field) in cases {
        let response = client.call_tool(tool, arguments.clone()).await;
        assert_eq!(
            response["result"]["isError"], true,
            "{tool} {arguments}: {response}"
        );
        let text = tool_text(&response);
        assert!(text.starts_with("Invalid arguments"), "{text}");
        // serde names a field as a path (`a: invalid type …`) or quoted (missing field `b`).
        assert!(
            text.contains(&format!("{field}:")) || text.contains(&format!("`{field}`")),
            "{tool} {arguments}: {text} should name {field}"
        );
        assert!(!text.contains("line"), "no parser positions: {text}");
    }
    // Missing arguments altogether reads as `{}`.
    let response = client.request("tools/call", json!({"name": "echo"})).await;
    assert_eq!(response["result"]["isError"], true);
    assert_eq!(
        tool_text(&response),
        "Invalid arguments: missing field `text`"
    );
    // Arguments are named: an array is refused, even one a struct could read positionally.
    let response = client.call_tool("echo", json!(["hi"])).await;
    assert_eq!(response["result"]["isError"], true, "{response}");
    assert_eq!(
        tool_text(&response),
        "Invalid arguments: must be a JSON object"
    );
}

#[tokio::test]
async fn unknown_tool_and_malformed_call_are_invalid_params() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let response = client.call_tool("nope", json!({})).await;
    let error = assert_error(&response, &response["id"], -32602);
    assert_eq!(error["data"]["tool"], "nope");
    for params in [
        json!({}),
        json!({"name": 7}),
        json!({"name":"echo","_meta":{"progressToken":{"x":1}}}),
    ] {
        let response = client.request("tools/call", params).await;
        assert_error(&response, &response["id"], -32602);
    }
}

#[tokio::test]
async fn resources_list_and_read() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let response = client.request("resources/list", json!({})).await;
    let resources = response["result"]["resources"]
        .as_array()
        .expect("list")
        .clone();
    assert!(!resources.is_empty());
    let uri = resources[0]["uri"].as_str().expect("uri").to_owned();
    let response = client.request("resources/read", json!({"uri": uri})).await;
    let contents = &response["result"]["contents"][0];
    assert_eq!(contents["uri"], uri.as_str());
    assert!(contents["text"].as_str().is_some_and(|t| !t.is_empty()));

    let response = client
        .request("resources/read", json!({"uri": "mcp-ws://nope"}))
        .await;
    let error = assert_error(&response, &response["id"], -32002);
    assert_eq!(error["data"]["uri"], "mcp-ws://nope");
    let response = client.request("resources/read", json!({})).await;
    assert_error(&response, &response["id"], -32602);
    let response = client.request("resources/templates/list", json!({})).await;
    assert_eq!(response["result"], json!({"resourceTemplates": []}));
}

#[tokio::test]
async fn greet_prompt_requires_its_argument() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let response = client.request("prompts/list", json!({})).await;
    let greet = &response["result"]["prompts"][0];
    assert_eq!(greet["name"], "greet");
    assert_eq!(
        greet["arguments"][0],
        json!({"name":"name","description":"Who to greet.","required":true})
    );

    let response = client
        .request(
            "prompts/get",
            json!({"name":"greet","arguments":{"name":"Ada"}}),
        )
        .await;
    let message = &response["result"]["messages"][0];
    assert_eq!(message["role"], "user");
    assert!(message["content"]["text"]
        .as_str()
        .is_some_and(|t| t.contains("Ada")));

    let response = client.request("prompts/get", json!({"name":"greet"})).await;
    let error = assert_error(&response, &response["id"], -32602);
    assert_eq!(error["data"]["argument"], "name");
    let response = client.request("prompts/get", json!({"name":"nope"})).await;
    assert_error(&response, &response["id"], -32602);
}

#[tokio::test]
async fn lists_reject_a_cursor_never_issued() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    for method in [
        "tools/list",
        "resources/list",
        "prompts/list",
        "resources/templates/list",
    ] {
        let response = client.request(method, json!({"cursor": "bogus"})).await;
        assert_error(&response, &response["id"], -32602);
    }
}

#[tokio::test]
async fn set_level_filters_log_notifications() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    // Default client level is info: sleep's debug line is not sent.
    let response = client.call_tool("sleep", json!({"ms": 1})).await;
    assert!(response.get("result").is_some());
    client.expect_nothing_pending().await;

    let response = client
        .request("logging/setLevel", json!({"level": "debug"}))
        .await;
    assert_eq!(response["result"], json!({}));
    let response = client.call_tool("sleep", json!({"ms": 1})).await;
    assert!(response.get("result").is_some());
    let logs = client.drain_until_barrier().await;
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(logs[0]["method"], "notifications/message");
    assert_eq!(logs[0]["params"]["level"], "debug");
    assert_eq!(logs[0]["params"]["data"], json!({"sleeping_ms": 1}));

    for level in ["loud", "DEBUG", ""] {
        let response = client
            .request("logging/setLevel", json!({"level": level}))
            .await;
        assert_error(&response, &response["id"], -32602);
    }
}
