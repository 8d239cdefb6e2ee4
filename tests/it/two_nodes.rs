//! Two `mcp-ws` processes (the real binary) sharing one real `redis-server`, behind a real
//! nginx started by the test with the repository's `config/nginx-two-nodes.conf` (only its
//! addresses replaced): WebSocket upgrades pass through, spread round-robin.
//! - a retry with the same idempotency key that lands on the second node is answered from the
//!   store: the same response, with the retry's id; the tool ran once (each node's metrics);
//! - a registry change on one node (a file added to the directory it serves) reaches the
//!   sessions on the other node as `notifications/resources/list_changed`, through Redis: the
//!   other node's own directory did not change;
//! - a node whose Redis evicts keys at its memory limit says so once Redis answers (the store
//!   needs `maxmemory-policy noeviction`).

use crate::support::http::http_get;
use crate::support::nginx::Nginx;
use crate::support::process::ServerProcess;
use crate::support::redis::RedisServer;
use crate::support::*;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The sample config's addresses, which the test replaces.
const SAMPLE_NODE_A: &str = "127.0.0.1:8765";
const SAMPLE_NODE_B: &str = "127.0.0.1:8766";
const SAMPLE_LISTEN: &str = "127.0.0.1:8080";

/// One node: the binary with its own config file and served directory.
struct NodeProcess {
    process: ServerProcess,
    addr: SocketAddr,
    directory: PathBuf,
}

fn start_node(dir: &Path, name: &str, redis: &RedisServer) -> NodeProcess {
    let directory = dir.join(format!("{name}-files"));
    std::fs::create_dir_all(&directory).expect("served directory");
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nworkers = 1\n\n[info]\nname = \"{name}\"\n\n\
             [redis]\nurl = \"{}\"\n\n[[resources.directories]]\npath = \"{}\"\n\n\
             [[auth.api_keys]]\nname = \"tester\"\nsha256 = \"{}\"\n",
            redis.url(),
            directory.display(),
            test_key_sha256()
        ),
    )
    .expect("node config written");
    let process = ServerProcess::spawn(&["--config", config.to_str().expect("utf-8 path")], &[]);
    let addr = process.wait_listening();
    NodeProcess {
        process,
        addr,
        directory,
    }
}

/// Reads a metric of a node over its own address (not through the proxy).
async fn node_metric(node: &NodeProcess, name: &str) -> u64 {
    let (status, body) = http_get(node.addr, "/metrics").await;
    assert_eq!(status, 200);
    body.lines()
        .find_map(|line| {
            let (key, value) = line.split_once(' ')?;
            (key == name).then(|| value.trim().parse().ok()).flatten()
        })
        .unwrap_or_else(|| panic!("metric {name} missing"))
}

async fn wait_node_metric(node: &NodeProcess, name: &str, expected: u64) {
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    loop {
        let value = node_metric(node, name).await;
        if value == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "metric {name} stayed at {value}, expected {expected}; node log:\n{}",
            node.process.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A client through the proxy, initialized; and the node that serves it. It authenticates
/// with [`TEST_KEY`]: an identity's idempotency keys are shared across nodes (an anonymous
/// client's are its session's alone).
async fn client_through(proxy: &Nginx) -> (Client, String) {
    let mut client = Client::connect_url_as(&proxy.url(), Some(TEST_KEY)).await;
    let response = client
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    let node = assert_result(&response, &json!(0))["serverInfo"]["name"]
        .as_str()
        .expect("serverInfo.name")
        .to_owned();
    client
        .send_json(json!({"jsonrpc":"2.0","method":"notifications/initialized"}))
        .await;
    (client, node)
}

fn keyed_echo(id: Value, text: &str, key: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{
        "name": "echo", "arguments": {"text": text}, "_meta": {"idempotencyKey": key}}})
}

#[tokio::test]
async fn two_nodes_behind_nginx_share_retries_and_registry_changes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start();
    let a = start_node(dir.path(), "node-a", &redis);
    let b = start_node(dir.path(), "node-b", &redis);
    for node in [&a, &b] {
        wait_node_metric(node, "mcp_bus_bridge_subscribed", 1).await;
    }
    let proxy = Nginx::start(
        &dir.path().join("nginx"),
        "config/nginx-two-nodes.conf",
        &[(SAMPLE_NODE_A, a.addr), (SAMPLE_NODE_B, b.addr)],
        SAMPLE_LISTEN,
    );

    // Round-robin: connect until one client sits on each node.
    let mut on_a = None;
    let mut on_b = None;
    for _ in 0..6 {
        let (client, node) = client_through(&proxy).await;
        match node.as_str() {
            "node-a" if on_a.is_none() => on_a = Some(client),
            "node-b" if on_b.is_none() => on_b = Some(client),
            _ => {}
        }
        if on_a.is_some() && on_b.is_some() {
            break;
        }
    }
    let (mut on_a, mut on_b) = (
        on_a.expect("a connection reached node a"),
        on_b.expect("a connection reached node b"),
    );

    // A call on node a, retried (same key, another id) on node b.
    on_a.send_json(keyed_echo(json!(1), "charge 10", "payment-7"))
        .await;
    let first = on_a.recv_response(&json!(1)).await;
    assert_eq!(
        assert_result(&first, &json!(1))["content"][0]["text"],
        "charge 10"
    );
    on_b.send_json(keyed_echo(json!("retry-1"), "charge 10", "payment-7"))
        .await;
    let retry = on_b.recv_response(&json!("retry-1")).await;
    assert_eq!(retry["result"], first["result"], "the stored response");
    assert_eq!(retry["id"], "retry-1", "with the retry's own id");
    assert_eq!(
        node_metric(&a, "mcp_idempotent_runs_total").await,
        1,
        "ran on node a"
    );
    assert_eq!(
        node_metric(&b, "mcp_idempotent_runs_total").await,
        0,
        "not on node b"
    );
    assert_eq!(node_metric(&b, "mcp_dedup_hits_total").await, 1);
    assert_eq!(node_metric(&a, "mcp_dedup_hits_total").await, 0);

    // A file added to node a's directory: node b's session hears the list changed.
    on_b.expect_nothing_pending().await;
    std::fs::write(a.directory.join("added.txt"), "new\n").expect("file written");
    let heard = on_b.recv().await;
    assert_eq!(
        heard["method"], "notifications/resources/list_changed",
        "{heard}"
    );
    let heard = on_a.recv().await;
    assert_eq!(
        heard["method"], "notifications/resources/list_changed",
        "{heard}"
    );
    assert_eq!(
        std::fs::read_dir(&b.directory)
            .expect("node b's directory")
            .count(),
        0,
        "node b heard it through Redis, not from its own directory"
    );
    assert_eq!(node_metric(&b, "mcp_bus_bridge_received_total").await, 1);
    drop(proxy);
}

#[tokio::test]
async fn a_node_warns_when_redis_evicts_keys() {
    let dir = tempfile::tempdir().expect("temp dir");
    let redis = RedisServer::start();
    let mut connection = redis.connection().expect("redis answers");
    ::redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query::<()>(&mut connection)
        .expect("CONFIG SET");
    let node = start_node(dir.path(), "evicting", &redis);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let log = node.process.stderr_text();
        if log.contains("maxmemory-policy") {
            assert!(log.contains("allkeys-lru"), "the policy is named:\n{log}");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no warning about the eviction policy:\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
