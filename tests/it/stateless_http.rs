//! The 2026-07-28 revision over Streamable HTTP, and both eras and both transports against one
//! server at once. The rules checked, over real HTTP (`reqwest`, SSE read with `sse-stream`)
//! and real WebSockets:
//!
//! - One server serves a session-era WebSocket session, 2026 requests over WebSocket and
//!   2026 POSTs at the same time, each in its era's shape (`resultType`, the server's identity
//!   in `_meta` and caching hints only for 2026); a registry change reaches the session as an
//!   unsolicited `list_changed` and nobody else.
//! - A 2026 POST is self-contained: no session id is issued or needed (one sent is ignored),
//!   it holds no session slot once answered, its `_meta` is required.
//! - Headers against the body: a missing or different `MCP-Protocol-Version`, `Mcp-Method` or
//!   `Mcp-Name` is HTTP 400 with -32020 carrying the request's id, and nothing runs.
//! - Statuses of 2026 errors: -32022 (`supported`, `requested`), -32021
//!   (`requiredCapabilities`) and malformed `_meta` (-32602) are 400; removed methods
//!   (-32601) are 404; other errors (a missing resource: -32602 with its `uri`) are 200.
//! - Log lines go on the POST's own stream only for a request that set a level; progress too
//!   (on its token), before the result, with no SSE event ids (no resumption in 2026).
//! - Multi round-trip requests over separate POSTs: the state carries the answers from host
//!   to host; a tampered or replayed state is -32602 and nothing runs.
//! - `subscriptions/listen`: the POST's SSE stream carries the acknowledgement first, then
//!   only the notifications its filter asked for, tagged with its id; two listens are kept
//!   apart; a client that goes away ends its listen (its exchange is gone: `mcp_sessions`,
//!   and the URIs it held leave `mcp_subscriptions`);
//!   shutdown ends it with a result.
//! - A 2026 POST retried with its `idempotencyKey` by the same identity gets the stored
//!   answer under its own id and runs nothing (each POST is a session of its own: the key,
//!   not the id, finds it).
//! - Shutdown and a 2026 POST in flight: new work is refused at once (503) while it runs
//!   on and is answered within the grace (a POST that starts no new work, a list, is still
//!   answered); one that outlives the grace is cancelled and
//!   answered 503 with -32004 and its own id.
//! - Cancellation is the client going away: closing a 2026 stream stops its request
//!   (`mcp_workers`, `mcp_cancelled_total`), and so does leaving a POST that has sent
//!   nothing yet (an answer slower than the keep-alive interval comes as a stream, whose
//!   comments notice); a 2026 notification POST is 202 and ignored.
//!
//! No timing assertions: answers that must come first and gauges polled in `/metrics`.

use crate::support::http::{json_reply, metric, send, wait_metric, Events, Http};
use crate::support::meta::*;
use crate::support::stateless::*;
use crate::support::*;
use mcp_ws::{RunningServer, Settings};
use serde_json::{json, Value};

/// Settings for streams whose client may go away: keep-alive comments often, so the server
/// notices a closed connection when it writes one.
fn streaming_settings() -> Settings {
    let mut s = stateless_settings();
    s.sessions.sse_keep_alive_ms = 20;
    s
}

fn names(result: &Value, member: &str) -> Vec<Value> {
    result[member]
        .as_array()
        .expect("a list")
        .iter()
        .map(|item| item["name"].clone())
        .collect()
}

/// Posts a 2026 request whose answer is a stream.
async fn stream(http: &Http, id: Value, method: &str, params: Value) -> Events {
    Events::of(send(http.post(&request(id, method, params))).await)
}

// ---------------------------------------------------------------------------------------
// Both eras, both transports

#[tokio::test]
async fn both_eras_over_both_transports_at_once_each_in_its_own_shape() {
    let (server, _) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    let mut session = Client::initialized(&server).await;
    let mut socket = Client::connect(&server).await;

    let echo = |text: &str| json!({"name": "echo", "arguments": {"text": text}});
    // Interleaved: all three in flight together.
    let (on_session, over_ws, over_http) = tokio::join!(
        session.request("tools/call", echo("session")),
        socket.request("tools/call", stateless(echo("socket"))),
        http.json(json!("h-1"), "tools/call", stateless(echo("post"))),
    );
    assert_eq!(
        text_of(&assert_session_result(&on_session, &on_session["id"])),
        "session"
    );
    assert_eq!(
        text_of(&assert_complete(&over_ws, &over_ws["id"])),
        "socket"
    );
    assert_eq!(over_http.0, 200);
    assert_eq!(
        text_of(&assert_complete(&over_http.1, &json!("h-1"))),
        "post"
    );

    let (on_session, over_ws, over_http) = tokio::join!(
        session.request("tools/list", json!({})),
        socket.request("tools/list", stateless(json!({}))),
        http.json(json!(2), "tools/list", stateless(json!({}))),
    );
    let on_session = assert_session_result(&on_session, &on_session["id"]);
    let over_ws = assert_complete(&over_ws, &over_ws["id"]);
    let over_http = assert_complete(&over_http.1, &json!(2));
    assert_cache_hints(&over_ws, LIST_TTL_MS);
    assert_cache_hints(&over_http, LIST_TTL_MS);
    assert_eq!(names(&on_session, "tools"), names(&over_ws, "tools"));
    assert_eq!(names(&on_session, "tools"), names(&over_http, "tools"));

    let greet = json!({"name": "greet", "arguments": {"name": "Ada"}});
    let response = session.request("prompts/get", greet.clone()).await;
    assert_session_result(&response, &response["id"]);
    let (status, response) = http.json(json!(3), "prompts/get", stateless(greet)).await;
    assert_eq!(status, 200);
    assert_complete(&response, &json!(3));

    // A registry change: the session hears of it unsolicited; the 2026 socket, which asked
    // for nothing, hears nothing.
    server
        .registry()
        .add_tool(plain_tool("arrived"))
        .expect("adds");
    assert_eq!(
        session.recv().await,
        json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}})
    );
    session.expect_nothing_pending().await;
    socket.expect_nothing_pending().await;
    let (_, response) = http
        .json(json!(4), "tools/list", stateless(json!({})))
        .await;
    let listed = names(&assert_complete(&response, &json!(4)), "tools");
    assert!(listed.contains(&json!("arrived")), "{listed:?}");
}

