//! raw-echo baseline: a tokio-tungstenite server that sends every data frame
//! back unchanged. It does no JSON work at all, so it is the framing and
//! syscall ceiling any WebSocket JSON-RPC server on the same core is under.

use std::io;

use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use crate::client::MCP_SUBPROTOCOL;

/// Frames echoed before one flush: enough to coalesce a pipelined burst into
/// few writes, small enough to keep latency flat.
const MAX_FRAMES_PER_FLUSH: usize = 64;

/// tungstenite zero-fills its whole read buffer before every read and keeps
/// it resident; its 128 KiB default would make this "ceiling" pay a 128 KiB
/// memset per read and 128 KiB RSS per connection. 16 KiB still takes a full
/// pipelined burst of small frames in one read.
const READ_BUFFER_BYTES: usize = 16 << 10;

/// Accepts until `shutdown` fires; each connection runs as its own task.
pub async fn serve(listener: TcpListener, mut shutdown: oneshot::Receiver<()>) {
    let mut accept_failures: u64 = 0;
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _peer)) => {
                    tokio::spawn(echo_connection(tcp));
                }
                Err(e) => {
                    // Report the first failure; EMFILE repeats for every
                    // pending connection and would flood the output.
                    if accept_failures == 0 {
                        eprintln!("raw-echo: accept failed: {e}");
                    }
                    accept_failures += 1;
                    // The error repeats immediately; do not spin.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            },
        }
    }
    if accept_failures > 1 {
        eprintln!("raw-echo: {accept_failures} accept failures in total");
    }
}

/// Selects `mcp` when the client offers it, as mcp-ws does, so the same
/// client handshake works against both.
#[allow(clippy::result_large_err)] // signature fixed by tungstenite's Callback
fn select_subprotocol(
    request: &Request,
    mut response: Response,
) -> Result<Response, ErrorResponse> {
    let offers_mcp = request
        .headers()
        .get_all("Sec-WebSocket-Protocol")
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|protocol| protocol.trim() == MCP_SUBPROTOCOL);
    if offers_mcp {
        response.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            HeaderValue::from_static(MCP_SUBPROTOCOL),
        );
    }
    Ok(response)
}

async fn echo_connection(tcp: TcpStream) {
    match echo_frames(tcp).await {
        Ok(()) => {}
        // A client that goes away without a close handshake (end of a run,
        // a dropped session) is normal for a load test.
        Err(WsError::ConnectionClosed | WsError::AlreadyClosed)
        | Err(WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake)) => {}
        Err(WsError::Io(e))
            if matches!(
                e.kind(),
                io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe
            ) => {}
        Err(e) => eprintln!("raw-echo: connection ended: {e}"),
    }
}

async fn echo_frames(tcp: TcpStream) -> Result<(), WsError> {
    tcp.set_nodelay(true)?;
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER_BYTES)
        .max_message_size(Some(16 << 20))
        .max_frame_size(Some(16 << 20));
    let mut ws =
        tokio_tungstenite::accept_hdr_async_with_config(tcp, select_subprotocol, Some(config))
            .await?;
    while let Some(first) = ws.next().await {
        let mut frame = Some(first?);
        let mut queued = 0;
        // Echo everything that is already buffered, then flush once.
        while let Some(message) = frame.take() {
            match message {
                Message::Text(_) | Message::Binary(_) => {
                    ws.feed(message).await?;
                    queued += 1;
                }
                Message::Close(_) => {
                    // tungstenite queued the close reply; flush it and stop.
                    let _ = ws.flush().await;
                    return Ok(());
                }
                // Pings are answered by tungstenite itself.
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
            if queued < MAX_FRAMES_PER_FLUSH {
                frame = match ws.next().now_or_never() {
                    Some(Some(next)) => Some(next?),
                    Some(None) => {
                        let _ = ws.flush().await;
                        return Ok(());
                    }
                    None => None,
                };
            }
        }
        ws.flush().await?;
    }
    Ok(())
}
