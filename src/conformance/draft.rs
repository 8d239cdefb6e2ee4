//! Tools the 0.2.0 suite's scenarios call beyond the 2025 set: most belong to the
//! 2026-07-28 revision (`server-stateless`, `input-required-result-*`), the rest to pending
//! scenarios (`json-schema-2020-12`, `http-custom-header-server-validation`,
//! `server-sse-polling`).
//!
//! They are written as ordinary tools that ask through their context, which is how a tool
//! is written for both eras: on a 2025 session each ask is a request to the client; under
//! 2026-07-28 the protocol core is to answer the call with an input-required result listing
//! the asks it reached, and to run it again with the answers. Each ask's doc names the
//! input key the scenarios expect for it. Asks a scenario expects in one round are made
//! together (joined), so that a retried run reaches all of them.

use super::interaction::describe;
use super::NoArgs;
use futures_util::future::{join, join3};
use mcp_ws::model::{
    CallToolResult, CreateMessageRequest, ElicitRequest, ElicitResult, LogLevel, SamplingMessage,
};
use mcp_ws::tool::{Arguments, ToolFuture, ToolHandler};
use mcp_ws::{RequestContext, Tool, ToolError};
use serde_json::{json, Value};
use std::time::Duration;

/// A one-field form: `{"<field>": string}`, required.
fn ask_text(message: &str, field: &str) -> ElicitRequest {
    ElicitRequest::form(
        message,
        json!({
            "type": "object",
            "properties": {field: {"type": "string"}},
            "required": [field]
        }),
    )
}

/// The `ok` confirmation form of the request-state and tampered-state scenarios.
fn ask_confirmation() -> ElicitRequest {
    ElicitRequest::form(
        "Please confirm",
        json!({
            "type": "object",
            "properties": {"ok": {"type": "boolean"}},
            "required": ["ok"]
        }),
    )
}

fn ask_sample(text: &str, max_tokens: u32) -> CreateMessageRequest {
    CreateMessageRequest::new(vec![SamplingMessage::user(text)], max_tokens)
}

/// The answered text field, or the tool error that it is missing (declined, or cancelled).
fn answered(result: &ElicitResult, field: &str) -> Result<String, ToolError> {
    result
        .content
        .as_ref()
        .and_then(|content| content.get(field))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ToolError::failed(format!("no {field} was given ({})", describe(result))))
}

/// Key `user_name`.
async fn elicitation(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let answer = ctx
        .elicit_as("user_name", ask_text("What is your name?", "name"))
        .await?;
    Ok(format!("Hello, {}!", answered(&answer, "name")?))
}

/// Key `capital_question`.
async fn sampling(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let answer = ctx
        .create_message_as(
            "capital_question",
            ask_sample("What is the capital of France?", 100),
        )
        .await?;
    let text = answer
        .content
        .as_text()
        .unwrap_or("(no text in the answer)");
    Ok(format!("Sampling result: {text}"))
}

/// Key `client_roots`.
async fn list_roots(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let roots = ctx.list_roots_as("client_roots").await?;
    let uris: Vec<&str> = roots.iter().map(|root| root.uri.as_str()).collect();
    Ok(format!(
        "Found {} root(s): {}",
        roots.len(),
        uris.join(", ")
    ))
}

/// Key `confirm`; the scenario checks that the retry carries the request state back.
async fn request_state(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let answer = ctx.elicit_as("confirm", ask_confirmation()).await?;
    let confirmed = answer
        .content
        .as_ref()
        .and_then(|content| content.get("ok"))
        .and_then(Value::as_bool)
        == Some(true);
    Ok(format!(
        "state-ok: {}",
        if confirmed {
            "confirmed"
        } else {
            "not confirmed"
        }
    ))
}

/// Keys `user_name` (elicitation), `greeting` (sampling, 50 tokens) and `client_roots`,
/// asked together.
async fn multiple_inputs(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let (name, greeting, roots) = join3(
        ctx.elicit_as("user_name", ask_text("What is your name?", "name")),
        ctx.create_message_as("greeting", ask_sample("Generate a greeting", 50)),
        ctx.list_roots_as("client_roots"),
    )
    .await;
    let name = answered(&name?, "name")?;
    let greeting = greeting?;
    let greeting = greeting
        .content
        .as_text()
        .unwrap_or("(no text in the answer)");
    Ok(format!(
        "Name: {name}; Greeting: {greeting}; Roots: {}",
        roots?.len()
    ))
}

