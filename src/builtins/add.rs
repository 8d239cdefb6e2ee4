//! `add {a, b}`: the sum of two numbers, as text.

use crate::mcp::CallToolResult;
use crate::registry::{typed_tool, Tool};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct AddArgs {
    a: f64,
    b: f64,
}

pub fn tool() -> impl Tool {
    typed_tool(
        "add",
        "Adds two numbers.",
        |args: AddArgs, _ctx| async move {
            // serde_json prints integral floats as `42.0`; print them as integers.
            let sum = args.a + args.b;
            let text = if sum.fract() == 0.0 && sum.abs() < 1e15 {
                format!("{}", sum as i64)
            } else {
                sum.to_string()
            };
            Ok(CallToolResult::text(text))
        },
    )
}
