//! Any node serves any request (`cluster.sessions = "redis"`, the default with Redis): three
//! nodes share one real `redis-server`, and each request of one Streamable HTTP session goes
//! to a different node, as a round-robin balancer without affinity sends them.
//!
//! Checked: a session begun on node A answers on B and C (list, call); a `logging/setLevel`
//! on one node holds on the others; a tool on B asks the client (elicitation) and the
//! client's answer, POSTed to C, reaches B's request; a cancel POSTed to C stops a request
//! running on A (no answer, the tool's future dropped); DELETE on B ends the session on
//! every node (404 on A and C), also against a record write on its way, a copy never told,
//! a take-up racing it and a deletion Redis answers late; a 2026-07-28 `requestState` minted by A is accepted by B
//! without any configured secret; a session of another identity is not found; with Redis
//! away, a node serves the sessions it holds and answers 503 (Retry-After) for others and
//! for new sessions; with `cluster.sessions = "local"` a session is its node's alone (404
//! elsewhere).
//!
//! The walk of a session over the nodes, the shared `requestState` secret and the stream
//! resumed elsewhere also run on a three-master Redis Cluster (`redis+cluster://`), where a
//! session's record and its mirrored events are found on one master.

use crate::support::http::{header, metric, wait_metric};
use crate::support::meta::*;
use crate::support::redis::{slow_commands_proxy, slow_replies_proxy, RedisCluster, RedisServer};
use crate::support::stateless::{add_fixtures, plain_tool, stateless_settings, Fixtures};
use crate::support::*;
use futures_util::StreamExt;
use mcp_ws::RunningServer;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{json, Value};
use sse_stream::SseStream;
use std::time::Duration;

fn node(redis_url: &str, prefix: &str, local: bool, fixtures: &Fixtures) -> RunningServer {
    node_with(redis_url, prefix, fixtures, |settings| {
        if local {
            settings.cluster.sessions = Some(mcp_ws::config::SessionPlace::Local);
        }
    })
}

/// A node on the Redis at `redis_url` under `prefix`, its settings as `adjust` leaves them.
fn node_with(
    redis_url: &str,
    prefix: &str,
    fixtures: &Fixtures,
    adjust: impl FnOnce(&mut mcp_ws::Settings),
) -> RunningServer {
    let mut settings = with_api_key(stateless_settings());
    settings.redis.url = redis_url.to_owned();
    settings.redis.key_prefix = prefix.into();
    adjust(&mut settings);
    start_with(settings, |b| add_fixtures(b, fixtures))
}

/// Two nodes under `prefix`: a holder that reaches `redis` through `proxy`, a slow-link
/// proxy holding its commands or replies back 1.5 s (in time: its `redis.timeout_ms` is
/// 2500), and another that reaches it directly.
fn slow_holder_and_other(
    redis: &RedisServer,
    proxy: &str,
    prefix: &str,
) -> (RunningServer, RunningServer) {
    let fixtures = Fixtures::default();
    let holder = node_with(proxy, prefix, &fixtures, |settings| {
        settings.redis.timeout_ms = 2500;
    });
    let other = node(&redis.url(), prefix, false, &fixtures);
    (holder, other)
}

fn nodes(redis_url: &str, prefix: &str, local: bool) -> (Vec<RunningServer>, Fixtures) {
    let fixtures = Fixtures::default();
    let nodes = (0..3)
        .map(|_| node(redis_url, prefix, local, &fixtures))
        .collect();
    (nodes, fixtures)
}

/// A session-era HTTP client whose requests go where the test says.
struct Session {
    http: reqwest::Client,
    id: String,
    token: Option<&'static str>,
}

fn url(node: &RunningServer) -> String {
    format!("http://{}/mcp", node.addr())
}

impl Session {
    async fn begin(node: &RunningServer, token: Option<&'static str>) -> Self {
        Self::begin_with(node, token, json!({"elicitation": {}})).await
    }

    /// A session whose client declares `capabilities`.
    async fn begin_with(
        node: &RunningServer,
        token: Option<&'static str>,
        capabilities: Value,
    ) -> Self {
        // A connection idle for 2 s is not reused: the server closes one idle for its
        // keep-alive (5 s), and a request sent on it in that instant failed as an incomplete
        // message (seen after a Redis Cluster failover the test waited about 5 s for).
        let http = crate::support::http::client_builder()
            .pool_idle_timeout(Duration::from_secs(2))
            .build()
            .expect("reqwest client");
        let mut params = initialize_params("2025-11-25");
        params["capabilities"] = capabilities;
        let mut post = http
            .post(url(node))
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(request(json!(0), "initialize", params).to_string());
        if let Some(token) = token {
            post = post.bearer_auth(token);
        }
        let response = post.send().await.expect("initialize answered");
        assert_eq!(response.status(), 200);
        let id = header(&response, "mcp-session-id")
            .expect("a session id")
            .to_owned();
        let session = Self { http, id, token };
        let status = session
            .post_raw(
                node,
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            )
            .await
            .status();
        assert_eq!(status, 202);
        session
    }

    fn with(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let builder = builder
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", "2025-11-25");
        match self.token {
            Some(token) => builder.bearer_auth(token),
            None => builder,
        }
    }

    /// `GET` with `Last-Event-ID: last_event_id`: a stream resumed on `node`.
    async fn resume(&self, node: &RunningServer, last_event_id: &str) -> reqwest::Response {
        let get = self
            .http
            .get(url(node))
            .header(ACCEPT, "text/event-stream")
            .header("last-event-id", last_event_id);
        tokio::time::timeout(READ_TIMEOUT, self.with(get).send())
            .await
            .expect("answered in time")
            .expect("sent")
    }

    async fn post_raw(&self, node: &RunningServer, body: Value) -> reqwest::Response {
        let post = self
            .http
            .post(url(node))
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_string());
        tokio::time::timeout(READ_TIMEOUT, self.with(post).send())
            .await
            .expect("answered in time")
            .expect("sent")
    }

    /// A request answered on `node`: the messages of its answer (JSON, or the SSE stream to
    /// its end).
    async fn ask(
        &self,
        node: &RunningServer,
        id: Value,
        method: &str,
        params: Value,
    ) -> Vec<Value> {
        let response = self.post_raw(node, request(id, method, params)).await;
        assert_eq!(response.status(), 200, "{method} on {}", node.addr());
        messages(response).collect().await
    }

    async fn delete(&self, node: &RunningServer) -> u16 {
        let delete = self.http.delete(url(node));
        self.with(delete)
            .send()
            .await
            .expect("sent")
            .status()
            .as_u16()
    }
}

/// The JSON-RPC messages of an answer, JSON or SSE.
fn messages(response: reqwest::Response) -> futures_util::stream::BoxStream<'static, Value> {
    let is_stream =
        header(&response, "content-type").is_some_and(|t| t.starts_with("text/event-stream"));
    if !is_stream {
        return Box::pin(futures_util::stream::once(async move {
            serde_json::from_str(&response.text().await.expect("body")).expect("JSON")
        }));
    }
    Box::pin(
        SseStream::from_bytes_stream(response.bytes_stream()).filter_map(|event| async move {
            let data = event.ok()?.data.filter(|d| !d.trim().is_empty())?;
            serde_json::from_str(&data).ok()
        }),
    )
}

fn answer_of(messages: &[Value], id: &Value) -> Value {
    messages
        .iter()
        .find(|m| m.get("id") == Some(id) && m.get("method").is_none())
        .cloned()
        .unwrap_or_else(|| panic!("no answer to {id} in {messages:?}"))
}

#[tokio::test]
async fn every_request_of_a_session_may_land_on_any_node() {
    let redis = RedisServer::start();
    every_request_lands_anywhere(&redis.url(), |pattern| redis.keys(pattern)).await;
}

#[tokio::test]
async fn every_request_of_a_session_may_land_on_any_node_of_a_redis_cluster() {
    let redis = RedisCluster::start();
    every_request_lands_anywhere(&redis.url(), |pattern| {
        redis.keys_per_master(pattern).concat()
    })
    .await;
}

