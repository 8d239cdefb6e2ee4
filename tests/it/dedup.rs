//! De-duplication of retries with the in-memory store (the default), over real sockets:
//! - a `tools/call` with `params._meta.idempotencyKey` sent again with the same params by
//!   the same identity, on a new connection, gets the stored response with the retry's own
//!   id; the tool ran once;
//! - an anonymous client's key is its session's alone: two anonymous sessions with the same
//!   key each run their call, and a retry within the session gets the stored response;
//! - the same key with other params is refused with -32019 (`scope: idempotencyKey`), and
//!   nothing runs;
//! - a duplicate sent while the first still runs joins it: both get its response, one run;
//! - a request that ends without a result (cancelled) frees its key: the retry runs;
//! - two connections that each send id 1 with equal params and no key are two calls: both run;
//! - within a session, a finished request's id sent again gets the stored response (one
//!   run), with other params -32019 (`scope: requestId`); so does a retry on a resumed
//!   WebSocket session;
//! - with `dedup.enabled = false`, every retry runs.

use crate::support::http::{metric, wait_metric};
use crate::support::*;
use mcp_ws::model::CallToolResult;
use mcp_ws::tool::{Arguments, ToolFuture, ToolHandler};
use mcp_ws::{RequestContext, RunningServer, Settings, Tool, ToolError};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

/// `count {text}` answers `run N: text`, N its own run number; `count_held` does the same
/// once the test opens its gate.
struct Count {
    runs: Arc<AtomicUsize>,
    gate: Option<Arc<Semaphore>>,
}

impl ToolHandler for Count {
    fn call(&self, arguments: Arguments, _ctx: RequestContext) -> ToolFuture {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let gate = self.gate.clone();
        Box::pin(async move {
            let args: Value = arguments.parse()?;
            if let Some(gate) = gate {
                let _permit = gate
                    .acquire()
                    .await
                    .map_err(|_| ToolError::Failed("gate closed".into()))?;
            }
            Ok(CallToolResult::text(format!("run {run}: {}", args["text"])))
        })
    }
}

/// Waits until the counting tools have begun `runs` runs.
async fn runs_reach(counted: &Counted, runs: usize) {
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while counted.runs.load(Ordering::SeqCst) != runs {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the runs never came to {runs}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

struct Counted {
    server: RunningServer,
    runs: Arc<AtomicUsize>,
    gate: Arc<Semaphore>,
}

fn start_counting(settings: Settings) -> Counted {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let schema = json!({"type": "object"});
    let count = Tool::from_handler(
        "count",
        "Counts its runs.",
        schema.clone(),
        Count {
            runs: runs.clone(),
            gate: None,
        },
    );
    let held = Tool::from_handler(
        "count_held",
        "Counts its runs, and answers when the test opens the gate.",
        schema,
        Count {
            runs: runs.clone(),
            gate: Some(gate.clone()),
        },
    );
    let server = start_with(settings, |b| b.tool(count).tool(held));
    Counted { server, runs, gate }
}

fn keyed_call(id: Value, tool: &str, text: &str, key: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "name": tool, "arguments": {"text": text}, "_meta": {"idempotencyKey": key}}})
}

fn plain_call(id: Value, text: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "name": "count", "arguments": {"text": text}}})
}

#[tokio::test]
async fn a_retry_with_the_same_key_on_a_new_connection_gets_the_stored_response_with_its_own_id() {
    let counted = start_counting(with_api_key(settings()));
    let mut first = Client::initialized_as(&counted.server, TEST_KEY).await;
    let answer = first
        .send_request(keyed_call(json!(1), "count", "a", "k-1"))
        .await;
    assert_eq!(result_text(&answer, &json!(1)), "run 1: \"a\"");
    drop(first);

    let mut retry = Client::initialized_as(&counted.server, TEST_KEY).await;
    // Another id, and the same params spelled differently: still the same request.
    let again = json!({"jsonrpc":"2.0","id":"retry","method":"tools/call","params":{
        "_meta": {"idempotencyKey": "k-1", "progressToken": 5},
        "arguments": {"text": "\u{61}"}, "name": "count"}});
    let answer = retry.send_request(again).await;
    assert_eq!(result_text(&answer, &json!("retry")), "run 1: \"a\"");
    assert_eq!(counted.runs.load(Ordering::SeqCst), 1, "the tool ran once");
    assert_eq!(metric(&counted.server, "mcp_dedup_hits_total").await, 1);
    assert_eq!(
        metric(&counted.server, "mcp_idempotent_runs_total").await,
        1
    );
    retry.expect_nothing_pending().await;
}

