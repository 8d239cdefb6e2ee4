//! JSON-RPC 2.0 batches (seed 004 §Batch; MCP 2025-03-26): `[]` gets one -32600 object (not
//! an array); invalid entries are answered one by one; notifications get no entry; an
//! all-notification batch gets no frame at all; entries run concurrently and the array is
//! sent when all are done; a batch over the length limit gets one -32010 error; `initialize`
//! inside a batch is refused; unparsable batch text gets one -32700 object; a full batch of
//! calls on default settings runs whole (the batch limit is within the in-flight cap).

use crate::support::http::{metric, wait_metric};
use crate::support::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Indexes the entries of a batch response by id (as text).
fn by_id(response: &Value) -> BTreeMap<String, Value> {
    let entries = response
        .as_array()
        .unwrap_or_else(|| panic!("expected an array: {response}"));
    let map: BTreeMap<String, Value> = entries
        .iter()
        .map(|e| (e["id"].to_string(), e.clone()))
        .collect();
    assert_eq!(map.len(), entries.len(), "each id at most once: {response}");
    map
}

#[tokio::test]
async fn empty_batch_gets_a_single_invalid_request() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client.send_text("[]").await;
    let response = client.recv().await;
    assert!(
        response.is_object(),
        "a single object, not an array: {response}"
    );
    assert_error(&response, &Value::Null, -32600);
}

#[tokio::test]
async fn unparsable_batch_gets_a_single_parse_error() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_text(r#"[{"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"1"},{"jsonrpc":"2.0","method""#)
        .await;
    let response = client.recv().await;
    assert!(response.is_object(), "{response}");
    assert_error(&response, &Value::Null, -32700);
}

#[tokio::test]
async fn invalid_entries_are_answered_one_by_one() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client.send_text("[1,2,3]").await;
    let response = client.recv().await;
    let entries = response.as_array().expect("array");
    assert_eq!(entries.len(), 3);
    for entry in entries {
        assert_error(entry, &Value::Null, -32600);
    }
}

#[tokio::test]
async fn mixed_batch_answers_requests_and_skips_notifications() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_json(json!([
            {"jsonrpc":"2.0","id":"a","method":"ping"},
            {"jsonrpc":"2.0","method":"notifications/initialized"},
            {"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}},
            {"foo":"boo"},
            {"jsonrpc":"2.0","id":"c","method":"no/such"},
            {"jsonrpc":"2.0","method":"no/such/notification"},
            {"jsonrpc":"2.0","id":"d","method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}
        ]))
        .await;
    let response = client.recv().await;
    let entries = by_id(&response);
    assert_eq!(
        entries.len(),
        5,
        "4 requests + 1 invalid entry, no notification: {response}"
    );
    assert_eq!(assert_result(&entries["\"a\""], &json!("a")), json!({}));
    assert_eq!(
        assert_result(&entries["\"b\""], &json!("b"))["content"][0]["text"],
        "x"
    );
    assert_error(&entries["\"c\""], &json!("c"), -32601);
    assert_eq!(
        assert_result(&entries["\"d\""], &json!("d"))["content"][0]["text"],
        "3"
    );
    assert_error(&entries["null"], &Value::Null, -32600);
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn all_notification_batch_gets_no_frame_at_all() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_json(json!([
            {"jsonrpc":"2.0","method":"notifications/initialized"},
            {"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}},
            {"jsonrpc":"2.0","method":"whatever"}
        ]))
        .await;
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn entries_run_concurrently_and_the_array_waits_for_all() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_json(json!([
            {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":300}}},
            {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":300}}},
            {"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":300}}},
            {"jsonrpc":"2.0","id":4,"method":"ping"}
        ]))
        .await;
    // One frame holding all four: the inline ping was not sent ahead on its own.
    let response = client.recv().await;
    let entries = by_id(&response);
    assert_eq!(
        entries.keys().cloned().collect::<Vec<_>>(),
        ["1", "2", "3", "4"]
    );
    for id in 1..=3 {
        assert_eq!(
            assert_result(&entries[&id.to_string()], &json!(id))["content"][0]["text"],
            "slept 300 ms"
        );
    }
    // All three sleeps held a pool slot at the same time: they ran concurrently.
    assert_eq!(metric(&server, "mcp_pool_running_peak").await, 3);
    client.expect_nothing_pending().await;
}

/// A batch's entry counts as in flight until the batch's array is sent, even once its own
/// answer is done: a request of its id meanwhile gets -32003, and the id is answered once,
/// in the array. (It was run, or replayed from the answers the session remembers, and its
/// id answered twice.)
#[tokio::test]
async fn an_id_of_a_batch_still_collecting_its_answers_is_a_duplicate() {
    let (server, gate) = start_with_gate(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_json(json!([
            {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"batched"}}},
            {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"hold","arguments":{}}}
        ]))
        .await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    for params in [
        json!({"name": "echo", "arguments": {"text": "batched"}}),
        json!({"name": "add", "arguments": {"a": 1, "b": 2}}),
    ] {
        let again = client.request_with_id(json!(1), "tools/call", params).await;
        assert_error(&again, &json!(1), -32003);
    }
    gate.add_permits(1);
    let response = client.recv().await;
    let entries = by_id(&response);
    assert_eq!(
        assert_result(&entries["1"], &json!(1))["content"][0]["text"],
        "batched"
    );
    assert_result(&entries["2"], &json!(2));
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn batch_over_the_limit_gets_one_error() {
    let mut s = settings();
    s.limits.max_batch_len = 3;
    let server = start(s);
    let mut client = Client::initialized(&server).await;
    let batch: Vec<Value> = (0..4)
        .map(|i| json!({"jsonrpc":"2.0","id":i,"method":"ping"}))
        .collect();
    client.send_json(Value::Array(batch)).await;
    let response = client.recv().await;
    let error = assert_error(&response, &Value::Null, -32010);
    assert_eq!(error["data"], json!({"limit": 3, "received": 4}));
    // At the limit is fine.
    let batch: Vec<Value> = (0..3)
        .map(|i| json!({"jsonrpc":"2.0","id":i,"method":"ping"}))
        .collect();
    client.send_json(Value::Array(batch)).await;
    assert_eq!(by_id(&client.recv().await).len(), 3);
}

#[tokio::test]
async fn a_full_batch_of_calls_runs_whole_on_default_settings() {
    // The default batch length is within the default per-session cap on requests in
    // flight: no entry of a full batch of calls is refused as "session busy" (-32009).
    let (server, gate) = start_with_gate(settings());
    let len = settings().limits.max_batch_len;
    let mut client = Client::initialized(&server).await;
    let batch: Vec<Value> = (0..len)
        .map(|i| json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"hold"}}))
        .collect();
    client.send_json(Value::Array(batch)).await;
    // All of them in flight at once, then let go.
    wait_metric(&server, "mcp_workers", len as u64).await;
    gate.add_permits(len);
    let entries = by_id(&client.recv().await);
    assert_eq!(entries.len(), len);
    for (id, entry) in &entries {
        let id: Value = serde_json::from_str(id).expect("id");
        assert_eq!(text_of(&assert_result(entry, &id)), "released");
    }
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"session_busy\"}").await,
        0
    );
}

