//! Requests from the server to the client, made by tools through their context: `roots/list`
//! (`ctx.list_roots`), `sampling/createMessage` (`ctx.create_message`) and
//! `elicitation/create` (`ctx.elicit`, form mode on 2025-06-18 and 2025-11-25, URL mode on
//! 2025-11-25 only).
//!
//! Rules checked, for each kind of request: a client that answers gives the tool the answer;
//! one that answers with an error gives the tool `Rejected` with its code and message; one that
//! never answers gives the tool `TimedOut` after `client_requests.timeout_ms` and receives
//! `notifications/cancelled` for that request id; one that never declared the capability
//! (or whose version lacks it; `sampling.tools` for a sampling request offering tools) is
//! never sent the request and the tool gets `NotSupported`;
//! one that disconnects mid-request gives the tool `Disconnected` and the server goes on.
//! An accepted form that does not match the requested schema is `InvalidResponse`; `mode`
//! is sent only to 2025-11-25 clients. Cancelling the tool's own request while its client
//! request is outstanding sends the client `notifications/cancelled` for the server's
//! request; a response for an unknown id is dropped and nothing breaks;
//! `notifications/roots/list_changed` is accepted without an answer; a session has at most
//! `limits.max_in_flight_per_session` requests to the client outstanding (more are refused
//! with `TooMany`, unsent).
//!
//! Each test tool answers with (and reports on a channel, for when its client is gone) what
//! it got: the answer, or the error's kind.

use crate::support::http::wait_metric;
use crate::support::ws::assert_server_alive;
use crate::support::*;
use mcp_ws::model::{CreateMessageRequest, ElicitAction, ElicitRequest, SamplingMessage};
use mcp_ws::{ClientRequestError, RequestContext, RunningServer, Settings, Tool, ToolError};
use serde_json::{json, Value};
use std::future::Future;
use tokio::sync::mpsc;

fn describe(error: &ClientRequestError) -> String {
    match error {
        ClientRequestError::NotSupported { capability } => format!("NotSupported({capability})"),
        ClientRequestError::Rejected { code, message } => format!("Rejected({code}, {message})"),
        ClientRequestError::TimedOut { .. } => "TimedOut".into(),
        ClientRequestError::Disconnected => "Disconnected".into(),
        ClientRequestError::InvalidResponse(reason) => format!("InvalidResponse({reason})"),
        ClientRequestError::TooMany { limit } => format!("TooMany({limit})"),
    }
}

/// A tool that runs `ask` and answers with (and reports on `outcomes`) what it got.
fn asking_tool<F, Fut>(name: &str, outcomes: mpsc::UnboundedSender<String>, ask: F) -> Tool
where
    F: Fn(RequestContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = String> + 'static,
{
    Tool::new(name, "asks the client", move |_: NoArgs, ctx| {
        let outcomes = outcomes.clone();
        let asked = ask(ctx);
        async move {
            let outcome = asked.await;
            let _ = outcomes.send(outcome.clone());
            Ok::<_, ToolError>(outcome)
        }
    })
}

#[derive(serde::Deserialize)]
struct Person {
    name: String,
    age: Option<i64>,
}

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0}
        },
        "required": ["name"]
    })
}

