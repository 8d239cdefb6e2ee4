//! De-duplication of retried `tools/call` requests, so a retry never runs a tool twice and
//! two separate calls are never answered once. Two mechanisms:
//!
//! - **Idempotency keys** (this module): a request with `params._meta.idempotencyKey` is
//!   keyed by the key and the identity of its client (its principal, so an API key and a JWT
//!   naming the same subject are two clients), never by connection or node; an anonymous
//!   client's key by its session instead, by the id every node knows it by when it has one
//!   (anonymous clients are not told apart otherwise, so one must not be answered with
//!   another's result; a 2026-07-28 request without
//!   credentials is a session of its own, so its key is never replayed). The
//!   first request of a key runs; a later one with the same method and params, within
//!   `dedup.window_ms`, gets the stored response with its own id, or, while the first still
//!   runs, waits for it and gets its response; one with other params is refused
//!   (`Error::IdempotencyConflict`). The check runs inside the request's worker (it may ask
//!   Redis, and the session core never waits), by wrapping the request's work: a request
//!   without a key is not touched and pays nothing.
//! - **Request ids within a session** ([`recent`]): a finished request's id sent again in
//!   the same session gets the same response, checked synchronously in the session core.
//!   Ids are never compared across sessions: clients restart them on every connection.
//!
//! Only results are kept: a request that ends in an error (a timeout, a full pool, a crash)
//! or is cancelled frees its key, so a retry runs again. A notification is never
//! de-duplicated.
//!
//! With Redis configured and out of reach, a keyed request is refused, unrun, with a
//! retryable -32008 (`Error::StoreUnavailable`), unless `cluster.on_store_error` is
//! `"local"` (see `store`).

pub(crate) mod recent;

use crate::cluster::store::{Backend, Claim, ClaimId, Key, RequestDigest, Unreachable};
use crate::cluster::{Cluster, LastWrite};
use crate::context::Identity;
use crate::protocol::jsonrpc::{encode_result, result_of, RequestId};
use crate::protocol::mcp::Error;
use crate::worker::Work;
use crate::RequestContext;
use serde_json::value::RawValue;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Longest idempotency key accepted, in characters.
pub const MAX_KEY_CHARS: usize = 255;

/// This process's random id, for the keys of anonymous sessions (see [`Idempotency::of_tool_call`]).
static PROCESS: std::sync::LazyLock<[u8; 16]> = std::sync::LazyLock::new(rand::random);

/// The first and the longest wait between two looks at a key running on another node.
const FIRST_POLL: Duration = Duration::from_millis(5);
const LONGEST_POLL: Duration = Duration::from_millis(200);
/// A key running on this node wakes its waiters when it is done; they look again at least
/// this often anyway.
const LOCAL_WAIT: Duration = Duration::from_secs(1);

/// What an anonymous client's idempotency keys are scoped to: its session.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AnonymousScope<'a> {
    /// A session every node knows by this id (an HTTP session's `Mcp-Session-Id`, a
    /// resumable WebSocket session's resume id): a retry on any node finds the key.
    Shared(&'a str),
    /// A session only this process knows, by its number.
    Local(u64),
}

/// What a keyed call's answer is shaped by, beside what it asks: a retry of the key
/// asking for another shape is a conflict (its stored answer is in the first's shape).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AnswerShape<'a> {
    /// The protocol version the answer follows (its era with it).
    pub version: &'a str,
    /// Whether the call may be answered as a task (a 2026-07-28 request that declared the
    /// tasks extension, of a tool whose calls may become tasks).
    pub task: bool,
}

/// A request's idempotency key, scoped to its client, with the fingerprint of what it asks.
pub(crate) struct Idempotency {
    key: Key,
    fingerprint: RequestDigest,
    /// Whose share of the store its result takes: the identity's principal, or
    /// "anonymous" for every anonymous client.
    identity: Box<str>,
}

