//! Turns measurements into the human table, the warnings, the single
//! `RESULT_JSON {...}` line and the files under `--out`.

use std::fs;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::cli::{Args, Mode, TargetKind, Workload};
use crate::sessions::SessionsResult;
use crate::throughput::{PointResult, DRAIN};
use crate::BoxError;

pub enum Measured {
    Throughput(Vec<PointResult>),
    Sessions(Box<SessionsResult>),
}

/// What happened to one target in this run.
pub struct TargetOutcome {
    pub kind: TargetKind,
    pub placement: String,
    pub url: String,
    pub measured: Result<Measured, String>,
}

pub fn throughput_header() -> String {
    format!(
        "{:<12} {:>6} {:>11} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6} {:>6} {:>7} {:>7}",
        "target",
        "conns",
        "req/s",
        "p50us",
        "p90us",
        "p99us",
        "p99.9us",
        "max_us",
        "errors",
        "lost",
        "mism",
        "srv_cpu",
        "cli_cpu"
    )
}

fn cores(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |c| format!("{c:.2}"))
}

pub fn throughput_row(kind: TargetKind, point: &PointResult) -> String {
    let h = &point.tally.latency_us;
    format!(
        "{:<12} {:>6} {:>11.0} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6} {:>6} {:>7} {:>7}",
        kind.name(),
        point.connected,
        point.requests_per_sec(),
        h.value_at_quantile(0.50),
        h.value_at_quantile(0.90),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max(),
        point.tally.errors,
        point.tally.lost,
        point.tally.mismatched,
        cores(point.server_cpu_cores),
        cores(point.client_cpu_cores),
    )
}

pub fn sessions_summary(kind: TargetKind, result: &SessionsResult) -> String {
    let h = &result.ping_latency_us;
    let per_session = result
        .bytes_per_session()
        .map_or_else(|| "n/a".into(), |b| format!("{:.1} KiB", b / 1024.0));
    format!(
        "{:<12} opened {}/{} in {:.2}s (failures {}), server memory/session {}, \
         rss {}→{}→{} KiB, dropped {}, pings ok {} err {} timeout {} mism {}, \
         ping p50 {}us p99 {}us max {}us",
        kind.name(),
        result.opened,
        result.requested,
        result.open_elapsed.as_secs_f64(),
        result.connect_failures,
        per_session,
        opt(result.rss_before_kib),
        opt(result.rss_after_open_kib),
        opt(result.rss_end_of_hold_kib),
        result.dropped_during_hold,
        result.pings_ok,
        result.ping_errors,
        result.ping_timeouts,
        result.ping_mismatched,
        h.value_at_quantile(0.50),
        h.value_at_quantile(0.99),
        h.max(),
    )
}

fn opt(value: Option<u64>) -> String {
    value.map_or_else(|| "?".into(), |v| v.to_string())
}

/// A generator using this share of its worker threads is the bottleneck.
const CLIENT_SATURATED_SHARE: f64 = 0.9;

/// Everything that must be zero but is not, and figures that only bound the
/// target from below, as printable warnings.
pub fn warnings(outcomes: &[TargetOutcome], client_threads: usize) -> Vec<String> {
    let mut found = Vec::new();
    for outcome in outcomes {
        let name = outcome.kind.name();
        match &outcome.measured {
            Err(e) => found.push(format!("{name}: not measured: {e}")),
            Ok(Measured::Throughput(points)) => {
                for p in points {
                    let t = &p.tally;
                    let c = p.connections;
                    if t.lost > 0 || t.mismatched > 0 {
                        found.push(format!(
                            "{name} @ {c} conns: lost {} mismatched {} (must be 0)",
                            t.lost, t.mismatched
                        ));
                    }
                    if t.errors > 0 {
                        found.push(format!("{name} @ {c} conns: {} error responses", t.errors));
                    }
                    if p.connect_failures > 0 {
                        found.push(format!(
                            "{name} @ {c} conns: {} connections failed: {:?}",
                            p.connect_failures, p.connect_failure_samples
                        ));
                    }
                    if let Some(used) = p.client_cpu_cores {
                        if used >= CLIENT_SATURATED_SHARE * client_threads as f64 {
                            found.push(format!(
                                "{name} @ {c} conns: the generator used {used:.2} of its {client_threads} \
                                 client thread(s): req/s is a lower bound for this target \
                                 (raise --client-threads / give the client its own core)"
                            ));
                        }
                    }
                    if !t.transport_errors.is_empty() {
                        found.push(format!(
                            "{name} @ {c} conns: transport errors: {:?}",
                            t.transport_errors
                        ));
                    }
                }
            }
            Ok(Measured::Sessions(s)) => {
                if s.connect_failures > 0 {
                    found.push(format!(
                        "{name}: {} sessions failed to open{}: {:?}",
                        s.connect_failures,
                        if s.fd_exhausted { " (fd limit!)" } else { "" },
                        s.connect_failure_samples
                    ));
                }
                if s.dropped_during_hold > 0 {
                    found.push(format!(
                        "{name}: server dropped {} idle sessions during the hold",
                        s.dropped_during_hold
                    ));
                }
                if s.ping_timeouts > 0 || s.ping_mismatched > 0 || s.ping_errors > 0 {
                    found.push(format!(
                        "{name}: pings timed out {} mismatched {} errors {} (must be 0)",
                        s.ping_timeouts, s.ping_mismatched, s.ping_errors
                    ));
                }
            }
        }
    }
    found
}

