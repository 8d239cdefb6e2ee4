//! Streamable HTTP workload (`load http`): C keep-alive connections, each a
//! closed loop of one `tools/call` echo POST at a time (HTTP/1.1 has no
//! pipelining), against each `--http-target` in turn, with the same timeline
//! (warm-up, window, bounded drain) and the same accounting as the WebSocket
//! throughput mode.
//!
//! A target is `LABEL,DIALECT,URL[,PID]`; the dialect says how requests are
//! made (see [`Dialect`]). Each connection sets its session up (and ends it)
//! with a `reqwest::Client`, and sends its measured requests on a bare hyper
//! HTTP/1.1 connection of its own, so exactly C TCP connections carry the load:
//! reqwest's own work per request (URL parsing, its pool, header copies) took
//! the generator's whole core before the fastest server's. Answers
//! may be JSON or SSE (whatever the server picks for
//! `Accept: application/json, text/event-stream`); both are parsed, and how
//! many of each came back is reported, so a table says which mode was measured.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, StatusCode, Uri};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE, HOST};
use serde_json::{json, Value};
use tokio::task::JoinSet;
use tokio::time::{sleep_until, timeout_at, Instant};

use crate::cli::{Args, Workload};
use crate::client::{self, Era, Frame, Outcome, ReplyStyle, SESSION_SETUP_TIMEOUT};
use crate::throughput::{self, Tally, Timeline, DRAIN};
use crate::BoxError;

/// The version header every non-initialize request carries.
const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";
const SESSION_HEADER: &str = "mcp-session-id";
const LEGACY_VERSION: &str = "2025-11-25";
const MODERN_VERSION: &str = "2026-07-28";
/// Extra time for connection tasks to return after the drain.
const JOIN_GRACE: Duration = Duration::from_secs(3);
/// A generator using this share of its worker threads is the bottleneck.
const CLIENT_SATURATED_SHARE: f64 = 0.9;

/// How a target is spoken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// 2025-11-25 with a session: `initialize` (its answer carries
    /// `Mcp-Session-Id`), `notifications/initialized`, then every request with
    /// `Mcp-Session-Id` and `MCP-Protocol-Version`; `DELETE` at the end.
    Session,
    /// 2025-11-25 requests without any session or `initialize` (rmcp's
    /// stateless JSON mode): `MCP-Protocol-Version` only.
    Stateless,
    /// 2026-07-28: `_meta` in the body, `MCP-Protocol-Version: 2026-07-28`,
    /// `Mcp-Method` and `Mcp-Name` headers; no session.
    Modern,
    /// Session churn: each unit of work is a whole 2025-11-25 session, `initialize`,
    /// `notifications/initialized` and `DELETE`, on the bare connection(s) (no
    /// `tools/call`); requests/s then counts sessions, latency is the three exchanges.
    Churn,
    /// As `session`, but one session per URL of the target (`URL1+URL2+…`): each lane
    /// has its own, begun on its node, and the requests go to the lanes in turn. The
    /// control for a session served alternately by two nodes: the same connections and
    /// the same alternation, with nothing shared between the nodes.
    Split,
}

impl Dialect {
    fn parse(text: &str) -> Result<Self, BoxError> {
        match text {
            "session" => Ok(Dialect::Session),
            "stateless" => Ok(Dialect::Stateless),
            "modern" => Ok(Dialect::Modern),
            "churn" => Ok(Dialect::Churn),
            "split" => Ok(Dialect::Split),
            other => Err(format!(
                "unknown dialect {other:?} (session, stateless, modern, churn, split)"
            )
            .into()),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Dialect::Session => "session",
            Dialect::Stateless => "stateless",
            Dialect::Modern => "modern",
            Dialect::Churn => "churn",
            Dialect::Split => "split",
        }
    }
}