impl Idempotency {
    /// The key of a `tools/call` carrying `_meta.idempotencyKey` (`raw`), scoped to
    /// `identity`, or to `session` when the client is anonymous. `round` is what sets one
    /// round of a 2026-07-28 multi round-trip call apart from the others (its `requestState`
    /// and `inputResponses`): each round is a request of its own under the key, so answering
    /// the first round's questions is not taken for a conflicting retry. `shape` is part of
    /// the fingerprint: a retry under another version, or asking for tasks where the first
    /// did not, conflicts.
    ///
    /// # Errors
    /// -32602 when the key is not a non-empty string of at most [`MAX_KEY_CHARS`]
    /// characters, or the arguments are too deeply nested to compare.
    pub(crate) fn of_tool_call(
        identity: &Identity,
        session: AnonymousScope<'_>,
        raw: &RawValue,
        name: &str,
        arguments: Option<&RawValue>,
        round: [Option<&str>; 2],
        shape: AnswerShape<'_>,
    ) -> Result<Self, Error> {
        let invalid = || {
            Error::InvalidParams(format!(
                "_meta.idempotencyKey: must be a non-empty string of at most {MAX_KEY_CHARS} characters"
            ))
        };
        let key: String = serde_json::from_str(raw.get()).map_err(|_| invalid())?;
        if key.is_empty() || key.chars().count() > MAX_KEY_CHARS {
            return Err(invalid());
        }
        let mut scoped = Sha256::new();
        if identity.is_authenticated() {
            for part in ["idempotency", identity.principal(), &key] {
                scoped.update(part.as_bytes());
                scoped.update([0]);
            }
        } else {
            match session {
                AnonymousScope::Shared(id) => {
                    scoped.update(b"idempotency-session\0");
                    scoped.update(id.as_bytes());
                }
                AnonymousScope::Local(number) => {
                    // Session numbers restart with each process: this process's own random
                    // id sets them apart from the other nodes' (and from a restart's) in a
                    // shared store.
                    scoped.update(b"idempotency-anonymous\0");
                    scoped.update(*PROCESS);
                    scoped.update(number.to_le_bytes());
                }
            }
            scoped.update([0]);
            scoped.update(key.as_bytes());
            scoped.update([0]);
        }
        for part in round {
            // Absent and empty are told apart (a 1 byte before a present part).
            if let Some(part) = part {
                scoped.update([1]);
                scoped.update(part.as_bytes());
            }
            scoped.update([0]);
        }
        let arguments: Option<Value> = arguments
            .map(|arguments| serde_json::from_str(arguments.get()))
            .transpose()
            .map_err(|e| Error::InvalidParams(format!("arguments: {e}")))?;
        Ok(Self {
            key: scoped.finalize().into(),
            fingerprint: tool_call_fingerprint(name, arguments.as_ref(), shape),
            identity: Box::from(identity.principal()),
        })
    }

    /// The key, scoped: two requests of one key join one run.
    pub(crate) fn key(&self) -> &Key {
        &self.key
    }

    /// Wraps a request's work: it runs only if it is the first of its key.
    pub(crate) fn wrap(self, cluster: Arc<Cluster>, work: Work) -> Work {
        Work::new(move |id, ctx| Box::pin(run(cluster, self, id, ctx, work)))
    }
}

