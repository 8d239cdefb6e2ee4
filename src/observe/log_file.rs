//! The log's file (`logging.file`): rotated by day (tracing-appender's daily appender,
//! `FILE.YYYY-MM-DD`, the days beyond `file_keep` deleted here) or by size (here: `FILE`, then
//! `FILE.1`, `FILE.2`, …), and begun again when the file being written is deleted while the
//! server runs.
//!
//! [`LogFile`] is an [`io::Write`] for the log's writer thread of `telemetry::install` (a
//! batch of whole lines a write, off the event loops), or, behind a lock, for the `fmt`
//! layer of `telemetry::init_with` (a line a write, on the thread that logs, as every write
//! of that simpler path is).
//!
//! The rotation by size is written here rather than taken from a crate: the one tried
//! (logroller 0.1) renamed every numbered file from the highest index found in the directory
//! down, so a stray `FILE.20261205` cost twenty million renames a rotation, made its renames
//! in a thread of its own, and left `FILE.pending.N` files behind when the process ended
//! first. This one touches `FILE.1` to `FILE.<file_keep - 1>` only, on the writing thread.

use crate::config::FileRotation;
use crate::observe::log_writer::FailureNotice;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tracing_appender::rolling::{InitError, RollingFileAppender, Rotation};

/// Why the file could not be opened (`telemetry` makes it a `LogError`).
#[derive(Debug)]
pub(crate) enum OpenError {
    /// The daily file (tracing-appender's error).
    Daily(InitError),
    /// The file rotated by size.
    Size(io::Error),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Daily(error) => error.fmt(f),
            Self::Size(error) => error.fmt(f),
        }
    }
}

/// What a writer of `logging.file` is made from.
pub(crate) struct FileSettings {
    /// The file's directory (it exists: the settings were validated).
    pub(crate) dir: PathBuf,
    /// The file's name.
    pub(crate) name: OsString,
    /// By day or by size.
    pub(crate) rotation: FileRotation,
    /// With rotation by size, the size a file does not pass.
    pub(crate) max_bytes: u64,
    /// Files kept in all, the one being written included; at least one.
    pub(crate) keep: usize,
}

/// The log file, made again once the file it was writing is gone (an operator freeing disk):
/// it would go on writing into the deleted file, whose space stays taken while it is open,
/// until the day turned (daily) or for good (by size). The check is a `stat`, made at a write
/// at most every [`CHECK_EVERY`]: `init_with`'s writer writes a line a write, and made one a
/// line.
pub(crate) struct LogFile {
    writer: Rotating,
    settings: FileSettings,
    /// A failure to make the writer again.
    reopen: FailureNotice,
    /// When the next write looks whether the file is still there.
    next_check: Instant,
    /// Daily: the day the writer was made for (it is made again as each day begins).
    day: String,
}

/// How often a write looks whether the file it writes is still there (and, daily, whether
/// the day turned): the background writer writes a batch at least this often anyway.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// A writer of `logging.file`.
enum Rotating {
    Daily(RollingFileAppender),
    Size(BySize),
}

impl LogFile {
    /// The file of `settings`, opened (daily: the files beyond `keep` deleted; by size: the
    /// numbered files from `FILE.<keep>` on deleted).
    ///
    /// # Errors
    /// When the file cannot be opened.
    pub(crate) fn open(settings: FileSettings) -> Result<Self, OpenError> {
        Ok(Self {
            writer: settings.open()?,
            settings,
            reopen: FailureNotice::default(),
            next_check: Instant::now() + CHECK_EVERY,
            day: utc_date(),
        })
    }

    /// Makes the writer again if the file it writes is gone, or (daily) the day turned.
    fn reopen_if_gone(&mut self) {
        let today = match self.settings.rotation {
            FileRotation::Daily => Some(utc_date()),
            FileRotation::Size => None,
        };
        let day_turned = today.as_ref().is_some_and(|today| *today != self.day);
        // Only a file known to be gone: a `stat` that fails otherwise (no permission to
        // look) proves nothing, and would make a writer again at every check. At the turn of
        // the day the daily writer is made again (if the appender began the new day's file
        // at a write before this check, the same file, appended to): its pruning runs.
        if !day_turned && !matches!(self.settings.current().try_exists(), Ok(false)) {
            return;
        }
        match self.settings.open() {
            Ok(writer) => {
                self.writer = writer;
                self.day = today.unwrap_or_default();
                self.reopen.ended();
            }
            // The old writer stays (into the deleted file, or, by size, the file it was
            // renamed to): lines are kept where they can be.
            Err(error) => self.reopen.failed(format_args!(
                "logging.file: cannot open {} again: {error}; writing on to the file it \
                 replaces",
                self.settings.current().display()
            )),
        }
    }
}

