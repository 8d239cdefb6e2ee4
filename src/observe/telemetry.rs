//! Log output: `tracing` to stderr or to a daily-rotated file (`logging.file`), filtered by
//! `RUST_LOG` or else `logging.filter`, as text or as JSON lines (`logging.format`).
//!
//! [`install`] (what the binary uses) hands each formatted line to a background thread
//! through a bounded queue (`logging.queue_lines`): the thread that logs never makes a
//! system call for it nor waits for the reader of stderr. The background thread writes the
//! lines in batches through a buffer, flushed whenever the queue runs empty and at least every
//! [`FLUSH_EVERY`] while lines keep coming, and fully when the [`LogGuard`] drops. A line
//! that finds the queue full is dropped and counted ([`dropped_lines`], exported as
//! `mcp_dropped_total{reason="access_log"}`): a stalled stderr costs lines, never the event
//! loop. [`init`] and [`init_with`] keep the simple path for tests and embedders: each line is
//! written by the thread that logs it, before the event returns.
//!
//! Requests are logged in `debug` spans (`request{session, id, method, trace}` and, for work
//! in a worker, its child `worker{run, trace}`) with their duration and outcome; enable them
//! with `RUST_LOG=mcp_ws=debug`. Every line logged inside them, a tool's own `tracing` events
//! included, carries the request's trace id through them. The access log, one `info` line
//! per request on the target `mcp_ws::access`, carries it as a field of its own.
//!
//! In the text format every field value that is not a plain token is written quoted, with
//! `"`, `\` and control characters escaped (see [`TextFields`]): a client's string (a method,
//! an id, a `User-Agent`) cannot end its field and forge another.

use crate::config::{LogFormat, LoggingSettings};
use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::io::{self, IsTerminal, Write};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tracing::field::{Field, Visit};
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_appender::rolling::{RollingFileAppender, Rotation};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::format::{FormatFields, Writer};
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// Longest a line waits in the background writer's buffer while lines keep coming.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Bytes the background writer gathers before a write(2) (unless it flushes first).
const BATCH_BYTES: usize = 64 * 1024;

/// The drop counter of the background writer [`install`] set up, if it did.
static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Keeps the background writer of [`install`]; dropping it writes out every queued line (it
/// waits about a second at most for a stalled reader) and stops the writer.
#[must_use = "the log's background writer stops, and lines are lost, when the guard drops"]
pub struct LogGuard {
    _worker: WorkerGuard,
}

impl fmt::Debug for LogGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LogGuard")
    }
}

/// Why the log could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// `logging.file` could not be opened.
    #[error("logging.file: cannot open {path}: {source}")]
    File {
        /// The configured file.
        path: std::path::PathBuf,
        /// What went wrong.
        source: tracing_appender::rolling::InitError,
    },
    /// A global `tracing` subscriber was installed before.
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled,
}

/// Log lines the background writer dropped because its queue was full, since the start.
pub fn dropped_lines() -> u64 {
    DROPPED
        .get()
        .map_or(0, |counter| counter.dropped_lines() as u64)
}

/// Installs the global subscriber the settings ask for, writing through a background thread
/// (see the module docs). Keep the guard until the last line is logged: the binary holds it
/// until its server has stopped.
pub fn install(logging: &LoggingSettings) -> Result<LogGuard, LogError> {
    let builder = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(logging.queue_lines.max(1))
        .thread_name("mcp-ws-log");
    let (writer, worker) = match rolling(logging)? {
        Some(file) => builder.finish(Batched::new(file)),
        None => builder.finish(Batched::new(io::stderr())),
    };
    let dropped = writer.error_counter();
    let ansi = logging.file_parts().is_none() && io::stderr().is_terminal();
    subscribe(logging, writer, ansi).map_err(|_| LogError::AlreadyInstalled)?;
    let _ = DROPPED.set(dropped);
    Ok(LogGuard { _worker: worker })
}

/// Installs the global subscriber (text lines to stderr, each written by the thread that
/// logs it); a second call (tests) leaves the first in place.
pub fn init(default_filter: &str) {
    init_with(&LoggingSettings {
        filter: default_filter.to_owned(),
        ..LoggingSettings::default()
    });
}

