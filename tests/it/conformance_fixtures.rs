//! The conformance profile: `config/conformance.toml` (`builtins.set = "conformance"`) serves
//! the fixtures of the official MCP conformance suite's server scenarios (0.1.16 and
//! 0.2.0-alpha.12) as those scenarios check them. Each test drives a server started from the
//! profile over a real WebSocket, as the suite's client would over Streamable HTTP, and
//! answers the server's sampling and elicitation requests the way the suite's client does.
//!
//! - `tools/list` names every fixture with a description and an object `inputSchema`, names
//!   within `^[A-Za-z0-9_.-]{1,128}$`, in the same order every time; the JSON Schema 2020-12
//!   tool's schema comes back verbatim.
//! - Content tools: the exact text, a valid PNG as `image/png`, a valid WAV as exactly
//!   `audio/wav`, the embedded resource, the three mixed blocks; the error tool answers a
//!   result with `isError: true`, not a JSON-RPC error.
//! - Logging: three `info` lines, in order, before the result; none below the session's level.
//! - Progress: 0, 50, 100 of 100, before the result, echoing the token as sent (the string of
//!   0.2.0, the number 0.1.16's SDK puts there); nothing without a token.
//! - Sampling and elicitation: the request the server sends is the one the scenario expects
//!   (messages, maxTokens; message and requestedSchema, with the SEP-1034 defaults and the
//!   SEP-1330 enum shapes), the result is built from the client's answer, and a client
//!   without the capability gets an `isError` result without any request being sent.
//! - Resources, the template and subscriptions; prompts and completion; `ping` and
//!   `logging/setLevel` answer exactly `{}`.
//! - The 2026-07-28 fixtures, on a 2025-11-25 session: each asks the client what the
//!   `input-required-result-*` and `server-stateless` scenarios expect as input requests
//!   (several at once where a scenario expects them in one round, one after the other for
//!   multi-round), and only through capabilities the client declared.
//! - The profile file validates, differs from the defaults only in what it sets, comments
//!   every key, builds the fixture set, and the binary serves it with `--config`.

use crate::support::process::ServerProcess;
use crate::support::*;

use base64::Engine;
use mcp_ws::{RunningServer, Server, Settings};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::Path;

/// What the suite's client declares (`{sampling: {}, elicitation: {}}`), plus roots for the
/// fixtures that ask for them.
fn harness_capabilities() -> Value {
    json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}})
}

/// A 2025-11-25 session whose client declares `capabilities`.
async fn session(server: &RunningServer, capabilities: Value) -> Client {
    let mut client = Client::connect(server).await;
    let response = client
        .request_with_id(
            json!(0),
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": capabilities,
                "clientInfo": {"name": "conformance-test-client", "version": "1.0.0"}
            }),
        )
        .await;
    assert_eq!(
        response["result"]["protocolVersion"], "2025-11-25",
        "{response}"
    );
    client
        .send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    client
}

/// Everything the server sent for one request: its requests to the client (each answered),
/// its notifications, in order, and finally the response.
struct Exchange {
    requests: Vec<Value>,
    notifications: Vec<Value>,
    response: Value,
}

impl Exchange {
    fn result(&self) -> &Value {
        assert!(self.response.get("error").is_none(), "{}", self.response);
        &self.response["result"]
    }

    /// The text of the result's only content block.
    fn only_text(&self) -> &str {
        let content = self.result()["content"]
            .as_array()
            .unwrap_or_else(|| panic!("content array: {}", self.response));
        assert_eq!(content.len(), 1, "{}", self.response);
        assert_eq!(content[0]["type"], "text", "{}", self.response);
        content[0]["text"].as_str().expect("text")
    }
}

/// Sends a request and serves the client's side until its response: every request the
/// server sends meanwhile gets `answer(request)` as its result (a JSON-RPC response frame
/// with the request's integer id).
async fn exchange(
    client: &mut Client,
    method: &str,
    params: Value,
    answer: impl Fn(&Value) -> Value,
) -> Exchange {
    let id = client.fresh_id();
    client
        .send_json(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .await;
    let (mut requests, mut notifications) = (Vec::new(), Vec::new());
    loop {
        let frame = client.recv().await;
        match (frame.get("method"), frame.get("id")) {
            (Some(_), Some(request_id)) => {
                assert!(
                    request_id.is_u64(),
                    "server request ids are integers: {frame}"
                );
                let result = answer(&frame);
                client
                    .send_json(json!({"jsonrpc": "2.0", "id": request_id, "result": result}))
                    .await;
                requests.push(frame);
            }
            (Some(_), None) => notifications.push(frame),
            (None, Some(got)) if got == &id => {
                return Exchange {
                    requests,
                    notifications,
                    response: frame,
                }
            }
            _ => panic!("unexpected frame: {frame}"),
        }
    }
}

async fn call(client: &mut Client, params: Value) -> Exchange {
    exchange(client, "tools/call", params, |request| {
        panic!("no client request expected, got {request}")
    })
    .await
}

fn tool_call(name: &str) -> Value {
    json!({"name": name, "arguments": {}})
}

fn decode_base64(data: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(data.as_str().expect("base64 is a string"))
        .expect("valid base64")
}

/// A PNG of 1×1 pixel.
fn assert_one_pixel_png(data: &Value) {
    let png = decode_base64(data);
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "PNG signature");
    assert_eq!(&png[12..16], b"IHDR");
    assert_eq!(&png[16..24], &[0, 0, 0, 1, 0, 0, 0, 1], "1x1");
}

