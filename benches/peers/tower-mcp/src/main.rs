use axum::serve::ListenerExt;
use schemars::JsonSchema;
use serde::Deserialize;
use tower_mcp::transport::http::HttpTransport;
use tower_mcp::{BoxError, CallToolResult, McpRouter, ToolBuilder};

#[derive(Debug, Deserialize, JsonSchema)]
struct EchoArgs {
    text: String,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let echo = ToolBuilder::new("echo")
        .description("Echo the text back")
        .handler(|a: EchoArgs| async move { Ok(CallToolResult::text(a.text)) })
        .build();
    let router = McpRouter::new()
        .server_info("bench-tower", "0.1.0")
        .tool(echo);
    let app = HttpTransport::new(router).into_router_at("/mcp"); // serve()/into_router() mount at "/"
    let listener = tokio::net::TcpListener::bind(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "127.0.0.1:8802".into()),
    )
    .await?;
    // actix-web (mcp-ws) sets TCP_NODELAY on every connection; without it here, an answer
    // written in several pieces (rmcp's SSE: headers, then chunks) waits ~40 ms for the
    // client's delayed ACK. NODELAY=0 keeps the stock behaviour of the research snippet.
    let nodelay = std::env::var("NODELAY").as_deref() != Ok("0");
    let listener = listener.tap_io(move |tcp| {
        if nodelay {
            let _ = tcp.set_nodelay(true);
        }
    });
    axum::serve(listener, app).await?;
    Ok(())
}
