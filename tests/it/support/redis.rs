//! A real `redis-server` (the Debian package; `.ci/run` installs it) on a free loopback port,
//! for the tests of the Redis store, the bus bridge and several nodes. It runs with no
//! persistence, is stopped when dropped, and can be killed and restarted on the same port to
//! show a node going on without it and reconnecting by itself.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let mut server = Self { port, child: None };
        server.restart();
        server
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (no shutdown handshake: as if the host went away).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty, and waits until it answers PING.
    pub fn restart(&mut self) {
        self.kill();
        let child = Command::new(binary())
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (install the Debian package redis-server; .ci/run does)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self
                .connection()
                .is_some_and(|mut c| redis::cmd("PING").query::<String>(&mut c).is_ok())
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer PING"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A plain connection, for the test to look at what the server stored.
    pub fn connection(&self) -> Option<redis::Connection> {
        redis::Client::open(self.url()).ok()?.get_connection().ok()
    }

    /// The keys under `pattern`.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut connection = self.connection().expect("redis answers");
        redis::cmd("KEYS")
            .arg(pattern)
            .query(&mut connection)
            .expect("KEYS")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn binary() -> &'static str {
    if std::path::Path::new("/usr/bin/redis-server").exists() {
        "/usr/bin/redis-server"
    } else {
        "redis-server"
    }
}
