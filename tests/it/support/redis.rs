//! A real `redis-server` (the Debian package; `.ci/run` installs it) on a free loopback port,
//! for the tests of the Redis store, the bus bridge and several nodes. It runs with no
//! persistence, is stopped when dropped, and can be killed and restarted on the same port to
//! show a node going on without it and reconnecting by itself.

use super::ports::{free_port, wait_listening};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    /// Where it keeps its append-only file, when it keeps one (see [`Self::start_persistent`]).
    data: Option<std::path::PathBuf>,
}

impl RedisServer {
    /// Starts a server on a free port and waits until it answers PING.
    pub fn start() -> Self {
        Self::on_free_port(None)
    }

    /// Starts a server that appends every change to a file in `dir` before it answers
    /// (`appendonly yes`, with the default `appendfsync everysec`), as a production Redis
    /// does: its process killed and restarted, it comes back with what it had (what it wrote
    /// is in the file even when not yet synced to the disk).
    pub fn start_persistent(dir: &std::path::Path) -> Self {
        std::fs::create_dir_all(dir).expect("Redis data dir");
        Self::on_free_port(Some(dir.to_owned()))
    }

    /// On a port free at the start: another one if the server loses that port to someone
    /// else before it binds it (tests run in parallel).
    fn on_free_port(data: Option<std::path::PathBuf>) -> Self {
        let mut server = Self {
            port: 0,
            child: None,
            data,
        };
        for _ in 0..5 {
            server.port = free_port().port();
            if server.try_restart() {
                return server;
            }
        }
        panic!("redis-server found no free port in five tries")
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

    /// Stops the server's process (SIGSTOP): it holds its connections and takes commands
    /// into their sockets, answering none until [`resume`](Self::resume)d, as a host that
    /// stalls.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a [`pause`](Self::pause)d server go on (SIGCONT): it answers what came meanwhile.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("redis-server runs");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} redis-server");
    }

    /// Starts it again on the same port (empty, unless it is persistent) and waits until it
    /// answers PING.
    pub fn restart(&mut self) {
        assert!(
            self.try_restart(),
            "redis-server could not bind its port {} again",
            self.port
        );
    }

    /// [`restart`](Self::restart), false when the server exits instead: its port was
    /// someone else's.
    fn try_restart(&mut self) -> bool {
        self.kill();
        let mut command = Command::new(binary());
        command
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", ""]);
        match &self.data {
            Some(dir) => command.args(["--appendonly", "yes", "--dir"]).arg(dir),
            None => command.args(["--appendonly", "no"]),
        };
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts (install the Debian package redis-server; .ci/run does)");
        // Its own listener, not just an answer: another test's server may hold the port.
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        if wait_listening(&mut child, &[addr], "redis-server").is_err() {
            return false;
        }
        self.child = Some(child);
        connect(self.port);
        true
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

    /// How many times Redis ran `command` (lower case, as `INFO commandstats` names it:
    /// `eval`, `set`) since it started.
    pub fn command_calls(&self, command: &str) -> u64 {
        let mut connection = self.connection().expect("redis answers");
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut connection)
            .expect("INFO commandstats");
        let line = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&line))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |calls| calls.parse().expect("a count"))
    }

    /// The entries of the stream `key` (`XRANGE - +`).
    pub fn stream(&self, key: &str) -> Vec<StreamEntry> {
        let mut connection = self.connection().expect("redis answers");
        xrange(key).query(&mut connection).expect("XRANGE")
    }

    /// Drops every client's pub/sub connection (the nodes' bus subscriptions): each node
    /// makes its own again after its `redis.retry_after_ms`.
    pub fn drop_subscriptions(&self) {
        let mut connection = self.connection().expect("redis answers");
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut connection)
            .expect("CLIENT KILL");
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

