//! Ed25519 request signatures, required of an identity given a public key (here the
//! anonymous one, the identity of every client until authentication is configured):
//! - a request signed as the README says (RFC 8785 canonical JSON of
//!   `["mcp-ws-request-v1", method, params without _meta.signature, timestamp, nonce]`) runs;
//! - the same signed request sent again (a replayed nonce), one whose timestamp is outside
//!   the clock skew, one whose signature does not verify (another key, or params changed
//!   after signing), and one with no signature each get -32018 with their reason, and the
//!   tool does not run; the session goes on serving signed requests;
//! - with Redis, a nonce used on one node is refused on another (the tool runs once);
//! - an identity without keys is not asked to sign (the default: nothing is checked);
//! - each signer has its share of `signatures.max_nonces`: one that fills it gets `busy`
//!   while another identity signs on.

use crate::support::http::metric;
use crate::support::*;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use mcp_ws::model::CallToolResult;
use mcp_ws::tool::{Arguments, ToolFuture, ToolHandler};
use mcp_ws::{RequestContext, RunningServer, Settings, Tool};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

struct Count(Arc<AtomicUsize>);

impl ToolHandler for Count {
    fn call(&self, _arguments: Arguments, _ctx: RequestContext) -> ToolFuture {
        let run = self.0.fetch_add(1, Ordering::SeqCst) + 1;
        Box::pin(async move { Ok(CallToolResult::text(format!("run {run}"))) })
    }
}

fn key() -> SigningKey {
    SigningKey::from_bytes(&[42; 32])
}

fn signed_settings(mut s: Settings) -> Settings {
    let public = base64::engine::general_purpose::STANDARD.encode(key().verifying_key().as_bytes());
    s.signatures
        .public_keys
        .insert("anonymous".into(), vec![public]);
    s
}

