//! Throughput workload: C sessions, each keeping P `tools/call` echo requests
//! in flight (closed loop), warm-up, measured window, bounded drain.
//!
//! Per connection there is a writer (this task) and a reader (a spawned
//! task). Splitting them means a large pipeline of large payloads can never
//! deadlock with both sides blocked writing. The writer tells the reader the
//! send time of every id through an unbounded channel *before* the frame is
//! queued, and the reader hands back one credit per answer. Nothing is shared
//! between connections until the end, so the client adds no contention.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use hdrhistogram::Histogram;
use tokio::sync::{mpsc, Semaphore};
use tokio::time::{sleep_until, Instant};
use tokio_tungstenite::tungstenite::Message;

use crate::cli::Workload;
use crate::client::{self, Endpoint, Era, Frame, Outcome, ReplyStyle, Ws};
use crate::targets::Placement;

/// After the measured window, how long outstanding requests may still be
/// answered before they count as lost.
pub const DRAIN: Duration = Duration::from_secs(2);
/// Extra time allowed for connection tasks to wind down after the drain.
const JOIN_GRACE: Duration = Duration::from_secs(3);
/// Most frames the writer queues before one flush.
const MAX_FRAMES_PER_FLUSH: usize = 64;
/// Histogram range: 1 µs .. 60 s at 3 significant digits.
const HISTOGRAM_MAX_US: u64 = 60_000_000;

pub fn latency_histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts.
    Histogram::new_with_bounds(1, HISTOGRAM_MAX_US, 3).expect("valid histogram bounds")
}

/// The shared timeline of one run.
#[derive(Debug, Clone, Copy)]
pub struct Timeline {
    pub warmup_end: Instant,
    pub measure_end: Instant,
    pub drain_end: Instant,
}

impl Timeline {
    pub fn in_window(&self, at: Instant) -> bool {
        at >= self.warmup_end && at < self.measure_end
    }
}

/// Counts of one connection (and, merged, of one run).
#[derive(Debug)]
pub struct Tally {
    /// Latency of successful answers received inside the measured window.
    pub latency_us: Histogram<u64>,
    /// Successful answers inside the window (the throughput numerator).
    pub completed_in_window: u64,
    pub sent: u64,
    pub answered: u64,
    /// JSON-RPC error responses (or tool results with `isError`).
    pub errors: u64,
    /// Sent, never answered by the end of the drain.
    pub lost: u64,
    /// Unknown or duplicate id, unparseable frame, or wrong echoed text.
    pub mismatched: u64,
    /// Notifications / server requests (not answers).
    pub unsolicited: u64,
    /// First transport failure of a connection, if any.
    pub transport_errors: Vec<String>,
}

impl Tally {
    pub fn new() -> Self {
        Self {
            latency_us: latency_histogram(),
            completed_in_window: 0,
            sent: 0,
            answered: 0,
            errors: 0,
            lost: 0,
            mismatched: 0,
            unsolicited: 0,
            transport_errors: Vec::new(),
        }
    }

    pub fn merge(&mut self, other: Tally) {
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.latency_us.add(&other.latency_us);
        self.completed_in_window += other.completed_in_window;
        self.sent += other.sent;
        self.answered += other.answered;
        self.errors += other.errors;
        self.lost += other.lost;
        self.mismatched += other.mismatched;
        self.unsolicited += other.unsolicited;
        if self.transport_errors.len() < 5 {
            self.transport_errors.extend(other.transport_errors);
        }
    }
}

/// Everything measured for one (target, connection count).
#[derive(Debug)]
pub struct PointResult {
    pub connections: usize,
    pub connected: usize,
    pub connect_failures: usize,
    pub connect_failure_samples: Vec<String>,
    /// Connects failed with EMFILE/ENFILE: the run was limited by `ulimit -n`.
    pub fd_exhausted: bool,
    pub window: Duration,
    pub tally: Tally,
    /// CPU cores used during the window (None when not readable).
    pub server_cpu_cores: Option<f64>,
    pub client_cpu_cores: Option<f64>,
}

impl PointResult {
    pub fn requests_per_sec(&self) -> f64 {
        self.tally.completed_in_window as f64 / self.window.as_secs_f64()
    }
}

pub struct CpuSample {
    pub server: Option<u64>,
    pub client: Option<u64>,
}

pub fn sample_cpu(placement: &Placement) -> CpuSample {
    CpuSample {
        server: placement.server_cpu_ticks(),
        client: placement.client_cpu_ticks(),
    }
}

pub fn cores_used(
    before: Option<u64>,
    after: Option<u64>,
    window: Duration,
    ticks_per_sec: u64,
) -> Option<f64> {
    let ticks = after?.checked_sub(before?)?;
    Some(ticks as f64 / ticks_per_sec as f64 / window.as_secs_f64())
}

