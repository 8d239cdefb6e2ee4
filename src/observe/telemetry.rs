//! Log output: `tracing` to stderr, filtered by `RUST_LOG` or else `logging.filter`, as text
//! or as JSON lines (`logging.format`).
//!
//! Requests are logged in `debug` spans (`request{session, id, method, trace}` and, for work
//! in a worker, its child `worker{run, trace}`) with their duration and outcome; enable them
//! with `RUST_LOG=mcp_ws=debug`. Every line logged inside them, a tool's own `tracing` events
//! included, carries the request's trace id through them. The access log, one `info` line
//! per request on the target `mcp_ws::access`, carries it as a field of its own.

use crate::config::{LogFormat, LoggingSettings};
use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber (text lines); a second call (tests) leaves the first in
/// place.
pub fn init(default_filter: &str) {
    init_with(&LoggingSettings {
        filter: default_filter.to_owned(),
        ..LoggingSettings::default()
    });
}

/// Installs the global subscriber the settings ask for: `filter` unless `RUST_LOG` is set,
/// in `format`. A second call leaves the first in place.
pub fn init_with(logging: &LoggingSettings) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&logging.filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match logging.format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        // Fields at the top level (`message` among them), and every span of the line with its
        // fields, so a request's `trace` is on each of its lines.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
}
