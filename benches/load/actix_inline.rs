//! actix-inline baseline: the same stack as mcp-ws (actix-web 4,
//! actix-web-actors, serde_json) with one session actor per connection that
//! answers `tools/call` echo inline, in its stream handler, with no worker
//! actor, no limits and no metrics. It is the "inline ceiling" issue 4 holds
//! the worker path to: what mcp-ws costs above it is the price of the worker
//! actor, the limits and the MCP session around each request.
//!
//! [`Style::Optimized`] (the `actix-inline` target) is written to be fast:
//! one typed parse of the envelope with borrowed strings, the id copied as raw
//! JSON, the echoed text passed through as the JSON string it arrived as (never
//! unescaped and escaped again, as mcp-ws does too), one
//! `serde_json::to_string` of the answer.
//!
//! [`Style::Naive`] (the `actix-naive` target) is the same server answering as
//! a JSON-RPC echo is commonly written: the frame parsed into a
//! `serde_json::Value`, the answer built with `json!` and serialized from
//! that tree. Issue #20 measures mcp-ws against "a naive actix-web inline
//! JSON-RPC echo"; both are reported.

use std::borrow::Cow;
use std::net::TcpListener;

use actix::{Actor, ActorContext, StreamHandler};
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use actix_web_actors::ws;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::client::MCP_SUBPROTOCOL;

/// Largest frame accepted: mcp-ws's default `limits.max_message_bytes`.
const MAX_FRAME_BYTES: usize = 4 << 20;
/// How long a stopping server lets its connections wind down, in seconds.
const SHUTDOWN_TIMEOUT_SECS: u64 = 5;

const INITIALIZE_RESULT: &str = r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"actix-inline-baseline","version":"0"}}"#;

/// How the session answers a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Typed, borrowed parse; the echoed text passed through ([`answer`]).
    Optimized,
    /// A `serde_json::Value` tree in and out ([`naive_answer`]).
    Naive,
}

/// Serves on `listener` with one actix worker (one core's worth, like a
/// pinned mcp-ws) until `shutdown` fires, answering in `style`. Runs its own
/// actix system, so it must be called on a thread without a runtime.
pub fn serve(
    listener: TcpListener,
    shutdown: oneshot::Receiver<()>,
    style: Style,
) -> std::io::Result<()> {
    actix_rt::System::new().block_on(async move {
        let server = HttpServer::new(move || {
            App::new()
                .app_data(web::Data::new(style))
                .route("/mcp", web::get().to(upgrade))
        })
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

async fn upgrade(
    req: HttpRequest,
    stream: web::Payload,
    style: web::Data<Style>,
) -> Result<HttpResponse, actix_web::Error> {
    ws::WsResponseBuilder::new(InlineSession(**style), &req, stream)
        .protocols(&[MCP_SUBPROTOCOL])
        .frame_size(MAX_FRAME_BYTES)
        .start()
}

struct InlineSession(Style);

impl Actor for InlineSession {
    type Context = ws::WebsocketContext<Self>;
}

impl StreamHandler<Result<ws::Message, ws::ProtocolError>> for InlineSession {
    fn handle(&mut self, message: Result<ws::Message, ws::ProtocolError>, ctx: &mut Self::Context) {
        match message {
            Ok(ws::Message::Text(text)) => {
                let answer = match self.0 {
                    Style::Optimized => answer(&text),
                    Style::Naive => naive_answer(&text),
                };
                if let Some(answer) = answer {
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

/// [`answer`] as it is commonly written: the frame parsed into a tree, the
/// answer built as one and serialized.
fn naive_answer(frame: &str) -> Option<String> {
    let Ok(request) = serde_json::from_str::<Value>(frame) else {
        return Some(naive_error(Value::Null, -32700, "parse error"));
    };
    let id = request.get("id")?.clone();
    let result = match request["method"].as_str() {
        Some("tools/call") => {
            let params = &request["params"];
            match params["arguments"]["text"].as_str() {
                Some(text) if params["name"] == "echo" => {
                    json!({ "content": [{ "type": "text", "text": text }] })
                }
                _ => return Some(naive_error(id, -32602, "invalid params")),
            }
        }
        Some("initialize") => serde_json::from_str(INITIALIZE_RESULT).ok()?,
        Some("ping") => json!({}),
        _ => return Some(naive_error(id, -32601, "method not found")),
    };
    Some(json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string())
}

fn naive_error(id: Value, code: i32, message: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }).to_string()
}
