//! Worker actors (issue "Worker actors"): responses leave in completion order; cancellation
//! stops the worker, frees its pool slot and suppresses the response (unknown ids ignored);
//! progress echoes string and integer tokens exactly, strictly increasing, all before the
//! response; the per-session cap refuses at once with -32009; the global pool is enforced,
//! its wait is bounded (-32008) and cancellable; timeouts answer -32001 and progress extends
//! them only up to the hard maximum; a disconnect frees everything; a panicking tool answers
//! -32603 and the session lives on; cheap methods answer inline under tool load.
//!
//! Fair shares of the pool: a session holding slots takes another only while more than
//! `limits.pool_reserve` are free, so the reserve is left for sessions holding none (a new
//! client's call runs while another session's excess waits, and that excess runs as soon as
//! slots come back); a lone session still gets all but the reserve.
//!
//! Limits are observed through `/metrics` gauges and their peaks, never through timing.

use crate::support::http::{metric, wait_metric};
use crate::support::ws::assert_server_alive;
use crate::support::*;
use mcp_ws::model::CallToolResult;
use mcp_ws::RunningServer;
use mcp_ws::Tool;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::Semaphore;

fn sleep_call(id: Value, ms: u64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":ms}}})
}

fn sleep_call_with_token(id: Value, ms: u64, token: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call",
           "params":{"name":"sleep","arguments":{"ms":ms},"_meta":{"progressToken":token}}})
}

