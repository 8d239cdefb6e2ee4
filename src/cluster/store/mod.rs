//! State the nodes of a deployment share: the de-duplication entries of idempotency keys,
//! the signature nonces, and the change-bus bridge ([`bridge`]).
//!
//! Two backends hold the entries: [`MemoryStore`] (the node's own, bounded; the default) and
//! [`RedisStore`] (one Redis for every node, when `redis.url` is set). [`Store`] puts them
//! together: with Redis, every operation goes there first. A claim that cannot (Redis away,
//! or paused after a failure) is refused ([`Unreachable`]) by default
//! (`cluster.on_store_error = "refuse"`): a keyed call never runs without the protection all
//! nodes share. With `"local"` it is taken in memory instead, so requests always run and a
//! retry reaching the same node is still answered; only the sharing with other nodes is lost
//! until Redis answers again. Which backend took a claim is remembered with it, so its result
//! and its release go to the same place.
//!
//! Keys and fingerprints are SHA-256 digests (of the identity and the client's key; of the
//! request), so what a client sends never becomes a Redis key as such, and every key has the
//! same small size.

pub(crate) mod bridge;
mod memory;
mod redis;

pub(crate) use self::memory::{MemoryStore, NonceCache, NonceRefused};
pub(crate) use self::redis::{shared_secret, KeptClaim, RedisStore, SharedSecret, StreamEntry};

use self::redis::ClaimAnswer;
use crate::config::{OnStoreError, Settings};
use crate::lock;
use crate::observe::metrics::Metrics;
use data_encoding::HEXLOWER;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A key in the store (a digest).
pub(crate) type Key = [u8; 32];
/// What a keyed request was (a digest of its method and params).
pub(crate) type RequestDigest = [u8; 32];
/// Who runs a claimed request: unique among all claims of all nodes.
pub(crate) type ClaimId = u128;

/// The most results, and the most releases, one [`Store::write_back`] pass writes to Redis:
/// each is a round trip on the heartbeat's task.
const WRITE_BACK_PER_PASS: usize = 64;

/// Nonces sent to Redis together in a [`Store::write_back_nonces`] pass: one round trip for
/// all.
const NONCE_BATCH: usize = 512;

/// The most nonces one [`Store::write_back_nonces`] pass writes: a node's whole share
/// (`signatures.max_nonces`, 100,000 by default) in about twelve beats.
const NONCES_PER_PASS: usize = 8192;

/// What the store holds under a key.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Claim {
    /// A request is running under this key.
    Running {
        fingerprint: RequestDigest,
        owner: ClaimId,
    },
    /// A request under this key finished with this result (the JSON of its `result`).
    Done {
        fingerprint: RequestDigest,
        result: Arc<str>,
    },
    /// A request under this key finished, and its result was not kept (this node's share
    /// of Redis was full, [`RedisShare`]): a retry is told so, and not run again.
    Unkept { fingerprint: RequestDigest },
}

impl Claim {
    /// The Redis encoding (see `store::redis`).
    pub(crate) fn encode(&self) -> Vec<u8> {
        match self {
            Self::Running { fingerprint, owner } => {
                let mut text = String::with_capacity(1 + 64 + 32);
                text.push('R');
                HEXLOWER.encode_append(fingerprint, &mut text);
                HEXLOWER.encode_append(&owner.to_be_bytes(), &mut text);
                text.into_bytes()
            }
            Self::Done {
                fingerprint,
                result,
            } => {
                let mut text = String::with_capacity(Self::done_len(result.len()));
                text.push('D');
                HEXLOWER.encode_append(fingerprint, &mut text);
                text.push_str(result);
                text.into_bytes()
            }
            Self::Unkept { fingerprint } => {
                let mut text = String::with_capacity(1 + 64);
                text.push('U');
                HEXLOWER.encode_append(fingerprint, &mut text);
                text.into_bytes()
            }
        }
    }

    /// The length of a `Done` claim's encoding, for a result of `result_len` bytes: known
    /// before the result is copied into one.
    pub(crate) const fn done_len(result_len: usize) -> usize {
        1 + 64 + result_len
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let (tag, rest) = text.split_at_checked(1)?;
        let (fingerprint, rest) = rest.split_at_checked(64)?;
        let fingerprint = unhex::<32>(fingerprint)?;
        match tag {
            "R" => Some(Self::Running {
                fingerprint,
                owner: u128::from_be_bytes(unhex::<16>(rest)?),
            }),
            // The result is spliced into an answer as it is: anything but one JSON value
            // (text cut short, or `…}, "id": 9, "x": {`) would make that answer another.
            "D" if serde_json::from_str::<&serde_json::value::RawValue>(rest).is_ok() => {
                Some(Self::Done {
                    fingerprint,
                    result: Arc::from(rest),
                })
            }
            "U" if rest.is_empty() => Some(Self::Unkept { fingerprint }),
            _ => None,
        }
    }
}

fn unhex<const N: usize>(text: &str) -> Option<[u8; N]> {
    HEXLOWER.decode(text.as_bytes()).ok()?.try_into().ok()
}

/// Which backend took a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backend {
    Redis,
    Memory,
}