/// One `--http-target`.
#[derive(Debug, Clone)]
pub struct HttpTarget {
    pub label: String,
    pub dialect: Dialect,
    /// The first URL: where a session is begun (and ended).
    pub url: String,
    /// Every URL (`URL1+URL2+…`): each connection has one bare HTTP/1.1 connection to
    /// each, and its requests go to them in turn (a session begun on the first node,
    /// then served alternately by every node).
    pub urls: Vec<String>,
    pub pid: Option<u32>,
    /// Every pid (`PID1+PID2+…`): the server CPU is their sum.
    pub pids: Vec<u32>,
}

impl HttpTarget {
    /// `LABEL,DIALECT,URL[,PID]`; the URL must be `http://` on a loopback address.
    /// `URL1+URL2+…` and `PID1+PID2+…` name several nodes of one deployment.
    pub fn parse(spec: &str) -> Result<Self, BoxError> {
        let parts: Vec<&str> = spec.split(',').map(str::trim).collect();
        let (label, dialect, url, pid) = match parts.as_slice() {
            [label, dialect, url] => (*label, *dialect, *url, None),
            [label, dialect, url, pid] => (*label, *dialect, *url, Some(*pid)),
            _ => {
                return Err(format!("--http-target {spec:?}: want LABEL,DIALECT,URL[,PID]").into())
            }
        };
        if label.is_empty() {
            return Err(format!("--http-target {spec:?}: empty label").into());
        }
        let pids = pid
            .map(|p| {
                p.split('+')
                    .map(|p| p.parse::<u32>())
                    .collect::<Result<Vec<u32>, _>>()
            })
            .transpose()
            .map_err(|e| format!("--http-target {spec:?}: pid: {e}"))?
            .unwrap_or_default();
        let urls: Vec<String> = url.split('+').map(str::to_string).collect();
        for url in &urls {
            loopback_only(url)?;
        }
        Ok(Self {
            label: label.to_string(),
            dialect: Dialect::parse(dialect)?,
            url: urls[0].clone(),
            urls,
            pid: pids.first().copied(),
            pids,
        })
    }
}

/// Refuses anything but `http://` to a loopback address: no load elsewhere.
fn loopback_only(url: &str) -> Result<SocketAddr, BoxError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs are supported"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let addrs: Vec<SocketAddr> = authority
        .to_socket_addrs()
        .map_err(|e| format!("{url}: cannot resolve {authority:?} (HOST:PORT): {e}"))?
        .collect();
    match addrs.iter().find(|a| !a.ip().is_loopback()) {
        Some(outside) => {
            Err(format!("{url}: {outside} is not a loopback address; refusing").into())
        }
        None => addrs
            .first()
            .copied()
            .ok_or_else(|| format!("{url}: resolves to nothing").into()),
    }
}

/// Everything measured for one (target, connection count).
#[derive(Debug)]
pub struct HttpPoint {
    pub connections: usize,
    pub connected: usize,
    pub connect_failure_samples: Vec<String>,
    pub connect_failures: usize,
    pub window: Duration,
    pub tally: Tally,
    /// Successful answers that came as `application/json` / as `text/event-stream`.
    pub json_answers: u64,
    pub sse_answers: u64,
    pub server_cpu_cores: Option<f64>,
    pub client_cpu_cores: Option<f64>,
}

impl HttpPoint {
    pub fn requests_per_sec(&self) -> f64 {
        self.tally.completed_in_window as f64 / self.window.as_secs_f64()
    }

    /// Answered requests per second of server CPU time.
    pub fn requests_per_cpu_second(&self) -> Option<f64> {
        self.server_cpu_cores
            .filter(|&cores| cores > 0.0)
            .map(|cores| self.requests_per_sec() / cores)
    }

    fn answer_format(&self) -> &'static str {
        match (self.json_answers > 0, self.sse_answers > 0) {
            (true, false) => "json",
            (false, true) => "sse",
            (true, true) => "mixed",
            (false, false) => "-",
        }
    }
}

/// One set-up connection: its client for set-up and teardown, the HTTP/1.1
/// connection(s) its `tools/call`s go on (one per URL of the target, used in turn),
/// and their path and headers.
struct Connection {
    client: reqwest::Client,
    lanes: Vec<Lane>,
    next_lane: usize,
    /// The sessions to end (URL, id).
    sessions: Vec<(String, HeaderValue)>,
}

