//! The Redis backend: the same entries and nonces as the memory backend, in one Redis shared
//! by every node, through the `redis` crate's tokio connection manager (one multiplexed
//! connection per thread that sends commands, which reconnects by itself), or in a Redis
//! Cluster through the crate's cluster connection (one multiplexed connection per shard and
//! thread, following the slot map). A connection per thread, not per node: the one
//! connection of a node was driven from the thread that made it, and every command of the
//! other event loops, and its reply, crossed to it and back, each crossing a wake-up (a
//! keyed call over Redis cost three times its CPU; `benches/README.md`, 2026-12-07). Every
//! key of one session carries the session id as its hash tag, so a session's keys live on
//! one shard; every other key is used alone.
//!
//! Every operation is bounded by `redis.timeout_ms`. One that fails (refused, timed out, an
//! error reply) is counted in `mcp_redis_errors_total`, and the node then skips Redis for
//! `redis.retry_after_ms`, working locally, rather than make every request wait for a
//! Redis that is away; the first operation after that tries again (and the manager
//! reconnects). The change from up to down, and back, is logged once each.
//!
//! Entries are encoded as `R<fingerprint hex><owner hex>` (running) and
//! `D<fingerprint hex><result JSON>` (done). Claims and releases are Lua scripts, so each is
//! one atomic step on the server.

use super::Key;
use crate::config::{OnStoreError, RedisSettings};
use crate::observe::metrics::Metrics;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncCommands, Cmd, Pipeline, RedisFuture, Script, Value};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

/// What [`RedisStore::keep_claim`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeptClaim {
    /// The claim was there: its time to live is the one asked now.
    Extended,
    /// The key held nothing: the claim is there now.
    Written,
    /// The key holds another entry.
    Taken,
}

/// The entry under `KEYS[1]`, or, when there is none, `ARGV[1]` is put there for `ARGV[2]` ms and
/// nil is returned; with `KEYS[2]` (Redis's epoch), only if it holds `ARGV[3]` (the epoch the
/// node knows), else 0 is returned and nothing is written: a key found free under an epoch
/// the node has not noted may be one whose claim Redis lost a moment ago.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local v = redis.call('GET', KEYS[1])
if v then return v end
if KEYS[2] and redis.call('GET', KEYS[2]) ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false",
    )
});

/// What Redis answered a claim ([`RedisStore::claim`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ClaimAnswer {
    /// The key held nothing: the claim is there now.
    Claimed,
    /// The entry the key holds.
    Found(Vec<u8>),
    /// The key held nothing, and Redis's epoch was not the one given: nothing was written.
    OtherEpoch,
}

/// Keeps a run's claim `ARGV[1]` under `KEYS[1]` for `ARGV[2]` ms: extended if it is there
/// (1), written if the key holds nothing (2: Redis lost it, or never took it); 0 when the key
/// holds another entry (another run's, or the run's own result). Sent whole (`EVAL`), not by
/// its digest: over a slow link, the first `EVALSHA` of a script Redis has not loaded yet (a
/// node's first keep, or any after Redis restarted) gets `NOSCRIPT` too late for the script
/// to follow, and the claim it was to keep lapsed (review 55 #1).
const KEEP_CLAIM: &str = r"local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
end
if v then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 2";

/// Deletes `KEYS[1]` if it still holds `ARGV[1]` (the caller's own running entry). Sent
/// whole (`EVAL`), as [`KEEP_CLAIM`] is: a release pushed over a slow link by `EVALSHA`
/// never got past `NOSCRIPT` where Redis had not loaded the script yet, and its key stayed
/// held until the claim's lease ran out (review 57 #4).
const RELEASE: &str = r"if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0";

/// Puts the task record `ARGV[1]` under `KEYS[1]` for `ARGV[2]` ms (1), unless the task's
/// end claim (`KEYS[2]`) says `lost` (0).
const PUT_TASK_UNLESS_LOST: &str = r"if redis.call('GET', KEYS[2]) == 'lost' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1";

/// Puts the task record `ARGV[1]` under `KEYS[1]` for `ARGV[2]` ms (1), unless the key holds
/// another record of the task that is finished (0): a node pushing a record it kept while
/// Redis did not answer it in time never writes over the failed record another node wrote
/// when it showed the task failed (-32031), nor over an end its runner stored. (A runner
/// stores nothing after its task's end, so a finished record is the task's last.) A record
/// that is not JSON is written over. Sent whole (`EVAL`), as [`KEEP_CLAIM`] is.
const PUT_TASK_UNLESS_ENDED: &str = r"local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then
local ok, record = pcall(cjson.decode, v)
if ok and type(record) == 'table' and (record.status == 'completed' or record.status == 'failed' or record.status == 'cancelled') then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1";

/// Puts the session record `ARGV[1]` under `KEYS[1]` for `ARGV[2]` ms (1), unless the
/// session was deleted (its end marker, `KEYS[2]`, is there: 0). A write sent before a
/// DELETE on another node, or on another event loop of this one (each has its own
/// connection), may land after it; without the marker it brought the deleted session back
/// for every node. The two keys share the session's hash tag: one slot of a Redis Cluster.
/// Sent whole (`EVAL`), as [`KEEP_CLAIM`] is.
const PUT_UNLESS_DELETED: &str = r"if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1";

/// Ends a session: deletes its record (`KEYS[1]`) and leaves its end marker (`KEYS[2]`) for
/// `ARGV[1]` ms, so that a write of the record already on its way is refused
/// ([`PUT_UNLESS_DELETED`]). Sent whole (`EVAL`).
const END_SESSION: &str = r"redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
return 1";

/// Puts `ARGV[2]` under `KEYS[1]`, keeping its time to live, if it still holds `ARGV[1]`;
/// whether it did.
static SWAP: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('GET', KEYS[1]) == ARGV[1] then
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1
end
return 0",
    )
});

/// Whether the session record under `KEYS[1]` is held by node `ARGV[1]` (a WebSocket
/// session's `node`, the record's first member: read by an anchored pattern, where a parse
/// of the whole record, which a client can make megabytes long, would hold Redis's one
/// thread at every write): the condition of [`PUT_HELD`] and [`DELETE_HELD`]. `nil` when
/// there is no record; a record that names no holder first is not held.
const HELD_BY: &str = r#"local function held_by(key, node)
  local v = redis.call('GET', key)
  if not v then return nil end
  return string.match(v, '^{"node":(%d+)[,}]') == node
end
"#;

/// Puts `ARGV[1]` under `KEYS[1]` for `ARGV[2]` ms if there is no record there or node
/// `ARGV[3]` holds the one there: 1 if it did, 0 if another node holds it (took the session
/// up while this one could not reach Redis) or it was handed over.
static PUT_HELD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{HELD_BY}if held_by(KEYS[1], ARGV[3]) == false then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1"
    ))
});

/// 1 if node `ARGV[1]` holds the record under `KEYS[1]`, or there is none; 0 if another
/// node does (or it was handed over).
static HOLDS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{HELD_BY}if held_by(KEYS[1], ARGV[1]) == false then return 0 end
return 1"
    ))
});

/// Deletes the record under `KEYS[1]` if node `ARGV[1]` holds it.
static DELETE_HELD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{HELD_BY}if held_by(KEYS[1], ARGV[1]) then return redis.call('DEL', KEYS[1]) end
return 0"
    ))
});

/// Claims an end for a node that found the node running it dead: of a POST's SSE stream
/// for a node that follows it from the mirror (see `transport::stream_end`), of a task for a
/// node about to show it failed (see `cluster::tasks::end`). `lost` put under `KEYS[1]` for
/// `ARGV[1]` ms, unless the running node claimed it since its stall (`held`, within its
/// lease): 1 if lost (the caller answers -32031), 0 if held (the node lives, and goes on).
static END_LOST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"if redis.call('GET', KEYS[1]) == 'held' then return 0 end
redis.call('SET', KEYS[1], 'lost', 'PX', ARGV[1])
return 1",
    )
});

/// Claims ends for the node that runs them, going on after it may have been taken for
/// dead (POST SSE streams, see `transport::stream_end`; a task, see `cluster::tasks::end`):
/// `held` put under each of `KEYS` for `ARGV[1]` ms (its lease), unless another node
/// answered -32031 for it (`lost`). One value a key, in their order: 1 if held (the node
/// goes on), 0 if lost (it drops what it would have answered). The keys are of one hash tag
/// (one session's streams, or one task), so one slot of a Redis Cluster: a session's
/// streams are claimed in one round trip (review 55 #8: one each, in sequence, a stall's
/// wait grew with the streams).
static END_HELD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"local held = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == 'lost' then
    held[i] = 0
  else
    redis.call('SET', key, 'held', 'PX', ARGV[1])
    held[i] = 1
  end