#[tokio::test]
async fn an_anonymous_key_is_replayed_only_within_its_own_session() {
    let counted = start_counting(settings());
    let mut first = Client::initialized(&counted.server).await;
    let mut second = Client::initialized(&counted.server).await;
    let a = first
        .send_request(keyed_call(json!(1), "count", "x", "shared"))
        .await;
    assert_eq!(result_text(&a, &json!(1)), "run 1: \"x\"");
    // Another anonymous client with the same key is another client: its call runs.
    let b = second
        .send_request(keyed_call(json!(1), "count", "x", "shared"))
        .await;
    assert_eq!(result_text(&b, &json!(1)), "run 2: \"x\"");
    // Each one's retry (under another id) gets its own stored answer.
    let again = first
        .send_request(keyed_call(json!(2), "count", "x", "shared"))
        .await;
    assert_eq!(result_text(&again, &json!(2)), "run 1: \"x\"");
    let again = second
        .send_request(keyed_call(json!(2), "count", "x", "shared"))
        .await;
    assert_eq!(result_text(&again, &json!(2)), "run 2: \"x\"");
    assert_eq!(counted.runs.load(Ordering::SeqCst), 2);
    assert_eq!(metric(&counted.server, "mcp_dedup_hits_total").await, 2);
}

#[tokio::test]
async fn the_same_key_with_other_params_is_refused_and_runs_nothing() {
    let counted = start_counting(settings());
    let mut client = Client::initialized(&counted.server).await;
    client
        .send_request(keyed_call(json!(1), "count", "a", "k"))
        .await;
    let refused = client
        .send_request(keyed_call(json!(2), "count", "b", "k"))
        .await;
    let error = assert_error(&refused, &json!(2), -32019);
    assert_eq!(error["data"], json!({"scope": "idempotencyKey"}));
    let other_tool = client
        .send_request(keyed_call(json!(3), "count_held", "a", "k"))
        .await;
    assert_error(&other_tool, &json!(3), -32019);
    assert_eq!(counted.runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        metric(&counted.server, "mcp_dedup_conflicts_total").await,
        2
    );
    // Another key runs, and the session goes on.
    let other = client
        .send_request(keyed_call(json!(4), "count", "b", "k2"))
        .await;
    assert_eq!(result_text(&other, &json!(4)), "run 2: \"b\"");
}

/// A key's stored answer is in the shape of the request that ran it. A retry asking for
/// another (a session-era retry of a 2026-07-28 call on the same connection, or the other
/// way round) is a conflict and runs nothing: it was sent the first answer as it was (a
/// result with `resultType` to a session, one without it to a 2026-07-28 request). A retry
/// in the same shape gets it.
#[tokio::test]
async fn a_keys_answer_is_replayed_only_in_the_shape_it_was_made_in() {
    use crate::support::meta::{add_meta, stateless};
    let counted = start_counting(settings());
    let mut client = Client::initialized(&counted.server).await;
    let modern = |id: u64, text: &str, key: &str| {
        let params = stateless(json!({"name": "count", "arguments": {"text": text}}));
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": add_meta(params, "idempotencyKey", json!(key))})
    };
    let first = client.send_request(modern(1, "a", "k")).await;
    assert_eq!(first["result"]["resultType"], "complete", "{first}");
    let again = client.send_request(modern(2, "a", "k")).await;
    assert_eq!(again["result"]["resultType"], "complete", "{again}");
    assert_eq!(result_text(&again, &json!(2)), "run 1: \"a\"");
    let session = client
        .send_request(keyed_call(json!(3), "count", "a", "k"))
        .await;
    let error = assert_error(&session, &json!(3), -32019);
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("another protocol version"), "{message}");

    let session = client
        .send_request(keyed_call(json!(4), "count", "b", "k2"))
        .await;
    assert_eq!(result_text(&session, &json!(4)), "run 2: \"b\"");
    assert!(session["result"].get("resultType").is_none(), "{session}");
    let modern = client.send_request(modern(5, "b", "k2")).await;
    assert_error(&modern, &json!(5), -32019);
    assert_eq!(counted.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_concurrent_duplicate_joins_the_running_request() {
    let counted = start_counting(with_api_key(settings()));
    let mut first = Client::initialized_as(&counted.server, TEST_KEY).await;
    let mut second = Client::initialized_as(&counted.server, TEST_KEY).await;
    first
        .send_json(keyed_call(json!(1), "count_held", "x", "join"))
        .await;
    wait_metric(&counted.server, "mcp_idempotent_runs_total", 1).await;
    second
        .send_json(keyed_call(json!(2), "count_held", "x", "join"))
        .await;
    // Both are in workers; only the first runs the tool.
    wait_metric(&counted.server, "mcp_workers", 2).await;
    counted.gate.add_permits(1);
    let a = first.recv_response(&json!(1)).await;
    let b = second.recv_response(&json!(2)).await;
    assert_eq!(result_text(&a, &json!(1)), "run 1: \"x\"");
    assert_eq!(result_text(&b, &json!(2)), "run 1: \"x\"");
    assert_eq!(counted.runs.load(Ordering::SeqCst), 1);
    assert_eq!(metric(&counted.server, "mcp_dedup_hits_total").await, 1);
}

#[tokio::test]
async fn a_request_that_ends_without_a_result_frees_its_key() {
    let counted = start_counting(settings());
    let mut client = Client::initialized(&counted.server).await;
    client
        .send_json(keyed_call(json!(1), "count_held", "x", "freed"))
        .await;
    wait_metric(&counted.server, "mcp_pool_running", 1).await;
    client
        .send_json(
            json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}),
        )
        .await;
    wait_metric(&counted.server, "mcp_pool_running", 0).await;
    counted.gate.add_permits(1);
    let retry = client
        .send_request(keyed_call(json!(2), "count_held", "x", "freed"))
        .await;
    assert_eq!(result_text(&retry, &json!(2)), "run 2: \"x\"");
    assert_eq!(metric(&counted.server, "mcp_dedup_hits_total").await, 0);
}

