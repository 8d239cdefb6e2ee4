//! `fail {message}`: always fails as a tool (a result with `isError: true`), never as a
//! protocol error, so clients can check they tell the two apart.

use mcp_ws::{RequestContext, Tool, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FailArgs {
    /// The error text the result carries.
    message: String,
}

async fn fail(args: FailArgs, _ctx: RequestContext) -> Result<String, ToolError> {
    Err(ToolError::Failed(args.message))
}

/// The tool.
pub fn tool() -> Tool {
    Tool::new(
        "fail",
        "Always fails with the given message (a tool error, isError: true).",
        fail,
    )
}