/// SHA-256 of `["tools/call", params]` in a canonical form (see [`write_canonical`]), then
/// the answer's shape: the same for any spelling of the same params (member order,
/// whitespace, escapes, `1.0` for `1`), different for different ones or another shape.
fn tool_call_fingerprint(
    name: &str,
    arguments: Option<&Value>,
    shape: AnswerShape<'_>,
) -> RequestDigest {
    let mut canonical = Vec::with_capacity(64);
    canonical.extend_from_slice(br#"["tools/call",{"#);
    // Members in name order: "arguments" < "name".
    if let Some(arguments) = arguments {
        canonical.extend_from_slice(br#""arguments":"#);
        write_canonical(&mut canonical, arguments);
        canonical.push(b',');
    }
    canonical.extend_from_slice(br#""name":"#);
    write_json(&mut canonical, name);
    canonical.extend_from_slice(b"}]");
    canonical.push(0);
    canonical.extend_from_slice(shape.version.as_bytes());
    canonical.push(u8::from(shape.task));
    Sha256::digest(canonical).into()
}

/// Writes `value` as compact JSON with every object's members sorted by name (byte order),
/// strings escaped as serde_json escapes them, and integral floats up to 2^53 written as
/// integers, so equal values are written alike whatever their spelling. It serves the same
/// purpose as RFC 8785 (which `perimeter::signature` uses, as clients must reproduce it) at
/// a fraction of its cost: this form is only ever compared with itself.
fn write_canonical(out: &mut Vec<u8>, value: &Value) {
    /// Floats in ±2^53 with no fraction are written as the integers they equal.
    const EXACT_INTEGERS: f64 = 9_007_199_254_740_992.0;
    match value {
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(out, item);
            }
            out.push(b']');
        }
        Value::Object(members) => {
            let mut sorted: Vec<_> = members.iter().collect();
            sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (name, member)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(out, name);
                out.push(b':');
                write_canonical(out, member);
            }
            out.push(b'}');
        }
        Value::Number(number) => match number.as_f64() {
            Some(x) if number.is_f64() && x.fract() == 0.0 && x.abs() <= EXACT_INTEGERS => {
                write_json(out, &(x as i64))
            }
            _ => write_json(out, number),
        },
        Value::Null | Value::Bool(_) | Value::String(_) => write_json(out, value),
    }
}

/// A string, number, boolean or null as serde_json writes it (writing into a `Vec` cannot
/// fail, and these always serialize).
fn write_json(out: &mut Vec<u8>, value: &(impl serde::Serialize + ?Sized)) {
    let _ = serde_json::to_writer(out, value);
}