/// Installs the global subscriber the settings ask for, each line written by the thread
/// that logs it, to stderr or to `logging.file` (stderr, with a message, when the file
/// cannot be opened). A second call leaves the first in place. [`install`] is the
/// non-blocking alternative.
pub fn init_with(logging: &LoggingSettings) {
    let (writer, ansi) = match rolling(logging) {
        Ok(Some(file)) => (BoxMakeWriter::new(file), false),
        Ok(None) => (BoxMakeWriter::new(io::stderr), io::stderr().is_terminal()),
        Err(error) => {
            eprintln!("mcp-ws: {error}; logging to stderr");
            (BoxMakeWriter::new(io::stderr), io::stderr().is_terminal())
        }
    };
    let _ = subscribe(logging, writer, ansi);
}

/// The daily-rotated file of `logging.file`, if one is configured.
fn rolling(logging: &LoggingSettings) -> Result<Option<RollingFileAppender>, LogError> {
    let Some((dir, name)) = logging.file_parts() else {
        return Ok(None);
    };
    RollingFileAppender::builder()
        .rotation(Rotation::DAILY)
        .filename_prefix(name.to_string_lossy())
        .max_log_files(logging.file_keep.max(1))
        .build(dir)
        .map(Some)
        .map_err(|source| LogError::File {
            path: logging.file.clone(),
            source,
        })
}

/// Installs the subscriber: the filter (`RUST_LOG` first), the format, this writer.
fn subscribe<W>(
    logging: &LoggingSettings,
    writer: W,
    ansi: bool,
) -> Result<(), tracing_subscriber::util::TryInitError>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    use tracing_subscriber::util::SubscriberInitExt;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&logging.filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match logging.format {
        LogFormat::Text => builder
            .with_ansi(ansi)
            .fmt_fields(TextFields)
            .finish()
            .try_init(),
        // Fields at the top level (`message` among them), and every span of the line with its
        // fields, so a request's `trace` is on each of its lines. JSON strings are escaped by
        // the formatter: a client's string stays inside its member.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .finish()
            .try_init(),
    }
}

/// The background writer's output: a buffer over stderr or the file, flushed by the worker
/// when its queue runs empty, and here once [`FLUSH_EVERY`] has passed since the last flush
/// (a steady stream that never empties the queue still reaches the reader that soon).
struct Batched<W: Write> {
    inner: io::BufWriter<W>,
    flushed: Instant,
}

impl<W: Write> Batched<W> {
    fn new(inner: W) -> Self {
        Self {
            inner: io::BufWriter::with_capacity(BATCH_BYTES, inner),
            flushed: Instant::now(),
        }
    }
}

impl<W: Write> Write for Batched<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buf)?;
        if self.flushed.elapsed() >= FLUSH_EVERY {
            self.flush()?;
        }
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flushed = Instant::now();
        self.inner.flush()
    }
}

/// The text format's fields: `name=value`, where a value that is neither a plain token
/// (ASCII graphic characters other than `"`, `\` and `=`) nor already a well-formed quoted
/// string (a JSON string id) is quoted and escaped as a Rust string literal is; string values
/// are always quoted, as `tracing_subscriber`'s default does. The `message` is written first,
/// as is.
#[derive(Debug, Clone, Copy)]
pub struct TextFields;

impl<'writer> FormatFields<'writer> for TextFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = TextVisitor {
            ansi: writer.has_ansi_escapes(),
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.finish()
    }
}

struct TextVisitor<'writer> {
    writer: Writer<'writer>,
    ansi: bool,
    first: bool,
    result: fmt::Result,
}