/// A bare HTTP/1.1 connection to one node, with the path and headers of its requests.
struct Lane {
    url: String,
    sender: SendRequest<Full<Bytes>>,
    path: Uri,
    headers: HeaderMap,
}

impl Lane {
    /// Waits until the connection can take a request; one that the server (or a balancer:
    /// nginx closes a keep-alive connection after `keepalive_requests`) closed after its last
    /// answer is opened again, since nothing was sent on it.
    async fn ready(&mut self) -> Result<(), String> {
        if !self.sender.is_closed() && self.sender.ready().await.is_ok() {
            return Ok(());
        }
        let fresh = connect_lane(&self.url, self.headers.clone()).await?;
        self.sender = fresh.sender;
        self.sender.ready().await.map_err(|e| format!("send: {e}"))
    }
}

impl Connection {
    /// The lane of the next request (in turn).
    fn lane(&mut self) -> &mut Lane {
        let index = self.next_lane % self.lanes.len();
        self.next_lane += 1;
        &mut self.lanes[index]
    }
}

fn base_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    // A bearer token on every request for servers that authenticate (`MCP_WS_BEARER`, as
    // over WebSocket): over HTTP each POST's credential is checked, so this is what the
    // per-request credential check costs (`TRANSPORT=http CONFIG=benches/hardened.toml
    // benches/callgrind.sh`). A token that is not a valid header value is left out.
    if let Some(value) = std::env::var("MCP_WS_BEARER")
        .ok()
        .and_then(|token| HeaderValue::from_str(&format!("Bearer {token}")).ok())
    {
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    headers
}

/// What a POST brought back, reduced to the JSON-RPC answer with `id`.
struct Answer {
    outcome: Result<Option<String>, String>,
    sse: bool,
}

/// Reads the answer to request `id` from a JSON body or an SSE stream (the
/// events' `data`, priming events without data skipped).
async fn read_answer(response: reqwest::Response, id: u64) -> Result<Answer, String> {
    let status = response.status();
    let sse = is_sse(response.headers());
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("read body: {e}"))?;
    parse_answer(status, sse, &body, id)
}

fn is_sse(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// [`read_answer`] for a response read whole on the bare connection.
fn parse_answer(status: StatusCode, sse: bool, body: &[u8], id: u64) -> Result<Answer, String> {
    let text = String::from_utf8_lossy(body);
    if !status.is_success() {
        return Ok(Answer {
            outcome: Err(format!("HTTP {status}: {}", client::truncate(&text, 200))),
            sse,
        });
    }
    let mut candidates: Vec<String> = Vec::new();
    if sse {
        for event in text.split("\n\n") {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if !data.is_empty() && data.iter().any(|d| !d.is_empty()) {
                candidates.push(data.join("\n"));
            }
        }
    } else {
        candidates.push(text.into_owned());
    }
    for candidate in &candidates {
        match client::classify(candidate, ReplyStyle::JsonRpc) {
            Frame::Reply {
                id: got,
                outcome: Outcome::Ok { echoed },
            } if got == id => {
                return Ok(Answer {
                    outcome: Ok(echoed.map(|e| e.into_owned())),
                    sse,
                })
            }
            Frame::Reply { id: got, .. } if got == id => {
                return Ok(Answer {
                    outcome: Err(format!(
                        "error answer: {}",
                        client::truncate(candidate, 200)
                    )),
                    sse,
                })
            }
            Frame::ErrorWithoutId => {
                return Ok(Answer {
                    outcome: Err(format!(
                        "error answer: {}",
                        client::truncate(candidate, 200)
                    )),
                    sse,
                })
            }
            _ => continue,
        }
    }
    Err(format!(
        "no answer with id {id} in the body: {}",
        client::truncate(&candidates.join(" | "), 200)
    ))
}

fn header(name: &'static str, value: &'static str) -> (HeaderName, HeaderValue) {
    (
        HeaderName::from_static(name),
        HeaderValue::from_static(value),
    )
}

/// Begins a 2025-11-25 session at `url` (initialize, notifications/initialized); its id.
async fn begin_session(client: &reqwest::Client, url: &str) -> Result<HeaderValue, String> {
    let initialize = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion": LEGACY_VERSION, "capabilities": {},
        "clientInfo": {"name":"load","version":"0"}}});
    let response = client
        .post(url)
        .headers(base_headers())
        .body(initialize.to_string())
        .send()
        .await
        .map_err(|e| format!("initialize: {e}"))?;
    let id = response.headers().get(SESSION_HEADER).cloned();
    let answer = read_answer(response, 0).await?;
    answer.outcome.map_err(|e| format!("initialize: {e}"))?;
    let id = id.ok_or("initialize answered without Mcp-Session-Id")?;
    let initialized = client
        .post(url)
        .headers(session_headers(&id))
        .body(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .send()
        .await
        .map_err(|e| format!("initialized: {e}"))?;
    if !initialized.status().is_success() {
        return Err(format!("initialized: HTTP {}", initialized.status()));
    }
    Ok(id)
}