impl FileSettings {
    /// A new writer.
    fn open(&self) -> Result<Rotating, OpenError> {
        match self.rotation {
            FileRotation::Daily => {
                // Pruned here, not by tracing-appender: it counts every file whose name
                // begins with FILE's (an archive `FILE.gz`, the `FILE.1` of an earlier
                // rotation by size), deletes the oldest by creation time, and at a restart
                // within the day counted today's file as one to prune (with `keep = 1`,
                // deleting it). The writer is made again as each day begins (see `write`),
                // so this runs at start and at each new day, as the appender's did.
                delete_days_beyond_keep(self, &utc_date());
                RollingFileAppender::builder()
                    .rotation(Rotation::DAILY)
                    .filename_prefix(self.name.to_string_lossy())
                    .build(&self.dir)
                    .map(Rotating::Daily)
                    .map_err(OpenError::Daily)
            }
            FileRotation::Size => BySize::open(self)
                .map(Rotating::Size)
                .map_err(OpenError::Size),
        }
    }

    /// The file a writer writes now: today's (UTC) for a daily one.
    fn current(&self) -> PathBuf {
        match self.rotation {
            FileRotation::Size => self.dir.join(&self.name),
            // The name as the appender is given it (`to_string_lossy`).
            FileRotation::Daily => {
                self.dir
                    .join(format!("{}.{}", self.name.to_string_lossy(), utc_date()))
            }
        }
    }
}

/// Today's date (UTC) as the daily files are named: `YYYY-MM-DD`.
fn utc_date() -> String {
    let today = time::OffsetDateTime::now_utc().date();
    format!(
        "{:04}-{:02}-{:02}",
        today.year(),
        u8::from(today.month()),
        today.day()
    )
}

/// Deletes the daily files `FILE.YYYY-MM-DD` but the `keep` newest by the date in their
/// names, `today`'s counted among them whether it exists yet or not (it is the one written)
/// and never deleted. No other name is touched.
fn delete_days_beyond_keep(settings: &FileSettings, today: &str) {
    let Ok(entries) = fs::read_dir(&settings.dir) else {
        return;
    };
    let name = settings.name.to_string_lossy();
    let mut days: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let date = date_of(&entry.file_name(), &name)?;
            let other_day = date != today && entry.file_type().is_ok_and(|t| t.is_file());
            other_day.then(|| (date, entry.path()))
        })
        .collect();
    // Newest first (`YYYY-MM-DD` sorts as the dates do).
    days.sort_unstable_by(|a, b| b.0.cmp(&a.0));
    for (_, path) in days.into_iter().skip(settings.keep.saturating_sub(1)) {
        // One that cannot be deleted stays; it is not written to.
        let _ = fs::remove_file(path);
    }
}

/// `YYYY-MM-DD` when `file_name` is `name.YYYY-MM-DD` (digits where the format has them).
fn date_of(file_name: &OsStr, name: &str) -> Option<String> {
    let date = file_name
        .to_str()?
        .strip_prefix(name)?
        .strip_prefix('.')?
        .as_bytes();
    let shape = date.len() == 10
        && date.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        });
    shape.then(|| String::from_utf8_lossy(date).into_owned())
}

impl Write for LogFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let now = Instant::now();
        if now >= self.next_check {
            self.next_check = now + CHECK_EVERY;
            self.reopen_if_gone();
        }
        match &mut self.writer {
            Rotating::Daily(writer) => writer.write(buf),
            Rotating::Size(writer) => writer.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.writer {
            Rotating::Daily(writer) => writer.flush(),
            Rotating::Size(writer) => writer.flush(),
        }
    }
}

/// `FILE`, written until the next write would take it past `max_bytes`; it is then renamed
/// `FILE.1`, after `FILE.1` became `FILE.2` and so on (`FILE.<keep - 1>` renamed over, so
/// gone). With one file kept, `FILE` is emptied instead. A write is never split: one larger
/// than `max_bytes` fills a file of its own, and an empty file is never rotated.
struct BySize {
    file: File,
    /// `FILE`, the one written.
    path: PathBuf,
    /// Bytes in `file`.
    written: u64,
    max_bytes: u64,
    keep: usize,
    /// A rotation's failure.
    rotation: FailureNotice,
}

