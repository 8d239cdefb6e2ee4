//! `cargo bench --bench load`: the load generator for mcp-ws.
//!
//! This file owns the run: it parses the command line, places the client on
//! its cores, starts or attaches to each target in turn (mcp-ws, the
//! raw-echo framing ceiling, the actix-inline ceiling of its own stack, the
//! same server as a naive `serde_json::Value` echo (actix-naive), the
//! jsonrpsee baseline), runs the same workload
//! against each, and prints the table, the warnings and one final
//! `RESULT_JSON {...}` line. With `--serve-baseline` it instead runs only a
//! baseline server, so that it can be pinned from outside like mcp-ws.
//! See benches/README.md for how to run it and what is pinned where.

#[path = "load/actix_inline.rs"]
mod actix_inline;
#[path = "load/baseline.rs"]
mod baseline;
#[path = "load/cli.rs"]
mod cli;
#[path = "load/client.rs"]
mod client;
/// The binary's capability sets (the demo set), as `mcp-ws` serves them.
#[path = "../src/demo/mod.rs"]
mod demo;
#[path = "load/fanout.rs"]
mod fanout;
#[path = "load/http.rs"]
mod http;
#[path = "load/jsonrpsee_server.rs"]
mod jsonrpsee_server;
#[path = "load/mcp_ws_inprocess.rs"]
mod mcp_ws_inprocess;
#[path = "load/plot.rs"]
mod plot;
#[path = "load/raw_echo.rs"]
mod raw_echo;
#[path = "load/report.rs"]
mod report;
#[path = "load/sessions.rs"]
mod sessions;
#[path = "load/sys.rs"]
mod sys;
#[path = "load/targets.rs"]
mod targets;
#[path = "load/throughput.rs"]
mod throughput;

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use cli::{Args, BaselineKind, Mode, TargetKind, Workload};
use report::{Measured, TargetOutcome};
use targets::{LiveTarget, CLIENT_THREAD_NAME};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The allocator of the shipped server (src/main.rs), for the baselines too: a baseline on
/// glibc malloc would pay a cost mcp-ws does not, and every ratio would flatter mcp-ws.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Pause between two sweep points (and targets) so the server finishes
/// tearing down the previous connections before the next ones arrive.
pub(crate) const SETTLE_BETWEEN_RUNS: Duration = Duration::from_millis(300);