fn latency_json(h: &Histogram<u64>) -> Value {
    json!({
        "count": h.len(),
        "p50": h.value_at_quantile(0.50),
        "p90": h.value_at_quantile(0.90),
        "p99": h.value_at_quantile(0.99),
        "p99_9": h.value_at_quantile(0.999),
        "max": h.max(),
        "mean": (h.mean() * 10.0).round() / 10.0,
    })
}

fn point_json(p: &PointResult) -> Value {
    let t = &p.tally;
    json!({
        "connections": p.connections,
        "connected": p.connected,
        "connect_failures": p.connect_failures,
        "fd_exhausted": p.fd_exhausted,
        "window_s": p.window.as_secs_f64(),
        "requests_per_sec": (p.requests_per_sec() * 10.0).round() / 10.0,
        "latency_us": latency_json(&t.latency_us),
        "completed_in_window": t.completed_in_window,
        "sent": t.sent,
        "answered": t.answered,
        "errors": t.errors,
        "lost": t.lost,
        "mismatched": t.mismatched,
        "unsolicited": t.unsolicited,
        "server_cpu_cores": p.server_cpu_cores,
        "client_cpu_cores": p.client_cpu_cores,
        "transport_errors": t.transport_errors,
    })
}

fn sessions_json(s: &SessionsResult) -> Value {
    json!({
        "requested": s.requested,
        "opened": s.opened,
        "connect_failures": s.connect_failures,
        "connect_failure_samples": s.connect_failure_samples,
        "fd_exhausted": s.fd_exhausted,
        "open_seconds": s.open_elapsed.as_secs_f64(),
        "rss_before_kib": s.rss_before_kib,
        "rss_after_open_kib": s.rss_after_open_kib,
        "rss_end_of_hold_kib": s.rss_end_of_hold_kib,
        "bytes_per_session": s.bytes_per_session().map(|b| b.round()),
        "dropped_during_hold": s.dropped_during_hold,
        "ping": {
            "ok": s.pings_ok,
            "errors": s.ping_errors,
            "timeouts": s.ping_timeouts,
            "mismatched": s.ping_mismatched,
            "latency_us": latency_json(&s.ping_latency_us),
        },
    })
}

fn ratio(numerator: f64, denominator: f64) -> Value {
    if denominator > 0.0 && numerator.is_finite() {
        json!((numerator / denominator * 1000.0).round() / 1000.0)
    } else {
        Value::Null
    }
}

fn find(outcomes: &[TargetOutcome], kind: TargetKind) -> Option<&Measured> {
    outcomes
        .iter()
        .find(|o| o.kind == kind)
        .and_then(|o| o.measured.as_ref().ok())
}