fn start_counting(settings: Settings) -> (RunningServer, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let count = Tool::from_handler(
        "count",
        "Counts.",
        json!({"type":"object"}),
        Count(runs.clone()),
    );
    (start_with(settings, |b| b.tool(count)), runs)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// A request signed with `key`: params as given, `_meta.signature` added.
fn signed(
    key: &SigningKey,
    id: Value,
    method: &str,
    params: Value,
    timestamp: u64,
    nonce: &str,
) -> Value {
    let message = serde_jcs::to_vec(&json!([
        "mcp-ws-request-v1",
        method,
        params,
        timestamp,
        nonce
    ]))
    .expect("canonical JSON");
    let value = base64::engine::general_purpose::STANDARD.encode(key.sign(&message).to_bytes());
    let mut params = params;
    params
        .as_object_mut()
        .expect("params are an object")
        .entry("_meta")
        .or_insert_with(|| json!({}))["signature"] =
        json!({"timestamp": timestamp, "nonce": nonce, "value": value});
    json!({"jsonrpc":"2.0","id":id,"method":method,"params":params})
}

fn call_params() -> Value {
    json!({"name": "count", "arguments": {"n": 1}, "_meta": {"progressToken": "p"}})
}

/// A signed client: the handshake itself is signed.
async fn signed_client(server: &RunningServer) -> Client {
    signed_client_as(server, &key(), None).await
}

/// A client authenticated with `token` (if any), its handshake signed with `key`.
async fn signed_client_as(server: &RunningServer, key: &SigningKey, token: Option<&str>) -> Client {
    let mut client = Client::connect_url_as(&server.url(), token).await;
    let init = signed(
        key,
        json!(0),
        "initialize",
        initialize_params("2025-11-25"),
        now_ms(),
        "init",
    );
    client.send_json(init).await;
    let response = client.recv_response(&json!(0)).await;
    assert_result(&response, &json!(0));
    client
}

fn refused(response: &Value, id: Value) -> String {
    let error = assert_error(response, &id, -32018);
    error["data"]["reason"]
        .as_str()
        .expect("a reason")
        .to_owned()
}

#[tokio::test]
async fn a_signer_that_fills_its_share_of_nonces_is_busy_while_another_signs_on() {
    let tester_key = SigningKey::from_bytes(&[43; 32]);
    let mut s = with_api_key(signed_settings(settings()));
    let public =
        base64::engine::general_purpose::STANDARD.encode(tester_key.verifying_key().as_bytes());
    s.signatures
        .public_keys
        .insert("tester".into(), vec![public]);
    // Two signers: two nonces each.
    s.signatures.max_nonces = 4;
    let (server, runs) = start_counting(s);
    let mut anonymous = signed_client(&server).await; // its first nonce
    let call = |key: &SigningKey, id: i64, nonce: &str| {
        signed(key, json!(id), "tools/call", call_params(), now_ms(), nonce)
    };
    let ran = anonymous.send_request(call(&key(), 1, "a-1")).await;
    assert_result(&ran, &json!(1));
    let busy = anonymous.send_request(call(&key(), 2, "a-2")).await;
    assert_eq!(refused(&busy, json!(2)), "busy");
    // The other identity's share is its own.
    let mut tester = signed_client_as(&server, &tester_key, Some(TEST_KEY)).await;
    let ran = tester.send_request(call(&tester_key, 3, "t-1")).await;
    assert_result(&ran, &json!(3));
    let busy = tester.send_request(call(&tester_key, 4, "t-2")).await;
    assert_eq!(refused(&busy, json!(4)), "busy");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn signed_requests_run_and_bad_ones_are_refused_with_their_reason() {
    let (server, runs) = start_counting(signed_settings(settings()));
    let mut client = signed_client(&server).await;
    let call = signed(
        &key(),
        json!(1),
        "tools/call",
        call_params(),
        now_ms(),
        "n-1",
    );
    let ran = client.send_request(call.clone()).await;
    assert_eq!(
        assert_result(&ran, &json!(1))["content"][0]["text"],
        "run 1"
    );

    let mut replay = call;
    replay["id"] = json!(2);
    assert_eq!(
        refused(&client.send_request(replay).await, json!(2)),
        "replayed"
    );
    let late = signed(
        &key(),
        json!(3),
        "tools/call",
        call_params(),
        now_ms() - 120_000,
        "n-3",
    );
    assert_eq!(refused(&client.send_request(late).await, json!(3)), "skew");
    let other_key = SigningKey::from_bytes(&[1; 32]);
    let forged = signed(
        &other_key,
        json!(4),
        "tools/call",
        call_params(),
        now_ms(),
        "n-4",
    );
    assert_eq!(
        refused(&client.send_request(forged).await, json!(4)),
        "invalid"
    );
    let mut tampered = signed(
        &key(),
        json!(5),
        "tools/call",
        call_params(),
        now_ms(),
        "n-5",
    );
    tampered["params"]["arguments"]["n"] = json!(2);
    assert_eq!(
        refused(&client.send_request(tampered).await, json!(5)),
        "invalid"
    );
    let unsigned = json!({"jsonrpc":"2.0","id":6,"method":"tools/call","params":call_params()});
    assert_eq!(
        refused(&client.send_request(unsigned).await, json!(6)),
        "missing"
    );
    let ping = json!({"jsonrpc":"2.0","id":7,"method":"ping"});
    assert_eq!(
        refused(&client.send_request(ping).await, json!(7)),
        "missing"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "no refused request ran");
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"signature\"}").await,
        6
    );

    // The session goes on serving signed requests.
    let list = signed(&key(), json!(8), "tools/list", json!({}), now_ms(), "n-8");
    assert!(assert_result(&client.send_request(list).await, &json!(8))["tools"].is_array());
    let call = signed(
        &key(),
        json!(9),
        "tools/call",
        call_params(),
        now_ms(),
        "n-9",
    );
    let ran = client.send_request(call).await;
    assert_eq!(
        assert_result(&ran, &json!(9))["content"][0]["text"],
        "run 2"
    );
}

