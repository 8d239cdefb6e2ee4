//! Version-gated fields: what a session receives depends on the protocol version it
//! negotiated, per the field tables of each revision (2024-11-05, 2025-03-26, 2025-06-18,
//! 2025-11-25; /work/research/spec-legacy.md §4).
//!
//! Rules checked, each on every version (so on an old one that lacks the field and a new one
//! that has it): tool `title`, `outputSchema` (a tool returning `Json<T>`), `annotations`,
//! `icons` and `_meta`; `structuredContent` in a call's result (with the same JSON as text
//! for every version); `audio` content (a text block in its place before 2025-03-26) and
//! `resource_link` content (a text block naming the URI before 2025-06-18), in tool results
//! and prompt messages; content and resource-contents `_meta`; `annotations.lastModified`;
//! resource, template and prompt `title`, `icons` and `_meta`, prompt argument `title`;
//! `serverInfo.title`; the `message` of a progress notification. What every version has (`annotations` on content and resources,
//! `size`, `audience`, `priority`) is always sent. (Elicitation's `mode`, sent only to
//! 2025-11-25 sessions, is checked in `client_requests.rs`.)

use crate::support::*;
use mcp_ws::model::{
    Annotations, Content, GetPromptResult, Icon, PromptMessage, ResourceContents, ResourceLink,
    Role, ToolAnnotations,
};
use mcp_ws::tool::Json;
use mcp_ws::{
    Prompt, PromptArgument, Resource, ResourceTemplate, RunningServer, ServerBuilder, Tool,
    ToolError,
};
use serde_json::{json, Value};

/// When each gated item appeared.
const ANNOTATED_TOOLS: &str = "2025-03-26";
const AUDIO: &str = "2025-03-26";
const PROGRESS_MESSAGE: &str = "2025-03-26";
const TITLES_META_STRUCTURED_LINKS: &str = "2025-06-18";
const ICONS: &str = "2025-11-25";

/// Whether `version` has what appeared in `since` (the dates order as the revisions do).
fn has(version: &str, since: &str) -> bool {
    version >= since
}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Forecast {
    /// Degrees Celsius.
    celsius: f64,
    sky: String,
}

fn icon() -> Icon {
    Icon::new("https://example.com/icon.png").mime_type("image/png")
}

fn annotations() -> Annotations {
    Annotations {
        audience: Some(vec![Role::User]),
        priority: Some(0.5),
        last_modified: Some("2025-01-12T15:00:58Z".into()),
    }
}

/// Content of every kind, with annotations and `_meta`.
fn all_blocks() -> Vec<Content> {
    vec![
        Content::text("plain")
            .with_annotations(annotations())
            .with_meta(json!({"example.com/block": 1})),
        Content::audio("UklGRg==", "audio/wav"),
        Content::resource_link(
            ResourceLink::new("test://linked", "linked")
                .mime_type("text/plain")
                .description("a link"),
        ),
        Content::resource(
            ResourceContents::text("test://embedded", "text/plain", "embedded")
                .with_meta(json!({"example.com/contents": 2})),
        ),
        Content::image("iVBORw0KGgo=", "image/png"),
    ]
}