#[tokio::test]
async fn two_connections_sending_id_1_with_equal_params_and_no_key_both_run() {
    let counted = start_counting(settings());
    for run in 1..=2 {
        let mut client = Client::initialized(&counted.server).await;
        let answer = client.send_request(plain_call(json!(1), "same")).await;
        assert_eq!(
            result_text(&answer, &json!(1)),
            format!("run {run}: \"same\"")
        );
    }
    assert_eq!(counted.runs.load(Ordering::SeqCst), 2);
    assert_eq!(metric(&counted.server, "mcp_dedup_hits_total").await, 0);
}

#[tokio::test]
async fn a_finished_id_sent_again_in_the_session_gets_the_stored_response() {
    let counted = start_counting(settings());
    let mut client = Client::initialized(&counted.server).await;
    let first = client.send_request(plain_call(json!(7), "a")).await;
    assert_eq!(result_text(&first, &json!(7)), "run 1: \"a\"");
    let again = client.send_request(plain_call(json!(7), "a")).await;
    assert_eq!(again, first, "the same response, byte for byte");
    let other = client.send_request(plain_call(json!(7), "b")).await;
    let error = assert_error(&other, &json!(7), -32019);
    assert_eq!(error["data"], json!({"scope": "requestId"}));
    // In a batch too.
    client
        .send_json(json!([
            plain_call(json!(7), "a"),
            plain_call(json!(8), "c")
        ]))
        .await;
    let batch = client.recv().await;
    let texts: Vec<String> = batch
        .as_array()
        .expect("a batch answer")
        .iter()
        .map(|r| result_text(r, &r["id"]))
        .collect();
    assert!(texts.contains(&"run 1: \"a\"".to_owned()), "{texts:?}");
    assert!(texts.contains(&"run 2: \"c\"".to_owned()), "{texts:?}");
    assert_eq!(counted.runs.load(Ordering::SeqCst), 2);
    assert_eq!(metric(&counted.server, "mcp_dedup_hits_total").await, 2);
}