/// The first request of a key runs `work`; the others get its response (see the module docs).
async fn run(
    cluster: Arc<Cluster>,
    keyed: Idempotency,
    id: RequestId,
    ctx: RequestContext,
    work: Work,
) -> Result<String, Error> {
    let settings = &cluster.settings;
    let window = Duration::from_millis(settings.dedup.window_ms);
    // A running entry outlives any run (no request runs past the hard cap), so a node that
    // dies mid-request holds its keys no longer than that.
    let running_for = Duration::from_millis(settings.limits.max_request_timeout_ms).max(window);
    // A result this node kept while Redis was away answers first (and goes to Redis), so a
    // call that ran during an outage does not run again once Redis is back; so does the
    // word that its result was not kept (review 57 #3).
    match cluster
        .store
        .recover_done(&cluster.metrics, &keyed.key)
        .await
    {
        Some(Claim::Done {
            fingerprint,
            result,
        }) if fingerprint == keyed.fingerprint => {
            cluster.metrics.dedup_hits.inc();
            return Ok(encode_result(&id, &result));
        }
        Some(Claim::Unkept { fingerprint }) if fingerprint == keyed.fingerprint => {
            return Err(Error::ResultNotKept);
        }
        Some(Claim::Done { .. } | Claim::Unkept { .. }) => return Err(key_conflict(&cluster)),
        Some(Claim::Running { .. }) | None => {}
    }
    let mut poll = FIRST_POLL;
    loop {
        // A run of this key going on here is joined before any claim: the store may have
        // lost its claim (Redis restarted empty), and claiming again would run it twice.
        if let Some((fingerprint, mut done)) = cluster.store.watch_here(&keyed.key) {
            if fingerprint != keyed.fingerprint {
                return Err(key_conflict(&cluster));
            }
            let _ = tokio::time::timeout(LOCAL_WAIT, done.changed()).await;
            continue;
        }
        // Redis came back empty a moment ago, and the nodes are writing again the claims of
        // the calls they run: a key found free now may be one of them, not yet written back
        // (its node's first write may meet a shard still settling). Refused, retryable,
        // until they are back, as when Redis cannot be asked (attack run 52a, C4: a retry
        // elsewhere in that moment ran the call a second time).
        if let (true, Some(left)) = (
            cluster.store.refuses_without_redis(),
            cluster.rewrite_left(),
        ) {
            return Err(refuse(&cluster, &id, Unreachable { retry_after: left }));
        }
        let owner = cluster.store.new_owner();
        let running = Claim::Running {
            fingerprint: keyed.fingerprint,
            owner,
        };
        // Live from before the claim is sent, so that a duplicate on this node never takes
        // it for one left over.
        let live = LiveOwner::hold(&cluster, owner);
        // Until the store answers, a drop of this run (a 2026-07-28 client closing its
        // stream, a cancel) would leave a claim that landed with no lease to release it.
        let asking = Asking {
            cluster: cluster.clone(),
            key: keyed.key,
            running: Some(running.clone()),
        };
        // Claimed only under the epoch this node's beat knows: a key found free under
        // another may be one whose claim Redis lost a moment ago, before the wait above
        // begins (stop 55's note: a retry elsewhere ran the call a second time). Refused,
        // retryable, as within that wait.
        let claimed = cluster
            .store
            .claim(
                &cluster.metrics,
                &keyed.key,
                running,
                running_for,
                cluster.epoch_for_claims(),
            )
            .await;
        asking.answered();
        let (found, backend) = match claimed {
            Ok(claimed) => claimed,
            Err(unreachable) => return Err(refuse(&cluster, &id, unreachable)),
        };
        match found {
            None => {
                cluster.metrics.idempotent_runs.inc();
                // With Redis, its claim is Redis's to hold for every node, also when it runs
                // in memory because Redis could not be asked (`on_store_error = "local"`):
                // then it is written there once Redis answers (attack run 51, N2).
                let in_redis = cluster
                    .store
                    .redis()
                    .is_some()
                    .then_some((owner, running_for));
                let lease = Lease::new(
                    cluster.clone(),
                    (keyed.key, keyed.fingerprint),
                    live,
                    backend,
                    in_redis,
                );
                // An answer over the message limit is settled as not kept here, and made
                // -32603 where it leaves the session (`bound_answer`), as every answer is.
                let outcome = work.start(id.clone(), ctx).await;
                lease.settle(&outcome, &id, window, &keyed.identity).await;
                return outcome;
            }
            Some(Claim::Done {
                fingerprint,
                result,
            }) if fingerprint == keyed.fingerprint => {
                if backend == Backend::Redis
                    && task_ended_with_its_node(&cluster, &result, &keyed.identity).await
                {
                    // Freed (if it still holds this answer), so this retry runs the call
                    // again; answered with it if Redis does not take the release.
                    let stale = Claim::Done {
                        fingerprint,
                        result: result.clone(),
                    };
                    if let Some(redis) = cluster.store.redis() {
                        if redis
                            .release(&cluster.metrics, &keyed.key, stale.encode())
                            .await
                        {
                            cluster.metrics.dedup_orphans.inc();
                            tracing::info!(id = %id, "a keyed call's task ended with its node (lost, or shut down); its retry runs it again");
                            continue;
                        }
                    }
                }
                cluster.metrics.dedup_hits.inc();
                tracing::debug!(id = %id, "answered from the de-duplication store");
                return Ok(encode_result(&id, &result));
            }
            Some(Claim::Unkept { fingerprint }) if fingerprint == keyed.fingerprint => {
                tracing::debug!(id = %id, "a keyed call ran, and its result was not kept");
                return Err(Error::ResultNotKept);
            }
            Some(Claim::Running {
                fingerprint,
                owner: runner,
            }) if fingerprint == keyed.fingerprint => {
                // Join the run: wait until it is settled, then look again (its response, or
                // a free key if it ended without one).
                match cluster.store.watch_here(&keyed.key) {
                    Some((_, mut done)) => {
                        let _ = tokio::time::timeout(LOCAL_WAIT, done.changed()).await;
                    }
                    None if backend == Backend::Redis && runner_died(&cluster, runner).await => {
                        // Its node died mid-run (or, this node's, its run ended and its
                        // release was lost): its answer is lost for good, and its entry
                        // would hold the key until it expires. Freed, so this retry runs.
                        if let Some(redis) = cluster.store.redis() {
                            let stale = Claim::Running {
                                fingerprint,
                                owner: runner,
                            };
                            redis
                                .release(&cluster.metrics, &keyed.key, stale.encode())
                                .await;
                        }
                        cluster.metrics.dedup_orphans.inc();
                        tracing::info!(id = %id, "a keyed call's run is gone (its node died, or its release was lost); its retry runs it again");
                    }
                    None => {
                        tokio::time::sleep(poll).await;
                        poll = (poll * 2).min(LONGEST_POLL);
                    }
                }
            }
            Some(_) => {
                return Err(key_conflict(&cluster));
            }
        }
    }
}