// ---------------------------------------------------------------------------------------
// The stateless POST

#[tokio::test]
async fn a_2026_post_is_answered_alone_and_holds_no_session_after() {
    let (server, _) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    let (status, response) = http
        .json(
            json!(1),
            "tools/call",
            stateless(json!({"name": "echo", "arguments": {"text": "alone"}})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(text_of(&assert_complete(&response, &json!(1))), "alone");

    // A session id sent along is ignored: no such session, and none is needed.
    let body = request(json!(2), "tools/list", stateless(json!({})));
    let response = send(
        http.post(&body)
            .header("Mcp-Session-Id", "0123456789abcdef0123456789abcdef"),
    )
    .await;
    let (status, response) = json_reply(response).await;
    assert_eq!(status, 200);
    assert_complete(&response, &json!(2));
    wait_metric(&server, "mcp_sessions", 0).await;

    // A 2026 header without `_meta` in the body is a malformed 2026 request.
    let body = request(json!("bare"), "tools/list", json!({}));
    let (status, response) = json_reply(send(http.post(&body)).await).await;
    assert_eq!(status, 400);
    assert_error(&response, &json!("bare"), -32602);
}

#[tokio::test]
async fn a_header_that_disagrees_with_the_body_is_400_32020_and_nothing_runs() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    let caps = json!({"elicitation": {}});
    let ask = request(
        json!("call"),
        "tools/call",
        stateless_with(
            caps.clone(),
            json!({"name": "ask_name", "arguments": {"greeting": "Hi"}}),
        ),
    );
    let read = request(
        json!(7),
        "resources/read",
        stateless_with(caps.clone(), json!({"uri": VAULT})),
    );
    let prompt = request(
        json!(8),
        "prompts/get",
        stateless_with(
            caps,
            json!({"name": "personal", "arguments": {"topic": "x"}}),
        ),
    );
    let version = "MCP-Protocol-Version";
    // (body, header to set or remove, its value: None removes it)
    let cases = [
        (&ask, version, Some("2025-11-25")),
        (&ask, version, None),
        (&ask, "Mcp-Method", None),
        (&ask, "Mcp-Method", Some("tools/list")),
        (&ask, "Mcp-Name", None),
        (&ask, "Mcp-Name", Some("ask_name_too")),
        (&read, "Mcp-Name", Some("mcp-ws://demo/readme")),
        (&read, "Mcp-Name", None),
        (&prompt, "Mcp-Name", Some("greet")),
    ];
    for (body, name, value) in cases {
        let message = refused_with_headers(&http, body, |headers| {
            headers.remove(name);
            if let Some(value) = value {
                headers.insert(name, value.parse().expect("a header value"));
            }
        })
        .await;
        assert!(message.contains(name), "{name}: {value:?}: {message}");
    }
    // A header sent twice (even the same value twice): an intermediary may route on either.
    for (body, name) in [(&ask, version), (&ask, "Mcp-Method"), (&read, "Mcp-Name")] {
        let message = refused_with_headers(&http, body, |headers| {
            let value = headers.get(name).expect("the header").clone();
            headers.append(name, value);
        })
        .await;
        assert!(
            message.contains("more than once"),
            "{name} twice: {message}"
        );
    }
    assert_eq!(fixtures.runs(), 0, "nothing ran");
    // The same requests with the right headers do run.
    for body in [&ask, &read, &prompt] {
        let (status, response) = json_reply(send(http.post(body)).await).await;
        assert_eq!(status, 200);
        assert_stateless_result(&response, &body["id"], "input_required");
    }
    assert_eq!(fixtures.runs(), 3);
}

/// A mismatch's error quotes at most 128 characters of each value, the client's long
/// values included: a 1.2 MB tool name drew a 4.2 MB error (each value quoted whole,
/// escaped), more than a message may take.
#[tokio::test]
async fn a_mismatchs_error_quotes_no_more_than_the_start_of_each_value() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    let long_name = "\u{1}".repeat(200_000);
    let call = request(
        json!(1),
        "tools/call",
        stateless_with(json!({}), json!({"name": long_name, "arguments": {}})),
    );
    let message = refused_with_headers(&http, &call, |headers| {
        headers.insert("Mcp-Name", "other".parse().expect("a header value"));
    })
    .await;
    assert!(message.contains("Mcp-Name"), "{message}");
    // The name's 128 characters, each escaped as `\u{1}` (6 bytes), and the rest.
    assert!(message.len() < 1000, "{} bytes", message.len());
    assert!(message.ends_with("\"…"), "{message}");
    let method = "x".repeat(200_000);
    let odd = request(json!(2), &method, stateless_with(json!({}), json!({})));
    let message = refused_with_headers(&http, &odd, |headers| {
        headers.insert("Mcp-Method", "tools/list".parse().expect("a header value"));
    })
    .await;
    assert!(message.len() < 1000, "{} bytes", message.len());
    assert_eq!(fixtures.runs(), 0, "nothing ran");
}

