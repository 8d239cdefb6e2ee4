//! Streamable HTTP on the MCP endpoint, beside the WebSocket upgrade. For sessions (MCP
//! 2025-03-26 … 2025-11-25): `POST` carries one client message (or a batch), `GET` opens the
//! session's SSE stream or resumes a dropped one (`Last-Event-ID`), `DELETE` ends the
//! session. For 2026-07-28 requests: each `POST` is self-contained (no session), its headers
//! are checked against its body, and closing its answer's stream cancels it.
//!
//! These handlers only check the request and carry messages: a session is a
//! [`HostedSession`] actor, the same protocol core as a WebSocket session's, reached by the
//! `Mcp-Session-Id` it issued at `initialize`; a 2026-07-28 request runs on a core of its own
//! inside its handler and its answer's stream (a [`StatelessExchange`]). Refusals are
//! [`Refusal`]s (the perimeter's one mapping to HTTP).

use super::events::{Cursor, EventChunks, ReplayError, SseEvent};
use super::hosted::{
    find_or_take_up, End, EndedElsewhere, HostedSession, OpenStream, Post, PostReply, TakeRecord,
};
use super::stateless::{Body, FirstReply, StatelessExchange};
use crate::perimeter::{self, Admission, Owner, Refusal};
use crate::protocol::jsonrpc::{encode_error, Decoded};
use crate::protocol::mcp::{decode_header_value, quoted, Method, ProtocolVersion, RequestMeta};
use crate::registry::ViewerRef;
use crate::session::record::SessionRecord;
use crate::session::shared::{SessionId, Shared};
use crate::session::{Entry, ReadRequest, Session};
use crate::transport::hosted::HostedSessions;
use actix::dev::SendError;
use actix::Addr;
use actix_web::http::header::{self, HeaderMap, HeaderName};
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::{Bytes, BytesMut};
use futures_util::stream::{self, Stream, StreamExt};
use memchr::memmem;
use std::borrow::Cow;
use std::sync::{Arc, LazyLock};
use std::task::Poll;
use std::time::{Duration, SystemTime};
use tokio::sync::oneshot;

// The headers this transport reads, named once: a lookup by `&str` parses and lower-cases
// the name again on every request.
/// The session header (the spec spells it `Mcp-Session-Id`; names are case-insensitive).
pub static SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
static PROTOCOL_VERSION_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");
static LAST_EVENT_ID_HEADER: HeaderName = HeaderName::from_static("last-event-id");
static METHOD_HEADER: HeaderName = HeaderName::from_static("mcp-method");
static NAME_HEADER: HeaderName = HeaderName::from_static("mcp-name");