/// Longer than any task's handle (`CreateTaskResult`: its id, status, times and status
/// message).
const TASK_HANDLE_MAX_BYTES: usize = 16 * 1024;

/// Whether `result`, a keyed call's kept answer, is the handle of a task (`resultType`
/// `task`) that ended with its node, unfinished: failed -32031 `nodeLost` (its node died,
/// and another showed it failed) or -32004 (its node shut down first). The retry that error
/// asks for is to run the call again, as that of a keyed call whose node died mid-run does
/// ([`runner_died`]). (Attack run 58, F6: the key answered every retry with the failed task
/// for the whole de-duplication window.) A task that cannot be read says no.
async fn task_ended_with_its_node(cluster: &Cluster, result: &str, identity: &str) -> bool {
    use crate::protocol::mcp::codes;
    // A task's handle is a few hundred bytes: a long result is none, and is not parsed.
    if result.len() > TASK_HANDLE_MAX_BYTES {
        return false;
    }
    let Ok(handle) = serde_json::from_str::<serde_json::Value>(result) else {
        return false;
    };
    let Some(task_id) = handle["taskId"]
        .as_str()
        .filter(|_| handle["resultType"] == "task")
    else {
        return false;
    };
    let Ok(task) = crate::cluster::tasks::load_shown(cluster, task_id, identity, &|_| Ok(())).await
    else {
        return false;
    };
    let code = task.error.as_ref().and_then(|error| error["code"].as_i64());
    task.status == crate::cluster::tasks::TaskStatus::Failed
        && code.is_some_and(|code| {
            code == i64::from(codes::ANSWER_LOST.0) || code == i64::from(codes::SHUTTING_DOWN.0)
        })
}

/// Whether the run that claimed `runner` is known gone: its node is dead to this one
/// ([`Cluster::found_dead`]); or it is this node's, and no run here holds it (it ended,
/// and Redis was not told). Not known (Redis away) counts as alive.
async fn runner_died(cluster: &Cluster, runner: ClaimId) -> bool {
    // This node's by its whole id (the 20-bit number two nodes may share).
    if (runner >> 64) as u64 == cluster.store.node() {
        return !cluster.store.is_live_owner(runner);
    }
    cluster
        .found_dead(crate::cluster::Cluster::number_of(runner))
        .await
}

/// The answer to a keyed call while Redis cannot be reached (`cluster.on_store_error =
/// "refuse"`): counted, logged (a warning at most once per second, the others at debug), and
/// retryable.
fn refuse(cluster: &Cluster, id: &RequestId, unreachable: Unreachable) -> Error {
    static LAST_WARNING: AtomicU64 = AtomicU64::new(0);
    cluster.metrics.rejections.store_unavailable.inc();
    let retry_after_ms = u64::try_from(unreachable.retry_after.as_millis()).unwrap_or(u64::MAX);
    if crate::first_this_second(&LAST_WARNING) {
        tracing::warn!(
            id = %id,
            retry_after_ms,
            "refused a tool call with an idempotency key: the idempotency store (Redis) cannot be reached"
        );
    } else {
        tracing::debug!(id = %id, retry_after_ms, "refused a tool call with an idempotency key: Redis unreachable");
    }
    Error::StoreUnavailable { retry_after_ms }
}

