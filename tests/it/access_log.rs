//! Logs and trace ids, read from the log of the real binary (`logging.format = "json"`,
//! filtered with `RUST_LOG`), each line parsed:
//!
//! - Every request gets exactly one access-log line (target `mcp_ws::access`) when it is
//!   done: inline answers, worker outcomes, errors (`error` and the code), timeouts
//!   (`timed_out`), cancels (`cancelled`), each entry of a batch. Each line carries the
//!   request's id (its JSON text), method, params, outcome, duration, the client's address,
//!   `User-Agent` and identity, the session and the trace id.
//! - Params are redacted at any depth (`logging.redact_keys`: passwords, tokens, secrets,
//!   keys), in raw params and in the `tools/call` params the decoder parsed: the secret
//!   values appear nowhere in the log; long params are cut at `access_params_max_bytes`.
//! - With `format = "json"` every line of the log is a JSON object.
//! - Trace ids come from the upgrade's `traceparent`, else its `X-Trace-Id`, else are made
//!   up (one per connection); a request's own `params._meta.traceparent` overrides them, for
//!   inline and worker requests alike. The `request` and `worker` debug spans carry it on
//!   every line logged inside them; the tool's context sees the same id.
//! - `mcp_ws::access=off` in the filter turns the access log off; the text format writes it
//!   too.
//! - The HTTP layer's lines a client can repeat (a malformed head) are written at most once
//!   a second.

use crate::support::process::ServerProcess;
use crate::support::*;

use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// The binary, logging as configured, with its address read from its log.
struct LoggedServer {
    process: ServerProcess,
    addr: SocketAddr,
    _config: PathBuf,
}

fn spawn(name: &str, format: &str, rust_log: &str, extra: &str) -> LoggedServer {
    let config = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("access_log-{name}-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nworkers = 1\n\n[logging]\nformat = \"{format}\"\n{extra}"
        ),
    )
    .expect("write the config");
    let process = ServerProcess::spawn(
        &["--config", config.to_str().expect("utf-8 path")],
        &[("RUST_LOG", rust_log)],
    );
    let addr = wait_for_addr(&process, format);
    LoggedServer {
        process,
        addr,
        _config: config,
    }
}