/// Key `step1` (a name), then, in a second round, `step2` (a colour).
async fn multi_round(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let name = ctx
        .elicit_as("step1", ask_text("Step 1: What is your name?", "name"))
        .await?;
    let name = answered(&name, "name")?;
    let color = ctx
        .elicit_as(
            "step2",
            ask_text("Step 2: What is your favorite color?", "color"),
        )
        .await?;
    let color = answered(&color, "color")?;
    Ok(format!("Multi-round complete for {name} who likes {color}"))
}

/// Like `test_input_required_result_request_state`: the scenario alters the request state
/// of the retry, which the protocol core must refuse.
async fn tampered_state(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let answer = ctx.elicit_as("confirm", ask_confirmation()).await?;
    Ok(format!("Confirmation received: {}", describe(&answer)))
}

/// Asks only through what the client declared: sampling and elicitation when it has them
/// (together), neither otherwise.
async fn capabilities(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let session = ctx.session();
    let (can_sample, can_elicit) = (
        session.client_has("sampling"),
        session.client_has("elicitation"),
    );
    let sample = async {
        if can_sample {
            Some(
                ctx.create_message_as("hello", ask_sample("Say hello", 20))
                    .await,
            )
        } else {
            None
        }
    };
    let elicit = async {
        if can_elicit {
            Some(
                ctx.elicit_as("user_name", ask_text("What is your name?", "name"))
                    .await,
            )
        } else {
            None
        }
    };
    let (sample, elicit) = join(sample, elicit).await;
    let mut parts = Vec::new();
    if let Some(sample) = sample {
        let sample = sample?;
        parts.push(format!(
            "sampling: {}",
            sample
                .content
                .as_text()
                .unwrap_or("(no text in the answer)")
        ));
    }
    if let Some(elicit) = elicit {
        parts.push(format!("elicitation: {}", describe(&elicit?)));
    }
    if parts.is_empty() {
        return Ok(
            "The client declared neither sampling nor elicitation; nothing was asked".into(),
        );
    }
    Ok(parts.join("; "))
}

/// Needs sampling; under 2026-07-28 a client that did not declare it gets -32021.
async fn missing_capability(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let answer = ctx.create_message(ask_sample("Say hello", 20)).await?;
    let text = answer
        .content
        .as_text()
        .unwrap_or("(no text in the answer)");
    Ok(format!("LLM response: {text}"))
}

/// Asks for a name; under 2026-07-28 the ask must come back as an input-required result,
/// never as a request on the response stream.
async fn streaming_elicitation(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let answer = ctx
        .elicit_as("user_name", ask_text("What is your name?", "name"))
        .await?;
    Ok(format!("Hello, {}!", answered(&answer, "name")?))
}

/// Logs three lines; under 2026-07-28 they are sent only to a request that set a log level.
async fn logging(_: NoArgs, ctx: RequestContext) -> Result<&'static str, ToolError> {
    ctx.log(LogLevel::Info, "Logging tool started");
    ctx.log(LogLevel::Info, "Logging tool working");
    ctx.log(LogLevel::Info, "Logging tool finished");
    Ok("Logging tool executed")
}

/// The pending `server-sse-polling` scenario's tool: it takes a moment, during which the
/// transport may close the POST stream (the close and the replay are the transport's).
async fn reconnection(_: NoArgs, _: RequestContext) -> Result<&'static str, ToolError> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok("Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure.")
}

/// The input schema of `json_schema_2020_12_tool`, which the scenario reads back verbatim
/// from `tools/list`: `$schema`, `$defs` with an `$anchor`, a `$ref`, `allOf`/`anyOf`,
/// `if`/`then`/`else` and `additionalProperties: false`.
fn json_schema_2020_12() -> Value {
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
}

/// Answers with the arguments it was called with, whatever they are: the scenario only
/// reads the schema, and other probes call the first listed tool with `{}`.
struct EchoArguments {
    label: &'static str,
}

impl ToolHandler for EchoArguments {
    fn call(&self, arguments: Arguments, _ctx: RequestContext) -> ToolFuture {
        let label = self.label;
        let parsed = arguments.parse::<Value>();
        Box::pin(async move {
            Ok(CallToolResult::text(format!(
                "{label} called with: {}",
                parsed?
            )))
        })
    }
}

