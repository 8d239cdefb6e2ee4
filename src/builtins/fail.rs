//! `fail {message}`: always fails as a tool (a result with `isError: true`), never as a
//! protocol error, so clients can check they tell the two apart.

use crate::registry::{typed_tool, Tool, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FailArgs {
    /// The error text the result carries.
    message: String,
}

pub fn tool() -> impl Tool {
    typed_tool(
        "fail",
        "Always fails with the given message (a tool error, isError: true).",
        |args: FailArgs, _ctx| async move { Err(ToolError::Failed(args.message)) },
    )
}