/// The suite's sampling answer (`tools-call-sampling`, `input-required-result-*`).
fn sampling_answer(text: &str) -> Value {
    json!({
        "role": "assistant",
        "content": {"type": "text", "text": text},
        "model": "test-model",
        "stopReason": "endTurn"
    })
}

fn accept(content: Value) -> Value {
    json!({"action": "accept", "content": content})
}

/// The form the `input-required-result-*` scenarios expect for a one-field text question.
fn text_form(field: &str) -> Value {
    json!({"type": "object", "properties": {field: {"type": "string"}}, "required": [field]})
}

/// The JSON after `prefix` in `text`.
fn json_after(text: &str, prefix: &str) -> Value {
    let rest = text
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{text:?} does not start with {prefix:?}"));
    serde_json::from_str(rest).unwrap_or_else(|e| panic!("{rest:?} is not JSON: {e}"))
}

// ---- lifecycle and listings ---------------------------------------------------------------

#[tokio::test]
async fn initialize_declares_what_the_scenarios_use_and_empty_results_are_empty() {
    let server = start_profile();
    let mut client = Client::connect(&server).await;
    let response = client
        .request_with_id(
            json!(0),
            "initialize",
            json!({
                "protocolVersion": "2025-11-25",
                "capabilities": {"sampling": {}, "elicitation": {}},
                "clientInfo": {"name": "conformance-test-client", "version": "1.0.0"}
            }),
        )
        .await;
    let result = assert_result(&response, &json!(0));
    assert_eq!(result["serverInfo"]["name"], "mcp-ws-conformance");
    assert!(result["serverInfo"]["version"].is_string(), "{result}");
    let caps = &result["capabilities"];
    for capability in ["tools", "resources", "prompts", "logging", "completions"] {
        assert!(
            caps[capability].is_object(),
            "{capability} declared: {caps}"
        );
    }
    assert_eq!(caps["resources"]["subscribe"], true, "{caps}");
    client
        .send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;

    // `ping` and `logging/setLevel` are parsed with a strict empty schema by the suite.
    assert_eq!(client.request("ping", json!({})).await["result"], json!({}));
    let set_level = client
        .request("logging/setLevel", json!({"level": "info"}))
        .await;
    assert_eq!(set_level["result"], json!({}), "{set_level}");
}

const TOOLS: [&str; 35] = [
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_tool_with_logging",
    "test_error_handling",
    "test_tool_with_progress",
    "test_sampling",
    "test_elicitation",
    "test_elicitation_sep1034_defaults",
    "test_elicitation_sep1330_enums",
    "json_schema_2020_12_tool",
    "test_reconnection",
    "test_missing_capability",
    "test_streaming_elicitation",
    "test_logging_tool",
    "test_custom_header_tool",
    "test_input_required_result_elicitation",
    "test_input_required_result_sampling",
    "test_input_required_result_list_roots",
    "test_input_required_result_request_state",
    "test_input_required_result_multiple_inputs",
    "test_input_required_result_multi_round",
    "test_input_required_result_tampered_state",
    "test_input_required_result_capabilities",
    "test_trigger_tool_change",
    "test_trigger_prompt_change",
    "greet",
    "slow_compute",
    "failing_job",
    "protocol_error_job",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
];

#[tokio::test]
async fn tools_list_names_every_fixture_with_description_and_schema_in_a_stable_order() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;
    let mut orders = Vec::new();
    let mut tools = Vec::new();
    for _ in 0..3 {
        let response = client.request("tools/list", json!({})).await;
        tools = response["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("tools array: {response}"))
            .clone();
        assert!(
            response["result"].get("nextCursor").is_none(),
            "one page: {response}"
        );
        orders.push(tools.iter().map(|t| t["name"].clone()).collect::<Vec<_>>());
    }
    assert!(orders.windows(2).all(|w| w[0] == w[1]), "order: {orders:?}");

    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    let mut expected = TOOLS.to_vec();
    expected.sort_unstable();
    let mut listed = names.clone();
    listed.sort_unstable();
    assert_eq!(listed, expected);
    for tool in &tools {
        let name = tool["name"].as_str().expect("name");
        assert!(
            (1..=128).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)),
            "tool name format: {name}"
        );
        assert!(
            tool["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{tool}"
        );
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
    }
    let schema_of = |name: &str| -> Value {
        tools
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["inputSchema"].clone())
            .expect("listed")
    };
    for (tool, argument) in [("test_sampling", "prompt"), ("test_elicitation", "message")] {
        let schema = schema_of(tool);
        assert_eq!(schema["properties"][argument]["type"], "string", "{schema}");
        assert_eq!(schema["required"], json!([argument]), "{schema}");
    }
    assert_eq!(
        schema_of("test_custom_header_tool")["properties"]["region"],
        json!({"type": "string", "description": "A region name", "x-mcp-header": "Region"})
    );

    // json-schema-2020-12 (0.2.0a12's schema, a superset of 0.1.16's): returned verbatim.
    assert_eq!(
        schema_of("json_schema_2020_12_tool"),
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": {
                "address": {
                    "$anchor": "addressDef",
                    "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}}
                }
            },
            "properties": {
                "name": {"type": "string"},
                "address": {"$ref": "#/$defs/address"},
                "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                "phone": {"type": "string"},
                "email": {"type": "string"}
            },
            "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
            "if": {
                "properties": {"contactMethod": {"const": "phone"}},
                "required": ["contactMethod"]
            },
            "then": {"required": ["phone"]},
            "else": {"required": ["email"]},
            "additionalProperties": false
        })
    );
    let description = tools
        .iter()
        .find(|t| t["name"] == "json_schema_2020_12_tool")
        .map(|t| t["description"].clone());
    assert_eq!(
        description,
        Some(json!("Tool with JSON Schema 2020-12 features"))
    );
}