/// Redis cannot be reached and `cluster.on_store_error` is `"refuse"`: a claim is not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unreachable {
    /// When Redis will be tried again.
    pub(crate) retry_after: Duration,
}

/// A keyed request running on this node.
struct RunningHere {
    fingerprint: RequestDigest,
    done: watch::Receiver<()>,
    /// With Redis: its claim's owner and until when it may run, the claim Redis is to hold
    /// for it on every node (written again where Redis lost it).
    in_redis: Option<(ClaimId, Instant)>,
    /// Until when Redis holds the claim unless it is kept longer ([`CLAIM_LEASE`]); `None`
    /// when Redis did not take it (it could not be asked: with `on_store_error = "local"`
    /// the run went on in memory): it is written there once Redis answers again, so that a
    /// retry on another node joins the run rather than run the call a second time (attack
    /// run 51, N2). Kept for the whole run once it is due ([`Store::keep_running`]).
    lease: Option<Instant>,
    /// When the last claim or keep Redis answered for it was sent (a claim's: as early as
    /// it may have been, the store's timeout before it was registered): one sent before
    /// a beat found Redis may have lost it ([`Store::claims_may_be_lost`]) is due again.
    sent_at: Instant,
}

impl RunningHere {
    /// Whether its claim is due to be kept ([`Store::keep_running`]): Redis is to hold it,
    /// and its lease ends before `due_by`, or Redis never took it, or a beat found Redis may
    /// have lost it (`lost_at`) after the last claim or keep it answered was sent.
    fn is_due(&self, due_by: Instant, lost_at: Option<Instant>) -> bool {
        self.in_redis.is_some()
            && (self.lease.is_none_or(|lease| lease <= due_by)
                || lost_at.is_some_and(|lost| self.sent_at <= lost))
    }
}

/// How long Redis holds a claim when it is taken or kept: a run that lasts longer has it
/// kept for another lease at each beat once it is due ([`LEASE_DUE`]: every 2 s). A claim
/// taken for the whole running time (10 minutes by default) held the key on every node for
/// that long when its node could not release it: a claim that landed when its reply came
/// late over a slow link (the node refused the call, -32008), every retry elsewhere waiting
/// on it while the node lived (attack run 51, N4). Long enough that an outage of Redis
/// shorter than what a kept lease has left (8 s at least: a restart) lapses no claim of a
/// run going on, and longer than a node's alive time (3 s), so that a node that stalls is
/// dead to the others (and its claims freed by their retries) before its claims lapse.
pub(crate) const CLAIM_LEASE: Duration = Duration::from_secs(10);

/// A claim's lease is due to be kept longer once this close to its end: 2 s after it was
/// taken or last kept, and several beats before it lapses.
const LEASE_DUE: Duration = Duration::from_secs(8);

/// See the module docs.
pub(crate) struct Store {
    memory: MemoryStore,
    redis: Option<RedisStore>,
    /// Whether a claim Redis cannot take is refused rather than taken in memory.
    refuse_without_redis: bool,
    /// This node among the others (bus messages, owners): random per process.
    node: u64,
    next_owner: AtomicU64,
    /// Keyed requests running on this node, so a duplicate arriving here waits for a wakeup
    /// rather than polling (the runner holds the sender, and drops it when it is done), and
    /// so that the claims in Redis of those that hold one are written again when Redis lost
    /// them ([`keep_running`](Self::keep_running)).
    running_here: Mutex<HashMap<Key, RunningHere>>,
    /// With Redis: keys whose result only this node's memory holds (Redis could not take
    /// it, or it ran in memory), oldest first, written to Redis as soon as it answers again
    /// ([`write_back`](Self::write_back)). Bounded like the memory store; a key dropped from
    /// here is still written back by a retry that reaches this node.
    stranded: Mutex<std::collections::VecDeque<Key>>,
    /// With Redis: claims this node let go of (their runs ended without a result, or the
    /// call was refused when its claim went unanswered) that Redis could not be told of,
    /// oldest first, released as soon as it answers again: each
    /// would hold its key for the whole running time (10 minutes by default), every retry
    /// waiting. Bounded like `stranded`; one dropped from here is still freed by a retry
    /// on this node (its owner is no longer live, [`is_live_owner`](Self::is_live_owner)).
    stranded_releases: Mutex<std::collections::VecDeque<(Key, Claim)>>,
    /// With Redis: signature nonces this node took while Redis could not be asked, with when
    /// they may be forgotten, or all it holds once Redis lost them (it restarted empty),
    /// oldest first: written to Redis as soon as it answers again, so that the other nodes
    /// refuse their replays from then on (attack run 51, N1). Bounded by
    /// `signatures.max_nonces` (the oldest go first).
    stranded_nonces: Mutex<std::collections::VecDeque<(Key, Instant)>>,
    /// The most nonces `stranded_nonces` holds.
    max_stranded_nonces: usize,
    /// The most keys `stranded` (and `stranded_releases`) holds.
    max_stranded: usize,
    /// A pass of [`keep_running`](Self::keep_running) is under way (`bridge::keep_claims`).
    pub(crate) keeping: std::sync::atomic::AtomicBool,
    /// A beat Redis did not answer asked the keep pass to send what is owed after the claims
    /// ([`push_stranded`](Self::push_stranded)); cleared by the pass that does, or by a beat
    /// Redis answered (which writes it back in order: [`write_back`](Self::write_back)).
    pub(crate) push_wanted: std::sync::atomic::AtomicBool,
    /// A pass of [`RedisStore::keep_connections`] is under way (`bridge::beat`).
    pub(crate) keeping_connections: std::sync::atomic::AtomicBool,
    /// A pass of [`write_back_nonces`](Self::write_back_nonces) is under way.
    pub(crate) writing_nonces: std::sync::atomic::AtomicBool,
    /// When a beat last found Redis may have lost the claims it held for this node (the
    /// node taken for dead, or Redis restarted empty): each claim sent before it is kept
    /// again, written where it is gone, until Redis answers for it (review 56 #3: one flag
    /// for all had every pass keep them all while one went unanswered).
    claims_lost_at: Mutex<Option<Instant>>,
    /// The owners of the claims this node's runs hold or are asking for: a running entry of
    /// this node whose owner is not here is left over (its release was lost), and is freed.
    live_owners: Mutex<std::collections::HashSet<ClaimId>>,
    /// What this node may still write of results to Redis in the current window.
    redis_share: RedisShare,
}

