//! `echo {text}`: returns the text unchanged. The load benches call it.

use crate::mcp::CallToolResult;
use crate::registry::{typed_tool, Tool};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EchoArgs {
    /// The text to return.
    text: String,
}

pub fn tool() -> impl Tool {
    typed_tool(
        "echo",
        "Returns the given text unchanged.",
        |args: EchoArgs, _ctx| async move { Ok(CallToolResult::text(args.text)) },
    )
}