/// The headers of a request of session `id`.
fn session_headers(id: &HeaderValue) -> HeaderMap {
    let mut headers = base_headers();
    headers.insert(HeaderName::from_static(SESSION_HEADER), id.clone());
    let (name, value) = header(PROTOCOL_VERSION_HEADER, LEGACY_VERSION);
    headers.insert(name, value);
    headers
}

/// Opens one connection and, for a session dialect, its MCP session(s).
async fn open(target: &HttpTarget) -> Result<Connection, String> {
    // This build's reqwest has no crypto provider of its own (see clippy.toml): ring's,
    // the server's, is installed first (plain http:// needs none, but building does).
    let _ = rustls::crypto::ring::default_provider().install_default();
    #[allow(clippy::disallowed_methods)]
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .tcp_nodelay(true)
        .no_proxy()
        .build()
        .map_err(|e| format!("client: {e}"))?;
    let mut headers = base_headers();
    let mut sessions = Vec::new();
    match target.dialect {
        Dialect::Session => {
            let id = begin_session(&client, &target.url).await?;
            headers = session_headers(&id);
            sessions.push((target.url.clone(), id));
        }
        Dialect::Split => {
            for url in &target.urls {
                let id = begin_session(&client, url).await?;
                sessions.push((url.clone(), id));
            }
        }
        Dialect::Stateless => {
            let (name, value) = header(PROTOCOL_VERSION_HEADER, LEGACY_VERSION);
            headers.insert(name, value);
        }
        Dialect::Churn => {}
        Dialect::Modern => {
            for (name, value) in [
                header(PROTOCOL_VERSION_HEADER, MODERN_VERSION),
                header("mcp-method", "tools/call"),
                header("mcp-name", "echo"),
            ] {
                headers.insert(name, value);
            }
        }
    }
    let mut lanes = Vec::new();
    for (i, url) in target.urls.iter().enumerate() {
        let headers = match target.dialect {
            Dialect::Split => session_headers(&sessions[i].1),
            _ => headers.clone(),
        };
        lanes.push(connect_lane(url, headers).await?);
    }
    Ok(Connection {
        client,
        lanes,
        next_lane: 0,
        sessions,
    })
}

