//! The `mcp-ws` binary: command line and environment → settings → logging (its background
//! writer kept until the server has stopped) → the built-in capability set named in the
//! settings → the server, built through the public API.

mod allocator;
mod conformance;
mod demo;

use clap::Parser;
use mcp_ws::{Server, ServerBuilder, Settings};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc instead of the system allocator: under load, glibc malloc/free took about a
/// quarter of the server's CPU (perf, 16 pipelined connections).
#[global_allocator]
static GLOBAL: allocator::Mimalloc = allocator::Mimalloc;

/// MCP server over WebSocket and Streamable HTTP, both on one endpoint: ws://ADDR/mcp and
/// http://ADDR/mcp (default ADDR 127.0.0.1:8765).
#[derive(Debug, Parser)]
#[command(
    version,
    after_help = "Environment: RUST_LOG overrides logging.filter (e.g. RUST_LOG=debug).\n\
                  Every other setting is in the config file: see docs/configuration.md."
)]
struct Cli {
    /// Config file (TOML). Default: config/default.toml when present, else built-in defaults.
    #[arg(long, value_name = "PATH", env = "MCP_WS_CONFIG")]
    config: Option<PathBuf>,
    /// Listen address, overriding the config file's server.listen (0.0.0.0:8765 to accept
    /// connections from other hosts).
    #[arg(long, value_name = "ADDR", env = "MCP_WS_LISTEN")]
    listen: Option<SocketAddr>,
    /// Serve the stdio MCP server given after `--` to every client, instead of the built-in
    /// tools: `mcp-ws --stdio -- npx -y @modelcontextprotocol/server-everything`.
    #[arg(long, requires = "command")]
    stdio: bool,
    /// With --stdio: one child per client session (per_session, the default) or one shared by
    /// every session (shared).
    #[arg(long, value_name = "MODE", requires = "stdio", value_parser = ["per_session", "shared"])]
    mode: Option<String>,
    /// The stdio server's command and arguments (after `--`, with --stdio).
    #[arg(last = true, value_name = "CMD [ARGS]", requires = "stdio")]
    command: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut settings = match Settings::load(cli.config.as_deref(), cli.listen) {
        Ok(settings) => settings,
        Err(error) => {
            say(&error);
            return ExitCode::from(2);
        }
    };
    if let Some((command, args)) = cli.command.split_first() {
        settings.builtins.set = "none".to_owned();
        settings.upstreams = vec![stdio_upstream(command, args, cli.mode.as_deref())];
        if let Err(error) = settings.validate() {
            say(&error);
            return ExitCode::from(2);
        }
    }
    // Held to the end of `main`: dropping it writes out the lines still queued, the server's
    // last ones included, once the server has stopped.
    let _log = match mcp_ws::telemetry::install(&settings.logging) {
        Ok(guard) => guard,
        Err(error) => {
            say(&error);
            return ExitCode::from(2);
        }
    };
    let set = settings.builtins.set.clone();
    // Which file the settings came from, and what is served: what a new user checks first.
    let config = Settings::config_path(cli.config.as_deref()).map_or_else(
        || "built-in defaults".to_owned(),
        |path| path.display().to_string(),
    );
    tracing::info!(%config, builtins = %set, "starting mcp-ws");
    open_files_limit(settings.server.max_sessions);
    let server = match with_builtins(&set, Server::builder().settings(settings)).build() {
        Ok(server) => server,
        Err(error) => {
            say(&error);
            return ExitCode::from(2);
        }
    };
    match server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "mcp-ws failed");
            say(&error);
            ExitCode::FAILURE
        }
    }
}

/// Raises the soft limit on open files to the hard one, and says so; warns when it is still
/// below what `server.max_sessions` needs. Every connection is a file: at the usual soft
/// limit (1024, systemd's default `LimitNOFILE`), one client's 1,100 idle connections made
/// `accept` fail with `EMFILE` for every other client. The hard limit is what the operator
/// allows (systemd's default is 524288); the Go runtime and nginx
/// (`worker_rlimit_nofile`) raise theirs the same way. The upstreams' children start with
/// the soft limit the server was started with, as Go's children do.
#[allow(unsafe_code)]
fn open_files_limit(max_sessions: usize) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes the struct it is given, nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: `setrlimit` reads the struct it is given; a soft limit up to the hard one
        // needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0 {
            mcp_ws::client::start_children_with_open_files_limit(before);
            tracing::info!(
                from = before,
                to = limit.rlim_cur,
                "open files: soft limit raised to the hard limit"
            );
        } else {
            limit.rlim_cur = before;
        }
    }
    // A session is a connection (a file), and the listeners, logs and children take some.
    let needed = u64::try_from(max_sessions)
        .unwrap_or(u64::MAX)
        .saturating_add(64);
    if limit.rlim_cur < needed {
        tracing::warn!(
            limit = limit.rlim_cur,
            max_sessions,
            "open files: the limit is below what server.max_sessions needs; raise it (ulimit -n, systemd LimitNOFILE)"
        );
    }
}

/// Says why the server does not start or stopped, on stderr. `eprintln!` would panic if
/// stderr cannot be written (a reader gone), turning exit code 2 into a panic's 101.
fn say(error: &dyn std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "mcp-ws: {error}");
}

/// The one upstream of `--stdio -- CMD ARGS`: named after the program, its tools under their
/// own names.
fn stdio_upstream(
    command: &str,
    args: &[String],
    mode: Option<&str>,
) -> mcp_ws::config::UpstreamSettings {
    let program = std::path::Path::new(command).file_name().map_or_else(
        || command.to_owned(),
        |name| name.to_string_lossy().into_owned(),
    );
    let name: String = program
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    mcp_ws::config::UpstreamSettings {
        name: if name.trim_matches('-').is_empty() {
            "stdio".to_owned()
        } else {
            name
        },
        command: command.to_owned(),
        args: args.to_vec(),
        mode: match mode {
            Some("shared") => mcp_ws::config::UpstreamMode::Shared,
            _ => mcp_ws::config::UpstreamMode::PerSession,
        },
        prefix: Some(String::new()),
        ..Default::default()
    }
}

/// Adds the set named by `builtins.set` (`demo`, `conformance` or `none`).
fn with_builtins(set: &str, builder: ServerBuilder) -> ServerBuilder {
    match set {
        "demo" => demo::demo(builder),
        "conformance" => conformance::fixtures(builder),
        _ => builder,
    }
}