/// The bytes of keyed results this node writes to Redis, bounded per window of
/// `dedup.window_ms` (as long as each is kept there): `dedup.max_bytes` in all, and a quarter
/// of that for one identity (all anonymous clients count as one), so that one client cannot
/// fill the Redis every node shares, nor this node's share of it. A result over either is not
/// kept: a marker says the call ran ([`Claim::Unkept`]), and a retry is told so instead of
/// running it again. Redis then holds at most about twice `dedup.max_bytes` of results a node
/// (this window's and the last one's, still within their time), and a marker a call beyond.
struct RedisShare {
    window: Duration,
    max_bytes: u64,
    max_bytes_per_identity: u64,
    current: Mutex<ShareWindow>,
}

/// The bytes written in the current window, in all and by identity.
struct ShareWindow {
    began: Instant,
    written: u64,
    by_identity: HashMap<Box<str>, u64>,
}

impl RedisShare {
    fn new(window: Duration, max_bytes: u64) -> Self {
        Self {
            window,
            max_bytes,
            max_bytes_per_identity: max_bytes / 4,
            current: Mutex::new(ShareWindow {
                began: Instant::now(),
                written: 0,
                by_identity: HashMap::new(),
            }),
        }
    }

    /// Takes `bytes` for `identity`, if both it and the node are within their shares.
    fn take(&self, identity: &str, bytes: u64) -> bool {
        let mut current = lock(&self.current);
        let now = Instant::now();
        if now.duration_since(current.began) >= self.window {
            current.began = now;
            current.written = 0;
            current.by_identity.clear();
        }
        let theirs = current.by_identity.get(identity).copied().unwrap_or(0);
        if current.written.saturating_add(bytes) > self.max_bytes
            || theirs.saturating_add(bytes) > self.max_bytes_per_identity
        {
            return false;
        }
        current.written += bytes;
        // The name is copied only the first time in a window.
        match current.by_identity.get_mut(identity) {
            Some(taken) => *taken += bytes,
            None => {
                current.by_identity.insert(Box::from(identity), bytes);
            }
        }
        true
    }
}

impl Store {
    /// The stores the settings ask for.
    pub(crate) fn new(settings: &Settings) -> Self {
        let mut node = [0u8; 8];
        // Without the OS generator, the time still tells processes apart.
        if getrandom::fill(&mut node).is_err() {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            node = (now.as_nanos() as u64 ^ u64::from(std::process::id())).to_be_bytes();
        }
        Self {
            memory: MemoryStore::new(settings.dedup.max_entries, settings.dedup.max_bytes),
            redis: RedisStore::new(&settings.redis, settings.cluster.on_store_error),
            refuse_without_redis: settings.cluster.on_store_error == OnStoreError::Refuse,
            node: u64::from_be_bytes(node),
            next_owner: AtomicU64::new(1),
            running_here: Mutex::default(),
            stranded: Mutex::default(),
            stranded_releases: Mutex::default(),
            max_stranded: settings.dedup.max_entries,
            keeping: std::sync::atomic::AtomicBool::new(false),
            push_wanted: std::sync::atomic::AtomicBool::new(false),
            keeping_connections: std::sync::atomic::AtomicBool::new(false),
            writing_nonces: std::sync::atomic::AtomicBool::new(false),
            claims_lost_at: Mutex::default(),
            stranded_nonces: Mutex::default(),
            max_stranded_nonces: settings.signatures.max_nonces.max(1),
            live_owners: Mutex::default(),
            redis_share: RedisShare::new(
                Duration::from_millis(settings.dedup.window_ms),
                settings.dedup.max_bytes as u64,
            ),
        }
    }

