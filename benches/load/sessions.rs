//! Sessions workload: open N initialized sessions in bounded bursts, measure
//! the server's RSS growth per session, then hold them for T seconds while K
//! of them ping (one in flight each, on a fixed interval) and the rest stay
//! idle but keep reading, so server-side WebSocket pings are answered and a
//! session the server drops is noticed.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use tokio::task::JoinSet;
use tokio::time::{sleep_until, timeout_at, Instant, MissedTickBehavior};
use tokio_tungstenite::tungstenite::Message;

use crate::cli::Workload;
use crate::client::{self, Endpoint, Frame, Outcome, Ws};
use crate::targets::Placement;
use crate::throughput::latency_histogram;

/// Pause after the last handshake before reading RSS, so the server has
/// finished the allocations the handshakes triggered.
const SETTLE: Duration = Duration::from_millis(500);
/// Longest wait for one ping answer.
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// Extra time for hold tasks to return after the hold ends.
const JOIN_GRACE: Duration = Duration::from_secs(3);

#[derive(Debug)]
pub struct SessionsResult {
    pub requested: usize,
    pub opened: usize,
    pub connect_failures: usize,
    pub connect_failure_samples: Vec<String>,
    pub fd_exhausted: bool,
    pub open_elapsed: Duration,
    pub rss_before_kib: Option<u64>,
    pub rss_after_open_kib: Option<u64>,
    pub rss_end_of_hold_kib: Option<u64>,
    /// Idle sessions the server closed during the hold.
    pub dropped_during_hold: usize,
    pub pings_ok: u64,
    pub ping_errors: u64,
    pub ping_timeouts: u64,
    pub ping_mismatched: u64,
    pub ping_latency_us: Histogram<u64>,
}

impl SessionsResult {
    /// (RSS after − RSS before) / opened sessions.
    pub fn bytes_per_session(&self) -> Option<f64> {
        let grown_kib = self
            .rss_after_open_kib?
            .saturating_sub(self.rss_before_kib?);
        (self.opened > 0).then(|| grown_kib as f64 * 1024.0 / self.opened as f64)
    }
}

pub async fn run(
    endpoint: &Endpoint,
    placement: &Placement,
    workload: &Workload,
) -> SessionsResult {
    let rss_before_kib = placement.rss_kib();
    // Idle sessions and single pings: the smallest buffer keeps the client's
    // share of an in-process RSS figure small.
    let read_buffer = client::read_buffer_for(1, 0);
    let opened = client::open_sessions(
        endpoint,
        workload.sessions,
        workload.connect_burst,
        read_buffer,
    )
    .await;
    tokio::time::sleep(SETTLE).await;
    let rss_after_open_kib = placement.rss_kib();

    let mut result = SessionsResult {
        requested: workload.sessions,
        opened: opened.sessions.len(),
        connect_failures: opened.failures,
        connect_failure_samples: opened.failure_samples,
        fd_exhausted: opened.fd_exhausted,
        open_elapsed: opened.elapsed,
        rss_before_kib,
        rss_after_open_kib,
        rss_end_of_hold_kib: None,
        dropped_during_hold: 0,
        pings_ok: 0,
        ping_errors: 0,
        ping_timeouts: 0,
        ping_mismatched: 0,
        ping_latency_us: latency_histogram(),
    };

    let hold_end = Instant::now() + workload.hold;
    let mut holders = JoinSet::new();
    let mut sessions = opened.sessions;
    let pingers = workload.pingers.min(sessions.len());
    for (index, ws) in sessions.drain(..).enumerate() {
        if index < pingers {
            holders.spawn(ping_loop(
                ws,
                endpoint.clone(),
                workload.ping_interval,
                hold_end,
            ));
        } else {
            holders.spawn(hold_idle(ws, hold_end));
        }
    }

    sleep_until(hold_end).await;
    result.rss_end_of_hold_kib = placement.rss_kib();

    let mut still_open = Vec::new();
    while let Ok(Some(joined)) = timeout_at(hold_end + JOIN_GRACE, holders.join_next()).await {
        let Ok(held) = joined else { continue };
        match held.ws {
            Some(ws) => still_open.push(ws),
            None => result.dropped_during_hold += 1,
        }
        if let Some(pings) = held.pings {
            let _ = result.ping_latency_us.add(&pings.latency_us);
            result.pings_ok += pings.ok;
            result.ping_errors += pings.errors;
            result.ping_timeouts += pings.timeouts;
            result.ping_mismatched += pings.mismatched;
        }
    }
    holders.abort_all();
    client::close_all(still_open).await;
    result
}

