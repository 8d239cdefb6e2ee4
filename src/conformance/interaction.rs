//! Tools that talk to the client while they run: log lines (`tools-call-with-logging`),
//! progress (`tools-call-with-progress`), a sampling request (`tools-call-sampling`) and
//! elicitation forms (`tools-call-elicitation`, `elicitation-sep1034-defaults`,
//! `elicitation-sep1330-enums`).

use super::NoArgs;
use mcp_ws::model::{CreateMessageRequest, ElicitRequest, ElicitResult, LogLevel, SamplingMessage};
use mcp_ws::{RequestContext, Tool, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

/// The pause between two log lines or progress reports. The scenarios ask for "~50 ms", so
/// that the client sees them arrive one by one during the call; it is longer than the
/// default `progress.min_interval_ms`, so no report is coalesced away.
const STEP: Duration = Duration::from_millis(50);

async fn with_logging(_: NoArgs, ctx: RequestContext) -> Result<&'static str, ToolError> {
    ctx.log(LogLevel::Info, "Tool execution started");
    tokio::time::sleep(STEP).await;
    ctx.log(LogLevel::Info, "Tool processing data");
    tokio::time::sleep(STEP).await;
    ctx.log(LogLevel::Info, "Tool execution completed");
    Ok("Tool with logging executed successfully")
}

/// Reports 0, 50 and 100 of 100 (when the call carries a progress token), ~50 ms apart,
/// all before the result.
async fn with_progress(_: NoArgs, ctx: RequestContext) -> Result<&'static str, ToolError> {
    for (i, progress) in [0.0, 50.0, 100.0].into_iter().enumerate() {
        if i > 0 {
            tokio::time::sleep(STEP).await;
        }
        ctx.report_progress(progress, Some(100.0), None);
    }
    Ok("Tool with progress executed successfully")
}

#[derive(Deserialize, JsonSchema)]
struct SamplingArgs {
    /// The prompt to send to the LLM.
    prompt: String,
}

/// Asks the client's model; a client without `sampling` gets an `isError` result saying so.
async fn sampling(args: SamplingArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let request = CreateMessageRequest::new(vec![SamplingMessage::user(args.prompt)], 100);
    let answer = ctx.create_message(request).await?;
    let text = answer
        .content
        .as_text()
        .unwrap_or("(no text in the answer)");
    Ok(format!("LLM response: {text}"))
}

#[derive(Deserialize, JsonSchema)]
struct ElicitationArgs {
    /// The message to show the user.
    message: String,
}

/// `action=<action>, content=<the answer as JSON>`, as the scenarios' reference texts have it.
pub(super) fn describe(result: &ElicitResult) -> String {
    let action = serde_json::to_value(result.action).unwrap_or(Value::Null);
    let content = Value::Object(result.content.clone().unwrap_or_default());
    format!(
        "action={}, content={content}",
        action.as_str().unwrap_or("unknown")
    )
}

async fn elicitation(args: ElicitationArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let form = json!({
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"}
        },
        "required": ["username", "email"]
    });
    let result = ctx.elicit(ElicitRequest::form(args.message, form)).await?;
    Ok(format!("User response: {}", describe(&result)))
}

/// SEP-1034: a default for every primitive type (string, integer, number, enum, boolean).
async fn elicitation_defaults(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let form = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active"
            },
            "verified": {"type": "boolean", "description": "Verification status", "default": true}
        },
        "required": []
    });
    let request = ElicitRequest::form(
        "Please review and update the form fields with defaults",
        form,
    );
    let result = ctx.elicit(request).await?;
    Ok(format!("Elicitation completed: {}", describe(&result)))
}

/// SEP-1330: the five enum shapes (untitled and titled single-select, the legacy
/// `enumNames`, untitled and titled multi-select).
async fn elicitation_enums(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let form = json!({
        "type": "object",
        "properties": {
            "untitledSingle": {
                "type": "string",
                "description": "Select one option",
                "enum": ["option1", "option2", "option3"]
            },
            "titledSingle": {
                "type": "string",
                "description": "Select one option with titles",
                "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"}
                ]
            },
            "legacyEnum": {
                "type": "string",
                "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"]
            },
            "untitledMulti": {
                "type": "array",
                "description": "Select multiple options",
                "minItems": 1,
                "maxItems": 3,
                "items": {"type": "string", "enum": ["option1", "option2", "option3"]}
            },
            "titledMulti": {
                "type": "array",
                "description": "Select multiple options with titles",
                "minItems": 1,
                "maxItems": 3,
                "items": {
                    "anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"}
                    ]
                }
            }
        },
        "required": []
    });
    let request = ElicitRequest::form("Please select options from the enum fields", form);
    let result = ctx.elicit(request).await?;
    Ok(format!("Elicitation completed: {}", describe(&result)))
}

/// The tools.
pub(super) fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "test_tool_with_logging",
            "Tests tool that emits log messages during execution",
            with_logging,
        ),
        Tool::new(
            "test_tool_with_progress",
            "Tests tool that reports progress notifications",
            with_progress,
        ),
        Tool::new(
            "test_sampling",
            "Tests server-initiated sampling (LLM completion request)",
            sampling,
        ),
        Tool::new(
            "test_elicitation",
            "Tests server-initiated elicitation (user input request)",
            elicitation,
        ),
        Tool::new(
            "test_elicitation_sep1034_defaults",
            "Tests elicitation with default values per SEP-1034",
            elicitation_defaults,
        ),
        Tool::new(
            "test_elicitation_sep1330_enums",
            "Tests elicitation with enum schema improvements per SEP-1330",
            elicitation_enums,
        ),
    ]
}