/// Posts `body` with the headers a client sends, as `change` leaves them: refused (400,
/// -32020 under the request's id); the error's message.
async fn refused_with_headers(
    http: &Http,
    body: &Value,
    change: impl FnOnce(&mut reqwest::header::HeaderMap),
) -> String {
    let mut headers = http
        .post(body)
        .build()
        .expect("a request")
        .headers()
        .clone();
    change(&mut headers);
    let response = send(
        http.client
            .post(&http.url)
            .headers(headers)
            .body(body.to_string()),
    )
    .await;
    let (status, response) = json_reply(response).await;
    assert_eq!(status, 400, "{response}");
    let error = assert_error(&response, &body["id"], -32020);
    error["message"].as_str().expect("a message").to_owned()
}

/// A tool whose `region` argument clients mirror in `Mcp-Param-Region`; its calls answer
/// `ran`.
struct RegionTool;

impl mcp_ws::tool::ToolHandler for RegionTool {
    fn call(
        &self,
        _arguments: mcp_ws::tool::Arguments,
        _ctx: mcp_ws::RequestContext,
    ) -> mcp_ws::tool::ToolFuture {
        Box::pin(async { Ok(mcp_ws::model::CallToolResult::text("ran")) })
    }
}

/// `Mcp-Param-*` headers sent twice, or beside arguments too deep to be read and checked
/// against them, are refused (400, -32020) and the tool does not run; the same call with
/// one header and readable arguments runs.
#[tokio::test]
async fn a_param_header_sent_twice_or_beside_unreadable_arguments_is_refused() {
    let mut settings = stateless_settings();
    settings.limits.max_json_depth = 0;
    let (server, _fixtures) = start_stateless(settings);
    let schema = json!({
        "type": "object",
        "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
    });
    server
        .registry()
        .add_tool(mcp_ws::Tool::from_handler(
            "regional",
            "Runs in a region.",
            schema,
            RegionTool,
        ))
        .expect("adds");
    let http = Http::new(&server);
    let call = |arguments: Value| {
        request(
            json!("regional"),
            "tools/call",
            stateless(json!({"name": "regional", "arguments": arguments})),
        )
    };
    let post = |body: &Value, regions: &[&str]| {
        let mut builder = http.post(body);
        for region in regions {
            builder = builder.header("Mcp-Param-Region", *region);
        }
        builder
    };
    let deep = (0..200).fold(json!(1), |inner, _| json!([inner]));
    let cases = [
        (
            call(json!({"region": "eu"})),
            vec!["eu", "eu"],
            "more than once",
        ),
        (
            call(json!({"region": "eu", "pad": deep})),
            vec!["eu"],
            "cannot be read",
        ),
    ];
    for (body, regions, expected) in &cases {
        let (status, response) = json_reply(send(post(body, regions)).await).await;
        assert_eq!(status, 400, "{response}");
        let error = assert_error(&response, &json!("regional"), -32020);
        let message = error["message"].as_str().expect("a message");
        assert!(message.contains(expected), "{message}");
    }
    let body = call(json!({"region": "eu"}));
    let (status, response) = json_reply(send(post(&body, &["eu"])).await).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(
        text_of(&assert_complete(&response, &json!("regional"))),
        "ran"
    );
}

/// A tool in two versions, only the second mirroring `region` in `Mcp-Param-Region`: a
/// caller is checked against the version it sees. With no rollout rule it sees version 1
/// and its call needs no header (it was refused: the highest version's headers were asked
/// of every caller); rolled out to version 2, its call without the header is refused and
/// with it runs version 2.
#[tokio::test]
async fn a_call_is_checked_against_the_headers_of_the_version_its_caller_sees() {
    for rolled_out in [false, true] {
        let mut settings = stateless_settings();
        if rolled_out {
            // Every HTTP client of this server is `anonymous` (no authentication).
            settings.rollout.rules = vec![mcp_ws::config::RolloutRule {
                tool: "regional".into(),
                version: "2".into(),
                identities: vec!["anonymous".into()],
                percent: 0.0,
            }];
        }
        let (server, _fixtures) = start_stateless(settings);
        for (version, region) in [
            ("1", json!({"type": "string"})),
            ("2", json!({"type": "string", "x-mcp-header": "Region"})),
        ] {
            let schema = json!({"type": "object", "properties": {"region": region}});
            let tool = mcp_ws::Tool::from_handler(
                "regional",
                "Runs in a region.",
                schema,
                VersionTool(version),
            )
            .version(version);
            server.registry().add_tool(tool).expect("adds");
        }
        let http = Http::new(&server);
        let body = request(
            json!("regional"),
            "tools/call",
            stateless(json!({"name": "regional", "arguments": {"region": "eu"}})),
        );
        let (status, response) = json_reply(send(http.post(&body)).await).await;
        if rolled_out {
            assert_eq!(status, 400, "{response}");
            let error = assert_error(&response, &json!("regional"), -32020);
            let message = error["message"].as_str().expect("a message");
            assert!(message.contains("Mcp-Param-Region"), "{message}");
            let with_header = http.post(&body).header("Mcp-Param-Region", "eu");
            let (status, response) = json_reply(send(with_header).await).await;
            assert_eq!(status, 200, "{response}");
            assert_eq!(
                text_of(&assert_complete(&response, &json!("regional"))),
                "version 2"
            );
        } else {
            assert_eq!(status, 200, "{response}");
            assert_eq!(
                text_of(&assert_complete(&response, &json!("regional"))),
                "version 1"
            );
        }
    }
}