fn fixtures(builder: ServerBuilder) -> ServerBuilder {
    builder
        .title("Versions Test Server")
        .tool(
            Tool::new("forecast", "the weather", |_: NoArgs, _ctx| async move {
                Ok::<_, ToolError>(Json(Forecast {
                    celsius: 21.5,
                    sky: "clear".into(),
                }))
            })
            .title("Forecast")
            .annotations(ToolAnnotations {
                title: Some("Weather forecast".into()),
                read_only_hint: Some(true),
                ..Default::default()
            })
            .icon(icon())
            .meta(json!({"example.com/owner": "tests"})),
        )
        .tool(Tool::new(
            "blocks",
            "every kind of content",
            |_: NoArgs, _ctx| async move { Ok::<_, ToolError>(all_blocks()) },
        ))
        .tool(Tool::new(
            "halfway",
            "reports progress with a message",
            |_: NoArgs, ctx| async move {
                ctx.report_progress(1.0, Some(2.0), Some("halfway there"));
                Ok::<_, ToolError>("done")
            },
        ))
        .resource(
            Resource::text("test://described", "described", "text/plain", "hello")
                .title("Described")
                .size(5)
                .annotations(annotations())
                .icon(icon())
                .meta(json!({"example.com/resource": true})),
        )
        .resource(Resource::new(
            "test://with-meta",
            "with-meta",
            |_ctx| async move {
                Ok(
                    ResourceContents::text("test://with-meta", "text/plain", "x")
                        .with_meta(json!({"example.com/read": 3})),
                )
            },
        ))
        .resource_template(
            ResourceTemplate::new("test://tpl/{id}", "tpl", |uri, _vars, _ctx| async move {
                Ok(ResourceContents::text(uri, "text/plain", "x"))
            })
            .title("Template")
            .annotations(annotations())
            .icon(icon())
            .meta(json!({"example.com/template": true})),
        )
        .prompt(
            Prompt::new("rich", "every kind of content", |_args, _ctx| async move {
                Ok(GetPromptResult::new(
                    all_blocks()
                        .into_iter()
                        .map(|block| PromptMessage::new(Role::User, block))
                        .collect(),
                ))
            })
            .title("Rich")
            .argument(PromptArgument {
                title: Some("Topic".into()),
                ..PromptArgument::optional("topic", "what about")
            })
            .icon(icon())
            .meta(json!({"example.com/prompt": true})),
        )
}

fn server() -> RunningServer {
    start_with(settings(), fixtures)
}

/// Finds the entry whose `key` is `value` in a list result.
fn entry(list: &Value, member: &str, key: &str, value: &str) -> Value {
    list["result"][member]
        .as_array()
        .and_then(|entries| entries.iter().find(|e| e[key] == value))
        .cloned()
        .unwrap_or_else(|| panic!("{value} in {list}"))
}

/// Asserts that `object[field]` is present exactly when `expected`.
fn assert_presence(object: &Value, field: &str, expected: bool, version: &str) {
    assert_eq!(
        object.get(field).is_some(),
        expected,
        "{field} {} on {version}: {object}",
        if expected { "expected" } else { "unexpected" }
    );
}

#[tokio::test]
async fn tool_definitions_carry_only_the_fields_of_the_sessions_version() {
    let server = server();
    for version in VERSIONS {
        let mut client = Client::initialized_with_version(&server, version).await;
        let list = client.request("tools/list", json!({})).await;
        let tool = entry(&list, "tools", "name", "forecast");
        assert_eq!(tool["description"], "the weather");
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        let stateless = has(version, TITLES_META_STRUCTURED_LINKS);
        assert_presence(&tool, "title", stateless, version);
        assert_presence(&tool, "outputSchema", stateless, version);
        assert_presence(&tool, "_meta", stateless, version);
        assert_presence(&tool, "annotations", has(version, ANNOTATED_TOOLS), version);
        assert_presence(&tool, "icons", has(version, ICONS), version);
        if stateless {
            assert_eq!(tool["title"], "Forecast");
            assert_eq!(tool["_meta"], json!({"example.com/owner": "tests"}));
            let schema = &tool["outputSchema"];
            assert_eq!(schema["type"], "object", "{schema}");
            assert_eq!(
                schema["properties"]["celsius"]["type"], "number",
                "{schema}"
            );
            assert_eq!(schema["properties"]["sky"]["type"], "string", "{schema}");
        }
        if has(version, ANNOTATED_TOOLS) {
            assert_eq!(
                tool["annotations"],
                json!({"title": "Weather forecast", "readOnlyHint": true})
            );
        }
        if has(version, ICONS) {
            assert_eq!(
                tool["icons"],
                json!([{"src": "https://example.com/icon.png", "mimeType": "image/png"}])
            );
        }
    }
}

