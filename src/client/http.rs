//! The Streamable HTTP transport: each message is a POST to the endpoint, answered with
//! JSON, an SSE stream, or 202; the session's id (`Mcp-Session-Id`) goes on every request
//! after `initialize`; a GET stream carries what the server sends outside any request; the
//! session is deleted when the client shuts down. A stateless (2026-07-28) request carries
//! its own headers and no session; it is cancelled by dropping its POST.
//!
//! Session-era SSE streams are resumable (2025-11-25, SEP-1699): a server may end a
//! request's stream before its answer, having given its events ids, and the client then
//! asks for the rest with a GET carrying `Last-Event-ID`, after the `retry` the server set,
//! until the answer came or the server stops making progress ([`Resume`]). The GET stream
//! reconnects the same way.

use super::{ClientError, Inner, Outgoing};
use futures_util::future::{AbortHandle, Abortable};
use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

const SESSION_ID: &str = "mcp-session-id";
const PROTOCOL_VERSION: &str = "mcp-protocol-version";
const LAST_EVENT_ID: &str = "last-event-id";

/// The wait before a reconnection when the server set no `retry`.
const DEFAULT_RETRY: Duration = Duration::from_millis(1000);
/// The longest `retry` obeyed: a server cannot park a request for longer between polls.
const MAX_RETRY: Duration = Duration::from_secs(30);
/// The shortest wait: a server's `retry: 0` does not make a busy loop of reconnections.
const MIN_RETRY: Duration = Duration::from_millis(100);
/// Reconnections in a row that bring no new event before a request's stream is given up.
const MAX_IDLE_RESUMPTIONS: u32 = 5;
/// The longest a notification's or a response's POST may take: it is over at its answer's head.
const NOTIFICATION_WAIT: Duration = Duration::from_secs(10);
/// How often a resumed stream that brings nothing looks whether its request still waits (a
/// cancelled one does not, and its stream is let go).
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// One session with an HTTP endpoint; clones are the same session.
#[derive(Clone)]
pub(crate) struct Session(Arc<SessionInner>);

struct SessionInner {
    http: reqwest::Client,
    url: reqwest::Url,
    /// The session id the server gave, once it gave one.
    id: Mutex<Option<HeaderValue>>,
    /// The negotiated version, sent on every request after `initialize`.
    version: Mutex<Option<HeaderValue>>,
    /// The POSTs of requests still waiting for their answer, by request id: one no longer
    /// waited for is dropped (on a stateless server that is its cancel; a session's server is
    /// also told), so that a server slow to answer holds no connection for it.
    posts: Mutex<HashMap<u64, AbortHandle>>,
}

