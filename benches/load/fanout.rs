//! `list_changed` fan-out (`load fanout` + `load --serve-fanout`): how long a
//! registry change takes to reach every one of N initialized WebSocket
//! sessions, and how long the writer's own registry call takes.
//!
//! Server side ([`serve`]): mcp-ws through the library API (demo set, room for
//! 20 000 sessions) plus a loopback control socket with a line protocol:
//! `change` adds the tool `fanout-probe` if absent, else removes it, timing
//! the registry call on the control thread (the writer, like an application
//! thread would be), and answers `changed <wall-clock ns before the call>
//! <writer ns>`; `stop` ends the server.
//!
//! Client side ([`run`]): N sessions opened and initialized, one reader task
//! each that stamps (wall clock) every `notifications/tools/list_changed`.
//! Changes are made one at a time: the next only after every session got the
//! current one (or a deadline passed) and a quiet gap, in which a duplicate
//! would show. Both processes read the same system wall clock, so
//! "arrival − before-call" is the fan-out latency across processes; it
//! includes the generator's own scheduling of N reader tasks on its core(s),
//! so it is an upper bound of the server's part.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use crate::cli::{Args, Workload};
use crate::client::{self, Endpoint, ReplyStyle, Ws};
use crate::targets::Placement;
use crate::throughput;
use crate::BoxError;

/// The tool the control socket adds and removes.
const PROBE_TOOL: &str = "fanout-probe";
const LIST_CHANGED: &str = "notifications/tools/list_changed";
/// Longest wait for every session to get one change.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(20);

fn unix_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArgs {}

async fn probe(_args: NoArgs, _ctx: mcp_ws::RequestContext) -> Result<String, mcp_ws::ToolError> {
    Ok("probe".into())
}

/// `--serve-fanout`: the server and its control socket, until `stop`, the
/// control socket's end of input, or `--serve-for`.
pub fn serve(args: &Args) -> Result<(), BoxError> {
    let _ = crate::sys::raise_fd_limit();
    let mut settings = mcp_ws::Settings::default();
    settings.server.listen = args.listen;
    settings.server.max_sessions = 20_000;
    // Every session comes from this one address.
    settings.server.max_sessions_per_ip = Some(0);
    settings.logging.filter = "warn".into();
    let server = crate::demo::demo(mcp_ws::Server::builder().settings(settings))
        .build()?
        .spawn()?;
    let registry = server.registry().clone();
    let control = TcpListener::bind(args.control)?;
    control.set_nonblocking(true)?;
    println!(
        "serving fanout on ws://{}/mcp control {} pid {}",
        server.addr(),
        control.local_addr()?,
        std::process::id()
    );
    std::io::stdout().flush()?;
    let deadline = std::time::Instant::now() + args.serve_for()?;
    let mut changes: u64 = 0;
    'accept: while std::time::Instant::now() < deadline {
        let stream = match control.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        stream.set_nonblocking(false)?;
        let mut writer = stream.try_clone()?;
        for line in BufReader::new(stream).lines() {
            match line?.trim() {
                "change" => {
                    // Built before the clock starts: only the registry call is the writer's.
                    let adding = changes.is_multiple_of(2);
                    let tool = adding.then(|| {
                        mcp_ws::Tool::new(
                            PROBE_TOOL,
                            "Added and removed by the fan-out bench",
                            probe,
                        )
                    });
                    let before = unix_nanos();
                    let started = std::time::Instant::now();
                    let changed = match tool {
                        Some(tool) => registry.add_tool(tool).is_ok(),
                        None => registry.remove_tool(PROBE_TOOL),
                    };
                    let writer_ns = started.elapsed().as_nanos();
                    if !changed {
                        writeln!(writer, "error the registry did not change")?;
                        continue;
                    }
                    changes += 1;
                    writeln!(writer, "changed {before} {writer_ns}")?;
                }
                "stop" => break 'accept,
                other => writeln!(writer, "error unknown command {other:?}")?,
            }
        }
    }
    println!("fanout server: {changes} changes made; stopping");
    server.stop();
    Ok(())
}

/// What one change measured.
struct Change {
    writer_ns: u64,
    /// Sessions that got it before the deadline.
    delivered: usize,
    /// Before the call → the last session's arrival.
    all_received_us: Option<u64>,
    /// Before the call → the median session's arrival.
    median_received_us: Option<u64>,
}

