//! `mcp_ws::client` over stdio against a child that answers badly: each answer to one of the
//! client's ids answers its request at once, as what it is (an error, a malformed answer),
//! never skipped to wait for a deadline.

use crate::support::READ_TIMEOUT;
use mcp_ws::client::{Client, ClientError, ClientOptions, StdioCommand};
use serde_json::json;

/// A child that answers `initialize`, and each `tools/call` with the answer its tool's name
/// picks (as the JSON text after the id).
const CHILD: &str = r#"
import json, sys
answers = {
    "no_message": '"error":{"code":-32000}',
    "string_code": '"error":{"code":"x","message":"m"}',
    "null_result": '"result":null',
    "neither": '"other":1',
}
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    if message["method"] == "initialize":
        result = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "bad", "version": "1"}}
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
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
        let answer = tokio::time::timeout(
            READ_TIMEOUT,
            client.request("tools/call", Some(json!({"name": name}))),
        )
        .await
        .unwrap_or_else(|_| panic!("{name}: answered at once, not held to a deadline"));
        assert!(
            matches!(answer, Err(ClientError::InvalidAnswer(_))),
            "{name}: {answer:?}"
        );
    }
    let null = tokio::time::timeout(
        READ_TIMEOUT,
        client.request("tools/call", Some(json!({"name": "null_result"}))),
    )
    .await
    .expect("null_result: answered at once");
    assert_eq!(null.expect("a result").get(), "null");
    client.shutdown(std::time::Duration::from_secs(2)).await;
}