end
return held",
    )
});

/// The entry under `KEYS[1]`, its time to live raised to `ARGV[1]` ms if it had less: never
/// shortened (`GETEX PX` would cut a WebSocket session's record, kept for twice the resume
/// grace, to the HTTP idle timeout at any read, even a read for the wrong kind). `PEXPIRE
/// … GT` would do it in one call, from Redis 7 on only. Only a value that opens as a record
/// does (`{"`): one written by something else is refused as unreadable at each read, and
/// renewed by them, a client retrying as told was refused for good (review 51 #8); left to
/// its time to live, it goes, and the session is 404.
static GET_REFRESHED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 2) == '{"' then
  local left = redis.call('PTTL', KEYS[1])
  if left >= 0 and left < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
end
return v"#,
    )
});

/// Where the shared state lives.
enum Backend {
    /// One Redis server.
    Server(redis::Client),
    /// A Redis Cluster: the cluster client, and one plain client per seed for what is not
    /// routed by key (pub/sub, which a cluster forwards to every shard).
    Cluster {
        client: Box<ClusterClient>,
        seeds: Vec<redis::Client>,
    },
}

/// A thread's connection of either backend; cheap to clone (both multiplex one set of
/// sockets).
#[derive(Clone)]
enum Connection {
    /// To one server.
    Server(ConnectionManager),
    /// To a cluster.
    Cluster(ClusterConnection),
    /// To one server, not shared (for one blocking read): no reconnection needed.
    Own(redis::aio::MultiplexedConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Server(con) => con.req_packed_command(cmd),
            Self::Cluster(con) => con.req_packed_command(cmd),
            Self::Own(con) => con.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Server(con) => con.req_packed_commands(pipeline, offset, count),
            Self::Cluster(con) => con.req_packed_commands(pipeline, offset, count),
            Self::Own(con) => con.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Server(con) => con.get_db(),
            Self::Cluster(con) => con.get_db(),
            Self::Own(con) => con.get_db(),
        }
    }
}

/// See the module docs.
pub(crate) struct RedisStore {
    backend: Backend,
    /// One for each thread that asks, made on its first use there (its tasks need the
    /// runtime, which the server starts later), so that a command and its reply stay on the
    /// event loop that sent it. A cluster's are made again after an operation timed out
    /// ([`CLUSTER_REBUILD_EVERY`] at most), so that its slot map is read afresh.
    connections: std::sync::Mutex<HashMap<std::thread::ThreadId, Connection>>,
    /// When a cluster's connection was last made, in ms since `epoch`.
    connected_at: AtomicU64,
    /// The seed a cluster's bus subscription is tried at first (the one after the last that
    /// failed).
    next_seed: std::sync::atomic::AtomicUsize,
    prefix: String,
    timeout: Duration,
    retry_after: Duration,
    /// Until when Redis is skipped, in ms since `epoch`; 0 while it answers.
    down_until: AtomicU64,
    epoch: Instant,
    /// What the node does meanwhile (for the log line).
    on_error: OnStoreError,
    /// The second an unreadable value was last logged ([`crate::first_this_second`]): at
    /// most one line a second, however often a client asks for the key.
    unreadable_logged: AtomicU64,
}

impl RedisStore {
    /// `None` without a URL. The URL was checked by `Settings::validate`. `on_error` is what
    /// the node does while Redis is away (`cluster.on_store_error`).
    pub(crate) fn new(settings: &RedisSettings, on_error: OnStoreError) -> Option<Self> {
        if settings.url.is_empty() {
            return None;
        }
        let backend = match settings.cluster_seeds().ok()? {
            None => Backend::Server(redis::Client::open(settings.url.as_str()).ok()?),
            Some(seeds) => Backend::Cluster {
                client: Box::new(
                    ClusterClient::builder(seeds.iter().map(String::as_str))
                        .connection_timeout(Duration::from_millis(settings.timeout_ms))
                        .response_timeout(Duration::from_millis(settings.timeout_ms))
                        // Redirections after a shard moved are followed; a shard that is away
                        // is not waited for (the node's own pause handles that).
                        .retries(2)
                        .build()
                        .ok()?,
                ),
                seeds: seeds
                    .iter()
                    .map(|seed| redis::Client::open(seed.as_str()))
                    .collect::<Result<_, _>>()
                    .ok()?,
            },
        };
        Some(Self {
            backend,
            connections: std::sync::Mutex::default(),
            connected_at: AtomicU64::new(0),
            next_seed: std::sync::atomic::AtomicUsize::new(0),
            prefix: settings.key_prefix.clone(),
            timeout: Duration::from_millis(settings.timeout_ms),
            retry_after: Duration::from_millis(settings.retry_after_ms),
            down_until: AtomicU64::new(0),
            epoch: Instant::now(),
            on_error,
            unreadable_logged: AtomicU64::new(0),
        })
    }

    /// A pub/sub connection of its own subscribed to `channel`, for the bus bridge: to the
    /// server, or to a seed of the cluster (a cluster forwards every publication to every
    /// shard, so any one of them hears the whole channel), each seed tried within the
    /// timeout, beginning with the one after the last that failed. (One budget for all,
    /// always from the first: a first seed that took connections and never answered, a
    /// frozen process, held the bus down on every node for as long as it stayed frozen,
    /// attack run 52a, C2.)
    pub(crate) async fn subscribed(&self, channel: &str) -> redis::RedisResult<redis::aio::PubSub> {
        let subscribe = async |client: &redis::Client| {
            let connect = async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(channel).await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            tokio::time::timeout(self.timeout, connect)
                .await
                .unwrap_or_else(|_| Err((redis::ErrorKind::Io, "timed out").into()))
        };
        match &self.backend {
            Backend::Server(client) => subscribe(client).await,
            Backend::Cluster { seeds, .. } => {
                let first = self.next_seed.load(Ordering::Relaxed);
                let mut last = None;
                for n in 0..seeds.len() {
                    let at = (first + n) % seeds.len();
                    match subscribe(&seeds[at]).await {
                        Ok(pubsub) => return Ok(pubsub),
                        Err(error) => {
                            self.next_seed
                                .store((at + 1) % seeds.len(), Ordering::Relaxed);
                            last = Some(error);
                        }
                    }
                }
                Err(last.unwrap_or_else(|| {
                    redis::RedisError::from((redis::ErrorKind::Io, "no seed to subscribe through"))
                }))
            }
        }
    }

    /// How long a bus subscription may take: the timeout for each seed tried.
    pub(crate) fn subscribe_timeout(&self) -> Duration {
        match &self.backend {
            Backend::Server(_) => self.timeout,
            Backend::Cluster { seeds, .. } => self.timeout * (seeds.len().max(1) as u32),
        }
    }

    /// The pub/sub channel of the change bus.
    pub(crate) fn bus_channel(&self) -> String {
        format!("{}bus", self.prefix)
    }

    /// The longest wait for one operation.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How long the node works locally after a failure.
    pub(crate) fn retry_after(&self) -> Duration {
        self.retry_after
    }

    fn entry_key(&self, key: &Key) -> String {
        self.key_name("idem:", key)
    }

    fn nonce_key(&self, key: &Key) -> String {
        self.key_name("nonce:", key)
    }

    /// `<prefix><kind><hex of key>`.
    fn key_name(&self, kind: &str, key: &Key) -> String {
        let mut name = String::with_capacity(self.prefix.len() + kind.len() + 2 * key.len());
        name.push_str(&self.prefix);
        name.push_str(kind);
        data_encoding::HEXLOWER.encode_append(key, &mut name);
        name
    }

    /// How long until Redis is tried again: what is left of the pause after a failure (the
    /// whole `retry_after` when it is not paused, as a hint for a client's retry).
    pub(crate) fn paused_for(&self) -> Duration {
        let until = self.down_until.load(Ordering::Relaxed);
        let left = until.saturating_sub(self.now_ms());
        if left == 0 {
            self.retry_after
        } else {
            Duration::from_millis(left)
        }
    }

