//! The log's background writer, driven through the real binary:
//!
//! - SIGTERM right after N answered requests: every one of the N access lines is in the
//!   output, and so is the server's last line (`stopped`), on stderr and in `logging.file`.
//! - A reader that stops reading stderr (a pipe nobody drains) does not stall the server:
//!   `/healthz` and a WebSocket `ping` are answered, and the lines that found the writer's
//!   queue full are counted in `mcp_dropped_total{reason="access_log"}`.
//! - `logging.file`: the file (`NAME.YYYY-MM-DD` in its directory) is created and holds the
//!   lines; older days' files beyond `logging.file_keep` are deleted, and no other file; a
//!   directory that does not exist is a configuration error at start. Rotated by size
//!   (`file_rotation = "size"`): no file passes `file_max_bytes`, no line is cut, and the
//!   `file_keep` files kept (`NAME`, `NAME.1`, `NAME.2`) hold the newest lines in order, none
//!   missing; the same after every log file was deleted while the server ran. A deleted
//!   daily file is begun again too.
//!   On a disk that fills midway (the process's file size limited, `RLIMIT_FSIZE`), the file
//!   keeps whole lines only, and every ping line is either in it or counted lost, never both.
//! - A stderr whose reader is gone (a closed pipe): the lines its writes lose are counted in
//!   the same metric, one for each, and the server answers on.
//! - A stderr that is a pipe is made to hold one batch of the writer (1 MiB, where the
//!   kernel's `pipe-max-size` allows it).

use crate::support::http::http_get;
use crate::support::process::ServerProcess;
use crate::support::*;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

/// A config of the binary on a free port, one worker, JSON lines, `logging` added to its
/// `[logging]`, in the test's temporary directory.
fn json_log_config(name: &str, logging: &str) -> PathBuf {
    config(
        name,
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nworkers = 1\n\n[logging]\nformat = \"json\"\n{logging}"
        ),
    )
}

/// A config file in the test's temporary directory.
fn config(name: &str, text: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("log_writer-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).expect("write the config");
    path
}

/// A fresh directory for log files.
fn log_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("log_writer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the log directory");
    dir
}

/// The files in `dir`, by name.
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read the log directory")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .into_string()
                .expect("utf-8")
        })
        .collect();
    names.sort();
    names
}

/// Sends `count` pings in one go, then reads their answers.
async fn pings(client: &mut Client, count: usize, params: &Value) {
    pings_with_ids(client, 0..count as u64, params).await;
}

/// Sends pings with the ids `ids` in one go, then reads their answers.
async fn pings_with_ids(client: &mut Client, ids: std::ops::Range<u64>, params: &Value) {
    for id in ids.clone() {
        client
            .send_json(json!({"jsonrpc": "2.0", "id": id, "method": "ping", "params": params}))
            .await;
    }
    for _ in ids {
        let answer = client.recv().await;
        assert!(answer.get("result").is_some(), "{answer}");
    }
}

/// The access lines of a JSON log.
fn access_lines(log: &str) -> usize {
    log.lines()
        .filter(|line| {
            let line: Value = serde_json::from_str(line).unwrap_or(Value::Null);
            line["target"] == "mcp_ws::access"
        })
        .count()
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -TERM succeeded");
}

/// The text of every log file in `dir`, in name order.
fn file_text(dir: &Path) -> String {
    files_in(dir)
        .iter()
        .map(|name| std::fs::read_to_string(dir.join(name)).unwrap_or_default())
        .collect()
}

/// Polls `log` (the log so far) for the `addr` of the JSON `listening` line.
fn wait_addr(log: impl Fn() -> String) -> SocketAddr {
    wait_addr_after(log, 0)
}

/// The addresses of the JSON `listening` lines in `text`, in order.
fn listening_addrs(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let line: Value = serde_json::from_str(line).ok()?;
            line["addr"].as_str()?.parse().ok()
        })
        .collect()
}

