//! nginx in the foreground with its own prefix, running one of the repository's sample
//! configs with its addresses replaced by the ports a test picked; stopped when dropped.

use super::ports::{free_port, wait_listening};
use std::net::SocketAddr;
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
        // TERM makes the master stop its workers too; KILL only if it does not.
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
        let _ = self.child.kill();
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

#[test]
fn nginx_on_a_port_someone_else_holds_is_told_from_nginx_listening() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = |addr: SocketAddr| {
        format!(
            "daemon off;\npid tmp/nginx.pid;\nevents {{}}\nhttp {{\n    access_log off;\n    \
             client_body_temp_path tmp/body;\n    proxy_temp_path tmp/proxy;\n    \
             fastcgi_temp_path tmp/fastcgi;\n    uwsgi_temp_path tmp/uwsgi;\n    \
             scgi_temp_path tmp/scgi;\n    server {{\n        listen {addr};\n        \
             return 200;\n    }}\n}}\n"
        )
    };
    // The port is someone else's: it answers, but nginx does not hold it.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let held = holder.local_addr().expect("addr");
    let mut loser = Nginx::spawn(&dir.path().join("held"), &config(held), held);
    assert!(!loser.listening(&dir.path().join("held")));
    drop(loser);
    // A free port: nginx's own.
    let free = free_port();
    let mut winner = Nginx::spawn(&dir.path().join("free"), &config(free), free);
    assert!(winner.listening(&dir.path().join("free")));
}
