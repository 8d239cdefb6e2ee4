//! Multi round-trip requests (MCP 2026-07-28) over WebSocket, and the same tools in a
//! session-era session. The rules checked, through a real socket:
//!
//! - A tool's ask (elicitation, sampling, roots) under 2026-07-28 is an `InputRequiredResult`
//!   (`resultType: "input_required"`, `inputRequests` by key, a `requestState`, no caching
//!   hints), never a request to the client; the retry (a new id, the same params,
//!   `inputResponses`, the state) runs the tool again, which then gets the answer.
//! - A decline or cancel reaches the tool; an answer that does not fit the form is asked for
//!   again; asks made at once come in one round; the answers of earlier rounds travel in the
//!   state (a round sends only its own answer), and only answers to keys asked do; a state
//!   that could not be sent back in one message is -32602 instead; each round runs the tool
//!   once.
//! - A capability the request did not declare, needed at any round, is -32021 naming it in
//!   `requiredCapabilities`.
//! - A tampered `requestState` (a changed byte in its payload or its tag, a truncated one,
//!   one without its tag, garbage), one issued for another tool, other arguments, another
//!   method or target, or one past `mrtr.state_ttl_ms`, is -32602 and the tool does not run;
//!   the request can start over.
//! - `prompts/get` and `resources/read` ask through rounds too (a read's final result has its
//!   caching hints, its `input_required` none).
//! - The same tool code in a session-era session asks the client with real requests and
//!   waits for the answers (one run).
//!
//! The one sleep waits past a request state's lifetime; it asserts nothing about time.

use crate::support::meta::*;
use crate::support::stateless::*;
use crate::support::ws::{call, initialize_with};
use crate::support::*;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn a_capability_missing_at_any_round_is_32021_naming_it() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let interview = json!({"name": "interview", "arguments": {}});

    let (id, response) = call(&mut client, "tools/call", stateless(interview.clone())).await;
    let error = assert_error(&response, &id, -32021);
    assert_eq!(
        error["data"],
        json!({"requiredCapabilities": {"elicitation": {}}})
    );

    // Elicitation declared: the first round asks, the second needs sampling.
    let params = stateless_with(json!({"elicitation": {}}), interview.clone());
    let (id, response) = call(&mut client, "tools/call", params.clone()).await;
    let (_, state) = assert_input_required(&response, &id, &["name"]);
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, json!({"name": accept_name("Ada")}), Some(&state)),
    )
    .await;
    let error = assert_error(&response, &id, -32021);
    assert_eq!(
        error["data"],
        json!({"requiredCapabilities": {"sampling": {}}})
    );

    // Sampling too: the third round needs the roots.
    let params = stateless_with(json!({"elicitation": {}, "sampling": {}}), interview);
    let responses = json!({
        "name": accept_name("Ada"),
        "draft": {"role": "assistant", "content": {"type": "text", "text": "hi"},
                  "model": "m"},
    });
    let (id, response) = call(&mut client, "tools/call", retry(&params, responses, None)).await;
    let error = assert_error(&response, &id, -32021);
    assert_eq!(
        error["data"],
        json!({"requiredCapabilities": {"roots": {}}})
    );
    assert_eq!(fixtures.runs(), 4);
}

// ---------------------------------------------------------------------------------------
// Multi round-trip requests

fn ask_name_params() -> Value {
    stateless_with(
        json!({"elicitation": {}}),
        json!({"name": "ask_name", "arguments": {"greeting": "Hello"}}),
    )
}

#[tokio::test]
async fn an_ask_is_answered_by_a_retry_with_input_responses_and_the_state() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let params = ask_name_params();
    let (first, response) = call(&mut client, "tools/call", params.clone()).await;
    let (requests, state) = assert_input_required(&response, &first, &["name"]);
    let ask = &requests["name"];
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(ask["params"]["mode"], "form", "{ask}");
    assert_eq!(ask["params"]["message"], "What is your name?", "{ask}");
    let schema = &ask["params"]["requestedSchema"];
    assert_eq!(schema["properties"]["name"]["type"], "string", "{ask}");
    assert_eq!(schema["required"], json!(["name"]), "{ask}");

    let (second, response) = call(
        &mut client,
        "tools/call",
        retry(&params, json!({"name": accept_name("Ada")}), Some(&state)),
    )
    .await;
    assert_ne!(first, second);
    let result = assert_complete(&response, &second);
    assert_no_cache_hints(&result);
    assert_eq!(text_of(&result), "Hello, Ada!");
    assert!(result.get("isError").is_none_or(|e| e == false), "{result}");
    assert_eq!(fixtures.runs(), 2, "each round runs the tool");
}