/// The address in the `listening` line (JSON: its `addr` field; text: `addr=`).
fn wait_for_addr(process: &ServerProcess, format: &str) -> SocketAddr {
    let deadline = Instant::now() + READ_TIMEOUT;
    loop {
        let text = process.stderr_text();
        for line in text.lines().filter(|l| l.contains("listening")) {
            let addr = if format == "json" {
                let line: Value = serde_json::from_str(line).expect("a JSON line");
                line["addr"].as_str().map(str::to_owned)
            } else {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix("addr="))
                    .map(str::to_owned)
            };
            if let Some(addr) = addr {
                return addr.parse().expect("a socket address");
            }
        }
        assert!(
            Instant::now() < deadline,
            "no listening line; stderr:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl LoggedServer {
    fn url(&self) -> String {
        format!("ws://{}/mcp", self.addr)
    }

    /// Every line of the log so far, each parsed (a line that is not JSON fails the test).
    fn json_lines(&self) -> Vec<Value> {
        self.process
            .stderr_text()
            .lines()
            .map(|line| {
                let value: Value = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
                assert!(value.is_object(), "{line}");
                for member in ["timestamp", "level", "target"] {
                    assert!(value.get(member).is_some(), "no {member}: {line}");
                }
                value
            })
            .collect()
    }

    fn access_lines(&self) -> Vec<Value> {
        self.json_lines()
            .into_iter()
            .filter(|line| line["target"] == "mcp_ws::access")
            .collect()
    }

    /// Waits (polling the log the reader thread collects) until there are `count` access
    /// lines, and returns them.
    fn wait_access_lines(&self, count: usize) -> Vec<Value> {
        let deadline = Instant::now() + READ_TIMEOUT;
        loop {
            let lines = self.access_lines();
            if lines.len() >= count {
                return lines;
            }
            assert!(
                Instant::now() < deadline,
                "{} access lines, expected {count}:\n{}",
                lines.len(),
                self.process.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Connects with these extra upgrade headers, and initializes.
async fn client_with(url: &str, headers: &[(&str, &str)]) -> Client {
    let mut request = url.into_client_request().expect("request");
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "mcp".parse().expect("header"));
    for (name, value) in headers {
        request
            .headers_mut()
            .insert(http_name(name), value.parse().expect("header value"));
    }
    let (ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("websocket connects");
    let mut client = Client::from_ws(ws);
    let response = client
        .request_with_id(json!("init"), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_result(&response, &json!("init"));
    client
        .send_json(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await;
    client
}

fn http_name(name: &str) -> tokio_tungstenite::tungstenite::http::HeaderName {
    name.parse().expect("header name")
}

/// The one access line of the request with this id (its JSON text), failing on none or two.
fn line_of<'a>(lines: &'a [Value], id: &Value) -> &'a Value {
    let id = id.to_string();
    let mut found = lines.iter().filter(|l| l["id"] == id.as_str());
    let line = found
        .next()
        .unwrap_or_else(|| panic!("no access line for id {id}: {lines:#?}"));
    assert!(found.next().is_none(), "two access lines for id {id}");
    line
}

/// The params of a line, parsed back.
fn params_of(line: &Value) -> Value {
    let text = line["params"].as_str().expect("params is a string");
    serde_json::from_str(text).unwrap_or_else(|e| panic!("params not JSON ({e}): {text}"))
}

fn traceparent(trace: &str) -> String {
    format!("00-{trace}-00f067aa0ba902b7-01")
}

#[tokio::test]
async fn each_request_gets_one_access_line_with_its_outcome() {
    let server = spawn(
        "outcomes",
        "json",
        "info",
        "[limits.tool_timeout_ms]\nsleep = 50\n",
    );
    let before = unix_micros_now();
    let mut client = client_with(
        &server.url(),
        &[
            ("user-agent", "observe-test/1.0"),
            ("x-trace-id", "conn-trace-7"),
        ],
    )
    .await;

    let echo = client
        .request_with_id(
            json!("echo-1"),
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hello"}}),
        )
        .await;
    assert_result(&echo, &json!("echo-1"));
    let unknown = client
        .request_with_id(json!(77), "no/such/method", json!({}))
        .await;
    assert_error(&unknown, &json!(77), -32601);
    let slow = client
        .request_with_id(
            json!("slow"),
            "tools/call",
            json!({"name": "sleep", "arguments": {"ms": 60_000}}),
        )
        .await;
    assert_error(&slow, &json!("slow"), -32001);
    // A cancelled call: its line comes with the cancel, before the barrier's answer.
    client
        .send_json(
            json!({"jsonrpc":"2.0","id":"cancel-me","method":"tools/call",
            "params":{"name":"sleep","arguments":{"ms":60_000}}}),
        )
        .await;
    client
        .send_json(json!({"jsonrpc":"2.0","method":"notifications/cancelled",
            "params":{"requestId":"cancel-me"}}))
        .await;
    client
        .send_json(json!([
            {"jsonrpc":"2.0","id":"b1","method":"ping"},
            {"jsonrpc":"2.0","id":"b2","method":"tools/call",
             "params":{"name":"echo","arguments":{"text":"in a batch"}}}
        ]))
        .await;
    let batch = client.recv().await;
    assert_eq!(batch.as_array().map(Vec::len), Some(2), "{batch}");
    client.expect_nothing_pending().await;
    let after = unix_micros_now();

    // init, echo-1, 77, slow, cancel-me, b1, b2, and the barrier ping.
    let lines = server.wait_access_lines(8);
    assert_eq!(lines.len(), 8, "{lines:#?}");
    // Each line's time of day (made from the monotonic moment its request ended) is within
    // the requests' time, read here on the system clock; a millisecond's leeway for the
    // microseconds each side cuts.
    for line in &lines {
        let at = line["timestamp"]
            .as_str()
            .map(unix_micros)
            .expect("timestamp");
        assert!(
            before - 1_000 <= at && at <= after + 1_000,
            "{before} <= {at} <= {after}: {line}"
        );
    }
    let session = &line_of(&lines, &json!("init"))["session"];
    assert!(session.is_u64(), "{session}");
    for line in &lines {
        assert_eq!(&line["session"], session, "{line}");
        assert_eq!(line["peer"], "127.0.0.1", "{line}");
        assert_eq!(line["user_agent"], "observe-test/1.0", "{line}");
        assert_eq!(line["identity"], "anonymous", "{line}");
        assert_eq!(line["trace_id"], "conn-trace-7", "{line}");
        assert_eq!(line["level"], "INFO", "{line}");
        assert!(line["duration_us"].is_u64(), "{line}");
    }
    let expect = |id: Value, method: &str, outcome: &str, code: Option<i64>| {
        let line = line_of(&lines, &id);
        assert_eq!(line["method"], method, "{line}");
        assert_eq!(line["outcome"], outcome, "{line}");
        assert_eq!(line.get("code").and_then(Value::as_i64), code, "{line}");
    };
    expect(json!("init"), "initialize", "ok", None);
    expect(json!("echo-1"), "tools/call", "ok", None);
    expect(json!(77), "no/such/method", "error", Some(-32601));
    expect(json!("slow"), "tools/call", "timed_out", Some(-32001));
    expect(json!("cancel-me"), "tools/call", "cancelled", None);
    expect(json!("b1"), "ping", "ok", None);
    expect(json!("b2"), "tools/call", "ok", None);
    assert_eq!(
        params_of(line_of(&lines, &json!("echo-1"))),
        json!({"name": "echo", "arguments": {"text": "hello"}})
    );
    assert_eq!(line_of(&lines, &json!("b1"))["params"], "-", "no params");
    // The timed-out call ran for its 50 ms timeout at least.
    let slow_us = line_of(&lines, &json!("slow"))["duration_us"]
        .as_u64()
        .expect("duration");
    assert!(slow_us >= 50_000, "{slow_us}");
}

/// Microseconds since 1970 now, on the system clock.
fn unix_micros_now() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    i64::try_from(now.as_micros()).expect("in range")
}

/// Microseconds since 1970 of a log timestamp, `2026-12-05T06:00:10.645625Z` (UTC).
fn unix_micros(timestamp: &str) -> i64 {
    let field = |range: std::ops::Range<usize>| -> i64 {
        timestamp
            .get(range)
            .and_then(|digits| digits.parse().ok())
            .unwrap_or_else(|| panic!("not a timestamp: {timestamp}"))
    };
    assert_eq!(timestamp.len(), 27, "{timestamp}");
    let (year, month, day) = (field(0..4), field(5..7), field(8..10));
    // Days from 1970-01-01 of a civil date (H. Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + field(11..13) * 3600 + field(14..16) * 60 + field(17..19);
    seconds * 1_000_000 + field(20..26)
}

#[test]
fn log_timestamps_are_read_as_the_system_clock_counts() {
    assert_eq!(unix_micros("1970-01-01T00:00:00.000000Z"), 0);
    assert_eq!(
        unix_micros("2000-02-29T23:59:59.000001Z"),
        951_868_799_000_001
    );
    assert_eq!(
        unix_micros("2025-12-02T00:32:22.122311Z"),
        1_764_635_542_122_311
    );
}

#[tokio::test]
async fn a_request_s_own_trace_id_is_on_its_line_among_the_session_s() {
    // The access log at `info`: every line written by hand, the fields a session's lines
    // share rendered once (at its second line) and copied after that.
    let server = spawn("own-trace", "json", "info", "");
    let session_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let own_trace = "0af7651916cd43dd8448eb211c80319c";
    let mut client = client_with(
        &server.url(),
        &[("traceparent", &traceparent(session_trace))],
    )
    .await;
    let own = json!({"_meta": {"traceparent": traceparent(own_trace)}});
    for (id, params) in [
        ("first", json!({})),
        ("own", own.clone()),
        ("second", json!({})),
        ("own-again", own),
        ("third", json!({})),
    ] {
        let answer = client.request_with_id(json!(id), "ping", params).await;
        assert_result(&answer, &json!(id));
    }
    let lines = server.wait_access_lines(6);
    for (id, trace) in [
        ("init", session_trace),
        ("first", session_trace),
        ("own", own_trace),
        ("second", session_trace),
        ("own-again", own_trace),
        ("third", session_trace),
    ] {
        let line = line_of(&lines, &json!(id));
        assert_eq!(line["trace_id"], trace, "{line}");
        assert_eq!(line["peer"], "127.0.0.1", "{line}");
        assert_eq!(line["identity"], "anonymous", "{line}");
    }
}

#[tokio::test]
async fn params_are_redacted_at_any_depth_and_cut() {
    let server = spawn(
        "redaction",
        "json",
        "info",
        "access_params_max_bytes = 200\n",
    );
    let mut client = client_with(&server.url(), &[]).await;
    // `tools/call`: params parsed by the decoder, written back redacted.
    let call = client
        .request_with_id(
            json!("call"),
            "tools/call",
            json!({"name": "echo",
                   "arguments": {"text": "visible", "password": "hunter2-call"},
                   "_meta": {"progressToken": "tok-1"}}),
        )
        .await;
    assert_result(&call, &json!("call"));
    // Raw params (any other method), nested in objects and arrays.
    let ping = client
        .request_with_id(
            json!("raw"),
            "ping",
            json!({"deep": {"list": [{"clientSecret": "s3cr3t-raw", "keep": 1}],
                            "Authorization": {"bearer": "abc-raw"}},
                   "user": "alice"}),
        )
        .await;
    assert_result(&ping, &json!("raw"));
    let long = client
        .request_with_id(json!("long"), "ping", json!({"text": "x".repeat(5000)}))
        .await;
    assert_result(&long, &json!("long"));
    client.expect_nothing_pending().await;

    let lines = server.wait_access_lines(5);
    assert_eq!(
        params_of(line_of(&lines, &json!("call"))),
        json!({"name": "echo",
               "arguments": {"text": "visible", "password": "[redacted]"},
               "_meta": {"progressToken": "[redacted]"}})
    );
    assert_eq!(
        params_of(line_of(&lines, &json!("raw"))),
        json!({"deep": {"list": [{"clientSecret": "[redacted]", "keep": 1}],
                        "Authorization": "[redacted]"},
               "user": "alice"})
    );
    let cut = line_of(&lines, &json!("long"))["params"]
        .as_str()
        .expect("params")
        .to_owned();
    assert!(cut.starts_with("{\"text\":\"xxx"), "{cut}");
    assert!(
        cut.ends_with('…') && cut.len() <= 200 + '…'.len_utf8(),
        "{cut}"
    );
    // The secrets are nowhere in the log, not even in other lines.
    let log = server.process.stderr_text();
    for secret in ["hunter2-call", "s3cr3t-raw", "abc-raw", "tok-1"] {
        assert!(!log.contains(secret), "{secret} leaked into the log");
    }
    assert!(log.contains("visible"), "the rest of the params is logged");
}

#[tokio::test]
async fn trace_ids_come_from_the_upgrade_then_the_request() {
    let server = spawn("traces", "json", "info,mcp_ws=debug", "");
    let upgrade_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let own_trace = "0af7651916cd43dd8448eb211c80319c";
    let call_trace = "d4cda95b652f4a1592b449d5929fda1b";
    // traceparent wins over X-Trace-Id.
    let mut from_traceparent = client_with(
        &server.url(),
        &[
            ("traceparent", &traceparent(upgrade_trace)),
            ("x-trace-id", "ignored-id"),
        ],
    )
    .await;
    from_traceparent
        .request_with_id(json!("tp-plain"), "ping", json!({}))
        .await;
    from_traceparent
        .request_with_id(
            json!("tp-own"),
            "ping",
            json!({"_meta": {"traceparent": traceparent(own_trace)}}),
        )
        .await;
    let call = from_traceparent
        .request_with_id(
            json!("tp-call"),
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "t"},
                   "_meta": {"traceparent": traceparent(call_trace)}}),
        )
        .await;
    assert_result(&call, &json!("tp-call"));
    // After requests with trace ids of their own, the connection's again (the fields a
    // session's lines share are rendered once, with the connection's trace id).
    from_traceparent
        .request_with_id(json!("tp-plain-2"), "ping", json!({}))
        .await;
    // An invalid traceparent is ignored: X-Trace-Id is next.
    let mut from_header = client_with(
        &server.url(),
        &[
            (
                "traceparent",
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            ),
            ("x-trace-id", "req-abc.1"),
        ],
    )
    .await;
    from_header
        .request_with_id(json!("hdr"), "ping", json!({}))
        .await;
    // Nothing: made up, one per connection.
    let mut anonymous_a = client_with(&server.url(), &[]).await;
    anonymous_a
        .request_with_id(json!("a1"), "ping", json!({}))
        .await;
    anonymous_a
        .request_with_id(json!("a2"), "ping", json!({}))
        .await;
    let mut anonymous_b = client_with(&server.url(), &[]).await;
    anonymous_b
        .request_with_id(json!("b1"), "ping", json!({}))
        .await;
    anonymous_b.expect_nothing_pending().await;

    // 4 initialize, 8 requests, the barrier.
    let lines = server.wait_access_lines(13);
    let trace = |id: &str| {
        line_of(&lines, &json!(id))["trace_id"]
            .as_str()
            .expect("trace")
            .to_owned()
    };
    assert_eq!(trace("tp-plain"), upgrade_trace);
    assert_eq!(trace("tp-own"), own_trace);
    assert_eq!(trace("tp-call"), call_trace);
    assert_eq!(trace("tp-plain-2"), upgrade_trace);
    assert_eq!(trace("hdr"), "req-abc.1");
    let made_up = trace("a1");
    assert!(
        made_up.len() == 32 && made_up.bytes().all(|b| b.is_ascii_hexdigit()),
        "{made_up}"
    );
    assert_eq!(trace("a2"), made_up, "one id per connection");
    assert_ne!(trace("b1"), made_up, "another connection, another id");
    // A ping is answered inside its `request` span, enabled here: its access line is then
    // the `fmt` layer's, with the span's context (the hand-written line has none).
    let ping_line = line_of(&lines, &json!("tp-plain"));
    assert_eq!(ping_line["span"]["name"], "request", "{ping_line}");
    assert_eq!(ping_line["span"]["trace"], upgrade_trace, "{ping_line}");

    // Every line logged inside a request's spans carries the request's trace id: the
    // `request` span on each, and the `worker` span on the worker's.
    let json_lines = server.json_lines();
    let in_request = |id: &str| -> Vec<Value> {
        let id = json!(id).to_string();
        json_lines
            .iter()
            .filter(|line| {
                line["spans"].as_array().is_some_and(|spans| {
                    spans
                        .iter()
                        .any(|s| s["name"] == "request" && s["id"] == id.as_str())
                })
            })
            .cloned()
            .collect()
    };
    for (id, expected) in [
        ("tp-own", own_trace),
        ("tp-call", call_trace),
        ("tp-plain", upgrade_trace),
    ] {
        let logged = in_request(id);
        assert!(!logged.is_empty(), "no debug line inside request {id}");
        for line in &logged {
            for span in line["spans"].as_array().expect("spans") {
                assert_eq!(span["trace"], expected, "{id}: {line}");
            }
        }
    }
    let worker_lines = in_request("tp-call")
        .iter()
        .filter(|line| line["span"]["name"] == "worker")
        .count();
    assert!(worker_lines > 0, "the worker logs inside its span");
}

#[tokio::test]
async fn the_access_log_can_be_filtered_out_and_is_written_as_text_too() {
    let quiet = spawn("off", "json", "info,mcp_ws::access=off", "");
    let mut client = client_with(&quiet.url(), &[]).await;
    client.request_with_id(json!("p"), "ping", json!({})).await;
    client.expect_nothing_pending().await;
    // The session's own info line is there (the log works), the access lines are not.
    let deadline = Instant::now() + READ_TIMEOUT;
    while !quiet.process.stderr_text().contains("session initialized") {
        assert!(Instant::now() < deadline, "{}", quiet.process.stderr_text());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(quiet.access_lines().is_empty());
    // Each of its fields once: `identity` was written twice, a JSON object with a key twice.
    let log = quiet.process.stderr_text();
    let initialized = log
        .lines()
        .find(|line| line.contains("session initialized"))
        .expect("the line");
    assert_eq!(
        initialized.matches("\"identity\":").count(),
        1,
        "{initialized}"
    );

    let text = spawn("text", "text", "info", "");
    let mut client = client_with(&text.url(), &[("x-trace-id", "text-trace")]).await;
    client.request_with_id(json!("t1"), "ping", json!({})).await;
    // Params quoted as they are copied (plain ASCII), and params quoted as the line is
    // written (an escape inside): the same field, read back.
    let plain = json!({"name": "echo", "arguments": {"text": "say hi", "n": 7}});
    let escaped = json!({"name": "echo", "arguments": {"text": "a \"b\" é\n"}});
    for (id, params) in [("t2", &plain), ("t3", &escaped)] {
        let answer = client
            .request_with_id(json!(id), "tools/call", params.clone())
            .await;
        assert_result(&answer, &json!(id));
    }
    let deadline = Instant::now() + READ_TIMEOUT;
    let line_of_id = |log: &str, id: &str| {
        log.lines()
            .find(|l| l.contains("mcp_ws::access") && l.contains(&format!("id=\"{id}\"")))
            .map(str::to_owned)
    };
    loop {
        let log = text.process.stderr_text();
        if let (Some(line), Some(_), Some(_)) = (
            line_of_id(&log, "t1"),
            line_of_id(&log, "t2"),
            line_of_id(&log, "t3"),
        ) {
            assert!(line.contains("method=ping"), "{line}");
            assert!(line.contains("trace_id=text-trace"), "{line}");
            assert!(line.contains("outcome=\"ok\""), "{line}");
            break;
        }
        assert!(Instant::now() < deadline, "no text access lines:\n{log}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let log = text.process.stderr_text();
    for (id, params) in [("t2", &plain), ("t3", &escaped)] {
        let line = line_of_id(&log, id).expect("its line");
        let (_, rest) = line
            .split_once("mcp_ws::access: request ")
            .unwrap_or_else(|| panic!("an access line: {line}"));
        let fields = text_fields(rest).unwrap_or_else(|| panic!("fields do not parse: {line}"));
        let shown = fields
            .iter()
            .find(|(name, _)| name == "params")
            .map(|(_, value)| value.as_str())
            .unwrap_or_else(|| panic!("no params: {line}"));
        let shown: Value = serde_json::from_str(shown).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(&shown, params, "{line}");
    }
}

/// A tool that answers with its context's trace id.
async fn trace_of(_args: NoArgs, ctx: mcp_ws::RequestContext) -> Result<String, mcp_ws::ToolError> {
    Ok(ctx.trace_id().to_owned())
}

#[tokio::test]
async fn the_tool_context_sees_the_request_trace_id() {
    let server = start_with(settings(), |b| {
        b.tool(mcp_ws::Tool::new(
            "trace_of",
            "Answers its trace id",
            trace_of,
        ))
    });
    let upgrade_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let own_trace = "0af7651916cd43dd8448eb211c80319c";
    let mut client = client_with(
        &server.url(),
        &[("traceparent", &traceparent(upgrade_trace))],
    )
    .await;
    let plain = client.call_tool("trace_of", json!({})).await;
    assert_eq!(
        plain["result"]["content"][0]["text"], upgrade_trace,
        "{plain}"
    );
    let own = client
        .request(
            "tools/call",
            json!({"name": "trace_of", "arguments": {},
                   "_meta": {"traceparent": traceparent(own_trace)}}),
        )
        .await;
    assert_eq!(own["result"]["content"][0]["text"], own_trace, "{own}");
}

/// The fields of a text line after its message, `name=value` each, a value bare or quoted
/// with Rust's escapes (`\"`, `\\`, `\n`, `\u{..}`): how a reader of the text log parses
/// them. `None` for a line that does not parse.
fn text_fields(rest: &str) -> Option<Vec<(String, String)>> {
    let mut fields = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(fields);
        }
        let mut name = String::new();
        loop {
            match chars.next()? {
                '=' => break,
                ' ' | '"' => return None,
                c => name.push(c),
            }
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => match chars.next()? {
                        'n' => value.push('\n'),
                        'r' => value.push('\r'),
                        't' => value.push('\t'),
                        'u' => {
                            let hex: String =
                                chars.by_ref().skip(1).take_while(|c| *c != '}').collect();
                            value.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                        }
                        c => value.push(c),
                    },
                    c => value.push(c),
                }
            }
            if !matches!(chars.peek(), None | Some(' ')) {
                return None;
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ' ') {
                value.push(c);
            }
        }
        fields.push((name, value));
    }
}