/// A Redis Cluster of three masters (real `redis-server` processes in cluster mode), each
/// holding a third of the slots, joined by `CLUSTER MEET`, with a replica each when asked
/// for; stopped when dropped. Its URL is the `redis+cluster://` form the server's
/// `redis.url` accepts (the masters are its seeds).
pub struct RedisCluster {
    /// The masters' ports, then the replicas' (`replicas[i]` follows master `i`).
    ports: Vec<u16>,
    replicas: Vec<u16>,
    /// The processes, in the order of `ports` then `replicas`.
    children: Vec<Child>,
    /// Where the masters keep their cluster config files.
    dir: tempfile::TempDir,
}

impl RedisCluster {
    /// Starts three masters, splits the 16384 slots between them and waits until every one
    /// says `cluster_state:ok`.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        // Each child is in `cluster` as soon as it runs, so a failure past this point (a
        // spawn, a cluster that does not form) stops the ones already started.
        let mut cluster = Self {
            ports: cluster_ports(3),
            replicas: Vec::new(),
            children: Vec::new(),
            dir,
        };
        for index in 0..cluster.ports.len() {
            cluster.ports[index] = cluster.spawn(cluster.ports[index]);
        }
        let mut connections: Vec<redis::Connection> =
            cluster.ports.iter().map(|port| connect(*port)).collect();
        let share = 16384 / cluster.ports.len();
        for (index, connection) in connections.iter_mut().enumerate() {
            let first = index * share;
            let last = if index + 1 == cluster.ports.len() {
                16383
            } else {
                first + share - 1
            };
            redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query::<()>(connection)
                .expect("CLUSTER ADDSLOTSRANGE");
        }
        for port in &cluster.ports[1..] {
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(*port)
                .query::<()>(&mut connections[0])
                .expect("CLUSTER MEET");
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while !connections.iter_mut().all(|connection| {
            redis::cmd("CLUSTER")
                .arg("INFO")
                .query::<String>(connection)
                .is_ok_and(|info| {
                    info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
                })
        }) {
            assert!(Instant::now() < deadline, "the Redis Cluster did not form");
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// [`start`](Self::start), then a replica for each master (`CLUSTER REPLICATE`), waited
    /// for until each replica's link to its master is up.
    pub fn start_with_replicas() -> Self {
        let mut cluster = Self::start();
        let masters = cluster.ports.clone();
        let mut replicas = cluster_ports(3);
        replicas.retain(|port| !masters.contains(port));
        assert_eq!(replicas.len(), 3, "free ports for the replicas");
        for (master, replica) in masters.iter().zip(&mut replicas) {
            *replica = cluster.spawn(*replica);
            cluster.replicas.push(*replica);
            let id: String = redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut connect(*master))
                .expect("CLUSTER MYID");
            let mut connection = connect(*replica);
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(masters[0])
                .query::<()>(&mut connection)
                .expect("CLUSTER MEET");
            // A replica can follow a master only once it knows it.
            let deadline = Instant::now() + Duration::from_secs(20);
            while redis::cmd("CLUSTER")
                .arg("REPLICATE")
                .arg(&id)
                .query::<()>(&mut connection)
                .is_err()
            {
                assert!(
                    Instant::now() < deadline,
                    "the replica did not meet its master"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for replica in replicas {
            let mut connection = connect(replica);
            while !redis::cmd("INFO")
                .arg("replication")
                .query::<String>(&mut connection)
                .is_ok_and(|info| info.contains("master_link_status:up"))
            {
                assert!(Instant::now() < deadline, "a replica did not sync");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        cluster
    }

    /// Starts one `redis-server` in cluster mode (kept in `children`) on `port`, or on
    /// another free one if someone else takes `port` first (tests run in parallel); returns
    /// the port it listens on.
    fn spawn(&mut self, port: u16) -> u16 {
        let mut port = port;
        for _ in 0..5 {
            let mut child = Command::new(binary())
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                .args(["--cluster-node-timeout", "2000"])
                .current_dir(self.dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server starts in cluster mode");
            // Its cluster bus (port + 10000) is bound after the port: both, or it may yet
            // exit on the second.
            let addrs =
                [port, port + 10_000].map(|p| std::net::SocketAddr::from(([127, 0, 0, 1], p)));
            if wait_listening(&mut child, &addrs, "a Redis Cluster node").is_ok() {
                // Only a node that runs is kept: `children` follows `ports`.
                self.children.push(child);
                return port;
            }
            port = cluster_ports(1)[0];
        }
        panic!("a cluster node found no free port in five tries")
    }

    /// SIGKILLs master `index`, then waits until its replica has taken over (it says it is
    /// a master and the cluster is ok again); returns the replica's port.
    pub fn fail_over_master(&mut self, index: usize) -> u16 {
        let _ = self.children[index].kill();
        let _ = self.children[index].wait();
        self.promoted(index)
    }

    /// SIGSTOPs master `index` (it keeps its connections open and answers nothing: a frozen
    /// process, a paused VM), then waits until its replica has taken over; returns the
    /// replica's port. The master stays frozen until the cluster is dropped.
    pub fn freeze_master(&mut self, index: usize) -> u16 {
        let status = Command::new("kill")
            .args(["-STOP", &self.children[index].id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -STOP master {index}");
        self.promoted(index)
    }

    /// The subscribers of `channel` on the server at `port` (`PUBSUB NUMSUB`: those
    /// connected to that server).
    pub fn subscribers(&self, port: u16, channel: &str) -> i64 {
        let counts: Vec<redis::Value> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query(&mut connect(port))
            .expect("PUBSUB NUMSUB");
        match counts.get(1) {
            Some(redis::Value::Int(count)) => *count,
            other => panic!("PUBSUB NUMSUB answered {other:?}"),
        }
    }

    /// The masters' ports (the seeds of [`url`](Self::url)), in order.
    pub fn masters(&self) -> &[u16] {
        &self.ports
    }

    /// Waits until master `index`'s replica has taken over (it says it is a master and the
    /// cluster is ok again); returns the replica's port.
    fn promoted(&self, index: usize) -> u16 {
        let replica = self.replicas[index];
        let mut connection = connect(replica);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let role: Vec<redis::Value> = redis::cmd("ROLE")
                .query(&mut connection)
                .unwrap_or_default();
            let promoted =
                matches!(role.first(), Some(redis::Value::BulkString(r)) if r == b"master");
            let ok = redis::cmd("CLUSTER")
                .arg("INFO")
                .query::<String>(&mut connection)
                .is_ok_and(|info| info.contains("cluster_state:ok"));
            if promoted && ok {
                return replica;
            }
            assert!(Instant::now() < deadline, "the replica did not take over");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until master `index`'s writes so far reached its replica (`WAIT 1`).
    pub fn replicated(&self, index: usize) {
        let acknowledged: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(5000)
            .query(&mut connect(self.ports[index]))
            .expect("WAIT");
        assert_eq!(
            acknowledged, 1,
            "the replica of master {index} did not acknowledge"
        );
    }

    /// `redis+cluster://127.0.0.1:A,127.0.0.1:B,127.0.0.1:C`.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .ports
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The keys under `pattern` on each master, in order.
    pub fn keys_per_master(&self, pattern: &str) -> Vec<Vec<String>> {
        self.ports
            .iter()
            .map(|port| {
                redis::cmd("KEYS")
                    .arg(pattern)
                    .query(&mut connect(*port))
                    .expect("KEYS")
            })
            .collect()
    }

    /// The entries of the stream `key` (`XRANGE - +`), read from the master that holds its
    /// slot (the others answer with a redirection).
    pub fn stream(&self, key: &str) -> Vec<StreamEntry> {
        self.ports
            .iter()
            .find_map(|port| xrange(key).query(&mut connect(*port)).ok())
            .expect("a master holds the key's slot")
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A plain connection to the server on `port`, once it answers PING.
fn connect(port: u16) -> redis::Connection {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(mut connection) = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .ok()
            .and_then(|client| client.get_connection().ok())
        {
            if redis::cmd("PING").query::<String>(&mut connection).is_ok() {
                return connection;
            }
        }
        assert!(
            Instant::now() < deadline,
            "redis-server on {port} did not answer PING"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `count` ports whose cluster bus ports (port + 10000) are free as well.
fn cluster_ports(count: usize) -> Vec<u16> {
    let mut ports = Vec::new();
    while ports.len() < count {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        if port < 55_000
            && !ports.contains(&port)
            && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
        {
            ports.push(port);
        }
    }
    ports
}

#[test]
fn a_redis_server_on_a_port_someone_else_holds_is_not_taken_for_started() {
    let holder = TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut server = RedisServer {
        port: holder.local_addr().expect("addr").port(),
        child: None,
        data: None,
    };
    assert!(!server.try_restart(), "the port is the holder's");
    assert!(server.child.is_none(), "the server that lost is not kept");
    // Started on a free port instead, it runs there (another one if that is lost too).
    let server = RedisServer::start();
    assert_eq!(server.keys("*"), Vec::<String>::new());
}

/// A TCP proxy to `redis` whose replies are held back `delay` while `slow` is set (each
/// as long, from when it came): commands reach Redis at once, their replies come late, as
/// over a slow link. Its `redis://` URL. It runs on a thread of its own (on the test's
/// runtime, blocked in a synchronous wait such as a node's start, it stalled, and the node
/// behind it found Redis unreachable at start), for as long as the caller holds `slow`:
/// within 100 ms of the last `slow` dropped (the test over, or panicking), its thread
/// ends and its sockets close with its runtime.
pub fn slow_replies_proxy(
    redis: &RedisServer,
    delay: std::time::Duration,
    slow: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> String {
    slow_proxy(redis, delay, slow, Held::Replies)
}

/// As [`slow_replies_proxy`], holding back the commands instead: while `slow` is set, each
/// command reaches Redis `delay` after it was sent (its reply comes at once after that), as
/// a node's write that lands after a later one from another connection.
pub fn slow_commands_proxy(
    redis: &RedisServer,
    delay: std::time::Duration,
    slow: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> String {
    slow_proxy(redis, delay, slow, Held::Commands)
}

/// Which way a slow proxy holds bytes back.
#[derive(Clone, Copy, PartialEq)]
enum Held {
    Replies,
    Commands,
}

fn slow_proxy(
    redis: &RedisServer,
    delay: std::time::Duration,
    slow: std::sync::Arc<std::sync::atomic::AtomicBool>,
    held: Held,
) -> String {
    let slow = std::sync::Arc::downgrade(&slow);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    let addr = listener.local_addr().expect("addr");
    let upstream = redis
        .url()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the proxy's runtime");
    std::thread::spawn(move || {
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let mut every = tokio::time::interval(std::time::Duration::from_millis(100));
            loop {
                let client = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((client, _)) => client,
                        Err(_) => return,
                    },
                    _ = every.tick() => {
                        if slow.strong_count() == 0 {
                            return;
                        }
                        continue;
                    }
                };
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let (commands, replies) = (
                    (client_read, server_write, held == Held::Commands),
                    (server_read, client_write, held == Held::Replies),
                );
                for (from, to, is_held) in [commands, replies] {
                    if is_held {
                        copy_late(from, to, delay, slow.clone());
                    } else {
                        tokio::spawn(async move {
                            let (mut from, mut to) = (from, to);
                            let _ = tokio::io::copy(&mut from, &mut to).await;
                        });
                    }
                }
            }
        });
    });
    format!("redis://{addr}/")
}

/// Copies `from` to `to`, each read held back `delay` from when it came while `slow` is
/// set.
fn copy_late(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: std::time::Duration,
    slow: std::sync::Weak<std::sync::atomic::AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (read, mut held) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(count) = from.read(&mut buffer).await {
            if count == 0 {
                break;
            }
            let is_slow = slow
                .upgrade()
                .is_some_and(|slow| slow.load(std::sync::atomic::Ordering::SeqCst));
            let due = tokio::time::Instant::now()
                + if is_slow {
                    delay
                } else {
                    std::time::Duration::ZERO
                };
            let _ = read.send((due, buffer[..count].to_vec()));
        }
    });
    tokio::spawn(async move {
        while let Some((due, bytes)) = held.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                break;
            }
        }
    });
}

/// An entry of a stream as `XRANGE` gives it: its id and its fields (`name, value, …`).
pub type StreamEntry = (String, Vec<String>);

/// `XRANGE key - +`: every entry of the stream `key`.
fn xrange(key: &str) -> redis::Cmd {
    let mut command = redis::cmd("XRANGE");
    command.arg(key).arg("-").arg("+");
    command
}

/// Waits until a session's mirror (`<prefix>events:{session}`, its entries as `read` gives
/// them) holds event `event_id` (`stream_count`): a node mirrors an event a moment after it
/// sends it, later under load, and a test resuming elsewhere right after its client read the
/// event may be ahead of the mirror (what a resume reports as a gap, or does not replay).
pub async fn wait_mirrored(read: impl Fn() -> Vec<StreamEntry>, event_id: &str) {
    let (stream, count) = event_id.split_once('_').expect("an event id");
    let deadline = tokio::time::Instant::now() + crate::support::READ_TIMEOUT;
    while !read()
        .iter()
        .any(|(_, fields)| is_mirrored_event(fields, stream, count))
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{event_id} never mirrored"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Whether the fields of an entry of a session's mirror (`name, value, …`, as `XRANGE`
/// gives them) are event `count` of stream `stream`.
pub fn is_mirrored_event(fields: &[String], stream: &str, count: &str) -> bool {
    let field = |name: &str| {
        fields
            .chunks(2)
            .find(|pair| pair[0] == name)
            .map(|pair| pair[1].as_str())
    };
    field("k") == Some("e") && field("s") == Some(stream) && field("c") == Some(count)
}

/// The slow-commands proxy holds a command back (Redis has not seen it a moment after it
/// was sent, and has once it is answered), and lets it through at once when not slow.
#[test]
fn a_slow_commands_proxy_holds_back_commands() {
    let redis = RedisServer::start();
    let slow = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let delay = std::time::Duration::from_secs(2);
    let url = slow_commands_proxy(&redis, delay, slow.clone());
    let mut through = redis::Client::open(url.as_str())
        .expect("url")
        .get_connection()
        .expect("the proxy takes connections");
    let mut direct = redis.connection().expect("redis answers");
    let pong: String = redis::cmd("PING").query(&mut through).expect("PING");
    assert_eq!(pong, "PONG", "through at once while not slow");
    slow.store(true, std::sync::atomic::Ordering::SeqCst);
    let sent = std::time::Instant::now();
    let setter = std::thread::spawn(move || {
        redis::cmd("SET")
            .arg("held")
            .arg("late")
            .query::<()>(&mut through)
            .expect("SET answered");
        sent.elapsed()
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let early: Option<String> = redis::cmd("GET")
        .arg("held")
        .query(&mut direct)
        .expect("GET");
    assert_eq!(early, None, "the command reached Redis early");
    let took = setter.join().expect("the setter");
    assert!(took >= delay, "answered after {took:?}");
    let late: Option<String> = redis::cmd("GET")
        .arg("held")
        .query(&mut direct)
        .expect("GET");
    assert_eq!(late.as_deref(), Some("late"));
}

/// The slow-replies proxy answers through to Redis while its `slow` is held, and is gone
/// (its port refuses connections) soon after the last one is dropped: a test that ends, or
/// panics, leaves no proxy behind.
#[test]
fn a_slow_replies_proxy_ends_with_its_slow_flag() {
    let redis = RedisServer::start();
    let slow = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let url = slow_replies_proxy(&redis, std::time::Duration::from_millis(10), slow.clone());
    let mut through = redis::Client::open(url.as_str())
        .expect("url")
        .get_connection()
        .expect("the proxy takes connections");
    let pong: String = redis::cmd("PING").query(&mut through).expect("PING");
    assert_eq!(pong, "PONG");
    drop(slow);
    let addr = url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::net::TcpStream::connect(&addr).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the proxy still takes connections"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let answered: redis::RedisResult<String> = redis::cmd("PING").query(&mut through);
    assert!(answered.is_err(), "its connections closed with it");
}