#[tokio::test]
async fn with_redis_a_nonce_used_on_one_node_is_refused_on_another() {
    let redis = crate::support::redis::RedisServer::start();
    let with_redis = || {
        let mut s = signed_settings(settings());
        s.redis.url = redis.url();
        s
    };
    let (a, runs_a) = start_counting(with_redis());
    let (b, runs_b) = start_counting(with_redis());
    let mut on_a = signed_client(&a).await;
    let mut on_b = signed_client(&b).await;
    let call = signed(
        &key(),
        json!(1),
        "tools/call",
        call_params(),
        now_ms(),
        "shared-1",
    );
    assert_result(&on_a.send_request(call.clone()).await, &json!(1));
    assert_eq!(
        refused(&on_b.send_request(call).await, json!(1)),
        "replayed"
    );
    assert_eq!(runs_a.load(Ordering::SeqCst), 1);
    assert_eq!(runs_b.load(Ordering::SeqCst), 0);
    assert_eq!(redis.keys("mcp-ws:nonce:*").len(), 1);
}

/// A signed request run on one node while Redis could not record its nonce (paused: the
/// node skips it after a failure) has its nonce written there once Redis answers, and a
/// replay on another node is refused from then on. And after Redis restarted empty, the
/// nodes write again the nonces they hold: a replay of a request run before is refused
/// too. (Both replays ran, on every other node, for as long as the nonces lived: twice
/// `max_skew_ms`; attack run 51, N1.)
#[tokio::test]
async fn a_nonce_redis_missed_or_lost_is_written_there_and_its_replay_refused_elsewhere() {
    let mut redis = crate::support::redis::RedisServer::start();
    let with_redis = || {
        let mut s = signed_settings(settings());
        s.redis.url = redis.url();
        s.redis.timeout_ms = 300;
        s.redis.retry_after_ms = 2000;
        s
    };
    let (a, runs_a) = start_counting(with_redis());
    let (b, runs_b) = start_counting(with_redis());
    let mut on_a = signed_client(&a).await;
    let mut on_b = signed_client(&b).await;
    let call = |id: i64, nonce: &str| {
        signed(
            &key(),
            json!(id),
            "tools/call",
            call_params(),
            now_ms(),
            nonce,
        )
    };
    let nonces = |redis: &crate::support::redis::RedisServer| redis.keys("mcp-ws:nonce:*").len();
    // The handshakes' nonces (each signed "init", on its own node's session... one key).
    let before = nonces(&redis);

    // A stall fails an operation of node a's (a beat's): it skips Redis for 2 s, and a
    // signed request meanwhile runs on its own check, its nonce not sent.
    redis.pause();
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while crate::support::http::metric(&a, "mcp_redis_errors_total").await == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no Redis operation failed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    redis.resume();
    let missed = call(1, "missed-1");
    assert_result(&on_a.send_request(missed.clone()).await, &json!(1));
    assert_eq!(nonces(&redis), before, "the nonce was not sent");
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while nonces(&redis) <= before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the nonce never reached Redis"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Past `retry_after_ms`: node b asks Redis again if the stall failed one of its own.
    tokio::time::sleep(std::time::Duration::from_millis(2200)).await;
    assert_eq!(
        refused(&on_b.send_request(missed).await, json!(1)),
        "replayed"
    );

    // Redis restarts empty: node a writes again the nonces it holds.
    let ran = call(2, "lost-1");
    assert_result(&on_a.send_request(ran.clone()).await, &json!(2));
    // The nodes' beats have read Redis's epoch before it is lost.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    redis.kill();
    redis.restart();
    assert_eq!(nonces(&redis), 0, "Redis came back empty");
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while nonces(&redis) < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the nonces were not written again"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(2200)).await;
    assert_eq!(refused(&on_b.send_request(ran).await, json!(2)), "replayed");
    assert_eq!(runs_a.load(Ordering::SeqCst), 2);
    assert_eq!(runs_b.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn identities_without_keys_sign_nothing() {
    let (server, runs) = start_counting(settings());
    let mut client = Client::initialized(&server).await;
    let answer = client.call_tool("count", json!({})).await;
    assert_eq!(answer["result"]["content"][0]["text"], "run 1");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
