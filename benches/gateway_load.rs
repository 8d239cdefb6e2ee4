//! Load generator of `benches/gateway.sh`: MCP `tools/call` echo through a gateway that
//! serves a stdio MCP server (mcp-ws `--stdio`, supergateway, mcp-proxy), or straight to the
//! stdio server itself, one phase per run:
//!
//! ```text
//! gateway_load direct   --label L --cmd "node …/server-everything/dist/index.js stdio" [--core 0] [--seconds S]
//! gateway_load latency  --label L --transport ws|http --url URL --pid PID [--seconds S]
//! gateway_load cpu      --label L --transport ws|http --url URL --pid PID [--sessions 10] [--seconds S]
//! gateway_load sessions --label L --transport ws|http --url URL --pid PID [--max 100] [--step 10] [--calls 5]
//! ```
//!
//! - `direct`: the stdio server started by the generator (`taskset -c CORE`), JSON-RPC lines
//!   on its stdin/stdout, one call at a time: the latency every gateway adds to.
//! - `latency`: one session, one call at a time for S seconds (after a warm-up): latency
//!   p50/p99 and the gateway's CPU (utime + stime of PID from /proc/PID/stat, its children
//!   excluded) per call.
//! - `cpu`: N sessions, each one call at a time, all at once for S seconds: the gateway's CPU
//!   per call under concurrency.
//! - `sessions`: sessions opened 10, 20, … up to 100; at each step every open session makes
//!   `--calls` calls at once with arguments of its own, each answer checked to echo its own
//!   argument (a wrong one is cross-talk, none within 30 s is lost); RSS (VmRSS of PID and
//!   every descendant) and the descendants counted with 10 and 100 sessions; the first call
//!   of each session timed apart (a `per_session` gateway starts the session's child then).
//!
//! Every run ends with one line `GATEWAY_JSON {…}` that `gateway.sh` gathers into its table.

use std::collections::HashMap;
use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const PROTOCOL_VERSION: &str = "2025-11-25";
/// A call's answer later than this counts as lost.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// 48 bytes of padding after the session-unique prefix: about the 64 B echo of the other benches.
const PADDING: &str = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";

fn initialize_request(id: u64) -> String {
    json!({"jsonrpc":"2.0","id":id,"method":"initialize","params":{
        "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
        "clientInfo": {"name": "gateway-load", "version": "0"}}})
    .to_string()
}

const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// `--local 1`: mcp-ws's own demo `echo` (`{text}`, answered with the text unchanged)
/// instead of server-everything's (`{message}`, answered `Echo: message`): the same session
/// and transport with no upstream behind, what the gateway path adds to.
static LOCAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

fn local() -> bool {
    LOCAL.get().copied().unwrap_or(false)
}

fn call_request(id: u64, message: &str) -> String {
    let arguments = if local() {
        json!({"text": message})
    } else {
        json!({"message": message})
    };
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
        "params":{"name":"echo","arguments":arguments}})
    .to_string()
}

/// What one call came back with.
#[derive(Debug)]
enum Outcome {
    Ok,
    /// An answer, to this request, that is an error.
    Error(String),
    /// An answer with another id, or echoing another argument.
    CrossTalk(String),
    /// No answer within [`CALL_TIMEOUT`] (or the connection closed).
    Lost(String),
}