    /// Registers `owner` as one of this node's live claims, until
    /// [`forget_owner`](Self::forget_owner).
    pub(crate) fn hold_owner(&self, owner: ClaimId) {
        lock(&self.live_owners).insert(owner);
    }

    /// `owner`'s run is over (or it claimed nothing).
    pub(crate) fn forget_owner(&self, owner: ClaimId) {
        lock(&self.live_owners).remove(&owner);
    }

    /// Whether `owner` (of this node) is the claim of a run still going here.
    pub(crate) fn is_live_owner(&self, owner: ClaimId) -> bool {
        lock(&self.live_owners).contains(&owner)
    }

    /// Deletes `running` under `key` in Redis if it is still there; when Redis cannot be
    /// told now, the release waits for it to answer again ([`write_back`](Self::write_back)).
    pub(crate) async fn release_in_redis(&self, metrics: &Metrics, key: &Key, running: Claim) {
        let Some(redis) = &self.redis else { return };
        if !redis.release(metrics, key, running.encode()).await {
            self.strand_release(*key, running);
        }
    }

    /// Queues the release of `running` under `key` for when Redis answers again
    /// ([`write_back`](Self::write_back)), within `max_stranded` (the oldest go first).
    fn strand_release(&self, key: Key, running: Claim) {
        let mut waiting = lock(&self.stranded_releases);
        if waiting.len() >= self.max_stranded {
            waiting.pop_front();
        }
        waiting.push_back((key, running));
    }

    /// Whether a result of `bytes` (encoded) for `identity` fits this node's share of Redis
    /// ([`RedisShare`]), taken from it if so. One that does not is not kept: a marker takes
    /// its place ([`Claim::Unkept`]).
    pub(crate) fn takes_redis_share(&self, identity: &str, bytes: usize) -> bool {
        self.redis_share.take(identity, bytes as u64)
    }

    /// This node's id.
    pub(crate) fn node(&self) -> u64 {
        self.node
    }

    /// Whether a claim Redis cannot take is refused rather than taken in memory
    /// (`cluster.on_store_error = "refuse"`, with Redis).
    pub(crate) fn refuses_without_redis(&self) -> bool {
        self.redis.is_some() && self.refuse_without_redis
    }

    /// The Redis backend, when configured.
    pub(crate) fn redis(&self) -> Option<&RedisStore> {
        self.redis.as_ref()
    }

    /// A fresh owner for a claim.
    pub(crate) fn new_owner(&self) -> ClaimId {
        (u128::from(self.node) << 64) | u128::from(self.next_owner.fetch_add(1, Ordering::Relaxed))
    }

    /// The live entry under `key`, or `None` when there was none and `running` was put
    /// there for `ttl` (in Redis for [`CLAIM_LEASE`], kept longer while the run goes on);
    /// with the backend that answered. With `epoch` (Redis's, as the node knows it), a key
    /// Redis finds free under another epoch is not claimed (see [`RedisStore::claim`]).
    ///
    /// # Errors
    /// [`Unreachable`] when Redis cannot take it and the node must not go on alone; also,
    /// with [`REWRITE_WAIT`](crate::cluster::REWRITE_WAIT) to wait, when Redis's epoch was
    /// not `epoch`: the key may be a running call's whose claim Redis lost a moment ago.
    pub(crate) async fn claim(
        &self,
        metrics: &Metrics,
        key: &Key,
        running: Claim,
        ttl: Duration,
        epoch: Option<String>,
    ) -> Result<(Option<Claim>, Backend), Unreachable> {
        if let Some(redis) = &self.redis {
            // Skipped while Redis is paused, the claim is never sent.
            let sent = redis.is_available();
            let mut unanswered = false;
            // Held for a lease, kept for the run's time while it runs (`keep_running`).
            let lease = ttl.min(CLAIM_LEASE);
            match redis
                .claim(metrics, key, &running.encode(), lease, epoch)
                .await
            {
                Some(ClaimAnswer::Claimed) => return Ok((None, Backend::Redis)),
                Some(ClaimAnswer::Found(found)) => match Claim::decode(&found) {
                    Some(entry) => return Ok((Some(entry), Backend::Redis)),
                    None => redis.unreadable(metrics, "claim", &"an entry in an unknown format"),
                },
                Some(ClaimAnswer::OtherEpoch) => {
                    return Err(Unreachable {
                        retry_after: crate::cluster::REWRITE_WAIT,
                    })
                }
                None => unanswered = sent,
            }
            if self.refuse_without_redis {
                // Refused: a claim that was sent may still land (a timeout) with no run
                // behind it, and hold the key on every other node for as long as a run may
                // last. It is released, by value, once Redis answers again: one that never
                // landed, or an entry of another run, is left alone.
                if unanswered {
                    self.strand_release(*key, running.clone());
                }
                return Err(Unreachable {
                    retry_after: redis.paused_for(),
                });
            }
            // Run here instead, under the same owner: a claim that landed in Redis holds the
            // key for this run there too, until its result replaces it (`write_back`) or a
            // run that ends without one releases it (the lease's drop).
        }
        Ok((self.memory.claim(key, running, ttl), Backend::Memory))
    }

