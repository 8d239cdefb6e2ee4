//! Limits on what a client or a tool can make the server do or hold, over a real socket, each
//! with its refusal, its count in `/metrics`, and the server (the same session, and others)
//! still serving afterwards:
//!
//! - The request rate per identity (`limits.rate`): past the burst a request gets -32017 with
//!   `data.retryAfterMs`; the bucket is shared by the identity's sessions (an anonymous
//!   client is known by its IP address), another identity is not affected, and the identity
//!   is served again once tokens refill.
//! - JSON shape limits (`limits.max_json_depth`, `max_string_bytes`, `max_array_len`,
//!   `max_object_members`): a request over one gets -32600 under its own id with
//!   `data {kind, limit}`, a notification over one gets nothing, a batch over one is refused
//!   whole; a message exactly at a limit is served.
//! - A batch over `limits.max_batch_len` (a megabyte of entries) gets one -32010 counting
//!   every entry.
//! - The method allow-list (`limits.allowed_methods`): a method outside it is answered
//!   exactly as an unknown method (-32601); notifications are not affected.
//! - A tool's log lines over its budget (`limits.log_lines_per_second`/`log_lines_burst`) are
//!   dropped and counted; lines below the session's level do not use the budget.
//! - Notifications over `limits.max_queued_notifications`, or whose data would take the
//!   queue past `limits.max_queued_notification_bytes`, are dropped, not queued; a WebSocket
//!   client that stops reading while a tool logs large lines is sent every line it is not
//!   told was dropped.
//! - A tool's requests to the client past `limits.max_in_flight_per_session` outstanding fail
//!   at once in the tool, without reaching the client, and are counted.
//! - A subscribed URI over `limits.max_subscription_uri_bytes` gets -32602.
//! - A message over `limits.max_message_bytes` closes with 1009 and is counted.
//! - An error quoting what the client sent (an unknown log level, tool, prompt argument or
//!   template, a value serde could not read) quotes at most 128 characters of it, its
//!   message at most 1 KiB and its `data` strings at most 1 KiB.
//! - An answer over `limits.max_message_bytes` (a tool's result) is not sent: its request
//!   gets -32603 naming the size and the setting, over WebSocket and 2026-07-28 HTTP, and is
//!   not remembered for a retry of its id (which runs again); a retry of its idempotency
//!   key is told it ran and was not kept (-32032), never run twice; a result that fits is
//!   answered as ever.
//!
//! No timing assertions: the rate test only relies on tokens not refilling faster than their
//! rate, and waits for recovery by retrying as told.

use crate::support::http::{metric, wait_metric};
use crate::support::ws::assert_server_alive;
use crate::support::*;

use futures_util::future::join_all;
use mcp_ws::model::LogLevel;
use mcp_ws::{RequestContext, RunningServer, Settings, Tool, ToolError};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::net::TcpSocket;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::MaybeTlsStream;

const RATE_LIMITED: i64 = -32017;

fn rejected(reason: &str) -> String {
    format!("mcp_rejected_total{{reason=\"{reason}\"}}")
}

fn dropped(reason: &str) -> String {
    format!("mcp_dropped_total{{reason=\"{reason}\"}}")
}

/// A WebSocket to `server` from the loopback address `local` (another client IP).
async fn connect_from(server: &RunningServer, local: [u8; 4]) -> Client {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind((local, 0).into())
        .expect("bind a loopback address");
    let tcp = socket.connect(server.addr()).await.expect("connect");
    let mut request = server.url().into_client_request().expect("request");
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", "mcp".parse().expect("header"));
    let (ws, _) = tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(tcp))
        .await
        .expect("websocket connects");
    Client::from_ws(ws)
}

async fn initialize(client: &mut Client) -> Value {
    client
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await
}

/// The responses of a batch, by id.
fn by_id(batch: &Value) -> Vec<(Value, Value)> {
    batch
        .as_array()
        .unwrap_or_else(|| panic!("a batch answer: {batch}"))
        .iter()
        .map(|response| (response["id"].clone(), response.clone()))
        .collect()
}