// ---- content tools ------------------------------------------------------------------------

#[tokio::test]
async fn content_tools_answer_the_exact_blocks_of_their_scenarios() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;

    // tools-call-simple-text sends no `arguments` at all.
    let simple = call(&mut client, json!({"name": "test_simple_text"})).await;
    assert_eq!(
        simple.only_text(),
        "This is a simple text response for testing."
    );
    assert!(
        simple.result().get("isError").is_none(),
        "{}",
        simple.response
    );

    let image = call(&mut client, tool_call("test_image_content")).await;
    let blocks = image.result()["content"]
        .as_array()
        .expect("content")
        .clone();
    assert_eq!(blocks.len(), 1, "{}", image.response);
    assert_eq!(blocks[0]["type"], "image");
    assert_eq!(blocks[0]["mimeType"], "image/png");
    assert_one_pixel_png(&blocks[0]["data"]);

    let audio = call(&mut client, tool_call("test_audio_content")).await;
    let blocks = audio.result()["content"]
        .as_array()
        .expect("content")
        .clone();
    assert_eq!(blocks.len(), 1, "{}", audio.response);
    assert_eq!(blocks[0]["type"], "audio");
    assert_eq!(blocks[0]["mimeType"], "audio/wav", "exactly audio/wav");
    let wav = decode_base64(&blocks[0]["data"]);
    assert_eq!((&wav[..4], &wav[8..12]), (&b"RIFF"[..], &b"WAVE"[..]));

    let embedded = call(&mut client, tool_call("test_embedded_resource")).await;
    assert_eq!(
        embedded.result()["content"],
        json!([{
            "type": "resource",
            "resource": {
                "uri": "test://embedded-resource",
                "mimeType": "text/plain",
                "text": "This is an embedded resource content."
            }
        }])
    );

    let mixed = call(&mut client, tool_call("test_multiple_content_types")).await;
    let blocks = mixed.result()["content"]
        .as_array()
        .expect("content")
        .clone();
    assert_eq!(blocks.len(), 3, "{}", mixed.response);
    assert_eq!(
        blocks[0],
        json!({"type": "text", "text": "Multiple content types test:"})
    );
    assert_eq!(
        (&blocks[1]["type"], &blocks[1]["mimeType"]),
        (&json!("image"), &json!("image/png"))
    );
    assert_one_pixel_png(&blocks[1]["data"]);
    assert_eq!(
        blocks[2],
        json!({
            "type": "resource",
            "resource": {
                "uri": "test://mixed-content-resource",
                "mimeType": "application/json",
                "text": "{\"test\":\"data\",\"value\":123}"
            }
        })
    );
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn the_error_tool_answers_an_is_error_result_not_a_protocol_error() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;
    let failed = call(&mut client, tool_call("test_error_handling")).await;
    assert_eq!(failed.result()["isError"], true, "{}", failed.response);
    assert_eq!(
        failed.only_text(),
        "This tool intentionally returns an error for testing"
    );
}

// ---- logging and progress -----------------------------------------------------------------

#[tokio::test]
async fn logging_tool_sends_three_info_lines_in_order_before_its_result() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;
    let set_level = client
        .request("logging/setLevel", json!({"level": "debug"}))
        .await;
    assert_eq!(set_level["result"], json!({}), "{set_level}");

    let logged = call(&mut client, tool_call("test_tool_with_logging")).await;
    let lines: Vec<(Value, Value)> = logged
        .notifications
        .iter()
        .map(|n| {
            assert_eq!(n["method"], "notifications/message", "{n}");
            (n["params"]["level"].clone(), n["params"]["data"].clone())
        })
        .collect();
    assert_eq!(
        lines,
        vec![
            (json!("info"), json!("Tool execution started")),
            (json!("info"), json!("Tool processing data")),
            (json!("info"), json!("Tool execution completed")),
        ]
    );
    assert_eq!(
        logged.only_text(),
        "Tool with logging executed successfully"
    );

    // They are log lines of level info: a session at warning gets none.
    client
        .request("logging/setLevel", json!({"level": "warning"}))
        .await;
    let quiet = call(&mut client, tool_call("test_tool_with_logging")).await;
    assert!(quiet.notifications.is_empty(), "{:?}", quiet.notifications);
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn progress_tool_reports_0_50_100_of_100_before_its_result_echoing_the_token() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;
    // 0.2.0a12 sends the scenario's string; 0.1.16's SDK replaces it with the request id.
    for token in [json!("progress-test-1"), json!(1)] {
        let reported = call(
            &mut client,
            json!({
                "name": "test_tool_with_progress",
                "arguments": {},
                "_meta": {"progressToken": token}
            }),
        )
        .await;
        // (progress, total) as numbers, whatever their JSON spelling (`50` or `50.0`).
        let progress: Vec<(Option<f64>, Option<f64>)> = reported
            .notifications
            .iter()
            .map(|n| {
                assert_eq!(n["method"], "notifications/progress", "{n}");
                assert_eq!(n["params"]["progressToken"], token, "same JSON value: {n}");
                (
                    n["params"]["progress"].as_f64(),
                    n["params"]["total"].as_f64(),
                )
            })
            .collect();
        let of_100 = |p: f64| (Some(p), Some(100.0));
        assert_eq!(progress, vec![of_100(0.0), of_100(50.0), of_100(100.0)]);
        assert_eq!(
            reported.only_text(),
            "Tool with progress executed successfully"
        );
    }

    let unasked = call(&mut client, tool_call("test_tool_with_progress")).await;
    assert!(
        unasked.notifications.is_empty(),
        "{:?}",
        unasked.notifications
    );
    client.expect_nothing_pending().await;
}

