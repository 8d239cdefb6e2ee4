//! The log's background writer: one buffer that the threads which log append their lines to,
//! and one thread that writes it out in batches, so that logging a line costs its copy under
//! a short lock, with no allocation and no system call on the thread that logs.
//!
//! The writer thread takes the whole buffer at once (swapping in an empty one it keeps for
//! reuse) once it holds [`BATCH_BYTES`], or [`FLUSH_EVERY`] after the thread found lines in
//! it (at a line's arrival when it was idle, else when it finished writing the batch before),
//! or when the log is closed; it writes the batch out and flushes it. The buffer is bounded
//! in lines and in bytes: a line that finds `limit` lines held (the buffer's and the batch
//! being written), or would take them past [`LINE_BYTES`] a line of that limit, is dropped
//! and counted, so a reader that stops reading costs lines, never the threads that log nor
//! the process's memory (long lines, such as a client's long name, would otherwise make the
//! line bound one of gigabytes). The lines a failed write loses (a reader gone, a full disk)
//! are counted with them. A line is formatted by its thread apart and only copied under the
//! lock: formatting it there (tried, `0e90d23`) saved a copy a line but held the one lock
//! every event loop shares about three times as long, which a machine of many cores would
//! queue on.
//! Closing ([`Closer`], at shutdown) writes every line held, waiting at most [`CLOSE_WAIT`]
//! for a stalled reader.
//!
//! Lines keep the order in which their threads took the lock: every line of the process, the
//! `fmt` layer's and the access log's hand-written ones, goes through the same buffer.

use crate::lock;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tracing_subscriber::fmt::MakeWriter;

/// Longest a line waits in the buffer before the writer thread writes it out, beyond the time
/// the batch before it takes to be written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// Bytes the buffer gathers before the writer thread takes it without waiting longer.
///
/// Each batch costs the server's core two context switches (the writer thread wakes, writes,
/// sleeps) besides the write itself. At the shipped configuration's full speed, about 130 MB
/// of access lines a second, 64 KiB batches woke the thread 0.019 times per request and cost
/// 1.27-1.30x the server CPU of a request with the access log off; 1 MiB batches wake it
/// 0.0013 times and cost 1.17-1.22x (`benches/cpu_split.sh`, 2026-12-05). Below that rate
/// the buffer is taken at [`FLUSH_EVERY`] before it fills, so it stays as small as the
/// traffic.
pub(crate) const BATCH_BYTES: usize = 1024 * 1024;

/// Longest closing waits for the writer thread to write what is held.
pub(crate) const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Bytes held per line of the writer's limit, on average: `limit` lines may take at most
/// `limit` KiB (an access line is about 330 bytes; 16 MiB at the default 16,384), and never
/// less than [`MIN_HELD_BYTES`].
pub(crate) const LINE_BYTES: usize = 1024;

/// The least the writer holds whatever its limit in lines: a small `queue_lines` still takes
/// long lines (an access line with 2 KiB of params).
const MIN_HELD_BYTES: usize = 64 * 1024;

/// Capacity a buffer keeps between batches; a larger one (after a burst) is let go.
const KEEP_BYTES: usize = 4 * BATCH_BYTES;

/// A handle on the buffer: what the threads that log write to (it is the `fmt` layer's
/// [`MakeWriter`], and borrowed an [`io::Write`]), each write one line.
#[derive(Clone)]
pub(crate) struct LogWriter {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the writer thread: a first line in an empty buffer, a full batch, the close.
    wake: Condvar,
    /// Tells [`Closer`] the writer thread is done.
    done: Condvar,
    /// Most lines held at once.
    limit: usize,
    /// Most bytes held at once.
    limit_bytes: usize,
    /// Lines dropped for want of room, or lost to a failed write.
    dropped: AtomicU64,
}

#[derive(Default)]
struct State {
    buffer: Vec<u8>,
    /// Lines in `buffer`.
    buffered: usize,
    /// Lines of the batch the writer thread is writing.
    writing: usize,
    /// Bytes of the batch the writer thread is writing.
    writing_bytes: usize,
    closing: bool,
    finished: bool,
}