#[tokio::test]
async fn a_slow_call_never_holds_back_a_fast_one() {
    let (server, gate) = start_with_gate(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_json(
            json!({"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"hold"}}),
        )
        .await;
    client
        .send_json(json!({"jsonrpc":"2.0","id":"fast","method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}))
        .await;
    let first = client.recv().await;
    assert_eq!(first["id"], "fast");
    gate.add_permits(1);
    let second = client.recv().await;
    assert_eq!(second["id"], "slow");
    assert_eq!(second["result"]["content"][0]["text"], "released");
}

#[tokio::test]
async fn cancel_mid_flight_sends_nothing_and_frees_the_slot() {
    let mut s = settings();
    s.limits.max_concurrent_requests = 1;
    let server = start(s);
    let mut client = Client::initialized(&server).await;
    client.send_json(sleep_call(json!("long"), 60_000)).await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    client.send_json(cancel(json!("long"))).await;
    wait_metric(&server, "mcp_pool_running", 0).await;
    wait_metric(&server, "mcp_workers", 0).await;
    assert_eq!(metric(&server, "mcp_cancelled_total").await, 1);
    client.expect_nothing_pending().await;
    // The only slot is free again: the next call runs and answers.
    let response = client.call_tool("sleep", json!({"ms": 10})).await;
    assert_eq!(response["result"]["content"][0]["text"], "slept 10 ms");
}

#[tokio::test]
async fn a_result_that_would_follow_its_cancel_is_dropped() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    // The echo is done within its worker's first poll, but its result travels as a message
    // and reaches the session only after the cancel in the same frame was handled: it must
    // be dropped. The batch then has nothing to answer.
    client
        .send_json(json!([
            {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}},
            cancel(json!(1))
        ]))
        .await;
    client.expect_nothing_pending().await;
    wait_metric(&server, "mcp_workers", 0).await;
    assert_eq!(metric(&server, "mcp_cancelled_total").await, 1);
}

#[tokio::test]
async fn an_id_sent_again_after_its_cancel_gets_its_own_answer_not_the_cancelled_ones() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    // The first echo is done within its worker's first poll; its result reaches the
    // session after the cancel, and after the second request of the same id was taken:
    // it must not be taken for the second's answer.
    client
        .send_json(json!([
            {"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"A"}}},
            cancel(json!(7)),
            {"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"B"}}}
        ]))
        .await;
    let answer = client.recv().await;
    let answers = answer.as_array().expect("the batch's answer");
    assert_eq!(answers.len(), 1, "{answer}");
    assert_eq!(answers[0]["id"], 7, "{answer}");
    assert_eq!(tool_text(&answers[0]), "B", "{answer}");
    client.expect_nothing_pending().await;
    wait_metric(&server, "mcp_workers", 0).await;
}

#[tokio::test]
async fn cancel_of_unknown_or_finished_ids_is_ignored() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let response = client.request_with_id(json!(5), "ping", json!({})).await;
    assert_eq!(response["result"], json!({}));
    for id in [
        json!(5),
        json!("never"),
        json!(12345),
        Value::Null,
        json!({"x":1}),
    ] {
        client.send_json(cancel(id)).await;
    }
    client.expect_nothing_pending().await;
    assert_eq!(metric(&server, "mcp_cancelled_total").await, 0);
    // Initialize itself is never in flight, so cancelling its id does nothing either.
    client.send_json(cancel(json!(0))).await;
    client.expect_nothing_pending().await;
}

/// Reads frames until the response to `id`; returns the progress notifications before it.
async fn progress_until_response(client: &mut Client, id: &Value) -> (Vec<String>, Value) {
    let mut progress = Vec::new();
    loop {
        let text = client.recv_text().await;
        let value: Value = serde_json::from_str(&text).expect("json");
        if &value["id"] == id {
            return (progress, value);
        }
        assert_eq!(value["method"], "notifications/progress", "{text}");
        progress.push(text);
    }
}

fn assert_strictly_increasing(frames: &[String], total: f64) {
    assert!(
        frames.len() >= 2,
        "progress at least every 100 ms: {frames:?}"
    );
    let mut last = f64::MIN;
    for frame in frames {
        let value: Value = serde_json::from_str(frame).expect("json");
        let progress = value["params"]["progress"].as_f64().expect("progress");
        assert!(progress > last, "strictly increasing: {frames:?}");
        assert!(progress < total);
        assert_eq!(value["params"]["total"].as_f64(), Some(total));
        last = progress;
    }
}

#[tokio::test]
async fn progress_echoes_string_and_integer_tokens_before_the_response() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    for (id, token_json) in [
        (json!(1), r#""tok-\u00e9""#),
        (json!(2), "42"),
        (json!(3), "18446744073709551616"),
    ] {
        let request = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":400}},"_meta":{{"progressToken":{token_json}}}}}}}"#
        );
        client.send_text(&request).await;
        let (progress, response) = progress_until_response(&mut client, &id).await;
        assert_eq!(response["result"]["content"][0]["text"], "slept 400 ms");
        assert_strictly_increasing(&progress, 400.0);
        for frame in &progress {
            assert!(
                frame.contains(&format!(r#""progressToken":{token_json},"#)),
                "token echoed byte-exact: {frame}"
            );
        }
        // Nothing after the response.
        client.expect_nothing_pending().await;
    }
}

#[tokio::test]
async fn no_progress_without_a_token() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client.send_json(sleep_call(json!(1), 300)).await;
    let response = client.recv().await;
    assert_eq!(
        response["id"], 1,
        "the first frame is the response: {response}"
    );
    assert_eq!(response["result"]["content"][0]["text"], "slept 300 ms");
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn progress_stops_when_the_request_is_cancelled() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    client
        .send_json(sleep_call_with_token(json!("c"), 60_000, json!("t")))
        .await;
    // Wait for progress to flow, then cancel.
    let first = client.recv().await;
    assert_eq!(first["method"], "notifications/progress");
    client.send_json(cancel(json!("c"))).await;
    // The pool slot comes back only when the worker's future is dropped.
    wait_metric(&server, "mcp_pool_running", 0).await;
    // A progress frame may have crossed the cancel on the wire, but no response may come.
    for frame in client.drain_until_barrier().await {
        assert_eq!(frame["method"], "notifications/progress", "{frame}");
        assert_eq!(frame["params"]["progressToken"], "t", "{frame}");
    }
    // While a second request reports progress twice (at least one 50 ms interval), every
    // frame is the second request's: nothing of "t" comes any more.
    client
        .send_json(sleep_call_with_token(json!("d"), 60_000, json!("t2")))
        .await;
    for _ in 0..2 {
        let frame = client.recv().await;
        assert_eq!(frame["method"], "notifications/progress", "{frame}");
        assert_eq!(frame["params"]["progressToken"], "t2", "{frame}");
    }
    client.send_json(cancel(json!("d"))).await;
    wait_metric(&server, "mcp_pool_running", 0).await;
}

#[tokio::test]
async fn two_hundred_concurrent_requests_are_each_answered_exactly_once() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    let batch_of_frames: Vec<Value> = (0..200).map(|i| sleep_call(json!(i), 100)).collect();
    for request in batch_of_frames {
        client.send_json(request).await;
    }
    let mut answers: BTreeMap<i64, Value> = BTreeMap::new();
    for _ in 0..200 {
        let response = client.recv().await;
        let id = response["id"].as_i64().expect("integer id");
        assert!(
            answers.insert(id, response).is_none(),
            "id {id} answered twice"
        );
    }
    assert_eq!(answers.len(), 200);
    let mut results = 0;
    for (id, response) in &answers {
        if response.get("result").is_some() {
            results += 1;
        } else {
            let error = assert_error(response, &json!(id), -32009);
            assert_eq!(error["data"], json!({"scope":"session","limit":64}));
        }
    }
    let refused = metric(&server, r#"mcp_rejected_total{reason="session_busy"}"#).await;
    assert!(results >= 64, "at least the cap's worth ran: {results}");
    assert_eq!(results + refused, 200);
    assert_eq!(metric(&server, "mcp_session_in_flight_peak").await, 64);
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn the_per_session_cap_refuses_at_once() {
    let mut s = settings();
    s.limits.max_in_flight_per_session = 4;
    let server = start(s);
    let mut client = Client::initialized(&server).await;
    for id in 1..=10 {
        client.send_json(sleep_call(json!(id), 60_000)).await;
    }
    for id in 5..=10 {
        let response = client.recv().await;
        let error = assert_error(&response, &json!(id), -32009);
        assert_eq!(error["data"], json!({"scope":"session","limit":4}));
    }
    assert_eq!(metric(&server, "mcp_session_in_flight_peak").await, 4);
    assert_eq!(metric(&server, "mcp_workers").await, 4);
    // Another session has its own cap.
    let mut other = Client::initialized(&server).await;
    let response = other.call_tool("echo", json!({"text": "mine"})).await;
    assert_eq!(response["result"]["content"][0]["text"], "mine");
    for id in 1..=4 {
        client.send_json(cancel(json!(id))).await;
    }
    wait_metric(&server, "mcp_workers", 0).await;
    client.expect_nothing_pending().await;
}

#[tokio::test]
async fn the_global_pool_bounds_concurrency_across_sessions() {
    let mut s = settings();
    s.limits.max_concurrent_requests = 2;
    s.limits.admission_wait_ms = 30_000;
    let server = start(s);
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(Client::initialized(&server).await);
    }
    for (c, client) in clients.iter_mut().enumerate() {
        for i in 0..2 {
            client.send_json(sleep_call(json!(c * 10 + i), 500)).await;
        }
    }
    for client in &mut clients {
        for _ in 0..2 {
            let response = client.recv().await;
            assert_eq!(
                response["result"]["content"][0]["text"], "slept 500 ms",
                "{response}"
            );
        }
    }
    assert_eq!(metric(&server, "mcp_pool_running_peak").await, 2);
    assert!(metric(&server, "mcp_pool_waiting_peak").await >= 1);
    assert_eq!(
        metric(&server, r#"mcp_rejected_total{reason="server_busy"}"#).await,
        0
    );
}

/// A call of the gated `hold` tool, id `id`.
fn hold(id: usize) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"hold"}})
}

#[tokio::test]
async fn a_session_leaves_the_reserve_to_sessions_holding_no_slot() {
    let mut s = settings();
    s.limits.max_concurrent_requests = 8;
    s.limits.pool_reserve = Some(2);
    s.limits.admission_wait_ms = 60_000;
    let (server, gate) = start_with_gate(s);
    let mut greedy = Client::initialized(&server).await;
    for id in 0..8 {
        greedy.send_json(hold(id)).await;
    }
    // All but the reserve run; the rest waits, though two slots are free.
    wait_metric(&server, "mcp_pool_running", 6).await;
    wait_metric(&server, "mcp_pool_waiting", 2).await;
    // Two other clients' sessions each get a slot of the reserve at once.
    let mut others = Vec::new();
    for (id, from) in [(100, [127, 0, 0, 2]), (101, [127, 0, 0, 3])] {
        let mut other = Client::initialized_from(&server, from).await;
        other.send_json(hold(id)).await;
        others.push(other);
    }
    wait_metric(&server, "mcp_pool_running", 8).await;
    assert_eq!(metric(&server, "mcp_pool_waiting").await, 2);
    // Slots coming back go to the waiting requests: every call is answered.
    gate.add_permits(10);
    for _ in 0..8 {
        let response = greedy.recv().await;
        assert_eq!(tool_text(&response), "released", "{response}");
    }
    for other in &mut others {
        let response = other.recv().await;
        assert_eq!(tool_text(&response), "released", "{response}");
    }
    assert_eq!(
        metric(&server, r#"mcp_rejected_total{reason="server_busy"}"#).await,
        0
    );
    wait_metric(&server, "mcp_pool_running", 0).await;
    assert_eq!(server.shared().pool.available_permits(), 8);
}

/// The reserve goes to one session of a client address at a time: many sessions of one
/// client, each holding one slot, cannot take it all, and a new client's first call still
/// finds a slot. (71 sessions of one address took all 512 slots, and a new client's call
/// waited `admission_wait_ms` for -32008.)
#[tokio::test]
async fn many_sessions_of_one_address_leave_the_reserve_to_other_clients() {
    let mut s = settings();
    s.limits.max_concurrent_requests = 8;
    s.limits.pool_reserve = Some(2);
    s.limits.admission_wait_ms = 60_000;
    let (server, gate) = start_with_gate(s);
    // Six sessions of 127.0.0.1 take six slots; the reserve is left.
    let mut crowd = Vec::new();
    for id in 0..6 {
        let mut session = Client::initialized(&server).await;
        session.send_json(hold(id)).await;
        crowd.push(session);
        wait_metric(&server, "mcp_pool_running", id as u64 + 1).await;
    }
    // Three more of the same address: one gets a slot of the reserve, the others wait.
    for id in 6..9 {
        let mut session = Client::initialized(&server).await;
        session.send_json(hold(id)).await;
        crowd.push(session);
    }
    wait_metric(&server, "mcp_pool_running", 7).await;
    wait_metric(&server, "mcp_pool_waiting", 2).await;
    // Another client's first call finds the last slot at once.
    let mut other = Client::initialized_from(&server, [127, 0, 0, 2]).await;
    other.send_json(hold(100)).await;
    wait_metric(&server, "mcp_pool_running", 8).await;
    gate.add_permits(20);
    for session in &mut crowd {
        let response = session.recv().await;
        assert_eq!(tool_text(&response), "released", "{response}");
    }
    let response = other.recv().await;
    assert_eq!(tool_text(&response), "released", "{response}");
    assert_eq!(
        metric(&server, r#"mcp_rejected_total{reason="server_busy"}"#).await,
        0
    );
    wait_metric(&server, "mcp_pool_running", 0).await;
    assert_eq!(server.shared().pool.available_permits(), 8);
}

/// A burst of a new session that met a full pool (its requests queued together, each holding
/// no slot when it began to wait) takes one slot as the pool frees, not the reserve: the
/// requests that find their session holding one by their turn give theirs back and wait as
/// its other requests do, and a session arriving after still finds the reserve. (Each
/// kept the slot it was given, and the burst took the whole pool.)
#[tokio::test]
async fn a_burst_that_met_a_full_pool_leaves_the_reserve_to_sessions_after_it() {
    let mut s = settings();
    s.limits.max_concurrent_requests = 4;
    s.limits.pool_reserve = Some(2);
    s.limits.admission_wait_ms = 60_000;
    // Two gates: the pool's fillers end together, the others when the test is done.
    let (fill_gate, gate) = (Arc::new(Semaphore::new(0)), Arc::new(Semaphore::new(0)));
    let tool = |name: &str, gate: &Arc<Semaphore>| {
        mcp_ws::Tool::from_handler(
            name,
            "Holds.",
            json!({"type": "object"}),
            Hold(gate.clone()),
        )
    };
    let (fill, hold_tool) = (tool("fill", &fill_gate), tool("hold", &gate));
    let server = start_with(s, |b| b.tool(fill).tool(hold_tool));
    let call = |id: usize, name: &str| json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name}});
    // The pool filled by three clients' sessions (one alone may take only what the reserve
    // leaves, and one address only one slot of the reserve).
    let mut fillers = Vec::new();
    for (count, first_id, from) in [(2, 0, 2), (1, 10, 3), (1, 20, 4)] {
        let mut filler = Client::initialized_from(&server, [127, 0, 0, from]).await;
        for id in first_id..first_id + count {
            filler.send_json(call(id, "fill")).await;
        }
        fillers.push((filler, count));
        let running: usize = fillers.iter().map(|(_, count)| count).sum();
        wait_metric(&server, "mcp_pool_running", running as u64).await;
    }
    let mut burst = Client::initialized(&server).await;
    for id in 100..103 {
        burst.send_json(call(id, "hold")).await;
    }
    wait_metric(&server, "mcp_pool_waiting", 3).await;

    // The four slots come back: the burst takes what leaves the reserve free, and waits for
    // the rest.
    fill_gate.add_permits(1);
    for (filler, count) in &mut fillers {
        for _ in 0..*count {
            let response = filler.recv().await;
            assert_eq!(tool_text(&response), "released", "{response}");
        }
    }
    wait_metric(&server, "mcp_pool_running", 2).await;
    wait_metric(&server, "mcp_pool_waiting", 1).await;
    assert_eq!(server.shared().pool.available_permits(), 2);
    // Another client's session after it finds the reserve.
    let mut late = Client::initialized_from(&server, [127, 0, 0, 5]).await;
    late.send_json(call(200, "hold")).await;
    wait_metric(&server, "mcp_pool_running", 3).await;

    gate.add_permits(1);
    for _ in 0..3 {
        let response = burst.recv().await;
        assert_eq!(tool_text(&response), "released", "{response}");
    }
    let response = late.recv().await;
    assert_eq!(tool_text(&response), "released", "{response}");
    wait_metric(&server, "mcp_pool_running", 0).await;
    assert_eq!(server.shared().pool.available_permits(), 4);
}

