//! `echo {text}`: returns the text unchanged. The load benches call it.
//!
//! The text is passed through as the JSON string literal received (`JsonString`), so it is
//! scanned once and never decoded nor re-escaped.

use mcp_ws::model::{CallToolResult, Content, JsonString};
use mcp_ws::{RequestContext, Tool, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EchoArgs {
    /// The text to return.
    text: JsonString,
}

async fn echo(args: EchoArgs, _ctx: RequestContext) -> Result<CallToolResult, ToolError> {
    Ok(CallToolResult::new(vec![Content::json_text(args.text)]))
}

/// The tool.
pub fn tool() -> Tool {
    Tool::new("echo", "Returns the given text unchanged.", echo)
}