#[tokio::test]
async fn a_declined_or_cancelled_ask_reaches_the_tool() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let params = ask_name_params();
    for (action, text) in [
        ("decline", "Hello, whoever you are (declined)"),
        ("cancel", "Hello, whoever you are (cancelled)"),
    ] {
        let (id, response) = call(&mut client, "tools/call", params.clone()).await;
        let (_, state) = assert_input_required(&response, &id, &["name"]);
        let (id, response) = call(
            &mut client,
            "tools/call",
            retry(&params, json!({"name": {"action": action}}), Some(&state)),
        )
        .await;
        assert_eq!(text_of(&assert_complete(&response, &id)), text);
    }
}

#[tokio::test]
async fn an_answer_that_does_not_fit_the_form_is_asked_for_again() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let params = ask_name_params();
    let (id, response) = call(&mut client, "tools/call", params.clone()).await;
    let (_, state) = assert_input_required(&response, &id, &["name"]);
    let unfit = json!({"name": {"action": "accept", "content": {"nickname": "Ada"}}});
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, unfit, Some(&state)),
    )
    .await;
    let (_, again) = assert_input_required(&response, &id, &["name"]);
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, json!({"name": accept_name("Ada")}), Some(&again)),
    )
    .await;
    assert_eq!(text_of(&assert_complete(&response, &id)), "Hello, Ada!");
}

#[tokio::test]
async fn a_multi_round_request_carries_earlier_answers_in_its_state() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let params = stateless_with(all_asks(), json!({"name": "interview", "arguments": {}}));

    let (id, response) = call(&mut client, "tools/call", params.clone()).await;
    let (_, state1) = assert_input_required(&response, &id, &["name"]);
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, json!({"name": accept_name("Ada")}), Some(&state1)),
    )
    .await;
    let (requests, state2) = assert_input_required(&response, &id, &["draft"]);
    // The second ask was built from the first answer.
    let draft = &requests["draft"];
    assert_eq!(draft["method"], "sampling/createMessage", "{draft}");
    assert_eq!(
        draft["params"]["messages"][0]["content"]["text"], "Write one line about Ada.",
        "{draft}"
    );
    assert_eq!(draft["params"]["maxTokens"], 50, "{draft}");

    // Only this round's answer is sent: the name travels in the state.
    let line = {
        let text = "Ada wrote the first program.";
        json!({"role": "assistant", "content": {"type": "text", "text": text}, "model": "m"})
    };
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, json!({"draft": line}), Some(&state2)),
    )
    .await;
    let (requests, state3) = assert_input_required(&response, &id, &["roots"]);
    assert_eq!(requests["roots"]["method"], "roots/list");
    assert_ne!(state1, state2);
    assert_ne!(state2, state3);

    let roots = json!({"roots": [{"uri": "file:///a"}, {"uri": "file:///b", "name": "b"}]});
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, json!({"roots": roots}), Some(&state3)),
    )
    .await;
    assert_eq!(
        text_of(&assert_complete(&response, &id)),
        "name=Ada; draft=Ada wrote the first program.; roots=file:///a,file:///b"
    );
    assert_eq!(fixtures.runs(), 4);
}

