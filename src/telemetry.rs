//! Log output: `tracing` to stderr, filtered by `RUST_LOG` or else `logging.filter`.
//! Requests are logged in `debug` spans (session, id, method) with their duration and
//! outcome; enable them with `RUST_LOG=mcp_ws=debug`.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; a second call (tests) leaves the first in place.
pub fn init(default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