/// Errors that quote a client's string answer with a bounded part of it: a 3 MB value
/// (characters that need an escape) drew a 10 MB error, over `limits.max_message_bytes`,
/// after half a second of its event loop spent escaping it. Params that do not read name a
/// long string by its length and its beginning (serde quoted all of it, escaped, before the
/// error was cut).
#[tokio::test]
async fn an_error_quotes_a_bounded_part_of_what_the_client_sent() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let huge = "\u{e000}".repeat(1_000_000);
    let requests = [
        ("logging/setLevel", json!({"level": huge})),
        ("tools/call", json!({"name": huge, "arguments": {}})),
        ("prompts/get", json!({"name": "greet", "arguments": huge})),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "greet"},
                   "argument": {"name": huge, "value": ""}}),
        ),
        (
            "completion/complete",
            json!({"ref": {"type": "ref/resource", "uri": huge},
                   "argument": {"name": "x", "value": ""}}),
        ),
        ("resources/read", json!({"uri": huge})),
    ];
    for (method, params) in requests {
        let response = client.request(method, params).await;
        let error = &response["error"];
        assert!(error["code"].is_i64(), "{method}: no error: {response}");
        let message = error["message"].as_str().expect("a message");
        assert!(
            message.len() <= 1024 + 3,
            "{method}: a message of {} bytes",
            message.len()
        );
        let data = error["data"].to_string();
        assert!(data.len() <= 1100, "{method}: data of {} bytes", data.len());
        assert!(
            message.contains("u{e000}") || data.contains('\u{e000}'),
            "{method} quotes what it refused: {message} {data}"
        );
        if method == "prompts/get" {
            assert!(
                message.contains("invalid type: string of 3000000 bytes \"\\u{e000}"),
                "{message}"
            );
        }
    }
    let pong = client.request("ping", json!({})).await;
    assert_eq!(pong["result"], json!({}), "{pong}");
}

/// A request's notification whose message would be over `limits.max_message_bytes` (a log
/// line's data, a progress message) is dropped and counted, and the request goes on: such
/// messages went out whatever their size (clients close their connection for them).
#[tokio::test]
async fn a_notification_over_the_message_limit_is_dropped_and_counted() {
    let mut s = settings();
    s.limits.max_message_bytes = 64 * 1024;
    let loud = Tool::new(
        "loud",
        "logs and reports progress, too large then small",
        |_: NoArgs, ctx: RequestContext| async move {
            let big = "x".repeat(100_000);
            ctx.report_progress(1.0, None, Some(&big));
            ctx.log(LogLevel::Info, &big);
            ctx.log(LogLevel::Info, "small");
            Ok(mcp_ws::model::CallToolResult::text("done"))
        },
    );
    let server = start_with(s, |b| b.tool(loud));
    let mut client = Client::initialized(&server).await;
    let response = client
        .request("logging/setLevel", json!({"level": "debug"}))
        .await;
    assert_eq!(response["result"], json!({}), "{response}");
    let (response, before) = crate::support::ws::exchange(
        &mut client,
        "tools/call",
        json!({"name": "loud", "arguments": {}, "_meta": {"progressToken": "p"}}),
    )
    .await;
    assert_eq!(
        response["result"]["content"][0]["text"], "done",
        "{response}"
    );
    let methods: Vec<(&str, &Value)> = before
        .iter()
        .map(|frame| (frame["method"].as_str().unwrap_or("?"), &frame["params"]))
        .collect();
    assert_eq!(methods.len(), 1, "only the small line: {methods:?}");
    assert_eq!(methods[0].0, "notifications/message");
    assert_eq!(methods[0].1["data"], "small");
    assert_eq!(
        metric(
            &server,
            "mcp_dropped_total{reason=\"oversized_notifications\"}"
        )
        .await,
        2
    );
    assert_server_alive(&server).await;
}