/// Reads one session until the run ends, reporting each `list_changed` with
/// its arrival time (and anything unexpected as such).
async fn watch(index: usize, mut ws: Ws, arrivals: mpsc::UnboundedSender<(usize, u128)>) {
    while let Some(frame) = ws.next().await {
        match frame {
            Ok(Message::Text(text)) => {
                let at = unix_nanos();
                // Only notifications are expected: the session sends nothing after the handshake.
                if text.contains(LIST_CHANGED) && arrivals.send((index, at)).is_err() {
                    return;
                }
            }
            Ok(Message::Close(_)) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// The client side: open the sessions, make `--changes` changes, report.
pub async fn run(args: &Args, workload: &Workload, ticks_per_sec: u64) -> Result<(), BoxError> {
    let url = args
        .url
        .as_deref()
        .ok_or("fanout needs --url of a --serve-fanout server")?;
    let endpoint = Endpoint::new(url, true, ReplyStyle::JsonRpc)?;
    let placement = Placement::External {
        pid: args.server_pid,
    };
    let sessions = workload.sessions;
    println!(
        "fanout: {sessions} sessions, {} changes, gap {} ms, client threads {}",
        args.changes, args.change_gap_ms, args.client_threads
    );
    let opened = client::open_sessions(
        &endpoint,
        sessions,
        workload.connect_burst,
        client::read_buffer_for(1, 0),
    )
    .await;
    let connected = opened.sessions.len();
    println!(
        "opened {connected}/{sessions} sessions in {:.1}s (failures {}: {:?})",
        opened.elapsed.as_secs_f64(),
        opened.failures,
        opened.failure_samples
    );
    if connected == 0 {
        return Err("no session opened".into());
    }
    let (arrivals_tx, mut arrivals) = mpsc::unbounded_channel();
    let mut watchers = JoinSet::new();
    for (index, ws) in opened.sessions.into_iter().enumerate() {
        watchers.spawn(watch(index, ws, arrivals_tx.clone()));
    }
    drop(arrivals_tx);

    let control = tokio::net::TcpStream::connect(args.control)
        .await
        .map_err(|e| format!("control {}: {e}", args.control))?;
    let (control_read, mut control_write) = control.into_split();
    let mut control_lines = tokio::io::BufReader::new(control_read).lines();

    let gap = Duration::from_millis(args.change_gap_ms);
    // Let the handshakes' own traffic settle before the first change.
    tokio::time::sleep(gap).await;
    let mut counts = vec![0u32; connected];
    let mut duplicates = 0u64;
    let mut early = 0u64;
    let mut delivery_us = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3)?;
    let mut changes = Vec::new();
    let cpu_before = throughput::sample_cpu(&placement);
    let cpu_started = Instant::now();
    for k in 1..=args.changes as u32 {
        control_write.write_all(b"change\n").await?;
        let reply = control_lines
            .next_line()
            .await?
            .ok_or("control socket closed")?;
        let fields: Vec<&str> = reply.split_whitespace().collect();
        let (before, writer_ns) = match fields.as_slice() {
            ["changed", before, writer] => (before.parse::<u128>()?, writer.parse::<u64>()?),
            _ => return Err(format!("control: unexpected reply {reply:?}").into()),
        };
        let mut latencies: Vec<u64> = Vec::with_capacity(connected);
        let deadline = Instant::now() + DELIVERY_DEADLINE;
        // Until every session has this change, then through the quiet gap.
        let mut quiet_until: Option<Instant> = None;
        loop {
            let until = quiet_until.unwrap_or(deadline);
            let arrival = match tokio::time::timeout_at(until, arrivals.recv()).await {
                Ok(Some(arrival)) => arrival,
                Ok(None) => break,
                Err(_) if quiet_until.is_none() => {
                    // Deadline: stop waiting for the missing ones, still keep the gap.
                    quiet_until = Some(Instant::now() + gap);
                    continue;
                }
                Err(_) => break,
            };
            let (index, at) = arrival;
            counts[index] += 1;
            if counts[index] > k {
                duplicates += 1;
                continue;
            }
            if counts[index] < k {
                // A session that missed an earlier change: counted there as missing.
                counts[index] = k;
            }
            if at < before {
                early += 1;
            }
            let us = u64::try_from(at.saturating_sub(before) / 1000).unwrap_or(u64::MAX);
            delivery_us.saturating_record(us.max(1));
            latencies.push(us);
            if latencies.len() == connected && quiet_until.is_none() {
                quiet_until = Some(Instant::now() + gap);
            }
        }
        latencies.sort_unstable();
        let change = Change {
            writer_ns,
            delivered: latencies.len(),
            all_received_us: (latencies.len() == connected)
                .then(|| latencies.last().copied())
                .flatten(),
            median_received_us: percentile(&latencies, 0.5),
        };
        println!(
            "change {k:>3}: writer {:>7.1} us, delivered {}/{connected}, all received after {}, median session {}",
            change.writer_ns as f64 / 1000.0,
            change.delivered,
            change
                .all_received_us
                .map_or_else(|| "-".into(), |us| format!("{:.1} ms", us as f64 / 1000.0)),
            change
                .median_received_us
                .map_or_else(|| "-".into(), |us| format!("{:.1} ms", us as f64 / 1000.0)),
        );
        changes.push(change);
    }
    let cpu_after = throughput::sample_cpu(&placement);
    let cpu_seconds = throughput::cores_used(
        cpu_before.server,
        cpu_after.server,
        cpu_started.elapsed(),
        ticks_per_sec,
    )
    .map(|cores| cores * cpu_started.elapsed().as_secs_f64());
    let _ = control_write.write_all(b"stop\n").await;
    watchers.abort_all();

    let missing: usize = changes.iter().map(|c| connected - c.delivered).sum();
    let mut all: Vec<u64> = changes.iter().filter_map(|c| c.all_received_us).collect();
    all.sort_unstable();
    let mut medians: Vec<u64> = changes
        .iter()
        .filter_map(|c| c.median_received_us)
        .collect();
    medians.sort_unstable();
    let mut writers: Vec<u64> = changes.iter().map(|c| c.writer_ns).collect();
    writers.sort_unstable();
    let ms = |us: Option<u64>| us.map(|us| (us as f64 / 100.0).round() / 10.0);
    let summary = json!({
        "mode": "fanout",
        "config": {
            "sessions": sessions,
            "changes": args.changes,
            "change_gap_ms": args.change_gap_ms,
        },
        "client_threads": args.client_threads,
        "connected": connected,
        "connect_failures": opened.failures,
        "open_seconds": opened.elapsed.as_secs_f64(),
        "all_received_ms": { "p50": ms(percentile(&all, 0.5)), "p99": ms(percentile(&all, 0.99)),
                             "max": ms(all.last().copied()), "changes_complete": all.len() },
        "median_session_ms": { "p50": ms(percentile(&medians, 0.5)), "p99": ms(percentile(&medians, 0.99)) },
        "per_delivery_ms": { "p50": ms(Some(delivery_us.value_at_quantile(0.5))),
                              "p99": ms(Some(delivery_us.value_at_quantile(0.99))),
                              "count": delivery_us.len() },
        "writer_us": { "p50": percentile(&writers, 0.5).map(|ns| ns as f64 / 1000.0),
                       "p99": percentile(&writers, 0.99).map(|ns| ns as f64 / 1000.0),
                       "max": writers.last().map(|&ns| ns as f64 / 1000.0) },
        "server_cpu_ms_per_change": cpu_seconds.map(|s| (s * 1000.0 / args.changes as f64 * 10.0).round() / 10.0),
        "missing": missing,
        "duplicates": duplicates,
        "stamped_before_change": early,
        "exactly_once": missing == 0 && duplicates == 0,
    });
    let figure = |v: &Value| v.as_f64().map_or_else(|| "-".into(), |f| format!("{f:.1}"));
    println!(
        "all {connected} sessions received: p50 {} ms p99 {} ms; writer p50 {} us p99 {} us; \
         server CPU {} ms/change; missing {missing} duplicates {duplicates}",
        figure(&summary["all_received_ms"]["p50"]),
        figure(&summary["all_received_ms"]["p99"]),
        figure(&summary["writer_us"]["p50"]),
        figure(&summary["writer_us"]["p99"]),
        figure(&summary["server_cpu_ms_per_change"]),
    );
    if missing > 0 || duplicates > 0 || early > 0 {
        println!(
            "WARNING: each session must get each change exactly once: missing {missing}, \
             duplicates {duplicates}, stamped before the change {early}"
        );
    }
    write_result(args, &summary)?;
    Ok(())
}

fn write_result(args: &Args, summary: &Value) -> Result<(), BoxError> {
    std::fs::create_dir_all(&args.out)?;
    let path = args.out.join("fanout.json");
    std::fs::write(&path, serde_json::to_string_pretty(summary)?)?;
    println!("wrote {}", path.display());
    println!("RESULT_JSON {}", serde_json::to_string(summary)?);
    Ok(())
}