// ---- sampling and elicitation -------------------------------------------------------------

#[tokio::test]
async fn sampling_tool_sends_the_scenarios_request_and_reports_the_answer() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;
    let sampled = exchange(
        &mut client,
        "tools/call",
        json!({"name": "test_sampling", "arguments": {"prompt": "Test prompt for sampling"}}),
        |_| sampling_answer("This is a test response from the client"),
    )
    .await;
    assert_eq!(sampled.requests.len(), 1, "{:?}", sampled.requests);
    assert_eq!(sampled.requests[0]["method"], "sampling/createMessage");
    assert_eq!(
        sampled.requests[0]["params"],
        json!({
            "messages": [{
                "role": "user",
                "content": {"type": "text", "text": "Test prompt for sampling"}
            }],
            "maxTokens": 100
        })
    );
    assert_eq!(
        sampled.only_text(),
        "LLM response: This is a test response from the client"
    );
}

#[tokio::test]
async fn a_client_without_sampling_or_elicitation_gets_an_error_result_and_no_request() {
    let server = start_profile();
    let mut client = session(&server, json!({})).await;
    for (params, capability) in [
        (
            json!({"name": "test_sampling", "arguments": {"prompt": "hi"}}),
            "sampling",
        ),
        (
            json!({"name": "test_elicitation", "arguments": {"message": "hi"}}),
            "elicitation",
        ),
        (tool_call("test_missing_capability"), "sampling"),
    ] {
        let refused = call(&mut client, params).await;
        assert_eq!(refused.result()["isError"], true, "{}", refused.response);
        assert!(
            refused.only_text().contains(capability),
            "names {capability}: {}",
            refused.response
        );
    }
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn elicitation_tool_asks_for_username_and_email_and_reports_the_answer() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;
    let answered = exchange(
        &mut client,
        "tools/call",
        json!({
            "name": "test_elicitation",
            "arguments": {"message": "Please provide your information"}
        }),
        |_| accept(json!({"username": "testuser", "email": "test@example.com"})),
    )
    .await;
    assert_eq!(answered.requests.len(), 1, "{:?}", answered.requests);
    let request = &answered.requests[0];
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(
        request["params"]["message"],
        "Please provide your information"
    );
    assert_eq!(request["params"]["mode"], "form");
    assert_eq!(
        request["params"]["requestedSchema"],
        json!({
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"}
            },
            "required": ["username", "email"]
        })
    );
    assert_eq!(
        json_after(
            answered.only_text(),
            "User response: action=accept, content="
        ),
        json!({"username": "testuser", "email": "test@example.com"})
    );

    let declined = exchange(
        &mut client,
        "tools/call",
        json!({"name": "test_elicitation", "arguments": {"message": "Again?"}}),
        |_| json!({"action": "decline"}),
    )
    .await;
    assert_eq!(
        declined.only_text(),
        "User response: action=decline, content={}"
    );
}

#[tokio::test]
async fn sep1034_tool_asks_with_a_default_for_every_primitive_type() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;
    let answer = json!({
        "name": "Jane Smith", "age": 25, "score": 88, "status": "inactive", "verified": false
    });
    let answered = exchange(
        &mut client,
        "tools/call",
        tool_call("test_elicitation_sep1034_defaults"),
        |_| accept(answer.clone()),
    )
    .await;
    assert_eq!(answered.requests.len(), 1, "{:?}", answered.requests);
    let properties = &answered.requests[0]["params"]["requestedSchema"]["properties"];
    for (field, kind, default) in [
        ("name", "string", json!("John Doe")),
        ("age", "integer", json!(30)),
        ("score", "number", json!(95.5)),
        ("status", "string", json!("active")),
        ("verified", "boolean", json!(true)),
    ] {
        assert_eq!(properties[field]["type"], kind, "{field}: {properties}");
        assert_eq!(
            properties[field]["default"], default,
            "{field}: {properties}"
        );
    }
    assert_eq!(
        properties["status"]["enum"],
        json!(["active", "inactive", "pending"])
    );
    assert_eq!(
        json_after(
            answered.only_text(),
            "Elicitation completed: action=accept, content="
        ),
        answer
    );
}