#[tokio::test]
async fn a_retry_on_a_resumed_websocket_session_gets_the_stored_response() {
    let counted = start_counting(settings());
    let mut client = Client::connect(&counted.server).await;
    let init = client
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    let session = assert_result(&init, &json!(0))["_meta"]["mcp-ws/sessionId"]
        .as_str()
        .expect("a session id")
        .to_owned();
    let first = client.send_request(plain_call(json!("t"), "a")).await;
    drop(client); // the socket drops without a close: the session waits for a reconnect
    wait_metric(&counted.server, "mcp_parked_sessions", 1).await;

    let mut request = counted.server.url().into_client_request().expect("request");
    request.headers_mut().insert(
        "Mcp-Session-Id",
        HeaderValue::from_str(&session).expect("header"),
    );
    let (ws, _) = tokio_tungstenite::connect_async(request)
        .await
        .expect("the session resumes");
    let mut client = Client::from_ws(ws);
    let again = client.send_request(plain_call(json!("t"), "a")).await;
    assert_eq!(again, first);
    assert_eq!(counted.runs.load(Ordering::SeqCst), 1);
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn with_dedup_off_every_retry_runs() {
    let mut s = settings();
    s.dedup.enabled = false;
    let counted = start_counting(s);
    let mut client = Client::initialized(&counted.server).await;
    client
        .send_request(keyed_call(json!(1), "count", "a", "k"))
        .await;
    let again = client
        .send_request(keyed_call(json!(1), "count", "a", "k"))
        .await;
    assert_eq!(result_text(&again, &json!(1)), "run 2: \"a\"");
    assert_eq!(counted.runs.load(Ordering::SeqCst), 2);
}

/// A keyed retry sent on the same connection while the first still runs, with the same
/// `_meta` (its progress token too, as a retry copies its params), joins the first: one run,
/// both answered with it (review 50: it was refused -32602 as a second request in flight
/// with the token).
#[tokio::test]
async fn a_keyed_retry_with_the_same_progress_token_on_one_connection_joins_the_first() {
    let counted = start_counting(settings());
    let mut client = Client::initialized(&counted.server).await;
    let call = |id: i64, key: &str| {
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
            "name": "count_held", "arguments": {"text": "x"},
            "_meta": {"idempotencyKey": key, "progressToken": "p"}}})
    };
    client.send_json(call(1, "j")).await;
    wait_metric(&counted.server, "mcp_idempotent_runs_total", 1).await;
    client.send_json(call(2, "j")).await;
    // Another key may not share the token.
    client.send_json(call(3, "other")).await;
    let refused = client.recv_response(&json!(3)).await;
    assert_error(&refused, &json!(3), -32602);
    counted.gate.add_permits(1);
    let first = client.recv_response(&json!(1)).await;
    let retry = client.recv_response(&json!(2)).await;
    assert_eq!(result_text(&first, &json!(1)), "run 1: \"x\"");
    assert_eq!(result_text(&retry, &json!(2)), "run 1: \"x\"", "{retry}");
    assert_eq!(counted.runs.load(Ordering::SeqCst), 1);
}

/// Whether a keyed request may share a progress token is told by the request holding it:
/// one of its own key, even before that one runs (waiting for a pool slot), and never one
/// of another kind, even while its own key runs. (Review 54: told by whether its key ran on
/// the node, a retry of a first request still waiting for a slot was refused -32602, and a
/// request whose key ran shared the token of an unrelated request, two runs' progress under
/// one token.)
#[tokio::test]
async fn a_keyed_request_shares_a_progress_token_only_with_its_own_key_running_or_not() {
    let mut settings = settings();
    settings.limits.max_concurrent_requests = 1;
    settings.limits.pool_reserve = Some(0);
    let counted = start_counting(settings);
    let mut client = Client::initialized(&counted.server).await;
    let call = |id: i64, text: &str, key: Option<&str>, token: &str| {
        let mut meta = json!({"progressToken": token});
        if let Some(key) = key {
            meta["idempotencyKey"] = json!(key);
        }
        json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
            "name": "count_held", "arguments": {"text": text}, "_meta": meta}})
    };
    // The pool's one slot is taken by a request holding "q".
    client.send_json(call(1, "a", None, "q")).await;
    runs_reach(&counted, 1).await;
    // A keyed request waits for the slot; its retry shares its token.
    client.send_json(call(2, "x", Some("j"), "p")).await;
    client.send_json(call(3, "x", Some("j"), "p")).await;
    // The same key may not share the token of a request of another kind.
    client.send_json(call(4, "x", Some("j"), "q")).await;
    assert_error(&client.recv_response(&json!(4)).await, &json!(4), -32602);
    // The gate opens (and stays open): the slot comes back, and the keyed request runs,
    // once for both.
    counted.gate.add_permits(1);
    assert_eq!(
        result_text(&client.recv_response(&json!(1)).await, &json!(1)),
        "run 1: \"a\""
    );
    let first = client.recv_response(&json!(2)).await;
    let retry = client.recv_response(&json!(3)).await;
    assert_eq!(result_text(&first, &json!(2)), "run 2: \"x\"");
    assert_eq!(result_text(&retry, &json!(3)), "run 2: \"x\"", "{retry}");
    // Closed again.
    counted.gate.acquire().await.expect("the gate").forget();
    // A keyed request runs, holding the slot; another request, waiting for the slot, holds
    // "s": a request of the running key may not share that.
    client.send_json(call(5, "y", Some("k"), "r")).await;
    runs_reach(&counted, 3).await;
    client.send_json(call(6, "b", None, "s")).await;
    client.send_json(call(7, "y", Some("k"), "s")).await;
    assert_error(&client.recv_response(&json!(7)).await, &json!(7), -32602);
    counted.gate.add_permits(1);
    assert_eq!(
        result_text(&client.recv_response(&json!(5)).await, &json!(5)),
        "run 3: \"y\""
    );
    assert_eq!(
        result_text(&client.recv_response(&json!(6)).await, &json!(6)),
        "run 4: \"b\""
    );
    assert_eq!(counted.runs.load(Ordering::SeqCst), 4);
}