/// The next round's state carries the answers to keys asked, in this round or an earlier
/// one, and nothing else: an `inputResponses` member no ask reaches is read by nothing and
/// left out, so the state is no larger for it. (Every member went into the state: a request
/// of 3.2 MB got a state of 4.3 MB back, over `limits.max_message_bytes`, and its next round
/// was closed 1009.)
#[tokio::test]
async fn answers_to_keys_no_ask_reached_are_not_carried_in_the_state() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let params = stateless_with(all_asks(), json!({"name": "interview", "arguments": {}}));
    let padding = "x".repeat(100_000);
    let unasked = json!({"never_asked": padding, "name.7": padding});

    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, unasked.clone(), None),
    )
    .await;
    let (_, state1) = assert_input_required(&response, &id, &["name"]);
    assert!(state1.len() < 2_000, "{} bytes of state", state1.len());

    let mut answers = unasked.clone();
    answers["name"] = accept_name("Ada");
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, answers, Some(&state1)),
    )
    .await;
    let (_, state2) = assert_input_required(&response, &id, &["draft"]);
    assert!(state2.len() < 2_000, "{} bytes of state", state2.len());

    // The name, asked in the first round, is still carried.
    let mut answers = unasked;
    answers["draft"] = json!({"role": "assistant", "model": "m",
                              "content": {"type": "text", "text": "A line."}});
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, answers, Some(&state2)),
    )
    .await;
    let (_, state3) = assert_input_required(&response, &id, &["roots"]);
    assert!(state3.len() < 2_000, "{} bytes of state", state3.len());
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, json!({"roots": {"roots": []}}), Some(&state3)),
    )
    .await;
    assert_eq!(
        text_of(&assert_complete(&response, &id)),
        "name=Ada; draft=A line.; roots="
    );
}

/// A state the client could not send back, with the request's arguments, in one message of
/// `limits.max_message_bytes` is not issued: the request is answered -32602 naming the
/// limit. (It was issued, and the next round was refused as too big: a WebSocket closed
/// 1009.)
#[tokio::test]
async fn a_state_too_large_to_send_back_is_an_error_not_a_state() {
    let mut s = stateless_settings();
    s.limits.max_message_bytes = 64 * 1024;
    let (server, _) = start_stateless(s);
    let mut client = Client::connect(&server).await;
    let params = stateless_with(all_asks(), json!({"name": "interview", "arguments": {}}));
    let (id, response) = call(&mut client, "tools/call", params.clone()).await;
    let (_, state) = assert_input_required(&response, &id, &["name"]);
    // An answer of 50 kB fits in a message; carried in base64, it does not.
    let long_name = "A".repeat(50_000);
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(
            &params,
            json!({"name": accept_name(&long_name)}),
            Some(&state),
        ),
    )
    .await;
    let error = assert_error(&response, &id, -32602);
    assert_eq!(error["data"]["limit"], 64 * 1024, "{response}");
    assert_eq!(
        error["data"]["setting"], "limits.max_message_bytes",
        "{response}"
    );
    assert!(
        error["data"]["retryBytes"]
            .as_u64()
            .is_some_and(|n| n > 64 * 1024),
        "{response}"
    );
    // The connection is fine, and a shorter answer goes on.
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, json!({"name": accept_name("Ada")}), Some(&state)),
    )
    .await;
    assert_input_required(&response, &id, &["draft"]);
}

#[tokio::test]
async fn asks_made_at_once_are_asked_in_one_round() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let params = stateless_with(
        json!({"elicitation": {}, "roots": {}}),
        json!({"name": "two_at_once", "arguments": {}}),
    );
    let (id, response) = call(&mut client, "tools/call", params.clone()).await;
    let (requests, state) = assert_input_required(&response, &id, &["left", "right"]);
    assert_eq!(requests["left"]["method"], "elicitation/create");
    assert_eq!(requests["right"]["method"], "roots/list");
    let answers = json!({"left": accept_name("Ada"),
                         "right": {"roots": [{"uri": "file:///x"}, {"uri": "file:///y"}]}});
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, answers, Some(&state)),
    )
    .await;
    assert_eq!(text_of(&assert_complete(&response, &id)), "Ada in 2 roots");
    assert_eq!(fixtures.runs(), 2);
}