#[tokio::test]
async fn sep1330_tool_asks_with_the_five_enum_shapes() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;
    let answer = json!({
        "untitledSingle": "option1",
        "titledSingle": "value1",
        "legacyEnum": "opt1",
        "untitledMulti": ["option1", "option2"],
        "titledMulti": ["value1", "value2"]
    });
    let answered = exchange(
        &mut client,
        "tools/call",
        tool_call("test_elicitation_sep1330_enums"),
        |_| accept(answer.clone()),
    )
    .await;
    assert_eq!(answered.requests.len(), 1, "{:?}", answered.requests);
    let p = &answered.requests[0]["params"]["requestedSchema"]["properties"];
    let titled = |prefix: &str| {
        json!([
            {"const": "value1", "title": format!("First {prefix}")},
            {"const": "value2", "title": format!("Second {prefix}")},
            {"const": "value3", "title": format!("Third {prefix}")}
        ])
    };
    let options = json!(["option1", "option2", "option3"]);

    assert_eq!(
        (&p["untitledSingle"]["type"], &p["untitledSingle"]["enum"]),
        (&json!("string"), &options)
    );
    assert!(
        p["untitledSingle"].get("oneOf").is_none()
            && p["untitledSingle"].get("enumNames").is_none()
    );

    assert_eq!(p["titledSingle"]["type"], "string");
    assert_eq!(p["titledSingle"]["oneOf"], titled("Option"));
    assert!(p["titledSingle"].get("enum").is_none(), "{p}");

    assert_eq!(p["legacyEnum"]["enum"], json!(["opt1", "opt2", "opt3"]));
    assert_eq!(
        p["legacyEnum"]["enumNames"],
        json!(["Option One", "Option Two", "Option Three"])
    );

    assert_eq!(p["untitledMulti"]["type"], "array");
    assert_eq!(
        p["untitledMulti"]["items"],
        json!({"type": "string", "enum": options})
    );

    assert_eq!(p["titledMulti"]["type"], "array");
    assert_eq!(
        p["titledMulti"]["items"],
        json!({"anyOf": titled("Choice")})
    );

    assert_eq!(
        json_after(
            answered.only_text(),
            "Elicitation completed: action=accept, content="
        ),
        answer
    );
}

#[tokio::test]
async fn an_answer_outside_the_requested_form_is_an_error_result() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;
    let answered = exchange(
        &mut client,
        "tools/call",
        tool_call("test_elicitation_sep1330_enums"),
        |_| accept(json!({"untitledSingle": "option9"})),
    )
    .await;
    assert_eq!(answered.result()["isError"], true, "{}", answered.response);
    assert!(
        answered.only_text().contains("untitledSingle"),
        "{}",
        answered.response
    );
}

// ---- resources ----------------------------------------------------------------------------

#[tokio::test]
async fn resources_read_as_their_scenarios_describe_and_subscriptions_answer_empty() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;

    let list = client.request("resources/list", json!({})).await;
    let resources = list["result"]["resources"]
        .as_array()
        .expect("resources")
        .clone();
    let uris: Vec<&str> = resources.iter().filter_map(|r| r["uri"].as_str()).collect();
    assert_eq!(
        uris,
        [
            "test://static-binary",
            "test://static-text",
            "test://watched-resource"
        ]
    );
    for resource in &resources {
        for member in ["name", "description", "mimeType"] {
            assert!(resource[member].is_string(), "{member}: {resource}");
        }
    }

    let text = client
        .request("resources/read", json!({"uri": "test://static-text"}))
        .await;
    assert_eq!(
        text["result"]["contents"],
        json!([{
            "uri": "test://static-text",
            "mimeType": "text/plain",
            "text": "This is the content of the static text resource."
        }])
    );

    let binary = client
        .request("resources/read", json!({"uri": "test://static-binary"}))
        .await;
    let contents = binary["result"]["contents"]
        .as_array()
        .expect("contents")
        .clone();
    assert_eq!(contents.len(), 1, "{binary}");
    assert_eq!(
        (&contents[0]["uri"], &contents[0]["mimeType"]),
        (&json!("test://static-binary"), &json!("image/png"))
    );
    assert!(contents[0].get("text").is_none(), "{binary}");
    assert_one_pixel_png(&contents[0]["blob"]);

    let templates = client.request("resources/templates/list", json!({})).await;
    assert_eq!(
        templates["result"]["resourceTemplates"][0]["uriTemplate"], "test://template/{id}/data",
        "{templates}"
    );
    let templated = client
        .request("resources/read", json!({"uri": "test://template/123/data"}))
        .await;
    assert_eq!(
        templated["result"]["contents"],
        json!([{
            "uri": "test://template/123/data",
            "mimeType": "application/json",
            "text": "{\"id\":\"123\",\"templateTest\":true,\"data\":\"Data for ID: 123\"}"
        }])
    );
    let other = client
        .request("resources/read", json!({"uri": "test://template/abc/data"}))
        .await;
    let text = other["result"]["contents"][0]["text"]
        .as_str()
        .expect("text");
    assert_eq!(
        serde_json::from_str::<Value>(text).expect("JSON"),
        json!({"id": "abc", "templateTest": true, "data": "Data for ID: abc"})
    );

    for method in ["resources/subscribe", "resources/unsubscribe"] {
        let answer = client
            .request(method, json!({"uri": "test://watched-resource"}))
            .await;
        assert_eq!(answer["result"], json!({}), "{method}: {answer}");
    }

    // sep-2164 reads a URI no fixture has: an error naming it, never empty contents.
    let missing_uri = "test://nonexistent-resource-for-conformance-testing";
    let id = client.fresh_id();
    let missing = client
        .request_with_id(id.clone(), "resources/read", json!({"uri": missing_uri}))
        .await;
    let error = assert_error(&missing, &id, -32002);
    assert_eq!(error["data"]["uri"], missing_uri);
}

// ---- prompts and completion ---------------------------------------------------------------

