//! The Streamable HTTP transport: each message is a POST to the endpoint, answered with
//! JSON, an SSE stream, or 202; the session's id (`Mcp-Session-Id`) goes on every request
//! after `initialize`; a GET stream carries what the server sends outside any request; the
//! session is deleted when the client shuts down. A stateless (2026-07-28) request carries
//! its own headers and no session; it is cancelled by dropping its POST.

use super::{ClientError, Inner, Outgoing};
use futures_util::future::{AbortHandle, Abortable};
use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::mpsc;

const SESSION_ID: &str = "mcp-session-id";
const PROTOCOL_VERSION: &str = "mcp-protocol-version";

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
    /// The POSTs of requests still waiting for their answer, by request id: a stateless
    /// request is cancelled by dropping its POST.
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
        let http = reqwest::Client::builder()
            .default_headers(defaults)
            .tls_backend_preconfigured(tls)
            .connect_timeout(Duration::from_secs(10))
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
                    // Dropping the request is what cancels it on a stateless server.
                    if let Some(post) = super::lock(&session.0.posts).remove(&id) {
                        post.abort();
                    }
                    continue;
                }
                let post = session.clone().post(message, weak.clone(), max_body);
                let Some(id) = post.id else {
                    tokio::spawn(post.run());
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
            id: message.id,
            session: self,
            message,
            inner,
            max_body,
        }
    }
}

/// One message to POST.
struct Post {
    id: Option<u64>,
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
            ..
        } = self;
        let mut request = session
            .request(reqwest::Method::POST)
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream");
        for (name, value) in &message.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request.body(message.text).send().await;
        let Some(inner) = inner.upgrade() else { return };
        let response = match response {
            Ok(response) => response,
            Err(error) => {
                let error = ClientError::Connect(error.without_url().to_string());
                return fail(&inner, message.id, error);
            }
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
        let weak = Arc::downgrade(&inner);
        drop(inner);
        if is_stream {
            stream_into(response, &weak, max_body).await;
        } else {
            // A refusal's body may hold the JSON-RPC error for the request (a stateless
            // server answers an unsupported version or a header mismatch so).
            read_json(response, &weak, max_body).await;
        }
        // A request whose answer the body did not hold is answered now, never left waiting.
        if let (Some(id), Some(inner)) = (message.id, weak.upgrade()) {
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
    /// `initialize`); a server without one (405) is fine.
    pub(crate) fn listen(&self, inner: &Arc<Inner>, version: &str) {
        if let Ok(version) = HeaderValue::from_str(version) {
            *super::lock(&self.0.version) = Some(version);
        }
        let session = self.clone();
        let weak = Arc::downgrade(inner);
        tokio::spawn(async move {
            let mut failures = 0u32;
            loop {
                let response = session
                    .request(reqwest::Method::GET)
                    .header(ACCEPT, "text/event-stream")
                    .send()
                    .await;
                match response {
                    Ok(response) if response.status().is_success() => {
                        failures = 0;
                        let Some(inner) = weak.upgrade() else { return };
                        drop(inner);
                        stream_into(response, &weak, usize::MAX).await;
                    }
                    // No stream offered, or the session is gone: nothing to listen to.
                    Ok(_) => return,
                    Err(_) => failures += 1,
                }
                match weak.upgrade() {
                    Some(inner) if !inner.closed.borrow().is_some() && failures < 10 => {}
                    _ => return,
                }
                tokio::time::sleep(Duration::from_millis(500 << failures.min(4))).await;
            }
        });
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

/// A JSON body (one message or a batch), read up to `max_body` bytes.
async fn read_json(response: reqwest::Response, inner: &Weak<Inner>, max_body: usize) {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let Ok(chunk) = chunk else { return };
        if body.len() + chunk.len() > max_body {
            if let Some(inner) = inner.upgrade() {
                tracing::warn!(upstream = %inner.label(), max_body, "skipped a response body over the limit");
            }
            return;
        }
        body.extend_from_slice(&chunk);
    }
    let (Ok(text), Some(inner)) = (std::str::from_utf8(&body), inner.upgrade()) else {
        return;
    };
    if !text.trim().is_empty() {
        inner.receive(text);
    }
}

async fn stream_into(response: reqwest::Response, inner: &Weak<Inner>, max_event: usize) {
    let mut events = sse_stream::SseStream::from_bytes_stream(response.bytes_stream());
    while let Some(event) = events.next().await {
        let Ok(event) = event else { return };
        let Some(data) = event.data else { continue };
        if data.len() > max_event || data.trim().is_empty() {
            continue;
        }
        let Some(inner) = inner.upgrade() else { return };
        inner.receive(&data);
    }
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
