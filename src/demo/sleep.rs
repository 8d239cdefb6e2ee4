//! `sleep {ms}`: waits, reporting progress every 50 ms when the caller asked for it. The
//! long-running, cancellable tool of the contract.

use mcp_ws::model::LogLevel;
use mcp_ws::{RequestContext, Tool, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

/// Progress cadence; the contract asks for at least one report every 100 ms.
const PROGRESS_EVERY: Duration = Duration::from_millis(50);

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SleepArgs {
    /// How long to wait, in milliseconds.
    ms: u64,
}

async fn sleep(args: SleepArgs, ctx: RequestContext) -> Result<String, ToolError> {
    ctx.log(LogLevel::Debug, json!({ "sleeping_ms": args.ms }));
    let total = Duration::from_millis(args.ms);
    let start = Instant::now();
    let mut ticks = tokio::time::interval_at(start + PROGRESS_EVERY, PROGRESS_EVERY);
    loop {
        let remaining = total.saturating_sub(start.elapsed());
        if remaining.is_zero() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep(remaining) => break,
            _ = ticks.tick() => {
                // No report once the time is up: the response follows at once, and a
                // progress frame arriving with it only races the response in clients (the
                // TS SDK handles notifications a microtask later).
                let done = start.elapsed();
                if done < total {
                    ctx.report_progress(done.as_millis() as f64, Some(args.ms as f64), None);
                }
            }
        }
    }
    Ok(format!("slept {} ms", args.ms))
}

/// The tool.
pub fn tool() -> Tool {
    Tool::new(
        "sleep",
        "Waits for the given milliseconds, reporting progress; cancellable.",
        sleep,
    )
}
