//! Log output: `tracing` to stderr or to a file (`logging.file`, rotated by day or by size:
//! `observe::log_file`), filtered by `RUST_LOG` or else `logging.filter`, as text or as JSON
//! lines (`logging.format`).
//!
//! [`install`] (what the binary uses) hands each formatted line to a background thread
//! through one bounded buffer (`observe::log_writer`): the thread that logs copies its line
//! under a short lock and makes no system call for it nor waits for the reader of stderr.
//! The background thread writes the lines in batches, at least every [`FLUSH_EVERY`], and
//! all of them when the [`LogGuard`] drops. A line that finds `logging.queue_lines` lines
//! held is dropped and counted ([`dropped_lines`], exported as
//! `mcp_dropped_total{reason="access_log"}`), and so is a line its write loses (a reader
//! gone, a full disk): a stalled stderr costs lines, never the event loop. [`init`] and
//! [`init_with`] keep the simple path for tests and embedders: each line is written by the
//! thread that logs it, before the event returns.
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
//!
//! The access log's lines take a shorter way (`write_direct`): with the writer of
//! [`install`] and no ANSI colors, a line outside any span is written by hand, byte for byte
//! as the `fmt` layer would write it (same timestamp format, level, target, field order,
//! quoting and escapes), into a buffer of the logging thread, and handed to the same
//! background writer, in order with every other line. Its time is the moment its request
//! ended, read once for the request's duration and turned into the time of day
//! (`WallClock`). `tracing`'s dispatch, its field visitors and `core::fmt`
//! are what a line cost before (about 17,000 instructions of a 35,000-instruction request,
//! callgrind); elsewhere (an embedder's subscriber, [`init`], a terminal, a line inside an
//! enabled span) the line is an ordinary `tracing` event.

use crate::config::{LogFormat, LoggingSettings};
use crate::observe::log_file::{FileSettings, LogFile, OpenError};
use crate::observe::log_writer::{Closer, LogWriter};
use std::cell::RefCell;
use std::fmt::{self, Write as _};
use std::io::{self, IsTerminal, Write};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::field::{Field, Visit};
use tracing_subscriber::field::{RecordFields, VisitOutput};
use tracing_subscriber::fmt::format::{FormatFields, Writer};
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

pub use crate::observe::log_writer::FLUSH_EVERY;

/// The background writer [`install`] set up, if it did (for its drop counter).
static INSTALLED: OnceLock<LogWriter> = OnceLock::new();

/// The writer and format of [`write_direct`], when [`install`] set them up without ANSI.
static DIRECT: OnceLock<Direct> = OnceLock::new();

/// Where [`write_direct`] writes, and how.
struct Direct {
    writer: LogWriter,
    json: bool,
}