impl Session {
    pub(crate) fn new(url: &str, headers: &[(String, String)]) -> Result<Self, ClientError> {
        let url = reqwest::Url::parse(url)
            .map_err(|e| ClientError::Connect(format!("invalid URL {url:?}: {e}")))?;
        let mut defaults = HeaderMap::new();
        for (name, value) in headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| ClientError::Connect(format!("invalid header name {name:?}: {e}")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| ClientError::Connect(format!("invalid value of header {name}")))?;
            defaults.insert(name, value);
        }
        let tls = tls_config()?;
        // Its TLS configuration is its own (ring, the platform's roots): it needs no crypto
        // provider installed in the process, which is what clippy.toml guards against.
        // No redirect is followed and no `Referer` sent: a redirect would take the client's
        // messages and the configured headers (an API key) to wherever the upstream says,
        // another host or an internal address, and a `Referer` would name the upstream's
        // URL, a token in its query included. A redirect is an upstream's error.
        #[allow(clippy::disallowed_methods)]
        let http = reqwest::Client::builder()
            .default_headers(defaults)
            .tls_backend_preconfigured(tls)
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .referer(false)
            .build()
            .map_err(|e| ClientError::Connect(e.to_string()))?;
        Ok(Self(Arc::new(SessionInner {
            http,
            url,
            id: Mutex::new(None),
            version: Mutex::new(None),
            posts: Mutex::new(HashMap::new()),
        })))
    }

    /// Starts the task that POSTs each outgoing message (concurrently: a long call does not
    /// hold up the next).
    pub(crate) fn run(
        &self,
        inner: &Arc<Inner>,
        mut outgoing: mpsc::Receiver<Outgoing>,
        max_body: usize,
    ) {
        let session = self.clone();
        let weak = Arc::downgrade(inner);
        tokio::spawn(async move {
            while let Some(message) = outgoing.recv().await {
                if let Some(id) = message.cancels {
                    // Its connection goes at once: a server that sends the head only with
                    // its answer would otherwise hold one for every request cancelled or
                    // timed out, without bound. Dropping the request is what cancels it on
                    // a stateless server; a session's server is told too (a dropped
                    // connection is no cancel there), by the notification's own POST.
                    if let Some(post) = super::lock(&session.0.posts).remove(&id) {
                        post.abort();
                    }
                    let stateless = weak
                        .upgrade()
                        .is_none_or(|inner| inner.stateless.get().is_some());
                    if stateless {
                        continue;
                    }
                }
                let post = session.clone().post(message, weak.clone(), max_body);
                let Some(id) = post.message.id else {
                    // A notification's or a response's POST is over at its answer's head,
                    // and waits for it this long at most: each holds a connection and a
                    // task, and a server that never answers them would gather them without
                    // end (a request's waits as long as the request does).
                    let weak = weak.clone();
                    tokio::spawn(async move {
                        if tokio::time::timeout(NOTIFICATION_WAIT, post.run())
                            .await
                            .is_err()
                        {
                            if let Some(inner) = weak.upgrade() {
                                tracing::debug!(upstream = %inner.label(), "a notification was not delivered: no answer in time");
                            }
                        }
                    });
                    continue;
                };
                let (abort, registration) = AbortHandle::new_pair();
                super::lock(&session.0.posts).insert(id, abort);
                let posts = session.clone();
                tokio::spawn(async move {
                    let _ = Abortable::new(post.run(), registration).await;
                    super::lock(&posts.0.posts).remove(&id);
                });
            }
            // Every handle on the connection is gone: no request is waited for any longer.
            for (_, post) in super::lock(&session.0.posts).drain() {
                post.abort();
            }
        });
    }

    fn request(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        let session = &self.0;
        let mut request = session.http.request(method, session.url.clone());
        if let Some(id) = super::lock(&session.id).clone() {
            request = request.header(SESSION_ID, id);
        }
        if let Some(version) = super::lock(&session.version).clone() {
            request = request.header(PROTOCOL_VERSION, version);
        }
        request
    }

    fn post(self, message: Outgoing, inner: Weak<Inner>, max_body: usize) -> Post {
        Post {
            session: self,
            message,
            inner,
            max_body,
        }
    }
}

/// One message to POST.
struct Post {
    session: Session,
    message: Outgoing,
    inner: Weak<Inner>,
    max_body: usize,
}

