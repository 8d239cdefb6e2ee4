//! The fixtures of the `tasks-*` scenarios (the 2026-07-28 tasks extension): a sync tool,
//! tools whose calls become tasks (slow, failing with a tool error, failing with a protocol
//! error), tasks that ask the client (one question, two at once), and a tool that asks the
//! multi round-trip way before it becomes a task. They are ordinary tools: whether a call
//! becomes a task, and how its questions reach the client, is the engine's business.

use super::NoArgs;
use mcp_ws::model::{ElicitAction, ElicitRequest, ElicitResult};
use mcp_ws::{RequestContext, TaskSupport, Tool, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

#[derive(Deserialize, JsonSchema)]
struct Greet {
    /// Who to greet.
    name: String,
}

#[derive(Deserialize, JsonSchema)]
struct SlowCompute {
    /// How long to work, in seconds (0: answer at once).
    seconds: f64,
    /// A label echoed in the result.
    #[serde(default)]
    label: String,
}

#[derive(Deserialize, JsonSchema)]
struct ConfirmDelete {
    /// The file to delete.
    filename: String,
}

/// A form asking for `fields` (all optional strings or booleans).
fn ask(message: &str, fields: serde_json::Value) -> ElicitRequest {
    ElicitRequest::form(message, json!({ "type": "object", "properties": fields }))
}

fn accepted(answer: &ElicitResult) -> bool {
    answer.action == ElicitAction::Accept
}

async fn greet(args: Greet, _: RequestContext) -> Result<String, ToolError> {
    Ok(format!("Hello, {}!", args.name))
}

async fn slow_compute(args: SlowCompute, _: RequestContext) -> Result<String, ToolError> {
    if args.seconds > 0.0 {
        let seconds = args.seconds.min(3_600.0);
        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    }
    Ok(format!(
        "Computed {} after {}s",
        if args.label.is_empty() {
            "a result"
        } else {
            &args.label
        },
        args.seconds
    ))
}

async fn failing_job(_: NoArgs, _: RequestContext) -> Result<String, ToolError> {
    tokio::time::sleep(Duration::from_millis(300)).await;
    Err(ToolError::failed("The job failed: its input was rejected"))
}

async fn protocol_error_job(_: NoArgs, _: RequestContext) -> Result<String, ToolError> {
    tokio::time::sleep(Duration::from_millis(100)).await;
    panic!("protocol_error_job fails below the tool's own error handling, as asked");
}

async fn confirm_delete(args: ConfirmDelete, ctx: RequestContext) -> Result<String, ToolError> {
    // Look the file up first: the call becomes a task here, and the question parks it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let answer = ctx
        .elicit_as(
            "confirm",
            ask(
                &format!("Delete {}?", args.filename),
                json!({ "confirm": { "type": "boolean" } }),
            ),
        )
        .await?;
    let confirmed = accepted(&answer)
        && answer
            .content
            .as_ref()
            .and_then(|c| c.get("confirm"))
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
    Ok(if confirmed {
        format!("Deleted {}", args.filename)
    } else {
        format!("Kept {}", args.filename)
    })
}

async fn multi_input(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    let fields = json!({ "name": { "type": "string" }, "confirm": { "type": "boolean" } });
    let (first, second) = futures_util::future::join(
        ctx.elicit_as("first", ask("First input", fields.clone())),
        ctx.elicit_as("second", ask("Second input", fields)),
    )
    .await;
    let (first, second) = (first?, second?);
    Ok(format!(
        "Both answered: {} and {}",
        accepted(&first),
        accepted(&second)
    ))
}

async fn tool_with_task(_: NoArgs, ctx: RequestContext) -> Result<String, ToolError> {
    // Asked before the first wait: the multi round-trip way.
    let answer = ctx
        .elicit_as(
            "user_name",
            ask(
                "What is your name?",
                json!({ "name": { "type": "string" } }),
            ),
        )
        .await?;
    let name = answer
        .content
        .as_ref()
        .and_then(|c| c.get("name"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or("stranger")
        .to_owned();
    // Then the long part: the call becomes a task.
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(format!("Hello, {name}! Your task is done."))
}

pub(super) fn tools() -> Vec<Tool> {
    vec![
        Tool::new("greet", "Greets by name, at once", greet),
        Tool::new(
            "slow_compute",
            "Works for `seconds` seconds, then answers; may run as a task",
            slow_compute,
        )
        .task_support(TaskSupport::Optional),
        Tool::new(
            "failing_job",
            "Runs as a task and ends with a tool error",
            failing_job,
        )
        .task_support(TaskSupport::Required),
        Tool::new(
            "protocol_error_job",
            "Runs as a task and ends with a protocol error",
            protocol_error_job,
        )
        .task_support(TaskSupport::Optional),
        Tool::new(
            "confirm_delete",
            "Asks to confirm deleting a file; may run as a task",
            confirm_delete,
        )
        .task_support(TaskSupport::Optional),
        Tool::new(
            "multi_input",
            "Asks two questions at once; may run as a task",
            multi_input,
        )
        .task_support(TaskSupport::Optional),
        Tool::new(
            "test_tool_with_task",
            "Asks a name the multi round-trip way, then runs as a task",
            tool_with_task,
        )
        .task_support(TaskSupport::Required),
    ]
}