    /// Puts `done` under `key` for `ttl`, in the backend that took the claim (and in memory
    /// if Redis cannot take it now). A result for Redis is first taken from this node's
    /// share ([`takes_redis_share`](Self::takes_redis_share)).
    pub(crate) async fn complete(
        &self,
        metrics: &Metrics,
        key: &Key,
        owner: ClaimId,
        done: Claim,
        ttl: Duration,
        backend: Backend,
    ) {
        if let (Backend::Redis, Some(redis)) = (backend, &self.redis) {
            if redis.complete(metrics, key, done.encode(), ttl).await {
                return;
            }
        }
        self.memory.complete(key, owner, done, ttl);
        if self.redis.is_some() {
            let mut stranded = lock(&self.stranded);
            if stranded.len() >= self.max_stranded {
                stranded.pop_front();
            }
            stranded.push_back(*key);
        }
    }

    /// Writes the results only this node holds to Redis (called when Redis answers again),
    /// so that a retry on another node finds them without waiting for one to reach this
    /// node. Stops at the first write Redis refuses; the rest wait for the next call.
    pub(crate) async fn write_back(&self, metrics: &Metrics) {
        let Some(redis) = &self.redis else { return };
        let mut written = 0u64;
        // Runs on the heartbeat's task: a pass is bounded, so that thousands waiting never
        // hold up the beat past the node's alive time (the rest go at the next beats).
        for _ in 0..WRITE_BACK_PER_PASS {
            let Some(key) = lock(&self.stranded).pop_front() else {
                break;
            };
            // Gone from memory (expired, or evicted): nothing to write. A result not kept is
            // written as such, so that a retry elsewhere is told so rather than run the call
            // again (review 57 #3).
            let Some((done, left)) = self.memory.outcome(&key) else {
                continue;
            };
            if !redis.complete(metrics, &key, done.encode(), left).await {
                lock(&self.stranded).push_front(key);
                // Not on to the releases: one of them may be the claim this result is to
                // replace, and freeing it first would let another node run the call again.
                return;
            }
            written += 1;
        }
        if written > 0 {
            tracing::info!(
                results = written,
                "wrote to Redis the results kept in memory while it was away"
            );
        }
        let mut released = 0u64;
        for _ in 0..WRITE_BACK_PER_PASS {
            let Some((key, running)) = lock(&self.stranded_releases).pop_front() else {
                break;
            };
            if !redis.release(metrics, &key, running.encode()).await {
                lock(&self.stranded_releases).push_front((key, running));
                break;
            }
            released += 1;
        }
        if released > 0 {
            tracing::info!(
                keys = released,
                "freed in Redis the keys of runs that ended while it was away"
            );
        }
    }

    /// Sends the results and releases waiting for Redis ([`write_back`](Self::write_back))
    /// even while the node skips it after a failure, [`WRITE_BACK_PER_PASS`] of each a pass,
    /// all together: over a link that delivers commands but not replies in time (the node's
    /// beats land, so it lives to the others), each lands all the same. A run's claim lapses
    /// with its lease once the run is over, so a result written only once a reply came in
    /// time would let a retry elsewhere run the call again (review 55 #1). Those Redis did
    /// not answer in time go to the back of their queue, to be sent again after the others
    /// (review 57 #1: the same first ones were sent at every pass, those behind them never,
    /// and their calls ran again elsewhere once their claims lapsed); results gone from
    /// memory are dropped. Sent by the keep pass after a beat that Redis did not answer in
    /// time asked for it ([`push_wanted`](Self::push_wanted)); a beat it answered writes them
    /// back in order ([`write_back`](Self::write_back)).
    pub(crate) async fn push_stranded(&self, metrics: &Metrics) {
        let Some(redis) = &self.redis else { return };
        let results: Vec<(Key, Claim, Duration)> = {
            let mut stranded = lock(&self.stranded);
            let take = stranded.len().min(WRITE_BACK_PER_PASS);
            stranded
                .drain(..take)
                .filter_map(|key| {
                    let (done, left) = self.memory.outcome(&key)?;
                    Some((key, done, left))
                })
                .collect()
        };
        let releases: Vec<(Key, Claim)> = {
            let mut stranded = lock(&self.stranded_releases);
            let take = stranded.len().min(WRITE_BACK_PER_PASS);
            stranded.drain(..take).collect()
        };
        let written =
            futures_util::future::join_all(results.iter().map(|(key, done, left)| async move {
                redis.complete_now(metrics, key, done.encode(), *left).await
            }));
        let released =
            futures_util::future::join_all(releases.iter().map(|(key, running)| async move {
                redis.release_now(metrics, key, running.encode()).await
            }));
        let (written, released) = futures_util::future::join(written, released).await;
        {
            let mut stranded = lock(&self.stranded);
            for ((key, _, _), _) in results.iter().zip(written).filter(|(_, taken)| !taken) {
                if stranded.len() >= self.max_stranded {
                    stranded.pop_front();
                }
                stranded.push_back(*key);
            }
        }
        let mut stranded = lock(&self.stranded_releases);
        for (release, _) in releases
            .into_iter()
            .zip(released)
            .filter(|(_, taken)| !taken)
        {
            if stranded.len() >= self.max_stranded {
                stranded.pop_front();
            }
            stranded.push_back(release);
        }
    }