impl BySize {
    /// `FILE` opened to append (a restart goes on with it, its size counted), and the
    /// numbered files that `keep` no longer keeps deleted.
    fn open(settings: &FileSettings) -> io::Result<Self> {
        let path = settings.dir.join(&settings.name);
        let file = append_to(&path)?;
        let written = file.metadata()?.len();
        delete_beyond_keep(settings);
        Ok(Self {
            file,
            path,
            written,
            max_bytes: settings.max_bytes,
            keep: settings.keep,
            rotation: FailureNotice::default(),
        })
    }

    /// `FILE.n`.
    fn numbered(&self, n: usize) -> PathBuf {
        let mut numbered = self.path.clone().into_os_string();
        numbered.push(format!(".{n}"));
        numbered.into()
    }

    /// Moves the files up one number and begins a new `FILE`.
    ///
    /// Only the unbroken run `FILE.1`, `FILE.2`, … is moved (a file number `file_keep` or
    /// more cannot be reached: a huge `file_keep` costs as many renames as there are files),
    /// and nothing is deleted but by being renamed over: the one numbered `file_keep - 1` by
    /// the one before it. A rotation that fails midway has moved some files up one and left
    /// a gap, which the next one's run stops at: no file is lost to a retry.
    fn rotate(&mut self) -> io::Result<()> {
        let last = self.keep - 1;
        if last == 0 {
            // One file kept: it is begun again in place.
            self.file.set_len(0)?;
            self.written = 0;
            return Ok(());
        }
        let mut run = 0;
        while run < last && self.numbered(run + 1).is_file() {
            run += 1;
        }
        for n in (1..=run.min(last - 1)).rev() {
            fs::rename(self.numbered(n), self.numbered(n + 1))?;
        }
        fs::rename(&self.path, self.numbered(1))?;
        match append_to(&self.path) {
            Ok(file) => {
                self.file = file;
                self.written = 0;
                Ok(())
            }
            Err(error) => {
                // The lines go on into the file just renamed: named `FILE` again, it is the
                // one being written (the files above it are one number higher, a gap at 1).
                let _ = fs::rename(self.numbered(1), &self.path);
                Err(error)
            }
        }
    }
}