#[tokio::test]
async fn client_strings_cannot_forge_fields_of_a_text_line() {
    let server = spawn("forge", "text", "info", "");
    let user_agent = "ua\" identity=admin x=\"1";
    let mut client = client_with(&server.url(), &[("user-agent", user_agent)]).await;
    let method = "ping identity=admin outcome=\"ok\" \\\" code=1";
    // Twice after `initialize`: the session's second line renders the fields it shares
    // with its other lines, the third copies them.
    let ids = [json!("x\" identity=admin y=\""), json!("z\" identity=root")];
    for id in &ids {
        let answer = client.request_with_id(id.clone(), method, json!({})).await;
        assert_error(&answer, id, -32601);
    }

    let deadline = Instant::now() + READ_TIMEOUT;
    let lines = loop {
        let log = server.process.stderr_text();
        let lines: Vec<String> = log
            .lines()
            .filter(|l| l.contains("mcp_ws::access") && l.contains("code=-32601"))
            .map(str::to_owned)
            .collect();
        if lines.len() >= ids.len() {
            break lines;
        }
        assert!(Instant::now() < deadline, "no access lines:\n{log}");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(lines.len(), ids.len(), "one line each: {lines:?}");
    for (line, id) in lines.iter().zip(&ids) {
        let (_, rest) = line
            .split_once("mcp_ws::access: request ")
            .unwrap_or_else(|| panic!("an access line: {line}"));
        let fields = text_fields(rest).unwrap_or_else(|| panic!("fields do not parse: {line}"));
        let names: Vec<&str> = fields.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "session",
                "id",
                "method",
                "params",
                "outcome",
                "code",
                "duration_us",
                "peer",
                "user_agent",
                "identity",
                "trace_id"
            ],
            "{line}"
        );
        let field = |name: &str| {
            fields
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .unwrap_or_default()
        };
        assert_eq!(field("method"), method, "{line}");
        // A string id is written as its JSON text, which reads back as the string.
        assert_eq!(field("id"), id.as_str().expect("a string id"), "{line}");
        assert_eq!(field("user_agent"), user_agent, "{line}");
        assert_eq!(field("identity"), "anonymous", "{line}");
        assert_eq!(field("outcome"), "error", "{line}");
        assert_eq!(field("code"), "-32601", "{line}");
        assert_eq!(field("params"), "{}", "{line}");
        assert_eq!(field("peer"), "127.0.0.1", "{line}");
    }
}