/// A round records at most `limits.max_in_flight_per_session` asks, as a session bounds its
/// requests to the client: an ask past it fails at once (`TooMany`, which the tool sees).
/// (A tool asking once per item of its arguments made a round of any size, each ask
/// recorded by a scan of those before it: 100,000 asks held the thread 30 s.)
#[tokio::test]
async fn a_round_records_at_most_the_sessions_in_flight_limit_of_asks() {
    let mut s = stateless_settings();
    s.limits.max_in_flight_per_session = 8;
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = refused.clone();
    let tool = mcp_ws::Tool::new(
        "ask_each",
        "asks a name per item",
        move |_: NoArgs, ctx: mcp_ws::RequestContext| {
            let refused = seen.clone();
            async move {
                let asks = (0..100).map(|item| {
                    let ctx = ctx.clone();
                    let refused = refused.clone();
                    async move {
                        let form = mcp_ws::model::ElicitRequest::form_for::<NameForm>("Name?");
                        if let Err(mcp_ws::ClientRequestError::TooMany { limit: 8 }) =
                            ctx.elicit_as(format!("item{item}").as_str(), form).await
                        {
                            refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
                futures_util::future::join_all(asks).await;
                Ok(mcp_ws::model::CallToolResult::text("asked"))
            }
        },
    );
    let server = start_with(s, |b| b.tool(tool));
    let mut client = Client::connect(&server).await;
    let params = stateless_with(
        json!({"elicitation": {}}),
        json!({"name": "ask_each", "arguments": {}}),
    );
    let (id, response) = call(&mut client, "tools/call", params).await;
    let keys: Vec<String> = (0..8).map(|item| format!("item{item}")).collect();
    let mut keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    keys.sort_unstable();
    assert_input_required(&response, &id, &keys);
    assert_eq!(refused.load(std::sync::atomic::Ordering::Relaxed), 92);
    crate::support::http::wait_metric(
        &server,
        "mcp_rejected_total{reason=\"client_requests\"}",
        92,
    )
    .await;
}

/// `state` with the character at `index` of its part `part` (0: payload, 1: tag) changed.
fn tamper(state: &str, part: usize, index: usize) -> String {
    let (payload, tag) = state.split_once('.').expect("payload.tag");
    let mut parts = [payload.to_owned(), tag.to_owned()];
    let target = &mut parts[part];
    let original = target.as_bytes()[index];
    let replacement = if original == b'A' { 'B' } else { 'A' };
    target.replace_range(index..=index, &replacement.to_string());
    format!("{}.{}", parts[0], parts[1])
}

#[tokio::test]
async fn a_tampered_request_state_is_refused_and_the_tool_does_not_run() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let params = ask_name_params();
    let (id, response) = call(&mut client, "tools/call", params.clone()).await;
    let (_, state) = assert_input_required(&response, &id, &["name"]);
    assert_eq!(fixtures.runs(), 1);
    let (payload, tag) = state.split_once('.').expect("payload.tag");
    let forged = [
        tamper(&state, 0, payload.len() / 2),
        tamper(&state, 0, 0),
        tamper(&state, 1, tag.len() / 2),
        state[..state.len() - 1].to_owned(),
        payload.to_owned(),
        "garbage".to_owned(),
    ];
    for forged in forged {
        assert_ne!(forged, state);
        let (id, response) = call(
            &mut client,
            "tools/call",
            retry(&params, json!({"name": accept_name("Ada")}), Some(&forged)),
        )
        .await;
        let error = assert_error(&response, &id, -32602);
        let message = error["message"].as_str().expect("a message");
        assert!(message.contains("requestState"), "{forged}: {response}");
        assert_eq!(fixtures.runs(), 1, "refused before the tool runs: {forged}");
    }
    // The genuine state still works.
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, json!({"name": accept_name("Ada")}), Some(&state)),
    )
    .await;
    assert_eq!(text_of(&assert_complete(&response, &id)), "Hello, Ada!");
}

#[tokio::test]
async fn a_request_state_is_bound_to_its_method_target_and_arguments() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let (id, response) = call(&mut client, "tools/call", ask_name_params()).await;
    let (_, state) = assert_input_required(&response, &id, &["name"]);
    let caps = json!({"elicitation": {}});
    let elsewhere = [
        (
            "tools/call",
            json!({"name": "ask_name_too", "arguments": {"greeting": "Hello"}}),
        ),
        (
            "tools/call",
            json!({"name": "ask_name", "arguments": {"greeting": "Hi"}}),
        ),
        (
            "prompts/get",
            json!({"name": "personal", "arguments": {"topic": "Hello"}}),
        ),
        ("resources/read", json!({"uri": VAULT})),
    ];
    for (method, params) in elsewhere {
        let params = stateless_with(caps.clone(), params);
        let (id, response) = call(
            &mut client,
            method,
            retry(&params, json!({"name": accept_name("Eve")}), Some(&state)),
        )
        .await;
        let error = assert_error(&response, &id, -32602);
        assert!(
            error["message"]
                .as_str()
                .is_some_and(|m| m.contains("another request")),
            "{method} {params}: {response}"
        );
    }
    assert_eq!(fixtures.runs(), 1, "no replay ran");
}