impl Post {
    async fn run(self) {
        let Post {
            session,
            message,
            inner,
            max_body,
        } = self;
        let mut request = session
            .request(reqwest::Method::POST)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream");
        for (name, value) in &message.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request
            .body(message.text)
            .send()
            .await
            .map_err(|error| error.without_url().to_string());
        let Some(inner) = inner.upgrade() else { return };
        let response = match response {
            Ok(response) => response,
            Err(error) => return fail(&inner, message.id, ClientError::Connect(error)),
        };
        if let Some(id) = response.headers().get(SESSION_ID) {
            let mut current = super::lock(&session.0.id);
            if current.is_none() {
                *current = Some(id.clone());
            }
        }
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND && super::lock(&session.0.id).is_some() {
            // The server forgot the session (restarted, reaped it): this connection is over.
            inner.close("the server ended the session (HTTP 404)");
            return;
        }
        if status == reqwest::StatusCode::ACCEPTED {
            return;
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let is_stream = content_type.starts_with("text/event-stream");
        let is_json = content_type.starts_with("application/json");
        if !status.is_success() && !is_json {
            return fail(&inner, message.id, ClientError::Status(status.as_u16()));
        }
        // A notification or a response needs no answer (a server answers them 202): the
        // body of any other success is not read. Read, a stream a server held open after
        // each (never ending, never answering anything) kept a connection and a task, until
        // the client ended, and a shared upstream's never does.
        let Some(id) = message.id else { return };
        let weak = Arc::downgrade(&inner);
        drop(inner);
        if is_stream {
            let mut resume = Resume::default();
            // Read for as long as its request waits: a server may hold the stream open
            // after the answer, or without one after a cancel, and a stream left open holds
            // a connection and this task.
            resume.read(response, &weak, max_body, Some(id)).await;
            resume.until_answered(&session, id, &weak, max_body).await;
        } else {
            // A refusal's body may hold the JSON-RPC error for the request (a stateless
            // server answers an unsupported version or a header mismatch so).
            read_json(response, &weak, max_body, id).await;
        }
        // A request whose answer the body did not hold is answered now, never left waiting.
        if let Some(inner) = weak.upgrade() {
            let error = if status.is_success() {
                ClientError::Closed(Arc::from("the response ended without an answer"))
            } else {
                ClientError::Status(status.as_u16())
            };
            inner.fail(id, error);
        }
    }
}

impl Session {
    /// Opens the GET stream for what the server sends outside any request (after
    /// `initialize`); a server without one (405) is fine. The receiver resolves once the
    /// server answered the first GET (or could not be reached), so that the stream is there
    /// before the client's first request: a server may deliver an answer on it.
    pub(crate) fn listen(
        &self,
        inner: &Arc<Inner>,
        version: &str,
        max_event: usize,
    ) -> oneshot::Receiver<()> {
        if let Ok(version) = HeaderValue::from_str(version) {
            *super::lock(&self.0.version) = Some(version);
        }
        let session = self.clone();
        let weak = Arc::downgrade(inner);
        let (opened, first) = oneshot::channel();
        let mut opened = Some(opened);
        tokio::spawn(async move {
            let mut failures = 0u32;
            // Where the stream stands: a reconnection resumes it after its last event.
            let mut resume = Resume::default();
            loop {
                let mut request = session
                    .request(reqwest::Method::GET)
                    .header(ACCEPT, "text/event-stream");
                if let Some(id) = &resume.last_id {
                    request = request.header(LAST_EVENT_ID, id.as_str());
                }
                let response = request.send().await;
                if let Some(opened) = opened.take() {
                    let _ = opened.send(());
                }
                match response {
                    Ok(response) if response.status().is_success() => {
                        let Some(inner) = weak.upgrade() else { return };
                        drop(inner);
                        resume.read(response, &weak, max_event, None).await;
                        // A stream cut off at an event over the limit counts as a failure:
                        // an upstream sending only such events is given up after ten,
                        // rather than asked again every half second for ever.
                        failures = if std::mem::take(&mut resume.cut_off) {
                            failures + 1
                        } else {
                            0
                        };
                    }
                    // The server will not resume after that event (it no longer holds it,
                    // say): a fresh stream, the events missed meanwhile lost.
                    Ok(response)
                        if resume.last_id.is_some()
                            && response.status().is_client_error()
                            && !matches!(response.status().as_u16(), 404 | 405) =>
                    {
                        resume.last_id = None;
                        failures += 1;
                    }
                    // No stream offered, or the session is gone: nothing to listen to.
                    Ok(_) => return,
                    Err(_) => failures += 1,
                }
                match weak.upgrade() {
                    Some(inner) if !inner.closed.borrow().is_some() && failures < 10 => {}
                    _ => return,
                }
                // The server's `retry` when it set one, never less than the backoff of
                // failed attempts.
                let backoff = Duration::from_millis(500 << failures.min(4));
                let wait = match resume.retry {
                    Some(_) if failures == 0 => resume.wait(),
                    Some(_) => resume.wait().max(backoff),
                    None => backoff,
                };
                tokio::time::sleep(wait).await;
            }
        });
        first
    }