/// The walk of one session over three nodes sharing the Redis at `redis_url`; `keys` lists
/// the keys stored there under a pattern.
async fn every_request_lands_anywhere(redis_url: &str, keys: impl Fn(&str) -> Vec<String>) {
    let (nodes, fixtures) = nodes(redis_url, "any-node:", false);
    let [a, b, c] = [&nodes[0], &nodes[1], &nodes[2]];
    let session = Session::begin(a, Some(TEST_KEY)).await;

    let listed = session.ask(b, json!(1), "tools/list", json!({})).await;
    assert!(answer_of(&listed, &json!(1))["result"]["tools"]
        .as_array()
        .is_some_and(|t| !t.is_empty()));
    let echo = session
        .ask(
            c,
            json!(2),
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "on c"}}),
        )
        .await;
    assert_eq!(tool_text(&answer_of(&echo, &json!(2))), "on c");

    // A setLevel on C holds for the copy on B (told through Redis): a tool's info line is
    // not sent at level error.
    let chatty = json!({"name": "chatty", "arguments": {}});
    let before = session
        .ask(b, json!(30), "tools/call", chatty.clone())
        .await;
    assert!(
        before.iter().any(|m| m["params"]["data"] == "info line"),
        "{before:?}"
    );
    let level = session
        .ask(c, json!(3), "logging/setLevel", json!({"level": "error"}))
        .await;
    assert_result(&answer_of(&level, &json!(3)), &json!(3));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = session.ask(b, json!(31), "tools/call", chatty).await;
    let lines: Vec<&Value> = after
        .iter()
        .filter_map(|m| m["params"].get("data"))
        .collect();
    assert_eq!(lines, [&json!("error line")], "{after:?}");

    // A tool on B asks the client; the answer, POSTed to C, reaches B's request.
    let response = session
        .post_raw(
            b,
            request(
                json!(4),
                "tools/call",
                json!({"name": "ask_name", "arguments": {"greeting": "Hi"}}),
            ),
        )
        .await;
    let mut stream = messages(response);
    let ask = tokio::time::timeout(READ_TIMEOUT, stream.next())
        .await
        .expect("in time")
        .expect("the ask");
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    let reply = json!({"jsonrpc": "2.0", "id": ask["id"], "result": accept_name("Ada")});
    assert_eq!(session.post_raw(c, reply).await.status(), 202);
    let rest: Vec<Value> = tokio::time::timeout(READ_TIMEOUT, stream.collect())
        .await
        .expect("the answer in time");
    assert_eq!(tool_text(&answer_of(&rest, &json!(4))), "Hi, Ada!");
    assert_eq!(fixtures.runs(), 1);

    // A cancel POSTed to C stops a request running on A: no answer, its stream ends.
    let response = session
        .post_raw(a, request(json!(5), "tools/call", json!({"name": "sleep", "arguments": {"ms": 30000}, "_meta": {"progressToken": "p"}})))
        .await;
    let mut stream = messages(response);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(session.post_raw(c, cancel(json!(5))).await.status(), 202);
    let rest: Vec<Value> = tokio::time::timeout(Duration::from_secs(5), stream.by_ref().collect())
        .await
        .expect("the stream ends at once, long before the 30 s sleep");
    assert!(
        rest.iter().all(|m| m.get("id") != Some(&json!(5))),
        "{rest:?}"
    );

    // Someone else presenting the id finds nothing, on any node.
    let stranger = Session {
        http: crate::support::http::client(),
        id: session.id.clone(),
        token: None,
    };
    assert_eq!(
        stranger
            .post_raw(c, request(json!(6), "ping", json!({})))
            .await
            .status(),
        404
    );

    // DELETE on B ends it everywhere.
    assert_eq!(session.delete(b).await, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    for node in [a, b, c] {
        let status = session
            .post_raw(node, request(json!(7), "ping", json!({})))
            .await
            .status();
        assert_eq!(status, 404, "after DELETE, on {}", node.addr());
    }
    assert!(keys("any-node:session:*").is_empty(), "{:?}", keys("*"));
}