/// Checks a JSON-RPC message against request `id` that sent `message`. `None`: not an
/// answer (a notification, a request of the server), keep reading.
fn judge(text: &str, id: u64, message: &str) -> Option<Outcome> {
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return Some(Outcome::Error(format!("not JSON ({e}): {}", cut(text)))),
    };
    if value.get("method").is_some() || value.get("id").is_none() {
        return None;
    }
    if value["id"].as_u64() != Some(id) {
        return Some(Outcome::CrossTalk(format!(
            "answer to id {} while {id} is in flight",
            value["id"]
        )));
    }
    if let Some(error) = value.get("error") {
        return Some(Outcome::Error(format!(
            "error answer: {}",
            cut(&error.to_string())
        )));
    }
    let text = value["result"]["content"][0]["text"].as_str().unwrap_or("");
    let echoed = if local() {
        Some(text)
    } else {
        text.strip_prefix("Echo: ")
    };
    if echoed == Some(message) {
        Some(Outcome::Ok)
    } else {
        Some(Outcome::CrossTalk(format!(
            "expected the echo of {message}, got {}",
            cut(text)
        )))
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Ok => write!(f, "ok"),
            Outcome::Error(e) => write!(f, "error: {e}"),
            Outcome::CrossTalk(e) => write!(f, "cross-talk: {e}"),
            Outcome::Lost(e) => write!(f, "lost: {e}"),
        }
    }
}

fn cut(text: &str) -> String {
    text.chars().take(200).collect()
}

/// One MCP session with a gateway, or with the stdio server itself (at most a few hundred at
/// once: the size of the largest variant does not matter).
#[allow(clippy::large_enum_variant)]
enum Session {
    Ws(Box<WebSocketStream<MaybeTlsStream<TcpStream>>>),
    Http {
        client: reqwest::Client,
        url: String,
        session: Option<String>,
    },
    Stdio {
        child: tokio::process::Child,
        stdin: tokio::process::ChildStdin,
        lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    },
}

impl Session {
    async fn open(transport: &str, url: &str) -> Result<Session, BoxError> {
        let mut session = match transport {
            "ws" => {
                let mut request = url.into_client_request()?;
                request
                    .headers_mut()
                    .insert("Sec-WebSocket-Protocol", HeaderValue::from_static("mcp"));
                let (ws, _) = tokio_tungstenite::connect_async(request).await?;
                Session::Ws(Box::new(ws))
            }
            "http" => Session::Http {
                client: http_client_builder()
                    .pool_max_idle_per_host(1)
                    .tcp_nodelay(true)
                    .no_proxy()
                    .build()?,
                url: url.to_string(),
                session: None,
            },
            other => return Err(format!("unknown transport {other}").into()),
        };
        session.handshake().await?;
        Ok(session)
    }

    /// `cmd` split on whitespace, started on `core` (taskset).
    async fn spawn(cmd: &str, core: &str) -> Result<Session, BoxError> {
        let mut child = tokio::process::Command::new("taskset")
            .arg("-c")
            .arg(core)
            .args(cmd.split_whitespace())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin")?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut session = Session::Stdio {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        };
        session.handshake().await?;
        Ok(session)
    }

    async fn handshake(&mut self) -> Result<(), BoxError> {
        let answer = self.exchange(0, &initialize_request(0)).await?;
        let value: Value = serde_json::from_str(&answer)?;
        if value.get("result").is_none() {
            return Err(format!("initialize: {}", cut(&answer)).into());
        }
        self.notify(INITIALIZED).await
    }

    async fn notify(&mut self, text: &str) -> Result<(), BoxError> {
        match self {
            Session::Ws(ws) => ws.send(Message::text(text)).await?,
            Session::Http {
                client,
                url,
                session,
            } => {
                let response = with_headers(client.post(url.as_str()), session)
                    .body(text.to_string())
                    .send()
                    .await?;
                if !response.status().is_success() {
                    return Err(format!("notification: HTTP {}", response.status()).into());
                }
            }
            Session::Stdio { stdin, .. } => {
                stdin.write_all(format!("{text}\n").as_bytes()).await?;
            }
        }
        Ok(())
    }