/// Runs one point of the sweep against `endpoint`.
pub async fn run_point(
    endpoint: &Endpoint,
    placement: &Placement,
    connections: usize,
    workload: &Workload,
    ticks_per_sec: u64,
) -> PointResult {
    let read_buffer = client::read_buffer_for(workload.pipeline, workload.payload);
    let opened =
        client::open_sessions(endpoint, connections, workload.connect_burst, read_buffer).await;
    let payload: Arc<str> = client::payload_text(workload.payload).into();
    let connected = opened.sessions.len();
    if connected == 0 {
        // Nothing to measure; do not sit through an empty timeline.
        return PointResult {
            connections,
            connected,
            connect_failures: opened.failures,
            connect_failure_samples: opened.failure_samples,
            fd_exhausted: opened.fd_exhausted,
            window: workload.duration,
            tally: Tally::new(),
            server_cpu_cores: None,
            client_cpu_cores: None,
        };
    }

    let start = Instant::now();
    let timeline = Timeline {
        warmup_end: start + workload.warmup,
        measure_end: start + workload.warmup + workload.duration,
        drain_end: start + workload.warmup + workload.duration + DRAIN,
    };
    let mut drivers = tokio::task::JoinSet::new();
    for (index, ws) in opened.sessions.into_iter().enumerate() {
        drivers.spawn(drive_connection(
            ws,
            endpoint.reply_style,
            endpoint.era,
            endpoint.idempotency_run.map(|run| (run, index)),
            workload.pipeline,
            Arc::clone(&payload),
            timeline,
        ));
    }

    sleep_until(timeline.warmup_end).await;
    let cpu_before = sample_cpu(placement);
    sleep_until(timeline.measure_end).await;
    let cpu_after = sample_cpu(placement);

    let mut tally = Tally::new();
    let join_deadline = timeline.drain_end + JOIN_GRACE;
    while let Ok(Some(joined)) = tokio::time::timeout_at(join_deadline, drivers.join_next()).await {
        match joined {
            Ok(connection) => tally.merge(connection),
            Err(e) => tally.transport_errors.push(format!("connection task: {e}")),
        }
    }
    if !drivers.is_empty() {
        tally.transport_errors.push(format!(
            "{} connection tasks did not finish in time; aborted",
            drivers.len()
        ));
        drivers.abort_all();
    }

    let window = timeline.measure_end - timeline.warmup_end;
    PointResult {
        connections,
        connected,
        connect_failures: opened.failures,
        connect_failure_samples: opened.failure_samples,
        fd_exhausted: opened.fd_exhausted,
        window,
        tally,
        server_cpu_cores: cores_used(cpu_before.server, cpu_after.server, window, ticks_per_sec),
        client_cpu_cores: cores_used(cpu_before.client, cpu_after.client, window, ticks_per_sec),
    }
}

/// One connection from first request to close.
async fn drive_connection(
    ws: Ws,
    style: ReplyStyle,
    era: Era,
    key: Option<(u64, usize)>,
    pipeline: usize,
    payload: Arc<str>,
    timeline: Timeline,
) -> Tally {
    let (mut sink, stream) = ws.split();
    let credits = Arc::new(Semaphore::new(pipeline));
    let (sent_tx, sent_rx) = mpsc::unbounded_channel();
    let reader = tokio::spawn(read_answers(
        stream,
        sent_rx,
        Arc::clone(&credits),
        style,
        Arc::clone(&payload),
        pipeline,
        timeline,
    ));
    let written = write_requests(&mut sink, sent_tx, &credits, &payload, era, key, timeline).await;
    let mut tally = match reader.await {
        Ok(tally) => tally,
        Err(e) => {
            let mut tally = Tally::new();
            tally.transport_errors.push(format!("reader task: {e}"));
            tally
        }
    };
    match written {
        Ok(sent) => tally.sent = sent,
        Err((sent, e)) => {
            tally.sent = sent;
            tally.transport_errors.push(e);
        }
    }
    // Polite close so the server sees a normal end of session.
    let _ = tokio::time::timeout(Duration::from_millis(500), sink.close()).await;
    tally
}

