//! The stdio transport: a child process speaking JSON-RPC, one message per line, on its
//! stdin and stdout; its stderr is logged line by line.
//!
//! No child outlives the server. The child leads a process group of its own, so what it
//! starts in turn (`npx` starts `node`) is signalled with it. However the child ends (it
//! crashes or exits, it is stopped, or the runtime it ran on stops), its group is killed the
//! moment it is known to be gone: what it started and left behind in its group dies with it.
//! If this process dies without stopping it (SIGKILL), the kernel kills the child
//! (`PR_SET_PDEATHSIG`), and the child's own children read end-of-file on the stdin they
//! inherited, on which MCP servers exit.

use super::response_id::ResponseId;
use super::{ClientError, Inner, Outgoing};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, watch, Notify};

/// A command to run as a stdio MCP server.
///
/// ```
/// let command = mcp_ws::client::StdioCommand::new("uvx")
///     .args(["mcp-server-time"])
///     .env("LOG_LEVEL", "warn")
///     .cwd("/tmp");
/// assert_eq!(command.program(), "uvx");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct StdioCommand {
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: Option<PathBuf>,
}

impl StdioCommand {
    /// Runs `program` (looked up on `PATH` unless it names a path).
    pub fn new(program: impl Into<String>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
        }
    }

    /// Adds arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable (on top of this process's environment).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Runs in this directory.
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// The program.
    pub fn program(&self) -> &str {
        &self.program
    }
}

/// The child's pipes, until the transport's tasks take them.
struct Pipes {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    stderr: ChildStderr,
}

/// A running child; clones are the same child.
#[derive(Clone)]
pub(crate) struct Process(Arc<ProcessInner>);

struct ProcessInner {
    pid: u32,
    pipes: Mutex<Option<Pipes>>,
    /// Turns `true` once the child has exited (and been reaped), and its group been killed:
    /// the group id is not signalled after that (once the group is empty, a new process may
    /// lead a group of that id).
    exited: watch::Sender<bool>,
    /// Tells the writer to close the child's stdin.
    close_stdin: Notify,
}