/// A tool whose calls answer `version V`.
struct VersionTool(&'static str);

impl mcp_ws::tool::ToolHandler for VersionTool {
    fn call(
        &self,
        _arguments: mcp_ws::tool::Arguments,
        _ctx: mcp_ws::RequestContext,
    ) -> mcp_ws::tool::ToolFuture {
        let text = format!("version {}", self.0);
        Box::pin(async move { Ok(mcp_ws::model::CallToolResult::text(text)) })
    }
}

/// A request whose `_meta` names a version this server does not speak per request (a
/// handshake-era one, or one it does not know) gets -32022 with the versions it does
/// (HTTP 400), with no version header or one naming the same version: not -32020 for the
/// headers a 2026-07-28 request would have needed, which told the client to add them only
/// to be refused again. A version header naming another version is a mismatch, -32020.
#[tokio::test]
async fn a_request_naming_a_version_not_spoken_per_request_gets_32022() {
    let (server, _fixtures) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    for version in ["2025-11-25", "2099-01-01"] {
        let body = request(
            json!(1),
            "tools/call",
            with_meta(
                json!({"name": "echo", "arguments": {"text": "x"}}),
                json!({PROTOCOL_VERSION: version, CLIENT_CAPABILITIES: {}}),
            ),
        );
        for header in [None, Some(version)] {
            let mut post = http.bare(&body);
            if let Some(header) = header {
                post = post.header("MCP-Protocol-Version", header);
            }
            let (status, response) = json_reply(send(post).await).await;
            assert_eq!(status, 400, "{response}");
            let error = assert_error(&response, &json!(1), -32022);
            assert_eq!(error["data"]["requested"], version, "{response}");
            assert!(
                error["data"]["supported"]
                    .as_array()
                    .is_some_and(|s| s.contains(&json!(MODERN))),
                "{response}"
            );
        }
        let mismatched = http.bare(&body).header("MCP-Protocol-Version", MODERN);
        let (status, response) = json_reply(send(mismatched).await).await;
        assert_eq!(status, 400, "{response}");
        assert_error(&response, &json!(1), -32020);
    }
}

/// Params that do not read (a member named twice, in `_meta` or beside it) get -32602 and
/// HTTP 400 saying so. (The `_meta` that did not read was taken for none:
/// the error said its version was "required", though the request named it.)
#[tokio::test]
async fn params_naming_a_member_twice_get_32602_saying_so() {
    let (server, _fixtures) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    let meta = format!(r#""{PROTOCOL_VERSION}":"{MODERN}","{CLIENT_CAPABILITIES}":{{}}"#);
    for (method, params, twice) in [
        (
            "tools/call",
            format!(
                r#"{{"name":"echo","arguments":{{"text":"x"}},"_meta":{{{meta},"{PROTOCOL_VERSION}":"{MODERN}"}}}}"#
            ),
            PROTOCOL_VERSION,
        ),
        (
            "tools/list",
            format!(r#"{{"_meta":{{"{CLIENT_CAPABILITIES}":{{}},{meta}}}}}"#),
            CLIENT_CAPABILITIES,
        ),
        (
            "prompts/get",
            format!(
                r#"{{"name":"greet","name":"greet","arguments":{{"name":"a"}},"_meta":{{{meta}}}}}"#
            ),
            "name",
        ),
    ] {
        let text = format!(r#"{{"jsonrpc":"2.0","id":7,"method":"{method}","params":{params}}}"#);
        // What `post` takes its headers from: the same request, each member once.
        let named = match method {
            "tools/call" => json!({"name": "echo"}),
            "prompts/get" => json!({"name": "greet"}),
            _ => json!({}),
        };
        let headers = request(json!(7), method, named);
        let (status, response) = json_reply(send(http.post(&headers).body(text)).await).await;
        assert_eq!(status, 400, "{method}: {response}");
        let error = assert_error(&response, &json!(7), -32602);
        let message = error["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("params do not read: duplicate field") && message.contains(twice),
            "{method}: {response}"
        );
    }
}

/// A name that is not plain visible ASCII comes in `Mcp-Name` base64-encoded
/// (`=?base64?…?=`, as the SDKs and this crate's client send it), and is compared decoded.
#[tokio::test]
async fn an_encoded_mcp_name_is_compared_decoded() {
    let (server, _fixtures) = start_stateless(stateless_settings());
    server
        .registry()
        .add_tool(plain_tool("café"))
        .expect("adds");
    let http = Http::new(&server);
    let call = request(
        json!("café"),
        "tools/call",
        stateless(json!({"name": "café", "arguments": {}})),
    );
    let encoded = http.post(&call).build().expect("a request");
    assert_eq!(encoded.headers()["Mcp-Name"], "=?base64?Y2Fmw6k=?=");
    let (status, response) = json_reply(send(http.post(&call)).await).await;
    assert_eq!(status, 200, "{response}");
    assert_eq!(text_of(&assert_complete(&response, &json!("café"))), "done");
}

#[tokio::test]
async fn errors_of_2026_posts_carry_their_http_status() {
    let (server, _) = start_stateless(stateless_settings());
    let http = Http::new(&server);

    let params = with_meta(
        json!({}),
        json!({PROTOCOL_VERSION: "2099-01-01", CLIENT_CAPABILITIES: {}}),
    );
    let (status, response) = http.json(json!(1), "server/discover", params).await;
    assert_eq!(status, 400);
    let error = assert_error(&response, &json!(1), -32022);
    assert_eq!(
        error["data"],
        json!({"supported": [MODERN], "requested": "2099-01-01"})
    );

    let ask = json!({"name": "ask_name", "arguments": {"greeting": "Hi"}});
    let (status, response) = http.json(json!(2), "tools/call", stateless(ask)).await;
    assert_eq!(status, 400);
    let error = assert_error(&response, &json!(2), -32021);
    assert_eq!(
        error["data"],
        json!({"requiredCapabilities": {"elicitation": {}}})
    );

    let (status, response) = http
        .json(
            json!(3),
            "tools/list",
            json!({"_meta": {PROTOCOL_VERSION: MODERN}}),
        )
        .await;
    assert_eq!(status, 400);
    assert_error(&response, &json!(3), -32602);

    for (method, params) in [
        ("ping", json!({})),
        ("logging/setLevel", json!({"level": "debug"})),
        ("resources/subscribe", json!({"uri": README})),
        ("resources/unsubscribe", json!({"uri": README})),
        ("initialize", initialize_params("2025-11-25")),
    ] {
        let (status, response) = http.json(json!(method), method, stateless(params)).await;
        assert_eq!(status, 404, "{method}");
        let error = assert_error(&response, &json!(method), -32601);
        assert_eq!(error["data"], json!({"method": method}));
    }

    let missing = "mcp-ws-test://missing";
    let (status, response) = http
        .json(
            json!(5),
            "resources/read",
            stateless(json!({"uri": missing})),
        )
        .await;
    assert_eq!(status, 200);
    let error = assert_error(&response, &json!(5), -32602);
    assert_eq!(error["data"], json!({"uri": missing}));
}

// ---------------------------------------------------------------------------------------
// Streams of one request: logs, progress

/// Stateless hosts of one thread share their `_meta` parse caches: a request must still be
/// served with its own capabilities when the one before it declared others.
#[tokio::test]
async fn each_2026_post_is_served_with_its_own_capabilities_when_they_alternate() {
    let (server, _) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    let ask = json!({"name": "ask_name", "arguments": {"greeting": "Hi"}});
    for round in 0..3 {
        let asks = json!(format!("asks-{round}"));
        let (status, response) = http
            .json(
                asks.clone(),
                "tools/call",
                stateless_with(all_asks(), ask.clone()),
            )
            .await;
        assert_eq!(status, 200, "round {round}: {response}");
        assert_input_required(&response, &asks, &["name"]);

        // Capabilities of its own, without elicitation (`{}` would not reach the cache).
        let other = json!(format!("other-{round}"));
        let sampling_only = stateless_with(json!({"sampling": {}}), ask.clone());
        let (status, response) = http.json(other.clone(), "tools/call", sampling_only).await;
        assert_eq!(status, 400, "round {round}: {response}");
        assert_error(&response, &other, -32021);
    }
}

#[tokio::test]
async fn log_lines_go_on_the_post_stream_only_for_a_request_that_set_a_level() {
    let (server, _) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    let chatty = stateless(json!({"name": "chatty", "arguments": {}}));
    // Nothing to send before the answer: a plain JSON body.
    let (status, response) = http.json(json!(1), "tools/call", chatty.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(text_of(&assert_complete(&response, &json!(1))), "chatted");

    let params = add_meta(chatty, LOG_LEVEL, json!("warning"));
    let mut events = stream(&http, json!(2), "tools/call", params).await;
    for level in ["warning", "error"] {
        let line = events.expect().await;
        assert_eq!(
            line,
            json!({"jsonrpc": "2.0", "method": "notifications/message",
                   "params": {"level": level, "data": format!("{level} line")}})
        );
    }
    let response = events.expect().await;
    assert_eq!(text_of(&assert_complete(&response, &json!(2))), "chatted");
    events.expect_end().await;
}

#[tokio::test]
async fn progress_of_a_2026_post_streams_before_its_result() {
    let (server, _) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    let params = add_meta(
        stateless(json!({"name": "steps", "arguments": {"n": 3}})),
        "progressToken",
        json!("tok"),
    );
    let mut events = stream(&http, json!("p"), "tools/call", params).await;
    for step in 1..=3 {
        assert_eq!(
            events.expect().await,
            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": "tok", "progress": f64::from(step),
                              "total": 3.0, "message": format!("step {step}")}})
        );
    }
    let response = events.expect().await;
    assert_eq!(
        text_of(&assert_complete(&response, &json!("p"))),
        "stepped 3"
    );
    events.expect_end().await;
}

#[tokio::test]
async fn closing_a_2026_stream_cancels_its_request() {
    let (server, fixtures) = start_stateless(streaming_settings());
    let http = Http::new(&server);
    let params = add_meta(
        stateless(json!({"name": "step_then_hold", "arguments": {}})),
        "progressToken",
        json!(1),
    );
    let mut events = stream(&http, json!("held"), "tools/call", params).await;
    let progress = events.expect().await;
    assert_eq!(progress["method"], "notifications/progress", "{progress}");
    assert_eq!(metric(&server, "mcp_workers").await, 1);
    drop(events);
    wait_metric(&server, "mcp_workers", 0).await;
    wait_metric(&server, "mcp_sessions", 0).await;
    // Stopped by the hangup: the gate it waits for was never opened.
    assert_eq!(metric(&server, "mcp_cancelled_total").await, 1);
    assert_eq!(fixtures.gate.available_permits(), 0);
}

#[tokio::test]
async fn a_2026_notification_post_is_accepted_and_ignored() {
    let (server, _) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    let body = cancelled(&json!("nothing-in-flight"));
    let response = send(
        http.bare(&body)
            .header("MCP-Protocol-Version", MODERN)
            .header("Mcp-Method", "notifications/cancelled"),
    )
    .await;
    assert_eq!(response.status().as_u16(), 202);
    assert_eq!(response.text().await.expect("a body"), "");
    wait_metric(&server, "mcp_sessions", 0).await;
}

// ---------------------------------------------------------------------------------------
// Multi round-trip requests over separate POSTs

#[tokio::test]
async fn a_multi_round_request_carries_its_state_from_post_to_post() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    let params = stateless_with(all_asks(), json!({"name": "interview", "arguments": {}}));
    let draft = json!({"role": "assistant", "content": {"type": "text", "text": "Ada counts."},
                       "model": "m"});
    // Each round answers only the ask before it: earlier answers travel in the state.
    let rounds = [
        (None, "name"),
        (Some(json!({"name": accept_name("Ada")})), "draft"),
        (Some(json!({"draft": draft})), "roots"),
    ];
    let mut state: Option<String> = None;
    for (round, (answer, asks)) in rounds.into_iter().enumerate() {
        let id = json!(round);
        let body = match answer {
            None => params.clone(),
            Some(answer) => retry(&params, answer, state.as_deref()),
        };
        let (status, response) = http.json(id.clone(), "tools/call", body).await;
        assert_eq!(status, 200);
        state = Some(assert_input_required(&response, &id, &[asks]).1);
    }
    let roots = json!({"roots": {"roots": [{"uri": "file:///r"}]}});
    let (status, response) = http
        .json(
            json!("last"),
            "tools/call",
            retry(&params, roots, state.as_deref()),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        text_of(&assert_complete(&response, &json!("last"))),
        "name=Ada; draft=Ada counts.; roots=file:///r"
    );
    assert_eq!(
        fixtures.runs(),
        4,
        "each POST ran the tool in a host of its own"
    );
    wait_metric(&server, "mcp_sessions", 0).await;
}

#[tokio::test]
async fn a_tampered_or_replayed_state_is_refused_over_http_and_nothing_runs() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    let caps = json!({"elicitation": {}});
    let params = stateless_with(
        caps.clone(),
        json!({"name": "ask_name", "arguments": {"greeting": "Hi"}}),
    );
    let (_, response) = http.json(json!(1), "tools/call", params.clone()).await;
    let (_, state) = assert_input_required(&response, &json!(1), &["name"]);
    let answer = json!({"name": accept_name("Ada")});

    let mut tampered = state.clone().into_bytes();
    let middle = tampered.len() / 3;
    tampered[middle] = if tampered[middle] == b'x' { b'y' } else { b'x' };
    let tampered = String::from_utf8(tampered).expect("ascii");
    let other_tool = stateless_with(
        caps,
        json!({"name": "ask_name_too", "arguments": {"greeting": "Hi"}}),
    );
    for (id, body) in [
        (2, retry(&params, answer.clone(), Some(&tampered))),
        (3, retry(&other_tool, answer.clone(), Some(&state))),
    ] {
        let (status, response) = http.json(json!(id), "tools/call", body).await;
        assert_eq!(status, 200, "{response}");
        assert_error(&response, &json!(id), -32602);
    }
    assert_eq!(fixtures.runs(), 1);
    let (_, response) = http
        .json(json!(4), "tools/call", retry(&params, answer, Some(&state)))
        .await;
    assert_eq!(text_of(&assert_complete(&response, &json!(4))), "Hi, Ada!");
}