/// Keeps the background writer of [`install`]; dropping it writes out every queued line (it
/// waits about a second at most for a stalled reader) and stops the writer.
#[must_use = "the log's background writer stops, and lines are lost, when the guard drops"]
pub struct LogGuard {
    _closer: Closer,
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
    /// `logging.file` could not be opened for rotation by size (`file_rotation = "size"`).
    #[error("logging.file: cannot open {path}: {source}")]
    SizeFile {
        /// The configured file.
        path: std::path::PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// A global `tracing` subscriber was installed before.
    #[error("a global tracing subscriber is already installed")]
    AlreadyInstalled,
    /// The background writer's thread could not be started.
    #[error("cannot start the log's writer thread: {0}")]
    Thread(io::Error),
}

/// Log lines the background writer dropped because its buffer was full, or lost because
/// their write failed (a reader gone, a full disk), since the start.
pub fn dropped_lines() -> u64 {
    INSTALLED.get().map_or(0, LogWriter::dropped)
}

/// Installs the global subscriber the settings ask for, writing through a background thread
/// (see the module docs); a stderr that is a pipe is made to hold one of its batches (1 MiB
/// where the kernel allows). Keep the guard until the last line is logged: the binary holds it
/// until its server has stopped.
pub fn install(logging: &LoggingSettings) -> Result<LogGuard, LogError> {
    let out: Box<dyn Write + Send> = match log_file(logging)? {
        Some(file) => Box::new(file),
        None => {
            widen_stderr_pipe();
            Box::new(io::stderr())
        }
    };
    let (writer, closer) =
        LogWriter::spawn(out, logging.queue_lines, "mcp-ws-log").map_err(LogError::Thread)?;
    let ansi = logging.file_parts().is_none() && io::stderr().is_terminal();
    let direct = (!ansi).then(|| Direct {
        writer: writer.clone(),
        json: logging.format == LogFormat::Json,
    });
    subscribe(logging, writer.clone(), ansi).map_err(|_| LogError::AlreadyInstalled)?;
    let _ = INSTALLED.set(writer);
    if let Some(direct) = direct {
        let _ = DIRECT.set(direct);
    }
    Ok(LogGuard { _closer: closer })
}

/// Makes stderr's pipe, when stderr is one (a supervisor reading it), hold one batch of the
/// writer thread ([`BATCH_BYTES`](crate::observe::log_writer::BATCH_BYTES)): a batch then
/// goes into the pipe with one write, where the usual 64 KiB pipe blocked the writer thread
/// once for each 64 KiB its reader drained, a sleep and a wake-up on the server's core each
/// time. Best effort: the kernel caps the size (`/proc/sys/fs/pipe-max-size`, 1 MiB by
/// default) and refuses it for anything but a pipe, and stderr is then used as it is.
fn widen_stderr_pipe() {
    // Not a pipe, or over the cap: the error changes nothing, and is not worth a line.
    #[cfg(target_os = "linux")]
    {
        use crate::observe::log_writer::BATCH_BYTES;
        let _ = rustix::pipe::fcntl_setpipe_size(io::stderr(), BATCH_BYTES);
    }
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
    let (writer, ansi) = match log_file(logging) {
        Ok(Some(file)) => (BoxMakeWriter::new(Mutex::new(file)), false),
        Ok(None) => (BoxMakeWriter::new(io::stderr), io::stderr().is_terminal()),
        Err(error) => {
            let _ = writeln!(io::stderr(), "mcp-ws: {error}; logging to stderr");
            (BoxMakeWriter::new(io::stderr), io::stderr().is_terminal())
        }
    };
    let _ = subscribe(logging, writer, ansi);
}

/// The file of `logging.file`, if one is configured.
fn log_file(logging: &LoggingSettings) -> Result<Option<LogFile>, LogError> {
    let Some((dir, name)) = logging.file_parts() else {
        return Ok(None);
    };
    let path = logging.file.clone();
    LogFile::open(FileSettings {
        dir: dir.to_owned(),
        name: name.to_owned(),
        rotation: logging.file_rotation,
        max_bytes: logging.file_max_bytes,
        keep: logging.file_keep.max(1),
    })
    .map(Some)
    .map_err(|error| match error {
        OpenError::Daily(source) => LogError::File { path, source },
        OpenError::Size(source) => LogError::SizeFile { path, source },
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
    use tracing_subscriber::fmt::writer::MakeWriterExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&logging.filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer.with_filter(not_a_clients_repeat));
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

/// The HTTP layer's own lines (actix-http's: a request head too large or malformed, a
/// connection's I/O error) are each about one client's connection, and a client can make one
/// per connection it opens, before the perimeter sees it (the client is answered 431 or 400):
/// at ERROR, unthrottled, any port scanner filled the log and paged whoever alerts on errors
/// (attack run 58, F3). Those at WARN and ERROR are written at most once a second, as the
/// server's own warnings that a client could repeat are; the rest are dropped.
fn not_a_clients_repeat(meta: &tracing::Metadata<'_>) -> bool {
    static LAST: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // Warnings and errors only: the debug lines an operator turned on are all written.
    *meta.level() > tracing::Level::WARN
        || !meta.target().starts_with("actix_http::")
        || crate::first_this_second(&LAST)
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
    if is_plain(text) || is_quoted(text) {
        writer.write_str(text)
    } else {
        write!(writer, "{text:?}")
    }
}

/// Whether `text` is a plain token: ASCII graphic characters other than `"`, `\` and `=`.
fn is_plain(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\\' | b'='))
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

/// Writes one `info` line of `target` with `message` and the fields `fields` adds, straight to
/// the background writer of [`install`], as the `fmt` layer would have written the event (see
/// the module docs), timestamped `at` (a clock read the caller made already: see
/// [`WallClock`]). Returns `false`, having written nothing, when that path is not open: no
/// [`install`] (or ANSI colors), a span is current (the line would carry it), the clock is
/// before 1970 or past 9999, or the thread is already writing one; the caller then logs the
/// event through `tracing`.
pub(crate) fn write_direct(
    event: &EventName,
    at: Instant,
    fields: impl FnOnce(&mut Line<'_>),
) -> bool {
    let Some(direct) = DIRECT.get() else {
        return false;
    };
    // Inside a span the `fmt` layer would write the span's context too. Asked of the
    // dispatcher directly: `Span::current` also builds and drops a handle.
    if tracing::dispatcher::get_default(|dispatch| dispatch.current_span().id().is_some()) {
        return false;
    }
    LINE.with(|state| {
        let Ok(mut state) = state.try_borrow_mut() else {
            return false;
        };
        let state = &mut *state;
        let Some(now) = state.wall.since_epoch(at) else {
            return false;
        };
        if now.as_secs() >= YEAR_10000 {
            return false;
        }
        let out = &mut state.out;
        out.clear();
        let stamp = (&mut state.clock, now.as_secs(), now.subsec_micros());
        format_line(out, direct.json, stamp, event, fields);
        // Lossy: a full buffer drops the line and counts it, as for any other line.
        direct.writer.push(out.as_bytes());
        if out.capacity() > SCRATCH_KEEP {
            *out = String::new();
        }
        true
    })
}

/// Appends the line (newline included) of an `info` event at this time (the clock, the Unix
/// second, the microseconds), as the `fmt` layer formats it in the text or JSON format.
fn format_line(
    out: &mut String,
    json: bool,
    (clock, second, micros): (&mut Clock, u64, u32),
    event: &EventName,
    fields: impl FnOnce(&mut Line<'_>),
) {
    if json {
        out.push_str("{\"timestamp\":\"");
    }
    clock.push(out, second, micros);
    out.push_str(if json {
        event.json_head
    } else {
        event.text_head
    });
    fields(&mut Line { out, json });
    if json {
        out.push_str(event.json_tail);
    } else {
        out.push('\n');
    }
}

/// An `info` event's target and message as each format writes them around the fields, put
/// together at compile time by [`event_name!`]: the text format's `  INFO target: message`,
/// the JSON format's level and message after the timestamp, and its target at the end.
pub(crate) struct EventName {
    text_head: &'static str,
    json_head: &'static str,
    json_tail: &'static str,
}

impl EventName {
    /// Use [`event_name!`], which writes the three parts from the target and message.
    pub(crate) const fn new(
        text_head: &'static str,
        json_head: &'static str,
        json_tail: &'static str,
    ) -> Self {
        Self {
            text_head,
            json_head,
            json_tail,
        }
    }

    /// The target, as the text format wrote it.
    #[cfg(test)]
    pub(crate) fn target(&self) -> &'static str {
        let head = self.text_head.trim_start_matches("  INFO ");
        &head[..head.find(": ").unwrap_or(head.len())]
    }
}

/// The [`EventName`] of an `info` event of this target and message, both literals that JSON
/// writes as they are (no `"`, `\` or control character).
macro_rules! event_name {
    ($target:literal, $message:literal) => {
        $crate::observe::telemetry::EventName::new(
            concat!("  INFO ", $target, ": ", $message),
            concat!("\",\"level\":\"INFO\",\"message\":\"", $message, "\""),
            concat!(",\"target\":\"", $target, "\"}\n"),
        )
    };
}
pub(crate) use event_name;

/// What a line writes ahead of a value, as each format writes it: a field's name (` name=`,
/// `,"name":`, from [`field_name!`]), or fields whose values are known when the code is
/// written (or once per process or session) joined with the name of the field after them,
/// so that each is one copy into the line.
#[derive(Clone, Copy)]
pub(crate) struct Lead {
    text: &'static str,
    json: &'static str,
}

impl Lead {
    /// The text and JSON forms; each must be what the `fmt` layer writes in that format
    /// (the byte-for-byte tests here and in `access` compare them).
    pub(crate) const fn new(text: &'static str, json: &'static str) -> Self {
        Self { text, json }
    }
}

/// The [`Lead`] of a field named by this literal, which JSON writes as it is.
macro_rules! field_name {
    ($name:literal) => {
        $crate::observe::telemetry::Lead::new(
            concat!(" ", $name, "="),
            concat!(",\"", $name, "\":"),
        )
    };
}
pub(crate) use field_name;

/// 10000-01-01T00:00:00Z in Unix seconds: the timestamp format has four digits of year.
const YEAR_10000: u64 = 253_402_300_800;

thread_local! {
    /// The line [`write_direct`] builds, and its clocks.
    static LINE: RefCell<LineState> = const {
        RefCell::new(LineState {
            out: String::new(),
            clock: Clock { second: u64::MAX, prefix: String::new() },
            wall: WallClock { anchor: None },
        })
    };
}

struct LineState {
    out: String,
    clock: Clock,
    wall: WallClock,
}

/// The wall-clock time of a moment the caller read on the monotonic clock (an access line's
/// is the moment its request ended, read for its duration): the time of day of an anchor,
/// a pair of readings of the two clocks, plus the monotonic time since. A reading of the
/// time of day cost a line about 30 ns here (a `clock_gettime`, some 1.3 % of a request).
/// The two clocks advance at the same rate (NTP slews both); a step of the time of day
/// (`settimeofday`, a resumed VM) shows in a thread's lines at its next anchor, which is
/// taken again once the anchor is [`WallClock::REANCHOR`] old.
struct WallClock {
    anchor: Option<(Instant, Duration)>,
}

impl WallClock {
    /// How long an anchor serves.
    const REANCHOR: Duration = Duration::from_millis(100);

    /// The time since 1970 at `at`; `None` before 1970.
    fn since_epoch(&mut self, at: Instant) -> Option<Duration> {
        // One subtraction of the two moments while the anchor serves (`Instant`'s
        // arithmetic is some 40 instructions a call).
        if let Some((instant, wall)) = self.anchor {
            if let Some(since) = at.checked_duration_since(instant) {
                if since < Self::REANCHOR {
                    return wall.checked_add(since);
                }
            }
        }
        let instant = Instant::now();
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
        self.anchor = Some((instant, wall));
        // `at` was read before the anchor.
        wall.checked_sub(instant.saturating_duration_since(at))
    }
}

/// The `fmt` layer's timestamp (`2026-12-02T00:32:22.122311Z`, UTC), its date and time to
/// the second formatted once a second.
struct Clock {
    second: u64,
    /// `YYYY-MM-DDTHH:MM:SS.` of `second`.
    prefix: String,
}

impl Clock {
    /// Appends the timestamp of `second` (since 1970, below [`YEAR_10000`]) and `micros`.
    fn push(&mut self, out: &mut String, second: u64, micros: u32) {
        if second != self.second {
            self.second = second;
            self.prefix.clear();
            self.prefix
                .extend(timestamp_prefix(second).into_iter().map(char::from));
        }
        out.push_str(&self.prefix);
        // Six digits, zeros first: those of 1_000_000 + micros but its leading `1`.
        let mut digits = itoa::Buffer::new();
        out.push_str(&digits.format(1_000_000 + micros.min(999_999))[1..]);
        out.push('Z');
    }
}

/// `YYYY-MM-DDTHH:MM:SS.` of a Unix second (UTC, proleptic Gregorian), as
/// `tracing_subscriber`'s `SystemTime` writes it.
fn timestamp_prefix(second: u64) -> [u8; 20] {
    let days = (second / 86_400) as i64;
    let in_day = second % 86_400;
    // Days to civil date (H. Hinnant's algorithm), from 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let mut out = *b"0000-00-00T00:00:00.";
    let mut put = |at: usize, width: usize, value: u64| {
        let mut value = value;
        for i in (at..at + width).rev() {
            out[i] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, 4, year as u64);
    put(5, 2, month as u64);
    put(8, 2, day as u64);
    put(11, 2, in_day / 3600);
    put(14, 2, in_day / 60 % 60);
    put(17, 2, in_day % 60);
    out
}

/// The fields of a [`write_direct`] line, each written as the `fmt` layer writes a field of
/// that kind: after the message, in the order they are added.
pub(crate) struct Line<'a> {
    out: &'a mut String,
    json: bool,
}

impl Line<'_> {
    /// What goes ahead of the next value: a field's name, or fields joined with it.
    pub(crate) fn lead(&mut self, lead: Lead) {
        self.out
            .push_str(if self.json { lead.json } else { lead.text });
    }

    /// An unsigned integer field (`name = value`).
    pub(crate) fn u64(&mut self, name: Lead, value: u64) {
        self.lead(name);
        self.u64_value(value);
    }

    /// The value of an unsigned integer field whose name was written.
    pub(crate) fn u64_value(&mut self, value: u64) {
        self.out.push_str(itoa::Buffer::new().format(value));
    }

    /// The value of a signed integer field whose name was written.
    pub(crate) fn i64_value(&mut self, value: i64) {
        self.out.push_str(itoa::Buffer::new().format(value));
    }

    /// Bytes written so far (of the line, or of a [`render`](Self::render)ing).
    pub(crate) fn written(&self) -> usize {
        self.out.len()
    }

    /// Fields [`render`](Self::render) wrote, as they were written.
    pub(crate) fn rendered(&mut self, fields: &str) {
        self.out.push_str(fields);
    }

    /// The fields `fields` writes, written apart from the line (for [`rendered`](Self::rendered)
    /// to add them to this line and others of the same log).
    pub(crate) fn render(&self, fields: impl FnOnce(&mut Line<'_>)) -> String {
        let mut out = String::new();
        fields(&mut Line {
            out: &mut out,
            json: self.json,
        });
        out
    }

    /// The value of a field given as `%value` whose value is `quoted`, a quoted string
    /// whose every `"` and `\` inside is escaped, that has no control or non-ASCII
    /// character: such a value is written as it is, in the text and JSON formats alike.
    pub(crate) fn quoted_value(&mut self, quoted: &str) {
        self.out.push_str(quoted);
    }

    /// A field given as `%value`, `rendered` being what `value` displays as: in the text
    /// format bare when a plain token or already quoted, else quoted ([`TextFields`]).
    pub(crate) fn display(&mut self, name: Lead, rendered: &str) {
        self.lead(name);
        self.display_value(rendered);
    }

    /// The value of a [`display`](Self::display) field whose name was written, that displays
    /// as `token`: a plain token in which JSON escapes nothing (a JSON number's text), written
    /// without looking at it (in JSON, between quotes).
    pub(crate) fn token_value(&mut self, token: &str) {
        if self.json {
            self.out.push('"');
            self.out.push_str(token);
            self.out.push('"');
        } else {
            self.out.push_str(token);
        }
    }

    /// The value of a [`display`](Self::display) field whose name was written.
    pub(crate) fn display_value(&mut self, rendered: &str) {
        if self.json {
            push_json_str(self.out, rendered);
        } else {
            push_token(self.out, rendered);
        }
    }
}

/// Appends `text` as `serde_json` writes a string: `"`, `\\` and C0 controls escaped (`\\n`,
/// `\\u001b`, …), the rest as it is.
fn push_json_str(out: &mut String, text: &str) {
    out.push('"');
    let bytes = text.as_bytes();
    let mut copied = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        if byte >= 0x20 && byte != b'"' && byte != b'\\' {
            continue;
        }
        let escape: &str = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&text[copied..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        } else {
            out.push_str(escape);
        }
        copied = i + 1;
    }
    out.push_str(&text[copied..]);
    out.push('"');
}

/// Appends `text` as `{:?}` writes a `&str` (quoted, escapes as in a Rust string literal);
/// runs that need no escape are copied whole.
fn push_debug_str(out: &mut String, text: &str) {
    out.push('"');
    let bytes = text.as_bytes();
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if !DEBUG_SPECIAL[usize::from(byte)] {
            i += 1;
            continue;
        }
        out.push_str(&text[copied..i]);
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0 => out.push_str("\\0"),
            1..=0x7f => {
                let _ = write!(out, "\\u{{{byte:x}}}");
            }
            _ => {
                // Outside ASCII: `char::escape_debug` is what `{:?}` of a `&str` writes
                // for a character (escaped when not printable or grapheme-extending).
                let c = text[i..].chars().next().unwrap_or_default();
                let escaped = c.escape_debug();
                if escaped.len() == 1 {
                    out.push(c);
                } else {
                    out.extend(escaped);
                }
                i += c.len_utf8();
                copied = i;
                continue;
            }
        }
        i += 1;
        copied = i;
    }
    out.push_str(&text[copied..]);
    out.push('"');
}

/// The bytes [`push_debug_str`] looks at twice: all but printable ASCII other than `"` and
/// `\\`.
static DEBUG_SPECIAL: [bool; 256] = {
    let mut table = [true; 256];
    let mut byte = 0x20;
    while byte < 0x7f {
        table[byte] = byte == b'"' as usize || byte == b'\\' as usize;
        byte += 1;
    }
    table
};

/// [`write_token`] into a `String`.
fn push_token(out: &mut String, text: &str) {
    if is_plain(text) || is_quoted(text) {
        out.push_str(text);
    } else {
        push_debug_str(out, text);
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
    fn debug_strings_are_written_as_debug_writes_them() {
        let mut samples: Vec<String> = (0u8..0x80).map(|b| char::from(b).to_string()).collect();
        samples.extend(
            [
                "",
                "plain",
                "a \"q\" \\ b\n\r\t\0\u{1}\u{1b}\u{7f}",
                "é café ünïcödé 日本語 🎉",
                "\u{301}combining at start, in the middle e\u{301}",
                "\u{200b}\u{200d}\u{feff}\u{2028}\u{85}\u{9b}\u{a0}\u{ad}",
                "{\"name\":\"echo\",\"arguments\":{\"text\":\"x\"}}",
                "\u{10ffff}\u{e000}\u{fffd}",
            ]
            .map(str::to_owned),
        );
        for text in samples {
            let mut out = String::new();
            push_debug_str(&mut out, &text);
            assert_eq!(out, format!("{text:?}"));
        }
    }

    #[test]
    fn json_strings_are_written_as_serde_json_writes_them() {
        let mut samples: Vec<String> = (0u8..0x80).map(|b| char::from(b).to_string()).collect();
        samples.extend(
            [
                "",
                "a \"q\" \\ /\u{8}\u{c}\n\r\t\u{0}\u{1f}\u{7f}\u{85}é🎉",
                "{\"a\":1}",
            ]
            .map(str::to_owned),
        );
        for text in samples {
            let mut out = String::new();
            push_json_str(&mut out, &text);
            assert_eq!(out, serde_json::to_string(&text).expect("json"));
        }
    }

    #[test]
    fn timestamps_are_those_of_the_fmt_layer() {
        let prefix = |second| String::from_utf8(timestamp_prefix(second).to_vec()).expect("ascii");
        assert_eq!(prefix(0), "1970-01-01T00:00:00.");
        assert_eq!(prefix(951_782_400), "2000-02-29T00:00:00.");
        assert_eq!(prefix(951_868_799), "2000-02-29T23:59:59.");
        assert_eq!(prefix(1_798_761_599), "2026-12-31T23:59:59.");
        assert_eq!(prefix(4_107_542_400), "2100-03-01T00:00:00.");
        assert_eq!(prefix(YEAR_10000 - 1), "9999-12-31T23:59:59.");
        let mut clock = Clock {
            second: u64::MAX,
            prefix: String::new(),
        };
        let mut out = String::new();
        clock.push(&mut out, 1_764_635_542, 122_311);
        clock.push(&mut out, 1_764_635_542, 7);
        assert_eq!(
            out,
            "2025-12-02T00:32:22.122311Z2025-12-02T00:32:22.000007Z"
        );
        // Against the layer's own clock, on a second that did not turn meanwhile.
        use tracing_subscriber::fmt::time::FormatTime;
        loop {
            let before = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970");
            let mut theirs = String::new();
            tracing_subscriber::fmt::time::SystemTime
                .format_time(&mut Writer::new(&mut theirs))
                .expect("format");
            let after = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970");
            if before.as_secs() == after.as_secs() {
                assert_eq!(theirs.len(), 27, "{theirs}");
                assert_eq!(theirs[..20], prefix(before.as_secs()), "{theirs}");
                break;
            }
        }
    }

    #[test]
    fn a_lines_time_of_day_is_its_monotonic_moment_from_an_anchor() {
        let mut wall = WallClock { anchor: None };
        let at = Instant::now();
        let derived = wall.since_epoch(at).expect("after 1970");
        let read = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970");
        // The anchor was taken after `at`, the reading after the anchor.
        assert!(derived <= read, "{derived:?} after {read:?}");
        assert!(
            read - derived < Duration::from_secs(5),
            "{derived:?}, {read:?}"
        );
        let (instant, anchor_wall) = wall.anchor.expect("anchored");
        // While the anchor serves: its time of day plus the monotonic time since, and no
        // new anchor.
        let step = Duration::from_millis(40);
        assert!(step < WallClock::REANCHOR);
        assert_eq!(wall.since_epoch(instant + step), Some(anchor_wall + step));
        assert_eq!(wall.anchor, Some((instant, anchor_wall)));
        // A moment before the anchor takes a new one, and is as far before it.
        let before = instant
            .checked_sub(step)
            .expect("a monotonic clock this old");
        let derived = wall.since_epoch(before).expect("after 1970");
        let (renewed, renewed_wall) = wall.anchor.expect("anchored");
        assert!(renewed > instant);
        assert_eq!(derived, renewed_wall - renewed.duration_since(before));
        let off = derived.abs_diff(anchor_wall - step);
        assert!(off < Duration::from_secs(5), "{off:?}");
        // An anchor that has served its time is taken again: a step of the time of day
        // (here an anchor an hour off) lasts no longer than that.
        let hour = Duration::from_secs(3600);
        wall.anchor = Some((instant, anchor_wall + hour));
        assert_eq!(
            wall.since_epoch(instant + step),
            Some(anchor_wall + hour + step)
        );
        let stale = instant + WallClock::REANCHOR;
        let derived = wall.since_epoch(stale).expect("after 1970");
        let (renewed, _) = wall.anchor.expect("anchored");
        assert!(renewed > instant);
        assert!(derived < anchor_wall + hour, "{derived:?}");
    }

    /// The line `format_line` writes, and the one the `fmt` layer (configured as
    /// `subscribe` configures it) writes for the same event, timestamps blanked.
    fn both_lines(json: bool, rendered: &str, plain: &str, code: Option<i64>) -> (String, String) {
        let event = || {
            tracing::info!(
                target: "mcp_ws::access",
                session = 7_u64,
                id = %rendered,
                method = %"tools/call",
                params = %plain,
                outcome = plain,
                code,
                duration_us = 18_446_744_073_709_551_615_u64,
                "request"
            );
        };
        let ours = lines::direct(json, &event_name!("mcp_ws::access", "request"), |line| {
            line.u64(field_name!("session"), 7);
            line.display(field_name!("id"), rendered);
            line.display(field_name!("method"), "tools/call");
            line.display(field_name!("params"), plain);
            // A `&str` value whose `{:?}` is its JSON string too.
            let quoted = format!("{plain:?}");
            assert_eq!(quoted, serde_json::to_string(plain).expect("json"));
            line.lead(field_name!("outcome"));
            line.quoted_value(&quoted);
            if let Some(code) = code {
                line.lead(field_name!("code"));
                line.i64_value(code);
            }
            line.u64(field_name!("duration_us"), u64::MAX);
        });
        (ours, lines::fmt_layer(json, event))
    }

    #[test]
    fn direct_lines_are_the_fmt_layers_byte_for_byte() {
        for json in [false, true] {
            for rendered in [
                "0",
                "\"t1\"",
                "\"a\\\" b=\\\"c\"",
                "a\\u{a}b\\u{1b}c",
                "x=1",
                "",
                "é\u{301}",
                "{\"name\":\"echo\",\"arguments\":{\"text\":\"q\\\"\\\\\"}}",
            ] {
                for (plain, code) in [
                    ("ok", None),
                    ("error", Some(-32_601)),
                    ("a b\"\n", Some(i64::MIN)),
                ] {
                    let (ours, theirs) = both_lines(json, rendered, plain, code);
                    assert_eq!(ours, theirs, "json {json}, {rendered:?}, {plain:?}");
                }
            }
        }
    }
}

/// The lines of the two writers, for tests that compare them byte for byte.
#[cfg(test)]
pub(crate) mod lines {
    use super::*;

    /// A writer the tests read back.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// `line` with its timestamp blanked.
    fn blank(line: &str) -> String {
        let at = line.find('T').map_or(0, |t| t.saturating_sub(10));
        format!(
            "{}<time>{}",
            &line[..at],
            line.get(at + 27..).unwrap_or_default()
        )
    }

    /// What the `fmt` layer, configured as `subscribe` configures it for this format,
    /// writes for the events `event` logs, timestamps blanked.
    pub(crate) fn fmt_layer(json: bool, event: impl Fn()) -> String {
        let captured = Captured::default();
        let writer = {
            let captured = captured.clone();
            move || captured.clone()
        };
        let builder = tracing_subscriber::fmt().with_writer(writer);
        if json {
            let subscriber = builder
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(true)
                .finish();
            tracing::subscriber::with_default(subscriber, event);
        } else {
            let subscriber = builder.with_ansi(false).fmt_fields(TextFields).finish();
            tracing::subscriber::with_default(subscriber, event);
        }
        let text = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf-8");
        blank(&text)
    }

    /// The line [`write_direct`] writes of `event` with the fields `fields` writes, its
    /// timestamp blanked.
    pub(crate) fn direct(
        json: bool,
        event: &EventName,
        fields: impl FnOnce(&mut Line<'_>),
    ) -> String {
        let mut ours = String::new();
        let mut clock = Clock {
            second: u64::MAX,
            prefix: String::new(),
        };
        format_line(&mut ours, json, (&mut clock, 0, 0), event, fields);
        blank(&ours)
    }
}