impl Process {
    /// Starts the child.
    pub(crate) fn spawn(command: &StdioCommand, label: &str) -> Result<Self, ClientError> {
        let mut cmd = Command::new(&command.program);
        cmd.args(&command.args)
            .envs(command.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if let Some(dir) = &command.cwd {
            cmd.current_dir(dir);
        }
        die_with_parent(&mut cmd);
        start_with_open_files_limit(&mut cmd);
        let mut child = cmd.spawn().map_err(|error| {
            ClientError::Connect(format!("cannot start `{}`: {error}", command.program))
        })?;
        let (Some(pid), Some(stdin), Some(stdout), Some(stderr)) = (
            child.id(),
            child.stdin.take(),
            child.stdout.take(),
            child.stderr.take(),
        ) else {
            return Err(ClientError::Connect(format!(
                "`{}` started without its pipes",
                command.program
            )));
        };
        tracing::debug!(upstream = %label, pid, program = %command.program, "upstream process started");
        Ok(Self(Arc::new(ProcessInner {
            pid,
            pipes: Mutex::new(Some(Pipes {
                child,
                stdin,
                stdout,
                stderr,
            })),
            exited: watch::Sender::new(false),
            close_stdin: Notify::new(),
        })))
    }

    /// The child's process id (and process group id).
    pub(crate) fn pid(&self) -> u32 {
        self.0.pid
    }

    /// Starts the tasks that write `outgoing` to the child, read its stdout into `inner`,
    /// log its stderr, and close the connection when it exits.
    pub(crate) fn run(
        &self,
        inner: &Arc<Inner>,
        outgoing: mpsc::Receiver<Outgoing>,
        max_line: usize,
    ) {
        let Some(pipes) = super::lock(&self.0.pipes).take() else {
            return;
        };
        let label = inner.label().clone();
        // The tasks hold the connection weakly: when every handle is gone, it closes.
        let weak = Arc::downgrade(inner);
        tokio::spawn(write(pipes.stdin, outgoing, self.0.clone()));
        tokio::spawn(read(pipes.stdout, weak.clone(), max_line));
        tokio::spawn(log_stderr(pipes.stderr, label.clone()));
        tokio::spawn(wait(pipes.child, weak, self.0.clone(), label));
    }

    /// Closes the child's stdin and signals its group SIGTERM; SIGKILL after `grace`.
    pub(crate) async fn terminate(&self, grace: Duration) {
        let process = &self.0;
        process.close_stdin.notify_one();
        // A child gone already (crashed, its slot kept until its session ends) had its group
        // killed as it was reaped: the id may lead another group since.
        if *process.exited.borrow() {
            return;
        }
        signal_group(process.pid, Signal::Term);
        let mut exited = process.exited.subscribe();
        if tokio::time::timeout(grace, exited.wait_for(|e| *e))
            .await
            .is_err()
        {
            signal_group(process.pid, Signal::Kill);
            let _ = tokio::time::timeout(Duration::from_secs(1), exited.wait_for(|e| *e)).await;
        }
        // Once the child exited, what it started and left in its group was killed with it
        // (`wait`).
    }

    /// Kills the child's group at once, unless the child is gone (its group was killed as it
    /// went).
    pub(crate) fn kill(&self) {
        self.0.kill_unless_exited();
    }
}

impl ProcessInner {
    /// Kills the child's group at once, unless the child is gone (its group was killed as it
    /// went, and the id may since lead another group).
    fn kill_unless_exited(&self) {
        if !*self.exited.borrow() {
            signal_group(self.pid, Signal::Kill);
        }
    }
}

impl Drop for ProcessInner {
    fn drop(&mut self) {
        // The last handle is gone: nothing will stop the group otherwise.
        self.kill_unless_exited();
    }
}

async fn write(
    mut stdin: ChildStdin,
    mut outgoing: mpsc::Receiver<Outgoing>,
    process: Arc<ProcessInner>,
) {
    let mut buffer = Vec::new();
    loop {
        let message = tokio::select! {
            message = outgoing.recv() => message,
            () = process.close_stdin.notified() => None,
        };
        let Some(message) = message else { break };
        buffer.clear();
        buffer.extend_from_slice(message.text.as_bytes());
        buffer.push(b'\n');
        // What else is queued goes in the same write.
        while buffer.len() < 64 << 10 {
            let Ok(more) = outgoing.try_recv() else { break };
            buffer.extend_from_slice(more.text.as_bytes());
            buffer.push(b'\n');
        }
        if stdin.write_all(&buffer).await.is_err() {
            break;
        }
    }
    // Dropping stdin closes it: MCP servers exit on end-of-file.
    drop(stdin);
    drop(process);
}

async fn read(stdout: ChildStdout, weak: Weak<Inner>, max_line: usize) {
    let mut lines = Lines::new(stdout, max_line).reading_response_ids();
    loop {
        let line = lines.next().await;
        let Some(inner) = weak.upgrade() else { return };
        match line {
            Ok(None) => break,
            Ok(Some(Line {
                cut: true,
                response_to,
                ..
            })) => {
                inner.warn_skipped(|| {
                    tracing::warn!(upstream = %inner.label(), max_line, "skipped a line longer than the limit");
                });
                // An answer to one of ours answers its request at once, as too long: skipped
                // without a word, its request would wait for its deadline.
                if let Some(id) = response_to {
                    inner.fail(id, ClientError::too_long(max_line));
                }
            }
            // Skipped like any other line that is not JSON-RPC: the child goes on.
            Ok(Some(Line { bytes, .. })) => match std::str::from_utf8(bytes) {
                Ok(line) if line.trim().is_empty() => {}
                Ok(line) => {
                    let held = inner.receive(line);
                    drop(inner);
                    super::answer_held(&weak, held, std::future::pending()).await;
                }
                Err(_) => {
                    inner.warn_skipped(|| {
                        tracing::warn!(upstream = %inner.label(), "skipped a line that is not UTF-8");
                    });
                }
            },
            Err(error) => {
                inner.close(&format!("reading its stdout failed: {error}"));
                return;
            }
        }
    }
    if let Some(inner) = weak.upgrade() {
        inner.close("the process closed its stdout");
    }
}

/// Longest stderr line logged, in bytes; the rest of a longer one is skipped.
const MAX_STDERR_LINE: usize = 2000;

/// Most stderr lines of one child logged in a second; the rest are counted, and said in one
/// line with the child's first line of a later second, or when its stderr ends (a client
/// could make a child write short lines without end, each a log line many times its size).
const STDERR_LINES_PER_SECOND: u32 = 100;

/// Logs the child's stderr, line by line, until it ends, at most
/// [`STDERR_LINES_PER_SECOND`]. Whatever the child writes, its stderr is read on: a pipe left
/// unread would block the child once full, and one closed would fail (or, `SIGPIPE`, kill)
/// it at its next log line.
async fn log_stderr(stderr: ChildStderr, label: Arc<str>) {
    let mut lines = Lines::new(stderr, MAX_STDERR_LINE);
    let mut second = tokio::time::Instant::now();
    let (mut logged, mut skipped) = (0u32, 0u64);
    while let Ok(Some(line)) = lines.next().await {
        if second.elapsed() >= Duration::from_secs(1) {
            if skipped > 0 {
                tracing::info!(upstream = %label, skipped, "upstream stderr: lines skipped (more than {STDERR_LINES_PER_SECOND} a second)");
            }
            (second, logged, skipped) = (tokio::time::Instant::now(), 0, 0);
        }
        if logged == STDERR_LINES_PER_SECOND {
            skipped += 1;
            continue;
        }
        logged += 1;
        let shown = String::from_utf8_lossy(line.bytes);
        let cut = if line.cut { "…" } else { "" };
        tracing::info!(upstream = %label, stderr = %format_args!("{shown}{cut}"), "upstream stderr");
    }
    if skipped > 0 {
        tracing::info!(upstream = %label, skipped, "upstream stderr: lines skipped (more than {STDERR_LINES_PER_SECOND} a second)");
    }
}

/// A line of a child's pipe, without its `\n` (nor a `\r` before it).
struct Line<'a> {
    /// The line, or its first `max` bytes when it was longer.
    bytes: &'a [u8],
    /// Whether it was longer than `max` (its rest skipped).
    cut: bool,
    /// Of a line cut, the id of the response it is, when it reads as one (and the reader
    /// was asked to read them: [`Lines::reading_response_ids`]).
    response_to: Option<u64>,
}