// ---------------------------------------------------------------------------------------
// subscriptions/listen over HTTP

async fn listen(http: &Http, id: &Value, filter: Value) -> Events {
    let mut events = stream(
        http,
        id.clone(),
        "subscriptions/listen",
        stateless(json!({"notifications": filter.clone()})),
    )
    .await;
    let ack = events.expect().await;
    assert_eq!(
        ack,
        json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
               "params": {"notifications": filter, "_meta": {SUBSCRIPTION_ID: id}}}),
        "the acknowledgement comes first"
    );
    events
}

#[tokio::test]
async fn a_listen_stream_carries_its_ack_then_its_tagged_notifications_until_the_client_goes() {
    let (server, _) = start_stateless(streaming_settings());
    let registry = server.registry().clone();
    let http = Http::new(&server);
    let tools_id = json!("tools");
    let mut tools = listen(
        &http,
        &tools_id,
        json!({"toolsListChanged": true, "resourceSubscriptions": [README]}),
    )
    .await;
    let prompts_id = json!(2);
    let mut prompts = listen(&http, &prompts_id, json!({"promptsListChanged": true})).await;
    assert_eq!(
        metric(&server, "mcp_sessions").await,
        2,
        "one host per listen"
    );
    assert_eq!(
        metric(&server, "mcp_subscriptions").await,
        1,
        "the URI a listen holds is a subscription"
    );

    registry.add_tool(plain_tool("t1")).expect("adds");
    assert_eq!(
        tools.expect().await,
        tagged("notifications/tools/list_changed", &tools_id)
    );
    registry.resource_updated(README);
    assert_eq!(
        tools.expect().await,
        json!({"jsonrpc": "2.0", "method": "notifications/resources/updated",
               "params": {"_meta": {SUBSCRIPTION_ID: tools_id}, "uri": README}})
    );
    // A prompt change reaches the other stream only: the tools stream's next message is the
    // tool change made after it.
    registry
        .add_prompt(mcp_ws::Prompt::new("p1", "a prompt", |_args, _ctx| async {
            Ok(mcp_ws::model::GetPromptResult::new(vec![]))
        }))
        .expect("adds");
    assert_eq!(
        prompts.expect().await,
        tagged("notifications/prompts/list_changed", &prompts_id)
    );
    registry.add_tool(plain_tool("t2")).expect("adds");
    assert_eq!(
        tools.expect().await,
        tagged("notifications/tools/list_changed", &tools_id)
    );

    drop(tools);
    wait_metric(&server, "mcp_sessions", 1).await;
    wait_metric(&server, "mcp_subscriptions", 0).await;
    drop(prompts);
    wait_metric(&server, "mcp_sessions", 0).await;
}