    /// Whether an operation failed since Redis last answered one: Redis may have restarted
    /// meanwhile (its connections drop with it, so at least one operation fails), empty.
    pub(crate) fn failed_since_last_answer(&self) -> bool {
        self.down_until.load(Ordering::Relaxed) != 0
    }

    /// Whether Redis is worth trying now (it answered last time, or the pause is over).
    pub(crate) fn is_available(&self) -> bool {
        let until = self.down_until.load(Ordering::Relaxed);
        until == 0 || self.now_ms() >= until
    }

    fn now_ms(&self) -> u64 {
        // At least 1, so that a pause never ends at 0 ("up").
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// Records a value Redis answered with that this node cannot read (a key written by
    /// something else, or garbage): counted and logged (at most once a second), and
    /// answered as for that key alone. It says nothing of Redis itself, so it does not
    /// pause Redis for the whole node as a failure does: one poisoned key asked for once a
    /// second kept every keyed call and new session of the node refused.
    pub(crate) fn unreadable(&self, metrics: &Metrics, what: &str, error: &dyn std::fmt::Display) {
        metrics.redis_errors.inc();
        if crate::first_this_second(&self.unreadable_logged) {
            tracing::warn!(operation = what, %error, "a value in Redis this node cannot read");
        }
    }

    /// Records a failed operation: counted, logged when Redis was up until now.
    pub(crate) fn failed(&self, metrics: &Metrics, what: &str, error: &dyn std::fmt::Display) {
        metrics.redis_errors.inc();
        let until = self.now_ms() + self.retry_after.as_millis() as u64;
        if self.down_until.swap(until, Ordering::Relaxed) == 0 {
            metrics.redis_outages.inc();
            let meanwhile = match self.on_error {
                OnStoreError::Refuse => {
                    "refusing tool calls with an idempotency key until it answers (cluster.on_store_error = \"refuse\")"
                }
                OnStoreError::Local => "going on with this node's own store",
            };
            tracing::warn!(
                operation = what,
                %error,
                retry_after_ms = self.retry_after.as_millis() as u64,
                "Redis unavailable; {meanwhile}"
            );
        }
    }

    /// Records a successful operation: logged when Redis was down until now. Back from an
    /// outage, the other threads' connections are let go, to be made afresh at their next
    /// command: one Redis closed while it was away (a restart) failed that command, broken
    /// pipe, and the node took Redis for gone again and skipped it for `retry_after_ms`,
    /// each event loop in turn (attack run 57b, L1: up to three such false outages after
    /// every restart, keyed calls refused meanwhile).
    pub(crate) fn succeeded(&self) {
        if self.down_until.load(Ordering::Relaxed) != 0
            && self.down_until.swap(0, Ordering::Relaxed) != 0
        {
            let here = std::thread::current().id();
            crate::lock(&self.connections).retain(|thread, _| *thread == here);
            tracing::info!("Redis reachable again; state is shared with the other nodes");
        }
    }

    /// Runs `op` on the connection, bounded by the timeout. `None` when Redis is paused or
    /// the operation failed (then counted and the pause begins).
    async fn run<T, F, Fut>(&self, metrics: &Metrics, what: &'static str, op: F) -> Option<T>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        if !self.is_available() {
            metrics.redis_skipped.inc();
            return None;
        }
        self.attempt(metrics, what, op).await
    }

    /// [`run`](Self::run) even while Redis is skipped after a failure: what must not wait
    /// out the pause (the node's heartbeat: skipped, it would let the node pass for dead
    /// after 3 s of a pause as long as `retry_after_ms`). A success ends the pause.
    async fn attempt<T, F, Fut>(&self, metrics: &Metrics, what: &'static str, op: F) -> Option<T>
    where
        F: FnOnce(Connection) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let Some(connection) = self.connection() else {
            self.failed(metrics, what, &"cannot start the connection");
            return None;
        };
        match tokio::time::timeout(self.timeout, op(connection)).await {
            Ok(Ok(value)) => {
                self.succeeded();
                Some(value)
            }
            // A key of another type than the operation's (`WRONGTYPE`: written by something
            // else): Redis answered, and this key alone is refused; a failure would make the
            // node skip Redis for everyone (attack run 50c, F7). (Values are read as bytes
            // where they may not be text, and converted by the caller.)
            Ok(Err(error)) if is_wrong_type(&error) => {
                self.succeeded();
                self.unreadable(metrics, what, &error);
                None
            }
            Ok(Err(error)) => {
                self.failed(metrics, what, &error);
                if error.is_timeout() {
                    self.renew_cluster_connection();
                }
                None
            }
            Err(_elapsed) => {
                self.failed(metrics, what, &"timed out");
                self.renew_cluster_connection();
                None
            }
        }
    }

