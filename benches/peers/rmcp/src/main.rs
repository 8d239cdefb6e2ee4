use axum::serve::ListenerExt;
use rmcp::{
    ServerHandler,
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::{ServerCapabilities, ServerConfig},
    tool, tool_handler, tool_router,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// Text to echo back
    text: String,
}

#[derive(Debug, Clone)]
struct Echo {
    #[allow(dead_code)]
    tool_router: ToolRouter<Self>,
} // read by #[tool_handler]

#[tool_router]
impl Echo {
    fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }
    #[tool(description = "Echo the text back")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }
}

#[tool_handler]
impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let stateless = std::env::var("MODE").as_deref() == Ok("stateless-json");
    let config = StreamableHttpServerConfig::default() // #[non_exhaustive]: use the builders
        .with_legacy_session_mode(!stateless) // false: no Mcp-Session-Id, a transient session per POST
        .with_json_response(stateless) // honoured only when legacy_session_mode == false
        .with_sse_keep_alive(None);
    let service: StreamableHttpService<Echo, LocalSessionManager> =
        StreamableHttpService::new(|| Ok(Echo::new()), Default::default(), config);
    let app = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "127.0.0.1:8801".into()),
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
    axum::serve(listener, app).await
}