#[tokio::test]
async fn prompts_render_as_their_scenarios_describe() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;

    let list = client.request("prompts/list", json!({})).await;
    let prompts = list["result"]["prompts"]
        .as_array()
        .expect("prompts")
        .clone();
    let mut names: Vec<&str> = prompts.iter().filter_map(|p| p["name"].as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "test_input_required_result_prompt",
            "test_prompt_with_arguments",
            "test_prompt_with_embedded_resource",
            "test_prompt_with_image",
            "test_simple_prompt"
        ]
    );
    for prompt in &prompts {
        assert!(
            prompt["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "{prompt}"
        );
    }
    let with_arguments = prompts
        .iter()
        .find(|p| p["name"] == "test_prompt_with_arguments")
        .expect("listed");
    let declared: Vec<(&Value, &Value)> = with_arguments["arguments"]
        .as_array()
        .expect("arguments")
        .iter()
        .map(|a| (&a["name"], &a["required"]))
        .collect();
    assert_eq!(
        declared,
        [
            (&json!("arg1"), &json!(true)),
            (&json!("arg2"), &json!(true))
        ]
    );

    let simple = client
        .request("prompts/get", json!({"name": "test_simple_prompt"}))
        .await;
    assert_eq!(
        simple["result"]["messages"],
        json!([{
            "role": "user",
            "content": {"type": "text", "text": "This is a simple prompt for testing."}
        }])
    );

    let with_args = client
        .request(
            "prompts/get",
            json!({
                "name": "test_prompt_with_arguments",
                "arguments": {"arg1": "testValue1", "arg2": "testValue2"}
            }),
        )
        .await;
    assert_eq!(
        with_args["result"]["messages"],
        json!([{
            "role": "user",
            "content": {
                "type": "text",
                "text": "Prompt with arguments: arg1='testValue1', arg2='testValue2'"
            }
        }])
    );
    let id = client.fresh_id();
    let incomplete = client
        .request_with_id(
            id.clone(),
            "prompts/get",
            json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "x"}}),
        )
        .await;
    assert_error(&incomplete, &id, -32602);

    let embedded = client
        .request(
            "prompts/get",
            json!({
                "name": "test_prompt_with_embedded_resource",
                "arguments": {"resourceUri": "test://example-resource"}
            }),
        )
        .await;
    assert_eq!(
        embedded["result"]["messages"],
        json!([
            {
                "role": "user",
                "content": {
                    "type": "resource",
                    "resource": {
                        "uri": "test://example-resource",
                        "mimeType": "text/plain",
                        "text": "Embedded resource content for testing."
                    }
                }
            },
            {
                "role": "user",
                "content": {"type": "text", "text": "Please process the embedded resource above."}
            }
        ])
    );

    let image = client
        .request("prompts/get", json!({"name": "test_prompt_with_image"}))
        .await;
    let messages = image["result"]["messages"]
        .as_array()
        .expect("messages")
        .clone();
    assert_eq!(messages.len(), 2, "{image}");
    assert_eq!(
        (
            &messages[0]["role"],
            &messages[0]["content"]["type"],
            &messages[0]["content"]["mimeType"]
        ),
        (&json!("user"), &json!("image"), &json!("image/png"))
    );
    assert_one_pixel_png(&messages[0]["content"]["data"]);
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": {"type": "text", "text": "Please analyze the image above."}})
    );
}

#[tokio::test]
async fn completion_offers_values_for_the_arguments_prompt() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;
    let complete = |value: &str| {
        json!({
            "ref": {"type": "ref/prompt", "name": "test_prompt_with_arguments"},
            "argument": {"name": "arg1", "value": value}
        })
    };
    // completion-complete's request, then its documentation's example.
    for (typed, expected) in [
        ("test", json!(["testValue1", "testValue2"])),
        ("par", json!(["paris", "park", "party"])),
        ("zzz", json!([])),
    ] {
        let answer = client.request("completion/complete", complete(typed)).await;
        assert_eq!(
            answer["result"]["completion"]["values"], expected,
            "{answer}"
        );
    }
}

// ---- fixtures of the 2026-07-28 scenarios, on a 2025-11-25 session ------------------------