/// Closes the log when dropped: every line held is written out (at most [`CLOSE_WAIT`] is
/// spent waiting for a stalled reader), and the writer thread ends.
pub(crate) struct Closer {
    shared: Arc<Shared>,
}

impl LogWriter {
    /// A writer to `out` holding at most `limit` lines and `limit` × [`LINE_BYTES`] bytes (at
    /// least [`MIN_HELD_BYTES`]), its thread named `thread_name`.
    /// `out` must not buffer: a line counts as written once `out.write` took it, and what a
    /// buffer lost at its flush would not be counted.
    ///
    /// # Errors
    /// When the thread cannot be started.
    pub(crate) fn spawn<W: Write + Send + 'static>(
        out: W,
        limit: usize,
        thread_name: &str,
    ) -> io::Result<(Self, Closer)> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            done: Condvar::new(),
            limit: limit.max(1),
            limit_bytes: limit.max(1).saturating_mul(LINE_BYTES).max(MIN_HELD_BYTES),
            dropped: AtomicU64::new(0),
        });
        let worker = shared.clone();
        std::thread::Builder::new()
            .name(thread_name.to_owned())
            .spawn(move || worker.run(out))?;
        Ok((
            Self {
                shared: shared.clone(),
            },
            Closer { shared },
        ))
    }

    /// Lines dropped so far because the buffer was full, or lost to a failed write.
    pub(crate) fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Adds one line (`line` holds it whole, newline included), or drops it when the buffer
    /// is full or the log closed.
    pub(crate) fn push(&self, line: &[u8]) {
        let shared = &*self.shared;
        let mut state = lock(&shared.state);
        if state.closing
            || state.buffered + state.writing >= shared.limit
            || state.buffer.len() + state.writing_bytes + line.len() > shared.limit_bytes
        {
            drop(state);
            shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let before = state.buffer.len();
        state.buffer.extend_from_slice(line);
        state.buffered += 1;
        // The writer thread waits for a first line, then for a full batch or its deadline:
        // only those two moments need a wake-up (each a system call).
        let wake = before == 0 || (before < BATCH_BYTES && state.buffer.len() >= BATCH_BYTES);
        drop(state);
        if wake {
            shared.wake.notify_one();
        }
    }
}