/// Two requests in flight on a connection may not share a progress token (the spec has
/// tokens unique among active requests): the second is -32602 and does not run; once the
/// first is answered, the token is free again. (Both ran, and the client's progress under
/// the token went back and forth.)
#[tokio::test]
async fn a_progress_token_in_flight_is_not_taken_by_another_request() {
    let (server, gate) = start_with_gate(settings());
    let mut client = Client::initialized(&server).await;
    let call = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "hold", "arguments": {}, "_meta": {"progressToken": "same"}}})
    };
    client.send_json(call(1)).await;
    wait_metric(&server, "mcp_workers", 1).await;
    client.send_json(call(2)).await;
    let refused = client.recv_response(&json!(2)).await;
    let error = assert_error(&refused, &json!(2), -32602);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("progressToken")),
        "{refused}"
    );
    // It did not run: the first is the only worker.
    assert_eq!(metric(&server, "mcp_workers").await, 1);
    gate.add_permits(1);
    let first = client.recv_response(&json!(1)).await;
    assert_eq!(first["result"]["content"][0]["text"], "released", "{first}");
    wait_metric(&server, "mcp_workers", 0).await;
    client.send_json(call(3)).await;
    gate.add_permits(1);
    let third = client.recv_response(&json!(3)).await;
    assert_eq!(third["result"]["content"][0]["text"], "released", "{third}");
}

/// A cancelled request's progress token is free at once; two entries of one batch may not
/// share one either (the first runs, the second is -32602).
#[tokio::test]
async fn a_progress_token_is_free_once_its_request_is_cancelled_and_unique_in_a_batch() {
    let (server, gate) = start_with_gate(settings());
    let mut client = Client::initialized(&server).await;
    let call = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "hold", "arguments": {}, "_meta": {"progressToken": 7}}})
    };
    client.send_json(call(1)).await;
    wait_metric(&server, "mcp_workers", 1).await;
    client
        .send_json(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": 1}}),
        )
        .await;
    wait_metric(&server, "mcp_workers", 0).await;
    client.send_json(call(2)).await;
    wait_metric(&server, "mcp_workers", 1).await;
    gate.add_permits(1);
    let second = client.recv_response(&json!(2)).await;
    assert_eq!(
        second["result"]["content"][0]["text"], "released",
        "{second}"
    );
    wait_metric(&server, "mcp_workers", 0).await;

    // The permit the second call took is back: the batch's first entry runs at once.
    client.send_json(json!([call(3), call(4)])).await;
    let answers = client.recv().await;
    let answer = |id: i64| {
        by_id(&answers)
            .into_iter()
            .find(|(answered, _)| *answered == json!(id))
            .map(|(_, answer)| answer)
            .unwrap_or_else(|| panic!("no answer to {id}: {answers}"))
    };
    assert_eq!(
        answer(3)["result"]["content"][0]["text"],
        "released",
        "{answers}"
    );
    assert_error(&answer(4), &json!(4), -32602);
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn the_rate_per_identity_refuses_with_retry_after_and_recovers() {
    let mut s = settings();
    // A token every 2 s: the checks below take far less than that.
    s.limits.rate.requests_per_second = 0.5;
    s.limits.rate.burst = 5;
    let server = start(s);
    let mut client = Client::connect(&server).await;
    // `initialize` takes a token too: four are left.
    assert_result(&initialize(&mut client).await, &json!(0));
    let pings: Vec<Value> = (0..12)
        .map(|i| json!({"jsonrpc":"2.0","id":i,"method":"ping"}))
        .collect();
    client.send_json(Value::Array(pings)).await;
    let answers = by_id(&client.recv().await);
    assert_eq!(answers.len(), 12);
    let mut refused = 0;
    for (id, response) in &answers {
        if response.get("result").is_some() {
            assert_result(response, id);
            continue;
        }
        refused += 1;
        let error = assert_error(response, id, RATE_LIMITED);
        assert_eq!(error["data"]["scope"], "identity", "{error}");
        let retry = error["data"]["retryAfterMs"]
            .as_u64()
            .expect("retryAfterMs");
        // One token every 2 s: never longer than that.
        assert!((1..=2000).contains(&retry), "{error}");
    }
    // Tokens come back one every 2 s: at least 4 served, and nearly all the rest refused.
    assert!(
        refused <= 8,
        "the four tokens left were served: {answers:?}"
    );
    assert!(refused >= 1, "the burst is spent: {answers:?}");
    assert_eq!(metric(&server, &rejected("rate")).await, refused);

    // The bucket belongs to the identity (here: the anonymous client at 127.0.0.1), so
    // another session of it is refused too, even its `initialize`...
    let mut same = Client::connect(&server).await;
    let response = initialize(&mut same).await;
    let error = assert_error(&response, &json!(0), RATE_LIMITED);
    assert!(error["data"]["retryAfterMs"].as_u64().is_some(), "{error}");
    // ...while another identity (another address) is served.
    let mut other = connect_from(&server, [127, 0, 0, 2]).await;
    assert_result(&initialize(&mut other).await, &json!(0));
    assert_eq!(other.request("ping", json!({})).await["result"], json!({}));

    // Waiting as told, the first session is served again.
    let mut attempts = 0;
    loop {
        let response = client.request("ping", json!({})).await;
        if response.get("result").is_some() {
            break;
        }
        let error = assert_error(&response, &response["id"], RATE_LIMITED);
        attempts += 1;
        assert!(attempts < 50, "never served again: {error}");
        let retry = error["data"]["retryAfterMs"]
            .as_u64()
            .expect("retryAfterMs");
        tokio::time::sleep(Duration::from_millis(retry)).await;
    }
}