#[tokio::test]
async fn shutdown_ends_an_http_listen_with_its_result() {
    let (server, _) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    let id = json!("until-shutdown");
    let mut events = listen(&http, &id, json!({"toolsListChanged": true})).await;
    let stopper = stop_in_background(server);
    let response = events.expect().await;
    let result = assert_complete(&response, &id);
    assert_eq!(result["_meta"][SUBSCRIPTION_ID], id);
    events.expect_end().await;
    assert_stopped(stopper).await;
}

/// Settings with a shutdown grace of `grace_ms`.
fn grace_settings(grace_ms: u64) -> Settings {
    let mut s = stateless_settings();
    s.shutdown.grace_ms = grace_ms;
    s
}

/// Posts `step_then_hold` (no progress token: its answer is a JSON body) on a task of its
/// own, and waits until it runs.
async fn held_post(server: &RunningServer, http: &Http) -> tokio::task::JoinHandle<(u16, Value)> {
    let body = request(
        json!("held"),
        "tools/call",
        stateless(json!({"name": "step_then_hold", "arguments": {}})),
    );
    let post = http.post(&body);
    let held = tokio::spawn(async move { json_reply(send(post).await).await });
    wait_metric(server, "mcp_workers", 1).await;
    held
}

#[tokio::test]
async fn a_2026_post_in_flight_at_shutdown_runs_on_and_is_answered_within_the_grace() {
    let (server, fixtures) = start_stateless(grace_settings(30_000));
    let http = Http::new(&server);
    let held = held_post(&server, &http).await;
    let stopper = stop_in_background(server);
    // The drain has begun once new work is refused.
    let refused = tokio::time::timeout(READ_TIMEOUT, async {
        loop {
            let params = stateless(json!({"name": "with_meta", "arguments": {}}));
            let body = request(json!("late"), "tools/call", params);
            if send(http.post(&body)).await.status() == 503 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    });
    refused
        .await
        .expect("new work is refused once the drain begins");
    // What starts no new work is still answered, as in a session.
    let (status, listed) = http
        .json(json!("list"), "tools/list", stateless(json!({})))
        .await;
    assert_eq!(status, 200, "{listed}");
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    assert!(
        !held.is_finished(),
        "the held request still runs during the drain"
    );
    fixtures.gate.add_permits(1);
    let (status, response) = tokio::time::timeout(READ_TIMEOUT, held)
        .await
        .expect("answered in time")
        .expect("the client task ends");
    assert_eq!(status, 200);
    assert_eq!(
        text_of(&assert_complete(&response, &json!("held"))),
        "released"
    );
    assert_stopped(stopper).await;
}

#[tokio::test]
async fn a_2026_post_outliving_the_grace_is_cancelled_and_answered_503_32004() {
    let (server, fixtures) = start_stateless(grace_settings(200));
    let shared = server.shared().clone();
    let http = Http::new(&server);
    let held = held_post(&server, &http).await;
    let stopper = stop_in_background(server);
    let (status, response) = tokio::time::timeout(READ_TIMEOUT, held)
        .await
        .expect("answered in time")
        .expect("the client task ends");
    assert_eq!(status, 503);
    assert_error(&response, &json!("held"), -32004);
    assert_stopped(stopper).await;
    assert_eq!(shared.metrics.cancelled.get(), 1, "the call was cancelled");
    assert_eq!(shared.metrics.workers.get(), 0);
    assert_eq!(shared.metrics.sessions.get(), 0);
    // Never released: it ended because the grace ran out.
    assert_eq!(fixtures.gate.available_permits(), 0);
}

/// A 2026-07-28 answer already streaming when the grace runs out still gets its answer, in
/// its stream: -32004 under its own id, then the stream ends (a JSON answer not begun yet is
/// a 503 instead, above).
#[tokio::test]
async fn a_streamed_2026_answer_cut_by_the_grace_ends_with_32004_in_its_stream() {
    let mut s = streaming_settings();
    s.shutdown.grace_ms = 300;
    let (server, fixtures) = start_stateless(s);
    let http = Http::new(&server);
    let body = request(
        json!("streamed"),
        "tools/call",
        stateless(json!({"name": "step_then_hold", "arguments": {}})),
    );
    // Headers come once the POST has turned into a stream, while the tool still waits.
    let mut events = Events::of(send(http.post(&body)).await);
    assert_eq!(metric(&server, "mcp_workers").await, 1);
    let stopper = stop_in_background(server);
    let response = events.expect().await;
    let error = assert_error(&response, &json!("streamed"), -32004);
    assert_eq!(error["message"], "Server is shutting down", "{response}");
    events.expect_end().await;
    assert_stopped(stopper).await;
    assert_eq!(fixtures.gate.available_permits(), 0, "never released");
}

#[tokio::test]
async fn a_2026_post_that_is_not_json_or_is_a_batch_is_answered_with_its_error() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let http = Http::new(&server);
    let headers = |builder: reqwest::RequestBuilder| {
        builder
            .header("MCP-Protocol-Version", MODERN)
            .header("Mcp-Method", "tools/call")
            .header("Mcp-Name", "echo")
    };
    let not_json = headers(http.client.post(&http.url))
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body("{\"jsonrpc\": \"2.0\", \"id\": 1, ");
    let (status, response) = json_reply(send(not_json).await).await;
    assert_eq!(status, 200, "{response}");
    assert_error(&response, &Value::Null, -32700);

    // A tool the fixtures count, so that "nothing ran" is seen, not assumed.
    let call = request(
        json!(2),
        "tools/call",
        stateless_with(
            all_asks(),
            json!({"name": "ask_name", "arguments": {"greeting": "Hi"}}),
        ),
    );
    let batch = headers(http.bare(&json!([call])));
    let (status, response) = json_reply(send(batch).await).await;
    assert_eq!(status, 200, "{response}");
    let entries = response
        .as_array()
        .expect("a batch is answered with an array");
    assert_eq!(entries.len(), 1, "{response}");
    assert_error(&entries[0], &json!(2), -32600);
    assert_eq!(fixtures.runs(), 0, "nothing ran");
    wait_metric(&server, "mcp_sessions", 0).await;
}

