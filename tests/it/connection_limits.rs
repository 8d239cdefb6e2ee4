//! Session limits per client, each refused before the upgrade (or before an HTTP session is
//! made) with its own status, counted in `/metrics`, and lifted when a session ends:
//!
//! - `server.max_sessions_per_ip`: a client IP address over it gets 429 with `Retry-After`;
//!   WebSocket and HTTP sessions count together; other addresses are still served, and the
//!   address's own sessions go on; when one ends, the address may open another.
//! - It is on by default, at a tenth of `server.max_sessions` (at least 10): one address
//!   cannot take every session, WebSocket sessions its client dropped (parked for a resume)
//!   included.
//! - Behind a proxy named in `server.trusted_proxies`, the address counted is the one it
//!   forwards (`X-Forwarded-For`, rightmost entry not itself a proxy; or `Forwarded`): clients
//!   behind one balancer are told apart, a client cannot pick its address by writing the
//!   header itself, and a peer that is not a trusted proxy counts as itself whatever it
//!   sends.
//! - A WebSocket session waiting for a reconnect keeps its place, and resuming it takes
//!   none (a resume is never refused for the limit its own session holds).
//! - `server.max_sessions_per_identity`: an authenticated identity over it gets 429; other
//!   identities and anonymous clients (counted per IP only) are still served.
//! - `server.max_sessions` (all sessions): 503 with `Retry-After: 1`, counted.

use crate::support::http::{metric, wait_metric};
use crate::support::ws::Ws;
use crate::support::*;

use mcp_ws::{RunningServer, Settings};
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr};
use tokio::net::TcpSocket;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::MaybeTlsStream;

const HERE: [u8; 4] = [127, 0, 0, 1];
const ELSEWHERE: [u8; 4] = [127, 0, 0, 2];

/// `expect_err` for upgrades (a `Client` has no `Debug`).
trait Refusing {
    fn refused(self, why: &str) -> Refused;
}

impl Refusing for Result<Client, Refused> {
    fn refused(self, why: &str) -> Refused {
        match self {
            Ok(_) => panic!("expected a refusal: {why}"),
            Err(refused) => refused,
        }
    }
}

/// A refused upgrade: status, `Retry-After`, JSON-RPC error message.
#[derive(Debug)]
struct Refused {
    status: u16,
    retry_after: Option<String>,
    message: String,
}

/// Upgrades from the loopback address `from`, with extra headers.
async fn upgrade_from(
    server: &RunningServer,
    from: [u8; 4],
    headers: &[(&'static str, &str)],
) -> Result<Client, Refused> {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind(SocketAddr::from((from, 0)))
        .expect("bind a loopback source address");
    let stream = socket.connect(server.addr()).await.expect("connect");
    let mut request = server.url().into_client_request().expect("request");
    request
        .headers_mut()
        .insert("Sec-WebSocket-Protocol", HeaderValue::from_static("mcp"));
    for (name, value) in headers {
        request
            .headers_mut()
            .insert(*name, HeaderValue::from_str(value).expect("value"));
    }
    match tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(stream)).await {
        Ok((ws, _)) => Ok(Client::from_ws(ws)),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let body: Value = response
                .body()
                .as_deref()
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or(Value::Null);
            Err(Refused {
                status: response.status().as_u16(),
                retry_after: response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                message: body["error"]["message"].as_str().unwrap_or("").to_owned(),
            })
        }
        Err(other) => panic!("unexpected connect error: {other}"),
    }
}

