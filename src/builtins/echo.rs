//! `echo {text}`: returns the text unchanged. The load benches call it.
//!
//! The text is passed through as the JSON string literal received (`JsonString`), so it is
//! scanned once and never decoded nor re-escaped.

use crate::mcp::{CallToolResult, Content, JsonString};
use crate::registry::{typed_tool, Tool};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EchoArgs {
    /// The text to return.
    text: JsonString,
}

pub fn tool() -> impl Tool {
    typed_tool(
        "echo",
        "Returns the given text unchanged.",
        |args: EchoArgs, _ctx| async move {
            Ok(CallToolResult {
                content: vec![Content::JsonText { text: args.text }],
                is_error: false,
            })
        },
    )
}