fn main() -> ExitCode {
    let raw_args: Vec<String> = std::env::args().collect();
    if Args::looks_like_cargo_test(&raw_args) {
        println!("load: no arguments (run by `cargo test`?); nothing to do. Use `cargo bench --bench load`.");
        return ExitCode::SUCCESS;
    }
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("load: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), BoxError> {
    if let Some(kind) = args.serve_baseline {
        return serve_baseline(kind, args);
    }
    if args.serve_fanout {
        return fanout::serve(args);
    }
    let workload = args.workload()?;
    if let Some(cpus) = &args.client_cpus {
        // The client runtime's threads are created later and inherit this.
        sys::pin_current_thread(cpus)?;
    }
    check_fd_limit(args, &workload);
    let ticks_per_sec = sys::clock_ticks_per_sec();
    match args.mode {
        Mode::Http => {
            let runtime = client_runtime(args.client_threads)?;
            let result = http::run(args, &workload, ticks_per_sec, &runtime);
            runtime.shutdown_timeout(Duration::from_secs(2));
            return result;
        }
        Mode::Fanout => {
            let runtime = client_runtime(args.client_threads)?;
            let result = runtime.block_on(fanout::run(args, &workload, ticks_per_sec));
            runtime.shutdown_timeout(Duration::from_secs(2));
            return result;
        }
        Mode::Throughput | Mode::Sessions => {}
    }

    let mut targets: Vec<TargetKind> = Vec::new();
    for kind in &args.targets {
        if !targets.contains(kind) {
            targets.push(*kind);
        }
    }

    if args.mode == Mode::Throughput {
        println!(
            "throughput: era {} (mcp-ws), pipeline {} payload {} B, warmup {:.1}s, window {:.1}s, drain {:.1}s, client threads {}",
            args.era.name(),
            workload.pipeline,
            workload.payload,
            workload.warmup.as_secs_f64(),
            workload.duration.as_secs_f64(),
            throughput::DRAIN.as_secs_f64(),
            args.client_threads
        );
        println!("{}", report::throughput_header());
    } else {
        println!(
            "sessions: {} sessions held {:.1}s, {} pingers every {} ms, client threads {}",
            workload.sessions,
            workload.hold.as_secs_f64(),
            workload.pingers,
            workload.ping_interval.as_millis(),
            args.client_threads
        );
    }

    let mut outcomes = Vec::new();
    for kind in targets {
        outcomes.push(measure_target(kind, args, &workload, ticks_per_sec));
        std::thread::sleep(SETTLE_BETWEEN_RUNS);
    }

    let warnings = report::warnings(&outcomes, args.client_threads);
    for warning in &warnings {
        println!("WARNING: {warning}");
    }
    let result = report::result_json(args, &workload, &outcomes, &warnings);
    match report::write_json(&args.out, args.mode, &result) {
        Ok(path) => println!("wrote {}", path.display()),
        Err(e) => println!("WARNING: could not write JSON: {e}"),
    }
    if args.mode == Mode::Throughput {
        match plot::write_throughput_svg(&args.out, &outcomes) {
            Ok(path) => println!("wrote {}", path.display()),
            Err(e) => println!("WARNING: could not write SVG: {e}"),
        }
    }
    println!("RESULT_JSON {}", serde_json::to_string(&result)?);
    if report::fd_exhausted(&outcomes) {
        return Err(
            "ran out of file descriptors (EMFILE/ENFILE) while connecting; \
                    the figures above are incomplete. Raise `ulimit -n` (see benches/README.md)"
                .into(),
        );
    }
    Ok(())
}

/// Starts (or attaches to) one target, runs the workload, stops it.
fn measure_target(
    kind: TargetKind,
    args: &Args,
    workload: &Workload,
    ticks_per_sec: u64,
) -> TargetOutcome {
    let target = match LiveTarget::start(kind, args) {
        Ok(target) => target,
        Err(e) => {
            println!("{:<12} skipped: {e}", kind.name());
            return TargetOutcome {
                kind,
                placement: String::new(),
                url: String::new(),
                measured: Err(e.to_string()),
            };
        }
    };
    let placement = target.placement.clone();
    let url = target.endpoint.url.clone();
    let measured = client_runtime(args.client_threads)
        .map_err(|e| format!("client runtime: {e}"))
        .map(|runtime| {
            let measured = match args.mode {
                Mode::Throughput => {
                    let mut points = Vec::new();
                    for &connections in &workload.connections {
                        let point = runtime.block_on(throughput::run_point(
                            &target.endpoint,
                            &placement,
                            connections,
                            workload,
                            ticks_per_sec,
                        ));
                        println!("{}", report::throughput_row(kind, &point));
                        points.push(point);
                        std::thread::sleep(SETTLE_BETWEEN_RUNS);
                    }
                    Measured::Throughput(points)
                }
                Mode::Http | Mode::Fanout => unreachable!("run() serves these modes itself"),
                Mode::Sessions => {
                    let result =
                        runtime.block_on(sessions::run(&target.endpoint, &placement, workload));
                    println!("{}", report::sessions_summary(kind, &result));
                    Measured::Sessions(Box::new(result))
                }
            };
            runtime.shutdown_timeout(Duration::from_secs(2));
            measured
        });
    target.stop();
    TargetOutcome {
        kind,
        placement: placement.label(),
        url,
        measured,
    }
}

/// The load-generating runtime: `threads` workers, named so their CPU time
/// is never attributed to an in-process server.
fn client_runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(CLIENT_THREAD_NAME)
        .enable_all()
        .build()
}

/// Estimates the descriptors the run needs and raises the soft limit to the
/// hard one (via `prlimit`) if that is not enough. Too low a limit is not
/// fatal here: connects then fail with EMFILE, reported as such.
fn check_fd_limit(args: &Args, workload: &Workload) {
    let peak = match args.mode {
        Mode::Throughput | Mode::Http => workload.connections.iter().copied().max().unwrap_or(0),
        Mode::Sessions | Mode::Fanout => workload.sessions,
    };
    // In-process servers hold the other end of each connection.
    // (http and fanout only ever drive external servers.)
    let any_in_process = matches!(args.mode, Mode::Throughput | Mode::Sessions)
        && args
            .targets
            .iter()
            .any(|kind| kind.external(args).is_none());
    let needed = (peak * if any_in_process { 2 } else { 1 } + 128) as u64;
    let Some((soft, hard)) = sys::fd_limits() else {
        return;
    };
    if soft >= needed {
        return;
    }
    let raised = sys::raise_fd_limit().unwrap_or(soft);
    if raised >= needed {
        println!("fd limit raised from {soft} to {raised} (needed ~{needed})");
    } else {
        println!(
            "WARNING: open-file limit {raised} (hard {hard}) is below the ~{needed} this run needs; \
             connects will fail with EMFILE. Run `ulimit -n {needed}` (as root: raise the hard limit) first."
        );
    }
}

/// `--serve-baseline`: only a baseline server, for external pinned runs.
fn serve_baseline(kind: BaselineKind, args: &Args) -> Result<(), BoxError> {
    let serve_for = args.serve_for()?;
    if let Some(cpus) = &args.server_cpus {
        sys::pin_current_thread(cpus)?;
    }
    let _ = sys::raise_fd_limit();
    let server = baseline::BaselineServer::spawn(kind, args.listen)?;
    println!(
        "serving {} on ws://{}/mcp pid {} (for at most {:.0}s; Ctrl-C stops it)",
        kind.name(),
        server.addr(),
        std::process::id(),
        serve_for.as_secs_f64()
    );
    std::io::stdout().flush()?;
    std::thread::sleep(serve_for);
    server.stop();
    Ok(())
}
