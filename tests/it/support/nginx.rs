//! nginx in the foreground with its own prefix, running one of the repository's sample
//! configs with its addresses replaced by the ports a test picked; stopped when dropped.

use super::ports::{free_port, wait_listening};
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// nginx running a config of the test's, stopped (its workers with it) when dropped.
pub struct Nginx {
    child: Child,
    /// The address it listens on.
    pub addr: SocketAddr,
}

impl Nginx {
    /// Runs `sample` (relative to the crate root) with each `(address in the sample, node)`
    /// replaced, and its `listen` address replaced by a free port: another one if nginx
    /// loses that port to someone else before it binds it (tests run in parallel).
    pub fn start(prefix: &Path, sample: &str, nodes: &[(&str, SocketAddr)], listen: &str) -> Self {
        let sample_text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(sample))
                .expect("the sample config is in the repository");
        for _ in 0..5 {
            let addr = free_port();
            let mut config = sample_text.replace(listen, &addr.to_string());
            for (placeholder, node) in nodes {
                config = config.replace(placeholder, &node.to_string());
            }
            assert_ne!(
                config, sample_text,
                "the sample names the addresses the test replaces"
            );
            let mut nginx = Self::spawn(prefix, &config, addr);
            if nginx.listening(prefix) {
                return nginx;
            }
        }
        panic!("nginx found no free port in five tries")
    }

    /// nginx running `config` (which listens on `addr`) with its prefix in `prefix`.
    fn spawn(prefix: &Path, config: &str, addr: SocketAddr) -> Self {
        for dir in ["logs", "tmp"] {
            std::fs::create_dir_all(prefix.join(dir)).expect("prefix dirs");
        }
        let path = prefix.join("nginx.conf");
        std::fs::write(&path, config).expect("config written");
        // Each nginx reads only its own complaints.
        std::fs::write(prefix.join("logs/error.log"), "").expect("error log emptied");
        Self {
            child: Command::new(binary())
                .arg("-p")
                .arg(prefix)
                .args(["-e", "logs/error.log", "-c"])
                .arg(&path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                // A group of its own, the workers in it: a master that must be killed is
                // killed with them (they would outlive it).
                .process_group(0)
                .spawn()
                .expect("nginx starts (install the Debian package nginx; .ci/run does)"),
            addr,
        }
    }

    /// Waits until nginx listens on its address (true), or has given up on it because
    /// someone else took it first (false: nginx retries a bind for a few seconds, then
    /// exits). Any other exit fails the test with nginx's log.
    fn listening(&mut self, prefix: &Path) -> bool {
        let Err(status) = wait_listening(&mut self.child, &[self.addr], "nginx") else {
            return true;
        };
        let log = std::fs::read_to_string(prefix.join("logs/error.log")).unwrap_or_default();
        let taken = format!("bind() to {} failed (98", self.addr);
        assert!(
            log.contains(&taken),
            "nginx exited ({status}); its log:\n{log}"
        );
        false
    }

    /// `ws://ADDR/mcp`.
    pub fn url(&self) -> String {
        format!("ws://{}/mcp", self.addr)
    }

    /// `http://ADDR/mcp`.
    pub fn http_url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // Gone already (a test that waited for it): its pid may be another process's now.
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        // TERM makes the master stop its workers too (it exits after them); KILL, to the
        // whole group, only if it does not.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The master is not reaped yet, so its pid still names its group.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .status();
        let _ = self.child.wait();
    }
}

fn binary() -> &'static str {
    if Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    }
}

/// A config of nginx alone, answering 200 on `addr`, with `workers` worker processes.
fn bare_config(addr: SocketAddr, workers: usize) -> String {
    format!(
        "daemon off;\npid tmp/nginx.pid;\nworker_processes {workers};\nevents {{}}\nhttp {{\n    \
         access_log off;\n    client_body_temp_path tmp/body;\n    proxy_temp_path tmp/proxy;\n    \
         fastcgi_temp_path tmp/fastcgi;\n    uwsgi_temp_path tmp/uwsgi;\n    \
         scgi_temp_path tmp/scgi;\n    server {{\n        listen {addr};\n        \
         return 200;\n    }}\n}}\n"
    )
}

/// The pids whose parent is `parent`, from `/proc`.
#[cfg(target_os = "linux")]
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // `pid (comm) state ppid …`; comm may hold spaces, so read after its `)`.
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
                    == Some(parent)
            })
        })
        .collect()
}

/// Whether `pid` is gone, or a zombie waiting for its parent.
#[cfg(target_os = "linux")]
fn ended(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            == Some("Z")
    })
}

#[cfg(target_os = "linux")]
#[test]
fn a_master_that_does_not_stop_is_killed_with_its_workers() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Another port when a parallel test took this one first.
    let nginx = (0..5)
        .find_map(|_| {
            let addr = free_port();
            let mut nginx = Nginx::spawn(dir.path(), &bare_config(addr, 2), addr);
            nginx.listening(dir.path()).then_some(nginx)
        })
        .expect("nginx listening on one of five ports");
    let deadline = Instant::now() + Duration::from_secs(10);
    let workers = loop {
        let workers = children_of(nginx.child.id());
        if workers.len() == 2 {
            break workers;
        }
        assert!(Instant::now() < deadline, "nginx's workers: {workers:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    // Stopped, the master does not act on TERM: the drop's KILL must reach its workers too.
    let master = nginx.child.id();
    let status = Command::new("kill")
        .args(["-STOP", &master.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    drop(nginx);
    assert!(ended(master), "the master");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !workers.iter().all(|pid| ended(*pid)) {
        assert!(
            Instant::now() < deadline,
            "a worker of {workers:?} outlived its master"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn nginx_on_a_port_someone_else_holds_is_told_from_nginx_listening() {
    let dir = tempfile::tempdir().expect("temp dir");
    // The port is someone else's: it answers, but nginx does not hold it.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let held = holder.local_addr().expect("addr");
    let mut loser = Nginx::spawn(&dir.path().join("held"), &bare_config(held, 1), held);
    assert!(!loser.listening(&dir.path().join("held")));
    drop(loser);
    // A free port: nginx's own.
    let free = free_port();
    let mut winner = Nginx::spawn(&dir.path().join("free"), &bare_config(free, 1), free);
    assert!(winner.listening(&dir.path().join("free")));
}