    /// The [`push_stranded`](Self::push_stranded) passes that send every result and
    /// release waiting now once (each pass sends [`WRITE_BACK_PER_PASS`] of each, and puts
    /// those Redis did not answer in time behind the rest).
    pub(crate) fn stranded_passes(&self) -> usize {
        let waiting = lock(&self.stranded)
            .len()
            .max(lock(&self.stranded_releases).len());
        waiting.div_ceil(WRITE_BACK_PER_PASS)
    }

    /// Whether results (or releases) wait to be written back to Redis.
    pub(crate) fn has_stranded(&self) -> bool {
        !lock(&self.stranded).is_empty() || !lock(&self.stranded_releases).is_empty()
    }

    /// Whether signature nonces wait to be written to Redis ([`strand_nonce`](Self::strand_nonce)).
    pub(crate) fn has_stranded_nonces(&self) -> bool {
        !lock(&self.stranded_nonces).is_empty()
    }

    /// Queues a signature nonce, live until `expires`, for Redis to hold as soon as it
    /// answers ([`write_back_nonces`](Self::write_back_nonces), at the next beat).
    pub(crate) fn strand_nonce(&self, key: Key, expires: Instant) {
        let mut waiting = lock(&self.stranded_nonces);
        if waiting.len() >= self.max_stranded_nonces {
            waiting.pop_front();
        }
        waiting.push_back((key, expires));
    }

    /// Writes the nonces waiting for Redis ([`strand_nonce`](Self::strand_nonce)), each for
    /// the time it has left, a batch at a time (sent together on the connection), at most
    /// [`NONCES_PER_PASS`] a pass, off the beat's task. One Redis held already was this
    /// node's own claim that landed late, or a replay another node accepted while Redis
    /// was away: that one ran there, and is counted in the log. Stops at the first batch
    /// Redis does not answer.
    pub(crate) async fn write_back_nonces(&self, metrics: &Metrics) {
        let Some(redis) = &self.redis else { return };
        let mut written = 0usize;
        let mut held = 0usize;
        while written + held < NONCES_PER_PASS {
            let batch: Vec<(Key, Instant)> = {
                let mut waiting = lock(&self.stranded_nonces);
                let take = waiting.len().min(NONCE_BATCH);
                waiting.drain(..take).collect()
            };
            if batch.is_empty() {
                break;
            }
            let now = Instant::now();
            let claims = batch.iter().map(|(key, expires)| async move {
                match expires.checked_duration_since(now) {
                    Some(left) => redis.claim_nonce(metrics, key, left).await,
                    None => Some(true),
                }
            });
            let answers = futures_util::future::join_all(claims).await;
            let mut unanswered = Vec::new();
            for (answer, nonce) in answers.into_iter().zip(batch) {
                match answer {
                    Some(true) => written += 1,
                    Some(false) => held += 1,
                    None => unanswered.push(nonce),
                }
            }
            if !unanswered.is_empty() {
                let mut waiting = lock(&self.stranded_nonces);
                for nonce in unanswered.into_iter().rev() {
                    waiting.push_front(nonce);
                }
                break;
            }
        }
        if written + held > 0 {
            tracing::info!(
                nonces = written + held,
                held_already = held,
                "wrote to Redis the signature nonces taken while it was away (one it held already was taken there late, or a replay another node ran meanwhile)"
            );
        }
    }

    /// With Redis, the outcome this node holds in memory under `key` (`Done`, or `Unkept`
    /// for a result not kept): a run that ended while Redis was away (Redis could not
    /// record it; or, with `on_store_error = "local"`, it ran in memory), so Redis may hold
    /// it as running, or not at all after a restart. It is written to Redis now, for every
    /// node, and returned. `None` without Redis, or when this node holds no outcome under
    /// `key`.
    pub(crate) async fn recover_done(&self, metrics: &Metrics, key: &Key) -> Option<Claim> {
        let redis = self.redis.as_ref()?;
        let (done, left) = self.memory.outcome(key)?;
        redis.complete(metrics, key, done.encode(), left).await;
        Some(done)
    }

    /// Frees a claim held in memory that ends without a result to keep. (One held in Redis
    /// is freed with [`RedisStore::release`].)
    pub(crate) fn release_in_memory(&self, key: &Key, owner: ClaimId) {
        self.memory.release(key, owner);
    }

    /// Registers a keyed request running here; duplicates arriving here wait on it until
    /// the returned sender is dropped. `in_redis`: with Redis, its claim's owner and how
    /// long it may run; `taken`: whether Redis took the claim, for [`CLAIM_LEASE`] (it runs
    /// in memory otherwise).
    pub(crate) fn run_here(
        &self,
        key: &Key,
        fingerprint: RequestDigest,
        in_redis: Option<(ClaimId, Duration)>,
        taken: bool,
    ) -> watch::Sender<()> {
        let (sender, done) = watch::channel(());
        let now = Instant::now();
        let lease = taken.then(|| now + CLAIM_LEASE);
        let in_redis = in_redis.map(|(owner, ttl)| (owner, now + ttl));
        // The claim was sent at most the store's timeout ago: a beat's finding since may
        // have come after it landed.
        let timeout = self
            .redis
            .as_ref()
            .map_or(Duration::ZERO, RedisStore::timeout);
        let running = RunningHere {
            fingerprint,
            done,
            in_redis,
            lease,
            sent_at: now.checked_sub(timeout).unwrap_or(now),
        };
        lock(&self.running_here).insert(*key, running);
        sender
    }