    /// Deletes the session on the server (best effort).
    pub(crate) async fn delete(&self) {
        if super::lock(&self.0.id).is_none() {
            return;
        }
        let _ = tokio::time::timeout(
            Duration::from_secs(2),
            self.request(reqwest::Method::DELETE).send(),
        )
        .await;
    }
}

fn fail(inner: &Inner, id: Option<u64>, error: ClientError) {
    match id {
        Some(id) => inner.fail(id, error),
        None => {
            tracing::debug!(upstream = %inner.label(), %error, "a notification was not delivered")
        }
    }
}

/// Reads a JSON body (one message or a batch, up to `max_body` bytes) into the client, for
/// as long as request `answer_to` waits.
async fn read_json(
    response: reqwest::Response,
    weak: &Weak<Inner>,
    max_body: usize,
    answer_to: u64,
) {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    loop {
        let chunk = match tokio::time::timeout(WATCH_EVERY, chunks.next()).await {
            Ok(chunk) => chunk,
            Err(_quiet) if waits(weak, answer_to) => continue,
            Err(_quiet) => return,
        };
        let Some(chunk) = chunk else { break };
        let Ok(chunk) = chunk else { return };
        if body.len() + chunk.len() > max_body {
            if let Some(inner) = weak.upgrade() {
                inner.warn_skipped(|| {
                    tracing::warn!(upstream = %inner.label(), max_body, "skipped a response body over the limit");
                });
                // Said as what it is, not as an answer that never came.
                inner.fail(answer_to, ClientError::too_long(max_body));
            }
            return;
        }
        body.extend_from_slice(&chunk);
    }
    let (Ok(text), Some(inner)) = (std::str::from_utf8(&body), weak.upgrade()) else {
        return;
    };
    if !text.trim().is_empty() {
        let held = inner.receive_related(text, Some(answer_to));
        drop(inner);
        super::answer_held(weak, held, std::future::pending()).await;
    }
}

/// Where a session-era SSE stream stands, for resuming it: the id of the last event seen
/// (what `Last-Event-ID` names) and the reconnection wait the server last set.
#[derive(Debug, Default)]
struct Resume {
    last_id: Option<String>,
    retry: Option<u64>,
    /// The last stream read was cut off: an event ran past the limit ([`bounded_events`]).
    cut_off: bool,
}

impl Resume {
    /// The wait before reconnecting: the server's `retry`, within bounds.
    fn wait(&self) -> Duration {
        self.retry
            .map_or(DEFAULT_RETRY, Duration::from_millis)
            .clamp(MIN_RETRY, MAX_RETRY)
    }

    /// Takes an event's `id` and `retry` fields; whether the id is one not seen before.
    fn note(&mut self, id: Option<String>, retry: Option<u64>) -> bool {
        if let Some(retry) = retry {
            self.retry = Some(retry);
        }
        let Some(id) = id else { return false };
        // An empty id clears it (as in a browser's EventSource): nothing to resume.
        let id = Some(id).filter(|id| !id.is_empty());
        let new = id.is_some() && id != self.last_id;
        self.last_id = id;
        new
    }

    /// Reads an SSE stream into the client until it ends (or fails, or the client closes or
    /// is dropped, or, with `answer_to`, until that request no longer waits: a resumed
    /// stream may stay open after its answer). Whether it brought an event id not seen
    /// before.
    async fn read(
        &mut self,
        response: reqwest::Response,
        weak: &Weak<Inner>,
        max_event: usize,
        answer_to: Option<u64>,
    ) -> bool {
        // A stream the server holds open (the GET stream, a listen) must not outlive the
        // client: dropping the response closes it on the server.
        let Some(mut closed) = weak.upgrade().map(|inner| inner.closed.subscribe()) else {
            return false;
        };
        let mut events =
            sse_stream::SseStream::from_bytes_stream(bounded_events(response, max_event));
        let mut advanced = false;
        loop {
            let next = match answer_to {
                None => tokio::select! {
                    // Closed, or the sender dropped with the client.
                    _ = closed.wait_for(Option::is_some) => return advanced,
                    next = events.next() => next,
                },
                Some(id) => match tokio::time::timeout(WATCH_EVERY, events.next()).await {
                    Ok(next) => next,
                    Err(_quiet) if waits(weak, id) => continue,
                    Err(_quiet) => return advanced,
                },
            };
            let event = match next {
                Some(Ok(event)) => event,
                Some(Err(error)) => {
                    self.cut_off = matches!(
                        &error,
                        sse_stream::Error::Body(error) if error.is::<EventOverLimit>()
                    );
                    return advanced;
                }
                None => return advanced,
            };
            advanced |= self.note(event.id, event.retry);
            let Some(data) = event.data else { continue };
            if data.len() > max_event || data.trim().is_empty() {
                continue;
            }
            let Some(inner) = weak.upgrade() else {
                return advanced;
            };
            let held = inner.receive_related(&data, answer_to);
            if answer_to.is_some_and(|id| !waits_for(&inner, id)) {
                drop(inner);
                super::answer_held(weak, held, std::future::pending()).await;
                return advanced;
            }
            drop(inner);
            super::answer_held(weak, held, std::future::pending()).await;
        }
    }