#[tokio::test]
async fn a_client_that_leaves_a_2026_post_with_nothing_sent_yet_cancels_it() {
    // Nothing comes before the answer (no progress token): after `sse_keep_alive_ms` the
    // answer becomes a stream, whose keep-alive comments find the client gone.
    let (server, fixtures) = start_stateless(streaming_settings());
    let http = Http::new(&server);
    let held = held_post(&server, &http).await;
    held.abort();
    let _ = held.await;
    wait_metric(&server, "mcp_workers", 0).await;
    wait_metric(&server, "mcp_sessions", 0).await;
    assert_eq!(metric(&server, "mcp_cancelled_total").await, 1);
    assert_eq!(fixtures.gate.available_permits(), 0, "never released");
}

#[tokio::test]
async fn a_2026_answer_slower_than_the_keep_alive_comes_as_a_stream() {
    let (server, fixtures) = start_stateless(streaming_settings());
    let http = Http::new(&server);
    let body = request(
        json!("slow"),
        "tools/call",
        stateless(json!({"name": "step_then_hold", "arguments": {}})),
    );
    // Headers come once the POST has turned into a stream, while the tool still waits.
    let mut events = Events::of(send(http.post(&body)).await);
    assert_eq!(metric(&server, "mcp_workers").await, 1);
    fixtures.gate.add_permits(1);
    let response = events.expect().await;
    assert_eq!(
        text_of(&assert_complete(&response, &json!("slow"))),
        "released"
    );
    events.expect_end().await;
    wait_metric(&server, "mcp_sessions", 0).await;
}