    fn connection(&self) -> Option<Connection> {
        let thread = std::thread::current().id();
        let mut connections = crate::lock(&self.connections);
        if let Some(connection) = connections.get(&thread) {
            return Some(connection.clone());
        }
        let made = match &self.backend {
            Backend::Server(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout))
                    .set_number_of_retries(1)
                    .set_max_delay(self.retry_after);
                ConnectionManager::new_lazy_with_config(client.clone(), config)
                    .ok()
                    .map(Connection::Server)
            }
            Backend::Cluster { client, .. } => {
                let config = ClusterConfig::new()
                    .set_connection_timeout(self.timeout)
                    .set_response_timeout(self.timeout);
                self.connected_at.store(self.now_ms(), Ordering::Relaxed);
                Some(Connection::Cluster(
                    client.get_pending_async_connection_with_config(config),
                ))
            }
        }?;
        connections.insert(thread, made.clone());
        Some(made)
    }

    /// Asks a `PING` on each other thread's connection (sent together, each bounded by the
    /// timeout); called at each beat, one pass at a time (`bridge::beat`). A connection no command used for a
    /// while (an event loop without keyed calls or sessions in Redis) so stays known to the
    /// NATs and proxies on the way and to Redis's idle `timeout`, as the node's one
    /// connection was by the beats: closed for idling, its thread's next command failed and
    /// made the whole node skip Redis. One that does not answer (closed, or dropped without
    /// a word: the crate reconnects on a closed socket, not on a silent one) is forgotten,
    /// to be made afresh at its thread's next command, without the node skipping Redis.
    pub(crate) async fn keep_connections(&self) {
        let here = std::thread::current().id();
        let others: Vec<(std::thread::ThreadId, Connection)> = crate::lock(&self.connections)
            .iter()
            .filter(|(thread, _)| **thread != here)
            .map(|(thread, connection)| (*thread, connection.clone()))
            .collect();
        let pings = others
            .into_iter()
            .map(|(thread, mut connection)| async move {
                let ping = redis::cmd("PING");
                let answered = matches!(
                    tokio::time::timeout(self.timeout, ping.query_async::<()>(&mut connection))
                        .await,
                    Ok(Ok(()))
                );
                (thread, answered)
            });
        for (thread, answered) in futures_util::future::join_all(pings).await {
            if !answered {
                crate::lock(&self.connections).remove(&thread);
            }
        }
    }

    /// An operation on a cluster timed out: its connection is made again (at most every
    /// [`CLUSTER_REBUILD_EVERY`]), which reads the slot map afresh from a seed that
    /// answers. The cluster client reads it again on a redirection or a dropped connection
    /// only: a master that stalled (a frozen process, a paused VM, a partition without a
    /// reset) keeps its sockets open, and every operation of its slots timed out against it
    /// long after the cluster had failed it over, on every node, until it came back (attack
    /// run 52a, C1). Operations under way finish on the connection they have.
    fn renew_cluster_connection(&self) {
        if !matches!(self.backend, Backend::Cluster { .. }) {
            return;
        }
        let now = self.now_ms();
        let last = self.connected_at.load(Ordering::Relaxed);
        if now.saturating_sub(last) < CLUSTER_REBUILD_EVERY.as_millis() as u64 {
            return;
        }
        if self
            .connected_at
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            crate::lock(&self.connections).clear();
            // Said once a stretch: under a slowdown that goes on, it is done every 2 s
            // (review 58 #6).
            if now.saturating_sub(last) > 10 * CLUSTER_REBUILD_EVERY.as_millis() as u64 {
                tracing::info!("a Redis Cluster operation timed out: its slot map is read again");
            } else {
                tracing::debug!("a Redis Cluster operation timed out: its slot map is read again");
            }
        }
    }

    /// Puts `running` under `key` for `ttl` if the key holds nothing (and, with `epoch`, if
    /// Redis's epoch is that one: [`CLAIM`]); what Redis answered, `None` when it could not
    /// be asked.
    pub(crate) async fn claim(
        &self,
        metrics: &Metrics,
        key: &Key,
        running: &[u8],
        ttl: Duration,
        epoch: Option<String>,
    ) -> Option<ClaimAnswer> {
        let key = self.entry_key(key);
        // A script may touch the keys of one slot only: on a cluster the epoch is not
        // asked (its key lives on one shard, and only that shard's loss changes it).
        let epoch = epoch
            .filter(|_| matches!(self.backend, Backend::Server(_)))
            .map(|epoch| (self.epoch_key(), epoch));
        let answer = self
            .run(metrics, "claim", |mut con| async move {
                let mut claim = CLAIM.key(key);
                claim.arg(running).arg(expiry_ms(ttl));
                if let Some((epoch_key, epoch)) = epoch {
                    claim.key(epoch_key).arg(epoch);
                }
                claim.invoke_async::<Value>(&mut con).await
            })
            .await?;
        match answer {
            // Lua's `false`: nil over RESP2, a boolean over RESP3 (`?protocol=resp3`).
            Value::Nil | Value::Boolean(false) => Some(ClaimAnswer::Claimed),
            Value::BulkString(found) => Some(ClaimAnswer::Found(found)),
            Value::Int(0) => Some(ClaimAnswer::OtherEpoch),
            other => {
                self.unreadable(metrics, "claim", &format_args!("an answer {other:?}"));
                None
            }
        }
    }

    /// Keeps a run's claim (`running`) under `key` for `ttl` ([`KEEP_CLAIM`]): what Redis
    /// did, or `None` when it did not answer in time (sent, the command may still land).
    pub(crate) async fn keep_claim(
        &self,
        metrics: &Metrics,
        key: &Key,
        running: &[u8],
        ttl: Duration,
    ) -> Option<KeptClaim> {
        let key = self.entry_key(key);
        let kept = self
            // Sent even while Redis is skipped after a failure: over a slow link the
            // command lands though its reply comes late (see `Store::keep_running`).
            .attempt(metrics, "keep_claim", |mut con| async move {
                eval_script(KEEP_CLAIM, &[&key])
                    .arg(running)
                    .arg(expiry_ms(ttl))
                    .query_async::<i64>(&mut con)
                    .await
            })
            .await?;
        Some(match kept {
            1 => KeptClaim::Extended,
            2 => KeptClaim::Written,
            _ => KeptClaim::Taken,
        })
    }

    /// Puts `done` under `key` for `ttl`. Whether Redis took it.
    pub(crate) async fn complete(
        &self,
        metrics: &Metrics,
        key: &Key,
        done: Vec<u8>,
        ttl: Duration,
    ) -> bool {
        self.put_done(metrics, key, done, ttl, false).await
    }

    /// [`complete`](Self::complete), sent even while Redis is skipped after a failure (see
    /// `Store::push_stranded`). Whether Redis answered in time.
    pub(crate) async fn complete_now(
        &self,
        metrics: &Metrics,
        key: &Key,
        done: Vec<u8>,
        ttl: Duration,
    ) -> bool {
        self.put_done(metrics, key, done, ttl, true).await
    }

    /// [`complete`](Self::complete), or [`complete_now`](Self::complete_now) (`at_once`).
    async fn put_done(
        &self,
        metrics: &Metrics,
        key: &Key,
        done: Vec<u8>,
        ttl: Duration,
        at_once: bool,
    ) -> bool {
        let key = self.entry_key(key);
        let put = |mut con: Connection| async move {
            con.pset_ex::<_, _, ()>(key, done, expiry_ms(ttl)).await
        };
        let answered = if at_once {
            self.attempt(metrics, "complete", put).await
        } else {
            self.run(metrics, "complete", put).await
        };
        answered.is_some()
    }

    /// Deletes `key` if it still holds `running`.
    /// Whether Redis answered (whatever it held).
    pub(crate) async fn release(&self, metrics: &Metrics, key: &Key, running: Vec<u8>) -> bool {
        self.delete_running(metrics, key, running, false).await
    }

    /// [`release`](Self::release), sent even while Redis is skipped after a failure (see
    /// `Store::push_stranded`). Whether Redis answered in time.
    pub(crate) async fn release_now(&self, metrics: &Metrics, key: &Key, running: Vec<u8>) -> bool {
        self.delete_running(metrics, key, running, true).await
    }

    /// [`release`](Self::release), or [`release_now`](Self::release_now) (`at_once`).
    async fn delete_running(
        &self,
        metrics: &Metrics,
        key: &Key,
        running: Vec<u8>,
        at_once: bool,
    ) -> bool {
        let key = self.entry_key(key);
        let delete = |mut con: Connection| async move {
            eval_script(RELEASE, &[&key])
                .arg(running)
                .query_async::<i64>(&mut con)
                .await
        };
        let answered = if at_once {
            self.attempt(metrics, "release", delete).await
        } else {
            self.run(metrics, "release", delete).await
        };
        answered.is_some()
    }

    /// Records a nonce for `ttl`: `Some(true)` when it is new, `Some(false)` when another
    /// request (on any node) had it. `None` when Redis could not be asked.
    pub(crate) async fn claim_nonce(
        &self,
        metrics: &Metrics,
        key: &Key,
        ttl: Duration,
    ) -> Option<bool> {
        let key = self.nonce_key(key);
        self.run(metrics, "nonce", |mut con| async move {
            redis::cmd("SET")
                .arg(key)
                .arg(1)
                .arg("NX")
                .arg("PX")
                .arg(expiry_ms(ttl))
                .query_async::<Option<String>>(&mut con)
                .await
                .map(|set| set.is_some())
        })
        .await
    }

    fn task_key(&self, id: &str) -> String {
        format!("{}task:{id}", self.prefix)
    }

    /// The key of the steers (answers, cancels) sent to a task through Redis.
    fn task_steers_key(&self, id: &str) -> String {
        format!("{}task-steer:{id}", self.prefix)
    }

    /// Keeps a steer (its JSON) for the task `id`, the last [`TASK_STEERS_KEPT`] of them and
    /// [`TASK_STEERS_KEPT_BYTES`] at most (the newest always: none longer is sent here), for `ttl` (the task's time
    /// left): its runner's node reads them again when its bus subscription was down (it may
    /// have missed the steer's message). Whether Redis took it.
    pub(crate) async fn keep_task_steer(
        &self,
        metrics: &Metrics,
        id: &str,
        steer: String,
        ttl: Duration,
    ) -> bool {
        let key = self.task_steers_key(id);
        let ttl_ms = expiry_ms(ttl);
        self.run(metrics, "keep_task_steer", |mut con| async move {
            eval_script(KEEP_STEER, &[&key])
                .arg(steer)
                .arg(ttl_ms)
                .arg(TASK_STEERS_KEPT)
                .arg(TASK_STEERS_KEPT_BYTES)
                .query_async::<i64>(&mut con)
                .await
        })
        .await
        .is_some()
    }

    /// Takes back a steer [`keep_task_steer`](Self::keep_task_steer) kept (its newest copy),
    /// when its message could not be sent and the client is told so: it is not to apply
    /// later, when the runner's node reads the steers again (review 58 #4). Best effort.
    pub(crate) async fn forget_task_steer(&self, metrics: &Metrics, id: &str, steer: String) {
        let key = self.task_steers_key(id);
        // Sent even while the node skips Redis: the failed publish that calls this has
        // most likely just made it skip (review 59).
        self.attempt(metrics, "forget_task_steer", |mut con| async move {
            con.lrem::<_, _, i64>(key, -1, steer).await
        })
        .await;
    }

    /// Deletes the steers kept for the task `id` ([`keep_task_steer`](Self::keep_task_steer)):
    /// its task ended, and they steer nothing any more (kept, they took Redis's room for the
    /// task's whole time to live, an hour by default; attack run 58, F2). Best effort: left,
    /// they lapse with that time.
    pub(crate) async fn drop_task_steers(&self, metrics: &Metrics, id: &str) {
        let key = self.task_steers_key(id);
        self.run(metrics, "drop_task_steers", |mut con| async move {
            con.del::<_, i64>(key).await
        })
        .await;
    }

    /// The steers kept for the task `id` ([`keep_task_steer`](Self::keep_task_steer)),
    /// oldest first; `None` when Redis could not be asked.
    pub(crate) async fn task_steers(&self, metrics: &Metrics, id: &str) -> Option<Vec<String>> {
        let key = self.task_steers_key(id);
        let steers = self
            .run(metrics, "task_steers", |mut con| async move {
                con.lrange::<_, Vec<Vec<u8>>>(key, 0, -1).await
            })
            .await?;
        // One that is not UTF-8 was not written by a node: left out.
        Some(
            steers
                .into_iter()
                .filter_map(|steer| String::from_utf8(steer).ok())
                .collect(),
        )
    }

    /// Stores a task (its JSON) for `ttl`. Whether Redis took it.
    pub(crate) async fn put_task(
        &self,
        metrics: &Metrics,
        id: &str,
        json: String,
        ttl: Duration,
    ) -> bool {
        let key = self.task_key(id);
        // At least 1 ms: a task whose time is up is kept that long, not refused by Redis.
        let ttl_ms = expiry_ms(ttl);
        self.run(metrics, "put_task", |mut con| async move {
            con.pset_ex::<_, _, ()>(key, json, ttl_ms).await
        })
        .await
        .is_some()
    }

    /// [`put_task`](Self::put_task) for the task's own runner, unless another node claimed
    /// its end `lost` ([`PUT_TASK_UNLESS_LOST`], on one Redis server): `Some(true)` stored,
    /// `Some(false)` lost (the task was shown failed: its record is that one), `None` when
    /// Redis could not be asked. The claim and the record are one write, so no record stored
    /// after a claim of `held` lands over the failed one when the node stalled again between
    /// the two (review 58 #3). On a Redis Cluster the two keys are in different slots: the
    /// record is put as [`put_task`](Self::put_task) puts it, and that window stays.
    pub(crate) async fn put_task_unless_lost(
        &self,
        metrics: &Metrics,
        id: &str,
        json: String,
        ttl: Duration,
    ) -> Option<bool> {
        if matches!(self.backend, Backend::Cluster { .. }) {
            return self.put_task(metrics, id, json, ttl).await.then_some(true);
        }
        let key = self.task_key(id);
        let end = self.task_end_key(id);
        let ttl_ms = expiry_ms(ttl);
        self.run(metrics, "put_task", |mut con| async move {
            eval_script(PUT_TASK_UNLESS_LOST, &[&key, &end])
                .arg(json)
                .arg(ttl_ms)
                .query_async::<i64>(&mut con)
                .await
        })
        .await
        .map(|put| put == 1)
    }

    /// [`put_task`](Self::put_task), sent even while Redis is skipped after a failure (a
    /// beat Redis did not answer in time: over a slow link the command lands, its reply comes
    /// late), and never over a finished record ([`PUT_TASK_UNLESS_ENDED`]): `Some(true)` when
    /// Redis holds it now, `Some(false)` when it holds a finished record of the task that is
    /// not this one (another node showed it failed meanwhile: the claim settles it, see
    /// `tasks::write_back`), `None` when Redis did not answer in time.
    pub(crate) async fn put_task_now(
        &self,
        metrics: &Metrics,
        id: &str,
        json: String,
        ttl: Duration,
    ) -> Option<bool> {
        let key = self.task_key(id);
        let ttl_ms = expiry_ms(ttl);
        self.attempt(metrics, "put_task", |mut con| async move {
            eval_script(PUT_TASK_UNLESS_ENDED, &[&key])
                .arg(json)
                .arg(ttl_ms)
                .query_async::<i64>(&mut con)
                .await
        })
        .await
        .map(|put| put == 1)
    }

    /// The key of Redis's epoch ([`epoch_or`](Self::epoch_or)).
    fn epoch_key(&self) -> String {
        format!("{}epoch", self.prefix)
    }

    /// The key a node renews while it writes again what Redis lost ([`mark_rewriting`](Self::mark_rewriting)).
    fn rewriting_key(&self) -> String {
        format!("{}rewriting", self.prefix)
    }

    /// Says, for `lease`, that a node is writing its records again after Redis lost them
    /// (restarted empty): a record Redis does not hold meanwhile may be one still to come
    /// ([`rewriting`](Self::rewriting)). One key for every node, renewed by each while its
    /// pass runs: "any node rewriting" is one read, on a Redis Cluster too (a key per node
    /// would take a scan of every shard). Sent even while Redis is skipped. Whether Redis
    /// answered in time.
    pub(crate) async fn mark_rewriting(
        &self,
        metrics: &Metrics,
        node: u64,
        lease: Duration,
    ) -> bool {
        let key = self.rewriting_key();
        let lease_ms = expiry_ms(lease);
        self.attempt(metrics, "mark_rewriting", |mut con| async move {
            con.pset_ex::<_, _, ()>(key, node, lease_ms).await
        })
        .await
        .is_some()
    }

    /// Whether some node says it is writing its records again ([`mark_rewriting`](Self::mark_rewriting));
    /// `None` when Redis could not be asked.
    pub(crate) async fn rewriting(&self, metrics: &Metrics) -> Option<bool> {
        let key = self.rewriting_key();
        self.run(metrics, "rewriting", |mut con| async move {
            con.exists::<_, bool>(key).await
        })
        .await
    }

    /// The JSON of a task, `Some(None)` when there is none; `None` when Redis could not be
    /// asked.
    pub(crate) async fn get_task(&self, metrics: &Metrics, id: &str) -> Option<Option<String>> {
        let key = self.task_key(id);
        // Bytes, made text here: a value that is not UTF-8 is that task's alone to refuse,
        // where the client's conversion failing made the node skip Redis (review 51 #7).
        let record = self
            .run(metrics, "get_task", |mut con| async move {
                con.get::<_, Option<Vec<u8>>>(key).await
            })
            .await?;
        self.text(metrics, "get_task", record)
    }

    /// A value read as bytes, as text; one that is not UTF-8 (written by something else) is
    /// that key's problem, counted as unreadable (see [`unreadable`](Self::unreadable)), not
    /// a failure of Redis: `None`, as for a value Redis could not give.
    fn text(
        &self,
        metrics: &Metrics,
        what: &str,
        value: Option<Vec<u8>>,
    ) -> Option<Option<String>> {
        match value.map(String::from_utf8).transpose() {
            Ok(value) => Some(value),
            Err(error) => {
                self.unreadable(metrics, what, &error);
                None
            }
        }
    }

    /// A session's key, hash-tagged by its id so that every key of a session lives on one
    /// shard of a Redis Cluster.
    fn session_key(&self, id: &str) -> String {
        format!("{}session:{{{id}}}", self.prefix)
    }

    /// The key of a deleted session's end marker ([`END_SESSION`]), hash-tagged as its
    /// record is.
    fn session_ended_key(&self, id: &str) -> String {
        format!("{}session-ended:{{{id}}}", self.prefix)
    }

    /// Stores an HTTP session's record (its JSON) for `ttl`, unless the session was deleted
    /// ([`PUT_UNLESS_DELETED`]): `Some(true)` stored, `Some(false)` deleted (the writer's
    /// copy ends), `None` when Redis could not be asked.
    pub(crate) async fn put_session(
        &self,
        metrics: &Metrics,
        id: &str,
        json: String,
        ttl: Duration,
    ) -> Option<bool> {
        let key = self.session_key(id);
        let ended = self.session_ended_key(id);
        let ttl_ms = expiry_ms(ttl);
        self.run(metrics, "put_session", |mut con| async move {
            eval_script(PUT_UNLESS_DELETED, &[&key, &ended])
                .arg(json)
                .arg(ttl_ms)
                .query_async::<i64>(&mut con)
                .await
        })
        .await
        .map(|put| put == 1)
    }

    /// Stores a WebSocket session's record (its JSON) for `ttl`, as written by its holder,
    /// node `node`: only if there is no record or that node holds the one there
    /// ([`PUT_HELD`]). A node that lost Redis for longer than its heartbeat may have had the
    /// session taken up meanwhile; its writes must not bring its stale copy back over the
    /// new holder's. `Some(false)` when another node holds it, `None` when Redis could not be
    /// asked.
    pub(crate) async fn put_held_session(
        &self,
        metrics: &Metrics,
        id: &str,
        json: String,
        ttl: Duration,
        node: u64,
    ) -> Option<bool> {
        let key = self.session_key(id);
        let ttl_ms = expiry_ms(ttl);
        self.run(metrics, "put_session", |mut con| async move {
            PUT_HELD
                .key(key)
                .arg(json)
                .arg(ttl_ms)
                .arg(node)
                .invoke_async::<i64>(&mut con)
                .await
        })
        .await
        .map(|put| put == 1)
    }

    /// Whether node `node` still holds WebSocket session `id` (no other node took it up:
    /// there is no record, or its record names `node`). Asked even while Redis is skipped
    /// after a failure: a node that stalled may find a timed-out operation failed as it goes
    /// on. `None` when Redis could not be asked.
    pub(crate) async fn holds_session(
        &self,
        metrics: &Metrics,
        id: &str,
        node: u64,
    ) -> Option<bool> {
        let key = self.session_key(id);
        self.attempt(metrics, "holds_session", |mut con| async move {
            HOLDS.key(key).arg(node).invoke_async::<i64>(&mut con).await
        })
        .await
        .map(|held| held == 1)
    }

    /// A session's record, its time to live raised to `ttl` if it had less
    /// ([`GET_REFRESHED`]); `Some(None)` when there is none, `None` when Redis could not be
    /// asked.
    pub(crate) async fn get_session(
        &self,
        metrics: &Metrics,
        id: &str,
        ttl: Duration,
    ) -> Option<Option<String>> {
        let key = self.session_key(id);
        let ttl_ms = expiry_ms(ttl);
        // Read as bytes and made text here (see `text`).
        let record = self
            .run(metrics, "get_session", |mut con| async move {
                GET_REFRESHED
                    .key(key)
                    .arg(ttl_ms)
                    .invoke_async::<Option<Vec<u8>>>(&mut con)
                    .await
            })
            .await?;
        self.text(metrics, "get_session", record)
    }

    /// Replaces a session's record by `new` if it is still `old` (as read: any write since,
    /// by any node, refuses it), keeping its time to live: one step in Redis, so that of two
    /// nodes that read the same record, one alone replaces it. `None` when Redis could not
    /// be asked.
    pub(crate) async fn swap_session(
        &self,
        metrics: &Metrics,
        id: &str,
        old: &str,
        new: &str,
    ) -> Option<bool> {
        let key = self.session_key(id);
        self.run(metrics, "swap_session", |mut con| async move {
            SWAP.key(key)
                .arg(old)
                .arg(new)
                .invoke_async::<i64>(&mut con)
                .await
        })
        .await
        .map(|swapped| swapped == 1)
    }

    /// Ends an HTTP session in Redis: deletes its record, and refuses for `remembered` any
    /// write of it still on its way ([`END_SESSION`]). Whether Redis took it.
    pub(crate) async fn delete_session(
        &self,
        metrics: &Metrics,
        id: &str,
        remembered: Duration,
    ) -> bool {
        let key = self.session_key(id);
        let ended = self.session_ended_key(id);
        let remembered_ms = expiry_ms(remembered);
        self.run(metrics, "delete_session", |mut con| async move {
            eval_script(END_SESSION, &[&key, &ended])
                .arg(remembered_ms)
                .query_async::<i64>(&mut con)
                .await
        })
        .await
        .is_some()
    }

    /// Whether HTTP session `id` was deleted a moment ago (its end marker is there,
    /// [`END_SESSION`]); `None` when Redis could not be asked.
    pub(crate) async fn session_deleted(&self, metrics: &Metrics, id: &str) -> Option<bool> {
        let ended = self.session_ended_key(id);
        self.run(metrics, "session_deleted", |mut con| async move {
            con.exists::<_, bool>(ended).await
        })
        .await
    }

    /// Deletes a WebSocket session's record if node `node` holds it (see
    /// [`put_held_session`](Self::put_held_session)).
    pub(crate) async fn delete_held_session(&self, metrics: &Metrics, id: &str, node: u64) {
        let key = self.session_key(id);
        self.run(metrics, "delete_session", |mut con| async move {
            DELETE_HELD
                .key(key)
                .arg(node)
                .invoke_async::<i64>(&mut con)
                .await
        })
        .await;
    }

    /// The key of the claim of the end of POST stream `stream` of session `id` (see
    /// `transport::stream_end`; hash-tagged like its record).
    fn stream_end_key(&self, id: &str, stream: u64) -> String {
        format!("{}stream-end:{{{id}}}:{stream}", self.prefix)
    }

    /// Claims the end of stream `stream` of session `id` for a node that found its node dead
    /// ([`END_LOST`]), for `ttl`: `Some(true)` when the stream is lost (its requests are
    /// answered -32031 by the caller), `Some(false)` when its node claimed it since its
    /// stall, `None` when Redis could not be asked.
    pub(crate) async fn claim_stream_lost(
        &self,
        metrics: &Metrics,
        id: &str,
        stream: u64,
        ttl: Duration,
    ) -> Option<bool> {
        let key = self.stream_end_key(id, stream);
        self.claim_lost(metrics, "claim_stream_lost", key, ttl)
            .await
    }

    /// Claims the ends of `streams` of session `id` for the node running them
    /// ([`END_HELD`]), for `lease`, in one round trip: for each, in order, `true` when
    /// held, `false` when another node answered its requests -32031; `None` when Redis could
    /// not be asked. Asked even while Redis is skipped after a failure, as
    /// [`holds_session`](Self::holds_session) is: a node that stalled may find an operation
    /// timed out as it goes on.
    pub(crate) async fn claim_streams_held(
        &self,
        metrics: &Metrics,
        id: &str,
        streams: &[u64],
        lease: Duration,
    ) -> Option<Vec<bool>> {
        let keys = streams
            .iter()
            .map(|&stream| self.stream_end_key(id, stream))
            .collect();
        self.claim_held(metrics, "claim_stream_held", keys, lease)
            .await
    }

    /// Whether the end of stream `stream` of session `id` was claimed as lost (a node
    /// answered its requests -32031); `None` when Redis could not be asked.
    pub(crate) async fn stream_lost(
        &self,
        metrics: &Metrics,
        id: &str,
        stream: u64,
    ) -> Option<bool> {
        let key = self.stream_end_key(id, stream);
        self.run(metrics, "stream_lost", |mut con| async move {
            con.get::<_, Option<Vec<u8>>>(key).await
        })
        .await
        .map(|claim| claim.as_deref() == Some(b"lost".as_slice()))
    }

    /// The key of the claim of the end of task `id` (see `cluster::tasks::end`): hash-tagged
    /// by the task's id, one key, so that its claims work on a Redis Cluster too.
    fn task_end_key(&self, id: &str) -> String {
        format!("{}task-end:{{{id}}}", self.prefix)
    }

    /// Claims the end of task `id` for a node that found the task's node dead and is about
    /// to show it failed ([`END_LOST`]), for `ttl`: `Some(true)` when it is lost (shown
    /// failed, -32031), `Some(false)` when its node claimed it since its stall, `None` when
    /// Redis could not be asked.
    pub(crate) async fn claim_task_lost(
        &self,
        metrics: &Metrics,
        id: &str,
        ttl: Duration,
    ) -> Option<bool> {
        let key = self.task_end_key(id);
        self.claim_lost(metrics, "claim_task_lost", key, ttl).await
    }

    /// Claims the end of task `id` for the node running it ([`END_HELD`]), for `lease`:
    /// `Some(true)` when held, `Some(false)` when another node showed it failed (lost);
    /// `None` when Redis could not be asked. Asked even while Redis is skipped, as
    /// [`claim_streams_held`](Self::claim_streams_held) is.
    pub(crate) async fn claim_task_held(
        &self,
        metrics: &Metrics,
        id: &str,
        lease: Duration,
    ) -> Option<bool> {
        let key = self.task_end_key(id);
        let held = self
            .claim_held(metrics, "claim_task_held", vec![key], lease)
            .await?;
        held.first().copied()
    }

    /// Whether the end of task `id` was claimed as lost (another node showed it failed);
    /// `None` when Redis could not be asked. Asked even while Redis is skipped: the task's
    /// node asks it going on after a stall.
    pub(crate) async fn task_lost(&self, metrics: &Metrics, id: &str) -> Option<bool> {
        let key = self.task_end_key(id);
        self.attempt(metrics, "task_lost", |mut con| async move {
            con.get::<_, Option<Vec<u8>>>(key).await
        })
        .await
        .map(|claim| claim.as_deref() == Some(b"lost".as_slice()))
    }

    /// [`END_LOST`] on `key`, for `ttl`: `Some(true)` when lost, `Some(false)` when held.
    async fn claim_lost(
        &self,
        metrics: &Metrics,
        what: &'static str,
        key: String,
        ttl: Duration,
    ) -> Option<bool> {
        let ttl_ms = expiry_ms(ttl);
        self.run(metrics, what, |mut con| async move {
            END_LOST
                .key(key)
                .arg(ttl_ms)
                .invoke_async::<i64>(&mut con)
                .await
        })
        .await
        .map(|lost| lost == 1)
    }

    /// [`END_HELD`] on `keys` (of one hash tag), for `lease`, even while Redis is skipped:
    /// for each, in order, whether it is held.
    async fn claim_held(
        &self,
        metrics: &Metrics,
        what: &'static str,
        keys: Vec<String>,
        lease: Duration,
    ) -> Option<Vec<bool>> {
        let lease_ms = expiry_ms(lease);
        let count = keys.len();
        let mut invocation = END_HELD.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        invocation.arg(lease_ms);
        let held = self
            .attempt(metrics, what, |mut con| async move {
                invocation.invoke_async::<Vec<i64>>(&mut con).await
            })
            .await?;
        // A reply of another length is not this script's: taken as unanswered.
        (held.len() == count).then(|| held.into_iter().map(|one| one == 1).collect())
    }

    /// The key of a session's mirrored SSE events (hash-tagged like its record).
    pub(crate) fn events_key(&self, id: &str) -> String {
        format!("{}events:{{{id}}}", self.prefix)
    }

    /// The key saying a node is alive (refreshed every second while it runs).
    fn node_key(&self, node: u64) -> String {
        format!("{}node:{node}", self.prefix)
    }

    /// Appends entries (each a list of field/value pairs) to the stream `key`, keeping about
    /// `max_len` of them (exactly `cut_to`, when given) and the whole stream for `ttl` after
    /// the last append: one pipelined round trip. Whether Redis took them.
    pub(crate) async fn append_events(
        &self,
        metrics: &Metrics,
        key: &str,
        entries: Vec<Vec<(&'static str, String)>>,
        (max_len, cut_to): (usize, Option<usize>),
        ttl: Duration,
    ) -> bool {
        let key = key.to_owned();
        self.run(metrics, "append_events", |mut con| async move {
            let mut pipe = redis::pipe();
            for fields in &entries {
                let command = pipe
                    .cmd("XADD")
                    .arg(&key)
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(max_len)
                    .arg("*");
                for (field, value) in fields {
                    command.arg(*field).arg(value);
                }
                command.ignore();
            }
            if let Some(cut_to) = cut_to {
                // Exact: `~` cuts whole nodes of ~100 entries only, which may be large ones.
                pipe.cmd("XTRIM")
                    .arg(&key)
                    .arg("MAXLEN")
                    .arg(cut_to)
                    .ignore();
            }
            pipe.cmd("PEXPIRE").arg(&key).arg(expiry_ms(ttl)).ignore();
            pipe.query_async::<()>(&mut con).await
        })
        .await
        .is_some()
    }

    /// The entries of the stream `key` after the entry id `after` (`"0"`: all), each with its
    /// id and fields; waits up to `block` for one when there is none yet (zero: no wait).
    /// `None` when Redis could not be asked.
    pub(crate) async fn read_events(
        &self,
        metrics: &Metrics,
        key: &str,
        after: &str,
        block: Duration,
    ) -> Option<Vec<StreamEntry>> {
        let key = key.to_owned();
        let after = after.to_owned();
        // A blocking read may take `block` on top of the usual timeout.
        let read = async move {
            // Its own connection: a blocking read would hold up the shared one, and answers
            // only after `block` (longer than the usual response timeout).
            let mut con = self.reading_connection(block).await?;
            let mut command = redis::cmd("XREAD");
            if !block.is_zero() {
                command.arg("BLOCK").arg(block.as_millis() as u64);
            }
            command.arg("STREAMS").arg(&key).arg(&after);
            let reply: Option<Vec<(String, Vec<StreamEntry>)>> =
                command.query_async(&mut con).await?;
            Ok::<_, redis::RedisError>(
                reply
                    .into_iter()
                    .flatten()
                    .flat_map(|(_, entries)| entries)
                    .collect(),
            )
        };
        match tokio::time::timeout(self.timeout + block, read).await {
            Ok(Ok(entries)) => {
                self.succeeded();
                Some(entries)
            }
            Ok(Err(error)) => {
                self.failed(metrics, "read_events", &error);
                None
            }
            Err(_) => {
                self.failed(metrics, "read_events", &"timed out");
                None
            }
        }
    }

    /// A connection of its own for one blocking read of up to `block`.
    async fn reading_connection(&self, block: Duration) -> redis::RedisResult<Connection> {
        match &self.backend {
            Backend::Server(client) => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout + block));
                let con = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(Connection::Own(con))
            }
            Backend::Cluster { client, .. } => {
                let config = ClusterConfig::new()
                    .set_connection_timeout(self.timeout)
                    .set_response_timeout(self.timeout + block);
                Ok(Connection::Cluster(
                    client.get_async_connection_with_config(config).await?,
                ))
            }
        }
    }

    /// Says this node is alive for `ttl`. `None` when Redis did not take the beat; else
    /// whether Redis still held the node's last beat (`false` after a beat of its own went
    /// unanswered past `ttl`, or once Redis lost what it held).
    pub(crate) async fn beat(&self, metrics: &Metrics, node: u64, ttl: Duration) -> Option<bool> {
        let key = self.node_key(node);
        let ttl_ms = expiry_ms(ttl);
        self.attempt(metrics, "beat", |mut con| async move {
            let (held,): (Option<i64>,) = redis::pipe()
                .get(&key)
                .pset_ex(&key, 1, ttl_ms)
                .ignore()
                .query_async(&mut con)
                .await?;
            Ok(held.is_some())
        })
        .await
    }

    /// Redis's epoch: a value the first node to ask writes (`candidate`), without a time to
    /// live, which changes only when Redis lost what it held (restarted empty). Asked apart
    /// from the beat (on a Redis Cluster the two keys are in other slots, and a pipeline
    /// across slots is refused), and read as bytes (a value written by something else does
    /// not fail the read). `None` when Redis could not be asked.
    pub(crate) async fn epoch_or(&self, metrics: &Metrics, candidate: &str) -> Option<String> {
        let key = self.epoch_key();
        let candidate = candidate.to_owned();
        self.attempt(metrics, "epoch", |mut con| async move {
            let (epoch,): (Option<Vec<u8>>,) = redis::pipe()
                .set_nx(&key, candidate)
                .ignore()
                .get(&key)
                .query_async(&mut con)
                .await?;
            Ok(epoch.map(|epoch| String::from_utf8_lossy(&epoch).into_owned()))
        })
        .await
        .flatten()
    }

    /// Redis's epoch (see [`beat`](Self::beat)); `Some(None)` when it holds none.
    pub(crate) async fn epoch(&self, metrics: &Metrics) -> Option<Option<String>> {
        let key = self.epoch_key();
        self.run(metrics, "epoch", |mut con| async move {
            con.get::<_, Option<String>>(key).await
        })
        .await
    }

    /// Puts the shared secret of request states back where Redis lost it (see
    /// [`shared_secret`]): the nodes that took it keep it, and a node started later finds it.
    /// Where Redis holds another one, the older of the two stays ([`PUT_BACK_SECRET`]): one
    /// a node made in the moment Redis came back empty, before the running nodes put theirs
    /// back, gives way to theirs (attack run 52b, F7), however late they notice (review 58
    /// #1: a margin of wall-clock time missed a late beat, and a node's clock that ran
    /// behind).
    pub(crate) async fn put_back_secret(&self, metrics: &Metrics, secret: &SharedSecret) {
        let key = format!("{}mrtr-secret", self.prefix);
        let made_key = beside(&key, ":made");
        let SharedSecret { secret, made_ms } = secret.clone();
        let put = self
            .run(metrics, "put_back_secret", |mut con| async move {
                eval_script(PUT_BACK_SECRET, &[&key, &made_key])
                    .arg(secret)
                    .arg(made_ms)
                    .query_async::<i64>(&mut con)
                    .await
            })
            .await;
        if put == Some(2) {
            tracing::warn!(
                "a node started while Redis came back empty made its own multi round-trip \
                 secret; put back the older one the nodes shared (that node's states are its \
                 own until it restarts)"
            );
        }
    }

    /// Redis's `maxmemory-policy`, if it says (a managed Redis may refuse `CONFIG`). Not an
    /// operation of the store: whatever comes back, Redis is not counted as failed.
    pub(crate) async fn eviction_policy(&self) -> Option<String> {
        let mut connection = self.connection()?;
        let mut config = redis::cmd("CONFIG");
        config.arg("GET").arg("maxmemory-policy");
        let asked = config.query_async::<Vec<String>>(&mut connection);
        let answer = tokio::time::timeout(self.timeout, asked).await.ok()?.ok()?;
        answer.into_iter().nth(1)
    }

    /// Whether node `node` said it is alive lately; `None` when Redis could not be asked.
    pub(crate) async fn is_alive(&self, metrics: &Metrics, node: u64) -> Option<bool> {
        let key = self.node_key(node);
        self.run(metrics, "is_alive", |mut con| async move {
            con.exists::<_, bool>(key).await
        })
        .await
    }

    /// Publishes a message on the bus channel. Whether Redis took it.
    pub(crate) async fn publish(&self, metrics: &Metrics, message: String) -> bool {
        let channel = self.bus_channel();
        self.run(metrics, "publish", |mut con| async move {
            con.publish::<_, _, i64>(channel, message).await
        })
        .await
        .is_some()
    }
}