/// An initialized session from `from`; returns it and its resume id.
async fn session_from(
    server: &RunningServer,
    from: [u8; 4],
    headers: &[(&'static str, &str)],
) -> (Client, String) {
    let mut client = upgrade_from(server, from, headers)
        .await
        .unwrap_or_else(|refused| panic!("admitted: {refused:?}"));
    let init = client
        .request_with_id(json!(0), "initialize", initialize_params("2025-11-25"))
        .await;
    let id = assert_result(&init, &json!(0))["_meta"]["mcp-ws/sessionId"]
        .as_str()
        .expect("session id")
        .to_owned();
    (client, id)
}

async fn assert_pings(client: &mut Client) {
    let pong = client.request("ping", json!({})).await;
    assert_eq!(pong["result"], json!({}), "{pong}");
}

/// Ends a session the way a client that is done does (close 1000). The socket is returned
/// for the caller to keep until the server has seen the close: dropping it at once could
/// reset the connection before the close frame is read, and a reset is a drop, not an end.
async fn close(client: Client) -> Ws {
    let mut ws = client.ws;
    ws.close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "done".into(),
    }))
    .await
    .expect("close");
    ws
}

fn assert_limit(refused: &Refused, what: &str, limit: usize) {
    assert_eq!(refused.status, 429, "{refused:?}");
    assert_eq!(refused.retry_after.as_deref(), Some("5"), "{refused:?}");
    assert_eq!(
        refused.message,
        format!("Too many sessions from this {what}: the limit is {limit}")
    );
}

/// A Streamable HTTP `initialize` from `from`: the status.
async fn http_initialize_from(server: &RunningServer, from: [u8; 4]) -> u16 {
    http_initialize_with(server, from, &[]).await
}

