//! `mcp_ws::client`'s Streamable HTTP transport against servers that end, grow or move its
//! streams. First, resuming a response stream that ended before its answer (SEP-1699),
//! against mcp-ws. mcp-ws never ends a request's stream early on its own, so a proxy between
//! the two does (as a load balancer with a response timeout would): it ends the first
//! POST's SSE stream cleanly after its first progress event. The client must then ask for
//! the rest with a GET carrying `Last-Event-ID`, and mcp-ws replays it from its log: the
//! call gets its answer and the progress it missed. Then hostile servers: an SSE event that
//! never ends is cut off at the client's message limit, a JSON answer over it fails its
//! request as too long, a redirect is not followed, a
//! stream answering a notification is let go, and a notification never answered is given
//! up.

use crate::support::*;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use futures_util::StreamExt;
use mcp_ws::client::{Call, Client, ClientError, ClientOptions};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// What the proxy did.
#[derive(Default)]
struct Seen {
    /// Whether it ended a POST's stream early (it does so once).
    cut: AtomicBool,
    /// GETs it passed on that carried `Last-Event-ID`.
    resumed: AtomicUsize,
}

struct Proxy {
    upstream: SocketAddr,
    http: reqwest::Client,
    seen: Arc<Seen>,
}

/// Passes every request on to `upstream` and its answer back, except the first POST
/// answered with an SSE stream: that stream ends after its first progress event. The proxy
/// (stopped when dropped), and what it saw.
fn cutting_proxy(upstream: SocketAddr) -> (Served, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let shared = web::Data::new(Proxy {
        upstream,
        http: crate::support::http::client(),
        seen: seen.clone(),
    });
    let proxy = serve(move |app| {
        app.app_data(shared.clone())
            .default_service(web::to(forward));
    });
    (proxy, seen)
}

async fn forward(request: HttpRequest, body: web::Bytes, proxy: web::Data<Proxy>) -> HttpResponse {
    let url = format!("http://{}{}", proxy.upstream, request.uri());
    let method = reqwest::Method::from_bytes(request.method().as_str().as_bytes()).expect("method");
    let is_post = method == reqwest::Method::POST;
    let mut upstream = proxy.http.request(method, url).body(body);
    for (name, value) in request.headers() {
        if name.as_str() == "last-event-id" {
            proxy.seen.resumed.fetch_add(1, Ordering::Relaxed);
        }
        if !matches!(name.as_str(), "host" | "content-length" | "connection") {
            upstream = upstream.header(name.as_str(), value.as_bytes());
        }
    }
    let answer = upstream.send().await.expect("mcp-ws answers");
    let mut response = HttpResponse::build(
        actix_web::http::StatusCode::from_u16(answer.status().as_u16()).expect("status"),
    );
    let mut is_stream = false;
    for (name, value) in answer.headers() {
        if matches!(
            name.as_str(),
            "content-length" | "transfer-encoding" | "connection"
        ) {
            continue;
        }
        is_stream |=
            name.as_str() == "content-type" && value.as_bytes().starts_with(b"text/event-stream");
        response.insert_header((name.as_str(), value.as_bytes()));
    }
    let body = answer.bytes_stream();
    if !(is_post && is_stream) || proxy.seen.cut.swap(true, Ordering::Relaxed) {
        return response.streaming(body);
    }
    // Everything up to the end of the first progress event, then a clean end of the body.
    let cut = futures_util::stream::unfold(
        (body, Vec::new(), false),
        |(mut body, mut passed, done)| async move {
            if done {
                return None;
            }
            let chunk = match body.next().await? {
                Ok(chunk) => chunk,
                Err(error) => return Some((Err(error), (body, passed, true))),
            };
            let start = passed.len();
            passed.extend_from_slice(&chunk);
            let end = find(&passed, b"notifications/progress")
                .and_then(|at| find(&passed[at..], b"\n\n").map(|gap| at + gap + 2));
            match end {
                Some(end) => {
                    let part = chunk.slice(..end - start);
                    Some((Ok(part), (body, passed, true)))
                }
                None => Some((Ok(chunk), (body, passed, false))),
            }
        },
    );
    response.streaming(Box::pin(cut))
}

/// A test's HTTP server on its own thread, stopped (and its thread ended) when dropped: a
/// failing test leaves none behind.
struct Served {
    addr: SocketAddr,
    handle: actix_web::dev::ServerHandle,
}

impl Drop for Served {
    fn drop(&mut self) {
        // The stop is sent as it is asked for; its completion is not waited on.
        drop(self.handle.stop(false));
    }
}