/// A claim held by the run of a key: settled with its response, or released when the run
/// ends without one (an error, or dropped: cancelled, timed out, disconnected).
struct Lease {
    cluster: Arc<Cluster>,
    key: Key,
    fingerprint: RequestDigest,
    /// Its claim's owner, live until the lease is dropped (after its release is sent).
    live: LiveOwner,
    backend: Backend,
    /// Wakes the duplicates waiting on this node when dropped.
    here: watch::Sender<()>,
    settled: bool,
}

impl Lease {
    /// The lease of a run of `key` (with the fingerprint of what it asks), whose claim in
    /// `backend` `live` holds; `in_redis`, with Redis, its owner and how long it holds
    /// (written again if Redis loses it, or written once Redis answers if `backend` is the
    /// memory's).
    fn new(
        cluster: Arc<Cluster>,
        (key, fingerprint): (Key, RequestDigest),
        live: LiveOwner,
        backend: Backend,
        in_redis: Option<(ClaimId, Duration)>,
    ) -> Self {
        let here = cluster
            .store
            .run_here(&key, fingerprint, in_redis, backend == Backend::Redis);
        Self {
            cluster,
            key,
            fingerprint,
            live,
            backend,
            here,
            settled: false,
        }
    }

    async fn settle(
        mut self,
        outcome: &Result<String, Error>,
        id: &RequestId,
        window: Duration,
        identity: &str,
    ) {
        let Some(result) = outcome.as_ref().ok().and_then(|frame| result_of(frame, id)) else {
            return; // dropped: released
        };
        // A result over the message limit is never sent (the caller answers -32603): kept,
        // each retry would get it again to no use; released, a retry would run the call a
        // second time. It ran: the marker says so.
        let sendable = outcome
            .as_ref()
            .is_ok_and(|frame| frame.len() <= self.cluster.settings.limits.max_message_bytes);
        // The share is asked before the result is copied: a result not kept is not copied.
        let kept = sendable
            && (self.backend != Backend::Redis
                || self
                    .cluster
                    .store
                    .takes_redis_share(identity, Claim::done_len(result.len())));
        let done = if kept {
            Claim::Done {
                fingerprint: self.fingerprint,
                result: Arc::from(result),
            }
        } else {
            // Not kept: a retry is told it ran (the marker is small, and not counted), so
            // that nothing runs twice for lack of room.
            self.cluster.metrics.dedup_unkept.inc();
            Claim::Unkept {
                fingerprint: self.fingerprint,
            }
        };
        self.cluster
            .store
            .complete(
                &self.cluster.metrics,
                &self.key,
                self.live.owner,
                done,
                window,
                self.backend,
            )
            .await;
        self.settled = true;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.cluster.store.done_here(&self.key, &self.here);
        if self.settled {
            return;
        }
        let running = Claim::Running {
            fingerprint: self.fingerprint,
            owner: self.live.owner,
        };
        match self.backend {
            Backend::Memory => {
                self.cluster
                    .store
                    .release_in_memory(&self.key, self.live.owner);
                // Run here while Redis did not answer its claim (`on_store_error =
                // "local"`): a claim that landed there after all holds the key for this run
                // on the other nodes, and is let go with it (by value).
                if self.cluster.store.redis().is_some() {
                    release_in_redis(&self.cluster, self.key, running);
                }
            }
            Backend::Redis => release_in_redis(&self.cluster, self.key, running),
        }
    }
}

/// A claim's owner registered as one of this node's live runs
/// ([`Store::hold_owner`](crate::cluster::store::Store::hold_owner)) until dropped.
struct LiveOwner {
    cluster: Arc<Cluster>,
    owner: ClaimId,
}

impl LiveOwner {
    fn hold(cluster: &Arc<Cluster>, owner: ClaimId) -> Self {
        cluster.store.hold_owner(owner);
        Self {
            cluster: cluster.clone(),
            owner,
        }
    }
}