/// An anonymous client's idempotency keys are scoped to its session, by the id every node
/// knows: its retry on another node is answered from the store, not run again.
/// The answer to the keyed call `params` on `node`, sent again while the node refuses it
/// -32008: a node whose Redis calls just failed (a failover) refuses keyed calls for a short
/// pause (retryable; nothing runs), and a client is told to retry.
async fn keyed_until_taken(
    session: &Session,
    node: &RunningServer,
    tag: &str,
    params: &Value,
) -> Value {
    for attempt in 0..100 {
        let id = json!(format!("{tag}{attempt}"));
        let messages = session
            .ask(node, id.clone(), "tools/call", params.clone())
            .await;
        let answer = answer_of(&messages, &id);
        if answer.get("result").is_some() {
            return answer;
        }
        assert_eq!(answer["error"]["code"], -32008, "{answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the keyed call was never taken on {}", node.addr());
}

/// A Redis Cluster master that holds a session's record is SIGKILLed and its replica takes
/// over: the session goes on. A node that never held it takes it up from the promoted
/// replica (503, retryable, while the cluster and the node's slot map settle), and a keyed
/// call and its retry are answered once.
#[tokio::test]
async fn a_session_goes_on_through_a_redis_cluster_failover() {
    let mut redis = RedisCluster::start_with_replicas();
    let (nodes, _fixtures) = nodes(&redis.url(), "failover:", false);
    let [a, b, c] = [&nodes[0], &nodes[1], &nodes[2]];
    let session = Session::begin(a, Some(TEST_KEY)).await;
    let echo = |text: &str| json!({"name": "echo", "arguments": {"text": text}});
    let before = session.ask(b, json!(1), "tools/call", echo("before")).await;
    assert_eq!(tool_text(&answer_of(&before, &json!(1))), "before");

    let holder = redis
        .keys_per_master("failover:session:*")
        .iter()
        .position(|keys| keys.iter().any(|key| key.contains(&session.id)))
        .expect("a master holds the session's record");
    redis.replicated(holder);
    redis.fail_over_master(holder);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut refusals = 0;
    let taken_up = loop {
        let response = session
            .post_raw(c, request(json!(2), "tools/call", echo("after")))
            .await;
        match response.status().as_u16() {
            200 => break messages(response).collect::<Vec<Value>>().await,
            503 => refusals += 1,
            other => panic!("the take-up after the failover answered {other}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no take-up within 20 s ({refusals} refusals)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(tool_text(&answer_of(&taken_up, &json!(2))), "after");

    let keyed = json!({"name": "echo", "arguments": {"text": "keyed"},
                       "_meta": {"idempotencyKey": "after-failover"}});
    let hits = || crate::support::http::metric(c, "mcp_dedup_hits_total");
    let hits_before = hits().await;
    let first = keyed_until_taken(&session, b, "first-", &keyed).await;
    let again = keyed_until_taken(&session, c, "again-", &keyed).await;
    assert_eq!(tool_text(&first), "keyed");
    assert_eq!(again["result"], first["result"]);
    assert_eq!(
        hits().await,
        hits_before + 1,
        "the retry on c is answered from the store, not run again"
    );
}

/// A Redis Cluster master that freezes (SIGSTOP: its sockets stay open, it answers
/// nothing), the first seed too, is failed over by the cluster, and the node follows: its
/// keyed calls are taken again whatever shard their keys are on, and its bus subscription,
/// which was on that seed, is made again through another one, while the master stays
/// frozen. (The node's cluster connection kept its slot map and timed out against the
/// frozen master until it came back; the bus was tried at the first seed, within one
/// timeout for all, and never moved; attack run 52a, C1 and C2.)
#[tokio::test]
async fn a_frozen_redis_cluster_master_is_followed_to_its_replica_by_the_store_and_the_bus() {
    let mut redis = RedisCluster::start_with_replicas();
    let fixtures = Fixtures::default();
    let node = node_with(&redis.url(), "frozen:", &fixtures, |_| {});
    wait_metric(&node, "mcp_bus_bridge_subscribed", 1).await;
    let seeds = redis.masters().to_vec();
    assert_eq!(
        redis.subscribers(seeds[0], "frozen:bus"),
        1,
        "the bus subscribes through the first seed"
    );
    let session = Session::begin(&node, Some(TEST_KEY)).await;
    redis.freeze_master(0);
    // Keys on every shard: about a third of them on the frozen master's slots.
    for n in 0..12 {
        let keyed = json!({"name": "echo", "arguments": {"text": format!("k{n}")},
                           "_meta": {"idempotencyKey": format!("frozen-{n}")}});
        let answer = keyed_until_taken(&session, &node, &format!("k{n}-"), &keyed).await;
        assert_eq!(tool_text(&answer), format!("k{n}"));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while seeds[1..]
        .iter()
        .all(|seed| redis.subscribers(*seed, "frozen:bus") == 0)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the bus never subscribed again through another seed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_metric(&node, "mcp_bus_bridge_subscribed", 1).await;
}

#[tokio::test]
async fn an_anonymous_retry_on_another_node_is_answered_from_the_store() {
    let redis = RedisServer::start();
    let (nodes, _) = nodes(&redis.url(), "anonymous-retry:", false);
    // Another session on C first, so that C numbers the session apart from B (in one test
    // process the nodes share everything else a node-local scope could use).
    let _other = Session::begin(&nodes[2], None).await;
    let session = Session::begin(&nodes[0], None).await;
    let call = json!({"name": "echo", "arguments": {"text": "once"},
        "_meta": {"idempotencyKey": "k-1"}});
    let first = session
        .ask(&nodes[1], json!(1), "tools/call", call.clone())
        .await;
    assert_eq!(tool_text(&answer_of(&first, &json!(1))), "once");
    let retry = session.ask(&nodes[2], json!(2), "tools/call", call).await;
    assert_eq!(tool_text(&answer_of(&retry, &json!(2))), "once");
    let mut runs = 0;
    let mut hits = 0;
    for node in &nodes {
        runs += crate::support::http::metric(node, "mcp_idempotent_runs_total").await;
        hits += crate::support::http::metric(node, "mcp_dedup_hits_total").await;
    }
    assert_eq!(
        (runs, hits),
        (1, 1),
        "ran once, answered once from the store"
    );
}

#[tokio::test]
async fn a_request_state_minted_on_one_node_is_accepted_by_another() {
    let redis = RedisServer::start();
    request_state_accepted_elsewhere(&redis.url(), "mrtr-shared:").await;
}

#[tokio::test]
async fn a_request_state_minted_on_one_node_of_a_redis_cluster_is_accepted_by_another() {
    let redis = RedisCluster::start();
    request_state_accepted_elsewhere(&redis.url(), "mrtr-shared:").await;
}

/// As above, under a key prefix that is a hash tag: the secret and when it was made are
/// written together (one script), in the tag's slot. (Beside a key of its own hash tag, the
/// second key was in another slot: refused, CROSSSLOT, and each node kept its own secret;
/// review 58 #11.)
#[tokio::test]
async fn a_request_state_minted_under_a_hash_tagged_prefix_on_a_redis_cluster_is_accepted_by_another(
) {
    let redis = RedisCluster::start();
    request_state_accepted_elsewhere(&redis.url(), "{tenant}mrtr:").await;
}

/// A `requestState` minted by one node of three sharing the Redis at `redis_url` under
/// `prefix`, with no secret configured, taken by another.
async fn request_state_accepted_elsewhere(redis_url: &str, prefix: &str) {
    let (second, runs) = request_state_taken_elsewhere(redis_url, prefix).await;
    assert_eq!(
        text_of(&assert_complete(&second, &json!(2))),
        "Hello, Bo!",
        "{second}"
    );
    assert_eq!(runs, 2);
}

/// A secret in Redis too short to be one (written by something else: an empty one made
/// every request state forgeable) is not used: each node keeps its own, and a state one
/// minted is refused by another (attack run 50c, F9).
#[tokio::test]
async fn a_short_request_state_secret_in_redis_is_not_used() {
    let redis = RedisServer::start();
    let mut connection = redis.connection().expect("redis answers");
    ::redis::cmd("SET")
        .arg("mrtr-short:mrtr-secret")
        .arg(" ")
        .query::<()>(&mut connection)
        .expect("SET");
    let (second, _) = request_state_taken_elsewhere(&redis.url(), "mrtr-short:").await;
    assert_error(&second, &json!(2), -32602);
}

/// Redis restarts empty: the nodes put the secret they share back, so that a node started
/// after finds it, and accepts the states the others mint. (It made its own, and states
/// failed between it and the others until every node restarted; attack run 50c, F6.)
#[tokio::test]
async fn a_node_started_after_redis_restarted_empty_shares_the_request_state_secret() {
    let mut redis = RedisServer::start();
    let fixtures = Fixtures::default();
    let first = node(&redis.url(), "mrtr-back:", false, &fixtures);
    // Its beat has read Redis's epoch before Redis loses it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.kill();
    redis.restart();
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while redis.keys("mrtr-back:mrtr-secret").is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the secret never put back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let later = node(&redis.url(), "mrtr-back:", false, &fixtures);
    let second = request_state_between(&first, &later).await;
    assert_eq!(
        text_of(&assert_complete(&second, &json!(2))),
        "Hello, Bo!",
        "{second}"
    );
}

/// A node started while Redis comes back empty, before the running nodes put their secret
/// back, makes its own; the running nodes' put-back replaces it, however late it comes, so
/// that a node started later shares theirs and accepts the states they mint. And when Redis
/// loses it again, the newcomer's putting its own back first changes nothing: the older
/// secret stays. (The first node's own stayed, and every node started later took it: old
/// and new nodes refused each other's states until every old node restarted; attack run
/// 52b, F7. Then a put-back more than two seconds after the newcomer's start, or the
/// newcomer's own put-back, left its secret there; review 58 #1.) The newcomer is played by
/// the test, writing what a node writes.
#[tokio::test]
async fn a_secret_made_as_redis_came_back_empty_gives_way_to_the_one_the_nodes_shared() {
    const NEWCOMERS: &str = "a-secret-of-a-node-started-as-redis-came-back";
    let mut redis = RedisServer::start();
    let fixtures = Fixtures::default();
    let first = node(&redis.url(), "mrtr-race:", false, &fixtures);
    let mut newcomers_made = None;
    for round in ["made at start", "put back"] {
        // The first node's beat has read Redis's epoch before Redis loses it.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        redis.kill();
        redis.restart();
        let mut connection = redis.connection().expect("redis answers");
        // Made now, by Redis's clock, the first time; the second, put back as it was made.
        let made = *newcomers_made.get_or_insert_with(|| {
            let (seconds, micros): (u64, u64) =
                ::redis::cmd("TIME").query(&mut connection).expect("TIME");
            seconds * 1000 + micros / 1000
        });
        // The first node notices the empty Redis at its next beat, up to a second later:
        // the test is first.
        let created: Option<String> = ::redis::cmd("SET")
            .arg("mrtr-race:mrtr-secret")
            .arg(NEWCOMERS)
            .arg("NX")
            .query(&mut connection)
            .expect("SET NX");
        assert!(
            created.is_some(),
            "{round}: the first node put its secret back before the newcomer"
        );
        ::redis::cmd("SET")
            .arg("{mrtr-race:mrtr-secret}:made")
            .arg(made)
            .query::<()>(&mut connection)
            .expect("SET");
        let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
        loop {
            let secret: Option<String> = ::redis::cmd("GET")
                .arg("mrtr-race:mrtr-secret")
                .query(&mut connection)
                .expect("GET");
            if secret.is_some_and(|s| s != NEWCOMERS) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{round}: the nodes' secret never put back over the newcomer's"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let later = node(&redis.url(), "mrtr-race:", false, &fixtures);
    let second = request_state_between(&first, &later).await;
    assert_eq!(
        text_of(&assert_complete(&second, &json!(2))),
        "Hello, Bo!",
        "{second}"
    );
}

/// The answer another node gives a `requestState` minted by one node of three sharing the
/// Redis at `redis_url` under `prefix`, and how many times the tool ran.
async fn request_state_taken_elsewhere(redis_url: &str, prefix: &str) -> (Value, usize) {
    let (nodes, fixtures) = nodes(redis_url, prefix, false);
    let second = request_state_between(&nodes[0], &nodes[1]).await;
    (second, fixtures.runs())
}

/// The answer `second` gives a `requestState` `first` minted.
async fn request_state_between(first_node: &RunningServer, second_node: &RunningServer) -> Value {
    let post = |node: &RunningServer, body: Value| {
        crate::support::http::client()
            .post(url(node))
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .header("mcp-protocol-version", MODERN)
            .header("mcp-method", "tools/call")
            .header("mcp-name", "ask_name")
            .body(body.to_string())
            .send()
    };
    let params = stateless_with(
        json!({"elicitation": {}}),
        json!({"name": "ask_name", "arguments": {"greeting": "Hello"}}),
    );
    let first: Value = post(first_node, request(json!(1), "tools/call", params.clone()))
        .await
        .expect("sent")
        .json()
        .await
        .expect("JSON");
    let (_, state) = assert_input_required(&first, &json!(1), &["name"]);
    let second: Value = post(
        second_node,
        request(
            json!(2),
            "tools/call",
            retry(&params, json!({"name": accept_name("Bo")}), Some(&state)),
        ),
    )
    .await
    .expect("sent")
    .json()
    .await
    .expect("JSON");
    second
}

#[tokio::test]
async fn local_sessions_stay_on_their_node() {
    let redis = RedisServer::start();
    let (nodes, _) = nodes(&redis.url(), "local-sessions:", true);
    let session = Session::begin(&nodes[0], Some(TEST_KEY)).await;
    assert_eq!(
        session
            .post_raw(&nodes[1], request(json!(1), "ping", json!({})))
            .await
            .status(),
        404
    );
    let ping = session.ask(&nodes[0], json!(2), "ping", json!({})).await;
    assert_result(&answer_of(&ping, &json!(2)), &json!(2));
    assert!(redis.keys("local-sessions:session:*").is_empty());
}

#[tokio::test]
async fn with_redis_away_held_sessions_go_on_and_the_others_get_503() {
    let mut redis = RedisServer::start();
    let (nodes, _) = nodes(&redis.url(), "outage:", false);
    let session = Session::begin(&nodes[0], Some(TEST_KEY)).await;
    redis.kill();
    // Held by node 0: served there.
    let ping = session.ask(&nodes[0], json!(1), "ping", json!({})).await;
    assert_result(&answer_of(&ping, &json!(1)), &json!(1));
    // Node 1 does not hold it and cannot ask: 503, retry later; never a guess.
    let refused = session
        .post_raw(&nodes[1], request(json!(2), "ping", json!({})))
        .await;
    assert_eq!(refused.status(), 503);
    assert_eq!(header(&refused, "retry-after"), Some("1"));
    // A new session could be served by this node only: refused too.
    let http = crate::support::http::client();
    let refused = http
        .post(url(&nodes[2]))
        .header(ACCEPT, "application/json, text/event-stream")
        .header(CONTENT_TYPE, "application/json")
        .body(request(json!(0), "initialize", initialize_params("2025-11-25")).to_string())
        .send()
        .await
        .expect("answered");
    assert_eq!(refused.status(), 503);
    assert!(header(&refused, "mcp-session-id").is_none());
    // Redis back: the session held by node 0 goes on there.
    redis.restart();
    let ping = session.ask(&nodes[0], json!(3), "ping", json!({})).await;
    assert_result(&answer_of(&ping, &json!(3)), &json!(3));
    assert!(
        crate::support::http::metric(
            &nodes[1],
            "mcp_rejected_total{reason=\"store_unavailable\"}"
        )
        .await
            >= 1
    );
}

/// A session record Redis holds as bytes that are not UTF-8 (written by something else) is
/// that session's problem alone: a request for it elsewhere is refused (503, as when its
/// record cannot be read), counted as a Redis error, and the node goes on using Redis for
/// everything else (a new session is opened there at once). It made the node skip Redis for
/// `retry_after_ms`, refusing every new session and keyed call; asked for once a second, for
/// good.
///
/// The same for a record that is not JSON (it was 404: the client took its session for
/// ended), and for a key of another type than a record's (a hash: Redis answers `WRONGTYPE`,
/// which was taken for Redis failing; attack run 50c, F7 and F8).
#[tokio::test]
async fn an_unreadable_session_record_is_its_sessions_alone() {
    for (poison, written) in [
        ("SET", &b"\xff\xfe\x80 not a record"[..]),
        ("SET", &b"{not json"[..]),
        ("HSET", &b"field"[..]),
    ] {
        unreadable_record_refused(poison, written).await;
    }
}

/// An unreadable session record is not renewed by the reads that refuse it: it goes at the
/// end of its time to live, and the session is 404 from then on. (Each read renewed it: a
/// client retrying the 503 as told was refused for good; review 51 #8.)
#[tokio::test]
async fn an_unreadable_session_record_is_not_renewed_and_goes() {
    let redis = RedisServer::start();
    let (nodes, _) = nodes(&redis.url(), "poison-ttl:", false);
    let session = Session::begin(&nodes[0], Some(TEST_KEY)).await;
    let mut connection = redis.connection().expect("redis answers");
    ::redis::cmd("SET")
        .arg(format!("poison-ttl:session:{{{}}}", session.id))
        .arg("{not a record")
        .arg("PX")
        .arg(1500)
        .query::<()>(&mut connection)
        .expect("SET");
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    let mut refused = 0;
    loop {
        let status = session
            .post_raw(&nodes[1], request(json!(refused), "ping", json!({})))
            .await
            .status();
        match status.as_u16() {
            503 => refused += 1,
            404 => break,
            other => panic!("a request for the session: {other}"),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still 503 after {refused} tries"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused > 0, "refused while the record lasted");
}

/// A session's record replaced by `poison` (`SET` or `HSET` `written`): its requests
/// elsewhere are 503 and counted, and the node serves the rest with Redis.
async fn unreadable_record_refused(poison: &str, written: &[u8]) {
    let redis = RedisServer::start();
    let (nodes, _) = nodes(&redis.url(), "poison:", false);
    let session = Session::begin(&nodes[0], Some(TEST_KEY)).await;
    let mut connection = redis.connection().expect("redis answers");
    let key = format!("poison:session:{{{}}}", session.id);
    ::redis::cmd("DEL")
        .arg(&key)
        .query::<()>(&mut connection)
        .expect("DEL");
    let mut command = ::redis::cmd(poison);
    command.arg(&key);
    if poison == "HSET" {
        command.arg("field");
    }
    command
        .arg(written)
        .query::<()>(&mut connection)
        .expect("the poison is written");
    for attempt in 0..3 {
        let refused = session
            .post_raw(&nodes[1], request(json!(attempt), "ping", json!({})))
            .await;
        assert_eq!(
            refused.status(),
            503,
            "{poison} {written:?}, attempt {attempt}"
        );
        // Redis answered: nothing else on the node waits for it.
        let other = Session::begin(&nodes[1], Some(TEST_KEY)).await;
        let ping = other.ask(&nodes[1], json!(1), "ping", json!({})).await;
        assert_result(&answer_of(&ping, &json!(1)), &json!(1));
    }
    assert!(crate::support::http::metric(&nodes[1], "mcp_redis_errors_total").await >= 3);
}

/// SSE events of a response, with their ids.
fn events(
    response: reqwest::Response,
) -> futures_util::stream::BoxStream<'static, (String, Value)> {
    Box::pin(
        SseStream::from_bytes_stream(response.bytes_stream()).filter_map(|event| async move {
            let event = event.ok()?;
            let data = event.data.filter(|d| !d.trim().is_empty())?;
            Some((
                event.id.unwrap_or_default(),
                serde_json::from_str(&data).ok()?,
            ))
        }),
    )
}

/// A `step_then_hold` call (JSON-RPC id `id`) posted to `node`, up to its progress: the
/// progress event's id, and the stream (which holds until the gate opens).
async fn held_call(
    session: &Session,
    node: &RunningServer,
    id: i64,
) -> (
    String,
    futures_util::stream::BoxStream<'static, (String, Value)>,
) {
    held_call_with_token(session, node, id, "t").await
}

/// [`held_call`] with the progress token `token`.
async fn held_call_with_token(
    session: &Session,
    node: &RunningServer,
    id: i64,
    token: &str,
) -> (
    String,
    futures_util::stream::BoxStream<'static, (String, Value)>,
) {
    let call =
        json!({"name": "step_then_hold", "arguments": {}, "_meta": {"progressToken": token}});
    let response = session
        .post_raw(node, request(json!(id), "tools/call", call))
        .await;
    let mut stream = events(response);
    let (progress_id, progress) = tokio::time::timeout(READ_TIMEOUT, stream.next())
        .await
        .expect("in time")
        .expect("the progress event");
    assert_eq!(progress["method"], "notifications/progress", "{progress}");
    (progress_id, stream)
}

/// [`held_call`], its gate opened once its progress came: the progress event's id and the
/// answer.
async fn stepped_call(
    session: &Session,
    node: &RunningServer,
    fixtures: &Fixtures,
    id: i64,
) -> (String, Value) {
    stepped_call_with_token(session, node, fixtures, id, "t").await
}

/// [`stepped_call`] with the progress token `token`.
async fn stepped_call_with_token(
    session: &Session,
    node: &RunningServer,
    fixtures: &Fixtures,
    id: i64,
    token: &str,
) -> (String, Value) {
    let (progress_id, mut stream) = held_call_with_token(session, node, id, token).await;
    fixtures.gate.add_permits(1);
    let (_, answer) = tokio::time::timeout(READ_TIMEOUT, stream.next())
        .await
        .expect("in time")
        .expect("the answer");
    assert_eq!(answer["id"], id, "{answer}");
    (progress_id, answer)
}

#[tokio::test]
async fn a_copy_taken_up_again_numbers_its_streams_apart_from_the_copy_before() {
    let redis = RedisServer::start();
    let fixtures = Fixtures::default();
    let node = node_with(&redis.url(), "copies:", &fixtures, |settings| {
        // A copy of a session in Redis that nobody uses is let go after a tenth of this
        // (0.5 s); the record lives on.
        settings.sessions.http_idle_timeout_ms = 5000;
    });
    let session = Session::begin(&node, Some(TEST_KEY)).await;
    let (first_progress, _) = stepped_call(&session, &node, &fixtures, 1).await;
    // The copy is let go (the session is not: it is in Redis), and the next request takes
    // the session up again in a new copy, whose call streams the same way.
    wait_metric(&node, "mcp_sessions", 0).await;
    // Its POSTs as many as the first copy's before its call (`initialize`,
    // `notifications/initialized`): numbered per copy, the two calls' streams would meet.
    for id in [10, 11] {
        let ping = session
            .post_raw(&node, request(json!(id), "ping", json!({})))
            .await;
        assert_eq!(ping.status(), 200);
    }
    let (second_progress, _) = stepped_call(&session, &node, &fixtures, 2).await;
    let stream_of = |id: &str| id.split('_').next().map(str::to_owned);
    assert_ne!(
        stream_of(&first_progress),
        stream_of(&second_progress),
        "two copies' streams, one number"
    );
    // The first call's stream resumed after its progress: its own answer (id 1), not the
    // second call's.
    let get = session.resume(&node, &first_progress).await;
    assert_eq!(get.status(), 200);
    let mut resumed = events(get);
    let (_, answer) = tokio::time::timeout(READ_TIMEOUT, resumed.next())
        .await
        .expect("the answer in time")
        .expect("the answer");
    assert_eq!(answer["id"], 1, "{answer}");
}

#[tokio::test]
async fn a_stream_resumes_with_last_event_id_on_another_node() {
    let redis = RedisServer::start();
    stream_resumes_elsewhere(&redis.url(), |key| redis.stream(key), |_| {}).await;
}

#[tokio::test]
async fn a_stream_resumes_with_last_event_id_on_another_node_of_a_redis_cluster() {
    let redis = RedisCluster::start();
    stream_resumes_elsewhere(
        &redis.url(),
        |key| redis.stream(key),
        |session| {
            // The session's record and its mirrored events share a hash tag: one master holds
            // both (and the other masters neither).
            let record = format!("resume-anywhere:session:{{{session}}}");
            let events = format!("resume-anywhere:events:{{{session}}}");
            let holders: Vec<Vec<String>> = redis.keys_per_master("resume-anywhere:*");
            let holding: Vec<&Vec<String>> = holders
                .iter()
                .filter(|keys| keys.contains(&record) || keys.contains(&events))
                .collect();
            assert_eq!(holding.len(), 1, "{holders:?}");
            assert!(
                holding[0].contains(&record) && holding[0].contains(&events),
                "{holders:?}"
            );
        },
    )
    .await;
}

/// A session's mirrored events are bounded in bytes as its node's own log is
/// (`sessions.event_buffer_bytes`): after 30 calls whose progress events each carry a
/// 1,000-byte token, Redis holds the newest entries within 10,000 bytes (and the newest
/// progress event), not all 120. (Bounded by count alone, a session's stream in Redis held
/// up to 1000 entries of any size.)
#[tokio::test]
async fn mirrored_events_are_bounded_in_bytes() {
    let store = RedisServer::start();
    let fixtures = Fixtures::default();
    let node = node_with(&store.url(), "bounded:", &fixtures, |settings| {
        settings.sessions.event_buffer_bytes = 10_000;
    });
    let session = Session::begin(&node, Some(TEST_KEY)).await;
    let token = "t".repeat(1000);
    let mut last_progress = String::new();
    for id in 1..=30 {
        last_progress = stepped_call_with_token(&session, &node, &fixtures, id, &token)
            .await
            .0;
    }
    let key = format!("bounded:events:{{{}}}", session.id);
    let deadline = std::time::Instant::now() + READ_TIMEOUT;
    loop {
        let entries = store.stream(&key);
        let bytes: usize = entries
            .iter()
            .map(|(_, fields)| fields.iter().map(String::len).sum::<usize>())
            .sum();
        let (stream, count) = last_progress.split_once('_').expect("an event id");
        let last = entries
            .iter()
            .any(|(_, fields)| crate::support::redis::is_mirrored_event(fields, stream, count));
        // Mirrored a moment after it is sent: the newest progress event may still be on
        // its way.
        if bytes <= 10_000 && last {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} entries of {bytes} bytes, the newest progress event ({last_progress}) held: \
             {last}",
            entries.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One identity cannot fill the Redis every node shares with its keyed results: a node
/// writes there at most a quarter of `dedup.max_bytes` of one identity's results a window.
/// Its results beyond are not kept (counted); a small marker says they ran, so a retry gets
/// -32032 at once, never runs again nor waits on a claim nobody will settle. Another
/// identity's result is kept meanwhile.
/// (Each result was written whole, as long as the window: one client filled 152 MiB of
/// Redis in two seconds with `dedup.max_bytes` at 16 MiB.)
#[tokio::test]
async fn one_identity_cannot_fill_redis_with_its_keyed_results() {
    const OTHER_KEY: &str = "other-0f1e2d3c4b5a69788796a5b4c3d2e1f0";
    let store = RedisServer::start();
    let fixtures = Fixtures::default();
    let node = node_with(&store.url(), "share:", &fixtures, |settings| {
        settings.dedup.max_bytes = 400_000;
        settings
            .auth
            .api_keys
            .push(crate::support::api_key("other", OTHER_KEY, &[]));
    });
    let text = "x".repeat(30_000);
    let call = |key: &str| json!({"name": "echo", "arguments": {"text": text}, "_meta": {"idempotencyKey": key}});
    let tester = Session::begin(&node, Some(TEST_KEY)).await;
    for n in 0..10 {
        let answer = tester
            .ask(&node, json!(n), "tools/call", call(&format!("k-{n}")))
            .await;
        assert_eq!(tool_text(&answer_of(&answer, &json!(n))), text);
    }
    // Three results of about 30 kB fit in the identity's 100 kB share; seven did not.
    assert_eq!(metric(&node, "mcp_dedup_unkept_total").await, 7);
    let mut connection = store.connection().expect("redis answers");
    let kept: usize = store
        .keys("share:idem:*")
        .iter()
        .map(|key| {
            ::redis::cmd("STRLEN")
                .arg(key)
                .query::<usize>(&mut connection)
                .expect("STRLEN")
        })
        .sum();
    assert!(kept <= 100_000, "{kept} bytes of results in Redis");
    // A result not kept: its retry is told so, at once, and nothing runs again.
    let retry = tester
        .ask(&node, json!("retry"), "tools/call", call("k-9"))
        .await;
    let refused = answer_of(&retry, &json!("retry"));
    assert_eq!(refused["error"]["code"], -32032, "{refused}");
    assert_eq!(metric(&node, "mcp_idempotent_runs_total").await, 10);
    // Another identity's result is kept: its retry is answered from the store.
    let other = Session::begin(&node, Some(OTHER_KEY)).await;
    for id in [1, 2] {
        let answer = other
            .ask(&node, json!(id), "tools/call", call("theirs"))
            .await;
        assert_eq!(tool_text(&answer_of(&answer, &json!(id))), text);
    }
    assert_eq!(metric(&node, "mcp_idempotent_runs_total").await, 11);
    assert_eq!(metric(&node, "mcp_dedup_hits_total").await, 1);
}

/// A POST's stream resumed on another node while Redis, where its events are mirrored,
/// cannot be asked is refused 503 with `Retry-After` (retryable), not 400 as a stream whose
/// events are gone (final: the client gave its requests up); resumed again once Redis is
/// back, it goes on to its answer. (Attack run 52a, S1.)
#[tokio::test]
async fn a_stream_resumed_elsewhere_while_redis_is_away_is_refused_503_then_served() {
    let redis = RedisServer::start();
    let (nodes, fixtures) = nodes(&redis.url(), "resume-away:", false);
    let [a, b] = [&nodes[0], &nodes[1]];
    let session = Session::begin(a, Some(TEST_KEY)).await;
    // B holds a copy of the session: the only Redis read of the resume is the mirror's.
    let ping = session.ask(b, json!(0), "ping", json!({})).await;
    assert_eq!(answer_of(&ping, &json!(0))["result"], json!({}));
    let (first_id, stream) = held_call(&session, a, 1).await;
    drop(stream);
    redis.pause();
    let refused = session.resume(b, &first_id).await;
    let status = refused.status().as_u16();
    let retry_after = header(&refused, "retry-after").map(str::to_owned);
    redis.resume();
    assert_eq!(status, 503, "a resume Redis cannot serve now is retryable");
    assert!(retry_after.is_some(), "with Retry-After");
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    let resumed = loop {
        let get = session.resume(b, &first_id).await;
        match get.status().as_u16() {
            200 => break get,
            503 => {}
            other => panic!("the resume after Redis came back answered {other}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "never resumed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut resumed = events(resumed);
    fixtures.gate.add_permits(1);
    let (_, answer) = tokio::time::timeout(READ_TIMEOUT, resumed.next())
        .await
        .expect("the answer in time")
        .expect("the answer");
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(tool_text(&answer), "released");
}

/// A stream begun on one node of three sharing the Redis at `redis_url`, resumed on others;
/// `mirror` gives the entries of a stream in that Redis by its key, and `look` is shown the
/// session id once its events are mirrored.
async fn stream_resumes_elsewhere(
    redis_url: &str,
    mirror: impl Fn(&str) -> Vec<crate::support::redis::StreamEntry>,
    look: impl Fn(&str),
) {
    let (nodes, fixtures) = nodes(redis_url, "resume-anywhere:", false);
    let [a, b, c] = [&nodes[0], &nodes[1], &nodes[2]];
    let session = Session::begin(a, Some(TEST_KEY)).await;

    // A POST's stream on A: its first event, then the client loses it.
    let (first_id, stream) = held_call(&session, a, 1).await;
    drop(stream);

    // Resumed on B after that event: B follows what A mirrors; A's answer arrives there.
    let get = session.resume(b, &first_id).await;
    assert_eq!(get.status(), 200);
    let mut resumed = events(get);
    tokio::time::sleep(Duration::from_millis(200)).await;
    fixtures.gate.add_permits(1);
    let (answer_id, answer) = tokio::time::timeout(READ_TIMEOUT, resumed.next())
        .await
        .expect("the answer in time")
        .expect("the answer");
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(tool_text(&answer), "released");
    let stream_of = |id: &str| id.split('_').next().map(str::to_owned);
    assert_eq!(
        stream_of(&answer_id),
        stream_of(&first_id),
        "the same stream, no gap: {first_id} then {answer_id}"
    );
    assert!(
        tokio::time::timeout(READ_TIMEOUT, resumed.next())
            .await
            .expect("ends in time")
            .is_none(),
        "the stream ends after its answer"
    );

    // The session's GET stream on C; a list change reaches it; lost; resumed on A with its id.
    let get = session
        .with(session.http.get(url(c)).header(ACCEPT, "text/event-stream"))
        .send()
        .await
        .expect("sent");
    let mut live = events(get);
    tokio::time::sleep(Duration::from_millis(200)).await;
    nodes[2]
        .registry()
        .add_tool(plain_tool("added_while_listening"))
        .expect("added");
    let (changed_id, changed) = tokio::time::timeout(READ_TIMEOUT, live.next())
        .await
        .expect("in time")
        .expect("the change");
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed}"
    );
    drop(live);
    // C mirrors the change a moment after it sent it (later under load): resumed before, A
    // would replay what C had mirrored, without it.
    let mirrored = format!("resume-anywhere:events:{{{}}}", session.id);
    crate::support::redis::wait_mirrored(|| mirror(&mirrored), &changed_id).await;
    let before_change = format!(
        "{}_{}",
        stream_of(&changed_id).expect("a stream"),
        changed_id
            .rsplit('_')
            .next()
            .and_then(|c| c.parse::<u64>().ok())
            .expect("a count")
            - 1
    );
    let get = session.resume(a, &before_change).await;
    assert_eq!(get.status(), 200);
    let mut replayed = events(get);
    let (_, again) = tokio::time::timeout(READ_TIMEOUT, replayed.next())
        .await
        .expect("in time")
        .expect("the replayed change");
    assert_eq!(
        again["method"], "notifications/tools/list_changed",
        "{again}"
    );
    look(&session.id);

    // A cursor naming events no node mirrored: refused, never a silent gap.
    let get = session.resume(b, "123456789_5").await;
    assert_eq!(get.status(), 400);
}

/// A DELETE whose end Redis could not take (the record not deleted, the other copies not
/// told) is 503, and the client sends it again: once Redis is back, it ends the session on
/// every node. (It was 200: the copy on the node never told went on serving the session,
/// and wrote its record again a moment later, the deleted session served again everywhere;
/// attack run 50c, F4.)
#[tokio::test]
async fn a_delete_redis_cannot_take_is_503_and_ends_the_session_when_sent_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut redis = RedisServer::start_persistent(dir.path());
    let (nodes, _) = nodes(&redis.url(), "delete-outage:", false);
    let session = Session::begin(&nodes[0], Some(TEST_KEY)).await;
    // Node 1 holds a copy too.
    let ping = session.ask(&nodes[1], json!(1), "ping", json!({})).await;
    assert_result(&answer_of(&ping, &json!(1)), &json!(1));
    redis.kill();
    assert_eq!(session.delete(&nodes[1]).await, 503);
    redis.restart();
    // Every node's bus is subscribed again: a note published before a node resubscribed
    // would not reach its copy (a window docs/operations.md states; the copy ends when it
    // is let go, idle).
    for node in &nodes {
        crate::support::http::wait_metric(node, "mcp_bus_bridge_subscribed", 1).await;
    }
    // Sent again until Redis is asked (the node skips it for `retry_after_ms` after a failure).
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    loop {
        match session.delete(&nodes[1]).await {
            200 => break,
            503 => {}
            other => panic!("DELETE again: {other}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "never taken");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for node in &nodes {
        // Ended (404), never served (200); a node still skipping Redis after a failure of
        // its own answers 503, and is asked again as a client would.
        let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
        loop {
            let status = session
                .post_raw(node, request(json!(2), "ping", json!({})))
                .await
                .status();
            if status == 503 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            assert_eq!(status, 404, "on {}", node.addr());
            break;
        }
    }
    assert!(redis.keys("delete-outage:session:*").is_empty());
}

/// A DELETE on one node while the node holding the session still has a write of its record
/// on its way (its link to Redis slow: the write lands 1.5 s later, after the deletion) ends
/// the session for good: the late write is refused, and no node finds the session again.
/// (The write landed over the deletion and brought the session back on every node for its
/// idle time: a DELETE on another event loop of the same node, each with its own Redis
/// connection, could do the same.)
#[tokio::test]
async fn a_record_write_landing_after_a_delete_elsewhere_does_not_bring_the_session_back() {
    let redis = RedisServer::start();
    let slow = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let proxy = slow_commands_proxy(&redis, Duration::from_millis(1500), slow.clone());
    let (holder, other) = slow_holder_and_other(&redis, &proxy, "late-write:");
    let session = Session::begin(&holder, Some(TEST_KEY)).await;
    slow.store(true, std::sync::atomic::Ordering::SeqCst);
    // A change the holder writes to Redis: answered at once, its write on its way.
    let level = session
        .ask(
            &holder,
            json!(1),
            "logging/setLevel",
            json!({"level": "error"}),
        )
        .await;
    assert_result(&answer_of(&level, &json!(1)), &json!(1));
    let scripts_run = redis.command_calls("eval");
    assert_eq!(session.delete(&other).await, 200);
    assert!(
        redis.keys("late-write:session:*").is_empty(),
        "the DELETE took the record"
    );
    assert_eq!(redis.keys("late-write:session-ended:*").len(), 1);
    // The holder's write (a script, as the DELETE is) lands after the DELETE.
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while redis.command_calls("eval") < scripts_run + 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the write never landed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    slow.store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(
        redis.keys("late-write:session:*").is_empty(),
        "a write sent before the DELETE brought the record back"
    );
    for node in [&other, &holder] {
        not_served_on(&session, node, "").await;
    }
}

/// Asserts that `node` does not serve the (deleted) session: 404, never 200; a 503 (the
/// node just found Redis slow, and says so) is asked again. `what` says which case failed.
async fn not_served_on(session: &Session, node: &RunningServer, what: &str) {
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    loop {
        let status = session
            .post_raw(node, request(json!(2), "ping", json!({})))
            .await
            .status()
            .as_u16();
        match status {
            404 => return,
            503 if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("{what}the deleted session on {}: {other}", node.addr()),
        }
    }
}

/// A request on node B takes a session up from its record while its owner deletes it on
/// node A, the two sent together (a large record, so that B's take-up lasts a while): the
/// DELETE is 200, and afterwards no node serves the session. (B's copy was made after the
/// note of the end had reached B, and served the deleted session until its first write of
/// the record, a quarter of the idle timeout later; attack run 57, F1: 4 of 24 such
/// attempts.) The odd attempts take the session up on A itself, where this node's own note
/// of the end does not reach its copies: the attack run's script met that case 2 times in
/// 24, this test does not reliably (the copy's own check after its take-up covers most
/// orders; the DELETE's look for a copy taken up meanwhile the rest, not seen failing
/// without it here).
#[tokio::test]
async fn a_session_taken_up_while_it_is_deleted_is_served_nowhere_after() {
    let redis = RedisServer::start();
    let (nodes, _) = nodes(&redis.url(), "take-up-race:", false);
    let [a, b] = [&nodes[0], &nodes[1]];
    let experimental: serde_json::Map<String, Value> =
        (0..3900).map(|i| (format!("k{i:05}"), json!(i))).collect();
    let capabilities = json!({"experimental": experimental});
    for attempt in 0..24u64 {
        let session = Session::begin_with(a, Some(TEST_KEY), capabilities.clone()).await;
        // Taken up on B, or on A once A's copy is gone, as the DELETE goes to A.
        let taker = if attempt % 2 == 0 { b } else { a };
        let ping = session.post_raw(taker, request(json!(1), "ping", json!({})));
        let delete = async {
            tokio::time::sleep(Duration::from_micros(500 * (attempt % 6))).await;
            session.delete(a).await
        };
        let (_, deleted) = tokio::join!(ping, delete);
        assert_eq!(deleted, 200, "attempt {attempt}");
        for node in [a, b] {
            not_served_on(&session, node, &format!("attempt {attempt}: ")).await;
        }
    }
}

/// A DELETE that Redis takes late (its writes paused: the node answered 503) ends the copy
/// on another node too: the note of the end is owed from the 503 on, and told at the node's
/// next beat Redis answers. (It was told only of a deletion Redis answered in time: the
/// copy served the deleted session until its next write, and the client's DELETE sent
/// again found no record, 404; attack run 57, F2.)
#[tokio::test]
async fn a_delete_redis_takes_late_ends_the_copies_elsewhere() {
    let redis = RedisServer::start();
    let fixtures = Fixtures::default();
    let a = node_with(&redis.url(), "late-delete:", &fixtures, |settings| {
        settings.redis.timeout_ms = 300;
    });
    let b = node(&redis.url(), "late-delete:", false, &fixtures);
    let session = Session::begin(&a, Some(TEST_KEY)).await;
    // B holds a copy.
    let ping = session.ask(&b, json!(1), "ping", json!({})).await;
    assert_result(&answer_of(&ping, &json!(1)), &json!(1));
    let mut con = redis.connection().expect("redis");
    let _: () = ::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1500)
        .arg("WRITE")
        .query(&mut con)
        .expect("pause");
    assert_eq!(session.delete(&a).await, 503, "not answered in time");
    // Taken once the pause is over.
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while !redis.keys("late-delete:session:*").is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never deleted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    served_until_404(&session, &b, "the node holding a copy").await;
}

/// Redis restarts while keyed calls run on a node: the node counts one outage
/// (`mcp_redis_outages_total`), not another one when an event loop's first command after
/// Redis came back meets the connection Redis had closed (broken pipe), which made the node
/// take Redis for gone again and skip it for `retry_after_ms`. The attack run of stop 57
/// (L1) saw that second outage at every restart with the binary on `config/default.toml`;
/// this test, in-process, did not reproduce it without the mend (connections let go when
/// Redis answers again): it pins the count, not that cause.
#[tokio::test]
async fn a_redis_restart_is_one_outage_to_the_node() {
    let mut redis = RedisServer::start();
    let fixtures = Fixtures::default();
    // Two event loops, as `config/default.toml` runs on two cores.
    let a = node_with(&redis.url(), "one-outage:", &fixtures, |settings| {
        settings.server.workers = 2;
    });
    let session = Session::begin(&a, Some(TEST_KEY)).await;
    let calls = (0..3).map(|i| {
        let call = json!({"name": "sleep", "arguments": {"ms": 8500},
            "_meta": {"idempotencyKey": format!("k{i}")}});
        let session = &session;
        let a = &a;
        async move {
            let response = session
                .post_raw(a, request(json!(10 + i), "tools/call", call))
                .await;
            assert_eq!(response.status(), 200);
            let answer: Vec<Value> = messages(response).collect().await;
            answer_of(&answer, &json!(10 + i))
        }
    });
    let running = futures_util::future::join_all(calls);
    let fault = async {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        redis.kill();
        let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
        while metric(&a, "mcp_redis_outages_total").await == 0 {
            assert!(tokio::time::Instant::now() < deadline, "Redis never failed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Long enough for the connections' own reconnection to give up.
        tokio::time::sleep(Duration::from_millis(5000)).await;
        redis.restart();
    };
    let (answers, ()) = tokio::join!(running, fault);
    for answer in &answers {
        assert!(answer.get("result").is_some(), "{answer}");
    }
    // The calls' results written, and a few beats more.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(metric(&a, "mcp_redis_outages_total").await, 1);
}

/// A copy of a session that was never told of its deletion (the deleting node may not
/// publish: its note stays owed) ends at its next write of the record, which Redis refuses
/// for the deleted session, and the write does not bring the record back. (The copy's
/// write put the record back, and every node served the deleted session again.)
#[tokio::test]
async fn a_copy_never_told_of_a_delete_ends_at_its_next_write_and_brings_nothing_back() {
    const PREFIX: &str = "untold:";
    let redis = RedisServer::start();
    let mut connection = redis.connection().expect("redis answers");
    ::redis::cmd("ACL")
        .arg("SETUSER")
        .arg("deleter")
        .arg("reset")
        .arg("on")
        .arg(">deleter-secret")
        .arg("+@all")
        .arg("-publish")
        .arg("~*")
        .arg("&*")
        .query::<()>(&mut connection)
        .expect("ACL SETUSER taken");
    let fixtures = Fixtures::default();
    let holder = node(&redis.url(), PREFIX, false, &fixtures);
    let deleter_url = redis
        .url()
        .replacen("redis://", "redis://deleter:deleter-secret@", 1);
    let deleter = node_with(&deleter_url, PREFIX, &fixtures, |_| {});
    let session = Session::begin(&holder, Some(TEST_KEY)).await;
    assert_eq!(session.delete(&deleter).await, 200);
    assert!(redis.keys(&format!("{PREFIX}session:*")).is_empty());
    // Not told: the holder's copy still serves the session (the window this test is not
    // about), until it writes its record.
    let ping = session.ask(&holder, json!(1), "ping", json!({})).await;
    assert_result(&answer_of(&ping, &json!(1)), &json!(1));
    let level = session
        .ask(
            &holder,
            json!(2),
            "logging/setLevel",
            json!({"level": "error"}),
        )
        .await;
    assert_result(&answer_of(&level, &json!(2)), &json!(2));
    served_until_404(&session, &holder, "the node whose copy was not told").await;
    assert!(
        redis.keys(&format!("{PREFIX}session:*")).is_empty(),
        "the copy's write brought the record back"
    );
}

/// A session deleted on one node while another node's bus is down (its subscription not
/// back yet after Redis restarted) ends on that node too once its bus is back: its copy
/// reads its record again, and finds it gone. (The note of the deletion never reached it,
/// and the copy served the deleted session for as long as it was used.)
#[tokio::test]
async fn a_delete_whose_note_a_node_missed_ends_its_copy_once_its_bus_is_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut redis = RedisServer::start_persistent(dir.path());
    let fixtures = Fixtures::default();
    // Node 0 subscribes again 3 s after it lost its subscription, node 1 after 1 s.
    let slow = node_with(&redis.url(), "missed:", &fixtures, |s| {
        s.redis.retry_after_ms = 3000;
    });
    let quick = node_with(&redis.url(), "missed:", &fixtures, |_| {});
    let session = Session::begin(&slow, Some(TEST_KEY)).await;
    let ping = session.ask(&quick, json!(1), "ping", json!({})).await;
    assert_result(&answer_of(&ping, &json!(1)), &json!(1));
    redis.kill();
    redis.restart();
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    loop {
        match session.delete(&quick).await {
            200 => break,
            503 => {}
            other => panic!("DELETE: {other}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "never taken");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        metric(&slow, "mcp_bus_bridge_subscribed").await,
        0,
        "node 0's bus was down when the deletion was told"
    );
    // Node 0's copy: served until its bus is back (or refused while it skips Redis), then
    // ended.
    served_until_404(&session, &slow, "node 0").await;
}

/// Pings `session` on `node` until it answers 404 (the session ended there), within
/// [`READ_TIMEOUT`]; `which` names the node in the failure.
async fn served_until_404(session: &Session, node: &RunningServer, which: &str) {
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    let mut id = 1;
    loop {
        id += 1;
        let status = session
            .post_raw(node, request(json!(id), "ping", json!({})))
            .await
            .status();
        if status == 404 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the deleted session is still served on {which}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The same, when the node skips Redis (after its beats timed out) at the moment its bus
/// comes back, as it often does right after Redis returns (the subscription may be made
/// again before the first beat lands): its copy's read of the record is skipped too, and
/// made again until Redis answers. (It was dropped: the copy served the deleted session for
/// as long as it was used; review 57 #2.) Forced here: the subscriptions are killed, the
/// session deleted on the quick node, and Redis's writes paused (`CLIENT PAUSE WRITE`) so
/// that the slow node's beats time out just before its subscription (a read) comes back.
#[tokio::test]
async fn a_delete_whose_note_a_node_missed_ends_its_copy_though_it_skipped_redis_as_its_bus_came_back(
) {
    let redis = RedisServer::start();
    let fixtures = Fixtures::default();
    let slow = node_with(&redis.url(), "recheck:", &fixtures, |s| {
        s.redis.retry_after_ms = 3000;
    });
    let quick = node_with(&redis.url(), "recheck:", &fixtures, |_| {});
    wait_metric(&slow, "mcp_bus_bridge_subscribed", 1).await;
    wait_metric(&quick, "mcp_bus_bridge_subscribed", 1).await;
    let session = Session::begin(&slow, Some(TEST_KEY)).await;
    let ping = session.ask(&quick, json!(1), "ping", json!({})).await;
    assert_result(&answer_of(&ping, &json!(1)), &json!(1));
    let dropped = tokio::time::Instant::now();
    redis.drop_subscriptions();
    wait_metric(&slow, "mcp_bus_bridge_subscribed", 0).await;
    // The quick node is back after 1 s, the slow one after 3 s.
    wait_metric(&quick, "mcp_bus_bridge_subscribed", 1).await;
    loop {
        match session.delete(&quick).await {
            200 => break,
            503 => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("DELETE: {other}"),
        }
    }
    assert_eq!(
        metric(&slow, "mcp_bus_bridge_subscribed").await,
        0,
        "the slow node's bus was down when the deletion was told"
    );
    // Writes (the beats) wait from 1.8 s to 4.3 s after the drop: the slow node's beats time
    // out and it skips Redis while its subscription comes back (about 3 s after the drop).
    tokio::time::sleep_until(dropped + Duration::from_millis(1800)).await;
    let mut con = redis.connection().expect("redis");
    let _: () = ::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(2500)
        .arg("WRITE")
        .query(&mut con)
        .expect("pause");
    wait_metric(&slow, "mcp_bus_bridge_subscribed", 1).await;
    assert!(
        metric(&slow, "mcp_redis_skipped_total").await > 0,
        "the slow node skipped Redis as its bus came back"
    );
    served_until_404(&session, &slow, "the slow node").await;
}

/// Redis restarts empty: the node holding a session writes its record again as soon as its
/// beat finds Redis lost what it held, and another node meanwhile answers 503 (retryable),
/// never 404, which a client takes for its session ended. (The others answered 404 for
/// about 75 s, until the holder wrote the record again in its own time; attack run 50c, F2.)
#[tokio::test]
async fn after_redis_restarts_empty_a_session_is_found_again_on_every_node_and_never_404() {
    let mut redis = RedisServer::start();
    let (nodes, _) = nodes(&redis.url(), "emptied:", false);
    let session = Session::begin(&nodes[0], Some(TEST_KEY)).await;
    let ping = session.ask(&nodes[0], json!(1), "ping", json!({})).await;
    assert_result(&answer_of(&ping, &json!(1)), &json!(1));
    // The nodes' beats have read Redis's epoch before it is lost.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.kill();
    redis.restart();
    assert!(
        redis.keys("emptied:session:*").is_empty(),
        "Redis came back empty"
    );
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    let mut id = 1;
    loop {
        id += 1;
        let status = session
            .post_raw(&nodes[1], request(json!(id), "ping", json!({})))
            .await
            .status();
        match status.as_u16() {
            200 => break,
            503 => {}
            other => panic!("the session's request on another node: {other}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "never found again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(redis.keys("emptied:session:*").len(), 1);
}

/// Redis restarts empty while the node holding a session reaches it over a slow link (1.5 s
/// a round trip): that node finds the loss and writes the session's record again after the
/// other node's own wait (three seconds from its beat's finding) has ended. The other node
/// answers 503 (retryable) until the record is back, reading the holder's word in Redis
/// that it writes its records again, and never 404, which ends the session for its client.
/// (It answered 404 from the end of its wait until the record came back: the word was said
/// for task records only; stop 54's note.)
#[tokio::test]
async fn a_session_written_again_over_a_slow_link_after_redis_restarts_empty_is_never_404_elsewhere(
) {
    let mut redis = RedisServer::start();
    let slow = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let proxy = slow_replies_proxy(&redis, Duration::from_millis(1500), slow.clone());
    let (holder, other) = slow_holder_and_other(&redis, &proxy, "slow-rewrite:");
    let session = Session::begin(&holder, Some(TEST_KEY)).await;
    let ping = session.ask(&holder, json!(1), "ping", json!({})).await;
    assert_result(&answer_of(&ping, &json!(1)), &json!(1));
    // Both nodes' beats have read Redis's epoch before it is lost.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    slow.store(true, std::sync::atomic::Ordering::SeqCst);
    redis.kill();
    redis.restart();
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    let mut id = 1;
    let mut refused = 0;
    loop {
        id += 1;
        let status = session
            .post_raw(&other, request(json!(id), "ping", json!({})))
            .await
            .status();
        match status.as_u16() {
            200 => break,
            503 => refused += 1,
            other => panic!(
                "the session's request on the other node ({refused} refused before): {other}"
            ),
        }
        assert!(tokio::time::Instant::now() < deadline, "never found again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused > 0, "the record was lost, and refused a while");
    assert_eq!(redis.keys("slow-rewrite:session:*").len(), 1);
}

/// Redis restarts empty, then refuses for nine seconds the session records the node holding
/// them writes again (its Redis user may not write them; its other commands go through),
/// that node trying again every twelve seconds (`redis.retry_after_ms`): it says in Redis
/// that it writes its records again until Redis took each one, and the word lapses once it
/// did. Another node answers the HTTP session 503 meanwhile, never 404. (The word was said
/// until the node had found the loss, and for a beat after each failed write: it lapsed
/// between the node's tries, and the other node answered 404.)
#[tokio::test]
async fn an_http_session_record_redis_refuses_after_restarting_empty_is_owed_until_taken() {
    owed_until_taken(true).await;
}

/// As [`an_http_session_record_redis_refuses_after_restarting_empty_is_owed_until_taken`],
/// for a WebSocket session's record (written by its socket's actor, `socket_record`): the
/// word stands until Redis took it, and lapses after.
#[tokio::test]
async fn a_websocket_session_record_redis_refuses_after_restarting_empty_is_owed_until_taken() {
    owed_until_taken(false).await;
}

/// The node user of [`owed_until_taken`]'s holder, allowed every key, or every key but the
/// session records under `prefix` (read, not written).
fn set_holder_user(redis: &RedisServer, prefix: &str, may_write_sessions: bool) {
    let mut connection = redis.connection().expect("redis answers");
    let mut setuser = ::redis::cmd("ACL");
    setuser.arg("SETUSER").arg("holder").arg("reset").arg("on");
    setuser.arg(">holder-secret").arg("+@all").arg("&*");
    if may_write_sessions {
        setuser.arg("~*");
    } else {
        setuser.arg("%R~*").arg(format!("~{prefix}[^s]*"));
    }
    setuser
        .query::<()>(&mut connection)
        .expect("ACL SETUSER taken");
}

async fn owed_until_taken(http: bool) {
    const PREFIX: &str = "owed:";
    let mut redis = RedisServer::start();
    set_holder_user(&redis, PREFIX, true);
    let fixtures = Fixtures::default();
    let holder_url = redis
        .url()
        .replacen("redis://", "redis://holder:holder-secret@", 1);
    let holder = node_with(&holder_url, PREFIX, &fixtures, |settings| {
        settings.redis.retry_after_ms = 12_000;
    });
    let other = node(&redis.url(), PREFIX, false, &fixtures);
    let records = |redis: &RedisServer| redis.keys(&format!("{PREFIX}session:*")).len();
    let word = |redis: &RedisServer| redis.keys(&format!("{PREFIX}rewriting")).len() == 1;
    let session = if http {
        Some(Session::begin(&holder, Some(TEST_KEY)).await)
    } else {
        None
    };
    let _socket = if http {
        None
    } else {
        Some(Client::initialized_at(&holder.url(), Some(TEST_KEY), "2025-11-25").await)
    };
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while records(&redis) != 1 {
        assert!(tokio::time::Instant::now() < deadline, "the record written");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Both nodes' beats have read Redis's epoch before it is lost.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    redis.kill();
    redis.restart();
    set_holder_user(&redis, PREFIX, false);
    let refused_until = tokio::time::Instant::now() + Duration::from_secs(9);
    let mut said = false;
    let mut id = 1;
    while tokio::time::Instant::now() < refused_until {
        assert_eq!(records(&redis), 0, "Redis refused the record");
        if word(&redis) {
            said = true;
        } else {
            assert!(!said, "the word lapsed while the record was refused");
        }
        if let Some(session) = &session {
            id += 1;
            let status = session
                .post_raw(&other, request(json!(id), "ping", json!({})))
                .await
                .status();
            assert_eq!(status, 503, "the session's request on the other node");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(said, "the holder said it writes its records again");
    set_holder_user(&redis, PREFIX, true);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while records(&redis) != 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the record written again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(session) = &session {
        let ping = session.ask(&other, json!(0), "ping", json!({})).await;
        assert_result(&answer_of(&ping, &json!(0)), &json!(0));
    }
    // Owed no more: the word lapses (its lease is three seconds).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while word(&redis) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the word outlived the records owed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The record a session's change is written in fails to reach Redis (it is away): once it
/// is back, the holder writes the record again by itself, without waiting for a request.
/// (The failed write was not made again until the session's next change or a quarter of
/// its time to live, and meanwhile another node served the session as it was before, here
/// with its log level unset.)
#[tokio::test]
async fn a_session_record_whose_write_failed_is_written_again_once_redis_is_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut redis = RedisServer::start_persistent(dir.path());
    let (nodes, _) = nodes(&redis.url(), "rewrite:", false);
    let session = Session::begin(&nodes[0], Some(TEST_KEY)).await;
    let stored = |redis: &RedisServer| {
        let mut connection = redis.connection().expect("redis answers");
        let json: String = ::redis::cmd("GET")
            .arg(format!("rewrite:session:{{{}}}", session.id))
            .query(&mut connection)
            .expect("the session's record");
        serde_json::from_str::<Value>(&json).expect("a JSON record")
    };
    let before = stored(&redis);
    assert_ne!(before["log_level"], "error");
    redis.kill();
    // Held by node 0: its change is served there, and its record's write fails.
    let set = session
        .ask(
            &nodes[0],
            json!(1),
            "logging/setLevel",
            json!({"level": "error"}),
        )
        .await;
    assert_eq!(
        assert_result(&answer_of(&set, &json!(1)), &json!(1)),
        json!({})
    );
    // Back from its append-only file, with the record as it was.
    redis.restart();
    assert_eq!(stored(&redis)["revision"], before["revision"]);
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while stored(&redis)["log_level"] != "error" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the change never reached Redis: {}",
            stored(&redis)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_ne!(stored(&redis)["revision"], before["revision"]);
}

#[tokio::test]
async fn delete_on_a_node_that_never_served_the_session_ends_it() {
    let redis = RedisServer::start();
    let (nodes, _) = nodes(&redis.url(), "delete-elsewhere:", false);
    let session = Session::begin(&nodes[0], Some(TEST_KEY)).await;
    // Someone else's DELETE finds nothing.
    let stranger = Session {
        http: crate::support::http::client(),
        id: session.id.clone(),
        token: None,
    };
    assert_eq!(stranger.delete(&nodes[2]).await, 404);
    assert_eq!(session.delete(&nodes[1]).await, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    for node in &nodes {
        let status = session
            .post_raw(node, request(json!(1), "ping", json!({})))
            .await
            .status();
        assert_eq!(status, 404, "on {}", node.addr());
    }
    assert!(redis.keys("delete-elsewhere:session:*").is_empty());
}