/// A server whose global pool has one slot, held by a sleep (id "hold") of the returned
/// client; requests that need the pool wait up to `admission_wait_ms`.
async fn one_slot_held(admission_wait_ms: u64) -> (RunningServer, Client) {
    let mut s = settings();
    s.limits.max_concurrent_requests = 1;
    s.limits.admission_wait_ms = admission_wait_ms;
    let server = start(s);
    let mut holder = Client::initialized(&server).await;
    holder.send_json(sleep_call(json!("hold"), 60_000)).await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    (server, holder)
}

#[tokio::test]
async fn pool_wait_is_bounded_with_server_busy() {
    let (server, mut holder) = one_slot_held(100).await;
    let mut waiter = Client::initialized(&server).await;
    let response = waiter.call_tool("sleep", json!({"ms": 1})).await;
    let error = assert_error(&response, &response["id"], -32008);
    assert_eq!(
        error["data"],
        json!({"scope":"server","limit":1,"waitedMs":100})
    );
    assert_eq!(
        metric(&server, r#"mcp_rejected_total{reason="server_busy"}"#).await,
        1
    );
    holder.send_json(cancel(json!("hold"))).await;
    wait_metric(&server, "mcp_pool_running", 0).await;
}

#[tokio::test]
async fn waiting_for_the_pool_is_cancellable() {
    let (server, mut holder) = one_slot_held(60_000).await;
    let mut waiter = Client::initialized(&server).await;
    waiter.send_json(sleep_call(json!("w"), 10)).await;
    wait_metric(&server, "mcp_pool_waiting", 1).await;
    waiter.send_json(cancel(json!("w"))).await;
    wait_metric(&server, "mcp_pool_waiting", 0).await;
    waiter.expect_nothing_pending().await;
    // Freeing the holder lets the waiter's next call run.
    holder.send_json(cancel(json!("hold"))).await;
    let response = waiter.call_tool("sleep", json!({"ms": 10})).await;
    assert_eq!(response["result"]["content"][0]["text"], "slept 10 ms");
}

#[tokio::test]
async fn cheap_methods_answer_inline_under_tool_load() {
    let mut s = settings();
    s.limits.max_concurrent_requests = 1;
    s.limits.admission_wait_ms = 60_000;
    let server = start(s);
    let mut client = Client::initialized(&server).await;
    for id in 0..10 {
        client.send_json(sleep_call(json!(id), 60_000)).await;
    }
    wait_metric(&server, "mcp_pool_waiting", 9).await;
    // ping, lists and reads answer while every tool call is running or queued.
    for method in ["ping", "tools/list", "resources/list", "prompts/list"] {
        let response = client.request(method, json!({})).await;
        assert!(response.get("result").is_some(), "{method}: {response}");
    }
    assert!(client.backlog.is_empty(), "no tool call answered meanwhile");
}

#[tokio::test]
async fn timeout_stops_the_worker_with_a_clear_error() {
    let mut s = settings();
    s.limits.tool_timeout_ms.insert("sleep".into(), 200);
    let server = start(s);
    let mut client = Client::initialized(&server).await;
    let response = client.call_tool("sleep", json!({"ms": 60_000})).await;
    let error = assert_error(&response, &response["id"], -32001);
    assert_eq!(error["data"], json!({"timeoutMs": 200}));
    assert_eq!(metric(&server, "mcp_timed_out_total").await, 1);
    wait_metric(&server, "mcp_pool_running", 0).await;
    // Other tools keep the general timeout.
    let response = client.call_tool("echo", json!({"text": "ok"})).await;
    assert_eq!(response["result"]["content"][0]["text"], "ok");
}

#[tokio::test]
async fn progress_extends_the_timeout_only_up_to_the_hard_maximum() {
    let mut s = settings();
    // Margins wide enough for a test machine that stalls a few hundred milliseconds.
    s.limits.request_timeout_ms = 1_000;
    s.limits.max_request_timeout_ms = 5_000;
    let server = start(s);
    let mut client = Client::initialized(&server).await;
    // Without progress, 3000 ms of work exceeds the 1000 ms timeout.
    let response = client.call_tool("sleep", json!({"ms": 3_000})).await;
    assert_error(&response, &response["id"], -32001);
    // With progress every 50 ms, the deadline keeps moving: the call completes.
    client
        .send_json(sleep_call_with_token(json!("p"), 3_000, json!("t1")))
        .await;
    let response = client.recv_response(&json!("p")).await;
    assert_eq!(
        response["result"]["content"][0]["text"], "slept 3000 ms",
        "{response}"
    );
    // But never past the hard maximum: cut with -32001, after it had run past the plain
    // timeout (progress values are the milliseconds slept so far).
    client.backlog.clear();
    client
        .send_json(sleep_call_with_token(json!("q"), 60_000, json!("t2")))
        .await;
    let response = client.recv_response(&json!("q")).await;
    assert_error(&response, &json!("q"), -32001);
    let furthest = client
        .backlog
        .iter()
        .filter(|f| f["params"]["progressToken"] == "t2")
        .filter_map(|f| f["params"]["progress"].as_f64())
        .fold(0.0, f64::max);
    assert!(
        furthest > 1_000.0,
        "extended past the 1000 ms timeout before the cut: {furthest}"
    );
}

#[tokio::test]
async fn disconnect_with_work_in_flight_frees_everything() {
    // Without resume, a session ends with its socket (tests/it/resume.rs: with it, at the end
    // of the grace).
    let mut s = settings();
    s.sessions.resume_grace_ms = 0;
    let server = start(s);
    let mut client = Client::initialized(&server).await;
    for id in 0..3 {
        client.send_json(sleep_call(json!(id), 60_000)).await;
    }
    wait_metric(&server, "mcp_pool_running", 3).await;
    drop(client);
    wait_metric(&server, "mcp_sessions", 0).await;
    wait_metric(&server, "mcp_workers", 0).await;
    wait_metric(&server, "mcp_pool_running", 0).await;
    assert_eq!(metric(&server, "mcp_cancelled_total").await, 3);
    assert_eq!(
        server.shared().pool.available_permits(),
        server.shared().settings.limits.max_concurrent_requests
    );
}

/// A tool can observe its cancellation from work it moved to another thread: the context's
/// cancel flag is set when the request is cancelled.
#[tokio::test]
async fn a_tool_observes_cancellation_from_another_thread() {
    let (observed_tx, observed_rx) = std::sync::mpsc::channel::<bool>();
    let observed_tx = std::sync::Mutex::new(observed_tx);
    let tool = Tool::new("watch", "waits for its cancel", move |_: NoArgs, ctx| {
        let flag = ctx.cancel_flag();
        let report = observed_tx.lock().expect("lock").clone();
        assert!(!ctx.is_cancelled(), "not cancelled at start");
        // Blocking work on its own thread, polling the flag as such work would.
        std::thread::spawn(move || {
            let deadline = std::time::Instant::now() + READ_TIMEOUT;
            while !flag.is_set() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            let _ = report.send(flag.is_set());
        });
        async move {
            std::future::pending::<()>().await;
            Ok(CallToolResult::text("unreachable"))
        }
    });
    let server = start_with(settings(), |b| b.tool(tool));
    let mut client = Client::initialized(&server).await;
    client
        .send_json(json!({"jsonrpc":"2.0","id":"w","method":"tools/call","params":{"name":"watch","arguments":{}}}))
        .await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    client.send_json(cancel(json!("w"))).await;
    let observed = tokio::task::spawn_blocking(move || observed_rx.recv_timeout(READ_TIMEOUT))
        .await
        .expect("join");
    assert_eq!(observed, Ok(true), "the blocking thread saw the cancel");
    client.expect_nothing_pending().await;
}

/// A tool whose handler panics as it is called, before it returns its future (a typed
/// tool's function that is not `async`, or a hand-written `ToolHandler`), is caught like one
/// that panics while it runs.
#[tokio::test]
async fn a_tool_that_panics_before_its_future_answers_internal_error_and_the_session_lives_on() {
    #[allow(unreachable_code)]
    let tool = Tool::new(
        "explode_at_once",
        "panics when called",
        |_: NoArgs, _ctx| {
            if std::hint::black_box(true) {
                panic!("secret internal detail /etc/passwd");
            }
            async move { Ok(CallToolResult::text("unreachable")) }
        },
    );
    panics_are_answered_and_the_session_lives_on(tool, "explode_at_once").await;
}

#[tokio::test]
async fn a_panicking_tool_answers_internal_error_and_the_session_lives_on() {
    let tool = Tool::new("explode", "panics", |_: NoArgs, _ctx| async move {
        if std::hint::black_box(true) {
            panic!("secret internal detail /etc/passwd");
        }
        Ok(CallToolResult::text("unreachable"))
    });
    panics_are_answered_and_the_session_lives_on(tool, "explode").await;
}

/// A tool that panics with a payload whose own `Drop` panics (std warns that dropping a
/// payload may panic), as it is first polled and after a wait: answered -32603 like any
/// panic. (The payload was dropped outside the catch: the second panic unwound out of the
/// worker, the request was never answered and held its place in flight for good; at the
/// first poll it took the connection down.)
#[tokio::test]
async fn a_panic_whose_payload_panics_when_dropped_is_answered_too() {
    let at_once = Tool::new("payload_at_once", "panics", |_: NoArgs, _ctx| async move {
        if std::hint::black_box(true) {
            std::panic::panic_any(PanicsOnDrop);
        }
        Ok(CallToolResult::text("unreachable"))
    });
    panics_are_answered_and_the_session_lives_on(at_once, "payload_at_once").await;
    let later = Tool::new("payload_later", "panics", |_: NoArgs, _ctx| async move {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        if std::hint::black_box(true) {
            std::panic::panic_any(PanicsOnDrop);
        }
        Ok(CallToolResult::text("unreachable"))
    });
    panics_are_answered_and_the_session_lives_on(later, "payload_later").await;
}

/// Calls `name`, which panics: a plain -32603 (nothing of the panic's message), counted in
/// `mcp_panicked_total`, its slot given back, and the same session still served.
async fn panics_are_answered_and_the_session_lives_on(tool: Tool, name: &str) {
    let server = start_with(settings(), |b| b.tool(tool));
    let mut client = Client::initialized(&server).await;
    let response = client.call_tool(name, json!({})).await;
    let error = assert_error(&response, &response["id"], -32603);
    assert_eq!(error, json!({"code": -32603, "message": "Internal error"}));
    assert_eq!(metric(&server, "mcp_panicked_total").await, 1);
    wait_metric(&server, "mcp_pool_running", 0).await;
    wait_metric(&server, "mcp_workers", 0).await;
    // Same session, same thread: still serving.
    let response = client.call_tool("echo", json!({"text": "alive"})).await;
    assert_eq!(response["result"]["content"][0]["text"], "alive");
    assert_server_alive(&server).await;
}

/// Panics when dropped: what a tool's future holds that panics in its `Drop`.
struct PanicsOnDrop;

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            panic!("secret internal detail /etc/passwd (in a Drop)");
        }
    }
}