    /// Sends `request` (id `id`) and returns the first message that is an answer (has an
    /// id and no method); for HTTP, the message of the body with that id or else the first.
    async fn exchange(&mut self, id: u64, request: &str) -> Result<String, BoxError> {
        match self {
            Session::Ws(ws) => {
                ws.send(Message::text(request)).await?;
                loop {
                    match ws.next().await.ok_or("connection closed")?? {
                        Message::Text(text) if is_answer(&text) => return Ok(text.to_string()),
                        Message::Close(frame) => return Err(format!("closed: {frame:?}").into()),
                        _ => continue,
                    }
                }
            }
            Session::Http {
                client,
                url,
                session,
            } => {
                let response = with_headers(client.post(url.as_str()), session)
                    .body(request.to_string())
                    .send()
                    .await?;
                let status = response.status();
                if let Some(value) = response.headers().get("mcp-session-id") {
                    *session = Some(value.to_str()?.to_string());
                }
                let sse = response
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.starts_with("text/event-stream"));
                let body = response.text().await?;
                if !status.is_success() {
                    return Err(format!("HTTP {status}: {}", cut(&body)).into());
                }
                let messages: Vec<String> = if sse {
                    body.split("\n\n")
                        .map(|event| {
                            event
                                .lines()
                                .filter_map(|l| l.strip_prefix("data:"))
                                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                                .collect::<Vec<_>>()
                                .join("\n")
                        })
                        .filter(|data| !data.is_empty())
                        .collect()
                } else {
                    vec![body]
                };
                let answers: Vec<&String> = messages.iter().filter(|m| is_answer(m)).collect();
                answers
                    .iter()
                    .find(|m| {
                        serde_json::from_str::<Value>(m).is_ok_and(|v| v["id"].as_u64() == Some(id))
                    })
                    .or(answers.first())
                    .map(|m| m.to_string())
                    .ok_or_else(|| {
                        format!("no answer in the body: {}", cut(&messages.join("|"))).into()
                    })
            }
            Session::Stdio { stdin, lines, .. } => {
                stdin.write_all(format!("{request}\n").as_bytes()).await?;
                loop {
                    let line = lines.next_line().await?.ok_or("stdout closed")?;
                    if is_answer(&line) {
                        return Ok(line);
                    }
                }
            }
        }
    }

    async fn call(&mut self, id: u64, message: &str) -> Outcome {
        let request = call_request(id, message);
        match tokio::time::timeout(CALL_TIMEOUT, self.exchange(id, &request)).await {
            Err(_) => Outcome::Lost("no answer within 30 s".into()),
            Ok(Err(e)) => Outcome::Lost(e.to_string()),
            Ok(Ok(answer)) => judge(&answer, id, message)
                .unwrap_or_else(|| Outcome::Error("not an answer".into())),
        }
    }

    async fn close(self) {
        match self {
            Session::Ws(mut ws) => {
                let _ = ws.close().await;
            }
            Session::Http {
                client,
                url,
                session: Some(id),
            } => {
                let _ = client
                    .delete(url.as_str())
                    .header("mcp-session-id", id)
                    .send()
                    .await;
            }
            Session::Http { .. } => {}
            Session::Stdio { mut child, .. } => {
                let _ = child.kill().await;
            }
        }
    }
}

fn is_answer(text: &str) -> bool {
    serde_json::from_str::<Value>(text)
        .is_ok_and(|v| v.get("id").is_some_and(|id| !id.is_null()) && v.get("method").is_none())
}

fn with_headers(
    request: reqwest::RequestBuilder,
    session: &Option<String>,
) -> reqwest::RequestBuilder {
    let request = request
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    match session {
        Some(id) => request
            .header("mcp-session-id", id)
            .header("mcp-protocol-version", PROTOCOL_VERSION),
        None => request,
    }
}

/// utime + stime of `pid` in clock ticks (children excluded).
fn cpu_ticks(pid: u32) -> Result<u64, BoxError> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = &stat[stat.rfind(')').ok_or("bad stat")? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // fields[0] is field 3 (state): utime and stime are fields 14 and 15.
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

/// Context switches (voluntary and not) of the live threads of `pid`.
fn context_switches(pid: u32) -> u64 {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

fn ticks_per_sec() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// `pid` and every process descending from it.
fn family(pid: u32) -> Vec<u32> {
    let mut parent: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        if let Some(ppid) = stat[close + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u32>().ok())
        {
            parent.entry(ppid).or_default().push(p);
        }
    }
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        if let Some(kids) = parent.get(&all[i]) {
            all.extend(kids);
        }
        i += 1;
    }
    all
}