/// Sends requests whenever a credit is free, until the window closes.
/// Returns how many were sent (and the error, if writing failed).
async fn write_requests(
    sink: &mut SplitSink<Ws, Message>,
    sent_tx: mpsc::UnboundedSender<(u64, Instant)>,
    credits: &Semaphore,
    payload: &str,
    era: Era,
    key: Option<(u64, usize)>,
    timeline: Timeline,
) -> Result<u64, (u64, String)> {
    let stop = sleep_until(timeline.measure_end);
    tokio::pin!(stop);
    // Id 0 was the initialize request.
    let mut next_id: u64 = 1;
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => break,
            permit = credits.acquire() => match permit {
                Ok(permit) => permit.forget(),
                // Closed by the reader: the connection is gone.
                Err(_) => break,
            },
        }
        // One credit is ours; take the others already available so a burst
        // of answers turns into one flush, as a pipelining client would.
        let mut batch = 1;
        while batch < MAX_FRAMES_PER_FLUSH {
            match credits.try_acquire() {
                Ok(permit) => {
                    permit.forget();
                    batch += 1;
                }
                Err(_) => break,
            }
        }
        for _ in 0..batch {
            let id = next_id;
            next_id += 1;
            // Register before queueing, so the answer can never overtake it.
            if sent_tx.send((id, Instant::now())).is_err() {
                return Ok(id - 1);
            }
            let frame = Message::text(client::tools_call_request(id, payload, era, key));
            if let Err(e) = sink.feed(frame).await {
                return Err((id, format!("send: {e}")));
            }
        }
        if let Err(e) = sink.flush().await {
            return Err((next_id - 1, format!("flush: {e}")));
        }
    }
    Ok(next_id - 1)
}

/// Matches answers to requests until every sent request is answered after
/// the writer stopped, or the drain deadline passes.
async fn read_answers(
    mut stream: SplitStream<Ws>,
    mut sent_rx: mpsc::UnboundedReceiver<(u64, Instant)>,
    credits: Arc<Semaphore>,
    style: ReplyStyle,
    payload: Arc<str>,
    pipeline: usize,
    timeline: Timeline,
) -> Tally {
    let mut tally = Tally::new();
    let mut in_flight: HashMap<u64, Instant> = HashMap::with_capacity(pipeline * 2);
    let mut writer_done = false;
    let drain_deadline = sleep_until(timeline.drain_end);
    tokio::pin!(drain_deadline);
    loop {
        if writer_done && in_flight.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            _ = &mut drain_deadline => break,
            sent = sent_rx.recv(), if !writer_done => match sent {
                Some((id, at)) => { in_flight.insert(id, at); }
                None => writer_done = true,
            },
            frame = stream.next() => {
                let received_at = Instant::now();
                let text = match frame {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Binary(_))) => {
                        tally.mismatched += 1;
                        continue;
                    }
                    Some(Ok(Message::Close(close))) => {
                        tally.transport_errors.push(format!("server closed: {close:?}"));
                        break;
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => {
                        tally.transport_errors.push(format!("receive: {e}"));
                        break;
                    }
                    None => {
                        tally.transport_errors.push("server closed the TCP connection".into());
                        break;
                    }
                };
                // The send record may still be in the channel.
                while let Ok((id, at)) = sent_rx.try_recv() {
                    in_flight.insert(id, at);
                }
                account(&mut tally, &mut in_flight, &credits, text.as_str(), style, &payload, received_at, &timeline);
            }
        }
    }
    // Whatever is still registered was never answered.
    credits.close();
    while let Ok((id, at)) = sent_rx.try_recv() {
        in_flight.insert(id, at);
    }
    tally.lost = in_flight.len() as u64;
    tally
}

#[allow(clippy::too_many_arguments)] // the reader's state, passed explicitly
fn account(
    tally: &mut Tally,
    in_flight: &mut HashMap<u64, Instant>,
    credits: &Semaphore,
    text: &str,
    style: ReplyStyle,
    payload: &str,
    received_at: Instant,
    timeline: &Timeline,
) {
    match client::classify(text, style) {
        Frame::Reply { id, outcome } => {
            let Some(sent_at) = in_flight.remove(&id) else {
                // Unknown or already answered id.
                tally.mismatched += 1;
                return;
            };
            tally.answered += 1;
            credits.add_permits(1);
            match outcome {
                Outcome::Error => tally.errors += 1,
                Outcome::Ok { echoed } if echoed.as_deref() != Some(payload) => {
                    tally.mismatched += 1;
                }
                Outcome::Ok { .. } => {
                    if timeline.in_window(received_at) {
                        let micros = (received_at - sent_at).as_micros();
                        tally
                            .latency_us
                            .saturating_record(u64::try_from(micros).unwrap_or(u64::MAX).max(1));
                        tally.completed_in_window += 1;
                    }
                }
            }
        }
        Frame::ErrorWithoutId => tally.errors += 1,
        Frame::Unsolicited => tally.unsolicited += 1,
        Frame::Malformed => tally.mismatched += 1,
    }
}