#[tokio::test]
async fn structured_content_goes_only_to_sessions_that_have_it() {
    let server = server();
    for version in VERSIONS {
        let mut client = Client::initialized_with_version(&server, version).await;
        let response = client.call_tool("forecast", json!({})).await;
        let result = &response["result"];
        let expected = json!({"celsius": 21.5, "sky": "clear"});
        // Every version gets the output as JSON text.
        let text = result["content"][0]["text"].as_str().expect("a text block");
        assert_eq!(
            serde_json::from_str::<Value>(text).expect("JSON text"),
            expected
        );
        assert_presence(
            result,
            "structuredContent",
            has(version, TITLES_META_STRUCTURED_LINKS),
            version,
        );
        if has(version, TITLES_META_STRUCTURED_LINKS) {
            assert_eq!(result["structuredContent"], expected);
        }
        assert!(result.get("isError").is_none(), "{result}");
    }
}

/// Returns the `structuredContent` its `mode` argument names, or fails.
struct Shaped;

impl mcp_ws::tool::ToolHandler for Shaped {
    fn call(
        &self,
        arguments: mcp_ws::tool::Arguments,
        _ctx: mcp_ws::RequestContext,
    ) -> mcp_ws::tool::ToolFuture {
        Box::pin(async move {
            #[derive(serde::Deserialize)]
            struct Mode {
                mode: String,
            }
            let Mode { mode } = arguments.parse()?;
            let structured = match mode.as_str() {
                "fits" => Some(json!({"n": 3})),
                "wrong_type" => Some(json!({"n": "not an integer"})),
                "array" => Some(json!([1, 2, 3])),
                "missing_member" => Some(json!({})),
                "long" => Some(json!({"n": "x".repeat(10_000)})),
                "none" => None,
                _ => return Err(ToolError::failed(format!("failed in mode {mode}"))),
            };
            let mut result = mcp_ws::model::CallToolResult::text(format!("mode {mode}"));
            result.structured_content = structured;
            Ok(result)
        })
    }
}

/// The MCP spec: a tool's structured results MUST conform to its `outputSchema`. One set by
/// hand on a raw handler is checked: a result that does not conform (or has no
/// `structuredContent`) is answered as an `isError` result naming the first violation, cut
/// to a bounded length, in either era; a failure's result is passed on as it is.
#[tokio::test]
async fn a_result_that_does_not_conform_to_its_output_schema_is_an_error_result() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}},
                        "required": ["n"]});
    let tool = Tool::from_handler(
        "shaped",
        "Returns what it is told",
        json!({"type": "object"}),
        Shaped,
    )
    .output_schema(schema);
    let server = start_with(crate::support::settings(), |b| b.tool(tool));
    let mut client = Client::initialized(&server).await;
    let fits = client.call_tool("shaped", json!({"mode": "fits"})).await;
    assert_eq!(
        fits["result"]["structuredContent"],
        json!({"n": 3}),
        "{fits}"
    );
    assert!(fits["result"].get("isError").is_none(), "{fits}");
    for (mode, names) in [
        ("wrong_type", "structuredContent/n"),
        ("array", "structuredContent"),
        ("missing_member", "\"n\" is a required property"),
        ("none", "gave no structuredContent"),
        ("long", "structuredContent/n"),
    ] {
        let response = client.call_tool("shaped", json!({"mode": mode})).await;
        let result = &response["result"];
        assert_eq!(result["isError"], true, "{mode}: {response}");
        assert!(
            result.get("structuredContent").is_none(),
            "{mode}: {response}"
        );
        let text = result["content"][0]["text"].as_str().expect("a text block");
        assert!(
            text.starts_with("Output validation error: ") && text.contains(names),
            "{mode}: {text}"
        );
        assert!(
            text.len() < 1024,
            "{mode}: the message is bounded: {} bytes",
            text.len()
        );
    }
    let failed = client.call_tool("shaped", json!({"mode": "fail"})).await;
    assert_eq!(
        failed["result"]["content"][0]["text"], "failed in mode fail",
        "a failure is not checked: {failed}"
    );
    // The 2026-07-28 era runs the same tool: the same check.
    let http = crate::support::http::Http::new(&server);
    let (_, response) = http
        .json(
            json!(1),
            "tools/call",
            crate::support::meta::stateless(
                json!({"name": "shaped", "arguments": {"mode": "array"}}),
            ),
        )
        .await;
    assert_eq!(response["result"]["isError"], true, "{response}");
}