/// A bare HTTP/1.1 connection to `url`, its requests carrying `headers` and `Host`.
async fn connect_lane(url: &str, mut headers: HeaderMap) -> Result<Lane, String> {
    let uri: Uri = url.parse().map_err(|e| format!("url: {e}"))?;
    let authority = uri.authority().ok_or("url without host")?.clone();
    headers.insert(
        HOST,
        HeaderValue::from_str(authority.as_str()).map_err(|e| format!("host: {e}"))?,
    );
    let port = authority.port_u16().unwrap_or(80);
    let stream = tokio::net::TcpStream::connect((authority.host(), port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .set_nodelay(true)
        .map_err(|e| format!("nodelay: {e}"))?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(connection);
    let path = Uri::builder()
        .path_and_query(uri.path_and_query().map_or("/", |p| p.as_str()))
        .build()
        .map_err(|e| format!("path: {e}"))?;
    Ok(Lane {
        url: url.to_string(),
        sender,
        path,
        headers,
    })
}

/// One request on a bare connection: status, `Mcp-Session-Id` if any, whether SSE, body.
async fn send_raw(
    lane: &mut Lane,
    method: Method,
    extra: &[(HeaderName, HeaderValue)],
    body: String,
) -> Result<(StatusCode, Option<HeaderValue>, bool, Bytes), String> {
    let mut request = hyper::Request::new(Full::new(Bytes::from(body)));
    *request.method_mut() = method;
    *request.uri_mut() = lane.path.clone();
    *request.headers_mut() = lane.headers.clone();
    for (name, value) in extra {
        request.headers_mut().insert(name.clone(), value.clone());
    }
    lane.ready().await?;
    let response = lane
        .sender
        .send_request(request)
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    let sse = is_sse(response.headers());
    let session = response.headers().get(SESSION_HEADER).cloned();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("read body: {e}"))?
        .to_bytes();
    Ok((status, session, sse, body))
}

/// One whole session (churn): `initialize`, `notifications/initialized`, `DELETE`, each on
/// the connection's next lane. `Ok(sse)`: the initialize answer came as SSE.
async fn churn_once(connection: &mut Connection) -> Result<Answer, String> {
    let initialize = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion": LEGACY_VERSION, "capabilities": {},
        "clientInfo": {"name":"load","version":"0"}}})
    .to_string();
    let (status, session, sse, body) =
        send_raw(connection.lane(), Method::POST, &[], initialize).await?;
    let answer = parse_answer(status, sse, &body, 0)?;
    if answer.outcome.is_err() {
        return Ok(answer);
    }
    let Some(session) = session else {
        return Ok(Answer {
            outcome: Err("initialize answered without Mcp-Session-Id".into()),
            sse,
        });
    };
    let (version_name, version) = header(PROTOCOL_VERSION_HEADER, LEGACY_VERSION);
    let extra = [
        (HeaderName::from_static(SESSION_HEADER), session),
        (version_name, version),
    ];
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_string();
    let (status, ..) = send_raw(connection.lane(), Method::POST, &extra, initialized).await?;
    if !status.is_success() {
        return Ok(Answer {
            outcome: Err(format!("initialized: HTTP {status}")),
            sse,
        });
    }
    let (status, ..) = send_raw(connection.lane(), Method::DELETE, &extra, String::new()).await?;
    if !status.is_success() {
        return Ok(Answer {
            outcome: Err(format!("DELETE: HTTP {status}")),
            sse,
        });
    }
    Ok(Answer {
        outcome: Ok(None),
        sse,
    })
}

/// One `tools/call` on the bare connection, and its answer read whole.
async fn exchange(lane: &mut Lane, body: String, id: u64) -> Result<Answer, String> {
    let mut request = hyper::Request::new(Full::new(Bytes::from(body)));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = lane.path.clone();
    *request.headers_mut() = lane.headers.clone();
    lane.ready().await?;
    let response = lane
        .sender
        .send_request(request)
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    let sse = is_sse(response.headers());
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("read body: {e}"))?
        .to_bytes();
    parse_answer(status, sse, &body, id)
}