impl Write for BySize {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let len = buf.len() as u64;
        if self.written > 0 && self.written.saturating_add(len) > self.max_bytes {
            match self.rotate() {
                Ok(()) => self.rotation.ended(),
                // The lines go on into the file being written (past its size) rather than be
                // lost; the next write tries again.
                Err(error) => self.rotation.failed(format_args!(
                    "logging.file: cannot rotate {}: {error}; writing on to it",
                    self.path.display()
                )),
            }
        }
        if let Err(error) = self.file.write_all(buf) {
            // A batch goes in whole or not at all: what part of it got in (a disk that filled
            // midway) is cut off again, so that no line is left cut to be glued to the next
            // batch's first, the log's writer counts the right lines lost, and the file's
            // size stays what `written` says. Only ever shortened: a file someone else
            // emptied meanwhile is not lengthened with zeros.
            if self
                .file
                .metadata()
                .is_ok_and(|metadata| metadata.len() > self.written)
            {
                let _ = self.file.set_len(self.written);
            }
            return Err(error);
        }
        self.written = self.written.saturating_add(len);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Deletes `FILE.n` for every `n` from `keep` on (an earlier run's, with a larger
/// `file_keep`, or a copy named like one): one pass over the directory, at start.
fn delete_beyond_keep(settings: &FileSettings) {
    let Ok(entries) = fs::read_dir(&settings.dir) else {
        return;
    };
    for entry in entries.flatten() {
        let beyond = number_of(&entry.file_name(), &settings.name)
            .is_some_and(|n| n >= settings.keep as u64);
        if beyond && entry.file_type().is_ok_and(|t| t.is_file()) {
            // One that cannot be deleted stays; it is not written to.
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// `n` when `file_name` is `name.n` (`n` decimal digits only, within `u64`).
fn number_of(file_name: &OsStr, name: &OsStr) -> Option<u64> {
    let rest = file_name
        .as_encoded_bytes()
        .strip_prefix(name.as_encoded_bytes())?
        .strip_prefix(b".")?;
    if rest.is_empty() || !rest.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(rest).ok()?.parse().ok()
}

fn append_to(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(dir: &Path, max_bytes: u64, keep: usize) -> FileSettings {
        FileSettings {
            dir: dir.to_owned(),
            name: "log".into(),
            rotation: FileRotation::Size,
            max_bytes,
            keep,
        }
    }

    fn text(dir: &Path, name: &str) -> String {
        fs::read_to_string(dir.join(name)).unwrap_or_else(|_| "<none>".to_owned())
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_deleted_file_is_looked_for_at_most_every_check_interval() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut file = LogFile::open(settings(dir.path(), 1 << 20, 2)).expect("open");
        file.write_all(b"one\n").expect("write");
        fs::remove_file(dir.path().join("log")).expect("rm");
        // Lines written before the next check (as `init_with` writes them, a line a write)
        // are not each a `stat`: they go on into the deleted file. The check's time is set
        // here, not waited for: a loaded machine cannot make this pass for the wrong reason.
        file.next_check = Instant::now() + Duration::from_secs(3600);
        file.write_all(b"two\n").expect("write");
        assert_eq!(
            names(dir.path()),
            Vec::<String>::new(),
            "not looked for yet"
        );
        file.next_check = Instant::now();
        file.write_all(b"three\n").expect("write");
        assert_eq!(
            text(dir.path(), "log"),
            "three\n",
            "begun again at the check"
        );
        assert!(
            file.next_check >= Instant::now() + CHECK_EVERY / 2,
            "the next check is an interval away"
        );
    }

    #[test]
    fn files_move_up_one_number_before_a_write_would_pass_the_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut file = BySize::open(&settings(dir.path(), 10, 3)).expect("open");
        for batch in [
            "aaaa\n",
            "bbbb\n",
            "cccc\n",
            "dddd\n",
            "eeeeeeeeeeeeeee\n",
            "ff\n",
        ] {
            file.write_all(batch.as_bytes()).expect("write");
        }
        // a+b (10 bytes: not past 10), c+d, the long one alone, f: the oldest, a+b, went.
        assert_eq!(names(dir.path()), ["log", "log.1", "log.2"]);
        assert_eq!(text(dir.path(), "log.2"), "cccc\ndddd\n");
        assert_eq!(text(dir.path(), "log.1"), "eeeeeeeeeeeeeee\n");
        assert_eq!(text(dir.path(), "log"), "ff\n");
    }

    #[test]
    fn a_rotation_that_fails_loses_no_file_and_the_next_one_catches_up() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut file = BySize::open(&settings(dir.path(), 10, 4)).expect("open");
        for batch in ["aaaaaaaa\n", "bbbbbbbb\n"] {
            file.write_all(batch.as_bytes()).expect("write");
        }
        // `log.2` cannot be renamed over: `log.1` stays, the lines go on into `log`, past
        // its size, and a retry at each write fails the same way without deleting anything.
        let blocker = dir.path().join("log.2");
        fs::create_dir(&blocker).expect("mkdir");
        fs::write(blocker.join("x"), "").expect("write");
        for batch in ["cccccccc\n", "dddddddd\n"] {
            file.write_all(batch.as_bytes()).expect("write");
        }
        assert_eq!(text(dir.path(), "log.1"), "aaaaaaaa\n");
        assert_eq!(text(dir.path(), "log"), "bbbbbbbb\ncccccccc\ndddddddd\n");
        fs::remove_dir_all(&blocker).expect("rmdir");
        file.write_all(b"eeeeeeee\n").expect("write");
        assert_eq!(names(dir.path()), ["log", "log.1", "log.2"]);
        assert_eq!(text(dir.path(), "log.2"), "aaaaaaaa\n");
        assert_eq!(text(dir.path(), "log.1"), "bbbbbbbb\ncccccccc\ndddddddd\n");
        assert_eq!(text(dir.path(), "log"), "eeeeeeee\n");
        // A gap stops the run: `log.2` alone (no `log.1`) is not moved, and stays.
        fs::remove_file(dir.path().join("log.1")).expect("rm");
        file.write_all(b"ffffffff\n").expect("write");
        assert_eq!(names(dir.path()), ["log", "log.1", "log.2"]);
        assert_eq!(text(dir.path(), "log.2"), "aaaaaaaa\n");
        assert_eq!(text(dir.path(), "log.1"), "eeeeeeee\n");
    }

    #[test]
    fn a_huge_file_keep_moves_only_the_files_there_are() {
        // A rotation that walked up to `file_keep` would not end here (it would hang, not
        // fail: the cost itself is not measured in a test).
        let dir = tempfile::tempdir().expect("tempdir");
        let mut file = BySize::open(&settings(dir.path(), 4, usize::MAX)).expect("open");
        for batch in ["aaaa\n", "bbbb\n", "cccc\n"] {
            file.write_all(batch.as_bytes()).expect("write");
        }
        assert_eq!(names(dir.path()), ["log", "log.1", "log.2"]);
        assert_eq!(text(dir.path(), "log.2"), "aaaa\n");
    }

    #[test]
    fn one_file_kept_is_begun_again_and_a_restart_appends_counting_its_size() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut file = BySize::open(&settings(dir.path(), 10, 1)).expect("open");
        file.write_all(b"aaaaaa\n").expect("write");
        drop(file);
        let mut file = BySize::open(&settings(dir.path(), 10, 1)).expect("reopen");
        file.write_all(b"bb\n").expect("write");
        assert_eq!(text(dir.path(), "log"), "aaaaaa\nbb\n");
        file.write_all(b"cc\n").expect("write");
        assert_eq!(names(dir.path()), ["log"]);
        assert_eq!(text(dir.path(), "log"), "cc\n");
    }

    #[test]
    fn numbered_files_beyond_keep_go_at_start_and_nothing_else_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        for name in [
            "log.1",
            "log.2",
            "log.3",
            "log.20261205",
            "log.99999999999999999999999",
            "log.1.gz",
            "log.x",
            "logs.5",
            "other",
        ] {
            fs::write(dir.path().join(name), "old\n").expect("write");
        }
        let _file = BySize::open(&settings(dir.path(), 10, 3)).expect("open");
        assert_eq!(
            names(dir.path()),
            [
                "log",
                "log.1",
                "log.1.gz",
                "log.2",
                "log.99999999999999999999999",
                "log.x",
                "logs.5",
                "other"
            ]
        );
    }

    #[test]
    fn only_daily_files_beyond_keep_go_the_newest_by_name_and_todays_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Made newest first, so that an order by creation time is not the names' order.
        for name in [
            "log.2026-12-04",
            "log.2026-11-30",
            "log.2026-12-03",
            "log.2026-12-01",
            "log",
            "log.1",
            "log.2",
            "log.2026-12-01.gz",
            "log.2026-1-01",
            "logs.2026-01-01",
            "other",
        ] {
            fs::write(dir.path().join(name), "old\n").expect("write");
        }
        let daily = |keep| FileSettings {
            rotation: FileRotation::Daily,
            ..settings(dir.path(), 10, keep)
        };
        // The names in the directory: these days', and every file not a day's.
        let days_and_the_rest = |days: &[&'static str]| {
            let mut expected = vec![
                "log",
                "log.1",
                "log.2",
                "log.2026-1-01",
                "log.2026-12-01.gz",
                "logs.2026-01-01",
                "other",
            ];
            expected.extend(days);
            expected.sort_unstable();
            expected
        };
        // Today's file not there yet: it is counted all the same.
        delete_days_beyond_keep(&daily(3), "2026-12-05");
        assert_eq!(
            names(dir.path()),
            days_and_the_rest(&["log.2026-12-03", "log.2026-12-04"])
        );
        // A restart within the day, one file kept: the day's own stays.
        fs::write(dir.path().join("log.2026-12-05"), "today\n").expect("write");
        delete_days_beyond_keep(&daily(1), "2026-12-05");
        assert_eq!(names(dir.path()), days_and_the_rest(&["log.2026-12-05"]));
    }