/// An HTTP server on its own thread, its routes as `configure` sets them.
fn serve(configure: impl Fn(&mut web::ServiceConfig) + Clone + Send + 'static) -> Served {
    let (bound_tx, bound) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let server = HttpServer::new(move || App::new().configure(configure.clone()))
                .workers(1)
                .bind("127.0.0.1:0")
                .expect("binds");
            let addr = server.addrs()[0];
            let running = server.run();
            bound_tx
                .send((addr, running.handle()))
                .expect("the test waits");
            running.await
        })
    });
    let (addr, handle) = bound.recv_timeout(READ_TIMEOUT).expect("listens");
    Served { addr, handle }
}

/// Counts one open thing (a stream, a held POST) until it is dropped.
struct Open(Arc<AtomicUsize>);

impl Open {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Waits until `count` comes down to 0 (what it counts is `what`), within `wait`.
async fn wait_until_none_open(count: &AtomicUsize, what: &str, wait: Duration) {
    let deadline = std::time::Instant::now() + wait;
    while count.load(Ordering::Relaxed) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} {what} still open",
            count.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The answer to `initialize` (`message`) of a test's upstream named `name`.
fn initialize_answer(message: &Value, name: &str, capabilities: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": message["id"], "result": {
        "protocolVersion": "2025-11-25",
        "capabilities": capabilities,
        "serverInfo": {"name": name, "version": "1"}
    }})
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[tokio::test]
async fn a_response_stream_ended_early_is_resumed_with_last_event_id() {
    let server = start(settings());
    let (proxy, seen) = cutting_proxy(server.addr());
    let client = Client::http(
        &format!("http://{}/mcp", proxy.addr),
        &[],
        ClientOptions::default(),
    )
    .await
    .expect("connects through the proxy");
    assert_eq!(client.server().protocol_version, "2025-11-25");

    // Progress makes the answer an SSE stream (mcp-ws answers with JSON when nothing comes
    // before the answer).
    let (progress, mut reports) = mpsc::channel(64);
    let call = Call {
        progress: Some(progress),
        ..Call::default()
    };
    let params = json!({ "name": "sleep", "arguments": { "ms": 300 } });
    let answer = tokio::time::timeout(
        READ_TIMEOUT,
        client.request_with("tools/call", Some(params), call),
    )
    .await
    .expect("answered in time")
    .expect("answered across the early end of its stream");
    let answer: Value = mcp_ws::client::parse(&answer).expect("JSON");
    assert_eq!(answer["content"][0]["text"], "slept 300 ms", "{answer}");

    assert!(seen.cut.load(Ordering::Relaxed), "the proxy ended a stream");
    assert!(
        seen.resumed.load(Ordering::Relaxed) >= 1,
        "the client resumed with Last-Event-ID"
    );
    // The progress sent after the cut came with the replay.
    let mut received = 0;
    while reports.try_recv().is_ok() {
        received += 1;
    }
    assert!(received >= 2, "{received} progress reports");

    client.shutdown(Duration::from_secs(2)).await;
}

/// What the endless upstream did with its streams.
#[derive(Default)]
struct Endless {
    /// Bytes of events it sent.
    sent: AtomicUsize,
    /// Its streams still open (closed by the client, they are dropped).
    open: Arc<AtomicUsize>,
}

/// An upstream that answers `initialize`, takes notifications, offers no GET stream, and
/// answers `tools/call` with an SSE event that never ends: `data: ` and then `A`s, 64 KiB at
/// a time, without a newline.
async fn endless(
    request: HttpRequest,
    body: web::Bytes,
    seen: web::Data<Arc<Endless>>,
) -> HttpResponse {
    if request.method() != actix_web::http::Method::POST {
        return HttpResponse::MethodNotAllowed().finish();
    }
    let message: Value = serde_json::from_slice(&body).unwrap_or_default();
    match message["method"].as_str() {
        Some("initialize") => HttpResponse::Ok()
            .insert_header(("mcp-session-id", "endless"))
            .json(initialize_answer(&message, "endless", json!({"tools": {}}))),
        Some("tools/call") => {
            let open = (seen.get_ref().clone(), Open::new(&seen.open));
            let head = futures_util::stream::once(async {
                Ok::<_, std::convert::Infallible>(web::Bytes::from_static(
                    b"event: message\ndata: ",
                ))
            });
            let tail = futures_util::stream::unfold(open, |open| async move {
                open.0.sent.fetch_add(64 * 1024, Ordering::Relaxed);
                Some((Ok(web::Bytes::from(vec![b'A'; 64 * 1024])), open))
            });
            HttpResponse::Ok()
                .content_type("text/event-stream")
                .streaming(head.chain(tail))
        }
        _ => HttpResponse::Accepted().finish(),
    }
}

/// A client of the upstream at `addr` that sent it `count` notifications (after its
/// `notifications/initialized`).
async fn notifying(addr: SocketAddr, count: usize) -> Client {
    let client = Client::http(&format!("http://{addr}/mcp"), &[], ClientOptions::default())
        .await
        .expect("connects");
    for _ in 0..count {
        client
            .notify("notifications/roots/list_changed", None)
            .await;
    }
    client
}