/// One connection's closed loop from the first request to the session's end.
async fn drive(
    mut connection: Connection,
    dialect: Dialect,
    payload: Arc<str>,
    timeline: Timeline,
) -> (Tally, u64, u64) {
    let mut tally = Tally::new();
    let (mut json_answers, mut sse_answers) = (0, 0);
    let era = match dialect {
        Dialect::Modern => Era::Stateless,
        Dialect::Session | Dialect::Stateless | Dialect::Churn | Dialect::Split => Era::Session,
    };
    let mut id: u64 = 0;
    while Instant::now() < timeline.measure_end {
        id += 1;
        let body = client::tools_call_request(id, &payload, era, None);
        let sent_at = Instant::now();
        tally.sent += 1;
        let exchange = async {
            if dialect == Dialect::Churn {
                churn_once(&mut connection).await
            } else {
                exchange(connection.lane(), body, id).await
            }
        };
        let answer = match timeout_at(timeline.drain_end, exchange).await {
            Err(_) => {
                tally.lost += 1;
                break;
            }
            Ok(Err(e)) => {
                tally.lost += 1;
                tally.transport_errors.push(e);
                break;
            }
            Ok(Ok(answer)) => answer,
        };
        let received_at = Instant::now();
        tally.answered += 1;
        match answer.outcome {
            Err(e) => {
                tally.errors += 1;
                if tally.transport_errors.is_empty() {
                    tally.transport_errors.push(e);
                }
            }
            Ok(echoed) if dialect != Dialect::Churn && echoed.as_deref() != Some(&*payload) => {
                tally.mismatched += 1
            }
            Ok(_) => {
                if answer.sse {
                    sse_answers += 1;
                } else {
                    json_answers += 1;
                }
                if timeline.in_window(received_at) {
                    let micros = (received_at - sent_at).as_micros();
                    tally
                        .latency_us
                        .saturating_record(u64::try_from(micros).unwrap_or(u64::MAX).max(1));
                    tally.completed_in_window += 1;
                }
            }
        }
    }
    for (url, session) in connection.sessions {
        // End the session, so repeated runs do not pile up idle sessions.
        let _ = tokio::time::timeout(
            Duration::from_millis(500),
            connection
                .client
                .delete(url)
                .header(SESSION_HEADER, session)
                .send(),
        )
        .await;
    }
    (tally, json_answers, sse_answers)
}

/// CPU ticks so far of the target's processes (their sum; `None` without pids) and of
/// the generator.
fn sample_cpu(pids: &[u32]) -> throughput::CpuSample {
    let server = if pids.is_empty() {
        None
    } else {
        pids.iter()
            .map(|&pid| crate::sys::process_cpu_ticks(pid))
            .sum::<Option<u64>>()
    };
    throughput::CpuSample {
        server,
        client: crate::sys::own_cpu_ticks(),
    }
}

/// Runs one point of the sweep against `target`.
pub async fn run_point(
    target: &HttpTarget,
    connections: usize,
    workload: &Workload,
    ticks_per_sec: u64,
) -> HttpPoint {
    let mut opening = JoinSet::new();
    for _ in 0..connections {
        let target = target.clone();
        opening.spawn(async move {
            tokio::time::timeout(SESSION_SETUP_TIMEOUT, open(&target))
                .await
                .unwrap_or_else(|_| Err("session setup timed out".into()))
        });
    }
    let mut opened = Vec::new();
    let mut failures = 0;
    let mut failure_samples: Vec<String> = Vec::new();
    while let Some(joined) = opening.join_next().await {
        match joined.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok(connection) => opened.push(connection),
            Err(e) => {
                failures += 1;
                if failure_samples.len() < 5 && !failure_samples.contains(&e) {
                    failure_samples.push(e);
                }
            }
        }
    }
    let connected = opened.len();
    let start = Instant::now();
    let timeline = Timeline {
        warmup_end: start + workload.warmup,
        measure_end: start + workload.warmup + workload.duration,
        drain_end: start + workload.warmup + workload.duration + DRAIN,
    };
    let payload: Arc<str> = client::payload_text(workload.payload).into();
    let mut drivers = JoinSet::new();
    for connection in opened {
        drivers.spawn(drive(
            connection,
            target.dialect,
            Arc::clone(&payload),
            timeline,
        ));
    }
    sleep_until(timeline.warmup_end).await;
    let before = sample_cpu(&target.pids);
    sleep_until(timeline.measure_end).await;
    let after = sample_cpu(&target.pids);

    let mut tally = Tally::new();
    let (mut json_answers, mut sse_answers) = (0, 0);
    while let Ok(Some(joined)) =
        tokio::time::timeout_at(timeline.drain_end + JOIN_GRACE, drivers.join_next()).await
    {
        match joined {
            Ok((connection, json, sse)) => {
                tally.merge(connection);
                json_answers += json;
                sse_answers += sse;
            }
            Err(e) => tally.transport_errors.push(format!("connection task: {e}")),
        }
    }
    if !drivers.is_empty() {
        tally.transport_errors.push(format!(
            "{} connection tasks did not finish in time; aborted",
            drivers.len()
        ));
        drivers.abort_all();
    }
    let window = timeline.measure_end - timeline.warmup_end;
    HttpPoint {
        connections,
        connected,
        connect_failures: failures,
        connect_failure_samples: failure_samples,
        window,
        tally,
        json_answers,
        sse_answers,
        server_cpu_cores: throughput::cores_used(
            before.server,
            after.server,
            window,
            ticks_per_sec,
        ),
        client_cpu_cores: throughput::cores_used(
            before.client,
            after.client,
            window,
            ticks_per_sec,
        ),
    }
}

