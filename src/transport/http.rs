//! Streamable HTTP (MCP 2025-03-26 … 2025-11-25) on the MCP endpoint, beside the WebSocket
//! upgrade: `POST` carries one client message (or a batch), `GET` opens the session's SSE
//! stream or resumes a dropped one (`Last-Event-ID`), `DELETE` ends the session.
//!
//! These handlers only check the request and carry messages: the session itself is a
//! [`HostedSession`] actor, the same protocol core as a WebSocket session's, reached by the
//! `Mcp-Session-Id` it issued at `initialize`. Refusals are [`Refusal`]s (the perimeter's one
//! mapping to HTTP).

use super::events::{Cursor, SseEvent};
use super::hosted::{End, HostedSession, OpenStream, Post, PostReply};
use crate::jsonrpc::{decode, Decoded, Entry, FrameLimits};
use crate::mcp::{CallToolParams, ProtocolVersion};
use crate::perimeter::{self, Admission, Refusal};
use crate::shared::{SessionId, Shared};
use actix::Addr;
use actix_web::http::header::{self, HeaderMap};
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use futures_util::stream::{self, Stream};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The session header, as the spec spells it (header names are case-insensitive).
pub const SESSION_HEADER: &str = "Mcp-Session-Id";
const PROTOCOL_VERSION_HEADER: &str = "MCP-Protocol-Version";
const LAST_EVENT_ID_HEADER: &str = "Last-Event-ID";

/// `POST /mcp`: one client message (or a 2025-03-26 batch).
pub async fn post(
    req: HttpRequest,
    body: web::Payload,
    shared: web::Data<Shared>,
) -> Result<HttpResponse, Refusal> {
    let shared = shared.into_inner();
    let admission = check_common(&req, &shared)?;
    if !accepts(req.headers(), "application/json") || !accepts(req.headers(), "text/event-stream") {
        return Err(Refusal::NotAcceptable(
            "both application/json and text/event-stream",
        ));
    }
    let json_body = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
    if !json_body {
        return Err(Refusal::UnsupportedMediaType);
    }
    // Read here rather than by an extractor, so that the checks above come first and an
    // oversized body is refused like everything else (a JSON-RPC error, not actix's text).
    let body = body
        .to_bytes_limited(shared.settings.limits.max_message_bytes)
        .await
        .map_err(|_| {
            shared.metrics.limited.message_too_large.inc();
            Refusal::PayloadTooLarge
        })?
        .map_err(|_| Refusal::BodyUnreadable)?;
    let text = String::from_utf8(body.into()).map_err(|_| Refusal::BodyNotText)?;
    let (session, new_id) = match session_id(req.headers()) {
        Some(id) => (
            shared.find_session(id).ok_or(Refusal::SessionNotFound)?,
            None,
        ),
        None if is_initialize(&text) => {
            let slot = shared.admit_session().ok_or_else(|| busy(&shared))?;
            let id = SessionId::generate();
            let session = HostedSession::start_http(shared.clone(), slot, id.clone(), admission);
            shared.remember_session(id.clone(), session.clone());
            (session, Some(id))
        }
        None => return Err(Refusal::SessionRequired),
    };
    let reply = exchange(&session, text).await?;
    let mut response = match reply {
        PostReply::Accepted => HttpResponse::Accepted().finish(),
        PostReply::Json(frame) => HttpResponse::Ok()
            .content_type("application/json")
            .body(frame),
        PostReply::Stream(events) => sse(events, keep_alive(&shared)),
    };
    if let Some(id) = new_id {
        // The session exists only if `initialize` succeeded; otherwise it is gone already
        // and the client gets its error without an id to use.
        if shared.find_session(id.as_str()).is_some() {
            if let Ok(value) = header::HeaderValue::from_str(id.as_str()) {
                response
                    .headers_mut()
                    .insert(header::HeaderName::from_static("mcp-session-id"), value);
            }
        }
    }
    Ok(response)
}