fn rss_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|r| r.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

struct Args(HashMap<String, String>);

impl Args {
    fn get(&self, key: &str) -> Result<&str, BoxError> {
        self.0
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| format!("--{key} is required").into())
    }
    fn or<'a>(&'a self, key: &str, default: &'a str) -> &'a str {
        self.0.get(key).map(String::as_str).unwrap_or(default)
    }
    fn num(&self, key: &str, default: u64) -> Result<u64, BoxError> {
        Ok(self.or(key, &default.to_string()).parse()?)
    }
}

fn micros(h: &Histogram<u64>, q: f64) -> u64 {
    h.value_at_quantile(q)
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("histogram bounds")
}

/// One call at a time on `session` for `seconds` after `warmup` calls: latency histogram
/// (µs) and the number of calls.
async fn sequential(
    session: &mut Session,
    tag: &str,
    warmup: u64,
    seconds: f64,
    pid: Option<u32>,
) -> Result<Value, BoxError> {
    let mut id = 1;
    for _ in 0..warmup {
        let message = format!("{tag}-w{id}-{PADDING}");
        if let o @ (Outcome::Error(_) | Outcome::CrossTalk(_) | Outcome::Lost(_)) =
            session.call(id, &message).await
        {
            return Err(format!("warm-up call: {o}").into());
        }
        id += 1;
    }
    let mut h = histogram();
    let ticks0 = pid.map(cpu_ticks).transpose()?;
    let switches0 = pid.map(context_switches);
    let start = Instant::now();
    let (mut calls, mut failed) = (0u64, 0u64);
    while start.elapsed().as_secs_f64() < seconds {
        let message = format!("{tag}-{id}-{PADDING}");
        let t = Instant::now();
        let outcome = session.call(id, &message).await;
        h.record(t.elapsed().as_micros().max(1) as u64)?;
        if !matches!(outcome, Outcome::Ok) {
            failed += 1;
            eprintln!("call {id}: {outcome}");
        }
        calls += 1;
        id += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut out = json!({
        "calls": calls, "failed": failed, "seconds": elapsed,
        "p50_us": micros(&h, 0.5), "p99_us": micros(&h, 0.99), "max_us": h.max(),
    });
    if let (Some(pid), Some(t0)) = (pid, ticks0) {
        let cpu = (cpu_ticks(pid)? - t0) as f64 / ticks_per_sec();
        out["gateway_cpu_s"] = json!(cpu);
        out["cpu_us_per_call"] = json!(cpu * 1e6 / calls as f64);
        out["switches_per_call"] =
            json!((context_switches(pid) - switches0.unwrap_or(0)) as f64 / calls as f64);
    }
    Ok(out)
}

async fn direct(args: &Args) -> Result<Value, BoxError> {
    let mut session = Session::spawn(args.get("cmd")?, args.or("core", "0")).await?;
    let seconds: f64 = args.or("seconds", "5").parse()?;
    let out = sequential(&mut session, "direct", 200, seconds, None).await;
    session.close().await;
    out
}

async fn latency(args: &Args) -> Result<Value, BoxError> {
    let (transport, url, pid) = (args.get("transport")?, args.get("url")?, pid(args)?);
    let seconds: f64 = args.or("seconds", "5").parse()?;
    // Spawn-to-ready of a fresh gateway's first session: its handshake and first call (a
    // per-session gateway starts the session's child at one of the two).
    let t = Instant::now();
    let mut session = Session::open(transport, url).await?;
    let open_us = t.elapsed().as_micros() as u64;
    let first = session.call(1_000_000, &format!("first-{PADDING}")).await;
    let first_us = t.elapsed().as_micros() as u64 - open_us;
    if !matches!(first, Outcome::Ok) {
        return Err(format!("first call: {first}").into());
    }
    let mut out = sequential(&mut session, "s0", 200, seconds, Some(pid)).await;
    if let Ok(out) = &mut out {
        out["open_us"] = json!(open_us);
        out["first_call_us"] = json!(first_us);
    }
    session.close().await;
    out
}

fn pid(args: &Args) -> Result<u32, BoxError> {
    Ok(args.get("pid")?.parse()?)
}

async fn cpu(args: &Args) -> Result<Value, BoxError> {
    let (transport, url, pid) = (args.get("transport")?, args.get("url")?, pid(args)?);
    let seconds: f64 = args.or("seconds", "5").parse()?;
    let n = args.num("sessions", 10)?;
    let mut sessions = Vec::new();
    for _ in 0..n {
        sessions.push(Session::open(transport, url).await?);
    }
    // Warm-up: every session's child started and answering.
    let mut tasks = Vec::new();
    for (i, mut s) in sessions.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            for id in 1..=50u64 {
                let outcome = s.call(id, &format!("s{i}-w{id}-{PADDING}")).await;
                if !matches!(outcome, Outcome::Ok) {
                    return Err(format!("warm-up: {outcome}"));
                }
            }
            Ok(s)
        }));
    }
    let mut sessions = Vec::new();
    for t in tasks {
        sessions.push(t.await??);
    }
    let ticks0 = cpu_ticks(pid)?;
    let switches0 = context_switches(pid);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for (i, mut s) in sessions.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let mut h = histogram();
            let (mut calls, mut failed, mut id) = (0u64, 0u64, 100u64);
            while Instant::now() < deadline {
                let t = Instant::now();
                let outcome = s.call(id, &format!("s{i}-{id}-{PADDING}")).await;
                h.record(t.elapsed().as_micros().max(1) as u64).ok();
                if !matches!(outcome, Outcome::Ok) {
                    failed += 1;
                }
                calls += 1;
                id += 1;
            }
            (s, h, calls, failed)
        }));
    }
    let mut h = histogram();
    let (mut calls, mut failed, mut sessions) = (0, 0, Vec::new());
    for t in tasks {
        let (s, th, c, f) = t.await?;
        h.add(th)?;
        calls += c;
        failed += f;
        sessions.push(s);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = (cpu_ticks(pid)? - ticks0) as f64 / ticks_per_sec();
    let switches = context_switches(pid).saturating_sub(switches0);
    for s in sessions {
        s.close().await;
    }
    Ok(json!({
        "sessions": n, "calls": calls, "failed": failed, "seconds": elapsed,
        "calls_per_s": calls as f64 / elapsed,
        "p50_us": micros(&h, 0.5), "p99_us": micros(&h, 0.99),
        "gateway_cpu_s": cpu, "cpu_us_per_call": cpu * 1e6 / calls as f64,
        "switches_per_call": switches as f64 / calls as f64,
    }))
}

