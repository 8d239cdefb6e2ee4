//! Command line of the load generator: every knob, its default, and the
//! validation that keeps each run bounded in time and size.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

use crate::BoxError;

/// Longest accepted duration for any phase, so that a typo cannot make a run
/// (or a CI job) hang for days.
const MAX_PHASE_SECS: f64 = 3600.0;
/// Upper bound on concurrent connections / sessions per target.
const MAX_CONNECTIONS: usize = 100_000;
/// Upper bound on the echoed payload. raw-echo and jsonrpsee accept 16 MiB messages;
/// mcp-ws (by default, `limits.max_message_bytes`) and actix-inline 4 MiB.
const MAX_PAYLOAD_BYTES: usize = 8 * 1024 * 1024;

/// Load generator for mcp-ws and three baselines (raw WebSocket echo, an
/// actix session answering inline, jsonrpsee). See benches/README.md for the recommended pinned runs.
#[derive(Parser, Debug, Clone)]
#[command(name = "load", version, about, long_about = None)]
pub struct Args {
    /// What to measure.
    #[arg(value_enum, default_value_t = Mode::Throughput)]
    pub mode: Mode,

    /// Servers to measure, one after another, with the same workload.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "mcp-ws,raw-echo,actix-inline,actix-naive,jsonrpsee"
    )]
    pub targets: Vec<TargetKind>,

    /// External mcp-ws endpoint (e.g. ws://127.0.0.1:8765/mcp). Without it
    /// mcp-ws is started in-process.
    #[arg(long)]
    pub url: Option<String>,
    /// Pid of the external mcp-ws server, to read its RSS and CPU time.
    #[arg(long)]
    pub server_pid: Option<u32>,

    /// External raw-echo baseline (started with `--serve-baseline raw-echo`).
    #[arg(long)]
    pub raw_echo_url: Option<String>,
    /// Pid of the external raw-echo baseline.
    #[arg(long)]
    pub raw_echo_pid: Option<u32>,
    /// External actix-inline baseline (started with `--serve-baseline actix-inline`).
    #[arg(long)]
    pub actix_inline_url: Option<String>,
    /// Pid of the external actix-inline baseline.
    #[arg(long)]
    pub actix_inline_pid: Option<u32>,
    /// External actix-naive baseline (started with `--serve-baseline actix-naive`).
    #[arg(long)]
    pub actix_naive_url: Option<String>,
    /// Pid of the external actix-naive baseline.
    #[arg(long)]
    pub actix_naive_pid: Option<u32>,
    /// External jsonrpsee baseline (started with `--serve-baseline jsonrpsee`).
    #[arg(long)]
    pub jsonrpsee_url: Option<String>,
    /// Pid of the external jsonrpsee baseline.
    #[arg(long)]
    pub jsonrpsee_pid: Option<u32>,

    /// Throughput: connection counts to sweep, e.g. `1,16,64`.
    #[arg(long, value_delimiter = ',', default_value = "16")]
    pub connections: Vec<usize>,
    /// Throughput: requests kept in flight per connection.
    #[arg(long, default_value_t = 16)]
    pub pipeline: usize,
    /// Throughput: bytes of text echoed by each `tools/call`.
    #[arg(long, default_value_t = 64)]
    pub payload: usize,
    /// Throughput: measured seconds per (target, connection count).
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Throughput: unrecorded seconds of load before the measurement.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,

    /// Throughput: protocol revision of mcp-ws's requests. `2026-07-28`: no
    /// `initialize`, each request carries `_meta` (the baselines ignore this).
    #[arg(long, value_enum, default_value_t = EraArg::Session)]
    pub era: EraArg,
    /// Throughput: every mcp-ws `tools/call` carries a fresh `_meta.idempotencyKey`, so
    /// each one is stored for de-duplication (in memory, or in Redis when the server is
    /// configured with it). The baselines ignore it.
    #[arg(long)]
    pub idempotency_keys: bool,

    /// Http: a Streamable HTTP target, `LABEL,DIALECT,URL[,PID]`, repeatable;
    /// measured one after another in the order given. DIALECT: `session`
    /// (initialize, then `Mcp-Session-Id`), `stateless` (2025-11-25 requests
    /// without a session), `modern` (2026-07-28 requests with their headers),
    /// `churn` (whole sessions: initialize, initialized, DELETE). `URL1+URL2+…`:
    /// the session begun on the first, its requests sent to each in turn;
    /// `PID1+PID2+…`: the server CPU is their sum.
    #[arg(long = "http-target")]
    pub http_targets: Vec<String>,

    /// Fanout: control address of `--serve-fanout` (line protocol, loopback).
    #[arg(long, default_value = "127.0.0.1:8799")]
    pub control: SocketAddr,
    /// Fanout: registry changes to make, one after another.
    #[arg(long, default_value_t = 20)]
    pub changes: usize,
    /// Fanout: quiet time after every session got a change before the next
    /// one, in ms (a duplicate notification would arrive in it).
    #[arg(long, default_value_t = 300)]
    pub change_gap_ms: u64,

    /// Sessions: initialized sessions to open and hold.
    #[arg(long, default_value_t = 1000)]
    pub sessions: usize,
    /// Sessions: seconds to hold them open.
    #[arg(long, default_value_t = 10.0)]
    pub hold: f64,
    /// Sessions: how many of the held sessions send pings during the hold.
    #[arg(long, default_value_t = 4)]
    pub pingers: usize,
    /// Sessions: pause between two pings of one pinger, in milliseconds.
    #[arg(long, default_value_t = 10)]
    pub ping_interval_ms: u64,

    /// Connections opened concurrently in one burst (both modes).
    #[arg(long, default_value_t = 256)]
    pub connect_burst: usize,

    /// Worker threads of the client (load generating) tokio runtime.
    #[arg(long, default_value_t = 1)]
    pub client_threads: usize,
    /// CPU list (taskset syntax, e.g. `0`) for the threads of in-process
    /// servers. Unset: no pinning.
    #[arg(long)]
    pub server_cpus: Option<String>,
    /// CPU list (taskset syntax, e.g. `1`) for the client threads. Unset: no
    /// pinning (an outer `taskset` still applies).
    #[arg(long)]
    pub client_cpus: Option<String>,

    /// Directory for the JSON result and the SVG plot.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,

    /// Run ONLY this baseline server (no load), so that it can be pinned
    /// with taskset like the real server. Prints its pid and address.
    #[arg(long, value_enum)]
    pub serve_baseline: Option<BaselineKind>,
    /// Listen address for `--serve-baseline` (loopback only).
    #[arg(long, default_value = "127.0.0.1:8766")]
    pub listen: SocketAddr,
    /// Stop `--serve-baseline` after this many seconds (it always stops).
    #[arg(long, default_value_t = 3600.0)]
    pub serve_for: f64,

    /// Run ONLY an mcp-ws (library API, demo set, room for 20 000 sessions) whose
    /// registry `--control` changes on request: the server side of `fanout`.
    #[arg(long)]
    pub serve_fanout: bool,

    /// Passed by `cargo bench`; accepted and ignored.
    #[arg(long, hide = true)]
    pub bench: bool,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Pipelined `tools/call` echo requests on C connections.
    Throughput,
    /// Many idle initialized sessions; memory and ping latency.
    Sessions,
    /// `tools/call` echo over Streamable HTTP (keep-alive, one request in
    /// flight per connection) against `--http-target`s.
    Http,
    /// `notifications/tools/list_changed` fan-out to `--sessions` sessions of
    /// a `--serve-fanout` server, over `--changes` registry changes.
    Fanout,
}