/// `POST /mcp`: one client message (or a 2025-03-26 batch) of a session, or one
/// self-contained 2026-07-28 request.
pub async fn post(
    req: HttpRequest,
    body: web::Payload,
    shared: web::Data<Shared>,
    directory: web::Data<HostedSessions>,
) -> Result<HttpResponse, Refusal> {
    let shared = shared.into_inner();
    let admission = perimeter::admit(&shared.perimeter, &req)?;
    if !accepts(req.headers(), ["application/json", "text/event-stream"]) {
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
    let body = read_body(body, &shared, admission.peer).await?;
    let text = String::from_utf8(body.into()).map_err(|_| Refusal::BodyNotText)?;
    let mut versions = req.headers().get_all(&PROTOCOL_VERSION_HEADER);
    let header_version = versions.next().map(|v| v.to_str().unwrap_or(""));
    // Refused for a 2026-07-28 request (`check_headers`); read in the same lookup.
    let version_repeated = versions.next().is_some();
    // A 2026-07-28 request says so in its `_meta` (and its header); it is served on its own,
    // whatever session header it carries.
    let stateless_header = header_version
        .and_then(ProtocolVersion::parse)
        .is_some_and(ProtocolVersion::is_stateless);
    if stateless_header || names_stateless_version(&text) {
        let header_version = HeaderVersion {
            value: header_version,
            repeated: version_repeated,
        };
        return stateless(&req, &shared, admission, &text, header_version).await;
    }
    check_version_header(header_version)?;
    let owner = Owner::of(&admission);
    let expires = admission.expires;
    let (session, new_id) = match session_id(req.headers()) {
        Some(id) => (
            find_session(id, &admission, &shared, &directory).await?,
            None,
        ),
        None if Probe::of(&text).is_initialize => {
            if shared.settings.sessions_in_redis()
                && shared
                    .cluster
                    .store
                    .redis()
                    .is_some_and(|r| !r.is_available())
            {
                // A session begun now could be served by this node only.
                return Err(Refusal::SessionStoreUnavailable);
            }
            let slot = shared.open_new_session(&admission)?;
            let id = SessionId::generate();
            let session = HostedSession::start_http(
                shared.clone(),
                directory.clone().into_inner(),
                slot,
                id.clone(),
                admission,
            );
            directory.remember(id.clone(), session.clone(), owner.clone());
            (session, Some(id))
        }
        None => return Err(Refusal::SessionRequired),
    };
    let mut response = answer(&shared, exchange(&session, text).await?, expires);
    if let (Some(id), true) = (&new_id, shared.settings.sessions_in_redis()) {
        // The record is in Redis before the client has the id: its next request may go to
        // any node at once.
        if directory.find(id.as_str(), &owner).is_some() {
            store_new_session(&shared, &session, id).await?;
        }
    }
    if let Some(id) = new_id {
        // The session exists only if `initialize` succeeded; otherwise it is gone already
        // and the client gets its error without an id to use.
        if directory.find(id.as_str(), &owner).is_some() {
            if let Ok(value) = header::HeaderValue::from_str(id.as_str()) {
                response.headers_mut().insert(SESSION_HEADER.clone(), value);
            }
        }
    }
    Ok(response)
}

/// A POST's body, read to its end within `limits.max_message_bytes`, the server's budget of
/// partly received messages (its bytes are held in it until the body is whole) and
/// `limits.partial_timeout_ms` from now (the end of the headers): a client sending a byte now
/// and then cannot hold a handler, a connection and its buffer for ever.
///
/// # Errors
/// [`Refusal::PayloadTooLarge`], [`Refusal::PartialBudget`], [`Refusal::BodyDeadline`],
/// [`Refusal::BodyUnreadable`] (counted with the other refusals, by `count_refusals`).
async fn read_body(
    mut body: web::Payload,
    shared: &Shared,
    client: Option<std::net::IpAddr>,
) -> Result<Bytes, Refusal> {
    let limits = &shared.settings.limits;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(limits.partial_timeout_ms);
    let client = client.map(perimeter::connections::client_key);
    let mut reservation = shared.perimeter.partial.reservation(None);
    let mut buffer = BytesMut::new();
    // A chunk taken while looking for the body's end.
    let mut next: Option<Bytes> = None;
    loop {
        let chunk = match next.take() {
            Some(chunk) => chunk,
            None => match tokio::time::timeout_at(deadline, body.next()).await {
                Err(_elapsed) => return Err(Refusal::BodyDeadline),
                Ok(None) => break,
                Ok(Some(chunk)) => chunk.map_err(|_| Refusal::BodyUnreadable)?,
            },
        };
        let len = buffer.len() + chunk.len();
        if len > limits.max_message_bytes {
            return Err(Refusal::PayloadTooLarge);
        }
        // Whether the body ends here: the end of one that arrived whole is known with its
        // last bytes, so one poll (no wait) tells.
        let whole = match std::future::poll_fn(|cx| Poll::Ready(body.poll_next_unpin(cx))).await {
            Poll::Ready(None) => true,
            Poll::Ready(Some(more)) => {
                next = Some(more.map_err(|_| Refusal::BodyUnreadable)?);
                false
            }
            Poll::Pending => false,
        };
        // A body that waits for more counts in its address's share while it waits, however
        // small (many small bodies held open from one address would fill the budget too). One
        // that came whole in its first chunk, most of them, is not looked up: finding the
        // address's count for each would cost every request a map entry (a WebSocket
        // connection's reader finds it once).
        if let Some(client) = client.filter(|_| !whole) {
            reservation
                .count_in(client)
                .map_err(|_over| Refusal::PartialBudget)?;
        }
        reservation
            .hold(len)
            .map_err(|_over| Refusal::PartialBudget)?;
        buffer.extend_from_slice(&chunk);
        if whole {
            break;
        }
    }
    // Whole: what happens to it now is the session's, bounded by its own limits.
    drop(reservation);
    Ok(buffer.freeze())
}

/// Whether `text` names 2026-07-28 in its `_meta`. Most bodies are ruled out by a scan:
/// the key cannot be written without its own bytes or an escape. The rest are parsed.
fn names_stateless_version(text: &str) -> bool {
    static KEY: LazyLock<memmem::Finder<'static>> =
        LazyLock::new(|| memmem::Finder::new(crate::protocol::mcp::META_PROTOCOL_VERSION));
    let may =
        KEY.find(text.as_bytes()).is_some() || memchr::memchr(b'\\', text.as_bytes()).is_some();
    may && Probe::of(text).names_stateless_version
}

/// A 2026-07-28 request: decoded once, and its params' head (`_meta`, what it acts on)
/// read once ([`ReadRequest`]), which the session then takes as read. Its headers must
/// agree with its body (`MCP-Protocol-Version`, `Mcp-Method`, and `Mcp-Name` for the
/// methods that name something; else -32020 with HTTP 400, and nothing runs), then it runs
/// on a core of its own in this handler (a [`StatelessExchange`]). A client that goes away
/// before the answer (or closes the answer's stream) cancels it.
async fn stateless(
    req: &HttpRequest,
    shared: &Arc<Shared>,
    admission: Admission,
    text: &str,
    header_version: HeaderVersion<'_>,
) -> Result<HttpResponse, Refusal> {
    let body = match Session::decode(shared, &admission, text) {
        Decoded::Single(Entry::Request(request)) => {
            // Its params' head read here, once: the headers are checked against it, and the
            // session takes it as read.
            let read = ReadRequest::of(request);
            // A version that is not a string is the core's to refuse (-32602), not a mismatch.
            let meta_version = read
                .meta()
                .and_then(|meta| meta.protocol_version)
                .and_then(|raw| serde_json::from_str::<Cow<'_, str>>(raw.get()).ok());
            let meta_version = meta_version.as_deref();
            // A version this server does not speak per request, which the version header
            // does not contradict: the core's -32022, listing the versions it speaks, says
            // more than a missing header would. (A header naming another version is a
            // mismatch, -32020, as the conformance suite expects.)
            let unspoken = meta_version.is_some_and(|v| {
                !ProtocolVersion::parse(v).is_some_and(ProtocolVersion::is_stateless)
                    && header_version.value.is_none_or(|header| header == v)
            });
            let checked = if unspoken {
                Ok(())
            } else {
                // Decoded once for both checks (a raw `name` may hold escapes).
                let target = read.target();
                let names = (meta_version, target.as_deref());
                check_headers(req.headers(), &read, names, header_version).and_then(|()| {
                    check_param_headers(req.headers(), shared, &admission, &read, target.as_deref())
                })
            };
            if let Err(mismatch) = checked {
                let error = crate::protocol::mcp::Error::HeaderMismatch(mismatch);
                let frame = encode_error(Some(&read.request.id), &error.to_wire_stateless());
                return Ok(json_answer(frame, 400));
            }
            Body::Request(read)
        }
        // This revision defines no client notification over HTTP (closing a stream
        // cancels), and the server sends no requests to answer: accepted and ignored.
        Decoded::Single(
            Entry::Notification(_) | Entry::Response { .. } | Entry::Dropped { .. },
        ) => return Ok(HttpResponse::Accepted().finish()),
        // Answered by the core with the error they deserve.
        message @ (Decoded::Single(Entry::Invalid { .. })
        | Decoded::Batch(_)
        | Decoded::Rejected(_)) => Body::Message(message),
    };
    let id = match &body {
        Body::Request(read) => Some(read.request.id.clone()),
        Body::Message(_) => None,
    };
    // A stateless request holds a session slot while it runs: the same caps apply. While
    // the server drains, one that starts no new work (`tasks/get`, a list) is still
    // answered, as a session's is: a task's client reads how it ends within the grace.
    let answered_while_draining = matches!(&body, Body::Request(read)
        if Method::parse(&read.request.method).is_some_and(Method::answered_while_draining));
    let slot = if answered_while_draining {
        shared.open_session_while_draining(&admission)?
    } else {
        shared.open_session(&admission)?
    };
    let expires = admission.expires;
    let exchange = StatelessExchange::start(shared.clone(), slot, admission, body);
    let first = exchange.first_reply(keep_alive(shared)).await;
    if matches!(first, FirstReply::Json { .. }) {
        // Sent at the end of this thread's round rather than at once, as an answer that
        // hops through a session's actor is. With many clients, the answers of one round
        // then reach them together; sent one by one, each found its (loopback) client
        // asleep, and waking it was charged to this send: 1.5× the CPU per request for
        // 16 % fewer instructions (benches/README, "An answer sent at once").
        tokio::task::yield_now().await;
    }
    Ok(match first {
        FirstReply::Accepted => HttpResponse::Accepted().finish(),
        FirstReply::ShutDown => {
            // Cut by the end of the shutdown grace: the client may send it again elsewhere.
            let error = crate::protocol::mcp::Error::ShuttingDown.to_wire_stateless();
            let mut response = json_answer(encode_error(id.as_ref(), &error), 503);
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            response
        }
        FirstReply::Json { frame, status } => json_answer(frame, status),
        FirstReply::Stream(exchange) => {
            sse(stateless_events(exchange), keep_alive(shared), expires)
        }
    })
}

/// A request's `MCP-Protocol-Version` header, as read once.
#[derive(Clone, Copy)]
struct HeaderVersion<'a> {
    /// Its (first) value.
    value: Option<&'a str>,
    /// Whether it came more than once.
    repeated: bool,
}

/// The headers of a 2026-07-28 request against its body (`meta_version`: the version its
/// `_meta` names, if a string; `target`: what it acts on, [`ReadRequest::target`]): what is
/// wrong, if anything. Each header is looked up once: a routing header sent twice is
/// refused from the same lookup that reads it.
fn check_headers(
    headers: &HeaderMap,
    read: &ReadRequest<'_>,
    (meta_version, target): (Option<&str>, Option<&str>),
    header_version: HeaderVersion<'_>,
) -> Result<(), String> {
    let method = read.request.method.as_ref();
    if header_version.repeated {
        return Err(format!(
            "the {PROTOCOL_VERSION_HEADER} header is sent more than once"
        ));
    }
    match (header_version.value, meta_version) {
        (None, _) => return Err("the MCP-Protocol-Version header is required".into()),
        (Some(header), Some(meta)) if header != meta => {
            return Err(format!(
                "MCP-Protocol-Version header {} does not match _meta protocolVersion {}",
                quoted(header),
                quoted(meta)
            ))
        }
        _ => {}
    }
    match sent_once(headers, &METHOD_HEADER)?.map(|v| v.to_str().unwrap_or("").trim()) {
        None => return Err("the Mcp-Method header is required".into()),
        Some(header) if header != method => {
            return Err(format!(
                "Mcp-Method header {} does not match body method {}",
                quoted(header),
                quoted(method)
            ))
        }
        Some(_) => {}
    }
    if let Some(name) = target {
        match sent_once(headers, &NAME_HEADER)?.map(|v| v.to_str().unwrap_or("").trim()) {
            None => return Err("the Mcp-Name header is required for this method".into()),
            // A name that is not plain visible ASCII comes base64-encoded (as the clients,
            // this crate's own, send it).
            Some(header) if decode_header_value(header).as_deref() != Some(name) => {
                return Err(format!(
                    "Mcp-Name header {} does not match body value {}",
                    quoted(header),
                    quoted(name)
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The value of header `name`, refused when it is sent more than once: its copies may
/// differ, and an intermediary routing on the last one (or on both, joined) would route on
/// what was not checked.
fn sent_once<'h>(
    headers: &'h HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'h header::HeaderValue>, String> {
    let mut values = headers.get_all(name);
    let first = values.next();
    if values.next().is_some() {
        return Err(format!("the {name} header is sent more than once"));
    }
    Ok(first)
}

/// The `Mcp-Param-*` headers of a 2026-07-28 `tools/call` against the arguments they
/// mirror (the `x-mcp-header` annotations of the tool's version the caller sees, through
/// its identity's views and rollout): each argument present and not null must be repeated,
/// after decoding, by its header. `target` is the tool's name.
fn check_param_headers(
    headers: &HeaderMap,
    shared: &Shared,
    admission: &Admission,
    read: &ReadRequest<'_>,
    target: Option<&str>,
) -> Result<(), String> {
    if read.request.method != "tools/call" {
        return Ok(());
    }
    let Some(name) = target else {
        return Ok(());
    };
    let identity = &admission.identity;
    let chooser = shared.rollout.for_subject(identity.subject());
    let viewer = ViewerRef::Identity(identity.principal());
    let Some(params) = shared.registry.tool_header_params(name, &chooser, viewer) else {
        return Ok(());
    };
    // Only calls of annotated tools pay for reading the arguments here.
    let arguments = match read.arguments() {
        None => serde_json::Value::Null,
        // Arguments that cannot be read as a value (nested deeper than `serde_json` reads)
        // cannot be checked: refused, or a tool ignoring the deep part would run unchecked.
        Some(raw) => match serde_json::from_str(raw.get()) {
            Ok(arguments) => arguments,
            Err(_) => {
                return Err(
                    "the arguments cannot be read to check them against their Mcp-Param \
                     headers"
                        .into(),
                )
            }
        },
    };
    for param in params.iter() {
        let Some(value) = param.value(&arguments) else {
            continue;
        };
        let name = format!("mcp-param-{}", param.suffix.to_ascii_lowercase());
        let mut values = headers.get_all(name.as_str());
        let first = values.next();
        if values.next().is_some() {
            return Err(format!(
                "the Mcp-Param-{} header is sent more than once",
                param.suffix
            ));
        }
        let header = match first.map(|v| v.to_str()) {
            None => {
                return Err(format!(
                    "the Mcp-Param-{} header is required: the call has {}",
                    param.suffix,
                    param.path.join(".")
                ))
            }
            Some(Err(_)) => {
                return Err(format!(
                    "the Mcp-Param-{} header has characters a header may not carry as such",
                    param.suffix
                ))
            }
            Some(Ok(header)) => header,
        };
        param.check(header, value)?;
    }
    Ok(())
}

/// What routing reads of a body that the fast checks could not place: whether it is a
/// single `initialize`, and whether its `_meta` names a 2026-07-28 version.
struct Probe {
    is_initialize: bool,
    names_stateless_version: bool,
}

impl Probe {
    fn of(text: &str) -> Self {
        #[derive(serde::Deserialize)]
        struct Envelope<'a> {
            #[serde(borrow, default)]
            method: Option<Cow<'a, str>>,
            #[serde(borrow, default)]
            params: Option<ProbeParams<'a>>,
        }
        #[derive(serde::Deserialize)]
        struct ProbeParams<'a> {
            #[serde(borrow, default, rename = "_meta")]
            meta: Option<RequestMeta<'a>>,
        }
        // A batch, or not JSON: neither (the session decoder answers what it is).
        let envelope = serde_json::from_str::<Envelope<'_>>(text).ok();
        Self {
            is_initialize: envelope
                .as_ref()
                .is_some_and(|e| e.method.as_deref() == Some("initialize")),
            names_stateless_version: envelope
                .and_then(|e| e.params)
                .and_then(|p| p.meta)
                .is_some_and(|m| m.protocol_version.is_some()),
        }
    }
}

fn json_answer(frame: String, status: u16) -> HttpResponse {
    let status =
        actix_web::http::StatusCode::from_u16(status).unwrap_or(actix_web::http::StatusCode::OK);
    HttpResponse::build(status)
        .content_type("application/json")
        .body(frame)
}

/// The HTTP answer to a POST whose credential is valid until `expires`.
fn answer(shared: &Shared, reply: PostReply, expires: Option<SystemTime>) -> HttpResponse {
    match reply {
        PostReply::Accepted => HttpResponse::Accepted().finish(),
        PostReply::Json(frame) => json_answer(frame, 200),
        PostReply::Stream(events) => sse(events, keep_alive(shared), expires),
    }
}

/// `GET /mcp` without a WebSocket upgrade: the session's SSE stream, or a resumed stream.
pub async fn get(
    req: HttpRequest,
    shared: web::Data<Shared>,
    directory: web::Data<HostedSessions>,
) -> Result<HttpResponse, Refusal> {
    let shared = shared.into_inner();
    let admission = check_common(&req, &shared)?;
    if !accepts(req.headers(), ["text/event-stream"]) {
        return Err(Refusal::NotAcceptable("text/event-stream"));
    }
    let id = session_id(req.headers()).ok_or(Refusal::SessionRequired)?;
    let session = find_session(id, &admission, &shared, &directory).await?;
    let resume = match req.headers().get(&LAST_EVENT_ID_HEADER) {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(Cursor::parse)
                .ok_or(Refusal::BadLastEventId)?,
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
        .map_err(|error| match error {
            ReplayError::Gone => Refusal::ResumeGone,
            ReplayError::Unavailable => Refusal::SessionStoreUnavailable,
        })?;
    Ok(sse(events, keep_alive(&shared), admission.expires))
}

/// The session `id` of the client `admission` names: this node's, or, with sessions in
/// Redis, one another node began, taken up from its record (one Redis round trip, then held
/// here: later requests on this node need none).
///
/// # Errors
/// [`Refusal::SessionNotFound`] for an id that is not the client's (or not live);
/// [`Refusal::SessionStoreUnavailable`] when Redis cannot be asked.
async fn find_session(
    id: &str,
    admission: &Admission,
    shared: &Arc<Shared>,
    directory: &web::Data<HostedSessions>,
) -> Result<Addr<HostedSession>, Refusal> {
    let requester = Owner::of(admission);
    if let Some(session) = directory.find(id, &requester) {
        return Ok(session);
    }
    if !shared.settings.sessions_in_redis() {
        return Err(Refusal::SessionNotFound);
    }
    let stored = fetch_record(id, admission, shared, false).await?;
    // Another request may have taken it up meanwhile (on another thread, at this moment).
    let directory = directory.clone().into_inner();
    let session_admission = &stored.admission;
    let session = find_or_take_up(
        &directory,
        shared,
        id,
        &requester,
        session_admission,
        |slot, id| {
            let session = HostedSession::adopt_http(
                shared.clone(),
                directory.clone(),
                slot,
                id.clone(),
                session_admission.clone(),
                &stored.record,
            )?;
            tracing::debug!(trace = %stored.record.trace_id, "session taken up from the store");
            Some(session)
        },
    )?;
    // Deleted between the record's read and the copy's place in the directory: the note
    // of the end may have reached this node before there was a copy to end, and nothing
    // else would (it served the deleted session until its first write; attack run 57,
    // F1). Asked once the copy is in place: a deletion after this is told to it. Redis
    // not answering, the record read a moment ago stands.
    if let Some(redis) = shared.cluster.store.redis() {
        if redis.session_deleted(&shared.metrics, id).await == Some(true) {
            session.do_send(EndedElsewhere);
            return Err(Refusal::SessionNotFound);
        }
    }
    Ok(session)
}

/// A session's record as read from Redis, for a client found to be its owner's.
pub(crate) struct StoredSession {
    /// The record.
    pub record: SessionRecord,
    /// Its JSON as Redis holds it (what a compare-and-set of it compares).
    pub read: String,
    /// The session's own admission on this node: the client's, with the access the record
    /// grants (which the client's covers).
    pub admission: Admission,
}

/// The record of session `id` in Redis (renewing its time to live), if it is the caller's
/// (its principal, with a credential that grants at least what the session's did) and of
/// the kind asked for (WebSocket or HTTP): anyone else finds nothing.
///
/// # Errors
/// [`Refusal::SessionNotFound`] for no such session of the caller's;
/// [`Refusal::SessionStoreUnavailable`] when Redis cannot be asked.
pub(crate) async fn fetch_record(
    id: &str,
    admission: &Admission,
    shared: &Shared,
    websocket: bool,
) -> Result<StoredSession, Refusal> {
    let Some(redis) = shared.cluster.store.redis() else {
        return Err(Refusal::SessionNotFound);
    };
    // The time to live its holder writes it with (never shortened by the read).
    let ttl = if websocket {
        crate::transport::socket_record::record_ttl(&shared.settings)
    } else {
        Duration::from_millis(shared.settings.sessions.http_idle_timeout_ms)
    };
    let read = match redis.get_session(&shared.metrics, id, ttl).await {
        Some(Some(json)) => json,
        Some(None) => {
            // Redis may have lost it (restarted empty) a moment ago, its holder about to
            // write it again, or writing it: 503, retried, rather than 404, which ends the
            // session for its client (attack run 50c, F2; stop 54's note).
            return Err(if shared.cluster.absent_may_be_lost(redis).await {
                Refusal::SessionStoreUnavailable
            } else {
                Refusal::SessionNotFound
            });
        }
        None => return Err(Refusal::SessionStoreUnavailable),
    };
    // A record this node cannot read (written by something else, or by another version) is
    // refused as one Redis could not give, and counted; it is that session's alone (attack
    // run 50c, F8: it was 404, which a client takes for its session ended).
    let record: SessionRecord = serde_json::from_str(&read).map_err(|error| {
        redis.unreadable(&shared.metrics, "session record", &error);
        Refusal::SessionStoreUnavailable
    })?;
    let identity = &admission.identity;
    let theirs = if identity.is_authenticated() {
        record.principal == identity.principal()
    } else {
        record.principal == "anonymous"
    };
    // What the session was opened with, as this node's policies know it; a record naming a
    // rule this node does not have is no one's here. One written before records carried
    // it is taken as unrestricted: only a credential that may use everything takes it up
    // (a narrower one would be served what the session holds, and would narrow it for
    // its owner on every node as its copy wrote the record back).
    let access = match &record.grant {
        Some(grant) => shared
            .perimeter
            .policies
            .access_of(grant)
            .ok_or(Refusal::SessionNotFound)?,
        None => perimeter::Access::default(),
    };
    if theirs && record.websocket == websocket && admission.access.covers(&access) {
        let admission = Admission {
            access,
            ..admission.clone()
        };
        Ok(StoredSession {
            record,
            read,
            admission,
        })
    } else {
        Err(Refusal::SessionNotFound)
    }
}

/// DELETE of a session this node does not hold (sessions in Redis): its record is checked to
/// be the caller's, deleted, and the nodes holding a copy are told.
///
/// # Errors
/// As for [`find_session`].
async fn end_elsewhere(
    id: &str,
    admission: &Admission,
    shared: &Arc<Shared>,
) -> Result<(), Refusal> {
    fetch_record(id, admission, shared, false).await?;
    end_in_store(id, shared).await
}

/// Deletes an ended session's record and tells the nodes holding a copy; a note Redis does
/// not take is owed, and sent at the next beat it takes (a retried DELETE would find no
/// record, and could not tell them then; review 51 #6).
///
/// # Errors
/// [`Refusal::SessionStoreUnavailable`] (503, `Retry-After`) when Redis did not take the
/// deletion: the client sends its DELETE again. Answered 200 whatever became of it, a copy on
/// a node never told went on serving the session, and wrote its record again a moment later,
/// the deleted session served again on every node (attack run 50c, F4).
async fn end_in_store(id: &str, shared: &Shared) -> Result<(), Refusal> {
    use crate::cluster::store::bridge;
    let Some(redis) = shared.cluster.store.redis() else {
        return Ok(());
    };
    // Remembered as long as a record would live: a copy on a node never told of the end
    // (its note lost) that writes its record within that is refused, and ends.
    let remembered = Duration::from_millis(shared.settings.sessions.http_idle_timeout_ms);
    if !redis.delete_session(&shared.metrics, id, remembered).await {
        // Unanswered, not refused: Redis may take the deletion late (a stall). The other
        // copies are owed its note all the same (attack run 57, F2: they served on until
        // their next write); if the deletion did not land, a copy ended is taken up again
        // from the record.
        bridge::owe_end(&shared.cluster, id);
        return Err(Refusal::SessionStoreUnavailable);
    }
    let note = bridge::SessionNote {
        id: id.to_owned(),
        kind: bridge::SessionNoteKind::End,
    };
    if !bridge::send_session_note(&shared.cluster, note).await {
        bridge::owe_end(&shared.cluster, id);
    }
    Ok(())
}

/// Stores a new session's record; a session that cannot be stored ends (503): served by
/// this node alone, it would be lost to a balancer that sends its next request elsewhere.
async fn store_new_session(
    shared: &Arc<Shared>,
    session: &Addr<HostedSession>,
    id: &SessionId,
) -> Result<(), Refusal> {
    let record = session.send(TakeRecord).await.ok().flatten();
    let stored = match (record, shared.cluster.store.redis()) {
        (Some(record), Some(redis)) => match serde_json::to_string(&record) {
            Ok(json) => {
                let ttl = Duration::from_millis(shared.settings.sessions.http_idle_timeout_ms);
                redis
                    .put_session(&shared.metrics, id.as_str(), json, ttl)
                    .await
                    == Some(true)
            }
            Err(_) => false,
        },
        _ => false,
    };
    if stored {
        Ok(())
    } else {
        session.do_send(End);
        Err(Refusal::SessionStoreUnavailable)
    }
}

/// `DELETE /mcp`: the client ends its session.
pub async fn delete(
    req: HttpRequest,
    shared: web::Data<Shared>,
    directory: web::Data<HostedSessions>,
) -> Result<HttpResponse, Refusal> {
    let shared = shared.into_inner();
    let admission = check_common(&req, &shared)?;
    let id = session_id(req.headers()).ok_or(Refusal::SessionRequired)?;
    let owner = Owner::of(&admission);
    // A copy a request on this node took up while the deletion was on its way to Redis:
    // ended too (this node's own note of the end does not reach its sessions).
    let end_copy_taken_up_meanwhile = || {
        if let Some(copy) = directory.find(id, &owner) {
            copy.do_send(EndedElsewhere);
        }
    };
    if directory.find(id, &owner).is_none() && shared.settings.sessions_in_redis() {
        // Not held here: ended in the store and on the nodes that hold it, without taking
        // it up only to end it.
        end_elsewhere(id, &admission, &shared).await?;
        end_copy_taken_up_meanwhile();
        return Ok(HttpResponse::Ok().finish());
    }
    let session = find_session(id, &admission, &shared, &directory).await?;
    match session.send(End).await {
        Ok(true) if shared.settings.sessions_in_redis() => {
            end_in_store(id, &shared).await?;
            end_copy_taken_up_meanwhile();
            Ok(HttpResponse::Ok().finish())
        }
        Ok(true) => Ok(HttpResponse::Ok().finish()),
        // Gone meanwhile, or a WebSocket session's: no HTTP session of that id.
        Ok(false) | Err(_) => Err(Refusal::SessionNotFound),
    }
}

/// Any other method on the endpoint.
pub async fn not_allowed() -> Result<HttpResponse, Refusal> {
    Err(Refusal::MethodNotAllowed)
}

/// Origin/Host, and the protocol version header when present (checked before the session,
/// so a bad header is a 400 whether or not the session exists).
fn check_common(req: &HttpRequest, shared: &Shared) -> Result<Admission, Refusal> {
    let admission = perimeter::admit(&shared.perimeter, req)?;
    check_version_header(
        req.headers()
            .get(&PROTOCOL_VERSION_HEADER)
            .map(|v| v.to_str().unwrap_or("")),
    )?;
    Ok(admission)
}

/// A session-era request's `MCP-Protocol-Version`, when present: any supported version is
/// accepted (the session keeps the one it negotiated).
fn check_version_header(version: Option<&str>) -> Result<(), Refusal> {
    match version {
        Some(text) if ProtocolVersion::parse(text).is_none() => Err(
            Refusal::UnsupportedProtocolVersion(text.chars().take(64).collect()),
        ),
        _ => Ok(()),
    }
}

/// Hands a message to its session and waits for how to answer.
async fn exchange(session: &Addr<HostedSession>, text: String) -> Result<PostReply, Refusal> {
    let (reply, answer) = oneshot::channel();
    // Into the mailbox at once when it has room: the answer comes through `reply`, so
    // actix's own reply channel (`send`) would be a second one per request. A full mailbox
    // is waited on, so clients cannot grow it.
    match session.try_send(Post { text, reply }) {
        Ok(()) => {}
        Err(SendError::Full(post)) => session
            .send(post)
            .await
            .map_err(|_| Refusal::SessionNotFound)?,
        Err(SendError::Closed(_)) => return Err(Refusal::SessionNotFound),
    }
    answer.await.map_err(|_| Refusal::SessionNotFound)
}

fn session_id(headers: &HeaderMap) -> Option<&str> {
    headers.get(&SESSION_HEADER).and_then(|v| v.to_str().ok())
}

/// Whether the `Accept` headers take each of `media` (`*/*` takes all), read in one pass.
fn accepts<const N: usize>(headers: &HeaderMap, media: [&str; N]) -> bool {
    let mut taken = [false; N];
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for part in value.split(',') {
            let part = part.split(';').next().unwrap_or("").trim();
            if part == "*/*" {
                return true;
            }
            for (wanted, taken) in media.iter().zip(&mut taken) {
                *taken |= part.eq_ignore_ascii_case(wanted);
            }
        }
    }
    taken.iter().all(|&taken| taken)
}

fn keep_alive(shared: &Shared) -> Duration {
    Duration::from_millis(shared.settings.sessions.sse_keep_alive_ms)
}

/// An SSE response streaming `events`, with a keep-alive comment when idle; it ends with
/// `events`, or when the credential of the request that opened it expires (`expires`: a
/// JWT's `exp`, with the leeway), as a WebSocket connection is closed then: what it would
/// have carried stays in the session's log, for a `GET` with `Last-Event-ID` and a fresh
/// credential. Dropping it (the client went away) drops `events`.
fn sse<S>(events: S, keep_alive: Duration, expires: Option<SystemTime>) -> HttpResponse
where
    S: Stream<Item = SseEvent> + Unpin + 'static,
{
    let mut response = HttpResponse::Ok();
    response
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache, no-transform"))
        .insert_header(("X-Accel-Buffering", "no"));
    match expires {
        None => response.streaming(sse_body(events, keep_alive)),
        Some(expires) => {
            let left = expires
                .duration_since(SystemTime::now())
                .unwrap_or_default();
            let expiry = Box::pin(tokio::time::sleep(left));
            response.streaming(sse_body(events.take_until(expiry), keep_alive))
        }
    }
}

fn sse_body<S>(
    events: S,
    keep_alive: Duration,
) -> impl Stream<Item = Result<Bytes, std::convert::Infallible>>
where
    S: Stream<Item = SseEvent> + Unpin,
{
    // The chunks of the event being sent, taken one at a time as actix asks for them.
    let sending: Option<EventChunks> = None;
    stream::unfold(
        (events, sending),
        move |(mut events, mut sending)| async move {
            if let Some(chunk) = sending.as_mut().and_then(Iterator::next) {
                return Some((Ok(chunk), (events, sending)));
            }
            let chunk = match tokio::time::timeout(keep_alive, events.next()).await {
                Ok(Some(event)) => {
                    let mut chunks = event.into_chunks();
                    let head = chunks.next().unwrap_or_default();
                    sending = Some(chunks);
                    head
                }
                Ok(None) => return None,
                Err(_idle) => Bytes::from_static(b": keep-alive\n\n"),
            };
            Some((Ok(chunk), (events, sending)))
        },
    )
}

/// A 2026-07-28 request's answer stream: what its exchange sends, its answer last. Events
/// carry no id (this revision has no resumption).
fn stateless_events(exchange: Box<StatelessExchange>) -> impl Stream<Item = SseEvent> + Unpin {
    Box::pin(stream::unfold(exchange, |mut exchange| async move {
        let frame = exchange.next_frame().await?;
        let event = SseEvent {
            id: String::new(),
            data: Arc::from(frame),
        };
        Some((event, exchange))
    }))
}