#[tokio::test]
async fn input_required_fixtures_ask_what_their_scenarios_expect_as_input_requests() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;

    let named = exchange(
        &mut client,
        "tools/call",
        tool_call("test_input_required_result_elicitation"),
        |_| accept(json!({"name": "Alice"})),
    )
    .await;
    assert_eq!(named.requests.len(), 1);
    assert_eq!(named.requests[0]["method"], "elicitation/create");
    assert_eq!(named.requests[0]["params"]["message"], "What is your name?");
    assert_eq!(
        named.requests[0]["params"]["requestedSchema"],
        text_form("name")
    );
    assert_eq!(named.only_text(), "Hello, Alice!");

    let sampled = exchange(
        &mut client,
        "tools/call",
        tool_call("test_input_required_result_sampling"),
        |_| sampling_answer("The capital of France is Paris."),
    )
    .await;
    assert_eq!(sampled.requests.len(), 1);
    assert_eq!(
        sampled.requests[0]["params"],
        json!({
            "messages": [{
                "role": "user",
                "content": {"type": "text", "text": "What is the capital of France?"}
            }],
            "maxTokens": 100
        })
    );
    assert_eq!(
        sampled.only_text(),
        "Sampling result: The capital of France is Paris."
    );

    let rooted = exchange(
        &mut client,
        "tools/call",
        tool_call("test_input_required_result_list_roots"),
        |_| json!({"roots": [{"uri": "file:///test/root", "name": "Test Root"}]}),
    )
    .await;
    assert_eq!(rooted.requests.len(), 1);
    assert_eq!(
        (&rooted.requests[0]["method"], &rooted.requests[0]["params"]),
        (&json!("roots/list"), &json!({}))
    );
    assert_eq!(rooted.only_text(), "Found 1 root(s): file:///test/root");

    let confirm_form = json!({
        "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]
    });
    for tool in [
        "test_input_required_result_request_state",
        "test_input_required_result_tampered_state",
    ] {
        let confirmed = exchange(&mut client, "tools/call", tool_call(tool), |_| {
            accept(json!({"ok": true}))
        })
        .await;
        assert_eq!(confirmed.requests.len(), 1, "{tool}");
        assert_eq!(confirmed.requests[0]["params"]["message"], "Please confirm");
        assert_eq!(
            confirmed.requests[0]["params"]["requestedSchema"],
            confirm_form
        );
        assert!(confirmed.result().get("isError").is_none(), "{tool}");
    }

    let streamed = exchange(
        &mut client,
        "tools/call",
        tool_call("test_streaming_elicitation"),
        |_| accept(json!({"name": "Bob"})),
    )
    .await;
    assert_eq!(streamed.requests[0]["method"], "elicitation/create");
    assert_eq!(streamed.only_text(), "Hello, Bob!");

    let rendered = exchange(
        &mut client,
        "prompts/get",
        json!({"name": "test_input_required_result_prompt"}),
        |_| accept(json!({"context": "test context"})),
    )
    .await;
    assert_eq!(rendered.requests.len(), 1);
    assert_eq!(
        rendered.requests[0]["params"]["message"],
        "What context should the prompt use?"
    );
    assert_eq!(
        rendered.requests[0]["params"]["requestedSchema"],
        text_form("context")
    );
    assert_eq!(
        rendered.result()["messages"],
        json!([{"role": "user", "content": {"type": "text", "text": "Prompt with context: test context"}}])
    );
    client.expect_nothing_pending().await;
}

/// Answers one server request the way the suite's client does, by method.
fn harness_answer(request: &Value) -> Value {
    match request["method"].as_str() {
        Some("elicitation/create") => {
            let schema = &request["params"]["requestedSchema"]["properties"];
            if schema.get("color").is_some() {
                accept(json!({"color": "blue"}))
            } else {
                accept(json!({"name": "Alice"}))
            }
        }
        Some("sampling/createMessage") => sampling_answer("Hello there!"),
        Some("roots/list") => json!({"roots": [{"uri": "file:///test/root", "name": "Test Root"}]}),
        other => panic!("unexpected client request {other:?}"),
    }
}

#[tokio::test]
async fn multiple_inputs_are_asked_together_and_multi_round_one_after_the_other() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;

    // All three requests arrive before any is answered: one round under 2026-07-28.
    let id = client.fresh_id();
    client
        .send_json(json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": tool_call("test_input_required_result_multiple_inputs")
        }))
        .await;
    let mut requests = Vec::new();
    while requests.len() < 3 {
        let frame = client.recv().await;
        assert!(
            frame.get("method").is_some() && frame.get("id").is_some(),
            "{frame}"
        );
        requests.push(frame);
    }
    let mut methods: Vec<&str> = requests
        .iter()
        .filter_map(|r| r["method"].as_str())
        .collect();
    methods.sort_unstable();
    assert_eq!(
        methods,
        ["elicitation/create", "roots/list", "sampling/createMessage"]
    );
    let greeting = requests
        .iter()
        .find(|r| r["method"] == "sampling/createMessage")
        .expect("asked");
    assert_eq!(greeting["params"]["maxTokens"], 50);
    assert_eq!(
        greeting["params"]["messages"][0]["content"]["text"],
        "Generate a greeting"
    );
    for request in &requests {
        client
            .send_json(
                json!({"jsonrpc": "2.0", "id": request["id"], "result": harness_answer(request)}),
            )
            .await;
    }
    let response = client.recv_response(&id).await;
    assert_eq!(
        response["result"]["content"][0]["text"], "Name: Alice; Greeting: Hello there!; Roots: 1",
        "{response}"
    );

    // Multi-round: the colour is asked only once the name is answered.
    let id = client.fresh_id();
    client
        .send_json(json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": tool_call("test_input_required_result_multi_round")
        }))
        .await;
    let step1 = client.recv().await;
    assert_eq!(
        step1["params"]["message"], "Step 1: What is your name?",
        "{step1}"
    );
    assert_eq!(step1["params"]["requestedSchema"], text_form("name"));
    let pending = client.drain_until_barrier().await;
    assert!(
        pending.is_empty(),
        "nothing before step 1 is answered: {pending:?}"
    );
    client
        .send_json(json!({"jsonrpc": "2.0", "id": step1["id"], "result": harness_answer(&step1)}))
        .await;
    let step2 = client.recv().await;
    assert_eq!(
        step2["params"]["message"], "Step 2: What is your favorite color?",
        "{step2}"
    );
    assert_eq!(step2["params"]["requestedSchema"], text_form("color"));
    client
        .send_json(json!({"jsonrpc": "2.0", "id": step2["id"], "result": harness_answer(&step2)}))
        .await;
    let response = client.recv_response(&id).await;
    assert_eq!(
        response["result"]["content"][0]["text"], "Multi-round complete for Alice who likes blue",
        "{response}"
    );
}