/// A client of the upstream at `addr` whose `max_message_bytes` is 1 MiB, and its
/// `tools/call`'s answer, which must come within [`READ_TIMEOUT`] (not at a deadline).
async fn call_with_a_megabyte_limit(
    addr: SocketAddr,
) -> (
    Client,
    Result<Box<serde_json::value::RawValue>, ClientError>,
) {
    let client = Client::http(
        &format!("http://{addr}/mcp"),
        &[],
        ClientOptions {
            max_message_bytes: 1 << 20,
            ..ClientOptions::default()
        },
    )
    .await
    .expect("connects");
    let params = json!({ "name": "anything", "arguments": {} });
    let answer = tokio::time::timeout(
        READ_TIMEOUT,
        client.request_with("tools/call", Some(params), Call::default()),
    )
    .await
    .expect("answered in time, not held until a deadline");
    (client, answer)
}

/// An SSE event from the server that never ends (no newline, ever) is cut off once it runs
/// past the client's `max_message_bytes`: its connection is closed and the call fails at
/// once. (The SSE parser kept the unfinished line whole, and the event's size was checked
/// only once it was complete: a gateway's memory grew by hundreds of megabytes a second, for
/// as long as the call's deadline, and without end on a GET stream.)
#[tokio::test]
async fn an_event_that_never_ends_is_cut_off_at_the_message_limit() {
    let seen = Arc::new(Endless::default());
    let shared = web::Data::new(seen.clone());
    let upstream = serve(move |app| {
        app.app_data(shared.clone())
            .default_service(web::to(endless));
    });
    let (client, answer) = call_with_a_megabyte_limit(upstream.addr).await;
    assert!(answer.is_err(), "{answer:?}");
    // Its stream was opened (the call read it to the cut) and is closed.
    assert!(seen.sent.load(Ordering::Relaxed) > 0, "the stream was read");
    wait_until_none_open(&seen.open, "streams", READ_TIMEOUT).await;
    let sent = seen.sent.load(Ordering::Relaxed);
    assert!(sent < 64 << 20, "{sent} bytes read before the cut");
    client.shutdown(Duration::from_secs(2)).await;
}