    #[test]
    fn a_file_named_like_a_day_is_read_as_one() {
        assert_eq!(
            date_of(OsStr::new("mcp-ws.log.2026-12-05"), "mcp-ws.log").as_deref(),
            Some("2026-12-05")
        );
        for other in [
            "mcp-ws.log",
            "mcp-ws.log.",
            "mcp-ws.log.2026-12-5",
            "mcp-ws.log.2026-12-05.gz",
            "mcp-ws.log.2026_12_05",
            "mcp-ws.log2026-12-05",
            "mcp-ws.log.1",
        ] {
            assert_eq!(date_of(OsStr::new(other), "mcp-ws.log"), None, "{other}");
        }
    }

    #[test]
    fn a_file_named_like_a_number_is_read_as_one() {
        let name = OsStr::new("mcp-ws.log");
        assert_eq!(number_of(OsStr::new("mcp-ws.log.7"), name), Some(7));
        assert_eq!(number_of(OsStr::new("mcp-ws.log.07"), name), Some(7));
        for other in [
            "mcp-ws.log",
            "mcp-ws.log.",
            "mcp-ws.log.-1",
            "mcp-ws.log.1a",
            "mcp-ws.logx1",
        ] {
            assert_eq!(number_of(OsStr::new(other), name), None, "{other}");
        }
    }
}