/// `GET /mcp` without a WebSocket upgrade: the session's SSE stream, or a resumed stream.
pub async fn get(req: HttpRequest, shared: web::Data<Shared>) -> Result<HttpResponse, Refusal> {
    let shared = shared.into_inner();
    check_common(&req, &shared)?;
    if !accepts(req.headers(), "text/event-stream") {
        return Err(Refusal::NotAcceptable("text/event-stream"));
    }
    let id = session_id(req.headers()).ok_or(Refusal::SessionRequired)?;
    let session = shared.find_session(id).ok_or(Refusal::SessionNotFound)?;
    let resume = match req.headers().get(LAST_EVENT_ID_HEADER) {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(Cursor::parse)
                .ok_or(Refusal::ResumeGone)?,
        ),
    };
    let (reply, answer) = oneshot::channel();
    session
        .send(OpenStream { resume, reply })
        .await
        .map_err(|_| Refusal::SessionNotFound)?;
    let events = answer
        .await
        .map_err(|_| Refusal::SessionNotFound)?
        .map_err(|_| Refusal::ResumeGone)?;
    Ok(sse(events, keep_alive(&shared)))
}

/// `DELETE /mcp`: the client ends its session.
pub async fn delete(req: HttpRequest, shared: web::Data<Shared>) -> Result<HttpResponse, Refusal> {
    let shared = shared.into_inner();
    check_common(&req, &shared)?;
    let id = session_id(req.headers()).ok_or(Refusal::SessionRequired)?;
    let session = shared.find_session(id).ok_or(Refusal::SessionNotFound)?;
    session
        .send(End)
        .await
        .map_err(|_| Refusal::SessionNotFound)?;
    Ok(HttpResponse::Ok().finish())
}

/// Any other method on the endpoint.
pub async fn not_allowed() -> Result<HttpResponse, Refusal> {
    Err(Refusal::MethodNotAllowed)
}

/// Origin/Host, and the protocol version header when present (checked before the session,
/// so a bad header is a 400 whether or not the session exists).
fn check_common(req: &HttpRequest, shared: &Shared) -> Result<Admission, Refusal> {
    let admission = perimeter::admit(shared, req)?;
    if let Some(value) = req.headers().get(PROTOCOL_VERSION_HEADER) {
        let text = value.to_str().unwrap_or("");
        // Any supported version is accepted: the session keeps the one it negotiated.
        if ProtocolVersion::parse(text).is_none() {
            return Err(Refusal::UnsupportedProtocolVersion(
                text.chars().take(64).collect(),
            ));
        }
    }
    Ok(admission)
}

/// Hands a message to its session and waits for how to answer.
async fn exchange(session: &Addr<HostedSession>, text: String) -> Result<PostReply, Refusal> {
    let (reply, answer) = oneshot::channel();
    session
        .send(Post { text, reply })
        .await
        .map_err(|_| Refusal::SessionNotFound)?;
    answer.await.map_err(|_| Refusal::SessionNotFound)
}

fn busy(shared: &Shared) -> Refusal {
    if shared.is_draining() {
        Refusal::ShuttingDown
    } else {
        Refusal::TooManySessions
    }
}

fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok())
}

/// Whether `Accept` admits `media` (or anything).
fn accepts(headers: &HeaderMap, media: &str) -> bool {
    headers.get_all(header::ACCEPT).any(|value| {
        value.to_str().is_ok_and(|v| {
            v.split(',').any(|part| {
                let part = part.split(';').next().unwrap_or("").trim();
                part.eq_ignore_ascii_case(media) || part == "*/*"
            })
        })
    })
}

/// Whether a session-less POST is an `initialize` (the only message that may start one).
fn is_initialize(text: &str) -> bool {
    matches!(
        decode::<CallToolParams<'_>>(text, &FrameLimits::new(1)),
        Decoded::Single(Entry::Request(request)) if request.method == "initialize"
    )
}

fn keep_alive(shared: &Shared) -> Duration {
    Duration::from_millis(shared.settings.sessions.sse_keep_alive_ms)
}

/// An SSE response streaming `events`, with a keep-alive comment when idle; it ends when the
/// session drops the sender (the exchange was answered, or the session ended).
fn sse(events: mpsc::Receiver<SseEvent>, keep_alive: Duration) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache, no-transform"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(sse_body(events, keep_alive))
}

fn sse_body(
    events: mpsc::Receiver<SseEvent>,
    keep_alive: Duration,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>> {
    stream::unfold(events, move |mut events| async move {
        let chunk = match tokio::time::timeout(keep_alive, events.recv()).await {
            Ok(Some(event)) => Bytes::from(event.to_wire()),
            Ok(None) => return None,
            Err(_idle) => Bytes::from_static(b": keep-alive\n\n"),
        };
        Some((Ok(chunk), events))
    })
}
