//! jsonrpsee baseline: a jsonrpsee 0.26 WebSocket server with the three
//! methods the workloads call (`initialize`, `tools/call` with mcp-ws's echo
//! result shape, `ping`). It is what an off-the-shelf Rust JSON-RPC stack
//! costs for the same traffic.

use std::net::SocketAddr;

use jsonrpsee::server::{RpcModule, Server, ServerConfig, ServerHandle};
use jsonrpsee::types::ErrorObjectOwned;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;

use crate::BoxError;

const MAX_CONNECTIONS: u32 = 20_000;
const MAX_MESSAGE_BYTES: u32 = 16 << 20;

#[derive(Deserialize)]
struct ToolCallParams {
    name: String,
    arguments: EchoArguments,
}

#[derive(Deserialize)]
struct EchoArguments {
    text: String,
}

#[derive(Serialize, Clone)]
struct ToolResult {
    content: [TextContent; 1],
}

#[derive(Serialize, Clone)]
struct TextContent {
    #[serde(rename = "type")]
    kind: &'static str,
    text: String,
}

fn methods() -> Result<RpcModule<()>, BoxError> {
    let mut module = RpcModule::new(());
    let init_result = serde_json::json!({
        "protocolVersion": "2025-11-25",
        "capabilities": { "tools": {} },
        "serverInfo": { "name": "jsonrpsee-baseline", "version": "0" }
    });
    module.register_method("initialize", move |_params, _ctx, _ext| {
        Ok::<_, ErrorObjectOwned>(init_result.clone())
    })?;
    module.register_method("tools/call", |params, _ctx, _ext| {
        let call: ToolCallParams = params.parse()?;
        if call.name != "echo" {
            return Err(ErrorObjectOwned::owned(
                -32602,
                format!("unknown tool {}", call.name),
                None::<()>,
            ));
        }
        Ok(ToolResult {
            content: [TextContent {
                kind: "text",
                text: call.arguments.text,
            }],
        })
    })?;
    module.register_method("ping", |_params, _ctx, _ext| {
        Ok::<_, ErrorObjectOwned>(serde_json::Map::new())
    })?;
    Ok(module)
}

/// Starts the server on `listener`, on the current tokio runtime.
pub fn start(listener: TcpListener) -> Result<(ServerHandle, SocketAddr), BoxError> {
    let config = ServerConfig::builder()
        .ws_only()
        .max_connections(MAX_CONNECTIONS)
        .max_request_body_size(MAX_MESSAGE_BYTES)
        .max_response_body_size(MAX_MESSAGE_BYTES)
        .build();
    let server = Server::builder()
        .set_config(config)
        .build_from_tcp(listener.into_std()?)?;
    let addr = server.local_addr()?;
    Ok((server.start(methods()?), addr))
}
