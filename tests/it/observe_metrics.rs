//! `/metrics` beyond counters and gauges, read over HTTP from the real server:
//!
//! - `mcp_request_duration_seconds{method}`: a Prometheus histogram per method with fixed
//!   buckets; each answered request is observed once in its method's (unknown methods in
//!   `other`), a cancelled one not at all; buckets are cumulative and end at `+Inf` = count;
//!   a request that took at least 30 ms is above the 25 ms bucket and in the sum.
//! - `mcp_rejected_total{reason}`: origin, host, session cap, batch too large and message
//!   too large each counted once per refusal, and only in their own reason; the
//!   de-duplication and Redis counters are declared.
//! - `server.admin_listen`: `/metrics` and `/healthz` on the admin address, `/metrics` gone
//!   from the public one (which keeps `/healthz`).

use crate::support::http::{http_get, wait_metric};
use crate::support::ws::{assert_server_alive, assert_upgrade_refused_503};
use crate::support::*;

use futures_util::SinkExt;
use mcp_ws::RunningServer;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// Every sample of `/metrics` at `addr`, by its name with labels.
async fn samples(addr: SocketAddr) -> BTreeMap<String, f64> {
    let (status, body) = http_get(addr, "/metrics").await;
    assert_eq!(status, 200);
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (key, value) = line.rsplit_once(' ').expect("name value");
            (key.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

const HISTOGRAM: &str = "mcp_request_duration_seconds";

/// The histogram of one method: (cumulative buckets in order, sum, count), checked to be
/// well-formed.
fn histogram(samples: &BTreeMap<String, f64>, method: &str) -> (Vec<(String, f64)>, f64, f64) {
    let prefix = format!("{HISTOGRAM}_bucket{{method=\"{method}\",le=\"");
    let mut buckets: Vec<(String, f64)> = samples
        .iter()
        .filter_map(|(key, value)| {
            let le = key.strip_prefix(&prefix)?.strip_suffix("\"}")?;
            Some((le.to_owned(), *value))
        })
        .collect();
    let bound = |le: &str| {
        if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().expect("le")
        }
    };
    buckets.sort_by(|a, b| bound(&a.0).total_cmp(&bound(&b.0)));
    assert!(buckets.len() > 10, "{method}: {buckets:?}");
    assert_eq!(buckets.last().map(|b| b.0.as_str()), Some("+Inf"));
    for pair in buckets.windows(2) {
        assert!(
            pair[0].1 <= pair[1].1,
            "{method}: not cumulative: {buckets:?}"
        );
    }
    let sum = samples[&format!("{HISTOGRAM}_sum{{method=\"{method}\"}}")];
    let count = samples[&format!("{HISTOGRAM}_count{{method=\"{method}\"}}")];
    assert_eq!(
        buckets.last().map(|b| b.1),
        Some(count),
        "{method}: +Inf is the count"
    );
    (buckets, sum, count)
}

#[tokio::test]
async fn each_answered_request_is_observed_once_in_its_method() {
    let server = start(settings());
    let mut client = Client::initialized(&server).await;
    for _ in 0..3 {
        client.request("ping", json!({})).await;
    }
    for text in ["a", "b"] {
        let echo = client.call_tool("echo", json!({"text": text})).await;
        assert_eq!(echo["result"]["content"][0]["text"], text);
    }
    let slept = client.call_tool("sleep", json!({"ms": 30})).await;
    assert!(slept.get("result").is_some(), "{slept}");
    client.request("tools/list", json!({})).await;
    let unknown = client.request("no/such", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32601);
    // Cancelled: never answered, never observed.
    client
        .send_json(json!({"jsonrpc":"2.0","id":"c","method":"tools/call",
            "params":{"name":"sleep","arguments":{"ms":60_000}}}))
        .await;
    client
        .send_json(json!({"jsonrpc":"2.0","method":"notifications/cancelled",
            "params":{"requestId":"c"}}))
        .await;
    client.expect_nothing_pending().await;

    let s = samples(server.addr()).await;
    let count = |method: &str| histogram(&s, method).2;
    assert_eq!(count("initialize"), 1.0);
    assert_eq!(count("ping"), 4.0, "3 and the barrier");
    assert_eq!(
        count("tools/call"),
        3.0,
        "echo twice and sleep; not the cancelled one"
    );
    assert_eq!(count("tools/list"), 1.0);
    assert_eq!(count("other"), 1.0);
    assert_eq!(count("resources/read"), 0.0);
    // Every request but the cancelled one is in exactly one histogram.
    let observed: f64 = s
        .iter()
        .filter(|(key, _)| key.starts_with(&format!("{HISTOGRAM}_count")))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(
        observed,
        s["mcp_requests_total"] - s["mcp_cancelled_total"],
        "{s:?}"
    );
    assert_eq!(s["mcp_cancelled_total"], 1.0);
    // The sleep took 30 ms at least: above the 25 ms bucket, and in the sum.
    let (buckets, sum, total) = histogram(&s, "tools/call");
    let at_25ms = buckets.iter().find(|b| b.0 == "0.025").expect("0.025").1;
    assert!(
        at_25ms <= total - 1.0,
        "the sleep is above 25 ms: {buckets:?}"
    );
    assert!(sum >= 0.030, "{sum}");
}

/// Sends a raw HTTP request and returns the status.
async fn raw_status(addr: SocketAddr, request: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut head = vec![0; 64];
    let n = tokio::time::timeout(READ_TIMEOUT, stream.read(&mut head))
        .await
        .expect("an answer in time")
        .expect("read");
    String::from_utf8_lossy(&head[..n])
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line")
}

async fn rejections(server: &RunningServer) -> BTreeMap<String, f64> {
    samples(server.addr())
        .await
        .into_iter()
        .filter_map(|(key, value)| {
            let reason = key
                .strip_prefix("mcp_rejected_total{reason=\"")?
                .strip_suffix("\"}")?;
            Some((reason.to_owned(), value))
        })
        .collect()
}

#[tokio::test]
async fn refusals_are_counted_by_reason() {
    let mut s = settings();
    s.server.max_sessions = 1;
    s.limits.max_batch_len = 2;
    s.limits.max_message_bytes = 1024;
    // A closed socket ends its session at once (no wait for a reconnect).
    s.sessions.resume_grace_ms = 0;
    let server = start(s);
    let before = rejections(&server).await;
    for reason in [
        "origin",
        "host",
        "session_cap",
        "message_too_large",
        "batch_too_large",
        "session_busy",
        "server_busy",
    ] {
        assert_eq!(before.get(reason), Some(&0.0), "{reason}: {before:?}");
    }
    let mut expected = before.clone();

    // A foreign Origin, and a DNS-rebound Host (loopback bind): 403 each.
    let mut foreign = server.url().into_client_request().expect("request");
    foreign
        .headers_mut()
        .insert("Origin", "http://evil.example".parse().expect("value"));
    match tokio_tungstenite::connect_async(foreign).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 403)
        }
        other => panic!("expected 403, got {:?}", other.map(|(_, r)| r.status())),
    }
    *expected.get_mut("origin").expect("origin") += 1.0;
    let rebound = raw_status(
        server.addr(),
        "GET /mcp HTTP/1.1\r\nHost: evil.example\r\nAccept: text/event-stream\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(rebound, 403);
    *expected.get_mut("host").expect("host") += 1.0;

    // The one session slot taken: the next upgrade gets 503.
    let mut client = Client::initialized(&server).await;
    assert_upgrade_refused_503(&server.url()).await;
    *expected.get_mut("session_cap").expect("cap") += 1.0;

    // A batch of 3 over the limit of 2: -32010.
    client
        .send_json(json!([
            {"jsonrpc":"2.0","id":1,"method":"ping"},
            {"jsonrpc":"2.0","id":2,"method":"ping"},
            {"jsonrpc":"2.0","id":3,"method":"ping"}
        ]))
        .await;
    let refused = client.recv().await;
    assert_eq!(refused["error"]["code"], -32010, "{refused}");
    *expected.get_mut("batch_too_large").expect("batch") += 1.0;
    assert_eq!(rejections(&server).await, expected);

    // A message over 1 KiB: close 1009.
    client
        .ws
        .send(Message::text("x".repeat(2000)))
        .await
        .expect("send");
    let close = client.recv_close().await.expect("a close frame");
    assert_eq!(u16::from(close.code), 1009);
    *expected.get_mut("message_too_large").expect("size") += 1.0;
    wait_metric(&server, "mcp_sessions", 0).await;
    assert_eq!(rejections(&server).await, expected);

    let all = samples(server.addr()).await;
    assert_eq!(all.get("mcp_dedup_hits_total"), Some(&0.0));
    assert_eq!(all.get("mcp_redis_errors_total"), Some(&0.0));
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn metrics_move_to_the_admin_listener_when_it_is_set() {
    let mut s = settings();
    s.server.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
    let server = start(s);
    let admin = server.admin_addr().expect("an admin listener");
    assert_ne!(admin, server.addr());
    let _client = Client::initialized(&server).await;

    let (status, body) = http_get(admin, "/metrics").await;
    assert_eq!(status, 200);
    assert!(body.contains("\nmcp_sessions 1\n"), "{body}");
    assert!(body.contains("mcp_request_duration_seconds_count{method=\"initialize\"} 1"));
    let (status, _) = http_get(server.addr(), "/metrics").await;
    assert_eq!(status, 404, "no /metrics on the public listener");
    for addr in [admin, server.addr()] {
        let (status, body) = http_get(addr, "/healthz").await;
        assert_eq!((status, body.as_str()), (200, "ok\n"), "{addr}");
    }
    // The admin listener serves nothing of MCP.
    let (status, _) = http_get(admin, "/mcp").await;
    assert_eq!(status, 404);

    // Without it, /metrics is on the public listener.
    let plain = start(settings());
    assert_eq!(plain.admin_addr(), None);
    assert_eq!(http_get(plain.addr(), "/metrics").await.0, 200);
}