#[tokio::test]
async fn a_2026_post_retried_with_its_idempotency_key_gets_the_stored_answer_without_running() {
    // An identity's keys span its POSTs (an anonymous POST is a session of its own).
    let (server, fixtures) = start_stateless(with_api_key(stateless_settings()));
    let http = Http::new(&server);
    let keyed = |id: Value| {
        request(
            id,
            "tools/call",
            add_meta(
                stateless(json!({"name": "step_then_hold", "arguments": {}})),
                "idempotencyKey",
                json!("retry-1"),
            ),
        )
    };
    // One pass through the gate: a second run would wait for ever.
    fixtures.gate.add_permits(1);
    let (status, first) =
        json_reply(send(http.post(&keyed(json!(1))).bearer_auth(TEST_KEY)).await).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(text_of(&assert_complete(&first, &json!(1))), "released");
    // Each POST is a session of its own: the key, not the id, finds the first answer.
    let (status, retry) =
        json_reply(send(http.post(&keyed(json!(2))).bearer_auth(TEST_KEY)).await).await;
    assert_eq!(status, 200, "{retry}");
    assert_eq!(text_of(&assert_complete(&retry, &json!(2))), "released");
    assert_eq!(metric(&server, "mcp_dedup_hits_total").await, 1);
    assert_eq!(metric(&server, "mcp_idempotent_runs_total").await, 1);
}