#[tokio::test]
async fn an_expired_request_state_is_refused_and_the_request_can_start_over() {
    let mut settings = stateless_settings();
    settings.mrtr.state_ttl_ms = 20;
    let (server, fixtures) = start_stateless(settings);
    let mut client = Client::connect(&server).await;
    let params = ask_name_params();
    let (id, response) = call(&mut client, "tools/call", params.clone()).await;
    let (_, state) = assert_input_required(&response, &id, &["name"]);
    // Past the state's lifetime (a wait, not a timing assertion).
    tokio::time::sleep(Duration::from_millis(80)).await;
    let answer = json!({"name": accept_name("Ada")});
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, answer.clone(), Some(&state)),
    )
    .await;
    let error = assert_error(&response, &id, -32602);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("expired")),
        "{response}"
    );
    assert_eq!(fixtures.runs(), 1);
    // Without the state, the answers alone are enough to go on.
    let (id, response) = call(&mut client, "tools/call", retry(&params, answer, None)).await;
    assert_eq!(text_of(&assert_complete(&response, &id)), "Hello, Ada!");
}

#[tokio::test]
async fn prompts_and_resources_ask_through_rounds_too() {
    let (server, _) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    let caps = json!({"elicitation": {}});

    let params = stateless_with(
        caps.clone(),
        json!({"name": "personal", "arguments": {"topic": "Rust"}}),
    );
    let (id, response) = call(&mut client, "prompts/get", params.clone()).await;
    let (requests, state) = assert_input_required(&response, &id, &["name"]);
    assert_eq!(requests["name"]["params"]["message"], "For whom?");
    let (id, response) = call(
        &mut client,
        "prompts/get",
        retry(&params, json!({"name": accept_name("Ada")}), Some(&state)),
    )
    .await;
    let result = assert_complete(&response, &id);
    assert_no_cache_hints(&result);
    assert_eq!(
        result["messages"][0]["content"]["text"],
        "Tell Ada about Rust."
    );

    let params = stateless_with(caps, json!({"uri": VAULT}));
    let (id, response) = call(&mut client, "resources/read", params.clone()).await;
    let (requests, state) = assert_input_required(&response, &id, &["passphrase"]);
    assert_eq!(requests["passphrase"]["method"], "elicitation/create");
    let answer = json!({"passphrase": {"action": "accept",
                                       "content": {"passphrase": "open sesame"}}});
    let (id, response) = call(
        &mut client,
        "resources/read",
        retry(&params, answer, Some(&state)),
    )
    .await;
    let result = assert_complete(&response, &id);
    assert_cache_hints(&result, READ_TTL_MS);
    assert_eq!(result["contents"][0]["text"], "opened with open sesame");
}

#[tokio::test]
async fn the_same_tool_asks_a_session_client_with_real_requests() {
    let (server, fixtures) = start_stateless(stateless_settings());
    let mut client = Client::connect(&server).await;
    initialize_with(&mut client, all_asks()).await;
    let id = client.fresh_id();
    client
        .send_json(request(
            id.clone(),
            "tools/call",
            json!({"name": "interview", "arguments": {}}),
        ))
        .await;
    let answers = [
        ("elicitation/create", accept_name("Ada")),
        (
            "sampling/createMessage",
            json!({"role": "assistant", "content": {"type": "text", "text": "Ada!"},
                   "model": "m"}),
        ),
        ("roots/list", json!({"roots": [{"uri": "file:///home"}]})),
    ];
    for (method, answer) in answers {
        let asked = client.recv().await;
        assert_eq!(asked["method"], method, "{asked}");
        assert!(asked["id"].is_number(), "a real request: {asked}");
        if method == "sampling/createMessage" {
            assert_eq!(
                asked["params"]["messages"][0]["content"]["text"],
                "Write one line about Ada."
            );
        }
        client
            .send_json(json!({"jsonrpc": "2.0", "id": asked["id"], "result": answer}))
            .await;
    }
    let response = client.recv_response(&id).await;
    assert_eq!(
        text_of(&assert_session_result(&response, &id)),
        "name=Ada; draft=Ada!; roots=file:///home"
    );
    assert_eq!(fixtures.runs(), 1, "a session's tool waits for its answers");
}