/// Checks `blocks` (as `all_blocks` gives them) against `version`'s content table.
fn check_blocks(blocks: &[Value], version: &str) {
    assert_eq!(blocks.len(), 5, "no block is dropped: {blocks:?}");
    let stateless = has(version, TITLES_META_STRUCTURED_LINKS);

    let text = &blocks[0];
    assert_eq!(text["type"], "text");
    assert_eq!(text["text"], "plain");
    assert_eq!(text["annotations"]["audience"], json!(["user"]), "{text}");
    assert_eq!(text["annotations"]["priority"], 0.5, "{text}");
    assert_presence(&text["annotations"], "lastModified", stateless, version);
    assert_presence(text, "_meta", stateless, version);

    let audio = &blocks[1];
    if has(version, AUDIO) {
        assert_eq!(audio["type"], "audio", "{audio}");
        assert_eq!(audio["data"], "UklGRg==");
        assert_eq!(audio["mimeType"], "audio/wav");
    } else {
        assert_eq!(audio["type"], "text", "{audio}");
        assert!(audio.get("data").is_none(), "{audio}");
        assert!(
            audio["text"].as_str().expect("text").contains("audio"),
            "{audio}"
        );
    }

    let link = &blocks[2];
    if stateless {
        assert_eq!(link["type"], "resource_link", "{link}");
        assert_eq!(link["uri"], "test://linked");
        assert_eq!(link["name"], "linked");
        assert_eq!(link["mimeType"], "text/plain");
        assert_eq!(link["description"], "a link");
    } else {
        assert_eq!(link["type"], "text", "{link}");
        assert!(link.get("uri").is_none(), "{link}");
        assert!(
            link["text"]
                .as_str()
                .expect("text")
                .contains("test://linked"),
            "the URI is still named: {link}"
        );
    }

    let embedded = &blocks[3];
    assert_eq!(embedded["type"], "resource");
    assert_eq!(embedded["resource"]["text"], "embedded");
    assert_presence(&embedded["resource"], "_meta", stateless, version);

    let image = &blocks[4];
    assert_eq!(image["type"], "image");
    assert_eq!(image["mimeType"], "image/png");
}

#[tokio::test]
async fn tool_result_content_follows_the_sessions_version() {
    let server = server();
    for version in VERSIONS {
        let mut client = Client::initialized_with_version(&server, version).await;
        let response = client.call_tool("blocks", json!({})).await;
        let blocks = response["result"]["content"]
            .as_array()
            .unwrap_or_else(|| panic!("content: {response}"));
        check_blocks(blocks, version);
    }
}

#[tokio::test]
async fn prompt_messages_follow_the_sessions_version() {
    let server = server();
    for version in VERSIONS {
        let mut client = Client::initialized_with_version(&server, version).await;
        let response = client.request("prompts/get", json!({"name": "rich"})).await;
        let blocks: Vec<Value> = response["result"]["messages"]
            .as_array()
            .unwrap_or_else(|| panic!("messages: {response}"))
            .iter()
            .map(|m| {
                assert_eq!(m["role"], "user");
                m["content"].clone()
            })
            .collect();
        check_blocks(&blocks, version);
    }
}