/// Polls `log` for the `addr` of the JSON `listening` line that follows the first `seen`
/// (those of earlier runs in the same file).
fn wait_addr_after(log: impl Fn() -> String, seen: usize) -> SocketAddr {
    let deadline = Instant::now() + READ_TIMEOUT;
    loop {
        let text = log();
        if let Some(addr) = listening_addrs(&text).get(seen) {
            return *addr;
        }
        assert!(Instant::now() < deadline, "no new listening line:\n{text}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs the binary with `logging` added to its config (JSON lines), answers `count` pings
/// after the initialize, sends SIGTERM at once, and returns its stderr once it has exited
/// with status 0. With `dir`, the log is read from the files there.
async fn requests_then_sigterm(
    name: &str,
    logging: &str,
    dir: Option<&Path>,
    count: usize,
) -> String {
    let config = json_log_config(name, logging);
    let mut process = ServerProcess::spawn(&["--config", config.to_str().expect("utf-8")], &[]);
    let addr = match dir {
        Some(dir) => wait_addr(|| file_text(dir)),
        None => wait_addr(|| process.stderr_text()),
    };
    let mut client = Client::connect_url(&format!("ws://{addr}/mcp")).await;
    let init = client
        .request_with_id(json!("init"), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_result(&init, &json!("init"));
    pings(&mut client, count, &json!({})).await;
    sigterm(&process.child);
    drop(client);
    let (status, stderr) = process.wait_exit();
    assert_eq!(status.code(), Some(0), "{stderr}");
    stderr
}

/// All `count` access lines (and the initialize's) are in `log`, and its last line is the
/// server's `stopped`.
fn assert_complete(log: &str, count: usize) {
    assert_eq!(access_lines(log), count + 1, "{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(last.contains("\"stopped\""), "the last line: {last}");
}

#[tokio::test]
async fn sigterm_right_after_requests_loses_no_line_on_stderr() {
    let count = 300;
    let stderr = requests_then_sigterm("stderr", "", None, count).await;
    assert_complete(&stderr, count);
}

#[tokio::test]
async fn sigterm_right_after_requests_loses_no_line_in_the_file() {
    let count = 300;
    let dir = log_dir("sigterm-file");
    let file = dir.join("mcp-ws.log");
    let stderr = requests_then_sigterm(
        "sigterm-file",
        &format!("file = {:?}\n", file.to_str().expect("utf-8")),
        Some(&dir),
        count,
    )
    .await;
    assert!(stderr.is_empty(), "the log goes to the file: {stderr}");
    assert_complete(&file_text(&dir), count);
}

/// The binary with its stderr piped and, once its `listening` line is read, never read
/// again: the pipe fills (64 KiB) and the log's writer blocks on it; or, once the pipe is
/// closed ([`close_stderr`](Self::close_stderr)), its writes fail.
struct Stalled {
    child: Child,
    /// Open and unread: dropping it makes writes fail instead of block.
    stderr: Option<BufReader<ChildStderr>>,
    addr: SocketAddr,
    _config: PathBuf,
}

impl Stalled {
    fn spawn(name: &str, logging: &str) -> Self {
        let config = config(
            name,
            &format!(
                "[server]\nlisten = \"127.0.0.1:0\"\nworkers = 1\n\n[logging]\nformat = \"text\"\n{logging}"
            ),
        );
        let mut child = ServerProcess::command(&["--config", config.to_str().expect("utf-8")], &[])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the mcp-ws binary starts");
        let mut stalled = Self {
            stderr: Some(BufReader::new(child.stderr.take().expect("piped"))),
            child,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            _config: config,
        };
        // The server logs `listening` at start.
        let listening = stalled.read_to_line(" addr=");
        stalled.addr = listening
            .split_whitespace()
            .find_map(|word| word.strip_prefix("addr="))
            .and_then(|addr| addr.parse().ok())
            .unwrap_or_else(|| panic!("a socket address: {listening}"));
        stalled
    }

    /// Reads stderr up to the line holding `needle`, and returns it (bounded: the server
    /// exits, ending the pipe, or the test's own timeout ends it).
    fn read_to_line(&mut self, needle: &str) -> String {
        let stderr = self.stderr.as_mut().expect("open");
        loop {
            let mut line = String::new();
            let read = stderr.read_line(&mut line).expect("read stderr");
            assert!(read > 0, "the server exited before a line with {needle}");
            if line.contains(needle) {
                return line;
            }
        }
    }

    /// Closes the pipe's reading end, as a log collector that dies does: the server's
    /// writes to stderr fail (`EPIPE`) from then on.
    fn close_stderr(&mut self) {
        self.stderr = None;
    }
}

impl Drop for Stalled {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A metric of the binary's `/metrics`.
async fn metric_of(addr: SocketAddr, name: &str) -> u64 {
    let (status, body) = http_get(addr, "/metrics").await;
    assert_eq!(status, 200);
    body.lines()
        .find_map(|line| {
            let (key, value) = line.split_once(' ')?;
            (key == name).then(|| value.trim().parse().ok()).flatten()
        })
        .unwrap_or_else(|| panic!("metric {name} missing"))
}

#[tokio::test]
async fn a_stderr_nobody_reads_costs_lines_not_answers() {
    let dropped = "mcp_dropped_total{reason=\"access_log\"}";
    let server = Stalled::spawn("stalled", "queue_lines = 64\n");
    let mut client = Client::connect_url(&format!("ws://{}/mcp", server.addr)).await;
    let init = client
        .request_with_id(json!("init"), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_result(&init, &json!("init"));
    // About 1 KiB a line: the pipe (widened to the writer's 1 MiB batch where the kernel
    // allows, else 64 KiB) and the writer's queue of 64 lines (its buffer and the batch it
    // is blocked on) take some 200 to 1,100 lines; each round adds 100. Every answer comes
    // within the client's receive timeout, and so does every /metrics.
    let padding = json!({"pad": "x".repeat(1000)});
    let mut rounds = 0;
    while metric_of(server.addr, dropped).await == 0 {
        rounds += 1;
        assert!(
            rounds <= 50,
            "no log line was dropped after {rounds} rounds"
        );
        pings(&mut client, 100, &padding).await;
    }
    // The writer is still stuck on the pipe; the server answers all the same.
    let (status, body) = http_get(server.addr, "/healthz").await;
    assert_eq!((status, body.trim()), (200, "ok"));
    let ping = client.request_with_id(json!("p"), "ping", json!({})).await;
    assert_result(&ping, &json!("p"));
    let mut other = Client::connect_url(&format!("ws://{}/mcp", server.addr)).await;
    let init = other
        .request_with_id(json!(1), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_result(&init, &json!(1));
    assert!(metric_of(server.addr, dropped).await > 0);
}

#[tokio::test]
async fn lines_a_closed_stderr_refuses_are_counted_and_answers_go_on() {
    let dropped = "mcp_dropped_total{reason=\"access_log\"}";
    let mut server = Stalled::spawn("closed", "");
    let mut client = Client::connect_url(&format!("ws://{}/mcp", server.addr)).await;
    let init = client
        .request_with_id(json!("init"), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_result(&init, &json!("init"));
    // Every line so far is written before the reader goes: the last, `initialize`'s
    // access line, is read.
    server.read_to_line("method=initialize");
    assert_eq!(metric_of(server.addr, dropped).await, 0);
    server.close_stderr();
    // Each ping's access line is written after the close, and lost: counted, each once
    // (`/metrics` and `/healthz` log no line).
    pings(&mut client, 50, &json!({})).await;
    wait_for_metric(server.addr, dropped, 50).await;
    let (status, body) = http_get(server.addr, "/healthz").await;
    assert_eq!((status, body.trim()), (200, "ok"));
    let ping = client.request_with_id(json!("p"), "ping", json!({})).await;
    assert_result(&ping, &json!("p"));
    wait_for_metric(server.addr, dropped, 51).await;
}

/// Waits until the metric `name` is `value`, then past a flush of the log's writer, and
/// checks that it stayed there.
async fn wait_for_metric(addr: SocketAddr, name: &str, value: u64) {
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut count = metric_of(addr, name).await;
    while count < value {
        assert!(Instant::now() < deadline, "{name} {count}, not {value}");
        std::thread::sleep(Duration::from_millis(20));
        count = metric_of(addr, name).await;
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(metric_of(addr, name).await, value, "{name}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_stderr_pipe_is_made_to_hold_one_batch_of_the_log() {
    let server = Stalled::spawn("pipe-size", "");
    let stderr = server.stderr.as_ref().expect("open");
    let size = rustix::pipe::fcntl_getpipe_size(stderr.get_ref()).expect("a pipe");
    let most: usize = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .expect("pipe-max-size")
        .trim()
        .parse()
        .expect("a number");
    // The writer's batch, 1 MiB. Where the kernel caps pipes below it, the server leaves
    // the pipe as it is (64 KiB), unless it is privileged enough to pass the cap.
    if most >= 1 << 20 {
        assert_eq!(size, 1 << 20, "the pipe's size");
    } else {
        assert!(
            size == 1 << 20 || size == 64 << 10,
            "the pipe's size: {size}"
        );
    }
}

#[tokio::test]
async fn the_log_file_is_created_holds_the_lines_and_old_files_are_pruned() {
    let dir = log_dir("rotation");
    // Files whose names begin with the log's but are not its days (an earlier rotation by
    // size's, an archive), made first, so that they are the oldest; files of past days,
    // beyond what `file_keep = 3` keeps; and a file of another name.
    let not_days = ["mcp-ws.log.1", "mcp-ws.log.2020-01-01.gz", "other.txt"];
    for name in not_days {
        std::fs::write(dir.join(name), "keep me\n").expect("write");
    }
    for day in 1..=5 {
        std::fs::write(dir.join(format!("mcp-ws.log.2020-01-0{day}")), "old\n").expect("write");
    }
    let (process, mut client) = serve_to_file("rotation", &dir, "file_keep = 3\n").await;
    pings(&mut client, 10, &json!({})).await;
    // The lines reach the file without a shutdown: the writer flushes when its queue is
    // empty.
    let deadline = Instant::now() + READ_TIMEOUT;
    while access_lines(&file_text(&dir)) < 11 {
        assert!(
            Instant::now() < deadline,
            "{} access lines in {:?}",
            access_lines(&file_text(&dir)),
            files_in(&dir)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let names = files_in(&dir);
    let logs: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("mcp-ws.log.") && !not_days.contains(&n.as_str()))
        .collect();
    assert_eq!(logs.len(), 3, "file_keep = 3: {names:?}");
    for name in not_days {
        assert!(names.contains(&name.to_owned()), "{name} kept: {names:?}");
    }
    assert!(
        logs.iter()
            .all(|name| name.as_str() > "mcp-ws.log.2020-01-03"),
        "the oldest days went: {names:?}"
    );
    // Today's file (UTC) holds the lines: one file, or two if the day turned during the
    // test (then the oldest file of 2020 went too, and three are still kept).
    let days: Vec<&&String> = logs
        .iter()
        .filter(|name| !name.starts_with("mcp-ws.log.2020"))
        .collect();
    assert!(matches!(days.len(), 1 | 2), "no file of today: {names:?}");
    let mut text = String::new();
    for day in days {
        let date = day.strip_prefix("mcp-ws.log.").expect("a dated name");
        assert!(
            date.len() == 10 && date.bytes().filter(|b| *b == b'-').count() == 2,
            "{day}"
        );
        text += &std::fs::read_to_string(dir.join(day)).expect("read");
    }
    assert_eq!(access_lines(&text), 11, "{text}");
    assert!(
        process.stderr_text().is_empty(),
        "{}",
        process.stderr_text()
    );
}

#[tokio::test]
async fn a_log_file_rotated_by_size_stays_under_it_keeps_whole_lines_and_file_keep_files() {
    let dir = log_dir("size");
    // Numbered files beyond what `file_keep = 3` keeps (an earlier run's, a copy named like
    // one), deleted at start, and a file of another name.
    for n in [5, 20261205] {
        std::fs::write(dir.join(format!("mcp-ws.log.{n}")), "old\n").expect("write");
    }
    std::fs::write(dir.join("other.txt"), "keep me\n").expect("write");
    // A file holds some seven rounds' batches: a batch cannot pass the size unless the
    // writer thread was held up for as many rounds (each round's is some 4 KiB).
    let max_bytes = 32_768;
    let (mut process, mut client) = serve_to_file("size", &dir, &size_rotation(max_bytes)).await;
    // Rounds of 10 pings, each past the writer's 100 ms batch deadline: some four rotations.
    let ids = ping_rounds(&mut client, 0..30).await;
    stop_cleanly(&mut process, client);
    assert_newest_lines_kept(&dir, max_bytes, ids.end);
    assert!(
        dir.join("other.txt").exists(),
        "a file of another name is kept"
    );
}

#[tokio::test]
async fn a_log_file_rotated_by_size_and_deleted_is_begun_again() {
    let dir = log_dir("size-deleted");
    let max_bytes = 32_768;
    let (mut process, mut client) =
        serve_to_file("size-deleted", &dir, &size_rotation(max_bytes)).await;
    let before = ping_rounds(&mut client, 0..8).await;
    // Every line before is written (the last batch's rotation, if any, done) before the
    // files go, so that no rotation renames one as they are deleted.
    wait_for_ping_line(&dir, before.end - 1);
    delete_log_files(&dir);
    // Fewer lines than a file holds: no rotation comes to move on from the deleted file.
    let after = ping_rounds(&mut client, 8..11).await;
    stop_cleanly(&mut process, client);
    assert_eq!(files_in(&dir), ["mcp-ws.log"]);
    assert_lines_since(&dir, after);
}

#[tokio::test]
async fn a_daily_log_file_deleted_is_begun_again() {
    let dir = log_dir("daily-deleted");
    let (mut process, mut client) = serve_to_file("daily-deleted", &dir, "").await;
    ping_rounds(&mut client, 0..3).await;
    delete_log_files(&dir);
    let after = ping_rounds(&mut client, 3..6).await;
    stop_cleanly(&mut process, client);
    // A file of today again (or of the next day, if the day turned meanwhile).
    assert_lines_since(&dir, after);
}

#[tokio::test]
async fn a_log_file_rotated_by_size_on_a_full_disk_keeps_whole_lines_and_counts_the_rest() {
    let dropped = "mcp_dropped_total{reason=\"access_log\"}";
    let dir = log_dir("size-full");
    // The disk fills before the file reaches its size: the process may write 16 KiB to a
    // file, some forty ping lines, and the batch that crosses it is taken in part (the first
    // to cross surely so, unless it began exactly at the limit).
    let limit = 16_384;
    let (mut process, mut client) =
        serve_to_file_within("size-full", &dir, &size_rotation(1 << 20), Some(limit)).await;
    let addr = wait_addr_after(|| file_text(&dir), 0);
    let sent = ping_rounds(&mut client, 0..12).await;
    // Every ping line is written whole or counted lost, never both: a batch the disk took
    // part of is cut off again (else the file would end inside a line, and the lines of
    // the batch after it would be both counted and glued on).
    let deadline = Instant::now() + READ_TIMEOUT;
    let (kept, lost) = loop {
        let text = std::fs::read_to_string(dir.join("mcp-ws.log")).expect("read the log");
        let kept = ping_ids("mcp-ws.log", &text);
        let lost = metric_of(addr, dropped).await;
        if kept.len() as u64 + lost >= sent.end {
            assert!(text.ends_with('\n'), "the file ends within a line");
            assert!(text.len() as u64 <= limit, "{} bytes", text.len());
            break (kept, lost);
        }
        assert!(
            Instant::now() < deadline,
            "{} ping lines kept, {lost} counted lost, of {}",
            kept.len(),
            sent.end
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(lost > 0, "the disk never filled: {} lines kept", kept.len());
    assert!(!kept.is_empty(), "no ping line written");
    // A batch after the first refused may be short enough to fit again: the lines kept are
    // not always the first ones, but each is there once, in order.
    assert_eq!(
        kept.len() as u64 + lost,
        sent.end,
        "lines kept ({kept:?}) and counted lost ({lost}) add up"
    );
    assert!(
        kept.windows(2).all(|pair| pair[0] < pair[1]) && kept.iter().all(|id| *id < sent.end),
        "each ping line at most once, in order: {kept:?}"
    );
    // Said on stderr, and the server answers on.
    let ping = client.request_with_id(json!("p"), "ping", json!({})).await;
    assert_result(&ping, &json!("p"));
    sigterm(&process.child);
    drop(client);
    let (status, stderr) = process.wait_exit();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("lines are dropped and counted"),
        "stderr: {stderr}"
    );
}

/// Makes `command`'s process unable to write a file past `bytes` (`RLIMIT_FSIZE`), its
/// writes past it failing with `EFBIG` rather than killing it (`SIGXFSZ` ignored, which
/// `exec` keeps).
#[allow(unsafe_code)]
fn limit_file_size(command: &mut Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: between fork and exec, only async-signal-safe calls (`signal`, `setrlimit`),
    // nothing allocated.
    unsafe {
        command.pre_exec(move || {
            if libc::signal(libc::SIGXFSZ, libc::SIG_IGN) == libc::SIG_ERR
                || libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Waits until the ping line of `id` is in a file of `dir` (a line being written as the
/// files are read may be cut: only whole ones are read).
fn wait_for_ping_line(dir: &Path, id: u64) {
    let deadline = Instant::now() + READ_TIMEOUT;
    let written = || {
        file_text(dir).lines().any(|line| {
            serde_json::from_str::<Value>(line).is_ok_and(|line| {
                line["target"] == "mcp_ws::access" && line["id"] == id.to_string().as_str()
            })
        })
    };
    while !written() {
        assert!(Instant::now() < deadline, "no line of ping {id}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// An operator frees the disk: every file in `dir` deleted, the one being written included
/// (a file a rotation has just renamed away is not there to delete).
fn delete_log_files(dir: &Path) {
    let names = files_in(dir);
    assert!(!names.is_empty(), "no log file");
    for name in names {
        match std::fs::remove_file(dir.join(name)) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                panic!("delete a log file: {error}")
            }
            _ => {}
        }
    }
}

/// The files in `dir` hold every ping line from `after` on, in order, none missing (a batch
/// written just after the deletion may add some from before it), then the server's last
/// line.
fn assert_lines_since(dir: &Path, after: std::ops::Range<u64>) {
    let text = file_text(dir);
    let ids = ping_ids("the files", &text);
    let first = ids.first().copied().unwrap_or(after.end);
    assert!(first <= after.start, "{ids:?}");
    assert_eq!(
        ids,
        (first..after.end).collect::<Vec<_>>(),
        "in order, none missing"
    );
    let last = text.lines().last().unwrap_or_default();
    assert!(last.contains("\"stopped\""), "the last line: {last}");
}

/// The ids of the ping access lines of `text` (JSON lines of `name`), in order; a line that
/// is not JSON (cut, or two mixed) fails.
fn ping_ids(name: &str, text: &str) -> Vec<u64> {
    text.lines()
        .map(|line| {
            serde_json::from_str::<Value>(line)
                .unwrap_or_else(|error| panic!("{name}: a line cut or mixed ({error}): {line}"))
        })
        .filter(|line| line["target"] == "mcp_ws::access" && line["method"] == "ping")
        .map(|line| {
            let id = line["id"].as_str().and_then(|id| id.parse().ok());
            id.unwrap_or_else(|| panic!("an id: {line}"))
        })
        .collect()
}

#[tokio::test]
async fn a_restart_within_the_day_keeps_the_days_file_with_file_keep_1() {
    let dir = log_dir("daily-restart");
    let keep_one = "file_keep = 1\n";
    let (mut process, mut client) = serve_to_file("daily-restart", &dir, keep_one).await;
    ping_rounds(&mut client, 0..1).await;
    stop_cleanly(&mut process, client);
    let first = files_in(&dir);
    let before = file_text(&dir);
    assert_eq!(first.len(), 1, "{first:?}");
    // tracing-appender alone counts the day's file among those to prune as it starts, and
    // with one file kept deleted it.
    let (mut process, mut client) = serve_to_file("daily-restart", &dir, keep_one).await;
    ping_rounds(&mut client, 1..2).await;
    stop_cleanly(&mut process, client);
    let names = files_in(&dir);
    assert_eq!(names.len(), 1, "one file kept: {names:?}");
    if names != first {
        // The day turned between the runs: the new day's file is the one kept.
        return;
    }
    let text = file_text(&dir);
    assert!(
        text.starts_with(&before) && text.len() > before.len(),
        "the first run's lines, then the second's:\n{text}"
    );
}

/// `[logging]` lines rotating the file by size at `max_bytes`, three files kept.
fn size_rotation(max_bytes: usize) -> String {
    format!("file_rotation = \"size\"\nfile_max_bytes = {max_bytes}\nfile_keep = 3\n")
}

/// The binary logging JSON lines to `dir/mcp-ws.log`, `logging` added to its `[logging]`,
/// and a client of it past `initialize`.
async fn serve_to_file(name: &str, dir: &Path, logging: &str) -> (ServerProcess, Client) {
    serve_to_file_within(name, dir, logging, None).await
}

/// [`serve_to_file`], the binary's files limited to `max_file_bytes` when given
/// (`RLIMIT_FSIZE`, with `SIGXFSZ` ignored: a write past it takes what fits, and the next
/// fails with `EFBIG`, as on a disk that fills midway).
async fn serve_to_file_within(
    name: &str,
    dir: &Path,
    logging: &str,
    max_file_bytes: Option<u64>,
) -> (ServerProcess, Client) {
    let file = dir.join("mcp-ws.log");
    let config = json_log_config(
        name,
        &format!("file = {:?}\n{logging}", file.to_str().expect("utf-8")),
    );
    // A file of an earlier run holds its `listening` line.
    let seen = listening_addrs(&file_text(dir)).len();
    let mut command = ServerProcess::command(&["--config", config.to_str().expect("utf-8")], &[]);
    if let Some(bytes) = max_file_bytes {
        limit_file_size(&mut command, bytes);
    }
    let process = ServerProcess::start(command);
    let addr = wait_addr_after(|| file_text(dir), seen);
    let mut client = Client::connect_url(&format!("ws://{addr}/mcp")).await;
    let init = client
        .request_with_id(json!("init"), "initialize", initialize_params("2025-11-25"))
        .await;
    assert_result(&init, &json!("init"));
    (process, client)
}

/// SIGTERM, then the exit: status 0, nothing on stderr (every line went to the file).
fn stop_cleanly(process: &mut ServerProcess, client: Client) {
    sigterm(&process.child);
    drop(client);
    let (status, stderr) = process.wait_exit();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

/// Pings with the ids `10 * round ..`, ten a round, each round's answers awaited and then
/// 120 ms waited (past the log writer's 100 ms batch deadline); returns the ids sent.
async fn ping_rounds(client: &mut Client, rounds: std::ops::Range<u64>) -> std::ops::Range<u64> {
    for round in rounds.clone() {
        pings_with_ids(client, round * 10..round * 10 + 10, &json!({})).await;
        tokio::time::sleep(Duration::from_millis(120)).await;
    }
    rounds.start * 10..rounds.end * 10
}

/// After the server's exit, `dir`'s log files are `mcp-ws.log` and its two newest numbered
/// files (`file_keep = 3`; the older ones deleted, no rotation left half done); the numbered
/// ones are within `max_bytes`; no line is cut; and the ping lines the three hold, oldest
/// file first, are the newest ones in a row up to `end` (excluded), more than two rounds'
/// worth, followed by the server's last line.
fn assert_newest_lines_kept(dir: &Path, max_bytes: usize, end: u64) {
    let logs: Vec<String> = files_in(dir)
        .into_iter()
        .filter(|name| name.starts_with("mcp-ws.log"))
        .collect();
    assert_eq!(
        logs,
        ["mcp-ws.log", "mcp-ws.log.1", "mcp-ws.log.2"],
        "file_keep = 3"
    );
    let mut ids = Vec::new();
    let mut last = String::new();
    for name in ["mcp-ws.log.2", "mcp-ws.log.1", "mcp-ws.log"] {
        let text = std::fs::read_to_string(dir.join(name)).expect("read");
        // Each file is rotated before a batch (some 4 KiB) would take it past the size.
        assert!(
            !text.is_empty() && text.len() <= max_bytes,
            "{name}: {} bytes",
            text.len()
        );
        assert!(text.ends_with('\n'), "{name} ends within a line");
        ids.extend(ping_ids(name, &text));
        last = text.lines().last().unwrap_or_default().to_owned();
    }
    let kept = ids.len() as u64;
    assert!(kept > 20, "{kept} ping lines in the three files: {ids:?}");
    let expected: Vec<u64> = (end - kept..end).collect();
    assert_eq!(
        ids, expected,
        "the newest ping lines, in order, none missing"
    );
    assert!(last.contains("\"stopped\""), "the last line: {last}");
}

#[test]
fn a_log_directory_that_does_not_exist_is_a_config_error() {
    let missing = log_dir("no-dir").join("missing");
    let file = missing.join("mcp-ws.log");
    let config = config(
        "no-dir",
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n[logging]\nfile = {:?}\n",
            file.to_str().expect("utf-8")
        ),
    );
    let mut process = ServerProcess::spawn(&["--config", config.to_str().expect("utf-8")], &[]);
    let (status, stderr) = process.wait_exit();
    // Refused before anything is created (the file appender would create the directory).
    let _ = std::fs::remove_dir_all(&missing);
    assert_eq!(status.code(), Some(2), "{stderr}");
    let expected = format!(
        "logging.file: directory {} does not exist",
        missing.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
}