    /// Whether the run of `claim` (`Claim::Running`) under `key` still goes on here.
    fn still_runs_here(&self, key: &Key, claim: &Claim) -> bool {
        let Claim::Running { owner, .. } = claim else {
            return false;
        };
        lock(&self.running_here)
            .get(key)
            .is_some_and(|running| running.in_redis.is_some_and(|(held, _)| held == *owner))
    }

    /// A beat found Redis may have lost the claims it held for this node (the node was
    /// taken for dead, or Redis restarted empty): every claim of a run going on here is
    /// due, until Redis answers a keep sent from now on.
    pub(crate) fn claims_may_be_lost(&self) {
        *lock(&self.claims_lost_at) = Some(Instant::now());
    }

    /// Whether a claim of a keyed request running here is due to be kept longer in Redis,
    /// or written there (see [`RunningHere::lease`], [`claims_may_be_lost`](Self::claims_may_be_lost)).
    pub(crate) fn has_claims_due(&self) -> bool {
        let lost_at = *lock(&self.claims_lost_at);
        let due_by = Instant::now() + LEASE_DUE;
        lock(&self.running_here)
            .values()
            .any(|running| running.is_due(due_by, lost_at))
    }

    /// Keeps in Redis, for another lease, the claims due of the keyed requests running
    /// here ([`has_claims_due`](Self::has_claims_due)): a lease near its end, a claim Redis
    /// never took (the run began while Redis could not be asked), a claim sent before a
    /// beat found Redis may have lost it (it restarted empty, or the node was taken for
    /// dead) and not kept since. Each is extended where Redis holds it, and written where
    /// it holds nothing ([`RedisStore::keep_claim`]): otherwise a retry on another node would
    /// find the key free and run the call a second time while it runs here (attack run
    /// 50c, F1; attack run 51, N2). A key another node claimed meanwhile (this node was
    /// taken for dead, or the call ran there too while Redis was away) is left to it.
    /// Called at each beat that finds claims due (whether Redis answered the beat in time
    /// or not); one Redis does not answer stays due, and is sent again at the next.
    pub(crate) async fn keep_running(&self, metrics: &Metrics) {
        let Some(redis) = &self.redis else {
            return;
        };
        let lost_at = *lock(&self.claims_lost_at);
        let now = Instant::now();
        let due_by = now + LEASE_DUE;
        let held: Vec<(Key, Claim, Duration)> = lock(&self.running_here)
            .iter()
            .filter(|(_, running)| running.is_due(due_by, lost_at))
            .filter_map(|(key, running)| {
                let (owner, until) = running.in_redis?;
                // A lease again, not the run's whole time: a claim kept by a command that
                // landed with its reply late (the run ending after without a result, its
                // release skipped) lapses with it (review 56 #1: it held the key for the
                // rest of the running time, 10 minutes by default).
                let left = until.checked_duration_since(now)?.min(CLAIM_LEASE);
                let claim = Claim::Running {
                    fingerprint: running.fingerprint,
                    owner,
                };
                Some((*key, claim, left))
            })
            .collect();
        // Sent together (one round trip for all, on the connection), and sent even while
        // Redis is skipped after a failure: over a slow link each lands though its reply
        // comes late, and is sent again at the next beat (review 55 #1: only a beat
        // answered in time kept them, and a lease lapsed under a run going on).
        let keeps = held.iter().map(|(key, claim, left)| async move {
            if !self.still_runs_here(key, claim) {
                return Some(KeptClaim::Taken);
            }
            redis.keep_claim(metrics, key, &claim.encode(), *left).await
        });
        let answers = futures_util::future::join_all(keeps).await;
        let mut written = 0u64;
        for ((key, claim, left), kept) in held.into_iter().zip(answers) {
            let Some(kept) = kept else {
                continue;
            };
            self.lease_kept(&key, &claim, now + left, now);
            match kept {
                KeptClaim::Extended => {}
                KeptClaim::Written => {
                    written += 1;
                    // The run ended meanwhile (its release may have come first): the claim
                    // written back would hold the key with no run behind it, every retry
                    // elsewhere waiting on it (review 51 #5). Its result kept in memory
                    // replaces it; else it is released, by value.
                    if !self.still_runs_here(&key, &claim) {
                        match self.memory.outcome(&key) {
                            Some((done, left)) => {
                                if !redis.complete(metrics, &key, done.encode(), left).await {
                                    self.release_in_redis(metrics, &key, claim).await;
                                }
                            }
                            // Stranded if Redis does not take it now (review 52 #11).
                            None => self.release_in_redis(metrics, &key, claim).await,
                        }
                    }
                }
                // Its own result, written as the run ended, is no other run's.
                KeptClaim::Taken if self.still_runs_here(&key, &claim) => {
                    tracing::warn!(
                        "the key of a keyed call running here is another run's in Redis: the call ran on another node too (this node was taken for dead, or Redis was away)"
                    );
                }
                KeptClaim::Taken => {}
            }
        }
        if written > 0 {
            tracing::warn!(
                claims = written,
                "claims of calls running here that Redis did not hold (it was away, or restarted empty): written"
            );
        }
    }