impl Drop for LiveOwner {
    fn drop(&mut self) {
        self.cluster.store.forget_owner(self.owner);
    }
}

/// A claim asked of the store, not answered yet ([`run`]): dropped unanswered, the claim is
/// released in Redis, where it may land after the drop (the command is on its way). Released
/// by value: a claim that did not land, or an entry of another run, is left alone. (The
/// memory store answers without waiting: no claim of it is ever left unanswered.)
struct Asking {
    cluster: Arc<Cluster>,
    key: Key,
    /// The claim, until answered.
    running: Option<Claim>,
}

impl Asking {
    /// The store answered: the run's lease (if it claimed the key) takes over.
    fn answered(mut self) {
        self.running = None;
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            release_in_redis(&self.cluster, self.key, running);
        }
    }
}

/// Deletes `running` under `key` in Redis if it is still there, on a task of its own:
/// dropping cannot wait for Redis (without a runtime, the entry expires by itself). A
/// shutdown waits for it ([`LastWrite`]): a run cancelled at the grace's end is released
/// before the node stops.
fn release_in_redis(cluster: &Arc<Cluster>, key: Key, running: Claim) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let counted = LastWrite::begin(cluster);
        let cluster = cluster.clone();
        runtime.spawn(async move {
            cluster
                .store
                .release_in_redis(&cluster.metrics, &key, running)
                .await;
            drop(counted);
        });
    }
}