/// The server's first `session initialized` line (JSON log), waited for.
fn session_initialized_line(server: &LoggedServer) -> Value {
    let deadline = Instant::now() + READ_TIMEOUT;
    loop {
        let initialized = server
            .json_lines()
            .into_iter()
            .find(|line| line["message"] == "session initialized");
        if let Some(line) = initialized {
            return line;
        }
        assert!(
            Instant::now() < deadline,
            "{}",
            server.process.stderr_text()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The identity in the `session initialized` line is cut and escaped as the access line's
/// is: a JWT `sub` (or a certificate's subject) is as long as its issuer let it be, and it
/// was written whole (a 30,000-byte CN made a 30 kB line).
#[tokio::test]
async fn a_long_identity_is_cut_in_the_session_initialized_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = "a-shared-secret-of-at-least-32-bytes!";
    let secret_file = dir.path().join("secret");
    std::fs::write(&secret_file, secret).expect("write the secret");
    let server = spawn(
        "long-identity",
        "json",
        "info",
        &format!(
            "\n[auth]\nresource = \"mcp-test\"\nauthorization_servers = [\"https://issuer.test\"]\n\
             [auth.jwt]\nsecret_file = {:?}\n",
            secret_file.display().to_string()
        ),
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .as_secs();
    let sub = format!("\u{1b}[31m{}", "s".repeat(5_000));
    let claims = json!({"sub": sub, "iss": "https://issuer.test", "aud": "mcp-test",
                        "exp": now + 600});
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .expect("encode");
    let mut request = server.url().into_client_request().expect("request");
    let headers = request.headers_mut();
    headers.insert("Sec-WebSocket-Protocol", "mcp".parse().expect("header"));
    let bearer = format!("Bearer {token}");
    headers.insert("Authorization", bearer.parse().expect("header"));
    let (ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("websocket connects");
    let mut client = Client::from_ws(ws);
    let answer = client
        .request_with_id(json!(1), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_result(&answer, &json!(1));
    let line = session_initialized_line(&server);
    let shown = line["identity"].as_str().expect("the identity field");
    assert!(shown.starts_with("\\u{1b}[31msss"), "{shown}");
    assert!(shown.ends_with('…') && shown.len() < 140, "{shown}");
}

/// What a client describes itself with is kept for its session's life: an `initialize`
/// whose params pass 64 KiB, or a 2026-07-28 request whose `clientInfo` does, is refused
/// (-32602) and the connection goes on; the `session initialized` line shows the client's
/// strings cut and escaped, as the access line does.
#[tokio::test]
async fn a_clients_description_is_bounded_in_its_session_and_its_log_line() {
    use crate::support::meta::{add_meta, stateless, CLIENT_INFO};
    let server = spawn("described", "json", "info", "");
    let mut request = server.url().into_client_request().expect("request");
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "mcp".parse().expect("header"));
    let (ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("websocket connects");
    let mut client = Client::from_ws(ws);
    let mut huge = initialize_params("2025-11-25");
    huge["clientInfo"]["name"] = json!("n".repeat(70_000));
    let refused = client
        .request_with_id(json!("huge"), "initialize", huge)
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().expect("a message");
    assert!(message.contains("at most 65536"), "{message}");

    // Long and with an escape: accepted, and its line shows 128 bytes of it.
    let mut long = initialize_params("2025-11-25");
    long["clientInfo"]["name"] = json!(format!("\u{1b}[31m{}", "x".repeat(1_000)));
    let answer = client
        .request_with_id(json!("init"), "initialize", long)
        .await;
    assert_result(&answer, &json!("init"));
    let line = session_initialized_line(&server);
    let shown = line["client"].as_str().expect("the client field");
    assert!(shown.starts_with("\\u{1b}[31mxxx"), "{shown}");
    assert!(shown.ends_with('…') && shown.len() < 140, "{shown}");

    // A 2026-07-28 request describing its client at length: refused, the connection goes on.
    let params = add_meta(
        stateless(json!({})),
        CLIENT_INFO,
        json!({"name": "n".repeat(70_000), "version": "1"}),
    );
    let refused = client.request_with_id(json!(2), "tools/list", params).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let pong = client.request_with_id(json!(3), "ping", json!({})).await;
    assert_result(&pong, &json!(3));
}

/// The HTTP layer's own error lines, which any client can cause once a connection before the
/// perimeter (a malformed request head: 400), are written at most once a second: 200 such
/// requests leave a line or two, not 200. (Each was an ERROR line: a port scanner filled
/// the log; attack run 58, F3.)
#[test]
fn the_http_layers_lines_a_client_can_repeat_are_written_at_most_once_a_second() {
    use std::io::{Read, Write};
    let server = spawn("http-errors", "text", "info", "");
    let head = format!(
        "GET /mcp HTTP/1.1\r\nHost: {}\r\nBad Header\r\n\r\n",
        server.addr
    );
    let began = Instant::now();
    for _ in 0..200 {
        let mut stream = std::net::TcpStream::connect(server.addr).expect("connects");
        let _ = stream.write_all(head.as_bytes());
        let mut status = [0u8; 12];
        stream.read_exact(&mut status).expect("a status line");
        assert_eq!(
            &status,
            b"HTTP/1.1 400",
            "{}",
            String::from_utf8_lossy(&status)
        );
    }
    let seconds = began.elapsed().as_secs() + 2;
    // The last line may still be on its way to the log.
    std::thread::sleep(Duration::from_millis(300));
    let lines = server
        .process
        .stderr_text()
        .lines()
        .filter(|l| l.contains("actix_http::"))
        .count();
    assert!(
        (1..=seconds as usize).contains(&lines),
        "{lines} lines of the HTTP layer in {seconds} s, at most one a second expected"
    );
}