async fn sessions(args: &Args) -> Result<Value, BoxError> {
    let (transport, url, pid) = (args.get("transport")?, args.get("url")?, pid(args)?);
    let max = args.num("max", 100)? as usize;
    let step = args.num("step", 10)? as usize;
    let calls = args.num("calls", 5)?;
    let mut open: Vec<(usize, Session, bool)> = Vec::new();
    let mut first_calls = histogram();
    let mut steps = Vec::new();
    let (mut ok_up_to, mut first_failure) = (0usize, Value::Null);
    let (mut errors, mut cross_talk, mut lost, mut answered) = (0u64, 0u64, 0u64, 0u64);
    let mut at = serde_json::Map::new();
    'ramp: for n in (step..=max).step_by(step) {
        while open.len() < n {
            let i = open.len();
            match Session::open(transport, url).await {
                Ok(s) => open.push((i, s, false)),
                Err(e) => {
                    first_failure = json!(format!("opening session {}: {e}", i + 1));
                    break 'ramp;
                }
            }
        }
        // Every open session: `calls` calls, one at a time, all sessions at once.
        let mut tasks = Vec::new();
        for (i, mut s, started) in open.drain(..) {
            tasks.push(tokio::spawn(async move {
                let mut outcomes = Vec::new();
                let mut first = None;
                for c in 0..calls {
                    let id = (n as u64) * 1000 + c + 1;
                    let t = Instant::now();
                    let outcome = s.call(id, &format!("session-{i}-step-{n}-call-{c}")).await;
                    if !started && c == 0 {
                        first = Some(t.elapsed().as_micros() as u64);
                    }
                    outcomes.push(outcome);
                }
                (i, s, outcomes, first)
            }));
        }
        let (mut step_errors, mut step_cross, mut step_lost) = (0, 0, 0);
        let mut example = None;
        for t in tasks {
            let (i, s, outcomes, first) = t.await?;
            if let Some(us) = first {
                first_calls.record(us.max(1))?;
            }
            for o in outcomes {
                match &o {
                    Outcome::Ok => answered += 1,
                    Outcome::Error(_) => step_errors += 1,
                    Outcome::CrossTalk(_) => step_cross += 1,
                    Outcome::Lost(_) => step_lost += 1,
                }
                if !matches!(o, Outcome::Ok) && example.is_none() {
                    example = Some(format!("session {i}: {o}"));
                }
            }
            open.push((i, s, true));
        }
        errors += step_errors;
        cross_talk += step_cross;
        lost += step_lost;
        if n == 10 || n == max {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let procs = family(pid);
            let rss: u64 = procs.iter().map(|&p| rss_kib(p)).sum();
            at.insert(
                n.to_string(),
                json!({"rss_kib": rss, "rss_kib_per_session": rss / n as u64,
                       "processes": procs.len() - 1}),
            );
        }
        steps.push(json!({"sessions": n, "errors": step_errors, "cross_talk": step_cross, "lost": step_lost}));
        if step_errors + step_cross + step_lost > 0 {
            first_failure = json!(format!("at {n} sessions: {}", example.unwrap_or_default()));
            break;
        }
        ok_up_to = n;
    }
    let held = open.len();
    for (_, s, _) in open {
        s.close().await;
    }
    Ok(json!({
        "ok_up_to": ok_up_to, "held": held, "first_failure": first_failure,
        "answered": answered, "errors": errors, "cross_talk": cross_talk, "lost": lost,
        "first_call_p50_us": micros(&first_calls, 0.5), "first_call_max_us": first_calls.max(),
        "at": at, "steps": steps,
    }))
}