/// Settings with every JSON shape limit small.
fn shape_limited() -> Settings {
    let mut s = settings();
    s.limits.max_json_depth = 8;
    s.limits.max_string_bytes = 32;
    s.limits.max_array_len = 4;
    s.limits.max_object_members = 4;
    s
}

/// A `ping` whose params hold `value` under `_meta.x`: the message, `params` and `_meta` are
/// three levels around what `value` nests.
fn ping_with(id: Value, value: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"ping","params":{"_meta":{"x":value}}})
}

fn nested(levels: usize) -> Value {
    (0..levels).fold(json!(1), |inner, _| json!([inner]))
}

#[tokio::test]
async fn json_shape_limits_refuse_a_request_under_its_id_and_serve_one_at_the_limit() {
    let server = start(shape_limited());
    let mut client = Client::initialized(&server).await;
    // (kind, at the limit, over it).
    let cases = [
        ("depth", nested(5), nested(6)),
        ("string", json!("s".repeat(32)), json!("s".repeat(33))),
        ("array", json!([1, 2, 3, 4]), json!([1, 2, 3, 4, 5])),
        (
            "object",
            json!({"a":1,"b":2,"c":3,"d":4}),
            json!({"a":1,"b":2,"c":3,"d":4,"e":5}),
        ),
    ];
    for (kind, at, over) in cases {
        let id = json!(format!("{kind}-at"));
        client.send_json(ping_with(id.clone(), at)).await;
        assert_result(&client.recv_response(&id).await, &id);

        let id = json!(format!("{kind}-over"));
        client.send_json(ping_with(id.clone(), over)).await;
        let error = assert_error(&client.recv_response(&id).await, &id, -32600);
        let limit = if kind == "depth" {
            8
        } else if kind == "string" {
            32
        } else {
            4
        };
        assert_eq!(
            error["data"],
            json!({"kind": kind, "limit": limit}),
            "{error}"
        );
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains(&limit.to_string())),
            "the message names the limit: {error}"
        );
        assert_eq!(metric(&server, &rejected(&format!("json_{kind}"))).await, 1);
    }
    client.expect_nothing_pending().await;
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn a_notification_over_a_shape_limit_gets_nothing_and_a_batch_is_refused_whole() {
    let server = start(shape_limited());
    let mut client = Client::initialized(&server).await;
    client
        .send_json(json!({
            "jsonrpc":"2.0","method":"notifications/cancelled",
            "params":{"requestId":1,"reason":"x".repeat(64)},
        }))
        .await;
    client.expect_nothing_pending().await;
    assert_eq!(metric(&server, &rejected("json_string")).await, 1);

    client
        .send_json(json!([
            {"jsonrpc":"2.0","id":"fine","method":"ping"},
            ping_with(json!("too-deep"), nested(6)),
        ]))
        .await;
    let response = client.recv().await;
    let error = assert_error(&response, &Value::Null, -32600);
    assert_eq!(
        error["data"],
        json!({"kind": "depth", "limit": 8}),
        "{error}"
    );
    client.expect_nothing_pending().await;
    assert_eq!(metric(&server, &rejected("json_depth")).await, 1);
    assert_eq!(client.request("ping", json!({})).await["result"], json!({}));
}