/// A JSON answer over the client's `max_message_bytes` fails its request as what it is (it
/// was said to have ended without an answer).
#[tokio::test]
async fn a_json_answer_over_the_message_limit_fails_its_request_as_too_long() {
    let upstream = serve(|app| {
        app.default_service(web::to(|body: web::Bytes| async move {
            let message: Value = serde_json::from_slice(&body).unwrap_or_default();
            match message["method"].as_str() {
                Some("initialize") => HttpResponse::Ok()
                    .insert_header(("mcp-session-id", "long"))
                    .json(initialize_answer(&message, "long", json!({"tools": {}}))),
                Some("tools/call") => HttpResponse::Ok().json(json!({
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "result": {"content": [{"type": "text", "text": "x".repeat(2 << 20)}]},
                })),
                _ => HttpResponse::Accepted().finish(),
            }
        }));
    });
    let (client, answer) = call_with_a_megabyte_limit(upstream.addr).await;
    match answer {
        Err(ClientError::InvalidAnswer(why)) => assert!(
            why.contains("longer than max_message_bytes (1048576 bytes)"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    client.shutdown(Duration::from_secs(2)).await;
}

/// An upstream's redirect is not followed: `initialize` answered 307 to another server fails
/// to connect, and that server gets nothing, neither the message nor the configured headers
/// (a redirect was followed with them, the API key included, and a `Referer` naming the
/// upstream's URL).
#[tokio::test]
async fn a_redirect_is_not_followed() {
    let reached = Arc::new(AtomicUsize::new(0));
    let counted = web::Data::new(reached.clone());
    let elsewhere = serve(move |app| {
        app.app_data(counted.clone()).default_service(web::to(
            |reached: web::Data<Arc<AtomicUsize>>| async move {
                reached.fetch_add(1, Ordering::Relaxed);
                HttpResponse::Ok().finish()
            },
        ));
    });
    let target = format!("http://{}/mcp", elsewhere.addr);
    let redirecting = serve(move |app| {
        let target = target.clone();
        app.default_service(web::to(move || {
            let target = target.clone();
            async move {
                HttpResponse::TemporaryRedirect()
                    .insert_header(("location", target))
                    .finish()
            }
        }));
    });
    let connected = Client::http(
        &format!("http://{}/mcp?token=secret", redirecting.addr),
        &[("X-Api-Key".to_owned(), "topsecret".to_owned())],
        ClientOptions::default(),
    )
    .await;
    assert!(connected.is_err(), "a redirect is an error");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        reached.load(Ordering::Relaxed),
        0,
        "nothing reached the redirect's target"
    );
}

/// The streams the holding upstream opened, and those still open.
#[derive(Default)]
struct Holds {
    opened: AtomicUsize,
    open: Arc<AtomicUsize>,
}

/// An upstream that answers `initialize`, and every notification with an SSE stream it
/// holds open and sends no event on.
async fn holding(
    request: HttpRequest,
    body: web::Bytes,
    holds: web::Data<Arc<Holds>>,
) -> HttpResponse {
    if request.method() != actix_web::http::Method::POST {
        return HttpResponse::MethodNotAllowed().finish();
    }
    let message: Value = serde_json::from_slice(&body).unwrap_or_default();
    if message["method"] == "initialize" {
        return HttpResponse::Ok().json(initialize_answer(&message, "holding", json!({})));
    }
    holds.opened.fetch_add(1, Ordering::Relaxed);
    let held = Open::new(&holds.open);
    // A comment every 100 ms, never an event: a write is how the server notices the
    // client gone.
    let never = futures_util::stream::unfold(held, |held| async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let comment = web::Bytes::from_static(b": still here\n\n");
        Some((Ok::<_, std::convert::Infallible>(comment), held))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .streaming(never)
}

/// A notification's POST answered with a stream (a server answers it 202) is not read: the
/// stream is let go at once, its connection with it. (Read for as long as the client lived,
/// each such answer held a connection: a thousand cancels, each answered so, left a
/// thousand connections open, and later requests to the upstream could not connect.)
#[tokio::test]
async fn a_stream_answering_a_notification_is_let_go() {
    let holds = Arc::new(Holds::default());
    let counted = web::Data::new(holds.clone());
    let upstream = serve(move |app| {
        app.app_data(counted.clone())
            .default_service(web::to(holding));
    });
    let client = notifying(upstream.addr, 5).await;
    // `notifications/initialized` and the five: each stream was opened, and let go.
    let deadline = std::time::Instant::now() + READ_TIMEOUT;
    while holds.opened.load(Ordering::Relaxed) < 6 {
        assert!(std::time::Instant::now() < deadline, "the POSTs arrive");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_until_none_open(&holds.open, "streams", READ_TIMEOUT).await;
    client.shutdown(Duration::from_secs(2)).await;
}

/// An upstream on plain sockets that answers `initialize` (and a GET with 405), and never
/// answers a notification's POST at all, not even its head: it reads on until the client
/// closes the connection. `waiting` counts the POSTs it holds.
/// Its listener stops accepting when it is dropped (its connections end with the client's).
fn silent_server(waiting: Arc<AtomicUsize>) -> SilentServer {
    use std::io::{BufReader, Read, Write};
    let (addr, _stop) = crate::support::http::serve_each(move |stream| {
        let mut writer = stream.try_clone().expect("clone");
        let mut reader = BufReader::new(stream);
        // Requests one after another on the connection (the client keeps it).
        loop {
            let Some((head, body)) = crate::support::http::read_request(&mut reader) else {
                return;
            };
            let message: Value = serde_json::from_slice(&body).unwrap_or_default();
            let answer = if !head.starts_with("POST") {
                "HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n".to_owned()
            } else if message["method"] == "initialize" {
                let body = initialize_answer(&message, "silent", json!({})).to_string();
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
            } else {
                // Held, unanswered, until the client closes the connection.
                let _held = Open::new(&waiting);
                let mut rest = [0u8; 1024];
                while reader.read(&mut rest).unwrap_or(0) > 0 {}
                return;
            };
            if writer.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    });
    SilentServer { addr, _stop }
}

/// [`silent_server`]'s address, and the guard that stops its listener when dropped.
struct SilentServer {
    addr: SocketAddr,
    _stop: crate::support::http::StopAccepting,
}

/// A notification's POST the server never answers (no head) is given up after 10 s, its
/// connection closed: a server that answers nothing cannot gather a connection and a task
/// a notification. (Nothing bounded the wait: such a server held every one for as long as
/// the client lived.)
#[tokio::test]
async fn a_notification_never_answered_is_given_up() {
    let waiting = Arc::new(AtomicUsize::new(0));
    let upstream = silent_server(waiting.clone());
    let client = notifying(upstream.addr, 3).await;
    // `notifications/initialized` and the three, held until the client gives them up.
    let deadline = std::time::Instant::now() + Duration::from_secs(25);
    while waiting.load(Ordering::Relaxed) < 4 {
        assert!(std::time::Instant::now() < deadline, "the POSTs arrive");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_until_none_open(&waiting, "POSTs", Duration::from_secs(20)).await;
    client.shutdown(Duration::from_secs(2)).await;
}