#[tokio::test]
async fn resource_and_template_definitions_follow_the_sessions_version() {
    let server = server();
    for version in VERSIONS {
        let mut client = Client::initialized_with_version(&server, version).await;
        let stateless = has(version, TITLES_META_STRUCTURED_LINKS);

        let list = client.request("resources/list", json!({})).await;
        let resource = entry(&list, "resources", "uri", "test://described");
        assert_eq!(resource["name"], "described");
        assert_eq!(resource["mimeType"], "text/plain");
        assert_eq!(resource["size"], 5, "{resource}");
        assert_eq!(resource["annotations"]["priority"], 0.5, "{resource}");
        assert_presence(&resource["annotations"], "lastModified", stateless, version);
        assert_presence(&resource, "title", stateless, version);
        assert_presence(&resource, "_meta", stateless, version);
        assert_presence(&resource, "icons", has(version, ICONS), version);

        let list = client.request("resources/templates/list", json!({})).await;
        let template = entry(&list, "resourceTemplates", "uriTemplate", "test://tpl/{id}");
        assert_eq!(template["name"], "tpl");
        assert_eq!(
            template["annotations"]["audience"],
            json!(["user"]),
            "{template}"
        );
        assert_presence(&template["annotations"], "lastModified", stateless, version);
        assert_presence(&template, "title", stateless, version);
        assert_presence(&template, "_meta", stateless, version);
        assert_presence(&template, "icons", has(version, ICONS), version);
        if stateless {
            assert_eq!(template["title"], "Template");
            assert_eq!(template["_meta"], json!({"example.com/template": true}));
        }

        let read = client
            .request("resources/read", json!({"uri": "test://with-meta"}))
            .await;
        let contents = &read["result"]["contents"][0];
        assert_eq!(contents["text"], "x", "{read}");
        assert_presence(contents, "_meta", stateless, version);
    }
}

#[tokio::test]
async fn prompt_definitions_follow_the_sessions_version() {
    let server = server();
    for version in VERSIONS {
        let mut client = Client::initialized_with_version(&server, version).await;
        let stateless = has(version, TITLES_META_STRUCTURED_LINKS);
        let list = client.request("prompts/list", json!({})).await;
        let prompt = entry(&list, "prompts", "name", "rich");
        assert_eq!(prompt["description"], "every kind of content");
        let argument = &prompt["arguments"][0];
        assert_eq!(argument["name"], "topic", "{prompt}");
        assert_eq!(argument["required"], false, "{prompt}");
        assert_presence(argument, "title", stateless, version);
        assert_presence(&prompt, "title", stateless, version);
        assert_presence(&prompt, "_meta", stateless, version);
        assert_presence(&prompt, "icons", has(version, ICONS), version);
        if stateless {
            assert_eq!(prompt["title"], "Rich");
            assert_eq!(argument["title"], "Topic");
        }
    }
}

#[tokio::test]
async fn server_info_title_goes_only_to_sessions_that_have_it() {
    let server = server();
    for version in VERSIONS {
        let mut client = Client::connect(&server).await;
        let response = client
            .request_with_id(json!(0), "initialize", initialize_params(version))
            .await;
        let info = &response["result"]["serverInfo"];
        assert!(
            info["name"].is_string() && info["version"].is_string(),
            "{info}"
        );
        assert_presence(
            info,
            "title",
            has(version, TITLES_META_STRUCTURED_LINKS),
            version,
        );
        if has(version, TITLES_META_STRUCTURED_LINKS) {
            assert_eq!(info["title"], "Versions Test Server");
        }
    }
}

#[tokio::test]
async fn a_progress_message_goes_only_to_sessions_that_have_it() {
    let server = server();
    for version in VERSIONS {
        let mut client = Client::initialized_with_version(&server, version).await;
        let id = client.fresh_id();
        client
            .send_json(json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
                              "params":{"name":"halfway","arguments":{},"_meta":{"progressToken":"p"}}}))
            .await;
        let progress = client.recv().await;
        assert_eq!(progress["method"], "notifications/progress", "{progress}");
        let params = &progress["params"];
        assert_eq!(params["progressToken"], "p");
        assert_eq!(params["progress"], 1.0);
        assert_eq!(params["total"], 2.0);
        assert_presence(params, "message", has(version, PROGRESS_MESSAGE), version);
        if has(version, PROGRESS_MESSAGE) {
            assert_eq!(params["message"], "halfway there");
        }
        let response = client.recv_response(&id).await;
        assert_eq!(response["result"]["content"][0]["text"], "done");
    }
}