    /// After request `id`'s stream ended: while the request still waits and the stream had
    /// event ids, reconnects with `Last-Event-ID` (after the server's `retry`) and reads on,
    /// until the answer came, the server cannot resume, or it brought nothing new
    /// [`MAX_IDLE_RESUMPTIONS`] times in a row.
    async fn until_answered(
        mut self,
        session: &Session,
        id: u64,
        inner: &Weak<Inner>,
        max_event: usize,
    ) {
        let mut idle = 0;
        while idle < MAX_IDLE_RESUMPTIONS {
            match inner.upgrade() {
                // The 2026-07-28 era has no resumption (its events carry no ids anyway).
                Some(inner) if inner.stateless.get().is_none() && waits_for(&inner, id) => {}
                _ => return,
            }
            let Some(last_id) = self.last_id.clone() else {
                return;
            };
            tokio::time::sleep(self.wait()).await;
            if !waits(inner, id) {
                return;
            }
            let response = session
                .request(reqwest::Method::GET)
                .header(ACCEPT, "text/event-stream")
                .header(LAST_EVENT_ID, last_id)
                .send()
                .await;
            let advanced = match response {
                Ok(response) if response.status().is_success() => {
                    self.read(response, inner, max_event, Some(id)).await
                }
                Ok(response) if is_transient(response.status()) => false,
                Ok(response) => {
                    let gone = response.status() == reqwest::StatusCode::NOT_FOUND
                        && super::lock(&session.0.id).is_some();
                    if let (true, Some(inner)) = (gone, inner.upgrade()) {
                        // As for a POST: the server forgot the session.
                        inner.close("the server ended the session (HTTP 404)");
                    }
                    // Otherwise the server cannot resume that stream (400, 405): the
                    // request fails as when nothing was resumable.
                    return;
                }
                // The server cannot be reached for now: tried again, within the bound.
                Err(_) => false,
            };
            idle = if advanced { 0 } else { idle + 1 };
        }
    }
}

/// The bytes of an SSE body, ended with an error once one event runs past `max_event` bytes
/// (and its lines' ends) without the blank line that ends it. The SSE parser keeps an
/// unfinished line and an unfinished event's data whole, and an event over the limit is
/// only skipped once it is complete: an upstream that never ended one (a `data:` line
/// without a newline, or `data:` lines without a blank one) grew the gateway by hundreds of
/// megabytes a second. Ended, the stream is dropped, which closes its connection.
fn bounded_events(
    response: reqwest::Response,
    max_event: usize,
) -> impl futures_util::Stream<Item = Result<bytes::Bytes, EventOverLimit>> {
    let mut boundary = EventBoundary::default();
    // Room for the event's other fields (`id:`, `event:`) and its `data:` prefixes.
    let limit = max_event.saturating_add(4096);
    response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(|error| EventOverLimit::Body(error.without_url()))?;
        if boundary.longest_in(&chunk) > limit {
            return Err(EventOverLimit::Over(max_event));
        }
        Ok(chunk)
    })
}

/// Why an SSE body was cut off.
#[derive(Debug, thiserror::Error)]
enum EventOverLimit {
    #[error("{0}")]
    Body(reqwest::Error),
    #[error("an event ran past {0} bytes")]
    Over(usize),
}

/// Where an SSE body stands between events: the length of the event read so far.
#[derive(Debug, Default)]
struct EventBoundary {
    /// Bytes of the event so far (its lines and their ends), 0 at a blank line.
    event: usize,
    /// Bytes of the line so far.
    line: usize,
    /// The last byte was a CR: a LF right after it ends the same line.
    after_cr: bool,
}

impl EventBoundary {
    /// Reads `chunk`; the longest the event being read was within it.
    fn longest_in(&mut self, chunk: &[u8]) -> usize {
        let mut longest = self.event;
        for &byte in chunk {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\r' | b'\n' => {
                    self.after_cr = byte == b'\r';
                    if self.line == 0 {
                        // A blank line: the event ends.
                        self.event = 0;
                    } else {
                        self.line = 0;
                        self.event += 1;
                    }
                }
                _ => {
                    self.after_cr = false;
                    self.line += 1;
                    self.event += 1;
                    longest = longest.max(self.event);
                }
            }
        }
        longest
    }
}