/// A Streamable HTTP `initialize` from `from` with extra headers: the status.
async fn http_initialize_with(
    server: &RunningServer,
    from: [u8; 4],
    headers: &[(&'static str, &str)],
) -> u16 {
    http_initialize_answer(server, from, headers).await.0
}

/// [`http_initialize_with`]'s status and body.
async fn http_initialize_answer(
    server: &RunningServer,
    from: [u8; 4],
    headers: &[(&'static str, &str)],
) -> (u16, String) {
    let client = crate::support::http::client_builder()
        .local_address(IpAddr::from(from))
        .build()
        .expect("client");
    let body = json!({"jsonrpc":"2.0","id":0,"method":"initialize",
        "params": initialize_params("2025-11-25")});
    let post = client
        .post(format!("http://{}/mcp", server.addr()))
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json");
    let post = headers.iter().fold(post, |post, (name, value)| {
        // As bytes: a value may hold bytes past ASCII (obs-text), as a client may send.
        let value = HeaderValue::from_bytes(value.as_bytes()).expect("a header value");
        post.header(*name, value)
    });
    let response = post.body(body.to_string()).send().await.expect("POST");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

fn per_ip(limit: usize) -> Settings {
    let mut s = settings();
    s.server.max_sessions_per_ip = Some(limit);
    s
}

#[tokio::test]
async fn sessions_per_ip_are_limited_and_a_place_comes_back_when_a_session_ends() {
    let server = start(per_ip(2));
    let (mut first, _) = session_from(&server, HERE, &[]).await;
    assert_eq!(
        http_initialize_from(&server, HERE).await,
        200,
        "HTTP counts"
    );
    let refused = upgrade_from(&server, HERE, &[])
        .await
        .refused("a third session");
    assert_limit(&refused, "IP address", 2);
    assert_eq!(http_initialize_from(&server, HERE).await, 429);
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"ip_limit\"}").await,
        2
    );
    assert_eq!(metric(&server, "mcp_sessions").await, 2, "nothing opened");
    // Another address is served, and this address's sessions go on.
    let (mut elsewhere, _) = session_from(&server, ELSEWHERE, &[]).await;
    assert_pings(&mut elsewhere).await;
    assert_pings(&mut first).await;
    // When a session ends, its place comes back.
    let _closed = close(first).await;
    wait_metric(&server, "mcp_sessions", 2).await;
    let (mut again, _) = session_from(&server, HERE, &[]).await;
    assert_pings(&mut again).await;
}

#[tokio::test]
async fn by_default_one_address_holds_a_tenth_of_the_sessions_parked_ones_included() {
    let mut s = settings();
    s.server.max_sessions = 100;
    let server = start(s);
    // Ten places: five WebSocket sessions whose clients dropped (parked for a resume), five
    // HTTP sessions never deleted.
    for _ in 0..5 {
        let (client, _) = session_from(&server, HERE, &[]).await;
        drop(client);
    }
    wait_metric(&server, "mcp_parked_sessions", 5).await;
    for _ in 0..5 {
        assert_eq!(http_initialize_from(&server, HERE).await, 200);
    }
    assert_limit(
        &upgrade_from(&server, HERE, &[])
            .await
            .refused("an 11th session"),
        "IP address",
        10,
    );
    assert_eq!(http_initialize_from(&server, HERE).await, 429);
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"ip_limit\"}").await,
        2
    );
    // Everyone else is still served.
    let (mut elsewhere, _) = session_from(&server, ELSEWHERE, &[]).await;
    assert_pings(&mut elsewhere).await;
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_address_is_the_one_counted() {
    let mut s = per_ip(1);
    s.server.trusted_proxies = vec!["127.0.0.1/32".into()];
    let server = start(s);
    let xff = |value| [("X-Forwarded-For", value)];
    // Two clients behind the proxy (HERE) are two addresses.
    let (mut alice, _) = session_from(&server, HERE, &xff("203.0.113.7")).await;
    assert_eq!(
        http_initialize_with(&server, HERE, &xff("203.0.113.8")).await,
        200
    );
    // Each is at its limit, over either transport; a client writing another address in
    // front of the one the proxy appended is still counted as what the proxy saw.
    assert_limit(
        &upgrade_from(&server, HERE, &xff("203.0.113.7"))
            .await
            .refused("alice's second"),
        "IP address",
        1,
    );
    assert_eq!(
        http_initialize_with(&server, HERE, &xff("198.51.100.1, 203.0.113.8")).await,
        429
    );
    // Nor by a byte past ASCII in its own entry, which spoiled the whole line: the client
    // was counted as the proxy.
    assert_eq!(
        http_initialize_with(&server, HERE, &xff("198.51.100.1 \u{e9}, 203.0.113.8")).await,
        429
    );
    // The proxy's own address holds no session.
    session_from(&server, HERE, &[]).await;
    // A peer that is not a trusted proxy is counted as itself, whatever it forwards.
    session_from(&server, ELSEWHERE, &xff("203.0.113.50")).await;
    assert_limit(
        &upgrade_from(&server, ELSEWHERE, &xff("203.0.113.51"))
            .await
            .refused("an untrusted peer's header is ignored"),
        "IP address",
        1,
    );
    assert_pings(&mut alice).await;
}

/// The anonymous request rate (`limits.rate`) counts addresses as the session limits do:
/// an IPv6 client's whole /64 is one (a host may pick any address in it).
#[tokio::test]
async fn the_anonymous_rate_counts_an_ipv6_clients_64_as_one_address() {
    let mut s = settings();
    s.server.trusted_proxies = vec!["127.0.0.1/32".into()];
    // A token every 2 s: the requests below take far less than that.
    s.limits.rate.requests_per_second = 0.5;
    s.limits.rate.burst = 2;
    let server = start(s);
    let limited = |(status, body): (u16, String)| {
        let refused = body.contains("-32017");
        assert!(refused || status == 200, "{status} {body}");
        refused
    };
    // Two addresses of one /64 spend its two tokens; a third address of it finds none.
    for address in ["2001:db8:1:2::1", "2001:db8:1:2::2"] {
        let answer = http_initialize_answer(&server, HERE, &[("X-Forwarded-For", address)]).await;
        assert!(!limited(answer), "{address}: a token of the burst");
    }
    let answer =
        http_initialize_answer(&server, HERE, &[("X-Forwarded-For", "2001:db8:1:2::3")]).await;
    assert!(limited(answer), "another address of the same /64");
    // Another /64 has its own bucket.
    let answer =
        http_initialize_answer(&server, HERE, &[("X-Forwarded-For", "2001:db8:1:3::1")]).await;
    assert!(!limited(answer), "another /64");
}

#[tokio::test]
async fn a_trusted_proxy_may_forward_with_the_forwarded_header_instead() {
    let mut s = per_ip(1);
    s.server.trusted_proxies = vec!["127.0.0.1".into()];
    s.server.forwarded_header = mcp_ws::config::ForwardedHeader::Forwarded;
    let server = start(s);
    let forwarded = [("Forwarded", r#"for="[2001:db8:cafe::17]:4711";proto=http"#)];
    session_from(&server, HERE, &forwarded).await;
    let same_64 = [("Forwarded", "for=\"[2001:db8:cafe::99]\"")];
    assert_limit(
        &upgrade_from(&server, HERE, &same_64)
            .await
            .refused("the same /64"),
        "IP address",
        1,
    );
    // X-Forwarded-For is not read now: a client could have written it.
    session_from(&server, HERE, &[("X-Forwarded-For", "203.0.113.7")]).await;
    assert_eq!(
        http_initialize_with(&server, HERE, &[("X-Forwarded-For", "203.0.113.9")]).await,
        429,
        "both count as the proxy itself"
    );
}

#[tokio::test]
async fn a_session_waiting_for_a_reconnect_keeps_its_place_and_resumes_past_the_limit() {
    let server = start(per_ip(1));
    let (client, id) = session_from(&server, HERE, &[]).await;
    drop(client);
    wait_metric(&server, "mcp_parked_sessions", 1).await;
    let refused = upgrade_from(&server, HERE, &[])
        .await
        .refused("its place is still held");
    assert_limit(&refused, "IP address", 1);
    let mut resumed = upgrade_from(&server, HERE, &[("Mcp-Session-Id", &id)])
        .await
        .expect("a resume takes no new place");
    assert_pings(&mut resumed).await;
    assert_eq!(metric(&server, "mcp_sessions").await, 1);
    let _closed = close(resumed).await;
    wait_metric(&server, "mcp_sessions", 0).await;
    session_from(&server, HERE, &[]).await;
}

#[tokio::test]
async fn sessions_per_identity_are_limited_for_authenticated_clients_only() {
    let key = |name: &str, key: &str| api_key(name, key, &[]);
    let mut s = settings();
    s.server.max_sessions_per_identity = 1;
    s.auth.api_keys = vec![key("alice", "alice-key"), key("bob", "bob-key")];
    let server = start(s);
    let alice = [("Authorization", "Bearer alice-key")];
    let (first, _) = session_from(&server, HERE, &alice).await;
    // The limit follows the identity, whatever the address.
    let refused = upgrade_from(&server, ELSEWHERE, &alice)
        .await
        .refused("a second session of alice");
    assert_limit(&refused, "identity", 1);
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"identity_limit\"}").await,
        1
    );
    let (mut bob, _) = session_from(&server, HERE, &[("Authorization", "Bearer bob-key")]).await;
    assert_pings(&mut bob).await;
    let (mut anonymous_1, _) = session_from(&server, HERE, &[]).await;
    let (mut anonymous_2, _) = session_from(&server, HERE, &[]).await;
    assert_pings(&mut anonymous_1).await;
    assert_pings(&mut anonymous_2).await;
    let _closed = close(first).await;
    wait_metric(&server, "mcp_sessions", 3).await;
    let (mut again, _) = session_from(&server, ELSEWHERE, &alice).await;
    assert_pings(&mut again).await;
}

#[tokio::test]
async fn the_global_cap_is_503_with_retry_after_and_counted() {
    let mut s = settings();
    s.server.max_sessions = 1;
    let server = start(s);
    let (first, _) = session_from(&server, HERE, &[]).await;
    let refused = upgrade_from(&server, ELSEWHERE, &[]).await.refused("full");
    assert_eq!(refused.status, 503);
    assert_eq!(refused.retry_after.as_deref(), Some("1"));
    assert_eq!(
        metric(&server, "mcp_rejected_total{reason=\"session_cap\"}").await,
        1
    );
    let _closed = close(first).await;
    wait_metric(&server, "mcp_sessions", 0).await;
    session_from(&server, ELSEWHERE, &[]).await;
}

/// One address holds at most `server.max_connections_per_ip` connections open, whatever
/// they do (here bodies that never come: they hold no session): one more is closed as it is
/// accepted, before anything it sent is read: a request sent with it is neither served nor
/// answered (a connection shut down once HTTP held it still had its request read and run, or
/// refused with a 429, depending on a race); another address is served, and
/// a place comes back when a connection ends. (Only the open-files limit bounded them: at
/// 1024, 1,100 idle connections of one address made `accept` fail for every client.)
#[tokio::test]
async fn one_address_holds_at_most_its_connections_open() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = settings();
    s.server.max_connections_per_ip = Some(3);
    let server = start(s);
    let connect_from = |from: [u8; 4]| {
        let addr = server.addr();
        async move {
            let socket = TcpSocket::new_v4().expect("socket");
            socket
                .bind(SocketAddr::from((from, 0)))
                .expect("bind a loopback source address");
            socket.connect(addr).await.expect("connect")
        }
    };
    // What `stream` answers `request` with, read to its end ("" when it is closed unanswered).
    let exchange = |mut stream: tokio::net::TcpStream, request: String| async move {
        let _ = stream.write_all(request.as_bytes()).await;
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(READ_TIMEOUT, stream.read_to_end(&mut answer))
            .await
            .expect("closed or answered in time");
        String::from_utf8_lossy(&answer).into_owned()
    };
    // The status of `GET /healthz` on `stream`, or `None` when it is closed unanswered.
    let health = |stream: tokio::net::TcpStream| async move {
        let request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        let answer = exchange(stream, request.to_owned()).await;
        answer.split_whitespace().nth(1).map(str::to_owned)
    };
    let places = || {
        server
            .shared()
            .perimeter
            .open_connections
            .held(IpAddr::from(HERE))
    };
    // Waits until the address holds `count` places (a connection's place comes back once
    // the server has let it go, which may be a moment after its client saw it end).
    let places_reach = |count: usize| async move {
        let deadline = std::time::Instant::now() + READ_TIMEOUT;
        while places() != count {
            assert!(
                std::time::Instant::now() < deadline,
                "{} places, not {count}",
                places()
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    // Bodies that never come: held for `limits.partial_timeout_ms` (30 s), not the 5 s an
    // idle connection is.
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = connect_from(HERE).await;
        let head = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                    Accept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{";
        stream.write_all(head.as_bytes()).await.expect("write");
        held.push(stream);
    }
    places_reach(3).await;
    assert_eq!(
        health(connect_from(HERE).await).await,
        None,
        "a fourth is closed"
    );
    // More send an `initialize` with the connection: closed unanswered, and not served.
    // (The request reaches the server's socket before the close or not; of 20, some do.)
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": initialize_params("2025-11-25")})
    .to_string();
    let post = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    for _ in 0..20 {
        let answer = exchange(connect_from(HERE).await, post.clone()).await;
        assert_eq!(answer, "", "closed unanswered");
    }
    // (Read in process: `/metrics` over HTTP from this address would be refused too.)
    let metrics = &server.shared().metrics;
    assert_eq!(metrics.rejections.connection_ip_limit.get(), 21);
    assert_eq!(
        metrics.requests.get(),
        0,
        "a refused connection's initialize was served"
    );
    assert_eq!(
        health(connect_from(ELSEWHERE).await).await.as_deref(),
        Some("200"),
        "another address is served"
    );
    // A connection of the three ends: its place comes back.
    drop(held.pop());
    places_reach(2).await;
    assert_eq!(
        health(connect_from(HERE).await).await.as_deref(),
        Some("200")
    );
    // That one's place comes back too, once the server has let the connection go (its
    // answer may reach the client a moment before).
    places_reach(2).await;
    // By now the server has done whatever it would with what the refused connections sent:
    // none of their `initialize`s made a session.
    assert_eq!(server.shared().live_sessions(), 0);
    assert_eq!(metrics.requests.get(), 0);
}
