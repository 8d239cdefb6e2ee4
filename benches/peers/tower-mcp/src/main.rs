use schemars::JsonSchema;
use serde::Deserialize;
use tower_mcp::transport::http::HttpTransport;
use tower_mcp::{BoxError, CallToolResult, McpRouter, ToolBuilder};

#[derive(Debug, Deserialize, JsonSchema)]
struct EchoArgs { text: String }

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let echo = ToolBuilder::new("echo")
        .description("Echo the text back")
        .handler(|a: EchoArgs| async move { Ok(CallToolResult::text(a.text)) })
        .build();
    let router = McpRouter::new().server_info("bench-tower", "0.1.0").tool(echo);
    let app = HttpTransport::new(router).into_router_at("/mcp"); // serve()/into_router() mount at "/"
    let listener = tokio::net::TcpListener::bind(std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8802".into())).await?;
    axum::serve(listener, app).await?;
    Ok(())
}