/// The lines of a child's pipe as bytes, whatever they hold (a line that is not UTF-8 is
/// the reader's to judge), each kept to at most `max` bytes: a child cannot make the server
/// hold more of a line than that.
struct Lines<R> {
    reader: BufReader<R>,
    line: Vec<u8>,
    max: usize,
    /// Whether a line cut is read on for its response id ([`ResponseId`]).
    response_ids: bool,
}

impl<R: tokio::io::AsyncRead + Unpin> Lines<R> {
    fn new(reader: R, max: usize) -> Self {
        Self {
            reader: BufReader::new(reader),
            line: Vec::new(),
            max,
            response_ids: false,
        }
    }

    /// Reads each line cut for the id of the response it is (a pipe of JSON-RPC messages).
    fn reading_response_ids(mut self) -> Self {
        self.response_ids = true;
        self
    }

    /// The next line; `None` at end of file (a last line without `\n` is a line).
    async fn next(&mut self) -> std::io::Result<Option<Line<'_>>> {
        // What one long line grew is not kept for the next ones.
        if self.line.capacity() > 64 << 10 {
            self.line = Vec::new();
        }
        self.line.clear();
        let mut cut = false;
        let mut read_any = false;
        // Made only once a line is cut: a line kept whole is the JSON parser's to read.
        let mut response_id: Option<ResponseId> = None;
        loop {
            let buffer = self.reader.fill_buf().await?;
            if buffer.is_empty() {
                if !read_any {
                    return Ok(None);
                }
                break;
            }
            read_any = true;
            let end = memchr::memchr(b'\n', buffer);
            let part = &buffer[..end.unwrap_or(buffer.len())];
            let room = self.max.saturating_sub(self.line.len());
            if part.len() > room && !cut && self.response_ids {
                let mut scan = ResponseId::default();
                scan.read(&self.line);
                response_id = Some(scan);
            }
            if let Some(scan) = &mut response_id {
                scan.read(part);
            }
            cut |= part.len() > room;
            self.line.extend_from_slice(&part[..part.len().min(room)]);
            let used = end.map_or(buffer.len(), |end| end + 1);
            self.reader.consume(used);
            if end.is_some() {
                break;
            }
        }
        if !cut && self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        Ok(Some(Line {
            bytes: &self.line,
            cut,
            response_to: response_id.and_then(|scan| scan.response_to()),
        }))
    }
}

async fn wait(mut child: Child, inner: Weak<Inner>, process: Arc<ProcessInner>, label: Arc<str>) {
    let watching = Watching(process.clone());
    let status = child.wait().await;
    // What the child started in its group (a server's helper, a worker it forked and left
    // behind when it crashed) would outlive it, reparented to init, holding the pipes and
    // whatever else it holds: the group dies with its leader, on every path that ends the
    // child (each ends here, or in `Watching`'s drop). Right after the reap the id is
    // still that group's: the kernel gives no new process an id that a group with members
    // holds, and an empty group is an ESRCH (a new group of that id within the instant
    // since the reap would take the pids going round in between). The watch's drop kills
    // the group and marks the child exited, before anything else can run.
    drop(watching);
    let how = match status {
        Ok(status) => format!("the process exited ({status})"),
        Err(error) => format!("waiting for the process failed: {error}"),
    };
    tracing::info!(upstream = %label, pid = process.pid, %how, "upstream process ended");
    if let Some(inner) = inner.upgrade() {
        inner.close(&how);
    }
}

/// The watch over a child's exit. Dropped before the child exited (the runtime it ran on
/// stopped: a worker thread at shutdown), nothing would see the exit, and a `terminate`
/// would wait out its whole grace for it: the child's group is killed at once instead (its
/// pipes went with that runtime already), and it counts as exited.
struct Watching(Arc<ProcessInner>);