fn tools(outcomes: mpsc::UnboundedSender<String>) -> Vec<Tool> {
    vec![
        asking_tool("roots", outcomes.clone(), |ctx| async move {
            match ctx.list_roots().await {
                Ok(roots) => format!(
                    "roots: {}",
                    roots
                        .iter()
                        .map(|r| r.uri.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                Err(e) => describe(&e),
            }
        }),
        asking_tool("sample", outcomes.clone(), |ctx| async move {
            let request =
                CreateMessageRequest::new(vec![SamplingMessage::user("What is 2 + 2?")], 16)
                    .system_prompt("Be brief.");
            match ctx.create_message(request).await {
                Ok(result) => format!(
                    "sampled: {}: {}",
                    result.model,
                    result.content.as_text().unwrap_or("(no text)")
                ),
                Err(e) => describe(&e),
            }
        }),
        asking_tool("elicit", outcomes.clone(), |ctx| async move {
            match ctx
                .elicit(ElicitRequest::form("Who are you?", person_schema()))
                .await
            {
                Ok(result) => match (result.action, result.parse::<Person>()) {
                    (ElicitAction::Accept, Some(p)) => {
                        format!("elicited: accept {} {:?}", p.name, p.age)
                    }
                    (action, _) => format!("elicited: {action:?}"),
                },
                Err(e) => describe(&e),
            }
        }),
        asking_tool("sample_with_tools", outcomes.clone(), |ctx| async move {
            let mut request =
                CreateMessageRequest::new(vec![SamplingMessage::user("Weather?")], 16);
            request.extra.insert(
                "tools".into(),
                json!([{"name": "forecast", "inputSchema": {"type": "object"}}]),
            );
            match ctx.create_message(request).await {
                Ok(result) => format!("sampled: {}", result.model),
                Err(e) => describe(&e),
            }
        }),
        asking_tool("roots_thrice", outcomes.clone(), |ctx| async move {
            let one = |ctx: RequestContext| async move {
                match ctx.list_roots().await {
                    Ok(roots) => format!("{} roots", roots.len()),
                    Err(e) => describe(&e),
                }
            };
            let all = futures_util::future::join_all([
                one(ctx.clone()),
                one(ctx.clone()),
                one(ctx.clone()),
            ])
            .await;
            all.join(", ")
        }),
        asking_tool("elicit_url", outcomes, |ctx| async move {
            let request = ElicitRequest::url("Sign in", "https://example.com/login", "login-1");
            match ctx.elicit(request).await {
                Ok(result) => format!("elicited: {:?}", result.action),
                Err(e) => describe(&e),
            }
        }),
    ]
}

fn start_asking(settings: Settings) -> (RunningServer, mpsc::UnboundedReceiver<String>) {
    let (outcomes, reports) = mpsc::unbounded_channel();
    let server = start_with(settings, |mut b| {
        for tool in tools(outcomes) {
            b = b.tool(tool);
        }
        b
    });
    (server, reports)
}

/// Connects and initializes on `version` declaring exactly `capabilities`.
async fn init(server: &RunningServer, version: &str, capabilities: Value) -> Client {
    let mut client = Client::connect(server).await;
    let response = client
        .request_with_id(
            json!(0),
            "initialize",
            json!({
                "protocolVersion": version,
                "capabilities": capabilities,
                "clientInfo": {"name": "client-requests-test", "version": "1"}
            }),
        )
        .await;
    assert_eq!(response["result"]["protocolVersion"], version, "{response}");
    client
        .send_json(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await;
    client
}

/// One kind of request a tool makes, and how a client that supports it answers.
struct Ask {
    tool: &'static str,
    method: &'static str,
    version: &'static str,
    capabilities: Value,
    answer: Value,
    answered: &'static str,
    /// Checks the request's params as the client received them.
    check: fn(&Value),
}

fn asks() -> Vec<Ask> {
    vec![
        Ask {
            tool: "roots",
            method: "roots/list",
            version: "2025-11-25",
            capabilities: json!({"roots": {"listChanged": true}}),
            answer: json!({"roots": [{"uri": "file:///work", "name": "work"}, {"uri": "file:///tmp"}]}),
            answered: "roots: file:///work,file:///tmp",
            check: |_params| {},
        },
        Ask {
            tool: "sample",
            method: "sampling/createMessage",
            version: "2025-11-25",
            capabilities: json!({"sampling": {}}),
            answer: json!({"role": "assistant", "content": {"type": "text", "text": "4"},
                           "model": "test-model", "stopReason": "endTurn"}),
            answered: "sampled: test-model: 4",
            check: |params| {
                assert_eq!(params["maxTokens"], 16, "{params}");
                assert_eq!(params["systemPrompt"], "Be brief.", "{params}");
                assert_eq!(
                    params["messages"],
                    json!([{"role": "user", "content": {"type": "text", "text": "What is 2 + 2?"}}])
                );
            },
        },
        Ask {
            tool: "sample_with_tools",
            method: "sampling/createMessage",
            version: "2025-11-25",
            capabilities: json!({"sampling": {"tools": {}}}),
            answer: json!({"role": "assistant", "content": {"type": "text", "text": "sunny"},
                           "model": "tool-model"}),
            answered: "sampled: tool-model",
            check: |params| {
                assert_eq!(params["tools"][0]["name"], "forecast", "{params}");
            },
        },
        Ask {
            tool: "elicit",
            method: "elicitation/create",
            version: "2025-11-25",
            capabilities: json!({"elicitation": {}}),
            answer: json!({"action": "accept", "content": {"name": "Ada", "age": 36}}),
            answered: "elicited: accept Ada Some(36)",
            check: |params| {
                assert_eq!(params["mode"], "form", "{params}");
                assert_eq!(params["message"], "Who are you?");
                assert_eq!(params["requestedSchema"], person_schema());
            },
        },
        Ask {
            tool: "elicit",
            method: "elicitation/create",
            version: "2025-06-18",
            capabilities: json!({"elicitation": {}}),
            answer: json!({"action": "accept", "content": {"name": "Ada"}}),
            answered: "elicited: accept Ada None",
            check: |params| {
                // 2025-06-18 has no `mode`: a strict client of that version would refuse it.
                assert!(params.get("mode").is_none(), "{params}");
                assert_eq!(params["requestedSchema"], person_schema());
            },
        },
        Ask {
            tool: "elicit_url",
            method: "elicitation/create",
            version: "2025-11-25",
            capabilities: json!({"elicitation": {"url": {}}}),
            answer: json!({"action": "accept"}),
            answered: "elicited: Accept",
            check: |params| {
                assert_eq!(params["mode"], "url", "{params}");
                assert_eq!(params["url"], "https://example.com/login");
                assert_eq!(params["elicitationId"], "login-1");
                assert_eq!(params["message"], "Sign in");
            },
        },
    ]
}

fn call(id: &Value, tool: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":tool,"arguments":{}}})
}

/// The next frame, which must be the server's request `method`; returns it.
async fn recv_request(client: &mut Client, method: &str) -> Value {
    let request = client.recv().await;
    assert_eq!(request["method"], method, "{request}");
    assert_eq!(request["jsonrpc"], "2.0");
    assert!(
        request["id"].is_u64() || request["id"].is_string(),
        "a request has an id: {request}"
    );
    request
}

#[tokio::test]
async fn a_client_that_answers_gives_the_tool_its_answer() {
    let (server, _reports) = start_asking(settings());
    for ask in asks() {
        let mut client = init(&server, ask.version, ask.capabilities.clone()).await;
        let id = client.fresh_id();
        client.send_json(call(&id, ask.tool)).await;
        let request = recv_request(&mut client, ask.method).await;
        (ask.check)(&request["params"]);
        client
            .send_json(json!({"jsonrpc":"2.0","id":request["id"],"result":ask.answer}))
            .await;
        let response = client.recv_response(&id).await;
        assert_eq!(
            tool_text(&response),
            ask.answered,
            "{} on {}",
            ask.tool,
            ask.version
        );
        client.expect_nothing_pending().await;
    }
}

#[tokio::test]
async fn a_client_error_reaches_the_tool_as_rejected() {
    let (server, _reports) = start_asking(settings());
    for ask in asks() {
        let mut client = init(&server, ask.version, ask.capabilities.clone()).await;
        let id = client.fresh_id();
        client.send_json(call(&id, ask.tool)).await;
        let request = recv_request(&mut client, ask.method).await;
        client
            .send_json(json!({"jsonrpc":"2.0","id":request["id"],
                              "error":{"code":-32601,"message":"not today"}}))
            .await;
        let response = client.recv_response(&id).await;
        assert_eq!(
            tool_text(&response),
            "Rejected(-32601, not today)",
            "{} on {}",
            ask.tool,
            ask.version
        );
    }
}

#[tokio::test]
async fn a_client_that_never_answers_times_out_and_is_told_so() {
    let mut s = settings();
    s.client_requests.timeout_ms = 200;
    let (server, _reports) = start_asking(s);
    for ask in asks() {
        let mut client = init(&server, ask.version, ask.capabilities.clone()).await;
        let id = client.fresh_id();
        client.send_json(call(&id, ask.tool)).await;
        let request = recv_request(&mut client, ask.method).await;
        // No answer. The server gives up: first it tells the client, then the tool answers.
        let cancelled = client.recv().await;
        assert_eq!(
            cancelled["method"], "notifications/cancelled",
            "{cancelled}"
        );
        assert_eq!(
            cancelled["params"]["requestId"], request["id"],
            "{cancelled}"
        );
        let response = client.recv().await;
        assert_eq!(response["id"], id, "{response}");
        assert_eq!(tool_text(&response), "TimedOut");
        // A late answer is for no request any more: dropped, and nothing breaks.
        client
            .send_json(json!({"jsonrpc":"2.0","id":request["id"],"result":ask.answer}))
            .await;
        client.expect_nothing_pending().await;
    }
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn a_client_without_the_capability_is_never_asked() {
    let (server, _reports) = start_asking(settings());
    // (tool, version, capabilities, the capability missing)
    let cases = [
        (
            "roots",
            "2025-11-25",
            json!({"sampling": {}, "elicitation": {}}),
            "roots",
        ),
        (
            "sample",
            "2025-11-25",
            json!({"roots": {}, "elicitation": {}}),
            "sampling",
        ),
        (
            "elicit",
            "2025-11-25",
            json!({"roots": {}, "sampling": {}}),
            "elicitation.form",
        ),
        // A client declaring only URL mode has no forms.
        (
            "elicit",
            "2025-11-25",
            json!({"elicitation": {"url": {}}}),
            "elicitation.form",
        ),
        // Elicitation appeared in 2025-06-18.
        (
            "elicit",
            "2025-03-26",
            json!({"elicitation": {}}),
            "elicitation.form",
        ),
        // `elicitation: {}` declares form mode only.
        (
            "elicit_url",
            "2025-11-25",
            json!({"elicitation": {}}),
            "elicitation.url",
        ),
        // URL mode appeared in 2025-11-25.
        (
            "elicit_url",
            "2025-06-18",
            json!({"elicitation": {"url": {}}}),
            "elicitation.url",
        ),
        ("roots", "2024-11-05", json!({}), "roots"),
        // Offering the model tools needs `sampling.tools`, which appeared in 2025-11-25.
        (
            "sample_with_tools",
            "2025-11-25",
            json!({"sampling": {}}),
            "sampling.tools",
        ),
        (
            "sample_with_tools",
            "2025-06-18",
            json!({"sampling": {"tools": {}}}),
            "sampling.tools",
        ),
    ];
    for (tool, version, capabilities, missing) in cases {
        let mut client = init(&server, version, capabilities).await;
        let id = client.fresh_id();
        client.send_json(call(&id, tool)).await;
        // The response is the first frame: no request went out before it.
        let response = client.recv().await;
        assert_eq!(response["id"], id, "{tool} on {version}: {response}");
        assert_eq!(
            tool_text(&response),
            format!("NotSupported({missing})"),
            "{tool} on {version}"
        );
        client.expect_nothing_pending().await;
    }
}

#[tokio::test]
async fn a_client_that_disconnects_mid_request_leaves_the_tool_disconnected() {
    let (server, mut reports) = start_asking(settings());
    for ask in asks() {
        let mut client = init(&server, ask.version, ask.capabilities.clone()).await;
        let id = client.fresh_id();
        client.send_json(call(&id, ask.tool)).await;
        recv_request(&mut client, ask.method).await;
        wait_metric(&server, "mcp_pool_running", 1).await;
        client.hang_up().await;
        let outcome = tokio::time::timeout(READ_TIMEOUT, reports.recv())
            .await
            .expect("the tool reports in time")
            .expect("the channel is open");
        assert_eq!(outcome, "Disconnected", "{} on {}", ask.tool, ask.version);
        wait_metric(&server, "mcp_pool_running", 0).await;
        wait_metric(&server, "mcp_sessions", 0).await;
    }
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn cancelling_the_tools_request_cancels_its_client_request() {
    let (server, _reports) = start_asking(settings());
    for ask in asks() {
        let mut client = init(&server, ask.version, ask.capabilities.clone()).await;
        let id = client.fresh_id();
        client.send_json(call(&id, ask.tool)).await;
        let request = recv_request(&mut client, ask.method).await;
        client
            .send_json(json!({"jsonrpc":"2.0","method":"notifications/cancelled",
                              "params":{"requestId": id, "reason": "changed my mind"}}))
            .await;
        let cancelled = client.recv().await;
        assert_eq!(
            cancelled["method"], "notifications/cancelled",
            "{cancelled}"
        );
        assert_eq!(
            cancelled["params"]["requestId"], request["id"],
            "{cancelled}"
        );
        // And nothing for the cancelled call itself.
        client.expect_nothing_pending().await;
        wait_metric(&server, "mcp_pool_running", 0).await;
        // An answer that crosses the cancel is dropped.
        client
            .send_json(json!({"jsonrpc":"2.0","id":request["id"],"result":ask.answer}))
            .await;
        client.expect_nothing_pending().await;
    }
}

#[tokio::test]
async fn a_response_to_no_request_is_dropped_and_nothing_breaks() {
    let (server, _reports) = start_asking(settings());
    let ask = &asks()[0];
    let mut client = init(&server, ask.version, ask.capabilities.clone()).await;
    for stray in [
        json!({"jsonrpc":"2.0","id":1,"result":{"roots":[]}}),
        json!({"jsonrpc":"2.0","id":987654321,"result":{}}),
        json!({"jsonrpc":"2.0","id":"1","result":{}}),
        json!({"jsonrpc":"2.0","id":-1,"error":{"code":-32601,"message":"no"}}),
        json!({"jsonrpc":"2.0","id":2,"error":"not an error object"}),
    ] {
        client.send_json(stray).await;
    }
    client.expect_nothing_pending().await;
    // The server's own requests still work, ids and all.
    let id = client.fresh_id();
    client.send_json(call(&id, ask.tool)).await;
    let request = recv_request(&mut client, ask.method).await;
    client
        .send_json(json!({"jsonrpc":"2.0","id":request["id"],"result":ask.answer}))
        .await;
    let response = client.recv_response(&id).await;
    assert_eq!(tool_text(&response), ask.answered);
}

#[tokio::test]
async fn an_accepted_form_that_does_not_match_the_schema_is_invalid() {
    let (server, _reports) = start_asking(settings());
    for content in [
        json!({"age": 3}),                 // `name` is required
        json!({"name": "Ada", "age": -1}), // below the minimum
        json!({"name": 7}),                // wrong type
    ] {
        let mut client = init(&server, "2025-11-25", json!({"elicitation": {"form": {}}})).await;
        let id = client.fresh_id();
        client.send_json(call(&id, "elicit")).await;
        let request = recv_request(&mut client, "elicitation/create").await;
        client
            .send_json(json!({"jsonrpc":"2.0","id":request["id"],
                              "result":{"action":"accept","content":content}}))
            .await;
        let text = tool_text(&client.recv_response(&id).await);
        assert!(text.starts_with("InvalidResponse("), "{content}: {text}");
    }
    // Declining needs no content, and is no error.
    let mut client = init(&server, "2025-11-25", json!({"elicitation": {}})).await;
    let id = client.fresh_id();
    client.send_json(call(&id, "elicit")).await;
    let request = recv_request(&mut client, "elicitation/create").await;
    client
        .send_json(json!({"jsonrpc":"2.0","id":request["id"],"result":{"action":"decline"}}))
        .await;
    assert_eq!(
        tool_text(&client.recv_response(&id).await),
        "elicited: Decline"
    );
    // An answer of the wrong shape altogether is invalid too.
    let mut client = init(&server, "2025-11-25", json!({"roots": {}})).await;
    let id = client.fresh_id();
    client.send_json(call(&id, "roots")).await;
    let request = recv_request(&mut client, "roots/list").await;
    client
        .send_json(json!({"jsonrpc":"2.0","id":request["id"],"result":{"roots":"none"}}))
        .await;
    let text = tool_text(&client.recv_response(&id).await);
    assert!(text.starts_with("InvalidResponse("), "{text}");
}

#[tokio::test]
async fn roots_list_changed_is_accepted_quietly() {
    let (server, _reports) = start_asking(settings());
    let mut client = init(
        &server,
        "2025-11-25",
        json!({"roots": {"listChanged": true}}),
    )
    .await;
    client
        .send_json(json!({"jsonrpc":"2.0","method":"notifications/roots/list_changed"}))
        .await;
    client
        .send_json(json!({"jsonrpc":"2.0","method":"notifications/roots/list_changed","params":{}}))
        .await;
    client.expect_nothing_pending().await;
    // The session asks again, as a server would after such a notification.
    let id = client.fresh_id();
    client.send_json(call(&id, "roots")).await;
    let request = recv_request(&mut client, "roots/list").await;
    client
        .send_json(
            json!({"jsonrpc":"2.0","id":request["id"],"result":{"roots":[{"uri":"file:///new"}]}}),
        )
        .await;
    assert_eq!(
        tool_text(&client.recv_response(&id).await),
        "roots: file:///new"
    );
}

#[tokio::test]
async fn requests_to_the_client_beyond_the_sessions_limit_are_not_sent() {
    let mut s = settings();
    s.limits.max_in_flight_per_session = 2;
    let (server, _reports) = start_asking(s);
    let mut client = init(&server, "2025-11-25", json!({"roots": {}})).await;
    for round in 0..2 {
        let id = client.fresh_id();
        client.send_json(call(&id, "roots_thrice")).await;
        // Two requests go out; the third is refused without being sent.
        let first = recv_request(&mut client, "roots/list").await;
        let second = recv_request(&mut client, "roots/list").await;
        assert_ne!(first["id"], second["id"]);
        client.expect_nothing_pending().await;
        for request in [&first, &second] {
            client
                .send_json(json!({"jsonrpc":"2.0","id":request["id"],"result":{"roots":[]}}))
                .await;
        }
        let response = client.recv_response(&id).await;
        assert_eq!(
            tool_text(&response),
            "0 roots, 0 roots, TooMany(2)",
            "round {round}: answered requests free their places"
        );
    }
}