/// mcp-ws relative to each baseline: requests/s and p50 (throughput) or
/// memory per session and ping p50 (sessions).
fn ratios(outcomes: &[TargetOutcome]) -> Value {
    let mut all = serde_json::Map::new();
    let Some(mcp) = find(outcomes, TargetKind::McpWs) else {
        return Value::Object(all);
    };
    for baseline in [
        TargetKind::RawEcho,
        TargetKind::ActixInline,
        TargetKind::ActixNaive,
        TargetKind::Jsonrpsee,
    ] {
        let Some(base) = find(outcomes, baseline) else {
            continue;
        };
        let key = format!("mcp-ws/{}", baseline.name());
        let value = match (mcp, base) {
            (Measured::Throughput(mine), Measured::Throughput(theirs)) => {
                let per_point: Vec<Value> = mine
                    .iter()
                    .filter_map(|m| {
                        let t = theirs.iter().find(|t| t.connections == m.connections)?;
                        Some(json!({
                            "connections": m.connections,
                            "requests_per_sec": ratio(m.requests_per_sec(), t.requests_per_sec()),
                            "p50": ratio(
                                m.tally.latency_us.value_at_quantile(0.5) as f64,
                                t.tally.latency_us.value_at_quantile(0.5) as f64,
                            ),
                        }))
                    })
                    .collect();
                json!(per_point)
            }
            (Measured::Sessions(mine), Measured::Sessions(theirs)) => json!({
                "bytes_per_session": match (mine.bytes_per_session(), theirs.bytes_per_session()) {
                    (Some(a), Some(b)) => ratio(a, b),
                    _ => Value::Null,
                },
                "ping_p50": ratio(
                    mine.ping_latency_us.value_at_quantile(0.5) as f64,
                    theirs.ping_latency_us.value_at_quantile(0.5) as f64,
                ),
            }),
            _ => Value::Null,
        };
        all.insert(key, value);
    }
    Value::Object(all)
}

/// The machine-readable result of the whole run.
pub fn result_json(
    args: &Args,
    workload: &Workload,
    outcomes: &[TargetOutcome],
    warnings: &[String],
) -> Value {
    let mut targets = serde_json::Map::new();
    for outcome in outcomes {
        let body = match &outcome.measured {
            Err(e) => json!({ "skipped": e }),
            Ok(Measured::Throughput(points)) => json!({
                "placement": outcome.placement,
                "url": outcome.url,
                "points": points.iter().map(point_json).collect::<Vec<_>>(),
            }),
            Ok(Measured::Sessions(s)) => json!({
                "placement": outcome.placement,
                "url": outcome.url,
                "sessions": sessions_json(s),
            }),
        };
        targets.insert(outcome.kind.name().to_string(), body);
    }
    let config = match args.mode {
        Mode::Throughput => json!({
            "connections": workload.connections,
            "pipeline": workload.pipeline,
            "payload_bytes": workload.payload,
            "era": args.era.name(),
            "duration_s": workload.duration.as_secs_f64(),
            "warmup_s": workload.warmup.as_secs_f64(),
            "drain_s": DRAIN.as_secs_f64(),
        }),
        Mode::Http | Mode::Fanout => Value::Null,
        Mode::Sessions => json!({
            "sessions": workload.sessions,
            "hold_s": workload.hold.as_secs_f64(),
            "pingers": workload.pingers,
            "ping_interval_ms": workload.ping_interval.as_millis() as u64,
        }),
    };
    json!({
        "mode": mode_name(args.mode),
        "config": config,
        "client_threads": args.client_threads,
        "server_cpus": args.server_cpus,
        "client_cpus": args.client_cpus,
        "connect_burst": workload.connect_burst,
        "targets": targets,
        "ratios": ratios(outcomes),
        "warnings": warnings,
    })
}

/// Writes `<mode>.json` into `dir`; returns its path.
pub fn write_json(dir: &Path, mode: Mode, result: &Value) -> Result<PathBuf, BoxError> {
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("{}.json", mode_name(mode)));
    fs::write(&path, serde_json::to_string_pretty(result)?)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// True when any target ran out of file descriptors while connecting.
pub fn fd_exhausted(outcomes: &[TargetOutcome]) -> bool {
    outcomes.iter().any(|outcome| match &outcome.measured {
        Ok(Measured::Throughput(points)) => points.iter().any(|p| p.fd_exhausted),
        Ok(Measured::Sessions(s)) => s.fd_exhausted,
        Err(_) => false,
    })
}

pub fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Throughput => "throughput",
        Mode::Sessions => "sessions",
        Mode::Http => "http",
        Mode::Fanout => "fanout",
    }
}
