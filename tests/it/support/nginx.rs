//! nginx in the foreground with its own prefix, running one of the repository's sample
//! configs with its addresses replaced by the ports a test picked; stopped when dropped.

use super::READ_TIMEOUT;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Nginx {
    child: Child,
    pub addr: SocketAddr,
}

impl Nginx {
    /// Runs `sample` (relative to the crate root) with each `(address in the sample, node)`
    /// replaced, and its `listen` address replaced by a free port.
    pub fn start(prefix: &Path, sample: &str, nodes: &[(&str, SocketAddr)], listen: &str) -> Self {
        let sample_text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(sample))
                .expect("the sample config is in the repository");
        let addr = free_port();
        let mut config = sample_text.replace(listen, &addr.to_string());
        for (placeholder, node) in nodes {
            config = config.replace(placeholder, &node.to_string());
        }
        assert_ne!(
            config, sample_text,
            "the sample names the addresses the test replaces"
        );
        for dir in ["logs", "tmp"] {
            std::fs::create_dir_all(prefix.join(dir)).expect("prefix dirs");
        }
        let path = prefix.join("nginx.conf");
        std::fs::write(&path, config).expect("config written");
        let child = Command::new(binary())
            .arg("-p")
            .arg(prefix)
            .args(["-e", "logs/error.log", "-c"])
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts (install the Debian package nginx; .ci/run does)");
        let deadline = Instant::now() + READ_TIMEOUT;
        while TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx did not listen; its log:\n{}",
                std::fs::read_to_string(prefix.join("logs/error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, addr }
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

/// A free loopback port.
pub fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
}
