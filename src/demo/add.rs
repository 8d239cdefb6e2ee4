//! `add {a, b}`: the sum of two numbers, as text.

use mcp_ws::{RequestContext, Tool, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AddArgs {
    a: f64,
    b: f64,
}

async fn add(args: AddArgs, _ctx: RequestContext) -> Result<String, ToolError> {
    // serde_json prints integral floats as `42.0`; print them as integers.
    let sum = args.a + args.b;
    Ok(if sum.fract() == 0.0 && sum.abs() < 1e15 {
        format!("{}", sum as i64)
    } else {
        sum.to_string()
    })
}

/// The tool.
pub fn tool() -> Tool {
    Tool::new("add", "Adds two numbers.", add)
}