/// `--era`: the revision mcp-ws's requests are written in.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum EraArg {
    /// Handshake era: `initialize`, then requests on the session.
    #[value(name = "2025-11-25")]
    Session,
    /// Stateless: `_meta` on every request, no `initialize`.
    #[value(name = "2026-07-28")]
    Stateless,
    /// Handshake era, every request padded with a `_meta` as long as a 2026-07-28
    /// one's that no server knows: the cost of the bigger frame alone.
    #[value(name = "2025-11-25-padded")]
    PaddedSession,
}

impl EraArg {
    pub fn era(self) -> crate::client::Era {
        match self {
            EraArg::Session => crate::client::Era::Session,
            EraArg::Stateless => crate::client::Era::Stateless,
            EraArg::PaddedSession => crate::client::Era::PaddedSession,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            EraArg::Session => "2025-11-25",
            EraArg::Stateless => "2026-07-28",
            EraArg::PaddedSession => "2025-11-25-padded",
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetKind {
    /// The real server.
    #[value(name = "mcp-ws")]
    McpWs,
    /// tokio-tungstenite echo of each text frame: the framing ceiling.
    #[value(name = "raw-echo")]
    RawEcho,
    /// actix-web-actors session answering `tools/call` inline, no worker:
    /// the inline ceiling of mcp-ws's own stack.
    #[value(name = "actix-inline")]
    ActixInline,
    /// The same session answering through a `serde_json::Value` tree, as a
    /// JSON-RPC echo is commonly written (issue #20's naive echo).
    #[value(name = "actix-naive")]
    ActixNaive,
    /// jsonrpsee 0.26 WebSocket server with the same methods.
    #[value(name = "jsonrpsee")]
    Jsonrpsee,
}

impl TargetKind {
    pub fn name(self) -> &'static str {
        match self {
            TargetKind::McpWs => "mcp-ws",
            TargetKind::RawEcho => "raw-echo",
            TargetKind::ActixInline => "actix-inline",
            TargetKind::ActixNaive => "actix-naive",
            TargetKind::Jsonrpsee => "jsonrpsee",
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BaselineKind {
    #[value(name = "raw-echo")]
    RawEcho,
    #[value(name = "actix-inline")]
    ActixInline,
    #[value(name = "actix-naive")]
    ActixNaive,
    #[value(name = "jsonrpsee")]
    Jsonrpsee,
}

/// Workload parameters after validation, in the units the code uses.
#[derive(Debug, Clone)]
pub struct Workload {
    pub connections: Vec<usize>,
    pub pipeline: usize,
    pub payload: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub sessions: usize,
    pub hold: Duration,
    pub pingers: usize,
    pub ping_interval: Duration,
    pub connect_burst: usize,
}

fn phase(name: &str, secs: f64, allow_zero: bool) -> Result<Duration, BoxError> {
    let ok =
        secs.is_finite() && secs <= MAX_PHASE_SECS && (secs > 0.0 || (allow_zero && secs == 0.0));
    if !ok {
        return Err(format!(
            "--{name} must be {} and at most {MAX_PHASE_SECS} s, got {secs}",
            if allow_zero { ">= 0" } else { "> 0" }
        )
        .into());
    }
    Ok(Duration::from_secs_f64(secs))
}

impl Args {
    /// Checks every bound and converts to [`Workload`].
    pub fn workload(&self) -> Result<Workload, BoxError> {
        if self.connections.is_empty()
            || self
                .connections
                .iter()
                .any(|&c| c == 0 || c > MAX_CONNECTIONS)
        {
            return Err(format!("--connections entries must be in 1..={MAX_CONNECTIONS}").into());
        }
        if self.pipeline == 0 || self.pipeline > 65_536 {
            return Err("--pipeline must be in 1..=65536".into());
        }
        if self.payload > MAX_PAYLOAD_BYTES {
            return Err(format!("--payload must be at most {MAX_PAYLOAD_BYTES} bytes").into());
        }
        if self.sessions == 0 || self.sessions > MAX_CONNECTIONS {
            return Err(format!("--sessions must be in 1..={MAX_CONNECTIONS}").into());
        }
        if self.pingers > self.sessions {
            return Err("--pingers cannot exceed --sessions".into());
        }
        if self.ping_interval_ms > 60_000 {
            return Err("--ping-interval-ms must be at most 60000".into());
        }
        if self.connect_burst == 0 || self.connect_burst > 10_000 {
            return Err("--connect-burst must be in 1..=10000".into());
        }
        if self.client_threads == 0 || self.client_threads > 256 {
            return Err("--client-threads must be in 1..=256".into());
        }
        if self.era == EraArg::Stateless && self.mode == Mode::Sessions {
            return Err("--era 2026-07-28 has no sessions (and no ping) to hold".into());
        }
        if self.mode == Mode::Http && self.http_targets.is_empty() {
            return Err("http mode needs at least one --http-target".into());
        }
        if self.changes == 0 || self.changes > 10_000 {
            return Err("--changes must be in 1..=10000".into());
        }
        if self.change_gap_ms > 60_000 {
            return Err("--change-gap-ms must be at most 60000".into());
        }
        if !self.control.ip().is_loopback() {
            return Err("--control must be a loopback address".into());
        }
        if self.targets.is_empty() {
            return Err("--targets must name at least one target".into());
        }
        Ok(Workload {
            connections: self.connections.clone(),
            pipeline: self.pipeline,
            payload: self.payload,
            duration: phase("duration", self.duration, false)?,
            warmup: phase("warmup", self.warmup, true)?,
            sessions: self.sessions,
            hold: phase("hold", self.hold, false)?,
            pingers: self.pingers,
            ping_interval: Duration::from_millis(self.ping_interval_ms),
            connect_burst: self.connect_burst,
        })
    }

    /// Bounded lifetime of `--serve-baseline`.
    pub fn serve_for(&self) -> Result<Duration, BoxError> {
        let secs = self.serve_for;
        if !(secs.is_finite() && secs > 0.0 && secs <= 7.0 * 24.0 * 3600.0) {
            return Err("--serve-for must be in (0, 604800] seconds".into());
        }
        Ok(Duration::from_secs_f64(secs))
    }

    /// True when the binary was started without `--bench` and without any
    /// argument, which is how `cargo test --benches` runs it.
    pub fn looks_like_cargo_test(raw_args: &[String]) -> bool {
        raw_args.len() <= 1
    }
}