/// The tools.
pub(super) fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "test_input_required_result_elicitation",
            "Asks the user's name (input key user_name)",
            elicitation,
        ),
        Tool::new(
            "test_input_required_result_sampling",
            "Asks the client's model a question (input key capital_question)",
            sampling,
        ),
        Tool::new(
            "test_input_required_result_list_roots",
            "Asks the client for its roots (input key client_roots)",
            list_roots,
        ),
        Tool::new(
            "test_input_required_result_request_state",
            "Asks for a confirmation; the retry must carry the request state",
            request_state,
        ),
        Tool::new(
            "test_input_required_result_multiple_inputs",
            "Asks for a name, a model greeting and the roots at once",
            multiple_inputs,
        ),
        Tool::new(
            "test_input_required_result_multi_round",
            "Asks for a name, then for a colour",
            multi_round,
        ),
        Tool::new(
            "test_input_required_result_tampered_state",
            "Asks for a confirmation; a retry with altered request state must be refused",
            tampered_state,
        ),
        Tool::new(
            "test_input_required_result_capabilities",
            "Asks only through the capabilities the client declared",
            capabilities,
        ),
        Tool::new(
            "test_missing_capability",
            "Needs the client's sampling capability",
            missing_capability,
        ),
        Tool::new(
            "test_streaming_elicitation",
            "Asks the user's name while the call runs",
            streaming_elicitation,
        ),
        Tool::new(
            "test_logging_tool",
            "Logs three lines while it runs",
            logging,
        ),
        Tool::new(
            "test_reconnection",
            "Tests SSE stream disconnection and client reconnection (SEP-1699)",
            reconnection,
        ),
        Tool::from_handler(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            json_schema_2020_12(),
            EchoArguments {
                label: "JSON Schema 2020-12 tool",
            },
        ),
        Tool::from_handler(
            "test_custom_header_tool",
            "Echoes its region, which clients also send as the Mcp-Param-Region header",
            json!({
                "type": "object",
                "properties": {
                    "region": {
                        "type": "string",
                        "description": "A region name",
                        "x-mcp-header": "Region"
                    }
                },
                "required": ["region"]
            }),
            EchoArguments {
                label: "Custom header tool",
            },
        ),
    ]
}

/// The diagnostic hooks of the `server-stateless` scenario: each call adds, or removes again,
/// a tool (or prompt) of its own, so that `subscriptions/listen` streams that asked for
/// tool (prompt) list changes get one. They hold the server's registry (taken from the
/// builder) like any admin tool would.
pub(super) fn triggers(registry: mcp_ws::Registry) -> Vec<Tool> {
    let tools = registry.clone();
    let prompts = registry;
    vec![
        Tool::new(
            "test_trigger_tool_change",
            "Adds or removes the tool test_dynamic_tool (a tool list change)",
            move |_: NoArgs, _ctx: RequestContext| {
                let registry = tools.clone();
                async move {
                    if registry.remove_tool("test_dynamic_tool") {
                        return Ok::<_, ToolError>("removed test_dynamic_tool");
                    }
                    let dynamic = Tool::new(
                        "test_dynamic_tool",
                        "Added by test_trigger_tool_change",
                        |_: NoArgs, _ctx: RequestContext| async { Ok::<_, ToolError>("dynamic") },
                    );
                    registry
                        .add_tool(dynamic)
                        .map_err(|e| ToolError::failed(e.to_string()))?;
                    Ok("added test_dynamic_tool")
                }
            },
        ),
        Tool::new(
            "test_trigger_prompt_change",
            "Adds or removes the prompt test_dynamic_prompt (a prompt list change)",
            move |_: NoArgs, _ctx: RequestContext| {
                let registry = prompts.clone();
                async move {
                    if registry.remove_prompt("test_dynamic_prompt") {
                        return Ok::<_, ToolError>("removed test_dynamic_prompt");
                    }
                    let dynamic = mcp_ws::Prompt::new(
                        "test_dynamic_prompt",
                        "Added by test_trigger_prompt_change",
                        |_args, _ctx| async {
                            Ok(mcp_ws::model::GetPromptResult::new(vec![
                                mcp_ws::model::PromptMessage::user("dynamic"),
                            ]))
                        },
                    );
                    registry
                        .add_prompt(dynamic)
                        .map_err(|e| ToolError::failed(e.to_string()))?;
                    Ok("added test_dynamic_prompt")
                }
            },
        ),
    ]
}