/// A refusal worth trying again after the wait (an overloaded or restarting server).
fn is_transient(status: reqwest::StatusCode) -> bool {
    status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS
}

/// Whether request `id` still waits for its answer (not answered, failed nor cancelled).
fn waits_for(inner: &Inner, id: u64) -> bool {
    super::lock(&inner.pending).contains_key(&id)
}

/// [`waits_for`], while the client is there.
fn waits(inner: &Weak<Inner>, id: u64) -> bool {
    inner.upgrade().is_some_and(|inner| waits_for(&inner, id))
}

/// TLS for `https://` upstreams (and `wss://` ones, in ws.rs): the ring provider the
/// listener uses, and the platform's trust roots.
pub(super) fn tls_config() -> Result<rustls::ClientConfig, ClientError> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_platform_verifier())
        .map_err(|e| ClientError::Connect(format!("TLS: {e}")))?
        .with_no_client_auth())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_cut_off_is_told_apart_from_other_ends_of_a_stream() {
        // What `Resume::read` looks for to count a cut-off: the error `bounded_events` ends
        // a body with, as the SSE parser hands it on.
        let body = futures_util::stream::iter([
            Ok(bytes::Bytes::from_static(b"data: x\n\n")),
            Err(EventOverLimit::Over(1)),
        ]);
        let mut events = sse_stream::SseStream::from_bytes_stream(body);
        assert!(matches!(events.next().await, Some(Ok(_))));
        let cut = matches!(
            events.next().await,
            Some(Err(sse_stream::Error::Body(error))) if error.is::<EventOverLimit>()
        );
        assert!(cut, "the cut-off is recognised");
    }

    #[test]
    fn an_events_length_runs_to_its_blank_line_whatever_the_line_ends() {
        for ends in ["\n", "\r\n", "\r"] {
            let mut boundary = EventBoundary::default();
            let event = format!("id: 1{ends}data: abc{ends}");
            // `id: 1` and its end, `data: abc` and its end: 5 + 1 + 9 + 1 bytes.
            assert_eq!(boundary.longest_in(event.as_bytes()), 15, "{ends:?}");
            assert_eq!(boundary.longest_in(ends.as_bytes()), 16, "the blank line");
            assert_eq!(boundary.longest_in(b"data: x"), 7, "{ends:?}: a new event");
        }
        // Split anywhere, the count is the same: a CRLF across two chunks is one line end.
        let mut boundary = EventBoundary::default();
        assert_eq!(boundary.longest_in(b"data: ab\r"), 8);
        assert_eq!(boundary.longest_in(b"\ndata: c"), 16);
        // The event running in counts; then a blank line ends it.
        assert_eq!(boundary.longest_in(b"\r\n\r\ndata: d"), 16);
        assert_eq!(boundary.longest_in(b"e"), 8);
    }

    #[test]
    fn the_wait_is_the_servers_retry_within_bounds() {
        let wait = |retry| {
            Resume {
                retry,
                ..Resume::default()
            }
            .wait()
        };
        assert_eq!(wait(None), DEFAULT_RETRY);
        assert_eq!(wait(Some(500)), Duration::from_millis(500));
        assert_eq!(wait(Some(0)), MIN_RETRY);
        assert_eq!(wait(Some(u64::MAX)), MAX_RETRY);
    }

    #[test]
    fn the_last_id_follows_the_events_and_an_empty_one_clears_it() {
        let mut resume = Resume::default();
        // A priming event: an id and a retry.
        assert!(resume.note(Some("1_0".into()), Some(500)));
        assert_eq!(resume.last_id.as_deref(), Some("1_0"));
        assert_eq!(resume.retry, Some(500));
        // An event without an id keeps both; the same id again is nothing new.
        assert!(!resume.note(None, None));
        assert!(!resume.note(Some("1_0".into()), None));
        assert_eq!(
            (resume.last_id.as_deref(), resume.retry),
            (Some("1_0"), Some(500))
        );
        assert!(resume.note(Some("1_1".into()), None));
        assert!(!resume.note(Some(String::new()), None));
        assert_eq!(resume.last_id, None);
    }
}