/// How often at most a cluster's connection is made again after operations timed out
/// ([`RedisStore::renew_cluster_connection`]).
const CLUSTER_REBUILD_EVERY: Duration = Duration::from_secs(2);

/// The most steers kept for one task ([`RedisStore::keep_task_steer`]): answers and cancels
/// are idempotent, and a client sends few.
pub(crate) const TASK_STEERS_KEPT: usize = 64;

/// The most bytes of steers kept for one task: a client sending answers by the megabyte
/// would otherwise fill Redis, shared by every node, for the task's lifetime (review 58 #2).
/// A steer longer than this is not kept at all (`bridge::send_task_steer`; attack run 58,
/// F2: kept as the newest, one answer of 4 MiB a task stayed). Answers go only to questions
/// the task asked (`tasks::update`), so this is room for many.
pub(crate) const TASK_STEERS_KEPT_BYTES: usize = 256 * 1024;

/// Appends `ARGV[1]` to the list `KEYS[1]`, keeps its last `ARGV[3]` items and, of those,
/// the newest whose bytes stay within `ARGV[4]` (the newest always), for `ARGV[2]` ms.
const KEEP_STEER: &str = r"redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[3]), -1)
local items = redis.call('LRANGE', KEYS[1], 0, -1)
local total = 0
local first = #items
while first >= 1 and (first == #items or total + #items[first] <= tonumber(ARGV[4])) do
  total = total + #items[first]
  first = first - 1
end
if first >= 1 then redis.call('LTRIM', KEYS[1], first, -1) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return #items - first";

/// One entry of a Redis Stream: its id and its field/value pairs.
pub(crate) type StreamEntry = (String, Vec<(String, String)>);

/// The secret of multi round-trip request states the nodes share through Redis, and when
/// it was made (ms since 1970, by Redis's clock: `TIME`), which decides between two
/// ([`PUT_BACK_SECRET`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SharedSecret {
    /// The secret.
    pub(crate) secret: String,
    /// When Redis took it first; 0 when Redis does not say (written before the nodes
    /// noted it): the oldest.
    pub(crate) made_ms: u64,
}