/// A tool whose future panics as it is dropped before it is done (here at its time limit,
/// when its request is cancelled, and when an ask ends a 2026-07-28 round at its first
/// wait): the request is answered as its end says (-32001 timed out; nothing;
/// `input_required`) and the session lives on. (At the time limit the panic ended the
/// worker's task unanswered; at the round it unwound the session's thread, and every
/// session on it went with it. A cancel's drop was tokio's to catch already.)
#[tokio::test]
async fn a_tool_whose_future_panics_when_dropped_leaves_its_session_alive() {
    let mut s = crate::support::stateless::stateless_settings();
    s.limits.tool_timeout_ms.insert("stuck".into(), 100);
    let stuck = Tool::new("stuck", "never ends", |_: NoArgs, _ctx| async move {
        let _guard = PanicsOnDrop;
        std::future::pending::<()>().await;
        Ok(CallToolResult::text("unreachable"))
    });
    let asks = Tool::new(
        "asks",
        "asks a name",
        |_: NoArgs, ctx: mcp_ws::RequestContext| async move {
            let _guard = PanicsOnDrop;
            let form = mcp_ws::model::ElicitRequest::form_for::<crate::support::stateless::NameForm>(
                "Name?",
            );
            ctx.elicit_as("name", form).await?;
            Ok(CallToolResult::text("answered"))
        },
    );
    let cancelled = Tool::new("cancelled", "never ends", |_: NoArgs, _ctx| async move {
        let _guard = PanicsOnDrop;
        std::future::pending::<()>().await;
        Ok(CallToolResult::text("unreachable"))
    });
    let server = start_with(s, |b| b.tool(stuck).tool(asks).tool(cancelled));
    let mut client = Client::initialized(&server).await;
    let response = client.call_tool("stuck", json!({})).await;
    assert_error(&response, &response["id"], -32001);
    client
        .send_json(
            json!({"jsonrpc": "2.0", "id": "gone", "method": "tools/call",
            "params": {"name": "cancelled", "arguments": {}}}),
        )
        .await;
    wait_metric(&server, "mcp_pool_running", 1).await;
    client
        .send_json(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": "gone"}}),
        )
        .await;
    let params = crate::support::meta::stateless_with(
        json!({"elicitation": {}}),
        json!({"name": "asks", "arguments": {}}),
    );
    let (id, response) = crate::support::ws::call(&mut client, "tools/call", params).await;
    crate::support::meta::assert_input_required(&response, &id, &["name"]);
    wait_metric(&server, "mcp_pool_running", 0).await;
    let response = client.call_tool("echo", json!({"text": "alive"})).await;
    assert_eq!(response["result"]["content"][0]["text"], "alive");
    assert_server_alive(&server).await;
}