impl TextVisitor<'_> {
    /// Starts a field: the separating space, and `name=` (italic and dimmed on a terminal).
    fn name(&mut self, field: &Field) -> fmt::Result {
        if !std::mem::take(&mut self.first) {
            self.writer.write_char(' ')?;
        }
        let name = field.name();
        let name = name.strip_prefix("r#").unwrap_or(name);
        if self.ansi {
            write!(self.writer, "\x1b[3m{name}\x1b[0m\x1b[2m=\x1b[0m")
        } else {
            write!(self.writer, "{name}=")
        }
    }

    fn field(&mut self, field: &Field, value: &dyn fmt::Debug) -> fmt::Result {
        if field.name() == "message" {
            if !std::mem::take(&mut self.first) {
                self.writer.write_char(' ')?;
            }
            return write!(self.writer, "{value:?}");
        }
        if field.name().starts_with("log.") {
            return Ok(());
        }
        self.name(field)?;
        SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut text) => {
                text.clear();
                write!(text, "{value:?}")?;
                let result = write_token(&mut self.writer, &text);
                if text.capacity() > SCRATCH_KEEP {
                    *text = String::new();
                }
                result
            }
            Err(_) => write_token(&mut self.writer, &format!("{value:?}")),
        })
    }
}

/// Longest scratch text kept between lines.
const SCRATCH_KEEP: usize = 16 * 1024;

thread_local! {
    /// Where a value is rendered before it is known whether it needs quotes.
    static SCRATCH: RefCell<String> = const { RefCell::new(String::new()) };
}

/// `text` as it is when it is a plain token or already a well-formed quoted string, else
/// quoted and escaped.
fn write_token(writer: &mut Writer<'_>, text: &str) -> fmt::Result {
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\' | b'='));
    if plain || is_quoted(text) {
        writer.write_str(text)
    } else {
        write!(writer, "{text:?}")
    }
}

/// Whether `text` is a quoted string a reader ends where it ends: `"` first and last, every
/// `"` and `\` between them escaped by a `\`, no control character (a JSON string, as a
/// request id is written, is one).
fn is_quoted(text: &str) -> bool {
    let Some(inner) = text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    else {
        return false;
    };
    let mut bytes = inner.bytes();
    while let Some(byte) = bytes.next() {
        match byte {
            b'\\' if bytes.next().is_none() => return false,
            b'"' => return false,
            _ => {}
        }
    }
    !text.chars().any(char::is_control)
}

impl Visit for TextVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        self.result = if field.name() == "message" {
            self.field(field, &format_args!("{value}"))
        } else {
            self.name(field)
                .and_then(|()| write!(self.writer, "{value:?}"))
        };
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        self.result = self.field(field, value);
    }
}

impl VisitOutput<fmt::Result> for TextVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> String {
        let mut out = String::new();
        write_token(&mut Writer::new(&mut out), text).expect("write");
        out
    }

    #[test]
    fn plain_tokens_are_bare_and_anything_else_is_quoted() {
        assert_eq!(token("ping"), "ping");
        assert_eq!(token("127.0.0.1:80"), "127.0.0.1:80");
        assert_eq!(token(""), "\"\"");
        assert_eq!(
            token("a identity=admin outcome=\"ok\""),
            r#""a identity=admin outcome=\"ok\"""#
        );
        assert_eq!(token("x=1"), "\"x=1\"");
        assert_eq!(token("a\\b\n\u{1b}"), r#""a\\b\n\u{1b}""#);
        assert_eq!(token("é"), "\"é\"");
        // Already quoted (a JSON string id): as it is; not quite quoted: quoted again.
        assert_eq!(token(r#""t1""#), r#""t1""#);
        assert_eq!(token(r#""a\" b=\"c""#), r#""a\" b=\"c""#);
        assert_eq!(token(r#""a" b="c""#), r#""\"a\" b=\"c\"""#);
        assert_eq!(token(r#""a\""#), r#""\"a\\\"""#);
        assert_eq!(token("\""), r#""\"""#);
        assert_eq!(token("\"a\nb\""), r#""\"a\nb\"""#);
    }

    #[test]
    fn the_batch_is_flushed_once_the_interval_has_passed() {
        let mut batched = Batched::new(Vec::new());
        batched.write_all(b"one\n").expect("write");
        assert!(batched.inner.get_ref().is_empty(), "buffered");
        batched.flushed = Instant::now()
            .checked_sub(FLUSH_EVERY)
            .expect("a clock past the interval");
        batched.write_all(b"two\n").expect("write");
        assert_eq!(batched.inner.get_ref().as_slice(), b"one\ntwo\n");
    }
}