#[tokio::test]
async fn the_capabilities_fixture_asks_only_through_what_the_client_declared() {
    let server = start_profile();
    let call_with = |capabilities: Value| {
        let server = &server;
        async move {
            let mut client = session(server, capabilities).await;
            let asked = exchange(
                &mut client,
                "tools/call",
                tool_call("test_input_required_result_capabilities"),
                harness_answer,
            )
            .await;
            let mut methods: Vec<String> = asked
                .requests
                .iter()
                .filter_map(|r| r["method"].as_str().map(str::to_owned))
                .collect();
            methods.sort_unstable();
            assert!(
                asked.result().get("isError").is_none(),
                "{}",
                asked.response
            );
            methods
        }
    };
    // capability-check declares sampling only.
    assert_eq!(
        call_with(json!({"sampling": {}})).await,
        ["sampling/createMessage"]
    );
    assert_eq!(
        call_with(json!({"elicitation": {}})).await,
        ["elicitation/create"]
    );
    assert_eq!(
        call_with(harness_capabilities()).await,
        ["elicitation/create", "sampling/createMessage"]
    );
    assert!(call_with(json!({})).await.is_empty());
}

#[tokio::test]
async fn the_other_draft_probes_are_plain_tools() {
    let server = start_profile();
    let mut client = session(&server, harness_capabilities()).await;

    let logged = call(&mut client, tool_call("test_logging_tool")).await;
    assert_eq!(logged.notifications.len(), 3, "{:?}", logged.notifications);
    assert!(logged
        .notifications
        .iter()
        .all(|n| n["method"] == "notifications/message"));

    let sampled = exchange(
        &mut client,
        "tools/call",
        tool_call("test_missing_capability"),
        harness_answer,
    )
    .await;
    assert_eq!(sampled.requests[0]["method"], "sampling/createMessage");
    assert_eq!(sampled.only_text(), "LLM response: Hello there!");

    // http-header-validation calls the first listed tool with `{}`.
    let first = client.request("tools/list", json!({})).await["result"]["tools"][0]["name"]
        .as_str()
        .expect("a tool")
        .to_owned();
    // The scenario needs an answer, not an error: a tool result (even `isError`) is accepted.
    let probe = call(&mut client, tool_call(&first)).await;
    assert!(
        probe.response.get("error").is_none() && probe.result()["content"].is_array(),
        "{}",
        probe.response
    );

    let header = call(
        &mut client,
        json!({"name": "test_custom_header_tool", "arguments": {"region": "Hello"}}),
    )
    .await;
    assert!(
        header.only_text().contains("\"region\":\"Hello\""),
        "{}",
        header.response
    );

    let reconnection = call(&mut client, tool_call("test_reconnection")).await;
    assert!(reconnection
        .only_text()
        .starts_with("Reconnection test completed"));
}

// ---- the profile file ---------------------------------------------------------------------

#[test]
fn the_profile_validates_sets_only_what_differs_and_builds_the_fixture_set() {
    let settings =
        Settings::from_file(Path::new(CONFORMANCE_TOML)).expect("conformance.toml is valid");
    assert_eq!(settings.builtins.set, "conformance");
    assert_eq!(
        settings.server.listen,
        "127.0.0.1:8766".parse::<SocketAddr>().expect("addr"),
        "the suite's URL is http://127.0.0.1:8766/mcp: a loopback name, as dns-rebinding-protection needs"
    );

    // Everything else is the default.
    let mut expected = Settings::default();
    expected.server.listen = settings.server.listen;
    expected.builtins.set = "conformance".into();
    expected.info.name = settings.info.name.clone();
    assert_eq!(settings, expected);

    let text = std::fs::read_to_string(CONFORMANCE_TOML).expect("readable");
    let lines: Vec<&str> = text.lines().collect();
    let mut keys = 0;
    for (i, line) in lines.iter().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('[') {
            continue;
        }
        keys += 1;
        assert!(
            i > 0 && lines[i - 1].trim().starts_with('#'),
            "line {}: `{line}` has no comment line directly above it",
            i + 1
        );
    }
    assert_eq!(keys, 3, "listen, set and name");

    let set = settings.builtins.set.clone();
    crate::support::builtins(&set, Server::builder().settings(settings))
        .build()
        .expect("the conformance set builds");
}

#[tokio::test]
async fn the_binary_serves_the_fixtures_with_the_profile() {
    // `--listen` over the profile's own address (127.0.0.1:8766), on a port the kernel
    // picks as the server binds.
    let process = ServerProcess::spawn(
        &["--config", CONFORMANCE_TOML, "--listen", "127.0.0.1:0"],
        &[],
    );
    let addr = process.wait_listening();
    assert_ne!(
        addr.port(),
        8766,
        "--listen is taken over the config's address"
    );
    let mut client = Client::connect_url(&format!("ws://{addr}/mcp")).await;
    let init = client
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_eq!(init["result"]["serverInfo"]["name"], "mcp-ws-conformance");
    let answer = client.call_tool("test_simple_text", json!({})).await;
    assert_eq!(
        answer["result"]["content"][0]["text"],
        "This is a simple text response for testing."
    );
    let demo = client.call_tool("echo", json!({"text": "x"})).await;
    assert_eq!(demo["error"]["code"], -32602, "no demo tools: {demo}");
}
