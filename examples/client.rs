//! `mcp_ws::client` on its own: starts a stdio MCP server (or reaches one over Streamable
//! HTTP or WebSocket), lists its tools and calls one.
//!
//! The protocol version asked for (and with it the era) is `MCP_PROTOCOL_VERSION`'s, 2025-11-25
//! when unset.
//!
//! ```sh
//! cargo run --example client -- npx -y @modelcontextprotocol/server-everything
//! MCP_PROTOCOL_VERSION=2026-07-28 cargo run --example client -- --http http://127.0.0.1:8765/mcp
//! cargo run --example client -- --http http://127.0.0.1:8765/mcp
//! cargo run --example client -- --ws ws://127.0.0.1:8765/mcp
//! ```

use mcp_ws::client::{Client, ClientOptions, StdioCommand};
use serde_json::json;
use std::time::Duration;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut options = ClientOptions::default();
    if let Ok(version) = std::env::var("MCP_PROTOCOL_VERSION") {
        options.protocol_version = version;
    }
    let client = match args.as_slice() {
        [flag, url] if flag == "--http" => Client::http(url, &[], options).await?,
        [flag, url] if flag == "--ws" => Client::websocket(url, &[], options).await?,
        [program, rest @ ..] => {
            let command = StdioCommand::new(program).args(rest.iter().cloned());
            Client::stdio(command, options).await?
        }
        [] => {
            return Err("usage: client CMD [ARGS...] | client --http URL | client --ws URL".into())
        }
    };
    let server = client.server();
    println!(
        "connected: {} ({})",
        server.server_info, server.protocol_version
    );
    let tools = client.list_all("tools/list", "tools").await?;
    for tool in &tools {
        println!("tool {}", tool["name"]);
    }
    if tools.iter().any(|t| t["name"] == "echo") {
        let answer = client
            .call_tool("echo", json!({ "message": "hi", "text": "hi" }))
            .await?;
        println!("echo: {answer}");
    }
    client.shutdown(Duration::from_secs(2)).await;
    Ok(())
}
