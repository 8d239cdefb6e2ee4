//! actix-inline baseline: the same stack as mcp-ws (actix-web 4,
//! actix-web-actors, serde_json) with one session actor per connection that
//! answers `tools/call` echo inline, in its stream handler, with no worker
//! actor, no limits and no metrics. It is the "inline ceiling" issue 4 holds
//! the worker path to: what mcp-ws costs above it is the price of the worker
//! actor, the limits and the MCP session around each request.
//!
//! It is written to be fast, not naive: one typed parse of the envelope with
//! borrowed strings, the id copied as raw JSON, the echoed text passed through
//! as the JSON string it arrived as (never unescaped and escaped again, as
//! mcp-ws does too), one `serde_json::to_string` of the answer.

use std::borrow::Cow;
use std::net::TcpListener;

use actix::{Actor, ActorContext, StreamHandler};
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use actix_web_actors::ws;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::sync::oneshot;

use crate::client::MCP_SUBPROTOCOL;

/// Largest frame accepted: mcp-ws's default `limits.max_message_bytes`.
const MAX_FRAME_BYTES: usize = 4 << 20;
/// How long a stopping server lets its connections wind down, in seconds.
const SHUTDOWN_TIMEOUT_SECS: u64 = 5;

const INITIALIZE_RESULT: &str = r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"actix-inline-baseline","version":"0"}}"#;

/// Serves on `listener` with one actix worker (one core's worth, like a
/// pinned mcp-ws) until `shutdown` fires. Runs its own actix system, so it
/// must be called on a thread without a runtime.
pub fn serve(listener: TcpListener, shutdown: oneshot::Receiver<()>) -> std::io::Result<()> {
    actix_rt::System::new().block_on(async move {
        let server = HttpServer::new(|| App::new().route("/mcp", web::get().to(upgrade)))
            .workers(1)
            .disable_signals()
            .shutdown_timeout(SHUTDOWN_TIMEOUT_SECS)
            .listen(listener)?
            .run();
        let handle = server.handle();
        let running = actix_rt::spawn(server);
        // A dropped sender also means "stop".
        let _ = shutdown.await;
        handle.stop(true).await;
        let _ = running.await;
        Ok(())
    })
}

async fn upgrade(req: HttpRequest, stream: web::Payload) -> Result<HttpResponse, actix_web::Error> {
    ws::WsResponseBuilder::new(InlineSession, &req, stream)
        .protocols(&[MCP_SUBPROTOCOL])
        .frame_size(MAX_FRAME_BYTES)
        .start()
}

struct InlineSession;

impl Actor for InlineSession {
    type Context = ws::WebsocketContext<Self>;
}

impl StreamHandler<Result<ws::Message, ws::ProtocolError>> for InlineSession {
    fn handle(&mut self, message: Result<ws::Message, ws::ProtocolError>, ctx: &mut Self::Context) {
        match message {
            Ok(ws::Message::Text(text)) => {
                if let Some(answer) = answer(&text) {
                    ctx.text(answer);
                }
            }
            Ok(ws::Message::Ping(payload)) => ctx.pong(&payload),
            Ok(ws::Message::Close(reason)) => {
                ctx.close(reason);
                ctx.stop();
            }
            Ok(_) => {}
            Err(_) => ctx.stop(),
        }
    }
}

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow)]
    arguments: EchoArguments<'a>,
}

#[derive(Deserialize)]
struct EchoArguments<'a> {
    /// The JSON string literal, quotes and escapes included.
    #[serde(borrow)]
    text: &'a RawValue,
}

#[derive(Serialize)]
struct Response<'a, R: Serialize> {
    jsonrpc: &'static str,
    id: &'a RawValue,
    result: R,
}

#[derive(Serialize)]
struct ErrorResponse<'a> {
    jsonrpc: &'static str,
    id: Option<&'a RawValue>,
    error: ErrorObject<'a>,
}

#[derive(Serialize)]
struct ErrorObject<'a> {
    code: i32,
    message: &'a str,
}

#[derive(Serialize)]
struct ToolResult<'a> {
    content: [TextContent<'a>; 1],
}

#[derive(Serialize)]
struct TextContent<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a RawValue,
}

/// The answer to one text frame, or nothing for a notification.
fn answer(frame: &str) -> Option<String> {
    let Ok(request) = serde_json::from_str::<Request>(frame) else {
        return Some(error(None, -32700, "parse error"));
    };
    let id = request.id?;
    let encoded = match request.method.as_ref() {
        "tools/call" => match request
            .params
            .map(|params| serde_json::from_str::<ToolCall>(params.get()))
        {
            Some(Ok(call)) if call.name == "echo" && call.arguments.text.get().starts_with('"') => {
                to_response(
                    id,
                    ToolResult {
                        content: [TextContent {
                            kind: "text",
                            text: call.arguments.text,
                        }],
                    },
                )
            }
            _ => return Some(error(Some(id), -32602, "invalid params")),
        },
        "initialize" => to_response(
            id,
            serde_json::from_str::<&RawValue>(INITIALIZE_RESULT).ok()?,
        ),
        "ping" => to_response(id, serde_json::Map::new()),
        _ => return Some(error(Some(id), -32601, "method not found")),
    };
    encoded.ok()
}

fn to_response<R: Serialize>(id: &RawValue, result: R) -> serde_json::Result<String> {
    serde_json::to_string(&Response {
        jsonrpc: "2.0",
        id,
        result,
    })
}

fn error(id: Option<&RawValue>, code: i32, message: &str) -> String {
    serde_json::to_string(&ErrorResponse {
        jsonrpc: "2.0",
        id,
        error: ErrorObject { code, message },
    })
    .unwrap_or_default()
}