impl Write for &LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.push(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Each `fmt` layer event borrows the writer: no handle is cloned per line.
impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = &'a LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

/// A failure of the log's own output, said once on stderr for as long as it lasts: the log
/// cannot carry news of its own failure, and saying it at every write would flood stderr.
#[derive(Default)]
pub(crate) struct FailureNotice {
    /// The failure was said and has not ended since.
    said: bool,
}

impl FailureNotice {
    /// Says `what` (after `mcp-ws: `) on stderr, unless this failure was said already.
    /// stderr's own failure (a reader gone, which may be the failure itself) is ignored: no
    /// reason to panic.
    pub(crate) fn failed(&mut self, what: std::fmt::Arguments<'_>) {
        if !self.said {
            self.said = true;
            let _ = writeln!(io::stderr(), "mcp-ws: {what}");
        }
    }

    /// The failure has ended: the next one is said.
    pub(crate) fn ended(&mut self) {
        self.said = false;
    }
}

/// What writing a batch out came to ([`deliver`]).
struct Delivery {
    /// Lines of the batch that did not get out whole.
    lost: u64,
    /// Whether the bytes that got out end inside a line: its head is in the output, and the
    /// next write must begin a new line first.
    cut: bool,
}

/// Writes `batch` (whole lines) to `out` and flushes it. The lines lost are those not ended
/// by the bytes `out` took before a write failed (`EPIPE` from a reader gone, `ENOSPC` from
/// a full disk) or took nothing: a line cut by the failure counts as lost. `out` must say
/// how much each write took; one that fails after taking part of a write without saying so
/// has all the lines of that write counted (a file rotated by size takes a batch whole or
/// not at all).
fn deliver(out: &mut impl Write, batch: &[u8]) -> Delivery {
    let mut written = 0;
    while written < batch.len() {
        match out.write(&batch[written..]) {
            Ok(0) => break,
            Ok(n) => written += n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    // No writer of the log buffers (stderr, the log files): a flush loses nothing of its own.
    let _ = out.flush();
    Delivery {
        lost: memchr::memchr_iter(b'\n', &batch[written..]).count() as u64,
        cut: written > 0 && batch[written - 1] != b'\n',
    }
}

impl Shared {
    /// The writer thread: batches out until the log is closed and nothing is held.
    fn run<W: Write>(&self, mut out: W) {
        let mut batch = Vec::new();
        let mut lost_lines = FailureNotice::default();
        // Whether the output ends inside a line a failed write cut.
        let mut cut = false;
        loop {
            let mut state = lock(&self.state);
            while state.buffer.is_empty() && !state.closing {
                state = self.wait(state, None);
            }
            if state.buffer.is_empty() {
                break;
            }
            let deadline = Instant::now() + FLUSH_EVERY;
            while !state.closing && state.buffer.len() < BATCH_BYTES {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                state = self.wait(state, Some(deadline - now));
            }
            std::mem::swap(&mut batch, &mut state.buffer);
            state.writing = std::mem::take(&mut state.buffered);
            state.writing_bytes = batch.len();
            drop(state);
            // The head of a line a failed write cut is ended first, so that the next line
            // is not glued to it.
            if cut {
                cut = deliver(&mut out, b"\n").lost > 0;
            }
            // A reader gone (EPIPE) or a full disk loses what this batch had left to write,
            // counted as dropped lines; the next batch is tried anew.
            let delivery = deliver(&mut out, &batch);
            cut |= delivery.cut;
            if delivery.lost > 0 {
                self.dropped.fetch_add(delivery.lost, Ordering::Relaxed);
                // On stderr, which may be what fails (then no one sees it; a pipe no one
                // reads may hold this thread here, as it would for any batch, never the
                // threads that log).
                lost_lines.failed(format_args!(
                    "the log cannot be written; lines are dropped and counted in \
                     mcp_dropped_total{{reason=\"access_log\"}}"
                ));
            } else {
                lost_lines.ended();
            }
            batch.clear();
            if batch.capacity() > KEEP_BYTES {
                batch = Vec::new();
            }
            let mut state = lock(&self.state);
            state.writing = 0;
            state.writing_bytes = 0;
        }
        let mut state = lock(&self.state);
        state.finished = true;
        drop(state);
        self.done.notify_all();
    }

    fn wait<'a>(
        &self,
        state: std::sync::MutexGuard<'a, State>,
        timeout: Option<Duration>,
    ) -> std::sync::MutexGuard<'a, State> {
        match timeout {
            None => self
                .wake
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
            Some(timeout) => {
                self.wake
                    .wait_timeout(state, timeout)
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .0
            }
        }
    }
}

impl Drop for Closer {
    fn drop(&mut self) {
        let shared = &*self.shared;
        let mut state = lock(&shared.state);
        state.closing = true;
        shared.wake.notify_one();
        let deadline = Instant::now() + CLOSE_WAIT;
        while !state.finished {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            state = shared
                .done
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader's side: what reached it, and a gate that stalls it while closed.
    #[derive(Clone, Default)]
    struct Reader {
        text: Arc<Mutex<Vec<u8>>>,
        writes: Arc<AtomicU64>,
        stalled: Arc<(Mutex<bool>, Condvar)>,
    }

    impl Write for Reader {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let (stalled, resumed) = &*self.stalled;
            let mut stalled = lock(stalled);
            while *stalled {
                stalled = resumed.wait(stalled).expect("gate");
            }
            lock(&self.text).extend_from_slice(buf);
            self.writes.fetch_add(1, Ordering::Relaxed);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Reader {
        fn text(&self) -> String {
            String::from_utf8(lock(&self.text).clone()).expect("utf-8")
        }

        fn stall(&self, stalled: bool) {
            *lock(&self.stalled.0) = stalled;
            self.stalled.1.notify_all();
        }

        /// Waits (at most 5 s) until `lines` lines have reached the reader.
        fn wait_lines(&self, lines: usize) -> String {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let text = self.text();
                if text.lines().count() >= lines || Instant::now() >= deadline {
                    return text;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    #[test]
    fn lines_reach_the_reader_in_order_in_batches_and_all_at_close() {
        let reader = Reader::default();
        let (writer, closer) =
            LogWriter::spawn(reader.clone(), 100_000, "log-test").expect("spawn");
        // A line alone reaches the reader without more lines coming.
        writer.push(b"first\n");
        assert_eq!(reader.wait_lines(1), "first\n");
        // Many lines from several threads: each whole, each thread's in its order, batched.
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let writer = writer.clone();
                std::thread::spawn(move || {
                    for n in 0..5_000 {
                        writer.push(format!("t{t} {n}\n").as_bytes());
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread");
        }
        drop(closer);
        let text = reader.text();
        assert_eq!(text.lines().count(), 20_001);
        for t in 0..4 {
            let own: Vec<usize> = text
                .lines()
                .filter_map(|line| line.strip_prefix(&format!("t{t} ")))
                .map(|n| n.parse().expect("number"))
                .collect();
            assert_eq!(own, (0..5_000).collect::<Vec<_>>(), "thread {t}");
        }
        let writes = reader.writes.load(Ordering::Relaxed);
        assert!(writes < 2_000, "{writes} writes for 20,001 lines");
        assert_eq!(writer.dropped(), 0);
        // After the close, lines are dropped and counted.
        writer.push(b"late\n");
        assert_eq!(writer.dropped(), 1);
        assert!(!reader.text().contains("late"));
    }

    #[test]
    fn a_stalled_reader_costs_lines_beyond_the_limit_not_the_caller() {
        let reader = Reader::default();
        reader.stall(true);
        let (writer, closer) = LogWriter::spawn(reader.clone(), 10, "log-test").expect("spawn");
        // The writer thread takes the first line and blocks writing it; then 9 more fit.
        writer.push(b"0\n");
        let deadline = Instant::now() + Duration::from_secs(5);
        while lock(&writer.shared.state).writing == 0 {
            assert!(Instant::now() < deadline, "the batch was not taken");
            std::thread::sleep(Duration::from_millis(5));
        }
        let started = Instant::now();
        for n in 1..1_000 {
            writer.push(format!("{n}\n").as_bytes());
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "pushing blocked"
        );
        assert_eq!(writer.dropped(), 990);
        reader.stall(false);
        drop(closer);
        let kept: Vec<String> = reader.text().lines().map(str::to_owned).collect();
        assert_eq!(kept, (0..10).map(|n| n.to_string()).collect::<Vec<_>>());
    }

    #[test]
    fn long_lines_are_held_within_the_limit_in_bytes_too() {
        let reader = Reader::default();
        reader.stall(true);
        // 100 lines: at most 100 KiB held.
        let (writer, closer) = LogWriter::spawn(reader.clone(), 100, "log-test").expect("spawn");
        let line = |n: u8| {
            let mut line = vec![b'a' + n; 30 * 1024 - 1];
            line.push(b'\n');
            line
        };
        writer.push(&line(0));
        let deadline = Instant::now() + Duration::from_secs(5);
        while lock(&writer.shared.state).writing == 0 {
            assert!(Instant::now() < deadline, "the batch was not taken");
            std::thread::sleep(Duration::from_millis(5));
        }
        // 30 KiB being written: two more lines of 30 KiB fit, a third would pass 100 KiB.
        for n in 1..6 {
            writer.push(&line(n));
        }
        assert_eq!(writer.dropped(), 3, "three lines found no room");
        writer.push(b"short\n");
        assert_eq!(writer.dropped(), 3, "a short line still fits");
        reader.stall(false);
        drop(closer);
        let kept: Vec<u8> = reader.text().lines().map(|l| l.as_bytes()[0]).collect();
        assert_eq!(kept, b"abcs");
    }

    #[test]
    fn a_small_line_limit_still_takes_a_long_line() {
        let reader = Reader::default();
        let (writer, closer) = LogWriter::spawn(reader.clone(), 1, "log-test").expect("spawn");
        let mut line = vec![b'x'; 4 * 1024];
        line.push(b'\n');
        writer.push(&line);
        drop(closer);
        assert_eq!(writer.dropped(), 0);
        assert_eq!(reader.text().len(), line.len());
    }

    #[test]
    fn closing_gives_up_on_a_reader_that_never_reads() {
        let reader = Reader::default();
        reader.stall(true);
        let (writer, closer) = LogWriter::spawn(reader.clone(), 10, "log-test").expect("spawn");
        writer.push(b"stuck\n");
        let started = Instant::now();
        drop(closer);
        let waited = started.elapsed();
        assert!(
            waited >= CLOSE_WAIT && waited < CLOSE_WAIT * 5,
            "{waited:?}"
        );
        reader.stall(false);
    }

    /// Takes `room` bytes, in writes of at most `chunk` after a first write interrupted by a
    /// signal, then fails one write as a pipe whose reader is gone does (a full disk that is
    /// then given room again), and takes whatever comes after.
    #[derive(Clone)]
    struct Breaks {
        taken: Arc<Mutex<Vec<u8>>>,
        room: usize,
        chunk: usize,
        interrupted: bool,
        failed: bool,
    }

    impl Breaks {
        fn new(room: usize) -> Self {
            Self {
                taken: Arc::default(),
                room,
                chunk: 3,
                interrupted: false,
                failed: false,
            }
        }

        fn taken(&self) -> Vec<u8> {
            lock(&self.taken).clone()
        }
    }

    impl Write for Breaks {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if !self.interrupted {
                self.interrupted = true;
                return Err(io::ErrorKind::Interrupted.into());
            }
            let mut taken = lock(&self.taken);
            let n = if self.failed {
                buf.len()
            } else {
                buf.len().min(self.chunk).min(self.room - taken.len())
            };
            if n == 0 {
                self.failed = true;
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            taken.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_failed_write_counts_the_lines_it_did_not_deliver_whole() {
        let batch = b"one\ntwo\nthree\nfour\n";
        // A failure at every byte: from all four lines lost to none.
        for room in 0..=batch.len() {
            let mut out = Breaks::new(room);
            let delivery = deliver(&mut out, batch);
            assert_eq!(out.taken(), batch[..room], "room {room}");
            let unended = batch[room..].iter().filter(|&&b| b == b'\n').count() as u64;
            assert_eq!(delivery.lost, unended, "room {room}");
            let inside_a_line = !matches!(room, 0 | 4 | 8 | 14 | 19);
            assert_eq!(delivery.cut, inside_a_line, "room {room}");
        }
        // Nothing to lose: written whole, the interruption retried.
        let delivery = deliver(&mut Breaks::new(usize::MAX), batch);
        assert_eq!((delivery.lost, delivery.cut), (0, false));
    }

    #[test]
    fn a_line_cut_by_a_failed_write_is_ended_before_the_next_batch() {
        let out = Breaks::new(6);
        let (writer, closer) = LogWriter::spawn(out.clone(), 100, "log-test").expect("spawn");
        writer.push(b"first line\n");
        let deadline = Instant::now() + Duration::from_secs(5);
        while writer.dropped() == 0 {
            assert!(Instant::now() < deadline, "the first batch was not written");
            std::thread::sleep(Duration::from_millis(5));
        }
        writer.push(b"second line\n");
        drop(closer);
        assert_eq!(out.taken(), b"first \nsecond line\n");
        assert_eq!(writer.dropped(), 1);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn lines_a_full_disk_refuses_are_counted_as_dropped() {
        // `/dev/full` fails every write with ENOSPC, as a full disk does.
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("open /dev/full");
        let (writer, closer) = LogWriter::spawn(full, 100_000, "log-test").expect("spawn");
        for n in 0..100 {
            writer.push(format!("{n}\n").as_bytes());
        }
        drop(closer);
        assert_eq!(writer.dropped(), 100);
    }
}
