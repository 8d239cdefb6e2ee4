//! `mcp_ws::client` over stdio against a child that answers badly: each answer to one of the
//! client's ids answers its request at once, as what it is (an error, a malformed answer,
//! one over the message limit), never skipped to wait for a deadline; and against one that reads nothing, the requests
//! given up on leave no task each behind.

use crate::support::READ_TIMEOUT;
use mcp_ws::client::{Client, ClientError, ClientOptions, StdioCommand};
use serde_json::json;
use serde_json::value::RawValue;

/// A child that answers `initialize`, and each `tools/call` with the answer its tool's name
/// picks (as the JSON text after the id).
const CHILD: &str = r#"
import json, sys
answers = {
    "no_message": '"error":{"code":-32000}',
    "string_code": '"error":{"code":"x","message":"m"}',
    "null_result": '"result":null',
    "neither": '"other":1',
    "null_error": '"result":{"content":[]},"error":null',
}
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    if message["method"] == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "bad", "version": "1"}}
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
    elif message["params"]["name"] == "too_long":
        # A megabyte of result, the id after it (as the TypeScript SDK writes an answer).
        print('{"result":{"content":[{"type":"text","text":"%s"}]},"jsonrpc":"2.0","id":%s}'
              % ("x" * (1 << 20), json.dumps(message["id"])), flush=True)
    else:
        answer = answers[message["params"]["name"]]
        print('{"jsonrpc":"2.0","id":%s,%s}' % (json.dumps(message["id"]), answer), flush=True)
"#;

#[tokio::test]
async fn a_malformed_answer_answers_its_request_at_once() {
    let child = StdioCommand::new("python3").args(["-c", CHILD]);
    let client = Client::stdio(child, ClientOptions::default())
        .await
        .expect("the child answers initialize");
    for name in ["no_message", "string_code", "neither"] {
        let answer = call_at_once(&client, name).await;
        assert!(
            matches!(answer, Err(ClientError::InvalidAnswer(_))),
            "{name}: {answer:?}"
        );
    }
    let null = call_at_once(&client, "null_result").await;
    assert_eq!(null.expect("a result").get(), "null");
    let null_error = call_at_once(&client, "null_error").await;
    assert_eq!(
        null_error
            .expect("`\"error\": null` beside a result is a success")
            .get(),
        r#"{"content":[]}"#
    );
    client.shutdown(std::time::Duration::from_secs(2)).await;
}

/// An answer over `max_message_bytes` is skipped, and answers its request at once as too
/// long (its id read as the line streams past, here after the result): the request does
/// not wait for a deadline, and the answers after it are read as before.
#[tokio::test]
async fn an_answer_over_max_message_bytes_answers_its_request_at_once() {
    let child = StdioCommand::new("python3").args(["-c", CHILD]);
    let options = ClientOptions {
        max_message_bytes: 64 << 10,
        ..ClientOptions::default()
    };
    let client = Client::stdio(child, options)
        .await
        .expect("the child answers initialize");
    let answer = call_at_once(&client, "too_long").await;
    match answer {
        Err(ClientError::InvalidAnswer(why)) => assert!(
            why.contains("longer than max_message_bytes (65536 bytes)"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    let next = call_at_once(&client, "null_result").await;
    assert_eq!(next.expect("a result").get(), "null");
    client.shutdown(std::time::Duration::from_secs(2)).await;
}

/// The answer to a `tools/call` of `name`, which must come within [`READ_TIMEOUT`]: at once,
/// not held to a deadline.
async fn call_at_once(client: &Client, name: &str) -> Result<Box<RawValue>, ClientError> {
    tokio::time::timeout(
        READ_TIMEOUT,
        client.request("tools/call", Some(json!({ "name": name }))),
    )
    .await
    .unwrap_or_else(|_| panic!("{name}: answered at once, not held to a deadline"))
}

/// A child that answers `initialize` and then reads nothing more from its stdin.
const DEAF_CHILD: &str = r#"
import json, sys, time
message = json.loads(sys.stdin.readline())
result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
          "serverInfo": {"name": "deaf", "version": "1"}}
print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
time.sleep(600)
"#;

/// Requests given up on while the server reads nothing do not each leave a task behind: one
/// never sent (it waited for room in the full queue) is not cancelled, and the cancels that
/// wait for room are at most as many as the queue holds. (Each gave-up request spawned a
/// task holding its cancel, for as long as the child lived: 800,000 of them took 700 MB.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_given_up_on_a_deaf_server_leave_no_task_each() {
    let child = StdioCommand::new("python3").args(["-c", DEAF_CHILD]);
    let client = Client::stdio(child, ClientOptions::default())
        .await
        .expect("the child answers initialize");
    let metrics = tokio::runtime::Handle::current().metrics();
    let before = metrics.num_alive_tasks();
    for n in 0..4000 {
        let params = json!({"name": "anything", "arguments": {"n": n, "pad": "x".repeat(200)}});
        let _ = tokio::time::timeout(
            std::time::Duration::from_millis(1),
            client.request("tools/call", Some(params)),
        )
        .await;
    }
    let left = metrics.num_alive_tasks().saturating_sub(before);
    // The queue holds 1024 messages (OUTGOING_QUEUE): as many cancels may wait.
    assert!(
        left <= 1100,
        "{left} tasks left behind by 4000 requests given up on"
    );
    client.shutdown(std::time::Duration::from_secs(2)).await;
}