pub fn header_row() -> String {
    format!(
        "{:<16} {:<9} {:>5} {:>9} {:>7} {:>7} {:>7} {:>7} {:>6} {:>5} {:>5} {:>7} {:>7} {:>10} {:>6}",
        "target",
        "dialect",
        "conns",
        "req/s",
        "p50us",
        "p90us",
        "p99us",
        "max_us",
        "errors",
        "lost",
        "mism",
        "srv_cpu",
        "cli_cpu",
        "req/cpu-s",
        "answer"
    )
}

fn cores(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |c| format!("{c:.2}"))
}

pub fn row(target: &HttpTarget, p: &HttpPoint) -> String {
    let h = &p.tally.latency_us;
    format!(
        "{:<16} {:<9} {:>5} {:>9.0} {:>7} {:>7} {:>7} {:>7} {:>6} {:>5} {:>5} {:>7} {:>7} {:>10} {:>6}",
        target.label,
        target.dialect.name(),
        p.connected,
        p.requests_per_sec(),
        h.value_at_quantile(0.50),
        h.value_at_quantile(0.90),
        h.value_at_quantile(0.99),
        h.max(),
        p.tally.errors,
        p.tally.lost,
        p.tally.mismatched,
        cores(p.server_cpu_cores),
        cores(p.client_cpu_cores),
        p.requests_per_cpu_second()
            .map_or_else(|| "-".into(), |r| format!("{r:.0}")),
        p.answer_format(),
    )
}

fn point_json(p: &HttpPoint) -> Value {
    let t = &p.tally;
    let h = &t.latency_us;
    json!({
        "connections": p.connections,
        "connected": p.connected,
        "connect_failures": p.connect_failures,
        "connect_failure_samples": p.connect_failure_samples,
        "window_s": p.window.as_secs_f64(),
        "requests_per_sec": (p.requests_per_sec() * 10.0).round() / 10.0,
        "requests_per_cpu_second": p.requests_per_cpu_second().map(|r| r.round()),
        "latency_us": {
            "count": h.len(),
            "p50": h.value_at_quantile(0.50),
            "p90": h.value_at_quantile(0.90),
            "p99": h.value_at_quantile(0.99),
            "p99_9": h.value_at_quantile(0.999),
            "max": h.max(),
        },
        "completed_in_window": t.completed_in_window,
        "sent": t.sent,
        "answered": t.answered,
        "errors": t.errors,
        "lost": t.lost,
        "mismatched": t.mismatched,
        "json_answers": p.json_answers,
        "sse_answers": p.sse_answers,
        "answer_format": p.answer_format(),
        "server_cpu_cores": p.server_cpu_cores,
        "client_cpu_cores": p.client_cpu_cores,
        "transport_errors": t.transport_errors,
    })
}