impl Drop for Watching {
    fn drop(&mut self) {
        if !*self.0.exited.borrow() {
            signal_group(self.0.pid, Signal::Kill);
            self.0.exited.send_replace(true);
        }
    }
}

#[derive(Clone, Copy)]
enum Signal {
    Term,
    Kill,
}

/// Sends `signal` to the process group `pgid` (the child's, which it leads).
#[allow(unsafe_code)]
fn signal_group(pgid: u32, signal: Signal) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    let signal = match signal {
        Signal::Term => libc::SIGTERM,
        Signal::Kill => libc::SIGKILL,
    };
    // SAFETY: kill(2) with a negative pid signals that process group; it touches no memory
    // of this process. A group that is gone already gives ESRCH, which is ignored.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// Has the kernel SIGKILL the child when the thread that started it dies (this process
/// included, even by SIGKILL).
#[allow(unsafe_code)]
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: pid of this process, read before the fork.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe calls are allowed: prctl(2) and getppid(2) are system calls that
    // allocate nothing and take no lock.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between the fork and the prctl.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("the parent exited"));
            }
            Ok(())
        });
    }
}

/// The soft limit on open files children start with ([`start_children_with_open_files_limit`]);
/// 0: theirs is this process's.
static CHILDREN_OPEN_FILES_LIMIT: AtomicU64 = AtomicU64::new(0);

/// Has the children started from now on (stdio upstreams) begin with `soft` as their soft
/// limit on open files rather than this process's. For a process that raised its own (the
/// `mcp-ws` binary raises it to the hard limit at start): its children get the one it was
/// started with, as Go's `os/exec` gives them. Programs not written for a large limit
/// (`select(2)`, tables sized by it) can fail or slow down under one. 0: as this process.
pub fn start_children_with_open_files_limit(soft: u64) {
    CHILDREN_OPEN_FILES_LIMIT.store(soft, Ordering::Relaxed);
}

/// Sets the child's soft limit on open files to [`start_children_with_open_files_limit`]'s,
/// when there is one (never above its hard limit).
#[allow(unsafe_code)]
fn start_with_open_files_limit(cmd: &mut Command) {
    let soft = CHILDREN_OPEN_FILES_LIMIT.load(Ordering::Relaxed);
    if soft == 0 {
        return;
    }
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe calls are allowed: getrlimit(2) and setrlimit(2) are system calls
    // that allocate nothing and take no lock.
    unsafe {
        cmd.pre_exec(move || {
            let mut limit = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            limit.rlim_cur = soft.min(limit.rlim_max);
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line of `input` read with `max`, as (text, cut).
    async fn lines_of(input: &[u8], max: usize) -> Vec<(Vec<u8>, bool)> {
        let mut lines = Lines::new(input, max);
        let mut out = Vec::new();
        while let Some(line) = lines.next().await.expect("read") {
            out.push((line.bytes.to_vec(), line.cut));
        }
        out
    }

    #[tokio::test]
    async fn lines_are_bytes_cut_at_max_and_read_on_after_any_byte() {
        let long = vec![b'x'; 20_000];
        let mut input = b"caf\xe9\r\n\n{}\n".to_vec();
        input.extend_from_slice(&long);
        input.extend_from_slice(b"\nlast");
        let lines = lines_of(&input, 10).await;
        assert_eq!(
            lines,
            [
                (b"caf\xe9".to_vec(), false),
                (Vec::new(), false),
                (b"{}".to_vec(), false),
                (vec![b'x'; 10], true),
                (b"last".to_vec(), false),
            ]
        );
        // A line longer than the reader's buffer (8 KiB) is read whole within `max`.
        let lines = lines_of(&input, 30_000).await;
        assert_eq!(lines[3], (long, false));
    }

    #[tokio::test]
    async fn a_line_cut_is_read_on_for_its_response_id_and_a_line_kept_is_not() {
        let long = "x".repeat(20_000);
        let input = format!("{{\"result\":\"{long}\",\"id\":9}}\n{{\"id\":3,\"result\":1}}\n");
        let mut lines = Lines::new(input.as_bytes(), 100).reading_response_ids();
        let cut = lines.next().await.expect("read").expect("a line");
        assert!(cut.cut);
        assert_eq!(cut.response_to, Some(9));
        let kept = lines.next().await.expect("read").expect("a line");
        assert_eq!((kept.cut, kept.response_to), (false, None));
        // Without being asked, the reader reads no ids.
        let mut lines = Lines::new(input.as_bytes(), 100);
        let cut = lines.next().await.expect("read").expect("a line");
        assert_eq!((cut.cut, cut.response_to), (true, None));
    }
}