    /// The claim of the run of `key` (if it still runs here under that claim) is held in
    /// Redis until `until`, by a keep sent at `sent_at`: due again [`LEASE_DUE`] before, or
    /// at a beat's finding after `sent_at`.
    fn lease_kept(&self, key: &Key, claim: &Claim, until: Instant, sent_at: Instant) {
        if !self.still_runs_here(key, claim) {
            return;
        }
        if let Some(running) = lock(&self.running_here).get_mut(key) {
            running.lease = Some(until);
            running.sent_at = sent_at;
        }
    }

    /// Forgets a request that ran here (its sender is about to be dropped).
    pub(crate) fn done_here(&self, key: &Key, sender: &watch::Sender<()>) {
        let mut running = lock(&self.running_here);
        if running
            .get(key)
            .is_some_and(|running| running.done.same_channel(&sender.subscribe()))
        {
            running.remove(key);
        }
    }

    /// The fingerprint of the request running here under `key`, if one runs here, and a
    /// wakeup for when it is done.
    pub(crate) fn watch_here(&self, key: &Key) -> Option<(RequestDigest, watch::Receiver<()>)> {
        lock(&self.running_here)
            .get(key)
            .map(|running| (running.fingerprint, running.done.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_survive_their_redis_encoding() {
        for entry in [
            Claim::Running {
                fingerprint: [0xab; 32],
                owner: u128::MAX - 7,
            },
            Claim::Done {
                fingerprint: [1; 32],
                result: Arc::from(r#"{"content":[{"type":"text","text":"é"}]}"#),
            },
            Claim::Unkept {
                fingerprint: [2; 32],
            },
        ] {
            if let Claim::Done { result, .. } = &entry {
                assert_eq!(Claim::done_len(result.len()), entry.encode().len());
            }
            assert_eq!(Claim::decode(&entry.encode()), Some(entry));
        }
        let upper_case = format!("R{}{}", "AB".repeat(32), "0".repeat(32));
        for junk in [&b""[..], b"X", b"R12", &[0xff; 70], upper_case.as_bytes()] {
            assert_eq!(Claim::decode(junk), None);
        }
    }

    /// A beat's finding makes every claim running here due; each is due until a keep of its
    /// own sent after the finding is answered, whatever becomes of the others' (review 56
    /// #3: one flag for all had every pass keep them all while one went unanswered).
    #[test]
    fn a_beats_finding_makes_each_claim_due_until_a_keep_of_its_own_answers() {
        let store = Store::new(&Settings::default());
        let (a, b) = ([1; 32], [2; 32]);
        let owners = (store.new_owner(), store.new_owner());
        let claim = |owner| Claim::Running {
            fingerprint: [0; 32],
            owner,
        };
        let hour = Duration::from_secs(3600);
        let _a = store.run_here(&a, [0; 32], Some((owners.0, hour)), true);
        let _b = store.run_here(&b, [0; 32], Some((owners.1, hour)), true);
        assert!(!store.has_claims_due(), "fresh leases");
        store.claims_may_be_lost();
        assert!(store.has_claims_due());
        std::thread::sleep(Duration::from_millis(2));
        let kept_until = Instant::now() + CLAIM_LEASE;
        store.lease_kept(&a, &claim(owners.0), kept_until, Instant::now());
        assert!(store.has_claims_due(), "b is not kept yet");
        // A keep sent before the finding, answered after it, does not count.
        let before = Instant::now()
            .checked_sub(Duration::from_secs(1))
            .expect("a second ago");
        store.lease_kept(&b, &claim(owners.1), kept_until, before);
        assert!(
            store.has_claims_due(),
            "b's keep was sent before the finding"
        );
        store.lease_kept(&b, &claim(owners.1), kept_until, Instant::now());
        assert!(!store.has_claims_due(), "both kept since");
        // A later finding makes them due again.
        std::thread::sleep(Duration::from_millis(2));
        store.claims_may_be_lost();
        assert!(store.has_claims_due());
    }

    #[test]
    fn each_identity_keeps_its_share_of_redis_and_a_new_window_begins_again() {
        let share = RedisShare::new(Duration::from_millis(50), 400);
        assert!(share.take("a", 60));
        assert!(!share.take("a", 41), "a's quarter is 100");
        assert!(share.take("a", 40));
        for identity in ["b", "c", "d"] {
            assert!(share.take(identity, 100));
        }
        assert!(!share.take("e", 1), "the node's 400 are taken");
        std::thread::sleep(Duration::from_millis(60));
        assert!(share.take("a", 100), "a new window");
    }
}
