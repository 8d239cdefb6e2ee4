//! The `mcp-ws` binary as a child process, for tests of the command line, configuration and
//! signals. Its stderr (the log) is collected; the process is killed if a test ends early.

use super::READ_TIMEOUT;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub struct ServerProcess {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
}

impl ServerProcess {
    /// Runs the binary from the crate root, with the variables it reads cleared (then set
    /// from `env`), logging at info.
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start(Self::command(args, env))
    }

    /// The binary's command as [`spawn`](Self::spawn) runs it, for a test that sets up more
    /// (its stdio, or limits) before it starts.
    pub fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mcp-ws"));
        command
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_remove("MCP_WS_CONFIG")
            .env_remove("MCP_WS_LISTEN")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied());
        command
    }

    /// Runs `command` (the binary, as the caller set it up), its stderr collected.
    pub fn start(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the mcp-ws binary starts");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (tx, lines) = mpsc::channel();
        let pipe = child.stderr.take().expect("stderr is piped");
        let log = stderr.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                log.lock().expect("log lock").push(line.clone());
                let _ = tx.send(line);
            }
        });
        Self {
            child,
            lines,
            stderr,
            reader: Some(reader),
        }
    }

    /// The process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and the process reaped: the server ends as in a crash.
    pub fn kill(&mut self) {
        self.child.kill().expect("SIGKILL the server");
        let _ = self.child.wait();
    }

    /// SIGTERM: the server's graceful shutdown ([`wait_exit`](Self::wait_exit) sees it end).
    pub fn terminate(&self) {
        self.signal("-TERM");
    }

    /// SIGSTOP: the server stops, its connections open, as a host that stalls (a VM frozen
    /// for a migration), until [`resume`](Self::resume).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT: a [`pause`](Self::pause)d server goes on.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {}", self.child.id());
    }

    /// Everything the server wrote to stderr so far.
    pub fn stderr_text(&self) -> String {
        self.stderr.lock().expect("log lock").join("\n")
    }

    /// The address from the server's `listening ... addr=IP:PORT` log line.
    pub fn wait_listening(&self) -> SocketAddr {
        let deadline = Instant::now() + READ_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains("listening") => {
                    if let Some(addr) = line
                        .split_whitespace()
                        .find_map(|word| word.strip_prefix("addr="))
                    {
                        return addr.parse().expect("a socket address after addr=");
                    }
                }
                Ok(_) => {}
                Err(_) => panic!(
                    "no `listening ... addr=` line; stderr so far:\n{}",
                    self.stderr_text()
                ),
            }
        }
    }

    /// Waits (with a deadline) for the process to exit; returns its status and all of its
    /// stderr. Blocking: call it once the test needs nothing more from its own runtime.
    pub fn wait_exit(&mut self) -> (ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the process did not exit; stderr:\n{}",
                self.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(reader) = self.reader.take() {
            reader.join().expect("stderr reader");
        }
        (status, self.stderr_text())
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The soft and hard `Max open files` of process `pid`, from `/proc`.
pub fn open_files_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .expect("a Max open files line");
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|word| word.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

/// Starts `command`'s process with these open-files limits.
#[allow(unsafe_code)]
pub fn limit_open_files(command: &mut std::process::Command, soft: u64, hard: u64) {
    use std::os::unix::process::CommandExt;
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: between fork and exec, only `setrlimit` (async-signal-safe), nothing allocated.
    unsafe {
        command.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