fn warnings(results: &[(HttpTarget, Vec<HttpPoint>)], client_threads: usize) -> Vec<String> {
    let mut found = Vec::new();
    for (target, points) in results {
        let name = &target.label;
        for p in points {
            let (t, c) = (&p.tally, p.connections);
            if t.lost > 0 || t.mismatched > 0 || t.errors > 0 {
                found.push(format!(
                    "{name} @ {c} conns: lost {} mismatched {} errors {} (must be 0)",
                    t.lost, t.mismatched, t.errors
                ));
            }
            if p.connect_failures > 0 {
                found.push(format!(
                    "{name} @ {c} conns: {} connections failed: {:?}",
                    p.connect_failures, p.connect_failure_samples
                ));
            }
            if !t.transport_errors.is_empty() {
                found.push(format!("{name} @ {c} conns: {:?}", t.transport_errors));
            }
            if p.client_cpu_cores
                .is_some_and(|used| used >= CLIENT_SATURATED_SHARE * client_threads as f64)
            {
                found.push(format!(
                    "{name} @ {c} conns: the generator saturated its {client_threads} thread(s); \
                     the server was under-driven: req/s is a lower bound, and so is req/cpu-s \
                     (a server that idles between requests spends more per request)"
                ));
            }
            if p.server_cpu_cores.is_none() {
                found.push(format!(
                    "{name}: no pid given, so no server CPU and no req/cpu-s"
                ));
            }
        }
    }
    found
}

/// The whole `http` mode: every target, every connection count, the table,
/// warnings, `http.json` under `--out` and the `RESULT_JSON` line.
pub fn run(
    args: &Args,
    workload: &Workload,
    ticks_per_sec: u64,
    runtime: &tokio::runtime::Runtime,
) -> Result<(), BoxError> {
    let mut targets: Vec<HttpTarget> = Vec::new();
    for spec in &args.http_targets {
        let target = HttpTarget::parse(spec)?;
        if targets.iter().any(|t| t.label == target.label) {
            return Err(format!("--http-target label {:?} given twice", target.label).into());
        }
        targets.push(target);
    }
    println!(
        "http: one request in flight per connection, payload {} B, warmup {:.1}s, window {:.1}s, \
         drain {:.1}s, client threads {}",
        workload.payload,
        workload.warmup.as_secs_f64(),
        workload.duration.as_secs_f64(),
        DRAIN.as_secs_f64(),
        args.client_threads
    );
    println!("{}", header_row());
    let mut results = Vec::new();
    for target in targets {
        let mut points = Vec::new();
        for &connections in &workload.connections {
            let point = runtime.block_on(run_point(&target, connections, workload, ticks_per_sec));
            println!("{}", row(&target, &point));
            points.push(point);
            std::thread::sleep(crate::SETTLE_BETWEEN_RUNS);
        }
        results.push((target, points));
    }
    let warnings = warnings(&results, args.client_threads);
    for warning in &warnings {
        println!("WARNING: {warning}");
    }
    let mut by_label = serde_json::Map::new();
    for (target, points) in &results {
        by_label.insert(
            target.label.clone(),
            json!({
                "dialect": target.dialect.name(),
                "url": target.url,
                "urls": target.urls,
                "pid": target.pid,
                "pids": target.pids,
                "points": points.iter().map(point_json).collect::<Vec<_>>(),
            }),
        );
    }
    let result = json!({
        "mode": "http",
        "config": {
            "connections": workload.connections,
            "payload_bytes": workload.payload,
            "duration_s": workload.duration.as_secs_f64(),
            "warmup_s": workload.warmup.as_secs_f64(),
            "drain_s": DRAIN.as_secs_f64(),
        },
        "client_threads": args.client_threads,
        "order": results.iter().map(|(t, _)| t.label.clone()).collect::<Vec<_>>(),
        "targets": by_label,
        "warnings": warnings,
    });
    std::fs::create_dir_all(&args.out)?;
    let path = args.out.join("http.json");
    std::fs::write(&path, serde_json::to_string_pretty(&result)?)?;
    println!("wrote {}", path.display());
    println!("RESULT_JSON {}", serde_json::to_string(&result)?);
    Ok(())
}
