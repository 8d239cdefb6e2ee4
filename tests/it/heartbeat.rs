//! Heartbeat: the server pings every client each `heartbeat.interval_ms` and disconnects a
//! client it has heard nothing from (no frame, no pong) for `heartbeat.client_timeout_ms`:
//!
//! - A client that neither sends nor reads (so its WebSocket library never answers the
//!   pings) is closed with 1001 "heartbeat timeout" and its session is gone.
//! - A client that keeps reading (tokio-tungstenite answers each ping with a pong) but sends
//!   no request stays connected well past the timeout, and can still `ping`.
//! - Any frame from the client counts too: a client that sends notifications but never
//!   reads (never pongs) stays connected.
//! - Connections opened together are not pinged together: each one's first ping comes at a
//!   random point of the interval's second half.
//!
//! Short settings (ping every 100 ms, timeout 1.5 s) keep these fast, with room for a test
//! task that a loaded machine stalls for a few hundred milliseconds.

use crate::support::http::{metric, wait_metric};
use crate::support::ws::assert_server_alive;
use crate::support::*;

use futures_util::StreamExt;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

const INTERVAL_MS: u64 = 100;
const TIMEOUT_MS: u64 = 1500;

fn heartbeat_settings() -> mcp_ws::Settings {
    let mut s = settings();
    s.heartbeat.interval_ms = INTERVAL_MS;
    s.heartbeat.client_timeout_ms = TIMEOUT_MS;
    // A dropped socket's session waits this long for a reconnect before it ends.
    s.sessions.resume_grace_ms = 300;
    s
}

/// Well past the timeout: the quiet period that is the stimulus of these tests.
fn well_past_timeout() -> Duration {
    Duration::from_millis(3 * TIMEOUT_MS)
}

#[tokio::test]
async fn silent_client_that_never_pongs_is_closed_with_1001() {
    let server = start(heartbeat_settings());
    let mut client = Client::initialized(&server).await;
    wait_metric(&server, "mcp_sessions", 1).await;

    // The client now neither sends nor reads, so the server's pings go unanswered. Wait
    // (over separate HTTP connections) for the server to drop the socket: the session is
    // kept for a reconnect first, then ends when none comes within the grace.
    wait_metric(&server, "mcp_parked_sessions_peak", 1).await;
    wait_metric(&server, "mcp_sessions", 0).await;
    assert_eq!(metric(&server, "mcp_parked_sessions").await, 0);

    // What the client then reads: unanswered pings, then the server's close frame.
    let close = loop {
        let next = tokio::time::timeout(READ_TIMEOUT, client.ws.next())
            .await
            .expect("the close frame is waiting to be read");
        match next {
            Some(Ok(Message::Ping(_))) => continue,
            Some(Ok(Message::Close(frame))) => break frame,
            other => panic!("expected pings then a close frame, got {other:?}"),
        }
    };
    let close = close.expect("the close frame carries a code");
    assert_eq!(u16::from(close.code), 1001, "{close:?}");
    assert_eq!(close.reason.as_str(), "heartbeat timeout", "{close:?}");
    assert_server_alive(&server).await;
}

#[tokio::test]
async fn reading_client_answers_pings_and_stays_connected() {
    let server = start(heartbeat_settings());
    let mut client = Client::initialized(&server).await;

    // Read without sending any request; every ping read is answered with a pong by
    // tokio-tungstenite. Keep going well past the timeout and over many ping intervals.
    let quiet_since = Instant::now();
    let min_pings = 2 * TIMEOUT_MS / INTERVAL_MS;
    let mut pings = 0;
    while quiet_since.elapsed() < well_past_timeout() || pings < min_pings {
        match client.next_frame().await {
            Message::Ping(_) => pings += 1,
            other => panic!("only pings while the client is idle, got {other:?}"),
        }
    }

    let response = client.request("ping", json!({})).await;
    assert_eq!(response["result"], json!({}), "{response}");
    assert_eq!(metric(&server, "mcp_sessions").await, 1);
}

#[tokio::test]
async fn client_that_sends_frames_without_ponging_stays_connected() {
    let server = start(heartbeat_settings());
    let mut client = Client::initialized(&server).await;

    // Never read (so never pong) for a while, but send a notification every ping interval:
    // any frame counts as hearing from the client.
    let quiet_since = Instant::now();
    while quiet_since.elapsed() < well_past_timeout() {
        client
            .send_json(json!({"jsonrpc":"2.0","method":"notifications/roots/list_changed"}))
            .await;
        tokio::time::sleep(Duration::from_millis(INTERVAL_MS)).await;
    }
    assert_eq!(metric(&server, "mcp_sessions").await, 1);

    // Only pings were queued for it, and it can still make requests.
    let response = client.request("ping", json!({})).await;
    assert_eq!(response["result"], json!({}), "{response}");
    assert!(
        client.backlog.is_empty(),
        "notifications are not answered: {:?}",
        client.backlog
    );
}

#[tokio::test]
async fn connections_opened_together_are_first_pinged_at_spread_times() {
    const CONNECTIONS: usize = 16;
    const SPREAD_INTERVAL_MS: u64 = 2_000;
    let mut settings = heartbeat_settings();
    settings.heartbeat.interval_ms = SPREAD_INTERVAL_MS;
    settings.heartbeat.client_timeout_ms = 10 * SPREAD_INTERVAL_MS;
    let server = start(settings);

    // Each connection's first ping, measured from its own open (its actor starts before the
    // upgrade's answer reaches the client, so an offset reads a little short).
    let mut waits = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut client = Client::connect(&server).await;
        let opened = Instant::now();
        waits.push(tokio::spawn(async move {
            while !matches!(client.next_frame().await, Message::Ping(_)) {}
            opened.elapsed()
        }));
    }
    let mut offsets_ms = Vec::new();
    for wait in waits {
        offsets_ms.push(wait.await.expect("the reader ran").as_millis() as u64);
    }
    offsets_ms.sort_unstable();
    let (first, last) = (offsets_ms[0], offsets_ms[CONNECTIONS - 1]);

    // Not before the interval's half (a little early for the offset's reading, see above).
    assert!(
        first + 100 >= SPREAD_INTERVAL_MS / 2,
        "a first ping before half the interval: {offsets_ms:?}"
    );
    // Spread over the second half: 16 uniform draws over 1000 ms all within 250 ms of each
    // other has a chance of about 10^-8. Pinged together (every first ping one interval
    // after the open) they would lie within a few milliseconds.
    assert!(
        last - first >= SPREAD_INTERVAL_MS / 8,
        "first pings bunched together: {offsets_ms:?}"
    );
}