struct PingTally {
    latency_us: Histogram<u64>,
    ok: u64,
    errors: u64,
    timeouts: u64,
    mismatched: u64,
}

/// A held session: the socket if it is still open, and its ping counts.
struct Held {
    ws: Option<Ws>,
    pings: Option<PingTally>,
}

/// Keeps reading (tungstenite answers pings while reading) until the hold
/// ends. Any data frame on an idle session is unexpected but harmless.
async fn hold_idle(mut ws: Ws, hold_end: Instant) -> Held {
    loop {
        match timeout_at(hold_end, ws.next()).await {
            Err(_) => {
                return Held {
                    ws: Some(ws),
                    pings: None,
                }
            }
            Ok(Some(Ok(Message::Close(_)))) | Ok(Some(Err(_))) | Ok(None) => {
                return Held {
                    ws: None,
                    pings: None,
                }
            }
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// One ping in flight, about every `interval`, until the hold ends.
async fn ping_loop(mut ws: Ws, endpoint: Endpoint, interval: Duration, hold_end: Instant) -> Held {
    let mut tally = PingTally {
        latency_us: latency_histogram(),
        ok: 0,
        errors: 0,
        timeouts: 0,
        mismatched: 0,
    };
    let mut ticker = tokio::time::interval(interval.max(Duration::from_millis(1)));
    // A slow answer delays the next ping instead of causing a burst.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut next_id: u64 = 1;
    loop {
        if timeout_at(hold_end, ticker.tick()).await.is_err() {
            break;
        }
        let id = next_id;
        next_id += 1;
        let sent_at = Instant::now();
        if ws
            .send(Message::text(client::ping_request(id)))
            .await
            .is_err()
        {
            return Held {
                ws: None,
                pings: Some(tally),
            };
        }
        match await_answer(&mut ws, &endpoint, id, sent_at + PING_TIMEOUT, &mut tally).await {
            Answer::Ok => {
                let micros = u64::try_from(sent_at.elapsed().as_micros()).unwrap_or(u64::MAX);
                tally.latency_us.saturating_record(micros.max(1));
                tally.ok += 1;
            }
            Answer::Error => tally.errors += 1,
            Answer::TimedOut => tally.timeouts += 1,
            Answer::Closed => {
                return Held {
                    ws: None,
                    pings: Some(tally),
                }
            }
        }
    }
    Held {
        ws: Some(ws),
        pings: Some(tally),
    }
}

enum Answer {
    Ok,
    Error,
    TimedOut,
    Closed,
}

/// Reads until the answer to `id` arrives. A late answer to an earlier,
/// timed-out ping is skipped (it was already counted as a timeout).
async fn await_answer(
    ws: &mut Ws,
    endpoint: &Endpoint,
    id: u64,
    deadline: Instant,
    tally: &mut PingTally,
) -> Answer {
    loop {
        let frame = match timeout_at(deadline, ws.next()).await {
            Err(_) => return Answer::TimedOut,
            Ok(Some(Ok(Message::Text(text)))) => text,
            Ok(Some(Ok(Message::Close(_)))) | Ok(Some(Err(_))) | Ok(None) => return Answer::Closed,
            Ok(Some(Ok(_))) => continue,
        };
        match client::classify(frame.as_str(), endpoint.reply_style) {
            Frame::Reply {
                id: answered,
                outcome,
            } if answered == id => {
                return match outcome {
                    Outcome::Ok { .. } => Answer::Ok,
                    Outcome::Error => Answer::Error,
                }
            }
            Frame::Reply { id: answered, .. } if answered < id => continue,
            Frame::Reply { .. } | Frame::Malformed => tally.mismatched += 1,
            Frame::ErrorWithoutId => return Answer::Error,
            Frame::Unsolicited => continue,
        }
    }
}