/// A keyed call whose key came with other params: counted, and -32019 `idempotencyKey`.
fn key_conflict(cluster: &Cluster) -> Error {
    cluster.metrics.dedup_conflicts.inc();
    Error::IdempotencyConflict {
        scope: crate::protocol::mcp::ConflictScope::IdempotencyKey,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).expect("json")
    }

    fn keyed(subject: &str, key: &str, arguments: &str) -> Idempotency {
        keyed_in(1, subject, key, arguments)
    }

    /// A 2025-11-25 session's answer.
    const SHAPE: AnswerShape<'static> = AnswerShape {
        version: "2025-11-25",
        task: false,
    };

    /// Key `"k"` of an anonymous client's `echo` without arguments, in session 1.
    fn anonymous_echo(round: [Option<&str>; 2], shape: AnswerShape<'_>) -> Idempotency {
        Idempotency::of_tool_call(
            &Identity::anonymous(),
            AnonymousScope::Local(1),
            &raw(r#""k""#),
            "echo",
            None,
            round,
            shape,
        )
        .expect("a valid key")
    }

    fn keyed_in(session: u64, subject: &str, key: &str, arguments: &str) -> Idempotency {
        let session = AnonymousScope::Local(session);
        let identity = if subject == "anonymous" {
            Identity::anonymous()
        } else {
            Identity::proven(crate::context::Proof::ApiKey, subject, Vec::new())
        };
        Idempotency::of_tool_call(
            &identity,
            session,
            &raw(key),
            "echo",
            Some(&raw(arguments)),
            [None, None],
            SHAPE,
        )
        .expect("a valid key")
    }

    #[test]
    fn keys_are_scoped_to_the_identity() {
        let a = keyed("anonymous", r#""k""#, "{}");
        assert_eq!(
            a.key,
            keyed("anonymous", r#""\u006b""#, "{}").key,
            "same string"
        );
        assert_ne!(a.key, keyed("alice", r#""k""#, "{}").key);
        assert_ne!(a.key, keyed("anonymous", r#""k2""#, "{}").key);
        assert_ne!(
            a.key,
            keyed_in(2, "anonymous", r#""k""#, "{}").key,
            "an anonymous client's keys are its session's"
        );
        let alice = keyed_in(1, "alice", r#""k""#, "{}").key;
        assert_eq!(alice, keyed_in(2, "alice", r#""k""#, "{}").key);
        let jwt_alice = Idempotency::of_tool_call(
            &Identity::proven(crate::context::Proof::Jwt, "alice", Vec::new()),
            AnonymousScope::Local(1),
            &raw(r#""k""#),
            "echo",
            Some(&raw("{}")),
            [None, None],
            SHAPE,
        )
        .expect("a valid key");
        assert_ne!(alice, jwt_alice.key, "a JWT's alice is not the key alice");
    }

    #[test]
    fn an_anonymous_key_of_a_shared_session_is_the_same_on_every_node() {
        let in_session = |scope: AnonymousScope<'_>| {
            Idempotency::of_tool_call(
                &Identity::anonymous(),
                scope,
                &raw(r#""k""#),
                "echo",
                None,
                [None, None],
                SHAPE,
            )
            .expect("a valid key")
            .key
        };
        // Another node computes it from the same id (nothing of this process goes in).
        let shared = in_session(AnonymousScope::Shared("abc"));
        assert_eq!(shared, in_session(AnonymousScope::Shared("abc")));
        assert_ne!(shared, in_session(AnonymousScope::Shared("abd")));
        assert_ne!(shared, in_session(AnonymousScope::Local(1)));
    }

    #[test]
    fn each_round_of_a_multi_round_trip_call_is_keyed_apart() {
        let round = |state: Option<&str>, responses: Option<&str>| {
            anonymous_echo([state, responses], SHAPE).key
        };
        let first = round(None, None);
        assert_eq!(first, round(None, None));
        assert_ne!(first, round(Some("s1"), Some(r#"{"a":{}}"#)));
        assert_ne!(round(Some("s1"), None), round(None, Some("s1")));
        assert_ne!(round(Some(""), None), first);
    }

    #[test]
    fn fingerprints_ignore_spelling_but_not_content() {
        let a = keyed(
            "anonymous",
            r#""k""#,
            r#"{"a":1,"b":"x","c":[{"z":0,"y":1.5}]}"#,
        );
        let b = keyed(
            "anonymous",
            r#""k""#,
            r#"{ "c" : [ { "y":15e-1, "z":0.0 } ], "b" : "\u0078", "\u0061":1.0 }"#,
        );
        assert_eq!(a.fingerprint, b.fingerprint);
        for other in [
            r#"{"a":2,"b":"x","c":[{"z":0,"y":1.5}]}"#,
            r#"{"a":"1","b":"x","c":[{"z":0,"y":1.5}]}"#,
            r#"{"a":1,"b":"x","c":[{"y":1.5,"z":0}],"d":null}"#,
            r#"{"a":1,"b":"x","c":[{"z":0,"y":1.5},{}]}"#,
            r#"{"a":1,"b":"x","c":{"z":0,"y":1.5}}"#,
            r#"{"a":1,"b":"x","c":[{"z":0,"y":1.25}]}"#,
        ] {
            assert_ne!(
                a.fingerprint,
                keyed("anonymous", r#""k""#, other).fingerprint,
                "{other}"
            );
        }
        let no_arguments = anonymous_echo([None, None], SHAPE);
        assert_ne!(
            no_arguments.fingerprint,
            keyed("anonymous", r#""k""#, "{}").fingerprint
        );
        // The same call answered in another shape: another fingerprint.
        let shaped =
            |version, task| anonymous_echo([None, None], AnswerShape { version, task }).fingerprint;
        assert_eq!(no_arguments.fingerprint, shaped("2025-11-25", false));
        assert_ne!(no_arguments.fingerprint, shaped("2024-11-05", false));
        assert_ne!(shaped("2026-07-28", false), shaped("2026-07-28", true));
    }

    #[test]
    fn bad_keys_are_invalid_params() {
        for key in ["1", r#""""#, "null", &format!("\"{}\"", "x".repeat(256))] {
            let refused = Idempotency::of_tool_call(
                &Identity::anonymous(),
                AnonymousScope::Local(1),
                &raw(key),
                "echo",
                None,
                [None, None],
                SHAPE,
            );
            assert!(matches!(refused, Err(Error::InvalidParams(_))), "{key}");
        }
    }
}