#[tokio::test]
async fn initialize_inside_a_batch_is_refused() {
    let server = start(settings());
    let mut client = Client::connect(&server).await;
    client
        .send_json(json!([
            {"jsonrpc":"2.0","id":1,"method":"initialize","params":initialize_params("2025-03-26")},
            {"jsonrpc":"2.0","id":2,"method":"ping"}
        ]))
        .await;
    let entries = by_id(&client.recv().await);
    assert_error(&entries["1"], &json!(1), -32600);
    assert_result(&entries["2"], &json!(2));
    // The session is still uninitialized: business methods are refused...
    let response = client.request("tools/list", json!({})).await;
    assert_error(&response, &response["id"], -32000);
    // ...and a proper initialize works.
    let response = client
        .request_with_id(json!(3), "initialize", initialize_params("2025-03-26"))
        .await;
    assert_eq!(
        assert_result(&response, &json!(3))["protocolVersion"],
        "2025-03-26"
    );
}

#[tokio::test]
async fn cancelled_batch_entry_is_left_out_of_the_array() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_json(json!([
            {"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000}}},
            {"jsonrpc":"2.0","id":"fast","method":"tools/call","params":{"name":"sleep","arguments":{"ms":200}}}
        ]))
        .await;
    client
        .send_json(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"slow"}}))
        .await;
    let entries = by_id(&client.recv().await);
    assert_eq!(entries.keys().cloned().collect::<Vec<_>>(), ["\"fast\""]);
    assert_cancel_stopped_the_worker(&server).await;
}

/// One request was cancelled, and its worker stopped: the pool slot the cancel does not
/// free by itself came back (`mcp_workers` drops with the cancel alone).
async fn assert_cancel_stopped_the_worker(server: &mcp_ws::RunningServer) {
    wait_metric(server, "mcp_pool_running", 0).await;
    wait_metric(server, "mcp_workers", 0).await;
    assert_eq!(metric(server, "mcp_cancelled_total").await, 1);
}

/// A cancel inside the same batch as its request settles that entry at once; the batch is
/// still answered (with the other entries) and no batch state is left behind.
#[tokio::test]
async fn cancel_in_the_same_batch_leaves_the_request_out_and_the_batch_answered() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_json(json!([
            {"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"sleep","arguments":{"ms":60000}}},
            {"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"slow"}},
            {"jsonrpc":"2.0","id":"p","method":"ping"}
        ]))
        .await;
    let entries = by_id(&client.recv().await);
    assert_eq!(entries.keys().cloned().collect::<Vec<_>>(), ["\"p\""]);
    assert_eq!(assert_result(&entries["\"p\""], &json!("p")), json!({}));
    assert_cancel_stopped_the_worker(&server).await;
    client.expect_nothing_pending().await;
}