/// The secret of multi round-trip request states every node shares: the one in Redis, or
/// `candidate`, put there if there was none (the first node's wins). Blocking: called once,
/// at start, before the server runs. `None` when Redis could not be asked.
pub(crate) fn shared_secret(settings: &RedisSettings, candidate: &str) -> Option<SharedSecret> {
    let timeout = Duration::from_millis(settings.timeout_ms.max(1));
    let key = format!("{}mrtr-secret", settings.key_prefix);
    let made = beside(&key, ":made");
    match settings.cluster_seeds().ok()? {
        None => {
            let client = redis::Client::open(settings.url.as_str()).ok()?;
            let mut con = client.get_connection_with_timeout(timeout).ok()?;
            con.set_read_timeout(Some(timeout)).ok()?;
            create_once(&mut con, &key, &made, candidate)
        }
        Some(seeds) => {
            let client = ClusterClient::builder(seeds)
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .build()
                .ok()?;
            let mut con = client.get_connection().ok()?;
            create_once(&mut con, &key, &made, candidate)
        }
    }
}

/// The secret under `key`, or `candidate`, put there if there was none, with when it was
/// made under `made` ([`CREATE_SECRET`]).
fn create_once(
    con: &mut impl redis::ConnectionLike,
    key: &str,
    made: &str,
    candidate: &str,
) -> Option<SharedSecret> {
    let (secret, made_ms) = eval_script(CREATE_SECRET, &[key, made])
        .arg(candidate)
        .query::<(String, String)>(con)
        .ok()?;
    Some(SharedSecret {
        secret,
        made_ms: made_ms.parse().unwrap_or(0),
    })
}

