//! Your own tools over WebSocket and Streamable HTTP: `cargo run --example custom_tools`,
//! then connect an MCP client to ws://127.0.0.1:8765/mcp (or POST http://127.0.0.1:8765/mcp).
use mcp_ws::{Json, RequestContext, Server, TaskSupport, Tool, ToolError};
use std::time::Duration;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Count {
    /// How far to count (at most 100).
    to: u32,
}

#[derive(serde::Serialize, schemars::JsonSchema)]
struct Counted {
    /// The numbers counted, summed.
    sum: u64,
}

/// Counts slowly with progress; a cancelled call stops at the next number.
async fn count(args: Count, ctx: RequestContext) -> Result<Json<Counted>, ToolError> {
    let to = args.to.min(100);
    let mut sum = 0;
    for n in 1..=to {
        if ctx.is_cancelled() {
            return Err(ToolError::failed("cancelled"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        sum += u64::from(n);
        ctx.report_progress(f64::from(n), Some(f64::from(to)), None);
    }
    Ok(Json(Counted { sum }))
}

fn main() -> Result<(), mcp_ws::Error> {
    mcp_ws::telemetry::init("info");
    // 2026-07-28 clients with the tasks extension may run it as a task and poll it.
    let tool =
        Tool::new("count", "Counts to a number, slowly", count).task_support(TaskSupport::Optional);
    Server::builder().name("counter").tool(tool).build()?.run()
}