fn main() -> Result<(), BoxError> {
    let mut argv = std::env::args().skip(1);
    let mode = argv
        .next()
        .ok_or("usage: gateway_load direct|latency|cpu|sessions --key value …")?;
    let mut map = HashMap::new();
    while let Some(key) = argv.next() {
        // `cargo bench` passes --bench.
        if key == "--bench" {
            continue;
        }
        let key = key.strip_prefix("--").ok_or(format!("unexpected {key}"))?;
        map.insert(
            key.to_string(),
            argv.next().ok_or(format!("--{key} needs a value"))?,
        );
    }
    let args = Args(map);
    LOCAL.get_or_init(|| args.or("local", "0") == "1");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async {
        match mode.as_str() {
            "direct" => direct(&args).await,
            "latency" => latency(&args).await,
            "cpu" => cpu(&args).await,
            "sessions" => sessions(&args).await,
            other => Err(format!("unknown mode {other}").into()),
        }
    });
    let label = args.or("label", "?");
    match result {
        Ok(mut value) => {
            value["label"] = json!(label);
            value["mode"] = json!(mode);
            println!("GATEWAY_JSON {value}");
            Ok(())
        }
        Err(e) => {
            println!(
                "GATEWAY_JSON {}",
                json!({"label": label, "mode": mode, "fatal": e.to_string()})
            );
            Err(e)
        }
    }
}

/// `reqwest::Client::builder()` once ring's crypto provider, the server's, is the process's
/// default: this build's reqwest has none of its own (see clippy.toml), and building a client
/// needs one even for plain http://.
#[allow(clippy::disallowed_methods)]
fn http_client_builder() -> reqwest::ClientBuilder {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
}