/// A key in the same slot of a Redis Cluster as `key`: `key` with `suffix`, under `key`'s
/// hash tag if it has one (a `key_prefix` may carry one), else with the whole of `key` as
/// its hash tag (which hashes as `key` alone does). Where `key` has a brace but no hash
/// tag (`{}`, a lone `{` or `}`), neither form would share its slot: a `key_prefix` like
/// that is refused at start (`Settings::validate`).
pub(crate) fn beside(key: &str, suffix: &str) -> String {
    if crate::config::has_hash_tag(key) {
        format!("{key}{suffix}")
    } else {
        format!("{{{key}}}{suffix}")
    }
}

/// The secret under `KEYS[1]` and when it was made (`KEYS[2]`; `'0'` when not noted), or
/// `ARGV[1]` put there if there is none, made now by Redis's clock.
const CREATE_SECRET: &str = r"local v = redis.call('GET', KEYS[1])
if v then return {v, redis.call('GET', KEYS[2]) or '0'} end
local t = redis.call('TIME')
local made = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], made)
return {ARGV[1], made}";

/// Puts a node's secret (`ARGV[1]`, made at `ARGV[2]`) back under `KEYS[1]` after Redis lost
/// it: where there is none (1), or where one there was made later (`KEYS[2]`) by a node
/// started after Redis came back empty and before the nodes put theirs back (2: the older
/// one stays, so that every node started later shares the secret of the nodes that ran
/// before; attack run 52b, F7); else nothing (0). A node whose secret gave way so puts it
/// back again at the next loss, and gives way again.
const PUT_BACK_SECRET: &str = r"local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then return 0 end
if v then
  local made = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if made <= tonumber(ARGV[2]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
if v then return 2 end
return 1";

/// `EVAL` of `script` on `keys`, its arguments to follow: the script sent whole, not by its
/// digest (see [`KEEP_CLAIM`]: an `EVALSHA` Redis has not loaded meets `NOSCRIPT`).
fn eval_script(script: &str, keys: &[&str]) -> redis::Cmd {
    let mut eval = redis::cmd("EVAL");
    eval.arg(script).arg(keys.len()).arg(keys);
    eval
}

/// A key's lifetime as the milliseconds of `PX`, `PEXPIRE` or a script's expiry argument: at
/// least 1, since Redis refuses an expiry of 0 (a lifetime under a millisecond would make
/// the write fail), and saturating rather than wrapping.
fn expiry_ms(lifetime: Duration) -> u64 {
    u64::try_from(lifetime.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Whether `error` says a key holds another type than the operation's (`WRONGTYPE`, alone or
/// in a pipeline): a value, not Redis, is at fault.
fn is_wrong_type(error: &redis::RedisError) -> bool {
    error
        .clone()
        .into_server_errors()
        .is_some_and(|errors| errors.iter().any(|(_, e)| e.code() == "WRONGTYPE"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_expiry_is_at_least_a_millisecond_and_saturates() {
        assert_eq!(expiry_ms(Duration::ZERO), 1);
        assert_eq!(expiry_ms(Duration::from_micros(400)), 1);
        assert_eq!(expiry_ms(Duration::from_millis(1500)), 1500);
        assert_eq!(expiry_ms(Duration::MAX), u64::MAX);
    }
}