/// Asks with its own key `"1"`, then asks again without naming a key (as the n-th unnamed
/// ask, `"1"` too before), each in a round of its own.
async fn numbered(_: NoArgs, ctx: mcp_ws::RequestContext) -> Result<String, mcp_ws::ToolError> {
    let name = ctx
        .elicit_as(
            "1",
            mcp_ws::model::ElicitRequest::form_for::<NameForm>("Name?"),
        )
        .await?
        .parse::<NameForm>()
        .map_or(String::new(), |f| f.name);
    let roots = ctx.list_roots().await?;
    Ok(format!("{name} in {} roots", roots.len()))
}

/// Two asks of one request never share a key: a tool's own `"1"` and its first unnamed ask
/// each get their own, so each answer reaches the ask it answers. (Sharing `"1"`, the
/// roots ask was handed the name's answer, refused it, and asked again under the key the
/// name then got the roots' answer for: a request that never ended.)
#[tokio::test]
async fn a_tools_own_key_and_an_unnamed_ask_never_share_a_key() {
    let server = start_bare(stateless_settings(), |b| {
        b.tool(mcp_ws::Tool::new("numbered", "Asks twice.", numbered))
    });
    let mut client = Client::connect(&server).await;
    let params = stateless_with(
        json!({"elicitation": {}, "roots": {}}),
        json!({"name": "numbered", "arguments": {}}),
    );
    let (id, response) = call(&mut client, "tools/call", params.clone()).await;
    let (requests, state) = assert_input_required(&response, &id, &["1.1"]);
    assert_eq!(requests["1.1"]["method"], "elicitation/create");
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, json!({"1.1": accept_name("Ada")}), Some(&state)),
    )
    .await;
    let (requests, state) = assert_input_required(&response, &id, &["2"]);
    assert_eq!(requests["2"]["method"], "roots/list");
    let roots = json!({"2": {"roots": [{"uri": "file:///x"}, {"uri": "file:///y"}]}});
    let (id, response) = call(
        &mut client,
        "tools/call",
        retry(&params, roots, Some(&state)),
    )
    .await;
    assert_eq!(text_of(&assert_complete(&response, &id)), "Ada in 2 roots");
}

/// A request whose round ends at its first wait (an ask without an answer) sets its cancel
/// flag, as a worker that waited sets it when it stops: work the tool moved to a thread of
/// its own, watching the flag, learns that the request is over (it ran on for ever).
#[tokio::test]
async fn a_round_that_ends_at_its_first_ask_sets_the_cancel_flag() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let seen = Arc::new(AtomicBool::new(false));
    let seen_by_tool = seen.clone();
    let server = start_bare(stateless_settings(), move |b| {
        b.tool(mcp_ws::Tool::new(
            "watching",
            "Watches its cancel flag from a thread, then asks.",
            move |_: NoArgs, ctx: mcp_ws::RequestContext| {
                let seen = seen_by_tool.clone();
                async move {
                    let flag = ctx.cancel_flag();
                    std::thread::spawn(move || {
                        let deadline = std::time::Instant::now() + READ_TIMEOUT;
                        while !flag.is_set() && std::time::Instant::now() < deadline {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        seen.store(flag.is_set(), Ordering::SeqCst);
                    });
                    ctx.elicit_as(
                        "name",
                        mcp_ws::model::ElicitRequest::form_for::<NameForm>("Name?"),
                    )
                    .await?;
                    Ok::<_, mcp_ws::ToolError>("answered")
                }
            },
        ))
    });
    let mut client = Client::connect(&server).await;
    let params = stateless_with(
        json!({"elicitation": {}}),
        json!({"name": "watching", "arguments": {}}),
    );
    let (id, response) = call(&mut client, "tools/call", params).await;
    assert_input_required(&response, &id, &["name"]);
    let deadline = std::time::Instant::now() + READ_TIMEOUT;
    while !seen.load(Ordering::SeqCst) {
        assert!(
            std::time::Instant::now() < deadline,
            "the flag was never set"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