#[tokio::test]
async fn a_megabyte_batch_over_its_length_is_refused_with_its_count() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let entries = 512 * 1024;
    let frame = format!("[{}0]", "0,".repeat(entries - 1));
    client.send_text(&frame).await;
    let error = assert_error(&client.recv().await, &Value::Null, -32010);
    let limit = settings().limits.max_batch_len;
    assert_eq!(error["data"], json!({"limit": limit, "received": entries}));
    assert_eq!(metric(&server, &rejected("batch_too_large")).await, 1);
    client.expect_nothing_pending().await;
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn a_method_outside_the_allow_list_is_answered_as_an_unknown_method() {
    let mut s = settings();
    // "no/such" is allowed, so that it reaches the router and is answered as unknown.
    s.limits.allowed_methods = ["initialize", "ping", "tools/list", "no/such"]
        .map(String::from)
        .to_vec();
    let server = start(s);
    let mut client = Client::initialized(&server).await;
    let refused = client
        .request(
            "tools/call",
            json!({"name":"echo","arguments":{"text":"x"}}),
        )
        .await;
    let unknown = client.request("no/such", json!({})).await;
    let refused = assert_error(&refused, &refused["id"], -32601);
    let unknown = assert_error(&unknown, &unknown["id"], -32601);
    assert_eq!(refused["data"], json!({"method": "tools/call"}));
    assert_eq!(unknown["data"], json!({"method": "no/such"}));
    assert_eq!(refused["message"], unknown["message"]);
    assert_eq!(metric(&server, &rejected("method_not_allowed")).await, 1);
    // Allowed methods are served; notifications are not subject to the list.
    let tools = client.request("tools/list", json!({})).await;
    assert!(tools["result"]["tools"].is_array(), "{tools}");
    client
        .send_json(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await;
    client.expect_nothing_pending().await;
    assert_server_alive(&server).await;

    let mut invalid = settings();
    invalid.limits.allowed_methods = vec!["ping".into()];
    let error = invalid.validate().expect_err("no session could start");
    assert!(error.to_string().contains("initialize"), "{error}");
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct LinesArgs {
    /// Lines at `info`.
    info: u32,
    /// Lines at `debug` (below the session's level).
    debug: u32,
}

/// Logs its lines at once, without waiting in between.
async fn chatty(args: LinesArgs, ctx: RequestContext) -> Result<String, ToolError> {
    for i in 0..args.debug {
        ctx.log(LogLevel::Debug, format!("debug {i}"));
    }
    for i in 0..args.info {
        ctx.log(LogLevel::Info, format!("info {i}"));
    }
    Ok("logged".into())
}

fn with_chatty(s: Settings) -> RunningServer {
    start_with(s, |b| {
        b.tool(Tool::new("chatty", "Logs lines at once.", chatty))
    })
}

/// Calls `chatty` and returns the log lines that came before its response.
async fn log_lines_of(client: &mut Client, info: u32, debug: u32) -> Vec<Value> {
    let response = client
        .call_tool("chatty", json!({"info": info, "debug": debug}))
        .await;
    assert_eq!(
        response["result"]["content"][0]["text"], "logged",
        "{response}"
    );
    let lines: Vec<Value> = client.backlog.drain(..).collect();
    for line in &lines {
        assert_eq!(line["method"], "notifications/message", "{line}");
    }
    lines
}

#[tokio::test]
async fn log_lines_over_a_requests_budget_are_dropped_and_counted() {
    let mut s = settings();
    s.limits.log_lines_per_second = 1;
    s.limits.log_lines_burst = 5;
    let server = with_chatty(s);
    let mut client = Client::initialized(&server).await;
    // Lines below the session's level (info) are dropped before the budget: they use none.
    let lines = log_lines_of(&mut client, 50, 100).await;
    let sent = lines.len() as u64;
    // A token a second: the five of the burst, and one more only if a second went by.
    assert!((5..=6).contains(&sent), "{lines:?}");
    assert_eq!(lines[0]["params"]["data"], "info 0");
    wait_metric(&server, &dropped("log_lines"), 50 - sent).await;
    // The budget is per request: the next call has its own.
    let lines = log_lines_of(&mut client, 3, 0).await;
    assert_eq!(lines.len(), 3);
    client.expect_nothing_pending().await;
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn notifications_past_the_queue_cap_are_dropped_not_held() {
    let mut s = settings();
    s.limits.max_queued_notifications = 10;
    ten_of_a_hundred_lines_queued(s).await;
}

#[tokio::test]
async fn notifications_past_the_queues_bytes_are_dropped_not_held() {
    let mut s = settings();
    // Each line's data is `"info N"`, 8 bytes for N < 10: ten of them fit, with room for
    // less than another.
    s.limits.max_queued_notification_bytes = 10 * 8 + 7;
    ten_of_a_hundred_lines_queued(s).await;
}

/// With `s` capping the session's queue at ten lines of `chatty` (by number or bytes): of
/// 100 logged at once, before the session drains its queue, ten are sent and 90 counted
/// dropped; drained, the queue takes as many again (what it held was given back).
async fn ten_of_a_hundred_lines_queued(mut s: Settings) {
    s.limits.log_lines_per_second = 0;
    let server = with_chatty(s);
    let mut client = Client::initialized(&server).await;
    let lines = log_lines_of(&mut client, 100, 0).await;
    assert_eq!(lines.len(), 10, "{lines:?}");
    assert_eq!(lines[9]["params"]["data"], "info 9");
    wait_metric(&server, &dropped("queued_notifications"), 90).await;
    assert_eq!(log_lines_of(&mut client, 10, 0).await.len(), 10);
    assert_server_alive(&server).await;
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WordyArgs {
    lines: usize,
    bytes: usize,
}

#[tokio::test]
async fn a_client_that_stops_reading_is_held_at_most_the_queues_bytes_of_large_lines() {
    const LINES: usize = 2000;
    const BYTES: usize = 64 << 10;
    let mut s = settings();
    s.limits.log_lines_per_second = 0;
    let done = std::sync::Arc::new(tokio::sync::Notify::new());
    let told = done.clone();
    // Logs its lines a millisecond apart: its session drains them as they come, as long as
    // its socket takes them.
    let wordy = move |args: WordyArgs, ctx: RequestContext| {
        let done = told.clone();
        async move {
            let line = "x".repeat(args.bytes);
            for _ in 0..args.lines {
                ctx.log(LogLevel::Info, &line);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            done.notify_one();
            Ok::<_, ToolError>("logged".to_owned())
        }
    };
    let server = start_with(s, |b| {
        b.tool(Tool::new("wordy", "Logs large lines.", wordy))
    });
    let mut client = Client::initialized(&server).await;
    let call = client.fresh_id();
    client
        .send_json(json!({"jsonrpc":"2.0","id":call,"method":"tools/call",
            "params":{"name":"wordy","arguments":{"lines":LINES,"bytes":BYTES}}}))
        .await;
    // 125 MiB of lines, not one read until the tool is done: what the socket's buffers do
    // not take waits in the session's queue, up to its 16 MiB.
    done.notified().await;
    let mut delivered = 0;
    let response = loop {
        let message = client.recv().await;
        if message.get("id") == Some(&call) {
            break message;
        }
        assert_eq!(message["method"], "notifications/message");
        assert_eq!(
            message["params"]["data"].as_str().map(str::len),
            Some(BYTES)
        );
        delivered += 1;
    };
    assert_eq!(
        response["result"]["content"][0]["text"], "logged",
        "{response}"
    );
    // Every line was sent or counted as dropped; most were dropped (without the queue's
    // bytes bounded, none was: 2000 lines are fewer than the 4096 it holds).
    wait_metric(
        &server,
        &dropped("queued_notifications"),
        (LINES - delivered) as u64,
    )
    .await;
    assert!(
        delivered < LINES / 2,
        "{delivered} of {LINES} lines delivered"
    );
    client.expect_nothing_pending().await;
    assert_server_alive(&server).await;
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct FanOutArgs {
    requests: usize,
}

/// Asks the client for its roots `requests` times at once; tells how many were answered and
/// how many refused for being too many.
async fn fan_out(args: FanOutArgs, ctx: RequestContext) -> Result<String, ToolError> {
    let outcomes = join_all((0..args.requests).map(|_| ctx.list_roots())).await;
    let answered = outcomes.iter().filter(|o| o.is_ok()).count();
    let too_many = outcomes
        .iter()
        .filter(|o| matches!(o, Err(mcp_ws::ClientRequestError::TooMany { limit: 3 })))
        .count();
    Ok(format!("answered={answered} too_many={too_many}"))
}

#[tokio::test]
async fn a_tools_requests_to_the_client_past_its_cap_fail_at_once() {
    let mut s = settings();
    s.limits.max_in_flight_per_session = 3;
    let server = start_with(s, |b| {
        b.tool(Tool::new("fan_out", "Asks at once.", fan_out))
    });
    let mut client = Client::initialized(&server).await;
    let call = client.fresh_id();
    client
        .send_json(json!({"jsonrpc":"2.0","id":call,"method":"tools/call",
            "params":{"name":"fan_out","arguments":{"requests":10}}}))
        .await;
    // Three reach the client; the tool waits for them. (A fourth would be read before the
    // tool's response, and fail `expect_nothing_pending` below.)
    for _ in 0..3 {
        let request = client.recv().await;
        assert_eq!(request["method"], "roots/list", "{request}");
        client
            .send_json(json!({"jsonrpc":"2.0","id":request["id"],"result":{"roots":[]}}))
            .await;
    }
    let response = client.recv_response(&call).await;
    assert_eq!(
        assert_result(&response, &call)["content"][0]["text"],
        "answered=3 too_many=7"
    );
    wait_metric(&server, &rejected("client_requests"), 7).await;
    client.expect_nothing_pending().await;
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn a_subscribed_uri_over_its_limit_is_refused() {
    let mut s = settings();
    s.limits.max_subscription_uri_bytes = 64;
    let server = start(s);
    let mut client = Client::initialized(&server).await;
    let long = format!("mcp-ws://demo/{}", "x".repeat(64));
    let response = client
        .request("resources/subscribe", json!({"uri": long}))
        .await;
    let error = assert_error(&response, &response["id"], -32602);
    assert_eq!(error["data"], json!({"limit": 64}));
    assert_eq!(metric(&server, &rejected("subscriptions")).await, 1);
    let response = client
        .request(
            "resources/subscribe",
            json!({"uri": "mcp-ws://demo/readme"}),
        )
        .await;
    assert_result(&response, &response["id"]);
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn a_message_over_the_size_limit_is_counted() {
    let mut s = settings();
    s.limits.max_message_bytes = 1024;
    let server = start(s);
    let mut client = Client::initialized(&server).await;
    client
        .send_json(
            json!({"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"x".repeat(1024)}}),
        )
        .await;
    let close = client.recv_close().await.expect("a close frame");
    assert_eq!(close.code, CloseCode::Size);
    assert_eq!(metric(&server, &rejected("message_too_large")).await, 1);
    assert_server_alive(&server).await;
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SizedArgs {
    /// How many bytes of text the result carries.
    bytes: usize,
}

/// Calls of `sized` run so far.
static SIZED_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Returns `bytes` bytes of text, counting its runs.
async fn sized(args: SizedArgs, _ctx: RequestContext) -> Result<String, ToolError> {
    SIZED_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    Ok("x".repeat(args.bytes))
}

/// The -32603 of an answer over a 64 KiB limit, its data naming the size and the setting.
fn assert_answer_too_large(response: &Value, id: &Value) {
    let error = crate::support::assert_error(response, id, -32603);
    let data = &error["data"];
    assert_eq!(
        (&data["limit"], &data["setting"]),
        (&json!(65536), &json!("limits.max_message_bytes")),
        "{error}"
    );
    let encoded = data["encodedSize"].as_u64().expect("encodedSize");
    assert!(encoded > 100_000 && encoded < 100_200, "{error}");
}

#[tokio::test]
async fn an_answer_over_the_message_limit_is_an_error_and_the_session_goes_on() {
    let mut s = settings();
    s.limits.max_message_bytes = 64 * 1024;
    let server = start_with(s, |b| {
        b.tool(Tool::new("sized", "Returns as many bytes as asked.", sized))
    });
    let mut client = Client::initialized(&server).await;
    let too_large = json!({"jsonrpc": "2.0", "id": "big", "method": "tools/call",
                           "params": {"name": "sized", "arguments": {"bytes": 100_000}}});
    let runs = || SIZED_RUNS.load(std::sync::atomic::Ordering::SeqCst);
    let response = client.send_request(too_large.clone()).await;
    assert_answer_too_large(&response, &json!("big"));
    // Not remembered as an answer: the same id sent again runs again, with the same error.
    let response = client.send_request(too_large).await;
    assert_answer_too_large(&response, &json!("big"));
    assert_eq!(runs(), 2, "the id was run again, not answered from memory");
    // Nor kept for a retry of its idempotency key, nor run again for it: the call ran, so
    // the retry is told its result was not kept (-32032), as when Redis had no room.
    let keyed = |id: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "sized", "arguments": {"bytes": 100_000},
                          "_meta": {"idempotencyKey": "k-big"}}})
    };
    let response = client.send_request(keyed("keyed-1")).await;
    assert_answer_too_large(&response, &json!("keyed-1"));
    assert_eq!(runs(), 3, "the keyed call ran");
    let retry = client.send_request(keyed("keyed-2")).await;
    crate::support::assert_error(&retry, &json!("keyed-2"), -32032);
    assert_eq!(runs(), 3, "and ran once");
    let fits = client.call_tool("sized", json!({"bytes": 60_000})).await;
    assert_eq!(
        fits["result"]["content"][0]["text"].as_str().map(str::len),
        Some(60_000),
        "a result within the limit is answered"
    );
    client.expect_nothing_pending().await;

    let http = crate::support::http::Http::new(&server);
    let (status, response) = http
        .json(
            json!(7),
            "tools/call",
            crate::support::meta::stateless(
                json!({"name": "sized", "arguments": {"bytes": 100_000}}),
            ),
        )
        .await;
    assert_eq!(status, 200, "{response}");
    assert_answer_too_large(&response, &json!(7));
    assert_server_alive(&server).await;
}
